// One way to spread independent jobs over threads. Each job writes only its
// own results (and draws from its own Rng stream), so the outcome does not
// depend on the number of threads or on which thread ran a job.
//
// The threads are a persistent pool, started on first use and grown to the
// largest count asked for, so a call costs a wake-up rather than a thread
// start: the language model's CPU kernels dispatch hundreds of small jobs a
// training step through it. A parallel_for called from inside a job (nested)
// runs its jobs on the calling thread, in order; two parallel_for calls from
// different outside threads take turns.
#pragma once

#include <cstdint>
#include <functional>

namespace qkvlab {

// The most threads a command may ask for (--threads above it is a usage error):
// far above any useful count, far below where thread stacks alone exhaust memory.
inline constexpr int max_threads = 256;

// requested when positive, else one per hardware thread.
int worker_count(int requested);
// Hardware threads (at least 1).
int hardware_threads();

// Runs job(i) for i = 0 … jobs−1 on up to worker_count(threads) threads, the
// calling thread among them; indices are taken in increasing order. After a
// job throws no new job starts, and the exception of the lowest failed index
// is rethrown once every thread has stopped. If a worker thread cannot be
// started, the threads already started stay in the pool and the call throws
// std::runtime_error naming the failure before running any job.
void parallel_for(std::int64_t jobs, int threads, const std::function<void(std::int64_t)>& job);

// For tests: called before each worker thread is started, with the number of
// threads the pool has; a hook that throws std::system_error stands for a
// failed thread start (a memory or process limit). An empty hook removes it.
void set_thread_start_hook(std::function<void(int started)> hook);

// Worker threads the pool has started so far (for tests).
int pool_threads();

}  // namespace qkvlab
