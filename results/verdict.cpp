#include "results/verdict.hpp"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <cstdio>

#include "core/statistics.hpp"
#include "results/value.hpp"

namespace qkvlab::results {

namespace {

std::string outcome(const Claim& c, const Rule& r, const Element& e) {
  if (!std::isfinite(e.value)) return "inconclusive";
  if (!e.exact && ((e.replicates >= 0 && e.replicates < r.min_replicates) || !(std::isfinite(e.se) && e.se > 0)))
    return "inconclusive";
  const double d = e.value - c.reference, margin = e.exact ? 0 : se_multiple(r, e.replicates) * e.se;
  switch (c.sense) {
    case Sense::greater: return d > margin ? "agrees" : d < -margin ? "disagrees" : "inconclusive";
    case Sense::less: return d < -margin ? "agrees" : d > margin ? "disagrees" : "inconclusive";
    case Sense::within:
      return std::abs(d) + margin <= c.tolerance ? "agrees" : std::abs(d) - margin > c.tolerance ? "disagrees" : "inconclusive";
    case Sense::not_below:
      return d - margin > -c.tolerance ? "agrees" : d + margin < -c.tolerance ? "disagrees" : "inconclusive";
  }
  return "inconclusive";
}

}  // namespace

double se_multiple(const Rule& rule, std::int64_t replicates) {
  if (replicates < 2) return boost::math::quantile(boost::math::normal(), rule.confidence);
  return boost::math::quantile(boost::math::students_t(double(replicates - 1)), rule.confidence);
}

Element over_replicates(std::string label, const std::vector<double>& per_replicate) {
  const Summary s = summarize(per_replicate);
  return {std::move(label), s.value, s.se, s.count, 0};
}

std::string claimed_text(const Claim& c) {
  const std::string r = short_number(c.reference);
  switch (c.sense) {
    case Sense::greater: return "> " + r;
    case Sense::less: return "< " + r;
    case Sense::within: return "within " + short_number(c.tolerance) + " of " + r;
    case Sense::not_below: return "> " + r + " - " + short_number(c.tolerance) + " (not below it by the margin)";
  }
  return "";
}

Verdict judge(const Claim& claim, const Rule& rule, std::vector<Element> elements, std::string within_over) {
  Verdict v{"inconclusive", {}, claim, rule, std::move(within_over), std::move(elements)};
  for (const Element& e : v.elements) v.outcomes.push_back(outcome(claim, rule, e));
  const auto is = [&](const char* o) { return [o](const std::string& x) { return x == o; }; };
  if (std::any_of(v.outcomes.begin(), v.outcomes.end(), is("disagrees"))) v.verdict = "disagrees";
  else if (!v.outcomes.empty() && std::all_of(v.outcomes.begin(), v.outcomes.end(), is("agrees"))) v.verdict = "agrees";
  return v;
}

std::string Verdict::rule_text() const {
  const std::string z = "z se";
  const std::string m = claim.reference == 0  ? "the mean"
                        : claim.reference > 0 ? "mean - " + short_number(claim.reference)
                                              : "mean + " + short_number(-claim.reference);
  std::string each;
  switch (claim.sense) {
    case Sense::greater: each = "agrees when " + m + " > " + z + ", disagrees when " + m + " < -" + z; break;
    case Sense::less: each = "agrees when " + m + " < -" + z + ", disagrees when " + m + " > " + z; break;
    case Sense::within:
      each = "agrees when |" + m + "| + " + z + " <= " + short_number(claim.tolerance) + ", disagrees when |" + m +
             "| - " + z + " > " + short_number(claim.tolerance);
      break;
    case Sense::not_below:
      each = "agrees when " + m + " - " + z + " > -" + short_number(claim.tolerance) + ", disagrees when " + m + " + " + z +
             " < -" + short_number(claim.tolerance);
      break;
  }
  const std::string fewer = rule.min_replicates > 1
                                ? ", inconclusive otherwise and with fewer than " + std::to_string(rule.min_replicates) +
                                      " " + rule.over
                                : ", inconclusive otherwise";
  char quantiles[160];
  std::snprintf(quantiles, sizeof quantiles,
                ", z being Student's t quantile %s at n - 1 degrees of freedom for n %s (%.2f at 2, %.2f at 3; %.2f "
                "where n is not recorded)",
                short_number(rule.confidence).c_str(), rule.over.c_str(), se_multiple(rule, 2), se_multiple(rule, 3),
                se_multiple(rule, -1));
  const bool any_exact = std::any_of(elements.begin(), elements.end(), [](const Element& e) { return e.exact; });
  return "each element's mean and standard error (se) over " + rule.over + (rule.note.empty() ? "" : " (" + rule.note + ")") +
         ": " + each + fewer + quantiles +
         (any_exact ? "; an exact element (a count with no randomness, `exact`) is judged by its value alone (z se = 0)" : "") +
         "; the quantity disagrees when some element does, agrees when all do";
}

Value Verdict::to_value() const {
  Value q = Value::object(), list = Value::array(), se = Value::array(), within = Value::array(), n = Value::array(),
        z = Value::array(), exact = Value::array();
  bool any_exact = false;
  for (std::size_t i = 0; i < elements.size(); ++i) {
    const Element& e = elements[i];
    Value x = Value::object();
    x.set("label", e.label), x.set("value", e.value), x.set("outcome", outcomes[i]);
    list.push(x);
    se.push(e.se), within.push(e.within_se), n.push(e.replicates >= 0 ? Value(e.replicates) : Value());
    z.push(e.exact ? 0.0 : se_multiple(rule, e.replicates)), exact.push(e.exact);
    any_exact = any_exact || e.exact;
  }
  q.set("name", claim.quantity), q.set("claimed", claimed_text(claim)), q.set("elements", list);
  Value u = Value::object();
  u.set("over", rule.over);
  if (!rule.note.empty()) u.set("note", rule.note);
  u.set("confidence", rule.confidence), u.set("replicates", n), u.set("se", se), u.set("z", z);
  if (any_exact) u.set("exact", exact);
  if (!within_over.empty()) u.set("within_run_over", within_over), u.set("within_run_se", within);
  Value v = Value::object();
  v.set("claim", claim.statement), v.set("quantity", q), v.set("uncertainty", u), v.set("rule", rule_text());
  v.set("verdict", verdict);
  return v;
}

}  // namespace qkvlab::results
