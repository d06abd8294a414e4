// `qkvlab icl lemmas`: the Appendix A statements as Monte Carlo checks under W_0 = 0 and
// W_0 = cI side by side (theory/skipv1_lemmas_report.hpp: the run and its rendering):
// options, their validation, the output.
#include "cli/commands.hpp"
#include "cli/icl_task_options.hpp"
#include "core/limits.hpp"
#include "theory/skipv1_lemmas_report.hpp"

#include <iostream>
#include <map>
#include <memory>

namespace qkvlab::cli {
namespace {

struct LemmaArgs : TaskArgs {
  double w0_scale = 0;  // when --w0-scale is not given: the theorem's scale (icl::theorem_w0_scale)
  const CLI::Option* w0_scale_option = nullptr;
  int a = -1;
  std::string form = "posterior";
};

const std::map<std::string, icl::Form> kForms{
    {"posterior", icl::Form::posterior_mean}, {"ridge", icl::Form::ridge}, {"ridge-sigma-typo", icl::Form::ridge_sigma_typo}};

int run_lemmas(const LemmaArgs& a, const std::string& command_line) {
  apply_threads(a.threads, BlasUse::shared);
  require_memory("--d " + std::to_string(a.d) + " --n " + std::to_string(a.n) + " --prompts " + std::to_string(a.prompts),
                 icl::lemmas_memory_bytes(icl::Task{a.d, a.n, 0.0, {}}, icl::LemmaOptions{a.prompts, a.seed, a.threads}));
  const icl::Task zero = make_task(a, MatD::Zero(a.d, a.d));
  // As verify's --d: at d = 1 Lemma 3's isotropy is automatic, and the default a = floor(d/2) is 0, where
  // (refused by --a's check) the random weights' map U is 0, so Lemma 2 is vacuous (its identity 0/0).
  if (a.d < 2)
    throw UsageError("--d: icl lemmas needs d >= 2 (at d = 1 Lemma 3's isotropy holds automatically), got " + std::to_string(a.d));
  if (a.a > a.d) throw UsageError("--a: must be at most d = " + std::to_string(a.d));
  const double c = a.w0_scale_option->count() > 0 ? a.w0_scale : icl::theorem_w0_scale(zero);
  const icl::TwoPriorLemmas r =
      icl::check_lemmas_two_priors(zero, c, icl::LemmaOptions{a.prompts, a.seed, a.threads, a.a, kForms.at(a.form)});
  std::cout << (a.format == "json" ? icl::lemmas_json(r, command_line).json_line() : icl::lemmas_text(r));
  return 0;
}

}  // namespace

std::vector<Command> add_icl_lemmas_commands(CLI::App& icl, const std::string& command_line) {
  auto l = std::make_shared<LemmaArgs>();
  l->prompts = 20000;
  auto* lemmas = icl.add_subcommand("lemmas", "Lemmas 1-4 and Theorem 2 of Appendix A as Monte Carlo checks, two priors");
  add_task_options(lemmas, *l);
  lemmas->get_option("--d")->description("Dimension d of x, y and every weight; at least 2 here (at d = 1 Lemma 3 is automatic)");
  l->w0_scale_option =
      lemmas->add_option("--w0-scale", l->w0_scale,
                         "c of the second prior's mean W_0 = c I, run beside W_0 = 0 (default 3 sqrt(d) sigma, or 1 at "
                         "sigma = 0: sigma_d(W_0) = |c| > 2 sqrt(d) sigma)")
          ->check(finite_real);
  lemmas->add_option("--form", l->form, "W_D used: posterior (the Bayes posterior mean), ridge (the paper's), ridge-sigma-typo (sigma I)")
      ->check(CLI::IsMember({"posterior", "ridge", "ridge-sigma-typo"}))
      ->capture_default_str();
  lemmas->add_option("--a", l->a, "Copy width a of the random weights, 1 <= a <= d (default floor(d/2))")->check(integer_in(1, 4096));
  lemmas->footer(
      "Each row is a per-prompt statistic whose mean is 0 when the statement holds (theory/skipv1_lemmas.hpp):\n"
      "mean +- standard error, and 'holds' when |mean| <= 4 SE. Columns: W_0 = 0 and W_0 = c I.\n"
      "The checks use the posterior mean W_D unless --form says otherwise; the same ids run in 'qkvlab verify skipv1' with negative controls.\n"
      "Defaults: d 4 (d >= 2), n 16, sigma 0.5, 20000 prompts per check, seed 1.\n"
      "Exit status: 0 when the checks ran (the table reports; it does not assume the paper is right),\n"
      "2 usage error, 3 a numerical failure.");
  return {{lemmas, [l, command_line] { return run_lemmas(*l, command_line); }}};
}

}  // namespace qkvlab::cli
