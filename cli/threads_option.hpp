// The one `--threads` option of every subcommand that runs work in parallel:
// 0 (the default everywhere) means one worker per hardware thread, at most
// max_threads (256), and OpenBLAS's thread count follows it (engine/blas.hpp).
#pragma once

#include "cli/validators.hpp"
#include "core/parallel.hpp"
#include "engine/blas.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>

namespace qkvlab::cli {

// How the workers use OpenBLAS. `shared`: one product at a time, spread over the
// workers (OpenBLAS gets min(workers, hardware threads)); `per_worker`: every
// worker runs its own products, each single-threaded (OpenBLAS gets 1), so the
// process never runs more than --threads threads.
enum class BlasUse { shared, per_worker };

inline CLI::Option* add_threads_option(CLI::App* cmd, int& threads) {
  threads = 0;
  return cmd
      ->add_option("--threads", threads,
                   "Worker threads (0: one per hardware thread; at most 256); OpenBLAS's thread count follows it")
      ->check(thread_count)
      ->capture_default_str();
}

// The worker count --threads asks for; sets OpenBLAS's thread count to match.
inline int apply_threads(int threads, BlasUse use) {
  const int workers = worker_count(threads);
  engine::set_blas_threads(use == BlasUse::per_worker ? 1 : std::min(workers, hardware_threads()));
  return workers;
}

}  // namespace qkvlab::cli
