// The options `qkvlab icl train`, `sweep`, `anchor` and `depth` share (the task, Adam,
// held-out samples, seed, threads, outputs, device), their validation, and the writing of
// an experiment's tables (synthetic/icl/train_report.hpp) to --out, --csv and --figure.
#pragma once

#include "cli/device_option.hpp"
#include "cli/plot_common.hpp"
#include "synthetic/icl/train_report.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace qkvlab::cli {

// The experiment's settings (icl::TrainSettings: the library's, with `icl train`'s defaults) and the outputs.
struct CommonArgs : icl::TrainSettings {
  std::string out, csv, figure, format = "table";
  Device device = Device::cpu;
  bool quiet = false;
};

// Which of the shared options a subcommand uses: it accepts only those.
struct CommonOptions {
  bool task = true;      // --d, --n, --sigma (icl sweep has lists instead)
  bool w0 = false;       // --w0-scale
  bool restarts = true;  // --restarts (icl depth trains one run per L and model)
};

void add_common_options(CLI::App* cmd, CommonArgs& a, CommonOptions use);

// Refuses cuda (no GPU path yet) and output paths outside existing directories, before any
// work, and sets the threads: the runs are what runs in parallel, each product on its run's thread.
void prepare(const CommonArgs& a);

// Refuses sizes whose runs (and the Monte Carlo of the bounds, theory_prompts > 0, and what a command
// keeps beyond the runs, held_out_bytes) would not fit the memory budget.
void require_train_memory(const CommonArgs& a, int d, int n, double runs, long theory_prompts, double held_out_bytes = 0);

// progress(done, total) on stderr as "WHAT done/total".
std::function<void(int, int)> progress_of(const std::string& name, const std::string& what, bool quiet);

// --out (every table), --csv (the main table) and --figure (STEM.csv, STEM.svg, STEM.png): all or none.
void write_outputs(const CommonArgs& a, const icl::ExperimentTables& t, const std::string& command_line);

// The exit statuses, for the subcommands' footers.
extern const char* const kIclTrainExit;

}  // namespace qkvlab::cli
