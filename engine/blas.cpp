// Float and double products through OpenBLAS (when QKVLAB_ENGINE_BLAS) or Eigen; see blas.hpp.
#include "engine/blas.hpp"

#include <algorithm>
#include <type_traits>

#include <Eigen/Eigenvalues>

#if QKVLAB_ENGINE_BLAS
#include <cblas.h>

extern "C" void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w,
                        double* work, const int* lwork, int* iwork, const int* liwork, int* info, std::size_t,
                        std::size_t);
#endif

namespace qkvlab::engine {

#if QKVLAB_ENGINE_BLAS
bool blas_enabled() { return true; }
int blas_threads() { return openblas_get_num_threads(); }
void set_blas_threads(int n) { openblas_set_num_threads(std::max(1, n)); }
#else
bool blas_enabled() { return false; }
int blas_threads() { return 1; }
void set_blas_threads(int) {}
#endif

namespace {

template <class S>
void serial_gemm(Trans ta, Trans tb, int m, int n, int k, S alpha, const S* A, int lda, const S* B, int ldb, S beta,
                 S* C, int ldc) {
  if (m <= 0 || n <= 0) return;
#if QKVLAB_ENGINE_BLAS
  const auto a = ta == Trans::none ? CblasNoTrans : CblasTrans;
  const auto b = tb == Trans::none ? CblasNoTrans : CblasTrans;
  if constexpr (std::is_same_v<S, float>)
    cblas_sgemm(CblasRowMajor, a, b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, a, b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  // Row-major X (r×c, ld) is the column-major Xᵀ: C = op(A) op(B) is Cᵀ = op(B)ᵀ op(A)ᵀ.
  using Stride = Eigen::OuterStride<>;
  using CMap = Eigen::Map<const Mat<S>, 0, Stride>;
  const CMap At(A, ta == Trans::none ? k : m, ta == Trans::none ? m : k, Stride(lda));
  const CMap Bt(B, tb == Trans::none ? n : k, tb == Trans::none ? k : n, Stride(ldb));
  Eigen::Map<Mat<S>, 0, Stride> Ct(C, n, m, Stride(ldc));
  Mat<S> prod(n, m);
  if (ta == Trans::none && tb == Trans::none) prod.noalias() = Bt * At;
  else if (ta == Trans::none) prod.noalias() = Bt.transpose() * At;
  else if (tb == Trans::none) prod.noalias() = Bt * At.transpose();
  else prod.noalias() = Bt.transpose() * At.transpose();
  if (beta == S(0)) Ct = alpha * prod;
  else Ct = alpha * prod + beta * Ct;
#endif
}

}  // namespace

bool symmetric_eigenvalues(Mat<double>& A, std::vector<double>& w) {
  const int n = int(A.rows());
  w.assign(std::size_t(n), 0.0);
  if (n == 0) return true;
#if QKVLAB_ENGINE_BLAS
  int info = 0, lwork = -1, liwork = -1, iwork_size = 0;
  double work_size = 0;
  const int lda = int(A.outerStride());
  dsyevd_("N", "L", &n, A.data(), &lda, w.data(), &work_size, &lwork, &iwork_size, &liwork, &info, 1, 1);
  if (info != 0) return false;
  lwork = std::max(int(work_size), 2 * n + 1), liwork = std::max(iwork_size, 1);
  std::vector<double> work(static_cast<std::size_t>(lwork));
  std::vector<int> iwork(static_cast<std::size_t>(liwork));
  dsyevd_("N", "L", &n, A.data(), &lda, w.data(), work.data(), &lwork, iwork.data(), &liwork, &info, 1, 1);
  return info == 0;
#else
  Eigen::SelfAdjointEigenSolver<Mat<double>> solver(A, Eigen::EigenvaluesOnly);
  if (solver.info() != Eigen::Success) return false;
  w.assign(solver.eigenvalues().data(), solver.eigenvalues().data() + n);
  return true;
#endif
}

void gemm_serial(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) {
  serial_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm_serial(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* A, int lda, const double* B,
                 int ldb, double beta, double* C, int ldc) {
  serial_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

namespace detail {
namespace {

template <class S>
void blas_gemm(const Mat<S>& A, Op op_a, const Mat<S>& B, Op op_b, bool accumulate, Mat<S>& C) {
  const Eigen::Index m = op_a == Op::none ? A.rows() : A.cols();
  const Eigen::Index k = op_a == Op::none ? A.cols() : A.rows();
  const Eigen::Index n = op_b == Op::none ? B.cols() : B.rows();
#if QKVLAB_ENGINE_BLAS
  if (m > 0 && n > 0 && k > 0) {
    if (!accumulate) C.resize(m, n);
    const auto ta = op_a == Op::none ? CblasNoTrans : CblasTrans;
    const auto tb = op_b == Op::none ? CblasNoTrans : CblasTrans;
    const int lda = int(A.rows()), ldb = int(B.rows()), ldc = int(m);
    const S beta = accumulate ? S(1) : S(0);
    if constexpr (std::is_same_v<S, float>)
      cblas_sgemm(CblasColMajor, ta, tb, int(m), int(n), int(k), 1.0f, A.data(), lda, B.data(), ldb, beta, C.data(),
                  ldc);
    else
      cblas_dgemm(CblasColMajor, ta, tb, int(m), int(n), int(k), 1.0, A.data(), lda, B.data(), ldb, beta, C.data(),
                  ldc);
    return;
  }
#endif
  (void)m, (void)k, (void)n;
  gemm<S>(A, op_a, B, op_b, accumulate, C);
}

}  // namespace

void gemm(const Mat<float>& A, Op op_a, const Mat<float>& B, Op op_b, bool accumulate, Mat<float>& C) {
  blas_gemm(A, op_a, B, op_b, accumulate, C);
}
void gemm(const Mat<double>& A, Op op_a, const Mat<double>& B, Op op_b, bool accumulate, Mat<double>& C) {
  blas_gemm(A, op_a, B, op_b, accumulate, C);
}

}  // namespace detail
}  // namespace qkvlab::engine
