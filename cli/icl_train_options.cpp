#include "cli/icl_train_options.hpp"

#include "cli/format_option.hpp"
#include "cli/output_paths.hpp"
#include "cli/threads_option.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"

#include <filesystem>
#include <memory>

namespace qkvlab::cli {

namespace fs = std::filesystem;
using namespace qkvlab::icl;

// The Monte Carlo and the training here run on the CPU only: no GPU path yet.
constexpr bool kGpuPath = false;

const char* const kIclTrainExit =
    "Exit status: 0 success, 2 usage error (one line on stderr, nothing written),\n"
    "3 a numerical failure or another error. A run has diverged (exit 3, nothing written) when its loss or gradient\n"
    "is not finite, or when its held-out loss on the first 2000 held-out prompts ends more than 10 times both its\n"
    "loss there before training and the zero predictor's E|y|^2 = |W0|_F^2 + d^2 + d sigma^2 (the one rule of\n"
    "icl train, sweep, anchor and depth).";

void add_common_options(CLI::App* cmd, CommonArgs& a, CommonOptions use) {
  if (use.task) {
    cmd->add_option("--d", a.d, "Dimension d of x and y")->check(integer_in(1, 64))->capture_default_str();
    cmd->add_option("--n", a.n, "Number n of (x, y) pairs in a prompt")->check(integer_in(1, 4096))->capture_default_str();
    cmd->add_option("--sigma", a.sigma, "Noise standard deviation sigma >= 0 (0 needs n >= d in icl train, where the Bayes loss C is "
                    "computed; E|y|^2 = |W0|_F^2 + d^2 + d sigma^2 < 1.8e308)")
        ->check(non_negative_real)
        ->capture_default_str();
  }
  if (use.w0)
    cmd->add_option("--w0-scale", a.w0_scale, "c of the prior mean W_0 = c I (0: W_0 = 0; E|y|^2 = |W0|_F^2 + d^2 + d sigma^2 < 1.8e308)")
        ->check(finite_real)
        ->capture_default_str();
  cmd->add_option("--steps", a.steps, "Adam steps per run")->check(positive_integer)->capture_default_str();
  cmd->add_option("--batch", a.batch, "Fresh prompts per step")->check(positive_integer)->capture_default_str();
  cmd->add_option("--lr", a.lr, "Peak learning rate (linear warmup, cosine decay to 1% of it)")
      ->check(positive_real)
      ->capture_default_str();
  if (use.restarts)
    cmd->add_option("--restarts", a.restarts, "Independent initializations per model")->check(positive_integer)->capture_default_str();
  cmd->add_option("--eval-samples", a.eval_samples, "Held-out prompts for the final losses")
      ->check(integer_in(2, 100000000))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  add_threads_option(cmd, a.threads);
  cmd->add_option("--out", a.out, "Write every table to this HDF5 file");
  cmd->add_option("--csv", a.csv, "Write the main table to this CSV file");
  cmd->add_option("--figure", a.figure, "Write the figure to STEM.svg and STEM.png (its data to STEM.csv, or with --csv STEM.csv to that "
                                          "file, or STEM.figure.csv where it draws other rows; needs gnuplot)");
  add_format_option(cmd, a.format);
  add_device_option(cmd, a.device, kGpuPath);
  cmd->add_flag("--quiet", a.quiet, "No progress on stderr");
}

// The file the figure's numbers go to (write_outputs): STEM.csv, or, when that is --csv's file,
// STEM.figure.csv (written only where the figure draws other rows than --csv's table).
static std::string figure_data_file(const CommonArgs& a, const std::string& stem) {
  const std::string data = figure_table(stem);
  return a.csv.empty() || !same_file(data, a.csv) ? data : stem + ".figure.csv";
}

void prepare(const CommonArgs& a) {
  require_device(a.device, kGpuPath);
  FileList outputs{{"--out", a.out}, {"--csv", a.csv}};
  if (!a.figure.empty()) {  // every file write_outputs stages for it, checked before the training
    const std::string stem = figure_stem(a.figure);  // figure_stem refuses a directory
    for (const auto& f : results::figure_files(stem)) outputs.emplace_back("--figure", f.string());
    outputs.emplace_back("--figure", figure_data_file(a, stem));
  }
  require_output_directories(outputs);
  refuse_overlapping_files(outputs, {});
  apply_threads(a.threads, BlasUse::per_worker);
}

void require_train_memory(const CommonArgs& a, int d, int n, double runs, long theory_prompts, double held_out_bytes) {
  double bytes = trained_memory_bytes(d, n, a.batch, a.eval_samples, a.threads, runs) + held_out_bytes;
  if (theory_prompts > 0) bytes += theory_memory_bytes(Task{d, n, 0.0, {}}, {theory_prompts, a.seed, a.threads});
  require_memory("--d " + std::to_string(d) + " --n " + std::to_string(n) + " --batch " + std::to_string(a.batch) +
                     " --eval-samples " + std::to_string(a.eval_samples) +
                     (theory_prompts > 0 ? " --theory-prompts " + std::to_string(theory_prompts) : ""),
                 bytes);
}

std::function<void(int, int)> progress_of(const std::string& name, const std::string& what, bool quiet) {
  auto p = std::make_shared<Progress>(Progress{name, Progress::wanted(quiet)});
  return [p, what](int done, int total) { (*p)(what, std::size_t(done), std::size_t(total)); };
}

// The figure's numbers go beside it, to STEM.csv; when that is --csv's file (`--csv X.csv --figure X`),
// --csv's table already holds them, or, where the figure draws other rows (a sweep over several
// tasks draws the first task's), they go to STEM.figure.csv: --csv's table is never replaced.
void write_outputs(const CommonArgs& a, const ExperimentTables& t, const std::string& command_line) {
  StagedFiles files;
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, t.tables, a.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, t.main);
  if (!a.figure.empty()) {
    const std::string stem = figure_stem(a.figure), data = figure_data_file(a, stem);
    if (data == figure_table(stem) || t.plot.table.columns != t.main.columns) results::stage_csv(files, data, t.plot.table);
    results::stage_figure(files, t.plot.figure, t.plot.table, stem);
  }
  files.commit();
}

}  // namespace qkvlab::cli
