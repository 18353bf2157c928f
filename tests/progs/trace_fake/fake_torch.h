// The fake libtorch_cpu.so's entry points for its callers (tests/progs/trace_fake/fake_ops.cpp).
#pragma once
extern "C" {
long fake_torch_op10(long x);  // at::_ops::op10::call
long fake_torch_op11(long x);  // at::_ops::op11::call
}
