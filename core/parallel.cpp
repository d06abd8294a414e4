#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace qkvlab {

int hardware_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

int worker_count(int requested) { return requested > 0 ? requested : hardware_threads(); }

namespace {

std::mutex hook_mutex;
std::function<void(int)> thread_start_hook;

thread_local bool inside_job = false;

// One batch of jobs: workers and the caller take indices from `next` until
// they run out or a job fails.
struct Batch {
  std::int64_t jobs = 0;
  const std::function<void(std::int64_t)>* job = nullptr;
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors;

  void work() {
    inside_job = true;
    for (std::int64_t i; !failed.load(std::memory_order_relaxed) && (i = next.fetch_add(1)) < jobs;) try {
        (*job)(i);
      } catch (...) {
        errors[std::size_t(i)] = std::current_exception();
        failed = true;
      }
    inside_job = false;
  }
};

class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(std::int64_t jobs, int threads, const std::function<void(std::int64_t)>& job) {
    std::lock_guard turn(dispatch_);  // one batch at a time
    const int helpers = int(std::min<std::int64_t>(threads, jobs)) - 1;
    grow(helpers);
    Batch batch;
    batch.jobs = jobs;
    batch.job = &job;
    batch.errors.resize(std::size_t(jobs));
    {
      std::lock_guard lock(mutex_);
      batch_ = &batch;
      helpers_wanted_ = helpers;
      helpers_running_ = helpers;
      ++generation_;
    }
    if (helpers > 0) wake_.notify_all();
    batch.work();
    {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [&] { return helpers_running_ == 0; });
      batch_ = nullptr;
    }
    for (const auto& e : batch.errors)
      if (e) std::rethrow_exception(e);
  }

 private:
  // Starts threads until there are `count`; on failure the started ones stay.
  void grow(int count) {
    while (int(threads_.size()) < count) {
      const int index = int(threads_.size());
      try {
        {
          std::lock_guard lock(hook_mutex);
          if (thread_start_hook) thread_start_hook(index);
        }
        threads_.emplace_back([this, index] { serve(index); });
      } catch (const std::exception& e) {  // std::system_error, or std::bad_alloc for its state
        throw std::runtime_error("cannot start worker thread " + std::to_string(index + 2) + " of " +
                                 std::to_string(count + 1) + ": " + e.what());
      }
    }
  }

  void serve(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      Batch* batch;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || (generation_ != seen && index < helpers_wanted_); });
        if (stopping_) return;
        seen = generation_;
        batch = batch_;
      }
      batch->work();
      {
        std::lock_guard lock(mutex_);
        if (--helpers_running_ == 0) done_.notify_one();
      }
    }
  }

  friend int qkvlab::pool_threads();
  std::mutex dispatch_, mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  Batch* batch_ = nullptr;
  int helpers_wanted_ = 0, helpers_running_ = 0;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
};

Pool& pool() {
  static Pool instance;
  return instance;
}

}  // namespace

void set_thread_start_hook(std::function<void(int)> hook) {
  std::lock_guard lock(hook_mutex);
  thread_start_hook = std::move(hook);
}

int pool_threads() {
  std::lock_guard turn(pool().dispatch_);
  return int(pool().threads_.size());
}

void parallel_for(std::int64_t jobs, int threads, const std::function<void(std::int64_t)>& job) {
  if (jobs <= 0) return;
  const int n = worker_count(threads);
  if (n == 1 || jobs == 1 || inside_job) {
    // Serial: the same order and the same first-error rule as the pool.
    const bool outer = inside_job;
    inside_job = true;
    try {
      for (std::int64_t i = 0; i < jobs; ++i) job(i);
    } catch (...) {
      inside_job = outer;
      throw;
    }
    inside_job = outer;
    return;
  }
  pool().run(jobs, n, job);
}

}  // namespace qkvlab
