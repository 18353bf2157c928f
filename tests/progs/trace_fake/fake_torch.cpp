// A fake libtorch_cpu.so: 200 operator entry points named like PyTorch's (at::_ops::opNN::call), so the tracer's
// torch layer attaches 200 probes to it: attach/detach time and the cost budget are tested without PyTorch.
#include "fake_torch.h"

namespace at::_ops {
#define FAKE_OP(n)                                              \
  struct op##n {                                                \
    static long call(long x);                                   \
  };                                                            \
  __attribute__((noinline)) long op##n::call(long x) {          \
    asm volatile("" ::: "memory");                              \
    return x + n;                                               \
  }
#define FAKE_OPS10(p) \
  FAKE_OP(p##0) FAKE_OP(p##1) FAKE_OP(p##2) FAKE_OP(p##3) FAKE_OP(p##4) \
  FAKE_OP(p##5) FAKE_OP(p##6) FAKE_OP(p##7) FAKE_OP(p##8) FAKE_OP(p##9)
FAKE_OPS10(1) FAKE_OPS10(2) FAKE_OPS10(3) FAKE_OPS10(4) FAKE_OPS10(5) FAKE_OPS10(6) FAKE_OPS10(7)
FAKE_OPS10(8) FAKE_OPS10(9) FAKE_OPS10(10) FAKE_OPS10(11) FAKE_OPS10(12) FAKE_OPS10(13) FAKE_OPS10(14)
FAKE_OPS10(15) FAKE_OPS10(16) FAKE_OPS10(17) FAKE_OPS10(18) FAKE_OPS10(19) FAKE_OPS10(20)
}  // namespace at::_ops

extern "C" long fake_torch_op10(long x) { return at::_ops::op10::call(x); }
extern "C" long fake_torch_op11(long x) { return at::_ops::op11::call(x); }
