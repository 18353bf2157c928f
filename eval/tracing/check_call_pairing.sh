#!/usr/bin/env bash
# GPU machine, about 1-2 minutes: do CUDA entry/return pairs survive the layer combinations that lost half of them
# (cuda,torch,python stack; and the python C-API probes)? Each run's end notes say where unpaired calls came from:
#   "not reported: the kernel gave them no return probe"  the kernel's limit of 64 pending return probes per thread
#   "whose return never came ... dropped"                  an entry no return closed (longjmp/exception, attach race)
#   "return(s) without a matching entry"                   a call that began before its entry probe was attached
#   "runs the kernel skipped"                              BPF recursion guard misses
#   "probe program runs"                                   entry vs return program runs (bpf_stats_enabled here)
# plus the kernel log's "omit uretprobe due to nestedness limit" lines during each run (rate-limited: 10 per 5 s).
# Before the fix (diag_cuda_pairing.sh): cuda only 32,281 events, 20,632 folded; cuda,torch,stack 34,378 events,
# 3,361 folded, 9,278 unmatched; cuda,torch,capi 19,668 events, no cuda note at all.
# Usage (device machine, repo root, stripped binary in .carry/): bash eval/tracing/check_call_pairing.sh
S=$(pwd)/.carry/stackscope; export PYTHONUNBUFFERED=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
sysctl -qw kernel.bpf_stats_enabled=1 2>/dev/null || true
ops=mm,addmm,bmm,matmul,linear,gelu,layer_norm,native_layer_norm,add_Tensor,embedding,_scaled_dot_product_*attention,nll_loss_forward,gelu_backward,native_layer_norm_backward,_fused_adamw_
run() { name=$1; shift
  before=$(dmesg 2>/dev/null | grep -c "nestedness limit")
  timeout 100 $S record -q "$@" -o /tmp/c_$name.sdb -- python3 bench/overhead/gpt2_overhead.py --worker --steps 40 >/dev/null 2>&1
  echo "== $name: $*  (kernel 'omit uretprobe' lines: $(( $(dmesg 2>/dev/null | grep -c "nestedness limit") - before )))"
  $S info /tmp/c_$name.sdb 2>&1 | grep -E "^  events|^    (cuda|torch|python) |note      trace: (cuda|torch|python|BPF|probe)"; }
run cuda_torch_stack --layers cuda,torch,python --python-mode stack --torch-ops "$ops"
run cuda_torch_capi --layers cuda,torch,python --python-mode capi --torch-ops "$ops"
sysctl -qw kernel.bpf_stats_enabled=0 2>/dev/null || true
