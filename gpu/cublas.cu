// gpu/cublas.cuh: cuBLAS opened with dlopen, one handle for the process.
#include "gpu/cublas.cuh"
#include "gpu/device.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace qkvlab::gpu::detail {

namespace {

template <class F>
void load_symbol(void* library, const char* name, F& function) {
  function = reinterpret_cast<F>(dlsym(library, name));
  if (!function) throw std::runtime_error(std::string("cuBLAS: symbol ") + name + " not found");
}

Cublas load() {
  if (!device_status().available) throw std::runtime_error(device_status().description);
  void* so = dlopen(QKVLAB_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!so) so = dlopen(QKVLAB_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (!so) throw std::runtime_error(std::string("cannot load cuBLAS: ") + dlerror());
  Cublas c{};
  // cublas_v2.h maps cublasCreate, cublasSgemm and cublasDgemm to *_v2.
  load_symbol(so, "cublasCreate_v2", c.create);
  load_symbol(so, "cublasSetMathMode", c.set_math_mode);
  load_symbol(so, "cublasGetStatusName", c.status_name);
  load_symbol(so, "cublasSgemm_v2", c.sgemm);
  load_symbol(so, "cublasDgemm_v2", c.dgemm);
  load_symbol(so, "cublasSgemmStridedBatched", c.sgemm_strided_batched);
  load_symbol(so, "cublasDgemmStridedBatched", c.dgemm_strided_batched);
  load_symbol(so, "cublasGemmEx", c.gemm_ex);
  load_symbol(so, "cublasGemmStridedBatchedEx", c.gemm_strided_batched_ex);
  if (cublasStatus_t s = c.create(&c.handle); s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error: ") + c.status_name(s) + " (cublasCreate)");
  if (cublasStatus_t s = c.set_math_mode(c.handle, CUBLAS_DEFAULT_MATH); s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error: ") + c.status_name(s) + " (cublasSetMathMode)");
  return c;  // the library stays open and the handle alive until the process ends
}

}  // namespace

const Cublas& cublas_library() {
  static const Cublas library = load();  // thread-safe initialization; retried after a throw
  return library;
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuBLAS error: ") + cublas_library().status_name(status) + " (" + call +
                             " at " + file + ":" + std::to_string(line) + ")");
}

cublasStatus_t gemm_call(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                         const float* A, int lda, long long sa, const float* B, int ldb, long long sb,
                         const float* beta, float* C, int ldc, long long sc, int batch) {
  const Cublas& c = cublas_library();
  if (batch == 1) return c.sgemm(c.handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  return c.sgemm_strided_batched(c.handle, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

cublasStatus_t gemm_call(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* alpha,
                         const double* A, int lda, long long sa, const double* B, int ldb, long long sb,
                         const double* beta, double* C, int ldc, long long sc, int batch) {
  const Cublas& c = cublas_library();
  if (batch == 1) return c.dgemm(c.handle, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
  return c.dgemm_strided_batched(c.handle, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}

cublasStatus_t gemm_call_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                              const std::uint16_t* A, int lda, long long sa, const std::uint16_t* B, int ldb,
                              long long sb, const float* beta, float* C, int ldc, long long sc, int batch) {
  const Cublas& c = cublas_library();
  if (batch == 1)
    return c.gemm_ex(c.handle, ta, tb, m, n, k, alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb, beta, C, CUDA_R_32F,
                     ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return c.gemm_strided_batched_ex(c.handle, ta, tb, m, n, k, alpha, A, CUDA_R_16BF, lda, sa, B, CUDA_R_16BF, ldb, sb,
                                   beta, C, CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

}  // namespace qkvlab::gpu::detail
