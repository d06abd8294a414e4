// Query-weight elimination's figures (figure_kit.hpp): Table 2 at small scale (lm/accounting on the
// trained runs), the MLP basis transfer of §8.4 (synthetic/transfer) and what W_Q = I costs as
// functional dimension (figure_qwe_fdim.cpp, counted by fdim/).
#include <algorithm>
#include <thread>

#include "lm/accounting.hpp"
#include "lm/checkpoint.hpp"
#include "reproduce/figure_kit.hpp"
#include "reproduce/figure_qwe_fdim.hpp"
#include "synthetic/transfer.hpp"

namespace qkvlab::reproduce {

namespace {

void qwe_table2(Session& s, Output& out) {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"vanilla", "Baseline (tiny GPT-2)"}, {"q-identity-lr", "Q-identity, lr 4e-3 → 4e-5"}};
  Table t{"qwe_table2", {{"index", {}}, {"non_embedding_parameters", {}}, {"final_validation_loss", {}}}};
  out.notes += "| model | non-embedding parameters | final validation loss | Δ vs baseline |\n|---|---|---|---|\n";
  double base = 0;
  Value list = Value::array();
  std::string tics;
  for (std::size_t i = 0; i < models.size(); ++i) {
    const Trained& r = s.trained(models[i].first);
    const lm::Config config = lm::load_checkpoint(r.dir / "checkpoint").config;
    const std::int64_t non_embedding = lm::count_parameters(config).non_embedding();
    const double loss = r.run["final_validation_loss"].number();
    if (i == 0) base = loss;
    t.columns[0].values.push_back(double(i)), t.columns[1].values.push_back(double(non_embedding));
    t.columns[2].values.push_back(loss);
    tics += (tics.empty() ? "" : ", ") + std::string("\"") + models[i].first + "\" " + std::to_string(i);
    Value v = Value::object();
    v.set("model", models[i].second), v.set("recipe", models[i].first), v.set("non_embedding_parameters", non_embedding);
    v.set("final_validation_loss", loss), v.set("delta", loss - base);
    list.push(v);
    out.notes += "| " + models[i].second + " | " + std::to_string(non_embedding) + " | " + fixed(loss, 4) + " | " +
                 (i ? (loss >= base ? "+" : "") + fixed(loss - base, 4) : "—") + " |\n";
  }
  out.value.set("rows", list);
  out.draw({"final validation loss (whole validation split)", "",
            "loss (nats/token)", false, false, {{"index", "final_validation_loss", "", "", "boxes fs solid 0.5", ""}},
            {"set xtics (" + tics + ")", "set boxwidth 0.6", "unset key", "set xrange [-0.6:1.6]"}},
           out.add(t), "qwe_table2");
}

void qwe_exp84(Session& s, Output& out) {
  transfer::TransferConfig c;  // `qkvlab transfer`'s defaults: d 16, 32, 64; 2,000 steps of 4,096
  c.seed = s.seed();
  c.threads = s.options().threads > 0 ? s.options().threads : int(std::max(1u, std::thread::hardware_concurrency()));
  c.train.device = s.options().device;
  if (s.options().steps > 0)
    c.train.steps = s.options().steps, c.train.batch = 256, c.ridge.samples = 4096, c.eval_samples = 4096;
  Table t{"transfer", {{"d", {}}, {"mlp_rel_l2", {}}, {"linear_rel_l2", {}}, {"population_linear_rel_l2", {}}}};
  Value list = Value::array();
  for (int d : {16, 32, 64}) {
    const transfer::TransferResult r = transfer::run_transfer(d, c, [&](std::int64_t step, double) {
      if (step % 20 == 0 || step == c.train.steps) s.progress("transfer d = " + std::to_string(d), "steps", step, c.train.steps);
    });
    t.columns[0].values.push_back(d), t.columns[1].values.push_back(r.mlp.rel_l2);
    t.columns[2].values.push_back(r.linear.rel_l2), t.columns[3].values.push_back(r.population_linear_rel_l2);
    Value v = Value::object();
    v.set("d", d), v.set("mlp_rel_l2", r.mlp.rel_l2), v.set("mlp_mean_cosine", r.mlp.mean_cosine);
    v.set("linear_rel_l2", r.linear.rel_l2), v.set("linear_mean_cosine", r.linear.mean_cosine);
    v.set("population_linear_rel_l2", r.population_linear_rel_l2), v.set("steps", r.steps);
    list.push(v);
    out.notes += "- d = " + std::to_string(d) + ": trained MLP rel. L2 error " + fixed(r.mlp.rel_l2, 4) +
                 ", best linear map (ridge) " + fixed(r.linear.rel_l2, 4) + "\n";
  }
  out.value.set("runs", list);
  out.draw({"skip MLP trained to a basis-changed skip block: relative L2 error", "d", "relative L2 error", true, false,
            {{"d", "mlp_rel_l2", "", "trained skip MLP", "linespoints", ""},
             {"d", "linear_rel_l2", "", "best linear map (ridge)", "linespoints", ""}},
            {"set yrange [0:*]"}},
           out.add(t), "transfer");
}

// The counts of figure_qwe_fdim.cpp (no training); --steps N > 0 counts at d = 4, L = 1 only.
void qwe_fdim(Session& s, Output& out) {
  FdimFigure f = qwe_fdim_counts(s.options().seed, s.options().steps > 0,
                                 [&](int done, int total) { s.progress("qwe-fdim", "settings", done, total); });
  out.value = std::move(f.value);
  for (auto& p : f.panels) out.draw(std::move(p.figure), out.add(std::move(p.table)), p.stem);
  out.notes += f.notes;
}

}  // namespace

std::vector<Entry> qwe_figures() {
  return {
      {"qwe-table2", {"vanilla", "q-identity-lr"}, qwe_table2, 3},
      {"qwe-exp8.4", {}, qwe_exp84, 3},
      {"qwe-fdim", {}, qwe_fdim},
  };
}

}  // namespace qkvlab::reproduce
