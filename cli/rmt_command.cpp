// `qkvlab rmt`: the curves behind §8.3.1 (synthetic/rmt.hpp) as numbers (HDF5 and CSV) and
// figures (SVG and PNG via gnuplot) in --out-dir: options, their validation, the files.
#include "cli/commands.hpp"
#include "cli/plot_common.hpp"
#include "cli/validators.hpp"
#include "core/limits.hpp"
#include "synthetic/rmt.hpp"

#include <memory>

namespace qkvlab::cli {
namespace {

struct RmtArgs {
  std::string out_dir = "outputs/rmt";
  std::uint64_t seed = 1;
  int d_max = 2048;
  bool quiet = false;
};

int run_rmt(const RmtArgs& a, bool out_given, const std::string& command_line) {
  require_memory("--d-max " + std::to_string(a.d_max), synthetic::rmt_memory_bytes(a.d_max));
  const auto dir = prepare_out_dir(a.out_dir, out_given);
  FileList outputs{{"--out-dir", (dir / "rmt.h5").string()}};  // every file the run writes, checked before it
  for (const std::string& name : synthetic::kRmtPanels)
    for (const char* extension : {".csv", ".svg", ".png"}) outputs.emplace_back("--out-dir", (dir / (name + extension)).string());
  refuse_overlapping_files(outputs, {});
  const Progress progress{"rmt", Progress::wanted(a.quiet)};
  const synthetic::RmtCurves curves = synthetic::rmt_curves(a.seed, a.d_max, progress);
  // Every file staged, then all renamed: the set appears whole or not at all.
  StagedFiles files;
  results::stage_tables_hdf5(files, dir / "rmt.h5", curves.tables(), a.seed, command_line);
  for (const auto& p : curves.panels) results::stage_csv(files, dir / (p.table.name + ".csv"), p.table);
  std::vector<std::filesystem::path> stems;
  for (const auto& p : curves.panels) stems.push_back(dir / p.table.name);
  results::stage_figures(files, curves.panels, stems);  // without gnuplot: the older figures removed, a warning
  files.commit();
  return 0;
}

}  // namespace

Command add_rmt_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<RmtArgs>();
  auto* cmd = app.add_subcommand("rmt", "Curves of the metric defect and the random-matrix picture (§8.3.1)");
  cmd->footer(
      "Writes rmt.h5 and, per panel, NAME.csv, NAME.svg and NAME.png into --out-dir, for NAME in\n"
      "defect_scale, mp_histogram, edge_excess, m2_spread (figures need gnuplot: without it, a warning, and\n"
      "the figures of an earlier run there are removed). Exit 2 on a usage error.");
  auto* out = cmd->add_option("--out-dir", a->out_dir, "Existing output directory (the default is created)")
                  ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  cmd->add_option("--d-max", a->d_max, "Largest d of the sweeps (64, 128, ... up to it)")
      ->check(integer_in(64, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, out, command_line] { return run_rmt(*a, out->count() > 0, command_line); }};
}

}  // namespace qkvlab::cli
