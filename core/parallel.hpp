// One way to spread independent jobs over threads. Each job writes only its
// own results (and draws from its own Rng stream), so the outcome does not
// depend on the number of threads or on which thread ran a job.
#pragma once

#include <cstdint>
#include <functional>

namespace qkvlab {

// requested when positive, else one per hardware thread.
int worker_count(int requested);

// Runs job(i) for i = 0 … jobs−1 on up to worker_count(threads) threads, the
// calling thread among them; indices are taken in increasing order. After a
// job throws no new job starts, and the exception of the lowest failed index
// is rethrown once every thread has stopped.
void parallel_for(std::int64_t jobs, int threads, const std::function<void(std::int64_t)>& job);

}  // namespace qkvlab
