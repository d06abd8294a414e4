// The engine's dense products, C = op(A) op(B) and C += op(A) op(B), op ∈ {·, ·ᵀ},
// on Mat<S> (column-major, the engine's row-vector convention: rows are samples).
//
// Float and double products go to OpenBLAS (cblas_sgemm / cblas_dgemm, on
// blas_threads() threads) where qkvlab_engine was built with it (blas.cpp,
// compiled with QKVLAB_ENGINE_BLAS when CMake finds OpenBLAS); other scalars,
// and builds without OpenBLAS, use Eigen's own kernels. On the 2-core
// development machine OpenBLAS is 1.5-2.6x faster per core than Eigen's
// kernels for the products of training (docs/benchmarks.md). OpenBLAS splits a product over the rows and
// columns of C, never over the inner dimension, so every entry is summed in
// the same order on any number of threads: results do not depend on
// blas_threads() (tests/transfer_test.cpp checks it).
//
// Only the engine's operations call these; EIGEN_USE_BLAS is not defined
// anywhere, so core/ and theory/ keep Eigen's single-threaded products.
#pragma once

#include <vector>

#include "core/types.hpp"
#include "engine/kernel_types.hpp"

namespace qkvlab::engine {

using qkvlab::Mat;

using Op = Trans;

// True when float and double products go to OpenBLAS.
bool blas_enabled();
// Threads OpenBLAS uses (1 without OpenBLAS).
int blas_threads();
// Sets OpenBLAS's thread count for the whole process (n ≥ 1; no-op without OpenBLAS).
void set_blas_threads(int n);

// C = α op(A) op(B) + β C on raw row-major arrays (op(A) m×k, op(B) k×n,
// leading dimensions lda, ldb, ldc), on the calling thread only: OpenBLAS's
// own threads are not used (the CPU backend calls this from its pool, one
// fixed tile of C per job). β = 0 ignores C's old contents.
void gemm_serial(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc);
void gemm_serial(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* A, int lda, const double* B,
                 int ldb, double beta, double* C, int ldc);

// The eigenvalues, ascending, of the symmetric n×n matrix A (its lower triangle is read and
// overwritten) into w: LAPACK's dsyevd, eigenvalues only, where OpenBLAS (which carries LAPACK) is
// built in, on the calling thread's BLAS; Eigen's SelfAdjointEigenSolver otherwise. False when the
// solver reports that it did not converge.
bool symmetric_eigenvalues(Mat<double>& A, std::vector<double>& w);

namespace detail {

// C = op(A) op(B) (accumulate false: C is resized) or C += op(A) op(B).
template <class S>
void gemm(const Mat<S>& A, Op op_a, const Mat<S>& B, Op op_b, bool accumulate, Mat<S>& C) {
  const bool ta = op_a == Op::transpose, tb = op_b == Op::transpose;
  if (!accumulate) {
    if (ta && tb) C.noalias() = A.transpose() * B.transpose();
    else if (ta) C.noalias() = A.transpose() * B;
    else if (tb) C.noalias() = A * B.transpose();
    else C.noalias() = A * B;
  } else {
    if (ta && tb) C.noalias() += A.transpose() * B.transpose();
    else if (ta) C.noalias() += A.transpose() * B;
    else if (tb) C.noalias() += A * B.transpose();
    else C.noalias() += A * B;
  }
}

// The float and double overloads (blas.cpp): OpenBLAS when built with it.
void gemm(const Mat<float>& A, Op op_a, const Mat<float>& B, Op op_b, bool accumulate, Mat<float>& C);
void gemm(const Mat<double>& A, Op op_a, const Mat<double>& B, Op op_b, bool accumulate, Mat<double>& C);

}  // namespace detail

// op(A) op(B) as a new matrix.
template <class S>
Mat<S> product(const Mat<S>& A, Op op_a, const Mat<S>& B, Op op_b) {
  Mat<S> C;
  detail::gemm(A, op_a, B, op_b, false, C);
  return C;
}

// C += op(A) op(B); C must already have the product's shape.
template <class S>
void add_product(Mat<S>& C, const Mat<S>& A, Op op_a, const Mat<S>& B, Op op_b) {
  detail::gemm(A, op_a, B, op_b, true, C);
}

}  // namespace qkvlab::engine
