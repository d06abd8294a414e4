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

// requested when positive, else one per hardware thread.
int worker_count(int requested);

// Runs job(i) for i = 0 … jobs−1 on up to worker_count(threads) threads, the
// calling thread among them; indices are taken in increasing order. After a
// job throws no new job starts, and the exception of the lowest failed index
// is rethrown once every thread has stopped. If a worker thread cannot be
// started, the threads already started stay in the pool and the call throws
// std::runtime_error naming the failure before running any job.
void parallel_for(std::int64_t jobs, int threads, const std::function<void(std::int64_t)>& job);

}  // namespace qkvlab
