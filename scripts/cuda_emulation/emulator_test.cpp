// Tests of the emulator itself (cuda_runtime.cpp): __syncthreads synchronizes a block's threads,
// threads that return leave the barrier, each thread keeps its threadIdx across barriers, shared
// memory is poisoned before every block, and, the control, a reduction with a barrier missing
// gives wrong sums. Built and run only under the emulation (build.sh --test; ctest's
// cuda_emulation.gpu_tests): the kernels here are launched through cuda_emu::launch, not <<< >>>.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_runtime.h"

namespace {

constexpr unsigned kThreads = 256;

// The tree sum of a block's values 1 ... n, with or without the barrier after each level.
template <bool Barrier>
__global__ void block_sum(std::int64_t* sums) {
  __shared__ std::int64_t shared[kThreads];
  cuda_emu::note_shared(shared);
  shared[threadIdx.x] = threadIdx.x + 1;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    if (Barrier) __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = shared[0];
}

template <bool Barrier>
std::vector<std::int64_t> sums_of(unsigned blocks) {
  std::vector<std::int64_t> sums(blocks, -1);
  cuda_emu::launch(cuda_emu::config(blocks, kThreads), "block_sum", nullptr, block_sum<Barrier>, sums.data());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return sums;
}

TEST(CudaEmulation, BarriersMakeTheTreeSumExactInEveryBlock) {
  for (std::int64_t sum : sums_of<true>(64)) EXPECT_EQ(sum, std::int64_t(kThreads) * (kThreads + 1) / 2);
}

// Control: without the barrier inside the loop, a thread reads a partner's slot before or after
// the partner has added to it, depending on the order of the phase, so sums go wrong.
TEST(CudaEmulation, AMissingBarrierGivesWrongSums) {
  int wrong = 0;
  for (std::int64_t sum : sums_of<false>(64)) wrong += sum != std::int64_t(kThreads) * (kThreads + 1) / 2;
  EXPECT_GE(wrong, 32) << "a reduction without its barriers passed in most blocks: the emulator hides races";
}

// Threads past `live` return at once; the rest meet at three barriers and count each other.
__global__ void early_exit(unsigned live, unsigned* seen, unsigned* index_kept) {
  __shared__ unsigned arrived[kThreads];
  cuda_emu::note_shared(arrived);
  const uint3 mine = threadIdx;
  if (threadIdx.x >= live) return;
  for (int round = 0; round < 3; ++round) {
    arrived[threadIdx.x] = round;
    __syncthreads();
    unsigned count = 0;
    for (unsigned t = 0; t < live; ++t) count += arrived[t] == unsigned(round);
    seen[threadIdx.x] += count;
    __syncthreads();
  }
  index_kept[threadIdx.x] = mine.x == threadIdx.x && mine.y == threadIdx.y && mine.z == threadIdx.z;
}

TEST(CudaEmulation, ReturnedThreadsLeaveTheBarrierAndTheRestKeepTheirIndex) {
  const unsigned live = 100;
  std::vector<unsigned> seen(kThreads, 0), kept(kThreads, 0);
  cuda_emu::launch(cuda_emu::config(2, kThreads), "early_exit", nullptr, early_exit, live, seen.data(), kept.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (unsigned t = 0; t < live; ++t) {
    EXPECT_EQ(seen[t], 2 * 3 * live) << "thread " << t;  // two blocks, three rounds, every live thread
    EXPECT_EQ(kept[t], 1u) << "thread " << t;
  }
  for (unsigned t = live; t < kThreads; ++t) EXPECT_EQ(seen[t], 0u);
}

// Shared memory holds 0xFF bytes (NaN) at the start of every block, not the last block's values.
__global__ void read_before_write(double* first, double* written) {
  __shared__ double shared[kThreads];
  cuda_emu::note_shared(shared);
  first[blockIdx.x * blockDim.x + threadIdx.x] = shared[threadIdx.x];
  __syncthreads();
  shared[threadIdx.x] = 1.0;
  __syncthreads();
  written[blockIdx.x * blockDim.x + threadIdx.x] = shared[threadIdx.x];
}

TEST(CudaEmulation, SharedMemoryIsPoisonedBeforeEveryBlock) {
  std::vector<double> first(2 * kThreads, 0.0), written(2 * kThreads, 0.0);
  cuda_emu::launch(cuda_emu::config(2, kThreads), "read_before_write", nullptr, read_before_write, first.data(),
                   written.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (unsigned i = 0; i < 2 * kThreads; ++i) {
    EXPECT_TRUE(std::isnan(first[i])) << i;
    EXPECT_EQ(written[i], 1.0) << i;  // control: what the block wrote is read back
  }
}

}  // namespace
