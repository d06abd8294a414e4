// A CPU emulation of the CUDA runtime, enough of it for qkvlab's gpu/*.cu
// (scripts/cuda_emulation/README.md). The .cu files are compiled by g++ with
// this directory first on the include path, after build.sh has rewritten
//   kernel<<<grid, block, shmem, stream>>>(args)
// into a call of cuda_emu::launch, `extern __shared__ T x[];` into a pointer to
// the launch's dynamic shared memory, and every other `__shared__ T x...;` into
// a static that cuda_emu::note_shared records (convert_cu.py).
//
// Execution model (cuda_runtime.cpp):
// - one kernel at a time, synchronously: a launch returns when the kernel is done;
// - the blocks of a grid run one after another;
// - the threads of a block are fibers on the launching thread; between two
//   __syncthreads() they run one after another in a seeded random order, drawn
//   anew at every barrier, so a missing barrier in a shared-memory reduction
//   gives wrong results as it would on a GPU;
// - threads of a block waiting at different __syncthreads() calls are reported
//   as a launch error (cudaErrorLaunchFailure) naming the calls;
// - __shared__ arrays are function-local statics: shared by the threads of a
//   block, reused by the next block (blocks do not overlap), and filled with
//   0xFF bytes (NaN for float and double) before each block, like the
//   uninitialized shared memory of a GPU;
// - device memory is host memory from malloc, filled with 0xFF bytes by cudaMalloc.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- Keywords ------------------------------------------------------------------
// Host and device code are the same C++ here.
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
// __noinline__ is not defined: libstdc++ spells __attribute__((__noinline__)) itself.
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// __shared__ is not defined: convert_cu.py rewrites every __shared__ declaration
// (a static, one per kernel or device function, shared by the threads of the
// block that is running, and a cuda_emu::note_shared call) or refuses it, so
// none compiles as a plain static that nothing poisons or counts.
// __restrict__ is a g++ keyword already.

// ---- Types -------------------------------------------------------------------------

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};

// The values are those of CUDA's driver_types.h.
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

// The fields of CUDA's cudaDeviceProp that code commonly reads (not its layout).
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;       // 48 KiB without opting in
  std::size_t sharedMemPerBlockOptin;  // 227 KiB, the H100/H200 limit
  std::size_t sharedMemPerMultiprocessor;
  std::size_t totalConstMem;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int maxThreadsPerMultiProcessor;
  int multiProcessorCount;
  int l2CacheSize;
  int major;
  int minor;
};

typedef struct CUstream_st* cudaStream_t;  // streams exist, but all work is synchronous
typedef struct CUevent_st* cudaEvent_t;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01

// ---- Runtime API (cuda_runtime.cpp) --------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaGetLastError();    // returns the last error and resets it
cudaError_t cudaPeekAtLastError(); // returns it and keeps it
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);

cudaError_t cudaMalloc(void** pointer, std::size_t bytes);
cudaError_t cudaMallocHost(void** pointer, std::size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaFreeHost(void* pointer);
cudaError_t cudaMemcpy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

// Events hold the wall-clock time of cudaEventRecord (work is synchronous, so
// the time between two events is the time of the work between them).
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Typed overloads, as cuda_runtime.h has them.
template <class T> cudaError_t cudaMalloc(T** pointer, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
template <class T> cudaError_t cudaMallocHost(T** pointer, std::size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(pointer), bytes);
}

// ---- The emulator -------------------------------------------------------------------------

namespace cuda_emu {

constexpr unsigned max_threads_per_block = 1024;
constexpr unsigned max_block_dim[3] = {1024, 1024, 64};
constexpr unsigned max_grid_dim[3] = {2147483647u, 65535, 65535};
constexpr std::size_t default_shared_limit = 48 * 1024;  // without cudaFuncSetAttribute
constexpr std::size_t max_shared_limit = 227 * 1024;     // H100/H200 opt-in maximum per block

struct LaunchConfig {
  dim3 grid, block;
  std::size_t dynamic_shared_bytes;
  cudaStream_t stream;
};
inline LaunchConfig config(dim3 grid, dim3 block, std::size_t shared = 0, cudaStream_t stream = nullptr) {
  return {grid, block, shared, stream};
}

// Runs body() once for every thread of every block (cuda_runtime.cpp); checks
// the configuration first and records a launch error instead of running.
// `kernel` identifies the kernel for cudaFuncSetAttribute (nullptr when the
// launch expression does not name one function, e.g. template arguments
// deduced from the call).
void run_kernel(const LaunchConfig& config, const char* name, const void* kernel, const std::function<void()>& body);

// What convert_cu.py turns kernel<<<...>>>(args) into. The arguments are
// evaluated once, on the host, and copied (kernel parameters are passed by
// value); every emulated thread then calls the kernel with those copies.
template <class Call, class... Args>
void launch(const LaunchConfig& config, const char* name, const void* kernel, Call call, Args&&... args) {
  std::tuple<std::decay_t<Args>...> copies(std::forward<Args>(args)...);
  run_kernel(config, name, kernel, [&] { std::apply([&](auto&... a) { call(a...); }, copies); });
}

// The address of a kernel named by one function (plain, or template with all its arguments).
template <class F, class Tag> const void* kernel_address(F* function, Tag) {
  return reinterpret_cast<const void*>(function);
}

// Base of the current launch's dynamic shared memory (extern __shared__).
void* dynamic_shared();

// Records a __shared__ variable of the running kernel: its size counts toward
// the launch's shared memory, and it is refilled with 0xFF before each block.
void note_shared_bytes(void* address, std::size_t bytes, bool poison);
template <class T> void note_shared(T& object) {
  using Element = std::remove_cv_t<std::remove_all_extents_t<T>>;  // volatile __shared__ arrays too
  note_shared_bytes(const_cast<void*>(static_cast<const volatile void*>(&object)), sizeof(T),
                    std::is_trivially_copyable_v<Element>);
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);

}  // namespace cuda_emu

// The kernel's key for cuda_emu::launch: its address where the expression
// names one function, else nullptr. (A generic lambda, so that an expression
// that names no single function is a failed requirement, not an error.)
#define CUDA_EMU_KERNEL_KEY(...)                                                   \
  ([&](auto cuda_emu_tag) -> const void* {                                         \
    if constexpr (requires { ::cuda_emu::kernel_address(__VA_ARGS__, cuda_emu_tag); }) \
      return ::cuda_emu::kernel_address(__VA_ARGS__, cuda_emu_tag);                \
    else                                                                            \
      return nullptr;                                                               \
  }(0))

// Only the maximum dynamic shared memory attribute has an effect; the others are accepted.
template <class F> cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize)
    return cuda_emu::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}

// ---- Built-in variables -------------------------------------------------------------------
// Set by the emulator for each emulated thread before it runs (or resumes) the kernel.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

// Waits until every (not yet returned) thread of the block has reached it: the
// fiber yields to the block's scheduler (cuda_runtime.cpp). `site` is the call's
// place in the source: threads that wait at different calls are a divergent
// barrier, a launch error here (undefined behaviour on a GPU).
void __syncthreads(std::source_location site = std::source_location::current());
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- Atomics (std::atomic_ref on the device memory) --------------------------------------
template <class T> T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <class T> T atomicSub(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_sub(value);
}
template <class T> T atomicExch(T* address, T value) { return std::atomic_ref<T>(*address).exchange(value); }
template <class T> T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;  // the old value, whether or not it was replaced
}
template <class T> T atomicMax(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (old < value && !a.compare_exchange_weak(old, value)) {}
  return old;
}
template <class T> T atomicMin(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (value < old && !a.compare_exchange_weak(old, value)) {}
  return old;
}

// ---- Device math ---------------------------------------------------------------------------
// <cmath> gives expf, erff, sqrt, fma, ... for both float and double. These
// are the CUDA-only names. Intrinsics (__expf, __fdividef, ...) are the exact
// functions here: a GPU's approximations are not emulated.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
inline float normcdff(float x) { return 0.5f * std::erfc(-x / std::sqrt(2.0f)); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
inline float normcdf(float x) { return normcdff(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline double rcbrt(double x) { return 1.0 / std::cbrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline int __double2int_rn(double x) { return int(std::nearbyint(x)); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, sizeof f); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, sizeof i); return i; }
template <class T> T __ldg(const T* p) { return *p; }
// CUDA's global min and max (std::min and std::max need equal argument types too).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
// Warp-level functions (__shfl_*_sync, __ballot_sync, __syncwarp, ...) are not emulated.
