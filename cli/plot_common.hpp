// Shared by the subcommands: output-directory checks,
// progress on stderr, and log-spaced grids.
#pragma once

#include "core/errors.hpp"

#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

namespace qkvlab::cli {

// An --out-dir given on the command line must exist; the default is created.
inline std::filesystem::path prepare_out_dir(const std::string& dir, bool given) {
  const std::filesystem::path p(dir);
  if (std::filesystem::is_directory(p)) return p;
  if (given) throw UsageError("--out-dir: directory " + dir + " does not exist");
  std::filesystem::create_directories(p);
  return p;
}

// n points from a to b (both > 0), evenly spaced in log.
inline std::vector<double> log_grid(double a, double b, int n) {
  std::vector<double> g(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) g[std::size_t(i)] = a * std::pow(b / a, n == 1 ? 0.0 : double(i) / (n - 1));
  return g;
}

struct Progress {
  std::string name;
  bool on = false;
  void operator()(const std::string& what, std::size_t done, std::size_t total) const {
    if (!on) return;
    std::cerr << "\rqkvlab " << name << ": " << what << " " << done << "/" << total << "   "
              << (done == total ? "\n" : "") << std::flush;
  }
  static bool wanted(bool quiet) { return !quiet && isatty(STDERR_FILENO); }
};

}  // namespace qkvlab::cli
