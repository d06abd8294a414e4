#include "synthetic/absorb_fit_check.hpp"

#include "core/linalg.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace qkvlab::synthetic {

const char* pair_kind_name(PairKind k) {
  return k == PairKind::representable ? "representable" : k == PairKind::generic ? "generic" : "given";
}

namespace {

std::string number(double x, int digits = 3) {
  std::ostringstream s;
  s.precision(digits);
  s << x;
  return s.str();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<double> rel_errs(const FitResult& f) {
  std::vector<double> v;
  for (const auto& r : f.restarts) v.push_back(r.rel_err);
  return v;
}

int restarts_within(const FitResult& f) {
  int n = 0;
  for (const auto& r : f.restarts) n += r.rel_err <= optimizer_precision;
  return n;
}

MatD skip_matrix(const AbsorbFitConfig& c, std::uint64_t seed) {
  if (!c.generic_skip) return MatD::Identity(c.d, c.d);
  Rng rng(seed, "absorb fit/R");
  return draw_basis(rng, c.d, 1 / std::sqrt(double(c.d)));
}

SkipNetwork pair_of(const AbsorbFitConfig& c, PairKind kind, std::uint64_t seed) {
  if (kind == PairKind::given) return *c.given;
  Rng rng(seed, std::string("absorb fit/pair/") + pair_kind_name(kind));
  const MatD R = skip_matrix(c, seed);
  return kind == PairKind::representable ? representable_network(rng, c.d, c.m, R, c.min_sine)
                                         : generic_network(rng, c.d, c.m, R, c.min_sine);
}

}  // namespace

std::string pair_failure(PairKind kind, std::uint64_t seed, const AbsorbDecision& decision, const FitResult& fit) {
  const double best = fit.best_fit().rel_err;
  const Verdict expected = kind == PairKind::representable ? Verdict::yes
                           : kind == PairKind::generic     ? Verdict::no
                                                           : decision.verdict;
  const std::string who = std::string(pair_kind_name(kind)) + " seed " + std::to_string(seed) + ": ";
  if (decision.verdict != expected)
    return who + "decision " + verdict_name(decision.verdict) + ", expected " + verdict_name(expected);
  if (expected == Verdict::yes && !(best <= optimizer_precision))
    return who + "best rel_err " + number(best) + " > precision " + number(optimizer_precision) +
           " on a representable pair";
  if (expected == Verdict::no && !(best >= generic_floor))
    return who + "best rel_err " + number(best) + " < floor " + number(generic_floor) + " on a non-representable pair";
  if (expected == Verdict::undecided) return who + "decision undecided: " + decision.reason;
  return "";
}

double absorb_fit_memory_bytes(const FitConfig& c, int d, int m) {
  return 8.0 * (double(c.batch) * (6.0 * d + 8.0 * m) + double(c.select_samples + c.heldout_samples) * (2.0 * m + 6.0 * d) * 2);
}

AbsorbFitResult run_absorb_fit(const AbsorbFitConfig& c, const std::function<void(std::size_t, std::size_t)>& progress) {
  AbsorbFitResult r{c, {}, false};
  const std::size_t total = c.kinds.size() * std::size_t(c.seeds);
  for (int s = 0; s < c.seeds; ++s) {
    const std::uint64_t seed = c.seed + std::uint64_t(s);
    for (PairKind kind : c.kinds) {
      if (progress) progress(r.fits.size(), total);
      const SkipNetwork f = pair_of(c, kind, seed);
      PairFit p{kind, seed, decide_absorption(f.W_1, f.W_2, f.R, c.limits),
                fit_skipless(f, c.fit, seed, std::string("absorb fit/") + pair_kind_name(kind)), ""};
      p.failure = pair_failure(kind, seed, p.decision, p.fit);
      r.fits.push_back(std::move(p));
    }
  }
  if (progress) progress(total, total);
  r.holds = std::all_of(r.fits.begin(), r.fits.end(), [](const PairFit& p) { return p.holds(); });
  return r;
}

std::string absorb_fit_text(const AbsorbFitResult& r) {
  const auto& a = r.config;
  const auto& c = a.fit;
  std::ostringstream o;
  o << "qwe.cor8.4.1 (empirical): fit g(x) = W~2 relu(W~1 x) (width m, no skip) to f(x) = R x + W2 relu(W1 x)\n"
    << "d = " << a.d << ", m = " << a.m << ", R = " << (a.generic_skip ? "generic (seeded)" : "I")
    << ", restarts = " << c.restarts << ", steps = " << c.steps << ", batch = " << c.batch << ", lr = " << c.lr
    << " (warmup + cosine to " << c.lr * c.lr_floor << "), double";
  if (!a.given) o << ", min sine " << a.min_sine;  // W1 drawn
  o << "\n"
    << "seeds " << a.seed << ".." << a.seed + std::uint64_t(a.seeds) - 1
    << "; rel_err = sqrt(sum|g-f|^2 / sum|f|^2) on " << c.heldout_samples
    << " held-out x ~ N(0, I); best = lowest loss on " << c.select_samples << " other samples\n"
    << "precision " << optimizer_precision << " (exact fits end far below it), floor " << generic_floor
    << " (the negative-control margin)\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-14s %5s %-9s %12s %12s %12s %12s %8s %8s  %s\n", "pair", "seed", "decision",
                "best_rel_err", "min", "median", "max", "exact", "matched", "ok");
  o << line;
  for (const auto& p : r.fits) {
    const auto v = rel_errs(p.fit);
    std::snprintf(line, sizeof line, "%-14s %5" PRIu64 " %-9s %12.3e %12.3e %12.3e %12.3e %4d/%-3d %4d/%-3d  %s\n",
                  pair_kind_name(p.kind), p.seed, verdict_name(p.decision.verdict), p.fit.best_fit().rel_err,
                  *std::min_element(v.begin(), v.end()), median(v), *std::max_element(v.begin(), v.end()),
                  restarts_within(p.fit), int(v.size()), p.fit.best_fit().matched_units, a.m, p.holds() ? "yes" : "NO");
    o << line;
  }
  o << "\n(exact: restarts with rel_err <= " << optimizer_precision
    << "; matched: rows of the best W~1 collinear with rows of W1)\n";
  for (const auto& p : r.fits)
    if (!p.holds()) o << "broken: " << p.failure << "\n";
  o << "verdict: " << (r.holds ? "holds" : "FAILS");
  if (a.given)
    o << ": the given pair is fitted as its decision says (best rel_err <= " << optimizer_precision
      << " when yes, >= " << generic_floor << " when no; undecided fails) for every seed\n";
  else
    o << ": representable pairs are fitted to optimizer precision (best rel_err <= " << optimizer_precision
      << ") and generic ones stay above the floor (best rel_err >= " << generic_floor << ") for every seed\n";
  return o.str();
}

results::Value absorb_fit_json(const AbsorbFitResult& r, const std::string& command_line) {
  using results::Value;
  const auto& a = r.config;
  const auto& c = a.fit;
  Value o = Value::object();
  o.set("claim", "qwe.cor8.4.1");
  o.set("seed", a.seed);
  o.set("seeds", a.seeds);
  o.set("command_line", command_line);
  o.set("d", a.d);
  o.set("m", a.m);
  o.set("skip", a.generic_skip ? "generic" : "identity");
  o.set("min_sine", a.min_sine);
  o.set("restarts", c.restarts);
  o.set("steps", c.steps);
  o.set("batch", c.batch);
  o.set("lr", c.lr);
  o.set("precision", optimizer_precision);
  o.set("floor", generic_floor);
  o.set("holds", r.holds);
  Value fits = Value::array();
  for (const auto& p : r.fits) {
    Value f = Value::object();
    f.set("pair", pair_kind_name(p.kind));
    f.set("seed", p.seed);
    f.set("decision", verdict_name(p.decision.verdict));
    f.set("decision_reason", p.decision.reason);
    f.set("best", std::uint64_t(p.fit.best));
    f.set("best_rel_err", p.fit.best_fit().rel_err);
    f.set("holds", p.holds());
    f.set("failure", p.failure);
    Value restarts = Value::array();
    for (const auto& fit : p.fit.restarts) {
      Value trace = Value::array();
      for (std::size_t t = 0; t < fit.trace_steps.size(); ++t)
        trace.push(Value::array({Value(fit.trace_steps[t]), Value(fit.trace_loss[t])}));
      Value restart = Value::object();
      restart.set("loss", fit.loss);
      restart.set("rel_err", fit.rel_err);
      restart.set("matched_units", fit.matched_units);
      restart.set("trace", std::move(trace));
      restarts.push(std::move(restart));
    }
    f.set("restarts", std::move(restarts));
    fits.push(std::move(f));
  }
  o.set("fits", std::move(fits.break_items("\n ", "\n")), "\n");
  return o;
}

std::vector<results::Table> absorb_fit_tables(const AbsorbFitResult& r) {
  // Column 1 of each table is the seed, held exactly (uint64); the others are doubles.
  const results::Column seed_column{"seed", {}, true, {}};
  results::Table summary{"fits", {{"pair", {}}, seed_column, {"decision", {}}, {"best", {}}, {"best_rel_err", {}}, {"holds", {}}}};
  results::Table restarts{"restarts", {{"pair", {}}, seed_column, {"restart", {}}, {"loss", {}}, {"rel_err", {}}, {"matched_units", {}}}};
  results::Table traces{"traces", {{"pair", {}}, seed_column, {"restart", {}}, {"step", {}}, {"loss", {}}}};
  const auto add_row = [](results::Table& t, std::uint64_t seed, const std::vector<double>& row) {
    t.columns[1].integers.push_back(seed);
    for (std::size_t j = 0; j < row.size(); ++j) t.columns[j < 1 ? j : j + 1].values.push_back(row[j]);
  };
  for (const auto& p : r.fits) {
    const double kind = double(int(p.kind));
    add_row(summary, p.seed, {kind, double(int(p.decision.verdict)), double(p.fit.best), p.fit.best_fit().rel_err,
                              p.holds() ? 1.0 : 0.0});
    for (std::size_t i = 0; i < p.fit.restarts.size(); ++i) {
      const auto& f = p.fit.restarts[i];
      add_row(restarts, p.seed, {kind, double(i), f.loss, f.rel_err, double(f.matched_units)});
      for (std::size_t t = 0; t < f.trace_steps.size(); ++t)
        add_row(traces, p.seed, {kind, double(i), double(f.trace_steps[t]), f.trace_loss[t]});
    }
  }
  return {summary, restarts, traces};
}

}  // namespace qkvlab::synthetic
