// `qkvlab lnorm`: the linearity defect of Remark 6 (synthetic/lnorm.hpp) as numbers (HDF5
// and CSV) and a figure (SVG and PNG via gnuplot) in --out-dir: lnorm.h5, lnorm.csv,
// lnorm.svg, lnorm.png. Options, their validation, the files.
#include "cli/commands.hpp"
#include "cli/plot_common.hpp"
#include "cli/validators.hpp"
#include "core/limits.hpp"
#include "synthetic/lnorm.hpp"

#include <memory>

namespace qkvlab::cli {
namespace {

struct LnormArgs {
  std::string out_dir = "outputs/lnorm";
  std::uint64_t seed = 1;
  int d = 64;
  bool quiet = false;
};

int run_lnorm(const LnormArgs& a, bool out_given, const std::string& command_line) {
  require_memory("--d " + std::to_string(a.d), synthetic::lnorm_memory_bytes(a.d));
  const auto dir = prepare_out_dir(a.out_dir, out_given);
  FileList outputs;  // every file the run writes, checked before it
  for (const char* name : {"lnorm.h5", "lnorm.csv", "lnorm.svg", "lnorm.png"}) outputs.emplace_back("--out-dir", (dir / name).string());
  refuse_overlapping_files(outputs, {});
  const Progress progress{"lnorm", Progress::wanted(a.quiet)};
  const synthetic::LnormCurve r = synthetic::lnorm_curve(a.seed, a.d, progress);
  StagedFiles files;  // the numbers and the figure: all or none
  results::stage_tables_hdf5(files, dir / "lnorm.h5", {r.curve.table, r.parameters}, a.seed, command_line);
  results::stage_csv(files, dir / "lnorm.csv", r.curve.table);
  results::stage_figure(files, r.curve.figure, r.curve.table, dir / "lnorm");
  files.commit();
  return 0;
}

}  // namespace

Command add_lnorm_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<LnormArgs>();
  auto* cmd = app.add_subcommand("lnorm", "Linearity defect of the LayerNorm conjugate f against input scale (Remark 6)");
  cmd->footer("Writes lnorm.h5, lnorm.csv, lnorm.svg and lnorm.png into --out-dir (figures need gnuplot: without\n"
              "it, a warning, and the figures of an earlier run there are removed). Exit 2 on a usage error.");
  auto* out = cmd->add_option("--out-dir", a->out_dir, "Existing output directory (the default is created)")
                  ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  cmd->add_option("--d", a->d, "Width d")->check(integer_in(2, 1 << 20))->capture_default_str();
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, out, command_line] { return run_lnorm(*a, out->count() > 0, command_line); }};
}

}  // namespace qkvlab::cli
