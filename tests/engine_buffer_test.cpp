// The CPU backend's buffers (engine/cpu_backend.cpp): every buffer starts at zero; one of 1 MiB or
// more comes from mmap, so its pages take memory only once written (a model that is only evaluated
// never writes its gradients). Small buffers come from the heap, zeroed by hand. And the backend a
// command makes (engine/make_backend.hpp) in a program without gpu/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <stdexcept>
#include <string>

#include "engine/buffer.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/make_backend.hpp"

namespace {

using namespace qkvlab;

// This process's resident memory in KiB (/proc/self/status, VmRSS).
long resident_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

TEST(EngineBuffer, BuffersStartAtZeroWhateverTheirSizeAndHistory) {
  engine::CpuBackend<float> backend(1);
  for (std::size_t count : {std::size_t(100), std::size_t(1) << 20}) {  // 400 B (heap), 4 MiB (mmap)
    for (int round = 0; round < 2; ++round) {  // the second round reuses what the first released
      engine::Buffer<float> b(backend, count);
      EXPECT_TRUE(std::all_of(b.data(), b.data() + count, [](float x) { return x == 0.0f; })) << count;
      std::fill(b.data(), b.data() + count, 3.0f);
      // Control: the check above sees a non-zero entry.
      EXPECT_FALSE(std::all_of(b.data(), b.data() + count, [](float x) { return x == 0.0f; }));
    }
  }
}

TEST(EngineBuffer, ALargeBufferIsResidentOnlyWhereWritten) {
  engine::CpuBackend<float> backend(1);
  const std::size_t count = std::size_t(64) << 20;  // 256 MiB
  const long before = resident_kib();
  engine::Buffer<float> b(backend, count);
  const long allocated = resident_kib();
  std::fill(b.data(), b.data() + count / 2, 1.0f);  // half of it written
  const long written = resident_kib();
  EXPECT_LT(allocated - before, 16 * 1024) << "allocating 256 MiB made " << allocated - before << " KiB resident";
  // Control: the measure sees memory that is written (128 MiB).
  EXPECT_GT(written - allocated, 120 * 1024) << written - allocated;
}

// A program that links no gpu/ (this test) has no CUDA source registered: --device cuda is refused
// with one line saying so, and cpu is the CPU backend. (gpu_agreement_test's
// GpuDevice.RegisteredWithTheEngine shows that a program with gpu/ gets gpu/'s status instead.)
TEST(BackendFactory, WithoutGpuCudaIsRefused) {
  EXPECT_FALSE(engine::cuda_available());
  EXPECT_EQ(engine::cuda_description(), "this program was built without gpu/");
  try {
    engine::make_backend(engine::Device::cuda, 1);
    FAIL() << "a CUDA backend without gpu/";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "no CUDA device can be used (this program was built without gpu/)");
  }
  EXPECT_EQ(engine::make_backend(engine::Device::cpu, 1)->device(), engine::Device::cpu);
}

}  // namespace
