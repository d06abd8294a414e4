// A fake cuBLAS for the CUDA CPU emulation: the functions of cublas_v2.h as
// naive column-major loops, summing in double (cublasGemmEx's bf16 operands
// widened exactly, as a tensor core's products are exact). Built as libfake_cublas.so;
// build.sh points ops.cu's QKVLAB_CUBLAS_LIBRARY at it.
//
// Arguments are checked as cuBLAS checks them (CUBLAS_STATUS_INVALID_VALUE
// for a negative size or a leading dimension too small), and, because device
// memory is host memory here, every element is read where cuBLAS would read it.
#include "cublas_v2.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

// A bf16 element as stored: the upper 16 bits of a float32.
struct Bf16 {
  std::uint16_t bits;
};
double value(float x) { return x; }
double value(double x) { return x; }
double value(Bf16 x) {
  const std::uint32_t bits = std::uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// C_b = alpha op(A_b) op(B_b) + beta C_b for b < batch, where A_b = A + b strideA
// (and so on) and op(A) is m×k: A is m×k (lda ≥ m) for OP_N, k×m (lda ≥ k) for
// OP_T and OP_C (the same for real numbers). With beta = 0, C is not read
// (cuBLAS's rule: C may hold NaN then).
template <class In, class T>
cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const T* alpha, const In* A, int lda, long long sa, const In* B, int ldb, long long sb,
                    const T* beta, T* C, int ldc, long long sc, int batch) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool a_n = ta == CUBLAS_OP_N, b_n = tb == CUBLAS_OP_N;
  if (!valid_op(ta) || !valid_op(tb) || m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, a_n ? m : k) || ldb < std::max(1, b_n ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const T a = *alpha, c = *beta;
  for (int b = 0; b < batch; ++b) {
    const In* Ab = A + b * sa;
    const In* Bb = B + b * sb;
    T* Cb = C + b * sc;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double sum = 0;
        if (a != T(0))  // alpha = 0: A and B are not read
          for (int l = 0; l < k; ++l) {
            const In x = a_n ? Ab[i + std::ptrdiff_t(l) * lda] : Ab[l + std::ptrdiff_t(i) * lda];  // op(A)(i, l)
            const In y = b_n ? Bb[l + std::ptrdiff_t(j) * ldb] : Bb[j + std::ptrdiff_t(l) * ldb];  // op(B)(l, j)
            sum += value(x) * value(y);
          }
        T& out = Cb[i + std::ptrdiff_t(j) * ldc];
        out = c == T(0) ? T(a * T(sum)) : T(a * T(sum) + c * out);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}

// cublasGemmEx's cases here: A and B both float32 or both bf16, C float32, float32 compute
// (what gpu/cublas.cu asks for); any other combination is CUBLAS_STATUS_NOT_SUPPORTED.
cublasStatus_t gemm_ex(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void* alpha, const void* A, cudaDataType at, int lda, long long sa, const void* B,
                       cudaDataType bt, int ldb, long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                       long long sc, int batch, cublasComputeType_t compute) {
  if (at != bt || (at != CUDA_R_32F && at != CUDA_R_16BF) || ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const auto* a = static_cast<const float*>(alpha);
  const auto* b = static_cast<const float*>(beta);
  auto* c = static_cast<float*>(C);
  if (at == CUDA_R_16BF)
    return gemm(handle, ta, tb, m, n, k, a, static_cast<const Bf16*>(A), lda, sa, static_cast<const Bf16*>(B), ldb,
                sb, b, c, ldc, sc, batch);
  return gemm(handle, ta, tb, m, n, k, a, static_cast<const float*>(A), lda, sa, static_cast<const float*>(B), ldb,
              sb, b, c, ldc, sc, batch);
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

// The math mode is recorded; every mode computes the same exact-as-possible sums here.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

namespace {

struct StatusText {
  cublasStatus_t status;
  const char* name;
  const char* text;
};

constexpr StatusText status_texts[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "an absent device architectural feature is required"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "error detected trying to check the license"},
};

const StatusText* find_status(cublasStatus_t status) {
  for (const StatusText& s : status_texts)
    if (s.status == status) return &s;
  return nullptr;
}

}  // namespace

extern "C" {

const char* cublasGetStatusName(cublasStatus_t status) {
  const StatusText* s = find_status(status);
  return s ? s->name : "<unknown>";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  const StatusText* s = find_status(status);
  return s ? s->text : "unknown error";
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const double* alpha, const double* A, int lda, const double* B, int ldb,
                              const double* beta, double* C, int ldc) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float* alpha, const float* A, int lda,
                                         long long int strideA, const float* B, int ldb, long long int strideB,
                                         const float* beta, float* C, int ldc, long long int strideC,
                                         int batchCount) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
              batchCount);
}

cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const double* alpha, const double* A, int lda,
                                         long long int strideA, const double* B, int ldb, long long int strideB,
                                         const double* beta, double* C, int ldc, long long int strideC,
                                         int batchCount) {
  return gemm(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
              batchCount);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc, 0,
                 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
                 Ctype, ldc, strideC, batchCount, computeType);
}

}  // extern "C"
