// `qkvlab transfer`: the MLP basis-transfer experiment qwe.exp8.4 (synthetic/transfer.hpp; the sweep
// over d, the finding and the rendering in synthetic/transfer_report.hpp): options, their validation,
// the run, the output. Exit 0 when the MLP's error is below the linear map's at every d (the paper's
// finding), 1 when not, 2 on a usage error (nothing written), 3 otherwise.
#include "cli/output_paths.hpp"
#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"
#include "results/value.hpp"
#include "synthetic/transfer_report.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

namespace qkvlab::cli {
namespace {

const std::vector<int> kDefaultD{16, 32, 64};
const std::vector<int> kPaperD{64, 128, 256, 512};

struct TransferArgs {
  std::vector<int> d;
  std::int64_t steps = 2000;
  int batch = 4096;
  double lr = 1e-2;
  std::uint64_t seed = 1;
  bool paper = false;
  Device device = Device::cpu;
  int threads = 0;
  std::string out, csv, figure, format = "table", checkpoint;
  bool quiet = false;
};

void validate(TransferArgs& a, const CLI::App& cmd) {
  require_device(a.device);
  if (a.paper) {
    if (cmd.count("--steps") == 0) a.steps = 20000;
    if (cmd.count("--batch") == 0) a.batch = 65536;
    if (cmd.count("--d") == 0) a.d = kPaperD;
    if (a.device == Device::cpu && !a.quiet)
      std::cerr << "qkvlab: warning: --paper is sized for a GPU (--device cuda); on the CPU it runs for hours\n";
  }
  if (a.d.empty()) a.d = kDefaultD;
  if (!(a.lr > 0) || !std::isfinite(a.lr)) throw UsageError("--lr: must be a positive number");
  if (a.steps < 1) throw UsageError("--steps: must be at least 1, got " + std::to_string(a.steps));
  if (!a.checkpoint.empty()) require_directory("--checkpoint", a.checkpoint);
  // The figure's numbers go to STEM.csv when --csv names no file: an output like the others.
  a.figure = figure_stem(a.figure);
  const char* csv = a.csv.empty() && !a.figure.empty() ? "--figure's CSV" : "--csv";
  if (a.csv.empty() && !a.figure.empty()) a.csv = figure_table(a.figure);
  std::string svg, png;  // every file the run writes, checked before it
  if (!a.figure.empty()) svg = results::figure_files(a.figure).at(0), png = results::figure_files(a.figure).at(1);
  require_report_files({{"--out", &a.out}, {csv, &a.csv}, {"--figure", &svg}, {"--figure", &png}}, {a.checkpoint}, {});
  for (int d : a.d)
    require_memory("--d " + std::to_string(d) + " --batch " + std::to_string(a.batch) + " --steps " + std::to_string(a.steps),
                   transfer::transfer_memory_bytes(d, a.batch, a.steps));
}

int run_transfer(TransferArgs a, const CLI::App& cmd, const std::string& command_line) {
  validate(a, cmd);
  transfer::TransferConfig c;
  c.seed = a.seed;
  // OpenBLAS follows --threads (up to the hardware threads: more only oversubscribes the cores).
  c.threads = apply_threads(a.threads, BlasUse::shared);
  c.train.steps = a.steps, c.train.batch = a.batch, c.train.lr = a.lr;
  c.train.device = a.device == Device::cuda ? engine::Device::cuda : engine::Device::cpu;
  c.train.checkpoint_dir = a.checkpoint;
  const Progress progress{"transfer", Progress::wanted(a.quiet)};
  const std::int64_t every = std::max<std::int64_t>(1, a.steps / 200);
  transfer::TransferSweep s;
  try {
    s = transfer::run_transfer_sweep(a.d, c, [&](int d, std::int64_t step, double loss) {
      if (step % every != 0 && step != a.steps) return;
      progress("d = " + std::to_string(d) + ", loss " + results::short_number(loss) + ", step", std::size_t(step),
               std::size_t(a.steps));
    });
  } catch (const transfer::CheckpointError& e) {
    throw UsageError(std::string("--checkpoint: ") + e.what());
  }
  StagedFiles files;  // --out, --csv and --figure: all or none
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, transfer::transfer_tables(s), a.seed, command_line);
  if (!a.csv.empty()) results::stage_csv(files, a.csv, transfer::summary_table(s));
  if (!a.figure.empty()) results::stage_figure(files, transfer::transfer_figure(), transfer::summary_table(s), a.figure);
  files.commit();
  std::cout << (a.format == "json" ? transfer::transfer_json(s, command_line).json_line() : transfer::transfer_text(s));
  // A reported value that is not finite is a numerical failure, whatever the comparison says.
  if (const std::string bad = transfer::non_finite_value(s.runs); !bad.empty()) {
    std::cout.flush();
    throw NumericalError("transfer: a reported value is not finite (" + bad + ")");
  }
  return s.mlp_beats_linear ? 0 : 1;
}

}  // namespace

Command add_transfer_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<TransferArgs>();
  auto* cmd = app.add_subcommand("transfer", "MLP basis transfer (qwe.exp8.4): trained skip MLP against the best linear map");
  cmd->footer(
      "Default: --d 16,32,64, 2000 steps of batch 4096, lr 1e-2 (warmup 2%, cosine to lr/100), AdamW without\n"
      "weight decay, clipping at norm 3; ridge baseline on 500,000 samples (lambda 1e-6); 65,536 held-out samples.\n"
      "--paper: batch 65,536, 20,000 steps, d 64,128,256,512 (for a GPU; explicit options win).\n"
      "Exit 0 when the MLP's relative L2 error is below the linear map's at every d, 1 otherwise,\n"
      "2 on a usage error (nothing written), 3 on an unexpected error.");
  add_list_option(cmd, "--d", a->d, "Widths d, comma-separated [default: 16,32,64]", integer_in(1, 4096))->allow_extra_args(false);
  cmd->add_option("--steps", a->steps, "Training steps per d")->check(positive_integer)->capture_default_str();
  cmd->add_option("--batch", a->batch, "Fresh samples per step")->check(positive_integer)->capture_default_str();
  cmd->add_option("--lr", a->lr, "Peak learning rate")->check(positive_real)->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  cmd->add_flag("--paper", a->paper, "The paper's configuration: batch 65,536, 20,000 steps (needs a GPU)");
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  cmd->add_option("--out", a->out, "Write the numbers and loss curves to this HDF5 file");
  cmd->add_option("--csv", a->csv, "Write the per-d numbers to this CSV file");
  cmd->add_option("--figure", a->figure, "Draw the errors against d to STEM.svg and STEM.png (gnuplot; a STEM ending in .svg or .png is taken without it), "
                  "their numbers to STEM.csv unless --csv names a file");
  add_format_option(cmd, a->format);
  cmd->add_option("--checkpoint", a->checkpoint,
                  "Existing directory: save training state there every 500 steps and resume from it (every d's "
                  "checkpoint is checked against the options before any d trains)");
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, cmd, command_line] { return run_transfer(*a, *cmd, command_line); }};
}

}  // namespace qkvlab::cli
