// Tests of the emulator itself (cuda_runtime.cpp, convert_cu.py): __syncthreads synchronizes a
// block's threads, threads that return leave the barrier, each thread keeps its threadIdx across
// barriers, threads waiting at different __syncthreads() calls are a launch error, every form of
// __shared__ declaration is poisoned before every block and counted against the 48 KiB limit (or
// refused by the converter), and, the control, a reduction with a barrier missing gives wrong
// sums. Built and run only under the emulation (build.sh --test; ctest's cuda_emulation.gpu_tests),
// which converts this file as it does gpu/*.cu: the kernels are written as CUDA code.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "cuda_runtime.h"

namespace {

constexpr unsigned kThreads = 256;

// The tree sum of a block's values 1 ... n, with or without the barrier after each level.
template <bool Barrier>
__global__ void block_sum(std::int64_t* sums) {
  __shared__ std::int64_t shared[kThreads];
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
  block_sum<Barrier><<<blocks, kThreads>>>(sums.data());
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
  early_exit<<<2, kThreads>>>(live, seen.data(), kept.data());
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
  first[blockIdx.x * blockDim.x + threadIdx.x] = shared[threadIdx.x];
  __syncthreads();
  shared[threadIdx.x] = 1.0;
  __syncthreads();
  written[blockIdx.x * blockDim.x + threadIdx.x] = shared[threadIdx.x];
}

TEST(CudaEmulation, SharedMemoryIsPoisonedBeforeEveryBlock) {
  std::vector<double> first(2 * kThreads, 0.0), written(2 * kThreads, 0.0);
  read_before_write<<<2, kThreads>>>(first.data(), written.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (unsigned i = 0; i < 2 * kThreads; ++i) {
    EXPECT_TRUE(std::isnan(first[i])) << i;
    EXPECT_EQ(written[i], 1.0) << i;  // control: what the block wrote is read back
  }
}

// ---- Divergent barriers --------------------------------------------------------------------------
// The lower and upper halves of a block wait at different __syncthreads() calls (undefined on a GPU:
// a hang or wrong results; compute-sanitizer's synccheck reports it).
__global__ void divergent(float* out) {
  __shared__ float s[32];
  s[threadIdx.x] = float(threadIdx.x);
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x + 16];
  } else {
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x - 16];
  }
}

// Controls: the barrier a branch takes depends on the block only; the first thread alone meets a
// last barrier after the others have returned, which leaves it to that one (Volta and later).
__global__ void uniform(float* out) {
  __shared__ float s[32];
  s[threadIdx.x] = float(threadIdx.x);
  if (blockIdx.x % 2 == 0) {
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s[31 - threadIdx.x];
  } else {
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
  }
  if (threadIdx.x != 0) return;
  __syncthreads();
}

TEST(CudaEmulation, ThreadsWaitingAtDifferentBarriersAreALaunchError) {
  std::vector<float> out(64, 0.0f);
  testing::internal::CaptureStderr();
  divergent<<<2, 32>>>(out.data());
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_NE(said.find("kernel divergent<<<"), std::string::npos) << said;
  EXPECT_NE(said.find("different __syncthreads() calls"), std::string::npos) << said;
  EXPECT_NE(said.find("(16 threads, the first 0)"), std::string::npos) << said;
  EXPECT_NE(said.find("(16 threads, the first 16)"), std::string::npos) << said;

  testing::internal::CaptureStderr();
  uniform<<<2, 32>>>(out.data());
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (unsigned t = 0; t < 32; ++t) {
    EXPECT_EQ(out[t], float(31 - t));
    EXPECT_EQ(out[32 + t], float(t));
  }
}

// ---- Every form of __shared__ declaration (convert_cu.py) -------------------------------------------
// Two declarators in one declaration: b is poisoned before every block as a lone array is.
__global__ void two_declarators(float* first) {
  __shared__ float a[32], b[32];
  a[threadIdx.x] = 1.0f;
  first[blockIdx.x * 32 + threadIdx.x] = b[threadIdx.x];
  __syncthreads();
  b[threadIdx.x] = a[threadIdx.x];
}

// A declaration inside a one-line kernel, and a scalar: both poisoned.
__global__ void one_line(float* f) { __shared__ float s[32]; f[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x]; s[threadIdx.x] = 2; }
__global__ void scalar(float* first) {
  __shared__ float total;
  first[blockIdx.x * 32 + threadIdx.x] = total;
  __syncthreads();
  total = 3.0f;
}

// 64 KiB of static shared memory in two declarators is refused as in one; 32 KiB in one passes.
__global__ void two_large(float* out) {
  __shared__ float a[8192], b[8192];
  a[threadIdx.x] = b[threadIdx.x] = 0.0f;
  out[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}
__global__ void one_large(float* out) {
  __shared__ float a[16384];
  a[threadIdx.x] = 0.0f;
  out[threadIdx.x] = a[threadIdx.x];
}
__global__ void one_medium(float* out) {
  __shared__ float a[8192];
  a[threadIdx.x] = 0.0f;
  out[threadIdx.x] = a[threadIdx.x];
}

TEST(CudaEmulation, EveryFormOfSharedDeclarationIsPoisonedBeforeEveryBlock) {
  std::vector<float> first(64, 0.0f);
  two_declarators<<<2, 32>>>(first.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (unsigned i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(first[i])) << "two declarators, " << i;
  one_line<<<2, 32>>>(first.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (unsigned i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(first[i])) << "one line, " << i;
  scalar<<<2, 32>>>(first.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (unsigned i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(first[i])) << "scalar, " << i;
}

TEST(CudaEmulation, StaticSharedMemoryOver48KiBIsRefusedInAnyForm) {
  std::vector<float> out(32, 0.0f);
  testing::internal::CaptureStderr();
  two_large<<<1, 32>>>(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  one_large<<<1, 32>>>(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchOutOfResources);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("kernel two_large<<<(1, 1, 1), (32, 1, 1), 0>>>: 65536 bytes of static __shared__"),
            std::string::npos) << said;
  one_medium<<<1, 32>>>(out.data());  // control: 32 KiB
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// What the converter cannot rewrite faithfully it refuses, naming file:line, rather than leave a
// plain static (neither poisoned nor counted).
int convert(const std::string& source, std::string& said, std::string& converted) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("emulator_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "k.cu") << source;
  const std::string command = "python3 " QKVLAB_SOURCE_DIR "/scripts/cuda_emulation/convert_cu.py " +
                              (dir / "k.cu").string() + " " + (dir / "k.cpp").string() + " 2> " +
                              (dir / "err").string();
  const int status = std::system(command.c_str());
  auto read = [](const std::filesystem::path& path) {
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  };
  said = read(dir / "err");
  converted = std::filesystem::exists(dir / "k.cpp") ? read(dir / "k.cpp") : "";
  std::filesystem::remove_all(dir);
  return status;
}

TEST(CudaEmulation, TheConverterRefusesWhatItCannotConvertNamingTheLine) {
  std::string said, converted;
  const std::string kernel = "__global__ void k(float* out) {\n  out[0] = g[0];\n}\n";
  EXPECT_NE(convert("// a namespace-scope variable\n__shared__ float g[4];\n" + kernel, said, converted), 0);
  EXPECT_NE(said.find("k.cu:2: a __shared__ variable outside a function"), std::string::npos) << said;
  EXPECT_EQ(converted, "");
  EXPECT_NE(convert("__global__ void k(float* out) {\n  __shared__ float g = 0;\n}\n", said, converted), 0);
  EXPECT_NE(said.find("k.cu:2: a __shared__ declaration with an initializer"), std::string::npos) << said;
  EXPECT_NE(convert("#define SHARED __shared__ float g[4]\n" + kernel, said, converted), 0);
  EXPECT_NE(said.find("k.cu:1: a __shared__ that does not begin a declaration"), std::string::npos) << said;
  // Control: inside the kernel, the same declaration converts.
  EXPECT_EQ(convert("__global__ void k(float* out) {\n  __shared__ float g[4];\n  out[0] = g[0];\n}\n", said,
                    converted), 0) << said;
  EXPECT_NE(converted.find("static float g[4]; ::cuda_emu::note_shared(g);"), std::string::npos) << converted;
}

}  // namespace
