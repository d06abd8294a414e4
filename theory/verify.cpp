#include "theory/verify.hpp"

#include "core/error_model.hpp"
#include "core/errors.hpp"
#include "core/limits.hpp"
#include "core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

namespace qkvlab::theory {

std::vector<const Claim*> select_claims(const std::vector<std::string>& ids) {
  std::vector<const Claim*> selected;
  for (const auto& arg : ids) {
    bool matched = false;
    for (const auto& c : all_claims())
      if (c.id.starts_with(arg)) matched = true;
    if (!matched) throw UsageError("unknown claim id or prefix '" + arg + "'");
  }
  for (const auto& c : all_claims()) {
    bool wanted = ids.empty();
    for (const auto& arg : ids) wanted = wanted || c.id.starts_with(arg);
    if (wanted) selected.push_back(&c);
  }
  return selected;
}

namespace {

void require_positive(const std::optional<std::vector<int>>& list, const char* option) {
  if (!list) return;
  if (list->empty()) throw UsageError(std::string("the list of ") + option + " is empty");
  for (int v : *list)
    if (v <= 0) throw UsageError(std::string(option) + " must be positive, got " + std::to_string(v));
}

const std::vector<int>& pick(const std::optional<std::vector<int>>& given, const std::vector<int>& claim_default,
                             const std::vector<int>& global_default) {
  if (given) return *given;
  return claim_default.empty() ? global_default : claim_default;
}

// Bytes of one configuration at its widest scalar, up to a constant: per layer
// the weights, their reparametrized copies and bases (≈ 40 d²), activations
// (≈ 40 n d) and attention scores (4 H n²); the bases' inverses and LU (≈ 20 d²).
double configuration_bytes(const SweepPoint& c, double scalar_bytes) {
  const double d = c.d, n = c.seq, L = c.layers, H = c.heads;
  return scalar_bytes * (40 * L * d * d + 20 * d * d + 40 * L * n * d + 4 * L * H * n * n);
}

// Positive sizes and trials, a precision, d >= 2 and H | d for the selected claims.
void check_sizes(const std::vector<const Claim*>& claims, const VerifyOptions& o) {
  require_positive(o.d, "model widths d");
  require_positive(o.heads, "head counts H");
  require_positive(o.layers, "depths L");
  require_positive(o.seq, "sequence lengths n");
  if (o.trials <= 0) throw UsageError("trials must be positive, got " + std::to_string(o.trials));
  if (o.precisions.empty()) throw UsageError("the list of precisions is empty");
  if (o.threads < 0) throw UsageError("threads must be non-negative, got " + std::to_string(o.threads));
  if (o.threads > max_threads)
    throw UsageError("threads must be at most " + std::to_string(max_threads) + ", got " + std::to_string(o.threads));
  for (const Claim* c : claims)
    for (int d : pick(o.d, c->defaults.d, default_d)) {
      if (d < 2) throw UsageError("d must be at least 2, got " + std::to_string(d));
      if (!c->dims.heads) continue;
      for (int h : pick(o.heads, c->defaults.heads, default_heads))
        if (d % h != 0)
          throw UsageError("d=" + std::to_string(d) + " is not divisible by heads=" + std::to_string(h) +
                           " (needed by " + c->id + ")");
    }
}

// Why configuration `c` is not one of a claim's (Dims: its least sizes), or "" when it is.
std::string left_out(const Dims& dims, const SweepPoint& c) {
  const int width = c.d / c.heads;
  if (c.d < dims.min_d) return "it needs d >= " + std::to_string(dims.min_d) + ": " + dims.why_d;
  if (c.layers < dims.min_layers)
    return *dims.why_layers == '\0' ? "its statement needs L >= " + std::to_string(dims.min_layers) + " layers"
                                   : "it needs L >= " + std::to_string(dims.min_layers) + " layers: " + dims.why_layers;
  if (c.seq < dims.min_seq)
    return "its controls need n >= " + std::to_string(dims.min_seq) +
           " positions (one position attends only to itself, whatever the scores)";
  if (width < dims.min_head_width)
    return "it needs a head width d/H >= " + std::to_string(dims.min_head_width) +
           (*dims.why_head_width == '\0' ? "" : std::string(": ") + dims.why_head_width);
  if (dims.even_head_width && width % 2 != 0) return "it needs an even head width d/H (RoPE rotates pairs)";
  return "";
}

// A claim's configurations under the options, variants included, at trial 0; each reason for leaving
// one out (left_out) is added once to `left_out_why`.
std::vector<SweepPoint> sweep(const Claim& claim, const VerifyOptions& o, std::vector<std::string>& left_out_why) {
  const std::vector<int> one{1};
  const auto& ds = claim.dims.width ? pick(o.d, claim.defaults.d, default_d) : claim.defaults.d;
  const auto& hs = claim.dims.heads ? pick(o.heads, claim.defaults.heads, default_heads) : one;
  const auto& ls = claim.dims.layers ? pick(o.layers, claim.defaults.layers, default_layers) : one;
  const auto& ns = claim.dims.seq ? pick(o.seq, claim.defaults.seq, default_seq) : one;
  std::vector<Mask> masks{Mask::causal};
  if (claim.dims.mask) masks.push_back(Mask::bidirectional);
  std::vector<SweepPoint> out;
  for (int d : ds)
    for (int h : hs)
      for (int l : ls)
        for (int n : ns)
          for (Mask m : masks) {
            SweepPoint c{d, h, l, n, m, {}, 0};
            if (const std::string why = left_out(claim.dims, c); !why.empty()) {
              if (std::find(left_out_why.begin(), left_out_why.end(), why) == left_out_why.end())
                left_out_why.push_back(why);
              continue;
            }
            const auto variants = claim.variants ? claim.variants(c) : std::vector<PointVariant>(1);
            for (const auto& v : variants) {
              c.variant = v;
              out.push_back(c);
            }
          }
  return out;
}

}  // namespace

std::string sizes_text(const VerifyOptions& o, const SizeLabels& labels, const std::string& separator) {
  std::string text;
  auto add = [&](const std::string& label, const std::string& values) {
    text += (text.empty() ? "" : separator) + label + " " + values;
  };
  auto add_list = [&](const std::string& label, const std::optional<std::vector<int>>& list) {
    if (!list) return;
    std::string values;
    for (std::size_t k = 0; k < list->size(); ++k) {  // += only: GCC 12 warns falsely on "," + string
      if (k) values += ',';
      values += std::to_string((*list)[k]);
    }
    add(label, values);
  };
  add_list(labels[0], o.d);
  add_list(labels[1], o.heads);
  add_list(labels[2], o.layers);
  add_list(labels[3], o.seq);
  if (o.trials != 1) add(labels[4], std::to_string(o.trials));
  return text.empty() ? "the default sweep" : text;
}

VerifyPlan plan_verify(const std::vector<const Claim*>& claims, const VerifyOptions& o) {
  check_sizes(claims, o);
  VerifyPlan plan;
  double scalar_bytes = 4, widest = 0;
  for (Precision p : o.precisions)
    scalar_bytes = std::max(scalar_bytes, p == Precision::mp50 ? double(sizeof(mp50)) : p == Precision::f80 ? 16.0 : 8.0);
  for (const Claim* c : claims) {
    std::vector<std::string> why;
    const std::vector<SweepPoint> configs = sweep(*c, o, why);
    if (configs.empty()) {
      std::string reason;
      for (const std::string& w : why) reason += (reason.empty() ? "" : "; ") + w;
      plan.skipped.push_back({c->id, reason + ", and the sweep gives no other configuration"});
    }
    for (const SweepPoint& config : configs) {
      widest = std::max(widest, configuration_bytes(config, scalar_bytes));
      plan.configurations.emplace_back(c, config);
    }
  }
  const double records = double(plan.configurations.size()) * double(o.trials) * double(o.precisions.size() + 1);
  plan.memory_bytes = widest * double(worker_count(o.threads)) + 1024.0 * records;
  return plan;
}

std::string describe(const Claim& claim, const SweepPoint& c) {
  std::string s = "d=" + std::to_string(c.d);
  if (claim.dims.heads) s += " H=" + std::to_string(c.heads);
  if (claim.dims.layers) s += " L=" + std::to_string(c.layers);
  if (claim.dims.seq) s += " n=" + std::to_string(c.seq);
  if (claim.dims.mask) s += std::string(" mask=") + mask_name(c.mask);
  if (!c.variant.label.empty()) s += " " + c.variant.label;
  return s + " trial=" + std::to_string(c.trial);
}

namespace {

struct TaskResult {
  std::vector<results::CheckRecord> checks;
  std::vector<results::ControlRecord> controls;
  std::optional<results::LadderRecord> ladder;
};

std::optional<double> finite(double x) { return std::isfinite(x) ? std::optional<double>(x) : std::nullopt; }

results::CheckRecord check_record(const Claim& claim, const std::string& config, Precision p, const Outcome& o) {
  results::CheckRecord r;
  r.id = claim.id;
  r.config = config;
  r.precision = std::string(precision_name(p));
  r.rel_err = finite(o.rel_err);
  r.kappa = finite(o.kappa);
  r.budget = claim.budget;
  r.note = o.note;
  if (o.statistic) {
    r.statistic = o.statistic->value;
    r.expected = o.statistic->expected;
    r.std_err = o.statistic->std_err;
    r.normalized_err = finite(std::abs(o.statistic->value - o.statistic->expected) / o.statistic->std_err);
  } else {
    r.normalized_err = normalized_error(o.rel_err, unit_roundoff(p), o.kappa);
  }
  if (o.rel_err == 0 && r.note.empty()) r.note = "bitwise identical: both sides round the same operations";
  if (o.singular) r.status = "singular";
  else if (o.identity_failed) r.status = "identity_failed";
  else if (!r.rel_err || !r.normalized_err) r.status = "non_finite";
  r.pass = r.status == "ok" && *r.normalized_err <= claim.budget;
  return r;
}

// A control's record, under its check's configuration; one that ran on fresh positions (control_input)
// says so in its note, with the n it ran at.
results::ControlRecord control_record(const Claim& claim, const SweepPoint& config, const std::string& where,
                                      const std::string& precision, const ControlOutcome& c) {
  results::ControlRecord r{claim.id, c.name, where, precision, c.rel_err, c.failed_as_expected, c.note, c.positions};
  if (c.positions == 0) return r;
  const std::string n = std::to_string(c.positions);
  r.note = (r.note.empty() ? "" : r.note + "; ") + "ran on " + n + " fresh positions (n=" + n + "), not on the check's n=" +
           std::to_string(config.seq);
  return r;
}

TaskResult run_task(const Claim& claim, const SweepPoint& config, const VerifyOptions& o) {
  TaskResult t;
  const std::string where = describe(claim, config);
  std::vector<LadderPoint> ladder;
  const std::vector<Precision> stat_precision{Precision::f64};
  for (Precision p : claim.kind == Kind::identity ? o.precisions : stat_precision) {
    Rng rng(o.seed, claim.id + "|" + where);  // the same draws at every precision
    Outcome out;
    bool error = false;
    try {
      out = claim.run(config, p, rng);
    } catch (const std::exception& e) {
      // An exception is not a measurement: reported as an error with its message,
      // distinct from a numerical failure (non_finite, singular).
      out = Outcome{};
      out.rel_err = NAN;
      out.note = std::string("error: ") + e.what();
      error = true;
    }
    auto rec = check_record(claim, where, p, out);
    if (error) {
      rec.status = "error";
      rec.pass = false;
      rec.kappa.reset();
    }
    ladder.push_back({unit_roundoff(p), out.rel_err});
    t.checks.push_back(rec);
    for (const auto& c : out.controls) t.controls.push_back(control_record(claim, config, where, rec.precision, c));
  }
  if (claim.kind == Kind::identity) t.ladder = results::LadderRecord{claim.id, where, ladder_slope(ladder)};
  return t;
}

// Work of one configuration, up to a constant: per layer, the products
// n·d·(d + n) of attention and n·d·4d of the MLP.
double estimated_cost(const SweepPoint& c) {
  return double(c.layers) * c.seq * c.d * (5.0 * c.d + c.seq);
}

}  // namespace

results::Report verify(const VerifyOptions& o) {
  const VerifyPlan plan = plan_verify(select_claims(o.ids), o);
  require_memory(sizes_text(o, {"model widths d", "head counts H", "depths L", "sequence lengths n", "trials"}, ", "),
                 plan.memory_bytes);
  return verify(plan, o);
}

results::Report verify(const VerifyPlan& plan, const VerifyOptions& o) {
  std::vector<std::pair<const Claim*, SweepPoint>> tasks;  // each configuration's trials in turn
  for (const auto& [claim, config] : plan.configurations)
    for (int t = 0; t < o.trials; ++t) {
      tasks.emplace_back(claim, config);
      tasks.back().second.trial = t;
    }

  // Run the costliest tasks first so the last ones finish together.
  std::vector<std::size_t> order(tasks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return estimated_cost(tasks[a].second) > estimated_cost(tasks[b].second);
  });
  std::vector<TaskResult> done(tasks.size());
  std::atomic<std::size_t> finished{0};
  std::mutex progress_mutex;
  parallel_for(std::int64_t(tasks.size()), o.threads, [&](std::int64_t k) {
    const std::size_t i = order[std::size_t(k)];
    done[i] = run_task(*tasks[i].first, tasks[i].second, o);
    const std::size_t count = ++finished;
    if (o.progress) {
      std::lock_guard lock(progress_mutex);
      o.progress(count, tasks.size());
    }
  });

  results::Report report;
  report.seed = o.seed;
  report.command_line = o.command_line;
  report.skipped = plan.skipped;
  report.version = QKVLAB_VERSION;
  for (auto& t : done) {
    report.checks.insert(report.checks.end(), t.checks.begin(), t.checks.end());
    report.controls.insert(report.controls.end(), t.controls.begin(), t.controls.end());
    if (t.ladder) report.ladders.push_back(*t.ladder);
  }
  return report;
}

results::Report verify_configuration(const Claim& claim, const SweepPoint& config, const VerifyOptions& o) {
  TaskResult t = run_task(claim, config, o);
  results::Report report;
  report.seed = o.seed;
  report.command_line = o.command_line;
  report.version = QKVLAB_VERSION;
  report.checks = std::move(t.checks);
  report.controls = std::move(t.controls);
  if (t.ladder) report.ladders.push_back(*t.ladder);
  return report;
}

std::string claim_list() {
  std::string out;
  for (const auto& c : all_claims())
    out += c.id + std::string(c.id.size() < 14 ? 14 - c.id.size() : 1, ' ') + c.statement + "\n";
  return out;
}

// The least sizes of every claim with one above the sweep's (Dims), grouped by requirement in
// registry order: "qwe.obs3.1: d >= 4; qwe.thm4.3, resformer.eq5: L >= 2; …".
std::string least_sizes() {
  std::vector<std::pair<std::string, std::string>> groups;  // requirement, its claims' ids
  auto add = [&](const std::string& requirement, const std::string& id) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == requirement; });
    if (it == groups.end()) groups.emplace_back(requirement, id);
    else it->second += ", " + id;
  };
  const Dims none;
  for (const auto& c : all_claims()) {
    if (c.dims.min_d > none.min_d) add("d >= " + std::to_string(c.dims.min_d), c.id);
    if (c.dims.min_layers > none.min_layers) add("L >= " + std::to_string(c.dims.min_layers), c.id);
    if (c.dims.min_seq > none.min_seq) add("n >= " + std::to_string(c.dims.min_seq), c.id);
    if (c.dims.min_head_width > none.min_head_width)
      add("head width d/H >= " + std::to_string(c.dims.min_head_width), c.id);
    if (c.dims.even_head_width) add("an even head width d/H", c.id);
  }
  std::string out;
  for (const auto& [requirement, ids] : groups) out += (out.empty() ? "" : "; ") + ids + ": " + requirement;
  return out;
}

}  // namespace qkvlab::theory
