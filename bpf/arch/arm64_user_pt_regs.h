/* Cross-compiling the BPF programs for arm64 on an x86-64 build machine: its vmlinux.h (from its own BTF) lacks
 * arm64's `struct user_pt_regs`, which bpf_tracing.h's PT_REGS_* macros read a uprobe's context as. This is the
 * uapi layout (arch/arm64/include/uapi/asm/ptrace.h), a stable ABI, so direct context reads are right on arm64;
 * every other kernel type is relocated by CO-RE against the target kernel's BTF at load time. Not used when
 * vmlinux.h comes from an arm64 kernel (it has the type). */
#pragma once
struct user_pt_regs {
  __u64 regs[31];
  __u64 sp;
  __u64 pc;
  __u64 pstate;
};
