// The CUDA backend's reductions (CUDA-only). None uses atomics: each sum is
// split into pieces fixed by the shape alone, summed in double, and the pieces
// are added in a fixed order, so a result is the same at every run.
//   dot:          Σ x_i y_i — dot_blocks(count) blocks of kThreads threads, each
//                 a grid-stride sum and a block tree (block_sum.cuh); the host
//                 adds the block sums in block order.
//   column sums:  out_k[c] += Σ_r f_k(r, c) for K functions f_k — rows cut into
//                 chunks of kChunkRows; a block of 32 columns × 8 row lanes sums
//                 one chunk (lanes added in lane order), writing one partial per
//                 (chunk, k, column) to scratch; a second kernel adds the
//                 chunks in order and rounds once to float.
//   block_max:    the maximum over a block (every thread gets it).
#pragma once

#include <cstddef>

#include "gpu/block_sum.cuh"
#include "gpu/kernels/launch.cuh"

namespace qkvlab::gpu::kernels {

constexpr int kDotBlocks = 256;     // at most; the partial buffer's size
constexpr int kChunkRows = 256;     // rows of one column-sum chunk
constexpr int kColumnLanes = 8;     // row lanes of a column-sum block (× 32 columns)

// Blocks of a dot product over `count` entries: about 4096 entries a block, at most kDotBlocks.
inline int dot_blocks(std::size_t count) {
  return int(std::max<std::size_t>(1, std::min<std::size_t>((count + 4095) / 4096, kDotBlocks)));
}

inline int column_chunks(int rows) { return (rows + kChunkRows - 1) / kChunkRows; }

template <int MaxThreads = 256>
__device__ float block_max(float value) {
  __shared__ float shared[MaxThreads];
  shared[threadIdx.x] = value;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) {
      const float other = shared[threadIdx.x + s];
      shared[threadIdx.x] = other > shared[threadIdx.x] ? other : shared[threadIdx.x];
    }
    __syncthreads();
  }
  const float result = shared[0];
  __syncthreads();  // the next call's writes must not overtake this read
  return result;
}

__global__ void dot_kernel(std::size_t count, const float* X, const float* Y, double* partial) {
  double acc[1] = {0};
  QKVLAB_GRID_STRIDE(i, count) acc[0] += double(X[i]) * double(Y[i]);
  detail::block_sum<1, kThreads>(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc[0];
}

// Block (32, kColumnLanes), grid (ceil(cols/32), chunks): partial[(chunk·K + k)·cols + c].
template <int K, class F>
__global__ void column_partials_kernel(int rows, int cols, F f, double* partial) {
  __shared__ double lanes[K][kColumnLanes][32];
  const int c = blockIdx.x * 32 + threadIdx.x, chunk = blockIdx.y;
  const int r0 = chunk * kChunkRows, r1 = min(rows, r0 + kChunkRows);
  double acc[K] = {};
  if (c < cols)
    for (int r = r0 + int(threadIdx.y); r < r1; r += kColumnLanes) f(r, c, acc);
  for (int k = 0; k < K; ++k) lanes[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols)
    for (int k = 0; k < K; ++k) {
      double sum = 0;
      for (int lane = 0; lane < kColumnLanes; ++lane) sum += lanes[k][lane][threadIdx.x];
      partial[(std::size_t(chunk) * K + k) * cols + c] = sum;
    }
}

// out_k[c] += Σ_chunks partial (chunks in order), for each k whose out_k is given.
template <int K>
__global__ void column_finish_kernel(int chunks, int cols, const double* partial, float* out0, float* out1) {
  QKVLAB_GRID_STRIDE(c, cols) {
    float* out[2] = {out0, out1};
    for (int k = 0; k < K; ++k) {
      if (!out[k]) continue;
      double sum = 0;
      for (int chunk = 0; chunk < chunks; ++chunk) sum += partial[(std::size_t(chunk) * K + k) * cols + c];
      out[k][c] += float(sum);
    }
  }
}

// f for bias_backward: Σ_r dY[r, c].
struct BiasColumns {
  const float* dY;
  int ld;
  __device__ void operator()(int r, int c, double (&acc)[1]) const { acc[0] += double(dY[std::size_t(r) * ld + c]); }
};

// f for norm_backward: Σ_r dout ⊙ n (dgain) and Σ_r dout (dbias), n = (x − μ) r as the CPU rounds it.
struct NormColumns {
  const float *X, *mean, *rstd, *dout;
  int C;
  __device__ void operator()(int r, int c, double (&acc)[2]) const {
    const std::size_t i = std::size_t(r) * C + c;
    const float n = (X[i] - mean[r]) * rstd[r];
    acc[0] += double(dout[i] * n);
    acc[1] += double(dout[i]);
  }
};

}  // namespace qkvlab::gpu::kernels
