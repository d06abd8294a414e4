#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

namespace qkvlab {

int worker_count(int requested) {
  return requested > 0 ? requested : int(std::max(1u, std::thread::hardware_concurrency()));
}

void parallel_for(std::int64_t jobs, int threads, const std::function<void(std::int64_t)>& job) {
  std::atomic<std::int64_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<std::exception_ptr> errors(std::size_t(std::max<std::int64_t>(jobs, 0)));
  auto worker = [&] {
    for (std::int64_t i; !failed && (i = next++) < jobs;) try {
        job(i);
      } catch (...) {
        errors[std::size_t(i)] = std::current_exception();
        failed = true;
      }
  };
  std::vector<std::thread> pool;
  for (std::int64_t t = 1; t < std::min<std::int64_t>(worker_count(threads), jobs); ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace qkvlab
