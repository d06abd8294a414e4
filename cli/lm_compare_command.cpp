// `qkvlab lm compare RUN_DIR…`: final validation losses with their spread over
// seeds, and the relative training-loss curves against the baseline (lm/compare.hpp).
#include <iostream>

#include "cli/output_paths.hpp"
#include "cli/plot_common.hpp"
#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "lm/compare.hpp"
#include "results/figure.hpp"

namespace qkvlab::cli {

namespace {

struct CompareArgs {
  std::vector<std::string> runs;
  std::string csv, figure, format = "table", smoothing = "trailing", claim;
  std::string csv_option = "--csv";  // the CSV's name in messages (default_csv_beside_figure)
  lm::CompareOptions options;
};

int run_compare(const CompareArgs& a) {
  lm::CompareOptions o = a.options;
  o.smoothing = lm::parse_smoothing(a.smoothing);
  if (!a.csv.empty()) o.csv = a.csv;
  if (!a.figure.empty()) o.figure = a.figure;
  if (!a.claim.empty()) o.claim = a.claim == "less" ? results::Sense::less : results::Sense::greater;
  const std::vector<std::filesystem::path> dirs(a.runs.begin(), a.runs.end());
  for (const std::string& run : a.runs) refuse_files_in(run, {{a.csv_option.c_str(), &a.csv}, {"--figure", &a.figure}});
  FileList outputs{{a.csv_option, a.csv}};
  if (!a.figure.empty())
    for (const auto& f : results::figure_files(a.figure)) outputs.emplace_back("--figure", f.string());  // a stem already
  require_output_directories(outputs);
  refuse_overlapping_files(outputs, {});
  for (std::size_t i = 0; i < dirs.size(); ++i)
    for (std::size_t j = 0; j < i; ++j) {
      std::error_code error;
      if (std::filesystem::equivalent(dirs[i], dirs[j], error) || dirs[i].lexically_normal() == dirs[j].lexically_normal())
        throw UsageError("RUN_DIR " + a.runs[i] + " is the same run as " + a.runs[j] + ": each run counts once");
    }
  const results::Value out = lm::compare_runs(dirs, o);
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

}  // namespace

std::vector<Command> add_lm_compare_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<CompareArgs>();
  auto* cmd = lm.add_subcommand("compare", "Compare 'lm train' runs: final validation loss over seeds, relative "
                                           "training-loss curves against the baseline variant");
  cmd->add_option("RUN_DIR", a->runs, "Run directories of 'qkvlab lm train' (--out)")->required();
  cmd->add_option("--window", a->options.window, "Moving-average window of the training loss, in steps")
      ->check(integer_in(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--smoothing", a->smoothing,
                  "trailing (steps s-window+1..s) or forward (steps s..s+window-1: the released relative-loss "
                  "plots' smoothing, with --window 100)")
      ->check(CLI::IsMember({"trailing", "forward"}))
      ->capture_default_str();
  cmd->add_option("--baseline", a->options.baseline, "The runs the others are measured against: a run name (a run directory's, less -sSEED: "
                                              "resformer-l05) or a variant; each group gets the one of its family, products, "
                                              "kind of device, corpus and budget whose model is nearest its own (gqa for gqa-skipv1); "
                                              "a nearest of another model (width, depth, heads, ffn, ...) gives no verdict, "
                                              "its baseline_note naming what differs")
      ->capture_default_str();
  cmd->add_option("--claim", a->claim, "less|greater: judge each group's paired difference from the baseline as claimed "
                                       "below (above) it, by the rule of docs/figures.md (beyond Student's t quantile 0.975 standard errors over >= 2 seeds); "
                                       "adds a verdict to each group")
      ->check(CLI::IsMember({"less", "greater"}));
  cmd->add_option("--csv", a->csv, "Write the relative training-loss curves (mean and std per group, each to its own end: "
                                "empty cells past a shorter curve's) as CSV");
  cmd->add_option("--figure", a->figure, "Draw them to STEM.svg and STEM.png, their numbers to STEM.csv unless --csv names a file");
  add_format_option(cmd, a->format);
  return {{cmd, [a] {
             a->figure = figure_stem(a->figure);
             a->csv_option = default_csv_beside_figure(a->csv, a->figure);
             return run_compare(*a);
           }}};
}

}  // namespace qkvlab::cli
