// cuBLAS, opened with dlopen on first use (CUDA-only; included by gpu/*.cu).
//
// Not linked: linking cuBLAS costs every process that contains qkvlab_gpu
// (the qkvlab program included) about 0.2 s and 220 MB at start-up, for its
// 360,000 relocations, whether or not a GPU is ever used. One handle serves
// the process, with TF32 off (CUBLAS_DEFAULT_MATH), so float products round
// as float. cuBLAS gives bit-identical results from run to run on the same
// GPU model and toolkit when, as here, every call goes to one stream.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

namespace qkvlab::gpu::detail {

struct Cublas {
  decltype(&cublasCreate) create;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasGetStatusName) status_name;
  decltype(&cublasSgemm) sgemm;
  decltype(&cublasDgemm) dgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched;
  decltype(&cublasDgemmStridedBatched) dgemm_strided_batched;
  // cublasGemmEx and cublasGemmStridedBatchedEx (named types: the header overloads them in C++).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  cublasHandle_t handle = nullptr;
};

// The library and the process's handle; throws std::runtime_error without a
// device (device_status().description) or when cuBLAS cannot be loaded.
const Cublas& cublas_library();

// Throws std::runtime_error naming cuBLAS's status, the call, file and line.
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

// Column-major C_b = α op(A_b) op(B_b) + β C_b for b < batch (one plain gemm when batch = 1).
cublasStatus_t gemm_call(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                         const float* A, int lda, long long sa, const float* B, int ldb, long long sb,
                         const float* beta, float* C, int ldc, long long sc, int batch);
cublasStatus_t gemm_call(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double* alpha,
                         const double* A, int lda, long long sa, const double* B, int ldb, long long sb,
                         const double* beta, double* C, int ldc, long long sc, int batch);

// The same with A and B in bf16 (16-bit patterns, engine/weight_type.hpp's narrow_bf16), C in
// float32 and float32 sums (CUBLAS_COMPUTE_32F): Backend::gemm at product type bf16.
cublasStatus_t gemm_call_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* alpha,
                              const std::uint16_t* A, int lda, long long sa, const std::uint16_t* B, int ldb,
                              long long sb, const float* beta, float* C, int ldc, long long sc, int batch);

}  // namespace qkvlab::gpu::detail

#define QKVLAB_CUBLAS_CHECK(call) ::qkvlab::gpu::detail::check_cublas((call), #call, __FILE__, __LINE__)
