#include "theory/skipv1_lemmas_report.hpp"

#include <cmath>
#include <cstdio>

namespace qkvlab::icl {

bool TwoPriorLemmas::theorem_condition_holds() const {
  return std::abs(w0_scale) > 2 * std::sqrt(double(zero.d)) * zero.sigma;
}

TwoPriorLemmas check_lemmas_two_priors(const Task& zero, double w0_scale, const LemmaOptions& options) {
  TwoPriorLemmas r{zero, w0_scale, options, {}, {}};
  Task scaled = zero;
  scaled.W0 = r.w0_scale * MatD::Identity(zero.d, zero.d);
  validate(scaled);
  r.w0_zero = check_all_lemmas(zero, options);
  r.w0_scaled = check_all_lemmas(scaled, options);
  return r;
}

std::string lemmas_text(const TwoPriorLemmas& r) {
  const Task& t = r.zero;
  const double c = r.w0_scale;
  char line[512];
  std::string o;
  std::snprintf(line, sizeof line, "icl lemmas: d=%d n=%d sigma=%g prompts=%ld seed=%llu; a statement holds when |mean| <= %g SE\n",
                t.d, t.n, t.sigma, r.options.prompts, static_cast<unsigned long long>(r.options.seed), lemma_budget);
  o += line;
  std::snprintf(line, sizeof line, "W_0 = c I with c = %g: sigma_d(W_0) = |c| %s 2 sqrt(d) sigma = %g; W_D: %s\n", c,
                r.theorem_condition_holds() ? ">" : "<=", 2 * std::sqrt(double(t.d)) * t.sigma, form_name(r.options.form));
  o += line;
  char head1[64];
  std::snprintf(head1, sizeof head1, "W_0 = %g I", c);
  std::snprintf(line, sizeof line, "%-15s %-13s  %-32s  %-32s\n", "statement", "variant", "W_0 = 0", head1);
  o += line;
  auto cell = [](const LemmaResult& x) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%10.3g +- %-8.2g %-12s", x.residual.value, x.residual.se, x.holds ? "holds" : "DOES NOT");
    return std::string(buf);
  };
  for (std::size_t k = 0; k < r.w0_zero.size(); ++k) {
    std::snprintf(line, sizeof line, "%-15s %-13s  %-32s  %-32s\n", r.w0_zero[k].id.c_str(), r.w0_zero[k].variant.c_str(),
                  cell(r.w0_zero[k]).c_str(), cell(r.w0_scaled[k]).c_str());
    o += line;
  }
  return o;
}

results::Value lemmas_json(const TwoPriorLemmas& r, const std::string& command_line) {
  using results::Value;
  auto lemma = [](const LemmaResult& x) {
    Value v = Value::object();
    v.set("residual", x.residual.value);
    v.set("residual_se", x.residual.se);
    v.set("z", x.z);
    v.set("holds", x.holds);
    v.set("note", x.note);
    return v;
  };
  Value o = Value::object();
  o.set("d", r.zero.d);
  o.set("n", r.zero.n);
  o.set("sigma", r.zero.sigma);
  o.set("prompts", std::int64_t(r.options.prompts));
  o.set("seed", r.options.seed);
  o.set("budget", lemma_budget);
  o.set("w0_scale", r.w0_scale);
  o.set("theorem_condition_holds", r.theorem_condition_holds());
  o.set("form", form_name(r.options.form));
  o.set("command_line", command_line);
  Value checks = Value::array();
  for (std::size_t k = 0; k < r.w0_zero.size(); ++k) {
    Value c = Value::object();
    c.set("id", r.w0_zero[k].id);
    c.set("variant", r.w0_zero[k].variant);
    c.set("statement", r.w0_zero[k].statement);
    c.set("w0_zero", lemma(r.w0_zero[k]));
    c.set("w0_scaled", lemma(r.w0_scaled[k]));
    checks.push(std::move(c));
  }
  o.set("checks", std::move(checks.break_items("\n  ")), "\n ");
  return o;
}

}  // namespace qkvlab::icl
