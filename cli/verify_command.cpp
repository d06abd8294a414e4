// `qkvlab verify [ID-or-prefix ...]`: runs the selected claims over the sweep
// and prints a line per claim (default), a row per check (--verbose) or one
// JSON object; optionally writes HDF5 and JUnit reports. Exit 0 if and only if every check passes and every control
// fails as expected, 1 otherwise, 2 on a usage error. With --checkpoint DIR the claims run on the model's own
// weights and activations (theory_lm/verify_checkpoint.hpp); with --against REF too, the two checkpoints are
// compared instead (theory_lm/compare.hpp): exit 0 when they are the same function, 1 naming what differs.
#include "cli/format_option.hpp"
#include "cli/output_paths.hpp"
#include "cli/commands.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/usage_hint.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"
#include "lm/model_files.hpp"
#include "cli/token_options.hpp"
#include "theory/verify.hpp"
#include "theory_lm/compare.hpp"
#include "theory_lm/verify_checkpoint.hpp"

#include <filesystem>
#include <iostream>
#include <sstream>
#include <tuple>

namespace qkvlab::cli {
namespace {

struct VerifyArgs {
  theory::VerifyOptions options;
  std::vector<int> d, heads, layers, seq;
  std::vector<std::string> precisions;
  std::string format = "table", out, junit;
  bool list = false, quiet = false, verbose = false;
  // --checkpoint, --against
  std::string checkpoint, against, compare = "auto";
  double tolerance = 1e-4;
  TokenOptions input;  // defaults set in add_verify_command: 2 sequences of 16 tokens
  // Options that apply only in one mode, refused elsewhere (a tightened --tolerance without --against would
  // change nothing): the sweep's sizes (not with --checkpoint), the tokens (only with --checkpoint), --against's
  // comparison (only with it), the claims' precisions, trials and row-per-check table (not with --against).
  std::vector<const CLI::Option*> sweep_options, token_options, against_options, claim_options;
};

void refuse_given(const std::vector<const CLI::Option*>& options, const std::string& why) {
  for (const CLI::Option* option : options)
    if (option->count() > 0) throw UsageError(option->get_name() + " " + why);
}

void render(const VerifyArgs& a, const results::Report& report) {
  results::render_report(std::cout, report, a.format == "json", a.verbose);
  results::write_report_files(report, a.out, a.junit);
}

std::function<void(std::size_t, std::size_t)> progress(bool quiet) {
  if (!Progress::wanted(quiet)) return {};
  return [show = Progress{"verify", true}](std::size_t done, std::size_t total) { show("configurations", done, total); };
}

// --checkpoint DIR --against REF: is DIR the same function as REF?
int run_against(VerifyArgs& a, const theory_lm::ModelWeights& weights, const lm::TokenSequences& tokens) {
  const auto& o = a.options;
  if (!o.ids.empty()) throw UsageError("--against compares two checkpoints: claim ids do not apply");
  if (!a.out.empty() || !a.junit.empty()) throw UsageError("--out and --junit write the claims' report, not --against's");
  refuse_given(a.claim_options, "applies to the claims' checks, not to --against's comparison");
  theory_lm::CompareOptions options =
      theory_lm::default_against_options(theory_lm::comparison_named(a.compare), a.checkpoint, a.against);
  if (a.against_options[1]->count() > 0) options.tolerance = a.tolerance, options.tolerance_basis = "given (--tolerance)";
  const auto r = theory_lm::compare_against(a.checkpoint, weights, a.against, tokens, tokens_value(a.input, tokens, o.seed),
                                            options, o.threads, o.command_line);
  std::cout << (a.format == "json" ? r.value.json() : r.value.text());
  return r.ok ? 0 : 1;
}

// --checkpoint DIR: the claims on the model's weights; with --against REF, the two compared.
int run_checkpoint(VerifyArgs& a) {
  refuse_given(a.sweep_options, "does not apply with --checkpoint (the model's sizes are used)");
  if (a.against.empty()) refuse_given(a.against_options, "applies only with --against REF");
  auto& o = a.options;
  apply_threads(o.threads, BlasUse::shared);
  const lm::ModelFiles files = lm::open_model(a.checkpoint);  // the tokens are checked before the weights are read
  require_memory("--sequences " + std::to_string(a.input.sequences) + " --seq-len " + std::to_string(a.input.seq_len),
                 theory_lm::activation_bytes(files.config, a.input.sequences, a.input.seq_len));
  const lm::TokenSequences tokens = read_token_sequences(a.input, a.checkpoint, o.seed, files.config, true);
  const theory_lm::ModelWeights weights = theory_lm::read_weights(files);
  if (!a.against.empty()) return run_against(a, weights, tokens);
  const auto claims = with_hint([&] { return theory::select_claims(o.ids); }, "see 'qkvlab verify --list'");
  o.progress = progress(a.quiet);
  const auto report =
      theory_lm::verify_checkpoint(a.checkpoint, weights, tokens, tokens_value(a.input, tokens, o.seed), claims, o);
  render(a, report);
  return report.summary().ok ? 0 : 1;
}

int run_verify(VerifyArgs& a) {
  if (a.list) {
    std::cout << theory::claim_list();
    return 0;
  }
  auto& o = a.options;
  for (const auto& [name, given, sweep] : {std::tuple{"--d", &a.d, &o.d}, {"--heads", &a.heads, &o.heads},
                                           {"--layers", &a.layers, &o.layers}, {"--seq", &a.seq, &o.seq}})
    if (!given->empty()) *sweep = *given;  // the sweep's lists, where given (distinct: add_list_option)
  if (!a.precisions.empty()) {
    o.precisions.clear();
    std::vector<std::string> names;  // the parsed precisions' names: double and f64 are one
    for (const auto& p : a.precisions) {
      o.precisions.push_back(parse_precision(p));  // a known name: the option's validator checked it
      names.emplace_back(precision_name(o.precisions.back()));
    }
    require_distinct("--precision", names);
  }
  require_report_files({{"--out", &a.out}, {"--junit", &a.junit}}, {a.checkpoint, a.against, a.input.corpus_directory()},
                       {{"--tokens", &a.input.tokens}, {"--text", &a.input.text}});
  if (!a.checkpoint.empty()) return run_checkpoint(a);
  if (!a.against.empty()) throw UsageError("--against needs --checkpoint DIR (the model compared with REF)");
  refuse_given(a.against_options, "applies only with --checkpoint DIR --against REF");
  refuse_given(a.token_options, "applies only with --checkpoint DIR (the claims over random weights draw their own inputs)");
  const auto claims = with_hint([&] { return theory::select_claims(o.ids); }, "see 'qkvlab verify --list'");
  const auto plan = theory::plan_verify(claims, o);
  require_memory(theory::sizes_text(o, {"--d", "--heads", "--layers", "--seq", "--trials"}, " "), plan.memory_bytes);
  apply_threads(o.threads, BlasUse::shared);
  o.progress = progress(a.quiet);
  const auto report = theory::verify(plan, o);
  render(a, report);
  return report.summary().ok ? 0 : 1;
}

// An element of --precision: a name parse_precision knows.
const CLI::Validator precision_value(
    [](std::string& name) -> std::string {
      try {
        parse_precision(name);
        return "";
      } catch (const UsageError& e) {
        return e.what();
      }
    },
    "PRECISION");

// `text` broken at spaces into lines of at most `width` characters (a longer word keeps its own line).
std::string wrapped(const std::string& text, std::size_t width = 110) {
  std::string out, line, word;
  std::istringstream words(text);
  while (words >> word) {
    if (!line.empty() && line.size() + 1 + word.size() > width) out += line + "\n", line.clear();
    line += (line.empty() ? "" : " ") + word;
  }
  return out + line + "\n";
}

}  // namespace

Command add_verify_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<VerifyArgs>();
  a->options.command_line = command_line;
  auto* cmd = app.add_subcommand("verify", "Check the papers' claims numerically over random weights");
  cmd->footer(
      std::string("Claims are selected by id or prefix (qwe.thm4 selects qwe.thm4.1-4.3); none selects all.\n"
      "The table has a line per claim: checks passed/total, the largest normalized error at each precision,\n"
      "the range of the ladder slopes, controls failed as expected/total and the verdict; --verbose prints\n"
      "a row per check and precision instead.\n"
      "Each identity runs at every precision; its error normalized by u*kappa must stay within the budget,\n"
      "and each negative control must fail (rel_err >= 1e-3). Statistical checks (qwe.scale8.2, qwe.sec8.3.1.*) run\n"
      "in double and pass when |statistic - expected| <= budget * std_err (docs/claims.md).\n") +
      wrapped("A claim runs on the configurations its statement and controls have (" + theory::least_sizes() +
              "); a sweep that gives a claim none skips it with the reason. A claim uses only the sizes it has: "
              "one without heads (layers) ignores --heads (--layers).") +
      "Exit 0 iff all checks pass and all controls fail; 1 otherwise (no check ran included); 2 on a usage error;\n"
      "3 on any other error, a report file that cannot be written included.\n"
      "\n"
      "--checkpoint DIR (qkvlab's own or a Hugging Face GPT-2/Llama/Mistral directory): the claims that apply\n"
      "to the model run on its own weights (float as stored, promoted to each precision) and on the activations\n"
      "that reach each layer (one forward pass on the CPU) over --tokens, --corpus or seeded random tokens:\n"
      "qwe.lemma3.1 on every head's (W_Q, W_K) and (W_V, W_O) pair, qwe.prop4.1 on every head, qwe.prop4.2 on\n"
      "every layer (one block per key head under GQA; RoPE: blocks in the rotations' commutant), qwe.lemma8.2\n"
      "and qwe.thm8.3 (LayerNorm, with its own epsilon and gain) or qwe.remark5 (RMSNorm's normalization R,\n"
      "with its own epsilon; the remark is about R, and the gain, a diagonal map after it, is not checked) at\n"
      "every norm. The others are skipped with the reason (listed, and in the JSON's \"skipped\").\n"
      "--against REF: is DIR the same function as REF? When the two have the same architecture (every\n"
      "config field equal), by gauge invariants (per head W_Q W_K^T, or under RoPE its parts per\n"
      "frequency, pairs of one frequency summed, and W_V W_O; every other tensor equal); otherwise (an\n"
      "`lm eliminate` output) by the function alone; always by the logits on the tokens and every layer's attention patterns on the worst sequence.\n"
      "Each relative error must be <= --tolerance (default 1e-4, about 1e3 float roundoffs, or u kappa\n"
      "where a model is an lm eliminate output of condition kappa, if larger). A function is\n"
      "compared on the given tokens only: the JSON's coverage counts the vocabulary ids and positions seen.\n"
      "Exit 1 names what differs (layer and head, the invariant and tensors, the pattern; or the logits'\n"
      "worst position).");
  cmd->add_option("ids", a->options.ids, "Claim ids or prefixes (see --list)");
  cmd->add_flag("--list", a->list, "Print every claim id with a one-line statement and exit");
  add_format_option(cmd, a->format);
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
    add_list_option(cmd, name, target, std::string(what) + " [default: " + shown + "]", check)->allow_extra_args(false);
  };
  cmd->add_option("--checkpoint", a->checkpoint, "Run the claims on this model directory (own or Hugging Face)");
  cmd->add_option("--against", a->against, "With --checkpoint: compare with this model instead (same function?)");
  cmd->add_option("--compare", a->compare, "--against: auto (gauge invariants where they apply), gauge or function")
      ->check(CLI::IsMember({"auto", "gauge", "function"}))
      ->capture_default_str();
  cmd->add_option("--tolerance", a->tolerance, "--against: largest relative error of an invariant, tensor or the logits "
                                               "(default 1e-4, or u kappa where a model is an lm eliminate output of "
                                               "condition kappa, if larger)")
      ->check(real_where("a number from 0 to below 1 (a relative error of 1 is any output, zero included)",
                         [](double x) { return x >= 0 && x < 1; }, "0..<1"));
  a->input.sequences = 2, a->input.seq_len = 16;  // every check runs at four precisions, mp50 included
  const std::size_t before_tokens = cmd->get_options().size();
  add_token_options(cmd, a->input);
  const auto options = cmd->get_options();
  a->token_options.assign(options.begin() + std::ptrdiff_t(before_tokens), options.end());
  list_option("--d", a->d, theory::default_d,
              "Model widths d (at least 2), comma-separated; claims with widths of their own (docs/claims.md: "
              "qwe.ext.* 8,16) keep them unless --d is given", integer_in(2, INT_MAX));
  list_option("--heads", a->heads, theory::default_heads,
              "Head counts H of the claims with heads (each must divide every d; a claim without heads, e.g. "
              "qwe.prop4.1, qwe.lemma8.2, ignores the list)");
  list_option("--layers", a->layers, theory::default_layers,
              "Depths L of the claims with layers (qwe.thm4.3 defaults to 4,32, resformer.eq5 to 3,6; a claim "
              "without layers ignores the list)");
  list_option("--seq", a->seq, theory::default_seq, "Sequence lengths n");
  for (const char* name : {"--d", "--heads", "--layers", "--seq"}) a->sweep_options.push_back(cmd->get_option(name));
  add_list_option(cmd, "--precision", a->precisions,
                  "Precisions, comma-separated: float, double, long_double, mp50 [default: all four]",
                  precision_value)
      ->allow_extra_args(false);
  add_threads_option(cmd, a->options.threads);
  cmd->add_flag("--verbose", a->verbose, "Table: a row per check and precision instead of a line per claim");
  a->against_options = {cmd->get_option("--compare"), cmd->get_option("--tolerance")};
  a->claim_options = {cmd->get_option("--trials"), cmd->get_option("--precision"), cmd->get_option("--verbose")};
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a] { return run_verify(*a); }};
}

}  // namespace qkvlab::cli
