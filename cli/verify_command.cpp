// `qkvlab verify [ID-or-prefix ...]`: runs the selected claims over the sweep
// and prints a line per claim (default), a row per check (--verbose) or one
// JSON object; optionally writes HDF5 and JUnit reports. Exit 0 if and only if every check passes and every control
// fails as expected, 1 otherwise, 2 on a usage error.
#include "cli/commands.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/usage_hint.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"
#include "theory/verify.hpp"

#include <filesystem>
#include <iostream>

namespace qkvlab::cli {
namespace {

struct VerifyArgs {
  theory::VerifyOptions options;
  std::vector<int> d, heads, layers, seq;
  std::vector<std::string> precisions;
  std::string format = "table", out, junit;
  bool list = false, quiet = false, verbose = false;
};

void print_list(std::ostream& out) {
  for (const auto& c : theory::all_claims())
    out << c.id << std::string(c.id.size() < 14 ? 14 - c.id.size() : 1, ' ') << c.statement << "\n";
}

void require_writable_dir(const std::string& path, const char* option) {
  if (path.empty()) return;
  const auto dir = std::filesystem::absolute(path).parent_path();
  if (!std::filesystem::is_directory(dir))
    throw UsageError(std::string(option) + ": directory " + dir.string() + " does not exist");
}

int run_verify(VerifyArgs& a) {
  if (a.list) {
    print_list(std::cout);
    return 0;
  }
  auto& o = a.options;
  if (!a.d.empty()) o.d = a.d;
  if (!a.heads.empty()) o.heads = a.heads;
  if (!a.layers.empty()) o.layers = a.layers;
  if (!a.seq.empty()) o.seq = a.seq;
  if (!a.precisions.empty()) {
    o.precisions.clear();
    for (const auto& p : a.precisions) o.precisions.push_back(parse_precision(p));
  }
  require_writable_dir(a.out, "--out");
  require_writable_dir(a.junit, "--junit");
  const auto claims = with_hint([&] { return theory::select_claims(o.ids); }, "see 'qkvlab verify --list'");
  const auto plan = theory::plan_verify(claims, o);
  require_memory(theory::sizes_text(o, {"--d", "--heads", "--layers", "--seq", "--trials"}, " "), plan.memory_bytes);
  apply_threads(o.threads, BlasUse::shared);
  if (Progress::wanted(a.quiet))
    o.progress = [show = Progress{"verify", true}](std::size_t done, std::size_t total) {
      show("configurations", done, total);
    };

  const auto report = theory::verify(plan, o);
  if (a.format == "json") results::write_json(std::cout, report);
  else if (a.verbose) results::print_table(std::cout, report);
  else results::print_claims(std::cout, report);
  StagedFiles files;  // --out and --junit: both or neither
  if (!a.out.empty()) results::stage_hdf5(files, a.out, report);
  if (!a.junit.empty()) results::stage_junit(files, a.junit, report);
  files.commit();
  return report.summary().ok ? 0 : 1;
}

}  // namespace

Command add_verify_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<VerifyArgs>();
  a->options.command_line = command_line;
  auto* cmd = app.add_subcommand("verify", "Check the papers' claims numerically over random weights");
  cmd->footer(
      "Claims are selected by id or prefix (qwe.thm4 selects qwe.thm4.1-4.3); none selects all.\n"
      "The table has a line per claim: checks passed/total, the largest normalized error at each precision,\n"
      "the range of the ladder slopes, controls failed as expected/total and the verdict; --verbose prints\n"
      "a row per check and precision instead.\n"
      "Each identity runs at every precision; its error normalized by u*kappa must stay within the budget,\n"
      "and each negative control must fail (rel_err >= 1e-3). Statistical checks (qwe.scale8.2, qwe.sec8.3.1.*) run\n"
      "in double and pass when |statistic - expected| <= budget * std_err (docs/claims.md).\n"
      "Exit 0 iff all checks pass and all controls fail; 2 on a usage error.");
  cmd->add_option("ids", a->options.ids, "Claim ids or prefixes (see --list)");
  cmd->add_flag("--list", a->list, "Print every claim id with a one-line statement and exit");
  cmd->add_option("--format", a->format, "Output on stdout")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--out", a->out, "Also write the results to this HDF5 file");
  cmd->add_option("--junit", a->junit, "Also write a JUnit XML report to this file");
  cmd->add_option("--seed", a->options.seed, "Seed of every random draw")->check(seed_value)->capture_default_str();
  cmd->add_option("--trials", a->options.trials, "Independent draws per configuration")
      ->check(positive_integer)
      ->capture_default_str();
  auto list_option = [&](const char* name, std::vector<int>& target, const std::vector<int>& def, const char* what,
                         const CLI::Validator& check = positive_integer) {
    std::string shown;
    for (int v : def) shown += (shown.empty() ? "" : ",") + std::to_string(v);
    cmd->add_option(name, target, std::string(what) + " [default: " + shown + "]")
        ->delimiter(',')
        ->allow_extra_args(false)
        ->check(check);
  };
  list_option("--d", a->d, theory::default_d, "Model widths d (at least 2), comma-separated", integer_in(2, INT_MAX));
  list_option("--heads", a->heads, theory::default_heads, "Head counts H (each must divide every d)");
  list_option("--layers", a->layers, theory::default_layers, "Depths L (qwe.thm4.3 defaults to 4,32)");
  list_option("--seq", a->seq, theory::default_seq, "Sequence lengths n");
  cmd->add_option("--precision", a->precisions,
                  "Precisions, comma-separated: float, double, long_double, mp50 [default: all four]")
      ->delimiter(',')
      ->allow_extra_args(false);
  add_threads_option(cmd, a->options.threads);
  cmd->add_flag("--verbose", a->verbose, "Table: a row per check and precision instead of a line per claim");
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a] { return run_verify(*a); }};
}

}  // namespace qkvlab::cli
