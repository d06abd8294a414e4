#include "synthetic/transfer_report.hpp"

#include <cstdio>

#include "results/value.hpp"

namespace qkvlab::transfer {

namespace {

const char* device_name(const TransferConfig& c) { return c.train.device == engine::Device::cuda ? "cuda" : "cpu"; }

results::Table loss_table(const TransferResult& r) {
  std::vector<double> step, loss;
  for (std::size_t i = 0; i < r.loss.size(); ++i) step.push_back(double(i + 1)), loss.push_back(r.loss[i]);
  return {"loss_d" + std::to_string(r.d), {{"step", step}, {"loss", loss}}};
}

}  // namespace

TransferSweep run_transfer_sweep(const std::vector<int>& ds, const TransferConfig& config, const SweepObserver& observe) {
  TransferSweep s{config, {}, true};
  check_checkpoints(ds, config);
  for (int d : ds) {
    s.runs.push_back(run_transfer(d, config, [&](std::int64_t step, double loss) { observe(d, step, loss); }));
    s.mlp_beats_linear = s.mlp_beats_linear && s.runs.back().mlp.rel_l2 < s.runs.back().linear.rel_l2;
  }
  return s;
}

double transfer_memory_bytes(int d, int batch, std::int64_t steps) {
  return 4.0 * 50 * double(batch) * d + 4.0 * 16 * 4 * double(d) * d + 8.0 * double(steps) + 8.0 * 8192 * 4 * 6 * double(d);
}

std::string non_finite_value(const std::vector<TransferResult>& runs) {
  for (const auto& r : runs)
    for (const auto& [name, v] : {std::pair<const char*, double>{"mlp_rel_l2", r.mlp.rel_l2}, {"mlp_cosine", r.mlp.mean_cosine},
                                  {"linear_rel_l2", r.linear.rel_l2}, {"linear_cosine", r.linear.mean_cosine},
                                  {"population_linear_rel_l2", r.population_linear_rel_l2},
                                  {"final_train_loss", r.final_loss}})
      if (!std::isfinite(v)) return std::string(name) + " at d = " + std::to_string(r.d);
  return "";
}

results::Table summary_table(const TransferSweep& s) {
  results::Table t{"transfer", {}};
  auto column = [&](const std::string& name, auto get) {
    std::vector<double> v;
    for (const auto& r : s.runs) v.push_back(double(get(r)));
    t.columns.push_back({name, v});
  };
  using R = TransferResult;
  column("d", [](const R& r) { return r.d; });
  column("mlp_rel_l2", [](const R& r) { return r.mlp.rel_l2; });
  column("mlp_cosine", [](const R& r) { return r.mlp.mean_cosine; });
  column("linear_rel_l2", [](const R& r) { return r.linear.rel_l2; });
  column("linear_cosine", [](const R& r) { return r.linear.mean_cosine; });
  column("mlp_one_minus_cosine", [](const R& r) { return 1 - r.mlp.mean_cosine; });
  column("linear_one_minus_cosine", [](const R& r) { return 1 - r.linear.mean_cosine; });
  column("population_linear_rel_l2", [](const R& r) { return r.population_linear_rel_l2; });
  column("ridge_distance_to_population", [](const R& r) { return r.ridge_distance; });
  column("steps", [](const R& r) { return r.steps; });
  column("batch", [&](const R&) { return s.config.train.batch; });
  column("final_train_loss", [](const R& r) { return r.final_loss; });
  column("train_seconds", [](const R& r) { return r.train_seconds; });
  column("ridge_seconds", [](const R& r) { return r.ridge_seconds; });
  column("eval_seconds", [](const R& r) { return r.eval_seconds; });
  return t;
}

std::vector<results::Table> transfer_tables(const TransferSweep& s) {
  std::vector<results::Table> tables{summary_table(s)};
  for (const auto& r : s.runs) tables.push_back(loss_table(r));
  return tables;
}

results::Figure transfer_figure() {
  results::Figure fig{"MLP basis transfer (qwe.exp8.4): held-out error against d", "d",
                      "relative L2 error, 1 - mean cosine", true, true, {}, {"set key outside bottom center horizontal"}};
  fig.series.push_back({"d", "mlp_rel_l2", "", "MLP rel. L2", "linespoints pt 7 lw 2 lc rgb '#c03020'", ""});
  fig.series.push_back({"d", "linear_rel_l2", "", "linear rel. L2", "linespoints pt 5 lw 2 lc rgb '#3060b0'", ""});
  fig.series.push_back({"d", "mlp_one_minus_cosine", "", "MLP 1 - cos", "linespoints pt 6 dt 2 lc rgb '#c03020'", ""});
  fig.series.push_back({"d", "linear_one_minus_cosine", "", "linear 1 - cos", "linespoints pt 4 dt 2 lc rgb '#3060b0'", ""});
  return fig;
}

std::string transfer_text(const TransferSweep& s) {
  const auto& c = s.config;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "qwe.exp8.4 MLP basis transfer: seed %llu, device %s, batch %d, lr %s, ridge on %lld samples "
                "(lambda %s), %lld held-out samples\n",
                static_cast<unsigned long long>(c.seed), device_name(c), c.train.batch,
                results::short_number(c.train.lr).c_str(), static_cast<long long>(c.ridge.samples),
                results::short_number(c.ridge.lambda).c_str(), static_cast<long long>(c.eval_samples));
  out += line;
  std::snprintf(line, sizeof line, "%6s  %11s  %10s  %14s  %13s  %7s  %9s\n", "d", "MLP rel L2", "MLP cosine",
                "linear rel L2", "linear cosine", "steps", "time (s)");
  out += line;
  for (const auto& r : s.runs) {
    std::snprintf(line, sizeof line, "%6d  %11.5f  %10.6f  %14.5f  %13.6f  %7lld  %9.1f\n", r.d, r.mlp.rel_l2,
                  r.mlp.mean_cosine, r.linear.rel_l2, r.linear.mean_cosine, static_cast<long long>(r.steps),
                  r.train_seconds + r.ridge_seconds + r.eval_seconds);
    out += line;
  }
  return out + (s.mlp_beats_linear ? "MLP error below the best linear map at every d\n"
                                   : "MLP error NOT below the linear map at every d\n");
}

results::Value transfer_json(const TransferSweep& s, const std::string& command_line) {
  using results::Value;
  const auto& c = s.config;
  Value o = Value::object();
  o.set("experiment", "qwe.exp8.4");
  o.set("seed", c.seed);
  o.set("command_line", command_line);
  o.set("device", device_name(c));
  o.set("steps", std::int64_t(c.train.steps));
  o.set("batch", c.train.batch);
  o.set("lr", c.train.lr);
  o.set("ridge_samples", std::int64_t(c.ridge.samples));
  o.set("ridge_lambda", c.ridge.lambda);
  o.set("eval_samples", std::int64_t(c.eval_samples));
  o.set("mlp_beats_linear", s.mlp_beats_linear);
  Value runs = Value::array();
  for (const auto& r : s.runs) {
    Value v = Value::object();
    v.set("d", r.d);
    v.set("mlp_rel_l2", r.mlp.rel_l2);
    v.set("mlp_cosine", r.mlp.mean_cosine);
    v.set("linear_rel_l2", r.linear.rel_l2);
    v.set("linear_cosine", r.linear.mean_cosine);
    v.set("population_linear_rel_l2", r.population_linear_rel_l2);
    v.set("steps", std::int64_t(r.steps));
    v.set("resumed_from", std::int64_t(r.resumed_from));
    v.set("final_train_loss", r.final_loss);
    v.set("train_seconds", r.train_seconds);
    v.set("ridge_seconds", r.ridge_seconds);
    v.set("eval_seconds", r.eval_seconds);
    runs.push(std::move(v));
  }
  o.set("results", std::move(runs));
  return o;
}

}  // namespace qkvlab::transfer
