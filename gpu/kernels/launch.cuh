// Launch shapes shared by the CUDA backend's kernels (CUDA-only).
//   elementwise kernels: blocks of kThreads threads, a grid-stride loop over
//     the entries (at most kMaxBlocks blocks; any grid gives the same result);
//   row kernels (norms, softmax, cross-entropy): one block per row, of
//     row_threads(length) threads, a function of the row's length only, so a
//     row's reduction tree, and its result, depend on the shape alone.
#pragma once

#include <algorithm>
#include <cstddef>

namespace qkvlab::gpu::kernels {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 8192;

inline int blocks_for(std::size_t count) {
  return int(std::max<std::size_t>(1, std::min<std::size_t>((count + kThreads - 1) / kThreads, kMaxBlocks)));
}

// The power of two ≥ length, from 32 to 256 (block_sum's limit).
inline int row_threads(int length) {
  int threads = 32;
  while (threads < length && threads < 256) threads *= 2;
  return threads;
}

}  // namespace qkvlab::gpu::kernels

#define QKVLAB_GRID_STRIDE(i, count)                                                            \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < std::size_t(count); \
       i += std::size_t(gridDim.x) * blockDim.x)
