// The CPU emulation of the CUDA runtime declared in cuda_runtime.h: device
// memory, errors, events, and the kernel launcher (blocks one after another,
// the threads of a block as Boost.Context fibers meeting at __syncthreads).
#include "cuda_runtime.h"

#include <boost/context/fiber.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace cuda_emu {
namespace {

// ---- Errors ---------------------------------------------------------------------
// CUDA keeps the last error per host thread; cudaGetLastError returns and clears it.
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t error, const std::string& why) {
  std::fprintf(stderr, "cuda_emulation: %s: %s\n", cudaGetErrorString(error), why.c_str());
  last_error = error;
  return error;
}

// ---- Device memory -------------------------------------------------------------------
// Every allocation is remembered, so that copies and frees can be checked
// against it: a host pointer where a device pointer belongs is an error.
std::mutex memory_mutex;
std::map<const char*, std::size_t> allocations;  // start → bytes

bool is_device_range(const void* pointer, std::size_t bytes) {
  const char* p = static_cast<const char*>(pointer);
  std::lock_guard lock(memory_mutex);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

// ---- Shared memory -----------------------------------------------------------------------
std::mutex shared_mutex;
std::map<void*, std::pair<std::size_t, bool>> all_shared;  // every __shared__ variable seen: bytes, poison
std::map<void*, std::size_t> launch_shared;                // those of the running launch
std::vector<std::max_align_t> dynamic_memory;              // extern __shared__ of the running launch
std::size_t dynamic_bytes = 0;
std::map<const void*, std::size_t> shared_limits;  // cudaFuncSetAttribute(MaxDynamicSharedMemorySize)

// Before each block: shared memory holds garbage on a GPU; here 0xFF bytes,
// which read as NaN in float and double.
void poison_shared() {
  std::lock_guard lock(shared_mutex);
  for (auto& [address, entry] : all_shared)
    if (entry.second) std::memset(address, 0xFF, entry.first);
  if (dynamic_bytes) std::memset(dynamic_memory.data(), 0xFF, dynamic_bytes);
}

std::string dims(dim3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

// ---- The threads of a block ---------------------------------------------------------------
// Each thread of a block is a fiber (Boost.Context: a stack of its own, switched to without a
// system call) on the launching host thread. The scheduler resumes the block's fibers one at a
// time, each until it reaches __syncthreads() or returns from the kernel; when every fiber still
// running waits at the barrier, the next phase begins. Within a phase the fibers run in a seeded
// random order, drawn anew for every phase, so a read of shared memory that another thread
// writes in the same phase (a missing __syncthreads) sees its value in some orders and the 0xFF
// poison or the old value in others: the kernel's results go wrong, as they would on a GPU. A
// fiber that returns leaves the barrier, as early-exited threads do on a GPU; those still running
// must all wait at the same __syncthreads() call, or the launch fails (a divergent barrier, which
// is undefined on a GPU). No OS thread waits
// on another, so a loaded machine slows the emulation down no more than any other program
// (real threads meeting at std::barriers did: 204 s against 13 s for lm_gpu_test's CI cases).
class Block {
 public:
  void run(const LaunchConfig& config, const std::function<void()>& body) {
    const dim3 block = config.block, grid = config.grid;
    const unsigned n = block.x * block.y * block.z;
    while (fibers_.size() < n) fibers_.push_back(std::make_unique<Fiber>(*this));
    body_ = &body;
    divergence_.clear();
    blockDim = block;
    gridDim = grid;
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx = {x, y, z};
          poison_shared();
          run_block(n, block);
        }
    body_ = nullptr;
  }

  // __syncthreads: back to the scheduler, which resumes this fiber in the next phase.
  void barrier(const std::source_location& site) {
    fibers_[running_]->site = site;
    fibers_[running_]->yield();
  }

  bool in_kernel() const { return body_ != nullptr; }

  // The first divergent barrier of the last run ("" if none): which block, which calls.
  const std::string& divergence() const { return divergence_; }

 private:
  // Made once and kept: after the kernel returns, a fiber waits for the next block.
  struct Fiber {
    explicit Fiber(Block& block)
        : self(std::allocator_arg, boost::context::fixedsize_stack(256 * 1024),
               [this, &block](boost::context::fiber&& scheduler) {
                 back = std::move(scheduler);
                 for (;;) {
                   (*block.body_)();
                   finished = true;
                   yield();
                 }
                 return std::move(back);
               }) {}
    void resume() { self = std::move(self).resume(); }
    void yield() { back = std::move(back).resume(); }
    boost::context::fiber self, back;  // this thread's kernel; the scheduler that resumed it
    bool finished = false;
    std::source_location site;  // the __syncthreads() it waits at
  };

  void run_block(unsigned n, dim3 block) {
    std::vector<unsigned> waiting(n);
    for (unsigned i = 0; i < n; ++i) fibers_[i]->finished = false, waiting[i] = i;
    while (!waiting.empty()) {
      std::shuffle(waiting.begin(), waiting.end(), order_);
      for (unsigned i : waiting) {
        running_ = i;
        threadIdx = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
        fibers_[i]->resume();
      }
      std::erase_if(waiting, [&](unsigned i) { return fibers_[i]->finished; });
      if (divergence_.empty()) check_sites(waiting);
    }
  }

  // Every thread still running must wait at the same __syncthreads() call (threads that returned
  // have left the barrier, as on Volta and later). Else the first divergence is kept, naming the
  // calls with how many threads wait at each and the lowest of them.
  void check_sites(const std::vector<unsigned>& running) {
    auto site_of = [&](unsigned i) -> const std::source_location& { return fibers_[i]->site; };
    auto same = [](const std::source_location& a, const std::source_location& b) {
      return a.line() == b.line() && a.column() == b.column() &&
             (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
    };
    if (std::all_of(running.begin(), running.end(), [&](unsigned i) { return same(site_of(i), site_of(running[0])); }))
      return;
    std::vector<unsigned> waiting = running;
    std::sort(waiting.begin(), waiting.end());
    std::string calls;
    while (!waiting.empty()) {
      const std::source_location site = site_of(waiting[0]);
      const unsigned first = waiting[0];
      const auto count = std::erase_if(waiting, [&](unsigned i) { return same(site_of(i), site); });
      calls += std::string(calls.empty() ? "" : ", ") + site.file_name() + ":" + std::to_string(site.line()) + ":" +
               std::to_string(site.column()) + " (" + std::to_string(count) + " threads, the first " +
               std::to_string(first) + ")";
    }
    divergence_ = "block " + dims(blockIdx) + ": its threads wait at different __syncthreads() calls: " + calls;
  }

  std::vector<std::unique_ptr<Fiber>> fibers_;
  unsigned running_ = 0;  // the fiber resumed last
  const std::function<void()>* body_ = nullptr;
  std::mt19937 order_{20261126};  // seeded: the same run gives the same orders
  std::string divergence_;
};

Block& block() {
  // Leaked on purpose: its fibers wait inside kernels' callers forever, never unwound at exit.
  static Block* b = new Block;
  return *b;
}

std::mutex launch_mutex;  // one kernel at a time, whichever host thread launches it

}  // namespace

void* dynamic_shared() { return dynamic_memory.data(); }

void note_shared_bytes(void* address, std::size_t bytes, bool poison) {
  // Every thread passes the declaration. The first one ever poisons the variable at once (the
  // blocks after it are poisoned before they start): the fibers run one at a time, so no thread
  // can have written the variable before the first thread reaches its declaration.
  std::lock_guard lock(shared_mutex);
  if (all_shared.emplace(address, std::pair{bytes, poison}).second && poison) std::memset(address, 0xFF, bytes);
  launch_shared.emplace(address, bytes);
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || std::size_t(bytes) > max_shared_limit)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(bytes) +
                                           "): above the " + std::to_string(max_shared_limit) + "-byte limit");
  std::lock_guard lock(shared_mutex);
  shared_limits[kernel] = std::size_t(bytes);
  return cudaSuccess;
}

void run_kernel(const LaunchConfig& config, const char* name, const void* kernel, const std::function<void()>& body) {
  const std::string what = std::string("kernel ") + name + "<<<" + dims(config.grid) + ", " + dims(config.block) +
                           ", " + std::to_string(config.dynamic_shared_bytes) + ">>>";
  // The checks CUDA makes at launch (cudaErrorInvalidConfiguration: "invalid configuration argument").
  const dim3 b = config.block, g = config.grid;
  const unsigned long long threads = 1ull * b.x * b.y * b.z;
  if (threads == 0 || g.x == 0 || g.y == 0 || g.z == 0) {
    fail(cudaErrorInvalidConfiguration, what + ": an empty grid or block");
    return;
  }
  if (threads > max_threads_per_block || b.x > max_block_dim[0] || b.y > max_block_dim[1] || b.z > max_block_dim[2]) {
    fail(cudaErrorInvalidConfiguration, what + ": more than 1024 threads per block, or a block dimension too large");
    return;
  }
  if (g.x > max_grid_dim[0] || g.y > max_grid_dim[1] || g.z > max_grid_dim[2]) {
    fail(cudaErrorInvalidConfiguration, what + ": a grid dimension too large");
    return;
  }
  std::lock_guard launch_lock(launch_mutex);
  std::size_t limit = default_shared_limit;
  {
    std::lock_guard lock(shared_mutex);
    if (auto it = shared_limits.find(kernel); kernel && it != shared_limits.end()) limit = std::max(limit, it->second);
    launch_shared.clear();
  }
  // Dynamic shared memory beyond the kernel's limit is refused ("invalid argument").
  if (config.dynamic_shared_bytes > limit) {
    fail(cudaErrorInvalidValue,
         what + ": " + std::to_string(config.dynamic_shared_bytes) + " bytes of dynamic shared memory, above the " +
             std::to_string(limit) + "-byte limit of this kernel (cudaFuncSetAttribute raises it, up to " +
             std::to_string(max_shared_limit) + ")");
    return;
  }
  dynamic_bytes = config.dynamic_shared_bytes;
  dynamic_memory.assign((dynamic_bytes + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t), {});

  block().run(config, body);
  // A divergent barrier: on a GPU a hang or a wrong result (compute-sanitizer's synccheck reports it).
  if (!block().divergence().empty()) fail(cudaErrorLaunchFailure, what + ": " + block().divergence());

  // Static shared memory is known only once the kernel has declared it: the
  // check comes after the run, and is reported by cudaGetLastError all the same.
  std::size_t static_bytes = 0;
  {
    std::lock_guard lock(shared_mutex);
    for (auto& [address, bytes] : launch_shared) static_bytes += bytes;
  }
  if (static_bytes > default_shared_limit)
    fail(cudaErrorLaunchOutOfResources,
         what + ": " + std::to_string(static_bytes) + " bytes of static __shared__ memory (nvcc allows 48 KiB)");
  else if (static_bytes + config.dynamic_shared_bytes > (limit > default_shared_limit ? max_shared_limit : limit))
    fail(cudaErrorLaunchOutOfResources,
         what + ": " + std::to_string(static_bytes) + " static + " + std::to_string(config.dynamic_shared_bytes) +
             " dynamic bytes of shared memory, above the " +
             std::to_string(limit > default_shared_limit ? max_shared_limit : limit) + "-byte limit");
}

}  // namespace cuda_emu

using cuda_emu::fail;

// ---- __syncthreads ---------------------------------------------------------------------------

void __syncthreads(std::source_location site) {
  if (!cuda_emu::block().in_kernel()) {
    std::fprintf(stderr, "cuda_emulation: __syncthreads() outside a kernel (%s:%u)\n", site.file_name(),
                 unsigned(site.line()));
    std::abort();
  }
  cuda_emu::block().barrier(site);
}

// ---- Device ------------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice, "device " + std::to_string(device));
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice, "device " + std::to_string(device));
  *prop = {};
  std::snprintf(prop->name, sizeof prop->name, "CUDA CPU emulation (scripts/cuda_emulation)");
  prop->totalGlobalMem = std::size_t(16) << 30;
  prop->sharedMemPerBlock = cuda_emu::default_shared_limit;
  prop->sharedMemPerBlockOptin = cuda_emu::max_shared_limit;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->totalConstMem = 64 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = int(cuda_emu::max_threads_per_block);
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = int(cuda_emu::max_block_dim[i]);
    prop->maxGridSize[i] = int(cuda_emu::max_grid_dim[i]);
  }
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->multiProcessorCount = 132;
  prop->l2CacheSize = 50 << 20;
  prop->major = 9;  // as an H100
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaError_t e = cudaGetDeviceProperties(&p, device); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); break;
    default: return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute not emulated");
  }
  return cudaSuccess;
}

// Launches are synchronous: there is never anything to wait for.
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaDeviceReset() { return cudaSuccess; }

cudaError_t cudaGetLastError() { return std::exchange(cuda_emu::last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return cuda_emu::last_error; }

// CUDA's own descriptions.
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

// ---- Memory ------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  if (!pointer) return fail(cudaErrorInvalidValue, "cudaMalloc: null pointer");
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);  // cudaMalloc aligns to 256 bytes
  if (!p) return fail(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(bytes) + ")");
  std::memset(p, 0xFF, bytes);  // uninitialized device memory: NaN, not zero
  std::lock_guard lock(cuda_emu::memory_mutex);
  cuda_emu::allocations[static_cast<const char*>(p)] = bytes;
  *pointer = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (!pointer) return cudaSuccess;
  {
    std::lock_guard lock(cuda_emu::memory_mutex);
    if (cuda_emu::allocations.erase(static_cast<const char*>(pointer)) == 0)
      return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  }
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, std::size_t bytes) {
  *pointer = std::malloc(bytes ? bytes : 1);
  return *pointer ? cudaSuccess : fail(cudaErrorMemoryAllocation, "cudaMallocHost");
}
cudaError_t cudaFreeHost(void* pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, "cudaMemcpy kind " + std::to_string(int(kind)));
  // The pointers must lie where the kind says (a real GPU fails or crashes otherwise).
  const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault) {
    if (to_device != cuda_emu::is_device_range(to, bytes))
      return fail(cudaErrorInvalidValue, "cudaMemcpy: the destination is not " +
                                             std::string(to_device ? "device memory of that size" : "host memory"));
    if (from_device != cuda_emu::is_device_range(from, bytes))
      return fail(cudaErrorInvalidValue, "cudaMemcpy: the source is not " +
                                             std::string(from_device ? "device memory of that size" : "host memory"));
  }
  std::memmove(to, from, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* to, const void* from, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(to, from, bytes, kind);
}

cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!cuda_emu::is_device_range(pointer, bytes))
    return fail(cudaErrorInvalidValue, "cudaMemset: not device memory of " + std::to_string(bytes) + " bytes");
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t) {
  return cudaMemset(pointer, value, bytes);
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  *total = std::size_t(16) << 30;
  std::size_t used = 0;
  std::lock_guard lock(cuda_emu::memory_mutex);
  for (auto& [p, bytes] : cuda_emu::allocations) used += bytes;
  *free = used < *total ? *total - used : 0;
  return cudaSuccess;
}

// ---- Streams and events ---------------------------------------------------------------------------

struct CUstream_st {};
struct CUevent_st {
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
};

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = new CUstream_st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) { return cudaStreamCreate(stream); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (!event) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord(nullptr)");
  event->time = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event ? cudaSuccess : fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(nullptr)");
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime(nullptr)");
  if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle, "event not recorded");
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}
