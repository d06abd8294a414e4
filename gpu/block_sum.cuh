// block_sum: K doubles summed over the threads of one block, every thread
// getting the totals. CUDA-only (included by gpu/*.cu).
//
// blockDim.x must be a power of two, at most MaxThreads. Every thread of the
// block must call it (it synchronizes), and a kernel may call it more than
// once: the final barrier keeps the next call's writes from overtaking a
// slower thread's read of these totals.
#pragma once

namespace qkvlab::gpu::detail {

template <int K, int MaxThreads = 256>
__device__ void block_sum(double (&acc)[K]) {
  __shared__ double shared[K][MaxThreads];
  for (int k = 0; k < K; ++k) shared[k][threadIdx.x] = acc[k];
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      for (int k = 0; k < K; ++k) shared[k][threadIdx.x] += shared[k][threadIdx.x + s];
    __syncthreads();
  }
  for (int k = 0; k < K; ++k) acc[k] = shared[k][0];
  __syncthreads();
}

}  // namespace qkvlab::gpu::detail
