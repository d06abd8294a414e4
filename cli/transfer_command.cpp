// `qkvlab transfer`: the MLP basis-transfer experiment qwe.exp8.4 (synthetic/transfer.hpp):
// for every d, train the skip MLP f(x) = x + W̃2 GELU(W̃1 x) on f*(x) = R x + V GELU(U x) and fit
// the best linear map by streaming ridge regression; report the held-out relative L2 error and
// mean cosine similarity of both. Exit 0 when the MLP's error is below the linear map's at every
// d (the paper's finding), 1 when not, 2 on a usage error (nothing written), 3 otherwise.
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "core/limits.hpp"
#include "core/parallel.hpp"
#include "engine/blas.hpp"
#include "results/figure.hpp"
#include "synthetic/transfer.hpp"

#include <algorithm>
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

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}


// The first reported value that is not finite, named, or empty.
std::string non_finite_value(const std::vector<transfer::TransferResult>& runs) {
  for (const auto& r : runs)
    for (const auto& [name, v] : {std::pair<const char*, double>{"mlp_rel_l2", r.mlp.rel_l2}, {"mlp_cosine", r.mlp.mean_cosine},
                                  {"linear_rel_l2", r.linear.rel_l2}, {"linear_cosine", r.linear.mean_cosine},
                                  {"population_linear_rel_l2", r.population_linear_rel_l2},
                                  {"final_train_loss", r.final_loss}})
      if (!std::isfinite(v)) return std::string(name) + " at d = " + std::to_string(r.d);
  return "";
}

// The memory one d implies: a training step's batch through the tape (inputs,
// hidden layer of 4d, their gradients: about 50 floats per sample and input
// coordinate), the weights with AdamW's state, the loss history, the ridge and
// evaluation chunks.
double transfer_memory_bytes(int d, int batch, std::int64_t steps) {
  return 4.0 * 50 * double(batch) * d + 4.0 * 16 * 4 * double(d) * d + 8.0 * double(steps) +
         8.0 * 8192 * 4 * 6 * double(d);
}

results::Table summary_table(const std::vector<transfer::TransferResult>& runs, const transfer::TransferConfig& c) {
  results::Table t{"transfer", {}};
  auto column = [&](const std::string& name, auto get) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(double(get(r)));
    t.columns.push_back({name, v});
  };
  using R = transfer::TransferResult;
  column("d", [](const R& r) { return r.d; });
  column("mlp_rel_l2", [](const R& r) { return r.mlp.rel_l2; });
  column("mlp_cosine", [](const R& r) { return r.mlp.mean_cosine; });
  column("linear_rel_l2", [](const R& r) { return r.linear.rel_l2; });
  column("linear_cosine", [](const R& r) { return r.linear.mean_cosine; });
  column("mlp_one_minus_cosine", [](const R& r) { return 1 - r.mlp.mean_cosine; });
  column("linear_one_minus_cosine", [](const R& r) { return 1 - r.linear.mean_cosine; });
  column("population_linear_rel_l2", [](const R& r) { return r.population_linear_rel_l2; });
  column("ridge_distance_to_population", [](const R& r) { return r.ridge_distance; });
  column("steps", [](const R& r) { return r.steps; });
  column("batch", [&](const R&) { return c.train.batch; });
  column("final_train_loss", [](const R& r) { return r.final_loss; });
  column("train_seconds", [](const R& r) { return r.train_seconds; });
  column("ridge_seconds", [](const R& r) { return r.ridge_seconds; });
  column("eval_seconds", [](const R& r) { return r.eval_seconds; });
  return t;
}

results::Table loss_table(const transfer::TransferResult& r) {
  std::vector<double> step, loss;
  for (std::size_t i = 0; i < r.loss.size(); ++i) step.push_back(double(i + 1)), loss.push_back(r.loss[i]);
  return {"loss_d" + std::to_string(r.d), {{"step", step}, {"loss", loss}}};
}

void print_table(const std::vector<transfer::TransferResult>& runs) {
  std::printf("%6s  %11s  %10s  %14s  %13s  %7s  %9s\n", "d", "MLP rel L2", "MLP cosine", "linear rel L2",
              "linear cosine", "steps", "time (s)");
  for (const auto& r : runs)
    std::printf("%6d  %11.5f  %10.6f  %14.5f  %13.6f  %7lld  %9.1f\n", r.d, r.mlp.rel_l2, r.mlp.mean_cosine,
                r.linear.rel_l2, r.linear.mean_cosine, static_cast<long long>(r.steps),
                r.train_seconds + r.ridge_seconds + r.eval_seconds);
}

void print_json(const std::vector<transfer::TransferResult>& runs, const transfer::TransferConfig& c,
                const std::string& device, const std::string& command_line, bool beats) {
  std::cout << "{\"experiment\": \"qwe.exp8.4\", \"seed\": " << c.seed
            << ", \"command_line\": " << json_quote(command_line) << ", \"device\": \"" << device
            << "\", \"steps\": " << c.train.steps << ", \"batch\": " << c.train.batch
            << ", \"lr\": " << json_number(c.train.lr) << ", \"ridge_samples\": " << c.ridge.samples
            << ", \"ridge_lambda\": " << json_number(c.ridge.lambda) << ", \"eval_samples\": " << c.eval_samples
            << ", \"mlp_beats_linear\": " << (beats ? "true" : "false") << ", \"results\": [";
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const auto& r = runs[k];
    std::cout << (k ? ", " : "") << "{\"d\": " << r.d << ", \"mlp_rel_l2\": " << json_number(r.mlp.rel_l2)
              << ", \"mlp_cosine\": " << json_number(r.mlp.mean_cosine)
              << ", \"linear_rel_l2\": " << json_number(r.linear.rel_l2)
              << ", \"linear_cosine\": " << json_number(r.linear.mean_cosine)
              << ", \"population_linear_rel_l2\": " << json_number(r.population_linear_rel_l2)
              << ", \"steps\": " << r.steps << ", \"resumed_from\": " << r.resumed_from
              << ", \"final_train_loss\": " << json_number(r.final_loss)
              << ", \"train_seconds\": " << json_number(r.train_seconds)
              << ", \"ridge_seconds\": " << json_number(r.ridge_seconds)
              << ", \"eval_seconds\": " << json_number(r.eval_seconds) << "}";
  }
  std::cout << "]}\n";
}

void stage_transfer_figure(StagedFiles& files, const results::Table& t, const std::string& figure) {
  std::filesystem::path stem(figure);
  if (stem.extension() == ".svg" || stem.extension() == ".png") stem.replace_extension();
  results::Figure fig{"MLP basis transfer (qwe.exp8.4): held-out error against d", "d",
                      "relative L2 error, 1 - mean cosine", true, true, {}, {"set key outside bottom center horizontal"}};
  fig.series.push_back({"d", "mlp_rel_l2", "", "MLP rel. L2", "linespoints pt 7 lw 2 lc rgb '#c03020'"});
  fig.series.push_back({"d", "linear_rel_l2", "", "linear rel. L2", "linespoints pt 5 lw 2 lc rgb '#3060b0'"});
  fig.series.push_back({"d", "mlp_one_minus_cosine", "", "MLP 1 - cos", "linespoints pt 6 dt 2 lc rgb '#c03020'"});
  fig.series.push_back(
      {"d", "linear_one_minus_cosine", "", "linear 1 - cos", "linespoints pt 4 dt 2 lc rgb '#3060b0'"});
  results::stage_figure(files, fig, t, stem);
}

int run_transfer(TransferArgs a, const CLI::App& cmd, const std::string& command_line) {
  require_device(a.device);
  if (a.paper) {
    if (cmd.count("--steps") == 0) a.steps = 20000;
    if (cmd.count("--batch") == 0) a.batch = 65536;
    if (cmd.count("--d") == 0) a.d = kPaperD;
  }
  if (a.d.empty()) a.d = kDefaultD;
  if (!(a.lr > 0) || !std::isfinite(a.lr)) throw UsageError("--lr: must be a positive number");
  if (a.steps < 1) throw UsageError("--steps: must be at least 1, got " + std::to_string(a.steps));
  if (!a.checkpoint.empty() && !std::filesystem::is_directory(a.checkpoint))
    throw UsageError("--checkpoint: directory " + a.checkpoint + " does not exist");
  for (const std::string* path : {&a.out, &a.csv, &a.figure}) {
    if (path->empty()) continue;
    const auto parent = std::filesystem::path(*path).parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent))
      throw UsageError("output directory " + parent.string() + " does not exist");
  }
  for (int d : a.d)
    require_memory("--d " + std::to_string(d) + " --batch " + std::to_string(a.batch) + " --steps " +
                       std::to_string(a.steps),
                   transfer_memory_bytes(d, a.batch, a.steps));
  // OpenBLAS follows --threads (up to the hardware threads: more only oversubscribes the cores).
  const int threads = apply_threads(a.threads, BlasUse::shared);

  transfer::TransferConfig c;
  c.seed = a.seed;
  c.threads = threads;
  c.train.steps = a.steps;
  c.train.batch = a.batch;
  c.train.lr = a.lr;
  c.train.device = a.device == Device::cuda ? engine::Device::cuda : engine::Device::cpu;
  c.train.checkpoint_dir = a.checkpoint;

  const Progress progress{"transfer", Progress::wanted(a.quiet)};
  std::vector<transfer::TransferResult> runs;
  for (int d : a.d) {
    const std::int64_t every = std::max<std::int64_t>(1, a.steps / 200);
    try {
      runs.push_back(transfer::run_transfer(d, c, [&](std::int64_t step, double loss) {
        if (step % every == 0 || step == a.steps)
          progress("d = " + std::to_string(d) + ", loss " + number(loss) + ", step", std::size_t(step),
                   std::size_t(a.steps));
      }));
    } catch (const transfer::CheckpointError& e) {
      throw UsageError(std::string("--checkpoint: ") + e.what());
    }
  }
  bool beats = true;
  for (const auto& r : runs) beats = beats && r.mlp.rel_l2 < r.linear.rel_l2;

  const results::Table summary = summary_table(runs, c);
  StagedFiles files;  // --out, --csv and --figure: all or none
  if (!a.out.empty()) {
    std::vector<results::Table> tables{summary};
    for (const auto& r : runs) tables.push_back(loss_table(r));
    results::stage_tables_hdf5(files, a.out, tables, a.seed, command_line);
  }
  std::filesystem::path csv = a.csv;
  if (csv.empty() && !a.figure.empty()) csv = std::filesystem::path(a.figure).replace_extension(".csv");
  if (!csv.empty()) results::stage_csv(files, csv, summary);
  if (!a.figure.empty()) stage_transfer_figure(files, summary, a.figure);
  files.commit();

  const std::string device = a.device == Device::cuda ? "cuda" : "cpu";
  if (a.format == "json") print_json(runs, c, device, command_line, beats);
  else {
    std::printf("qwe.exp8.4 MLP basis transfer: seed %llu, device %s, batch %d, lr %s, ridge on %lld samples "
                "(lambda %s), %lld held-out samples\n",
                static_cast<unsigned long long>(a.seed), device.c_str(), a.batch, number(a.lr).c_str(),
                static_cast<long long>(c.ridge.samples), number(c.ridge.lambda).c_str(),
                static_cast<long long>(c.eval_samples));
    print_table(runs);
    std::printf(beats ? "MLP error below the best linear map at every d\n"
                      : "MLP error NOT below the linear map at every d\n");
  }
  // A reported value that is not finite is a numerical failure, whatever the comparison says.
  if (const std::string bad = non_finite_value(runs); !bad.empty()) {
    std::cout.flush();
    throw NumericalError("transfer: a reported value is not finite (" + bad + ")");
  }
  return beats ? 0 : 1;
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
  cmd->add_option("--d", a->d, "Widths d, comma-separated [default: 16,32,64]")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(integer_in(1, 4096));
  cmd->add_option("--steps", a->steps, "Training steps per d")->check(positive_integer)->capture_default_str();
  cmd->add_option("--batch", a->batch, "Fresh samples per step")->check(positive_integer)->capture_default_str();
  cmd->add_option("--lr", a->lr, "Peak learning rate")->check(positive_real)->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  cmd->add_flag("--paper", a->paper, "The paper's configuration: batch 65,536, 20,000 steps (needs a GPU)");
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  cmd->add_option("--out", a->out, "Write the numbers and loss curves to this HDF5 file");
  cmd->add_option("--csv", a->csv, "Write the per-d numbers to this CSV file");
  cmd->add_option("--figure", a->figure, "Draw the errors against d to FILE.svg and FILE.png (gnuplot)");
  cmd->add_option("--format", a->format, "Output on stdout")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  cmd->add_option("--checkpoint", a->checkpoint,
                  "Existing directory: save training state there every 500 steps and resume from it");
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, cmd, command_line] { return run_transfer(*a, *cmd, command_line); }};
}

}  // namespace qkvlab::cli
