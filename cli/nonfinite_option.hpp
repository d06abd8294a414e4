// The one `--allow-nonfinite` flag of every subcommand that loads a model's
// weights: without it a weight that is NaN or ±Inf refuses the checkpoint,
// naming the file, the tensor and the element (lm/model_files.hpp); and how a
// non-finite result is reported. `then` says what the command does with such
// weights: one that computes from them reports a non-finite result (exit 1); a
// writer (lm export, lm convert) copies them.
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

namespace qkvlab::cli {

inline CLI::Option* add_allow_nonfinite_option(CLI::App* cmd, bool& allow,
                                               const std::string& then = "a non-finite result is then reported as "
                                                                         "such, exit 1") {
  allow = false;
  return cmd->add_flag("--allow-nonfinite", allow,
                       "Load weights that hold NaN or Inf (refused otherwise, naming the tensor); " + then);
}

// A result that is not finite is the finding, reported as such: one line on
// stderr naming where it arose, nothing on stdout or in any file, exit 1.
inline int report_nonfinite(const std::string& command, const std::string& finding) {
  std::cerr << "qkvlab: " << command << ": not finite: " << finding << "; no number is reported\n";
  return 1;
}

}  // namespace qkvlab::cli
