#include "probes/layerwise.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "core/statistics.hpp"
#include "engine/trainer.hpp"
#include "probes/probe.hpp"

namespace qkvlab::probes {

namespace {

using lm::Site;

// Every layer output of one forward pass, h_0 … h_L (host copies, N × d each).
class LayerOutputs final : public lm::Recorder<float> {
 public:
  explicit LayerOutputs(int L) : h(std::size_t(L) + 1) {}
  bool wants(Site s, int l) const override { return (s == Site::resid_pre && l == 0) || s == Site::resid_post; }
  void record(const lm::Activation<float>& a) override {
    auto& out = h[a.site == Site::resid_pre ? 0 : std::size_t(a.layer) + 1];
    out.assign(a.data, a.data + std::size_t(a.B) * a.T * a.width);
  }
  std::vector<std::vector<float>> h;
};

// B windows of T tokens and their targets (the next token, or the token's own tag).
struct Batch {
  std::vector<std::int32_t> ids, targets;
};

void window(const ProbeData& d, bool train, bool tags, std::size_t at, int T, Batch& b) {
  const auto& stream = train ? d.train : d.validation;
  const auto& tag = train ? d.train_tags : d.validation_tags;
  for (int t = 0; t < T; ++t) {
    b.ids.push_back(stream[at + std::size_t(t)]);
    b.targets.push_back(tags ? tag[at + std::size_t(t)] : stream[at + std::size_t(t) + 1]);
  }
}

Batch training_batch(const ProbeData& d, const ProbeOptions& o, std::int64_t step) {
  Rng rng(o.seed, "probe/step=" + std::to_string(step));
  const std::uint64_t starts = d.train.size() - std::size_t(o.seq_len);  // the window and its next token fit
  Batch b;
  for (int i = 0; i < o.batch; ++i) window(d, true, o.tags, std::size_t(rng.next_u64() % starts), o.seq_len, b);
  return b;
}

// The validation windows' offsets: consecutive from the start (qkvlab), or drawn from
// Rng(seed, "probe/validation") like the training windows (released); the same for every layer and rate.
std::vector<std::size_t> validation_starts(const ProbeData& d, const ProbeOptions& o) {
  const std::size_t T = std::size_t(o.seq_len);
  std::vector<std::size_t> starts;
  if (o.recipe == ProbeRecipe::released) {
    Rng rng(o.seed, "probe/validation");
    for (int w = 0; w < o.eval_windows; ++w) starts.push_back(std::size_t(rng.next_u64() % (d.validation.size() - T)));
  } else {
    for (std::size_t w = 0; w < std::min<std::size_t>(std::size_t(o.eval_windows), (d.validation.size() - 1) / T); ++w)
      starts.push_back(w * T);
  }
  return starts;
}

struct Layer {  // one layer's probe at one learning rate (no trainer when steps = 0: as initialized)
  Probe<float> probe;
  std::unique_ptr<engine::Trainer<float>> trainer;
};

}  // namespace

Slope least_squares_slope(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 3) return {std::nan(""), std::nan(""), std::nan(""), std::nan("")};
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < n; ++i) mx += x[i] / double(n), my += y[i] / double(n);
  double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < n; ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  const double slope = sxy / sxx;
  double rss = 0;
  for (std::size_t i = 0; i < n; ++i) rss += std::pow(y[i] - my - slope * (x[i] - mx), 2);
  return {slope, std::sqrt(rss / double(n - 2) / sxx), mx, my};
}

ProbeReport run_probes(lm::Model<float>& model, const ProbeData& d, const ProbeOptions& o,
                       const std::function<void(std::int64_t, std::int64_t)>& progress) {
  const lm::Config& c = model.config();
  const int L = c.layers, T = o.seq_len, N = o.batch * T, outputs = o.tags ? d.tags : c.vocab;
  if (o.tags && o.init_model) throw UsageError("a probe of tags starts from a random initialization: its outputs are the tags");
  if (d.train.size() <= std::size_t(T) || d.validation.size() <= std::size_t(T))
    throw UsageError("the token streams need more than the sequence length, " + std::to_string(T) + " tokens");
  const bool released = o.recipe == ProbeRecipe::released;
  const std::vector<std::size_t> starts = validation_starts(d, o);
  const int windows = int(starts.size());
  auto& be = model.backend();
  engine::Buffer<float> h(be, std::size_t(N) * c.d);
  LayerOutputs outputs_of(L);
  const std::int64_t warmup = o.warmup < 0 ? o.steps / 10 : o.warmup;
  if (o.steps > 0 && warmup >= o.steps)
    throw UsageError("the warmup (" + std::to_string(warmup) + " steps) must be shorter than the " +
                     std::to_string(o.steps) + " steps");
  if (released && o.steps > 0 && warmup == 1)  // OneCycleLR's first phase would divide 0 by 0
    throw UsageError("the released recipe's OneCycleLR cannot warm up over exactly 1 step: give --warmup 0 or 2 or more");
  engine::TrainConfig loop{o.steps, 0, 0, warmup, 1.0, 1, {0.9, 0.95, 1e-8, 0.1}};
  if (released)  // transformers' AdamW (its ε 1e-6) under OneCycleLR(div_factor 100, final_div_factor 0.1)
    loop.adamw = {0.9, 0.95, 1e-6, 0.1, engine::AdamWForm::transformers},
    loop.schedule = engine::TrainConfig::Schedule::one_cycle_linear;

  // validation[g][ℓ]: per-window losses at grid point g
  std::vector<std::vector<RunningStats>> validation(o.lr_grid.size(), std::vector<RunningStats>(std::size_t(L) + 1));
  for (std::size_t g = 0; g < o.lr_grid.size(); ++g) {
    std::vector<std::unique_ptr<Layer>> layers;
    engine::TrainConfig cfg = loop;
    cfg.lr = o.lr_grid[g], cfg.min_lr = o.lr_grid[g] / 10, cfg.start_lr = o.lr_grid[g] / 100;
    for (int l = 0; l <= L; ++l) {
      Probe<float> p(c, outputs, N, be, o.recipe);
      o.init_model ? p.initialize_from(model) : p.initialize_random(o.seed + std::uint64_t(l));
      auto& params = p.parameters();  // lives with the probe's state, which the move keeps in place
      auto trainer = o.steps > 0 ? std::make_unique<engine::Trainer<float>>(be, params, cfg) : nullptr;
      layers.push_back(std::make_unique<Layer>(Layer{std::move(p), std::move(trainer)}));
    }
    for (std::int64_t s = 0; s < o.steps; ++s) {
      const Batch b = training_batch(d, o, s);
      model.forward(b.ids.data(), nullptr, o.batch, T, lm::Pass::eval, 0, &outputs_of);
      std::int64_t count = 0;
      for (std::int32_t t : b.targets) count += t >= 0;
      for (int l = 0; l <= L; ++l) {
        h.upload(outputs_of.h[std::size_t(l)]);
        layers[std::size_t(l)]->trainer->step([&](int) {
          const lm::LossSum r = layers[std::size_t(l)]->probe.forward(h.data(), b.targets.data(), N, true, 1.0 / double(count));
          return engine::MicroLoss{r.sum, r.count};
        });
      }
      if (progress) progress(std::int64_t(g) * o.steps + s + 1, std::int64_t(o.lr_grid.size()) * o.steps);
    }
    for (int w0 = 0; w0 < windows; w0 += o.batch) {  // validation, B windows at a time
      const int n = std::min(o.batch, windows - w0);
      Batch b;
      for (int w = 0; w < o.batch; ++w) window(d, false, o.tags, starts[std::size_t(std::min(w0 + w, windows - 1))], T, b);
      model.forward(b.ids.data(), nullptr, o.batch, T, lm::Pass::eval, 0, &outputs_of);
      for (int l = 0; l <= L; ++l) {
        h.upload(outputs_of.h[std::size_t(l)]);
        std::vector<double> rows;
        layers[std::size_t(l)]->probe.forward(h.data(), b.targets.data(), N, false, 1.0, &rows);
        for (int w = 0; w < n; ++w) {
          double sum = 0;
          int k = 0;
          for (int t = 0; t < T; ++t)
            if (b.targets[std::size_t(w * T + t)] >= 0) sum += rows[std::size_t(w * T + t)], ++k;
          if (k) validation[g][std::size_t(l)].add(sum / k);
        }
      }
    }
  }

  ProbeReport r;
  r.table = {"probe", {{"layer", {}}, {"loss", {}}, {"std", {}}, {"se", {}}, {"lr", {}}}};
  std::vector<double> xs, ys;
  for (int l = 0; l <= L; ++l) {
    std::optional<std::size_t> best;  // the lowest finite validation loss; a diverged rate is never compared
    for (std::size_t g = 0; g < o.lr_grid.size(); ++g) {
      const double loss = validation[g][std::size_t(l)].mean();
      if (std::isfinite(loss) && (!best || loss < validation[*best][std::size_t(l)].mean())) best = g;
    }
    if (!best) {
      r.nonfinite = "layer " + std::to_string(l) + ": the validation loss is not finite at every learning rate";
      return r;
    }
    const Summary s = validation[*best][std::size_t(l)].summary();
    ProbeLayer& row = r.layers.emplace_back(ProbeLayer{l, s, o.lr_grid[*best], {}});
    for (std::size_t g = 0; g < o.lr_grid.size(); ++g) row.loss_by_lr.push_back(validation[g][std::size_t(l)].mean());
    const double cols[] = {double(l), s.value, s.std, s.se, o.lr_grid[*best]};
    for (std::size_t k = 0; k < 5; ++k) r.table.columns[k].values.push_back(cols[k]);
    if (l >= (L + 1) / 2) xs.push_back(l), ys.push_back(s.value);  // the deeper half
  }
  r.deeper_half = least_squares_slope(xs, ys);
  r.from_layer = int(xs.front());
  r.settings = results::Value::object();
  r.settings.set("recipe", released ? "released" : "qkvlab");
  r.settings.set("target", o.tags ? "tag" : "next-token");
  r.settings.set("init", o.init_model ? "model" : "random");
  r.settings.set("outputs", outputs);
  r.settings.set("steps", o.steps), r.settings.set("warmup", warmup), r.settings.set("batch", o.batch);
  r.settings.set("seq_len", T), r.settings.set("seed", o.seed), r.settings.set("validation_windows", windows);
  r.settings.set("lr_grid", results::Value::array_of(o.lr_grid));
  r.figure = {"probe validation loss per layer", "layer (0: embedding output)", "loss (nats)", false, false,
              {{"layer", "loss", "", "loss", "linespoints", ""}, {"layer", "loss", "", "± se", "yerrorbars", "se"}}, {}};
  return r;
}

results::Value ProbeReport::to_value() const {
  results::Value v = settings, rows = results::Value::array(), slope = results::Value::object();
  for (const ProbeLayer& l : layers) {
    results::Value row = results::Value::object(), by_lr = results::Value::array();
    for (double loss : l.loss_by_lr) by_lr.push(loss);  // null: diverged
    row.set("layer", l.layer), row.set("loss", l.loss.value), row.set("std", l.loss.std), row.set("se", l.loss.se);
    row.set("lr", l.lr), row.set("loss_by_lr", by_lr);
    rows.push(row);
  }
  v.set("layers", rows);
  slope.set("from_layer", std::int64_t(from_layer)), slope.set("to_layer", layers.empty() ? 0 : layers.back().layer);
  slope.set("slope", deeper_half.slope), slope.set("se", deeper_half.se);
  v.set("deeper_half_slope", slope);
  return v;
}

}  // namespace qkvlab::probes
