// The options `qkvlab icl theory` and `qkvlab icl lemmas` share: the task (d, n, sigma),
// the Monte Carlo prompts, seed, threads and output format.
#pragma once

#include "cli/threads_option.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/icl/prompt.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace qkvlab::cli {

struct TaskArgs {
  int d = 4, n = 16;
  double sigma = 0.5;
  long prompts = 0;
  std::uint64_t seed = 1;
  int threads = 0;
  std::string format = "table";
};

inline void add_task_options(CLI::App* cmd, TaskArgs& a) {
  cmd->add_option("--d", a.d, "Dimension d of x, y and every weight")->check(integer_in(1, 4096))->capture_default_str();
  cmd->add_option("--n", a.n, "In-context examples n per prompt")->check(integer_in(1, 1 << 20))->capture_default_str();
  cmd->add_option("--sigma", a.sigma,
                  "Noise standard deviation sigma >= 0 (0 needs n >= d; the loss scale |W_0|_F^2 + d^2 + d sigma^2 must "
                  "stay below 1.8e308)")
      ->check(non_negative_real)
      ->capture_default_str();
  cmd->add_option("--prompts", a.prompts, "Monte Carlo prompts")
      ->check(integer64_in(2, 1000000000000LL))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed of every random draw (recorded in the output)")
      ->check(seed_value)
      ->capture_default_str();
  add_threads_option(cmd, a.threads);
  cmd->add_option("--format", a.format, "Output on stdout")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
}

inline icl::Task make_task(const TaskArgs& a, const MatD& W0) {
  if (!(a.sigma >= 0) || !std::isfinite(a.sigma)) throw UsageError("--sigma: must be a non-negative number");
  if (a.prompts < 2) throw UsageError("--prompts: must be at least 2, got " + std::to_string(a.prompts));
  icl::Task t{a.d, a.n, a.sigma, W0};
  icl::validate(t);
  return t;
}

}  // namespace qkvlab::cli
