#include "analyze/detectors/gmm_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace stackscope::analyze::kernels {

namespace {

using Kernel = void (*)(const double*, Eigen::Index, Eigen::Index, Eigen::Index, Eigen::Index, const double*,
                        const double*, double*);

void generic_kernel(const double* x, Eigen::Index ld, Eigen::Index begin, Eigen::Index rows, Eigen::Index d,
                    const double* p, const double* shifted, double* out) {
  // Four rows at a time keeps four independent accumulators for the compiler to vectorise.
  Eigen::Index r = 0;
  for (; r + 4 <= rows; r += 4) {
    double acc[4] = {0, 0, 0, 0};
    for (Eigen::Index j = 0; j < d; ++j) {
      double y[4] = {-shifted[j], -shifted[j], -shifted[j], -shifted[j]};
      for (Eigen::Index i = 0; i <= j; ++i) {
        const double pij = p[j * d + i];
        const double* xi = x + i * ld + begin + r;
        for (int l = 0; l < 4; ++l) y[l] += xi[l] * pij;
      }
      for (int l = 0; l < 4; ++l) acc[l] += y[l] * y[l];
    }
    for (int l = 0; l < 4; ++l) out[r + l] = acc[l];
  }
  for (; r < rows; ++r) {
    double acc = 0;
    for (Eigen::Index j = 0; j < d; ++j) {
      double y = -shifted[j];
      for (Eigen::Index i = 0; i <= j; ++i) y += x[i * ld + begin + r] * p[j * d + i];
      acc += y * y;
    }
    out[r] = acc;
  }
}

void generic_diagonal(const double* x, Eigen::Index ld, Eigen::Index begin, Eigen::Index rows, Eigen::Index d,
                      const double* p, const double* shifted, double* out) {
  for (Eigen::Index r = 0; r < rows; ++r) out[r] = 0;
  for (Eigen::Index j = 0; j < d; ++j) {
    const double pjj = p[j], s = shifted[j];
    const double* xj = x + j * ld + begin;
    for (Eigen::Index r = 0; r < rows; ++r) {
      const double y = xj[r] * pjj - s;
      out[r] += y * y;
    }
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void avx2_diagonal(const double* x, Eigen::Index ld, Eigen::Index begin,
                                                        Eigen::Index rows, Eigen::Index d, const double* p,
                                                        const double* shifted, double* out) {
  Eigen::Index r = 0;
  for (; r + 8 <= rows; r += 8) {
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    for (Eigen::Index j = 0; j < d; ++j) {
      const __m256d pjj = _mm256_set1_pd(p[j]), s = _mm256_set1_pd(shifted[j]);
      const double* xj = x + j * ld + begin + r;
      const __m256d y0 = _mm256_fmsub_pd(_mm256_loadu_pd(xj), pjj, s);
      const __m256d y1 = _mm256_fmsub_pd(_mm256_loadu_pd(xj + 4), pjj, s);
      acc0 = _mm256_fmadd_pd(y0, y0, acc0);
      acc1 = _mm256_fmadd_pd(y1, y1, acc1);
    }
    _mm256_storeu_pd(out + r, acc0);
    _mm256_storeu_pd(out + r + 4, acc1);
  }
  if (r < rows) generic_diagonal(x, ld, begin + r, rows - r, d, p, shifted, out + r);
}

__attribute__((target("avx2,fma"))) void avx2_kernel(const double* x, Eigen::Index ld, Eigen::Index begin,
                                                      Eigen::Index rows, Eigen::Index d, const double* p,
                                                      const double* shifted, double* out) {
  Eigen::Index r = 0;
  // Eight rows per step: two vectors share each broadcast of P(i, j).
  for (; r + 8 <= rows; r += 8) {
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    const double* base = x + begin + r;
    for (Eigen::Index j = 0; j < d; ++j) {
      const __m256d s = _mm256_set1_pd(-shifted[j]);
      __m256d y0 = s, y1 = s;
      const double* pj = p + j * d;
      for (Eigen::Index i = 0; i <= j; ++i) {
        const __m256d pij = _mm256_broadcast_sd(pj + i);
        const double* xi = base + i * ld;
        y0 = _mm256_fmadd_pd(_mm256_loadu_pd(xi), pij, y0);
        y1 = _mm256_fmadd_pd(_mm256_loadu_pd(xi + 4), pij, y1);
      }
      acc0 = _mm256_fmadd_pd(y0, y0, acc0);
      acc1 = _mm256_fmadd_pd(y1, y1, acc1);
    }
    _mm256_storeu_pd(out + r, acc0);
    _mm256_storeu_pd(out + r + 4, acc1);
  }
  if (r < rows) generic_kernel(x, ld, begin + r, rows - r, d, p, shifted, out + r);
}
#endif

Kernel pick() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return avx2_kernel;
#endif
  return generic_kernel;
}

Kernel active() {
  static const Kernel k = pick();
  return k;
}

Kernel active_diagonal() {
#if defined(__x86_64__)
  static const Kernel k = active() == avx2_kernel ? avx2_diagonal : generic_diagonal;
  return k;
#else
  return generic_diagonal;
#endif
}

}  // namespace

void squared_mahalanobis_upper(const double* x, Eigen::Index ld, Eigen::Index begin, Eigen::Index rows, Eigen::Index d,
                               const double* p, const double* shifted, double* out) {
  active()(x, ld, begin, rows, d, p, shifted, out);
}

void squared_mahalanobis_diagonal(const double* x, Eigen::Index ld, Eigen::Index begin, Eigen::Index rows,
                                  Eigen::Index d, const double* p, const double* shifted, double* out) {
  active_diagonal()(x, ld, begin, rows, d, p, shifted, out);
}

const char* active_kernel() { return active() == generic_kernel ? "generic" : "avx2+fma"; }

}  // namespace stackscope::analyze::kernels
