// The hot loop of Gaussian-mixture scoring and of the E-step: squared Mahalanobis distances of a block of rows
// to one component, through its upper-triangular precision Cholesky factor P (y = x P - mu^T P, ||y||^2).
// An AVX2+FMA version is chosen at run time where the CPU has it (the binary itself stays baseline x86-64);
// it vectorises across rows, which a column-major matrix stores contiguously.
#pragma once
#include <Eigen/Core>

namespace stackscope::analyze::kernels {

// out[r] = || x.row(begin + r) * P - shifted ||^2 for r in [0, rows). x: column-major N x d with leading
// dimension ld; p: d x d column-major, upper-triangular (the strictly lower part is ignored); shifted: d values.
void squared_mahalanobis_upper(const double* x, Eigen::Index ld, Eigen::Index begin, Eigen::Index rows, Eigen::Index d,
                               const double* p, const double* shifted, double* out);

// Same for a diagonal P given as its d diagonal values p[j] (no d x d matrix): d multiply-adds per row instead of
// d(d+1)/2.
void squared_mahalanobis_diagonal(const double* x, Eigen::Index ld, Eigen::Index begin, Eigen::Index rows,
                                  Eigen::Index d, const double* p, const double* shifted, double* out);

// "avx2+fma" or "generic": what squared_mahalanobis_upper runs on this CPU.
const char* active_kernel();

}  // namespace stackscope::analyze::kernels
