#!/usr/bin/env bash
# which layer combination loses CUDA entry/return pairing on the GPU machine
S=$(pwd)/.carry/stackscope; export PYTHONUNBUFFERED=1
mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
ops=mm,addmm,bmm,matmul,linear,gelu,layer_norm,native_layer_norm,add_Tensor,embedding,_scaled_dot_product_*attention,nll_loss_forward,gelu_backward,native_layer_norm_backward,_fused_adamw_
run() { name=$1; shift
  timeout 100 $S record -q "$@" -o /tmp/d_$name.sdb -- python3 bench/overhead/gpt2_overhead.py --worker --steps 40 >/dev/null 2>&1
  echo "== $name: $*"; $S info /tmp/d_$name.sdb 2>&1 | grep -E "^  (events|    cuda|    torch|    python)|unmatched|without|folded|dropped"; }
run cuda --layers cuda
run cuda_torch --layers cuda,torch --torch-ops "$ops"
run cuda_stack --layers cuda,python --python-mode stack
run cuda_torch_stack --layers cuda,torch,python --python-mode stack --torch-ops "$ops"
run cuda_torch_capi --layers cuda,torch,python --python-mode capi --torch-ops "$ops"
