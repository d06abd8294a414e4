// The figures of `qkvlab reproduce` (reproduce.hpp): each trains what it needs through the
// cache, computes with the libraries (lm/, analysis/, probes/, synthetic/) and hands tables and
// figures to results/, which writes them all or none.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <thread>

#include "analysis/analyze.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "corpus/token_file.hpp"
#include "lm/accounting.hpp"
#include "lm/checkpoint.hpp"
#include "lm/compare.hpp"
#include "lm/convert.hpp"
#include "lm/evaluate.hpp"
#include "lm/model_files.hpp"
#include "probes/layerwise.hpp"
#include "reproduce/figure_qwe_fdim.hpp"
#include "reproduce/reproduce.hpp"
#include "results/figure.hpp"
#include "synthetic/icl/anchor.hpp"
#include "synthetic/icl/depth.hpp"
#include "synthetic/icl/theory_report.hpp"
#include "synthetic/icl/train_report.hpp"
#include "synthetic/transfer.hpp"

namespace qkvlab::reproduce {

namespace fs = std::filesystem;
using results::Column;
using results::Table;
using results::Value;

namespace {

std::string fixed(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// What a figure writes: its value (FIGURE.json), tables (CSV), figures drawn from them, and
// notes (README.md, after the paper's paragraph).
struct Output {
  Value value = Value::object();
  std::vector<Table> tables;
  struct Drawn {
    results::Figure figure;
    std::size_t table;
    std::string stem;
  };
  std::vector<Drawn> drawn;
  std::string notes;

  std::size_t add(Table t) {
    tables.push_back(std::move(t));
    return tables.size() - 1;
  }
  void draw(results::Figure f, std::size_t table, std::string stem) { drawn.push_back({std::move(f), table, std::move(stem)}); }
};

// One figure's run: the backend, the corpus and the trained models, each fetched once.
class Session {
 public:
  explicit Session(const Context& c) : c_(c), backend_(c.backend()) {}

  const lm::TrainData& data() {
    if (!data_) data_ = lm::brown_data(c_.options.data);
    return *data_;
  }
  // The recipe `name` trained at `seed` (0: the options' seed).
  const Trained& trained(const std::string& name, std::uint64_t seed = 0) {
    if (seed == 0) seed = c_.options.seed;
    const std::string key = seed == c_.options.seed ? name : name + "-s" + std::to_string(seed);
    auto it = trained_.find(key);
    if (it == trained_.end())
      it = trained_.emplace(key, Used{name, seed, train_or_reuse(c_, recipe(name, seed, c_.options.steps), data())}).first;
    return it->second.trained;
  }
  fs::path checkpoint(const std::string& name, std::uint64_t seed = 0) { return trained(name, seed).dir / "checkpoint"; }
  std::unique_ptr<lm::Model<float>> model(const std::string& name, std::uint64_t seed = 0) {
    return lm::load_model(checkpoint(name, seed), *backend_);
  }
  engine::Backend<float>& backend() { return *backend_; }

  // n validation sequences of T tokens chosen by the seed (analysis::choose_sequences).
  lm::TokenSequences sequences(int T) {
    const corpus::TokenArray t = corpus::read_token_file(c_.options.data / "validation_tokens.npy");
    return analysis::choose_sequences(lm::token_sequences(t.ids, t.rows, t.cols, T, 0), c_.options.sequences,
                                      c_.options.seed);
  }
  analysis::Report analyze(const std::string& name, analysis::Kind kind, analysis::Options o, int T,
                           std::uint64_t seed = 0) {
    o.threads = c_.options.threads;
    auto m = model(name, seed);
    const auto data = sequences(T);
    return analysis::analyze(*m, kind, data, o, [&](std::int64_t done, std::int64_t total) {
      progress("analyze " + name + " (" + analysis::to_string(kind) + ", T = " + std::to_string(T) + ")", "sequences",
               done, total);
    });
  }
  void progress(const std::string& stage, const std::string& unit, std::int64_t done, std::int64_t total,
                const std::string& extra = "") const {
    if (c_.progress) c_.progress(stage, unit, done, total, extra);
  }
  const Options& options() const { return c_.options; }

  // The runs used, for the JSON: name → directory, reused, final validation loss, command.
  Value runs() const {
    Value v = Value::object();
    for (const auto& [key, used] : trained_) {
      const Trained& t = used.trained;
      Value r = Value::object();
      r.set("dir", t.dir.string());
      r.set("reused", t.reused);
      r.set("recipe", "qkvlab lm train --preset tiny " + recipe(used.recipe, used.seed, c_.options.steps).flags +
                          " --seed " + std::to_string(used.seed) +
                          (c_.options.steps > 0 ? " --steps " + std::to_string(c_.options.steps) : ""));
      r.set("final_validation_loss", t.run["final_validation_loss"]);
      r.set("seconds", t.run["seconds"]);
      v.set(key, r);
    }
    return v;
  }

 private:
  const Context& c_;
  std::unique_ptr<engine::Backend<float>> backend_;
  std::optional<lm::TrainData> data_;
  struct Used {
    std::string recipe;
    std::uint64_t seed;
    Trained trained;
  };
  std::map<std::string, Used> trained_;  // "vanilla" at the options' seed, "vanilla-s2" at another
};

// Per-layer mean and se of a scalar analysis (entropy, similarity) from its report's value.
struct Curve {
  std::vector<double> layer, mean, se;
};
Curve layer_curve(const analysis::Report& r) {
  Curve c;
  for (const Value& row : r.value["layers"].items())
    c.layer.push_back(row["layer"].number()), c.mean.push_back(row["mean"].number()), c.se.push_back(row["se"].number());
  return c;
}
double mean_of(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return x.empty() ? std::nan("") : s / double(x.size());
}

std::string list_text(const std::vector<double>& x, int digits) {
  std::string s;
  for (double v : x) {
    if (!s.empty()) s += ' ';
    s += fixed(v, digits);
  }
  return s;
}

// Two models' per-layer curves of one scalar analysis, side by side.
void scalar_comparison(Session& s, Output& out, analysis::Kind kind, const analysis::Options& o,
                       const std::vector<std::string>& models, const std::string& title, const std::string& ylabel,
                       const std::string& stem) {
  Table t{stem, {}};
  results::Figure f{title, "layer", ylabel, false, false, {}, {"set key bottom left"}};
  Value summary = Value::object();
  for (const auto& name : models) {
    const Curve c = layer_curve(s.analyze(name, kind, o, 128));
    if (t.columns.empty()) t.columns.push_back({"layer", c.layer});
    t.columns.push_back({name, c.mean}), t.columns.push_back({name + "_se", c.se});
    f.series.push_back({"layer", name, "", name, "linespoints", ""});
    Value m = Value::object();
    m.set("per_layer", Value::array_of(c.mean)), m.set("per_layer_se", Value::array_of(c.se));
    m.set("mean_over_layers", mean_of(c.mean));
    summary.set(name, m);
    out.notes += "- " + name + ": " + list_text(c.mean, 3) + " (layers " + fixed(c.layer.front(), 0) + " … " +
                 fixed(c.layer.back(), 0) + "; mean over layers " + fixed(mean_of(c.mean), 3) + ", se per layer ≤ " +
                 fixed(*std::max_element(c.se.begin(), c.se.end()), 3) + ")\n";
  }
  out.value.set(stem, summary);
  out.draw(f, out.add(t), stem);
}

// ---- ResFormer ---------------------------------------------------------------------------------------

const std::vector<std::string> kResFormerPair = {"vanilla", "resformer-half"};

void resformer_fig1_left(Session& s, Output& out) {
  const std::vector<std::string> models = {"vanilla", "resformer-half"};
  std::vector<fs::path> dirs;
  for (const auto& m : models) dirs.push_back(s.trained(m).dir);
  const Value compared = lm::compare_runs(dirs, lm::CompareOptions{});
  out.value.set("compare", compared);
  const int window = 10;
  const lm::Curve first = lm::read_log(dirs[0] / "train.csv", 1);
  const auto base = lm::moving_average(first.values, window);
  Table t{"relative_loss", {{"step", std::vector<double>(first.steps.begin(), first.steps.end())}}};
  results::Figure f{"training loss minus vanilla's (moving average of 10 steps), seed " + std::to_string(s.options().seed),
                    "step", "loss - vanilla loss (nats)", false, false, {}, {"set key bottom left", "set grid"}};
  f.series.push_back({"", "", "0", "vanilla", "lines dt 2 lc rgb 'black'", ""});
  for (std::size_t k = 1; k < models.size(); ++k) {
    const auto mine = lm::moving_average(lm::read_log(dirs[k] / "train.csv", 1).values, window);
    std::vector<double> rel(std::min(mine.size(), base.size()));
    for (std::size_t i = 0; i < rel.size(); ++i) rel[i] = mine[i] - base[i];
    t.columns.push_back({models[k], rel});
    f.series.push_back({"step", models[k], "", models[k], "lines", ""});
    std::string at;
    for (std::size_t step : {100, 200, 400, 800, 1200})
      if (step <= rel.size()) at += (at.empty() ? "" : ", ") + std::string("step ") + std::to_string(step) + ": " + fixed(rel[step - 1], 3);
    out.notes += "- " + models[k] + " − vanilla (training loss, moving average): " + (at.empty() ? fixed(rel.back(), 3) : at) + "\n";
  }
  for (const Value& g : compared["groups"].items())
    out.notes += "- final validation loss, " + g["label"].string() + ": " + fixed(g["final_validation_loss_mean"].number(), 4) + "\n";
  out.draw(f, out.add(t), "relative_loss");
}

void resformer_fig1_middle(Session& s, Output& out) {
  scalar_comparison(s, out, analysis::Kind::entropy, {}, kResFormerPair,
                    "attention entropy (column definition, natural log), T = 128", "entropy (nats)", "entropy");
  out.notes += "- the largest possible value at T = 128: ln 128 = 4.852\n";
}

// First-token ratios per layer of two models (Fig. 10), or their per-position profiles (Fig. 19).
void first_token(Session& s, Output& out, bool per_position) {
  static const char* names[3] = {"importance_ratio", "value_norm_ratio", "hidden_norm_ratio"};
  static const char* short_names[3] = {"importance", "value_norm", "hidden_norm"};
  Table t{"first_token", {}};
  results::Figure f{"first token over the mean of the others (T = 128)", "layer", "ratio", false, true, {},
                    {"set key top right", "set yrange [0.3:80]"}};
  if (!per_position) {  // what position alone gives the first token
    const double uniform = analysis::uniform_causal_importance_ratio(128);
    f.series.push_back({"", "", fixed(uniform, 6), "importance of a uniform causal pattern", "lines dt 2 lc rgb 'black'", ""});
    out.value.set("uniform_causal_importance_ratio", uniform);
    out.notes += "- a uniform causal pattern's first-token importance ratio at T = 128: " + fixed(uniform, 2) + "\n";
  }
  for (const auto& name : kResFormerPair) {
    const analysis::Report r = s.analyze(name, analysis::Kind::first_token, {}, 128);
    const auto& layers = r.value["layers"].items();
    if (!per_position) {
      if (t.columns.empty()) {
        t.columns.push_back({"layer", {}});
        for (const Value& row : layers) t.columns[0].values.push_back(row["layer"].number());
      }
      for (int k = 0; k < 3; ++k) {
        Column c{name + " " + short_names[k], {}};
        for (const Value& row : layers) c.values.push_back(row[names[k]].number());
        out.notes += "- " + c.name + ": " + list_text(c.values, 2) + "\n";
        t.columns.push_back(c);
        f.series.push_back({"layer", c.name, "", c.name, "linespoints", ""});
      }
      out.value.set(name, r.value["layers"]);
      continue;
    }
    // Fig. 19: per layer and position (the first 32), each position's value over the mean of all.
    for (int k = 0; k < 3; ++k) {
      Table m{name + "-" + short_names[k], {{"position", {}}, {"layer", {}}, {"ratio", {}}}};
      std::string first;
      for (const Value& row : layers) {
        const auto& p = row["per_position"][short_names[k]].items();
        for (std::size_t i = 0; i < std::min<std::size_t>(32, p.size()); ++i)
          m.columns[0].values.push_back(double(i)), m.columns[1].values.push_back(row["layer"].number()),
              m.columns[2].values.push_back(std::log10(p[i].number()));
        if (!first.empty()) first += ' ';
        first += fixed(p[0].number(), 2);
      }
      out.notes += "- " + name + ", " + short_names[k] + " of position 0 over the mean of all positions, layers 1 … L: " + first + "\n";
      out.draw({name + ": " + short_names[k] + " per position / mean (log10)", "position", "layer", false, false,
                {{"position", "layer", "", "", "image", "ratio"}},
                {"set palette rgbformulae 33,13,10", "set cbrange [-1:2]", "set xrange [-0.5:31.5]",
                 "set yrange [0.5:" + std::to_string(layers.size()) + ".5]"}},
               out.add(m), name + "-" + short_names[k]);
    }
    out.value.set(name, r.value["layers"]);
  }
  if (!per_position) out.draw(f, out.add(t), "first_token");
}

void resformer_fig10(Session& s, Output& out) { first_token(s, out, false); }
void resformer_fig19(Session& s, Output& out) { first_token(s, out, true); }

void resformer_fig12(Session& s, Output& out) {
  Table first{"layer1_spectrum", {}}, largest{"max_eigenvalue", {}};
  results::Figure left{"value covariance eigenvalues of layer 1, by rank (T = 128)", "rank", "eigenvalue", false, true, {}, {}};
  results::Figure right{"largest value covariance eigenvalue per layer", "layer", "eigenvalue", false, true, {}, {}};
  for (const auto& name : kResFormerPair) {
    const analysis::Report r = s.analyze(name, analysis::Kind::spectrum, {}, 128);
    const auto& layers = r.value["layers"].items();
    std::vector<double> e1, mx, ranks, index;
    for (const Value& x : layers.front()["eigenvalues"].items()) e1.push_back(x.number()), ranks.push_back(double(ranks.size() + 1));
    for (const Value& row : layers) mx.push_back(row["max"].number()), index.push_back(row["layer"].number());
    if (first.columns.empty()) first.columns.push_back({"rank", ranks}), largest.columns.push_back({"layer", index});
    first.columns.push_back({name, e1}), largest.columns.push_back({name, mx});
    left.series.push_back({"rank", name, "", name, "lines", ""}), right.series.push_back({"layer", name, "", name, "linespoints", ""});
    out.notes += "- " + name + ": largest eigenvalue per layer " + list_text(mx, 2) + "; layer 1's eigenvalues at ranks 1, 8, 32, 64: " +
                 fixed(e1[0], 3) + ", " + fixed(e1[std::min<std::size_t>(7, e1.size() - 1)], 3) + ", " +
                 fixed(e1[std::min<std::size_t>(31, e1.size() - 1)], 3) + ", " + fixed(e1[std::min<std::size_t>(63, e1.size() - 1)], 3) + "\n";
    out.value.set(name, r.value["layers"]);
  }
  out.draw(left, out.add(first), "layer1_spectrum");
  out.draw(right, out.add(largest), "max_eigenvalue");
}

void resformer_fig18(Session& s, Output& out) {
  scalar_comparison(s, out, analysis::Kind::similarity, {}, kResFormerPair,
                    "mean pairwise cosine of the hidden states (hf states: embedding, blocks, final norm), T = 128",
                    "token similarity", "similarity");
}

void resformer_fig20(Session& s, Output& out) {
  Table t{"entropy_by_length", {}};
  results::Figure f{"attention entropy (column) per layer at several sequence lengths", "layer", "entropy (nats)", false,
                    false, {}, {"set key outside"}};
  for (int T : {32, 64, 128})
    for (const auto& name : kResFormerPair) {
      const Curve c = layer_curve(s.analyze(name, analysis::Kind::entropy, {}, T));
      if (t.columns.empty()) t.columns.push_back({"layer", c.layer});
      const std::string col = name + " T=" + std::to_string(T);
      t.columns.push_back({col, c.mean});
      f.series.push_back({"layer", col, "", col, "linespoints", ""});
      out.value.set(col, Value::array_of(c.mean));
      out.notes += "- " + col + ": " + list_text(c.mean, 3) + " (mean " + fixed(mean_of(c.mean), 3) + "; ln T = " +
                   fixed(std::log(double(T)), 3) + ")\n";
    }
  out.draw(f, out.add(t), "entropy_by_length");
}

// Fig. 3: the vanilla model at kFig3Seeds seeds (the replicates), each analysed on the same sequences.
constexpr int kFig3Seeds = 3;

void resformer_fig3(Session& s, Output& out) {
  std::vector<analysis::Report> reports;
  Table t{"cross_layer", {}};
  results::Figure f{"cosine with true cross-layer attention to layer 1 (Eq. 2), vanilla, T = 128", "layer",
                    "cosine (mean over sequences)", false, false, {}, {"set key bottom right", "set xtics 1"}};
  for (int k = 0; k < kFig3Seeds; ++k) {
    const std::uint64_t seed = s.options().seed + std::uint64_t(k);
    reports.push_back(s.analyze("vanilla", analysis::Kind::cross_layer, {}, 128, seed));
    const auto& layers = reports.back().value["layers"].items();
    if (t.columns.empty()) t.columns.push_back({"layer", {}});
    const std::string tag = " s" + std::to_string(seed);
    Column eq3{"eq3" + tag, {}}, eq6{"eq6" + tag, {}};
    for (const Value& row : layers) {
      if (k == 0) t.columns[0].values.push_back(row["layer"].number());
      eq3.values.push_back(row["eq3"].number()), eq6.values.push_back(row["eq6"].number());
    }
    f.series.push_back({"layer", eq3.name, "", "Eq. 3 (current attention), seed " + std::to_string(seed), "linespoints lc 1", ""});
    f.series.push_back({"layer", eq6.name, "", "Eq. 6 (identity), seed " + std::to_string(seed), "linespoints lc 2", ""});
    out.notes += "- seed " + std::to_string(seed) + ", layers 1 … " + std::to_string(layers.size()) + ": Eq. 3 " +
                 list_text(eq3.values, 3) + "; Eq. 6 " + list_text(eq6.values, 3) + "\n";
    out.value.set("seed " + std::to_string(seed), reports.back().value["layers"]);
    t.columns.push_back(eq3), t.columns.push_back(eq6);
  }
  const analysis::CrossLayerVerdict v = analysis::cross_layer_verdict(reports);
  Value difference = Value::array();
  std::string text;
  for (std::size_t l = 0; l < v.difference.size(); ++l) {
    Value d = Value::object();
    d.set("layer", std::int64_t(l) + 2), d.set("mean", v.difference[l].value), d.set("se", v.difference[l].se);
    difference.push(d);
    text += (l ? ", " : "") + fixed(v.difference[l].value, 3) + " ± " + fixed(v.difference[l].se, 3);
  }
  out.value.set("difference_eq3_minus_eq6", difference);
  out.value.set("verdict", v.verdict);
  out.value.set("verdict_rule", analysis::kCrossLayerVerdictRule);
  out.notes += "- cos(Eq. 2, Eq. 3) − cos(Eq. 2, Eq. 6), mean ± se over the " + std::to_string(kFig3Seeds) +
               " seeds, layers 2 … L: " + text + "\n- verdict: " + v.verdict + " (" + analysis::kCrossLayerVerdictRule +
               ")\n";
  out.draw(f, out.add(t), "cross_layer");
}

// ---- SkipV1Former ------------------------------------------------------------------------------------

void skipv1_fig10(Session& s, Output& out) {
  const lm::Checkpoint vanilla = lm::load_checkpoint(s.checkpoint("vanilla"));
  const corpus::TokenArray tokens = corpus::read_token_file(s.options().data / "validation_tokens.npy");
  const lm::TokenSequences data = lm::token_sequences(tokens.ids, tokens.rows, tokens.cols, 128, 0);
  Table t{"initial_loss", {{"index", {}}, {"loss", {}}}};
  std::string tics;
  auto eval = [&](const std::string& label, const lm::Checkpoint& ck) {
    lm::Model<float> m(ck.config, s.backend());
    m.set_parameters(ck.values);
    const lm::EvalResult r = lm::evaluate(m, data, 16, [&](std::int64_t done, std::int64_t total) {
      s.progress("evaluate " + label, "sequences", done, total);
    });
    const double i = double(t.columns[0].values.size());
    t.columns[0].values.push_back(i), t.columns[1].values.push_back(r.loss);
    tics += (tics.empty() ? "" : ", ") + std::string("\"") + label + "\" " + fixed(i, 0);
    out.value.set(label, r.loss);
    out.notes += "- " + label + ": " + fixed(r.loss, 4) + " nats/token\n";
  };
  for (const char* method : {"mean-v", "mean-vo", "top-v", "top-vo", "svd"})
    eval(method, lm::convert_to_skipv1(vanilla, lm::parse_conversion(method)));
  eval("vanilla (not converted)", vanilla);
  out.value.set("validation_tokens", std::int64_t(data.sequences) * (data.length - 1));
  out.draw({"validation loss of the vanilla model converted to SkipV1 (before uptraining)", "", "loss (nats/token)",
            false, false, {{"index", "loss", "", "", "boxes fs solid 0.5", ""}},
            {"set xtics (" + tics + ") rotate by -30", "set boxwidth 0.6", "set yrange [*:*]", "set xrange [-0.6:" +
             fixed(double(t.columns[0].values.size()) - 0.4, 1) + "]", "unset key"}},
           out.add(t), "initial_loss");
}

void skipv1_fig12(Session& s, Output& out) {
  probes::ProbeData data;
  data.train = corpus::read_token_file(s.options().data / "train_tokens.npy").ids;
  data.validation = corpus::read_token_file(s.options().data / "validation_tokens.npy").ids;
  // The committed probes (docs/lm-comparisons.md): 300 steps, B = 16, T = 128, 256 windows, at the
  // learning rate every layer of both models chose from the grid 1e-4, 2e-4, 3e-4 there (each rate's
  // probe is trained on its own, on the same batches, so this is that run's chosen probe at a third
  // of the cost).
  probes::ProbeOptions o;
  o.lr_grid = {3e-4};
  o.steps = s.options().steps > 0 ? s.options().steps : 300;
  o.batch = 16, o.seq_len = 128, o.eval_windows = s.options().steps > 0 ? 8 : 256, o.seed = s.options().seed;
  Table t{"probe_loss", {}};
  results::Figure f{"layerwise linear probes (next token): validation loss per layer output", "layer output h_l",
                    "probe loss (nats)", false, false, {}, {"set key top right"}};
  for (const std::string name : {"vanilla", "skipv1"}) {
    auto m = s.model(name);
    const probes::ProbeReport r = probes::run_probes(*m, data, o, [&](std::int64_t done, std::int64_t total) {
      s.progress("probe " + name, "steps", done, total);
    });
    std::vector<double> layer, loss, se;
    for (const Value& row : r.value["layers"].items())
      layer.push_back(row["layer"].number()), loss.push_back(row["loss"].number()), se.push_back(row["se"].number());
    // h_0 (the embedding output, probed from the tied unembedding) is off the scale: layers 1 … L.
    layer.erase(layer.begin()), loss.erase(loss.begin()), se.erase(se.begin());
    if (t.columns.empty()) t.columns.push_back({"layer", layer});
    t.columns.push_back({name, loss}), t.columns.push_back({name + "_se", se});
    const double slope = r.deeper_half.slope, slope_se = r.deeper_half.se;
    const double xm = r.deeper_half.x_mean, ym = r.deeper_half.y_mean;  // the fitted line, drawn over the deeper half
    const int L = int(layer.size());
    f.series.push_back({"layer", name, "", name, "linespoints", ""});
    char line[160];
    std::snprintf(line, sizeof line, "(x >= %d ? %.10g + %.10g*(x - %.10g) : 1/0)", (L + 1) / 2, ym, slope, xm);
    f.series.push_back({"", "", line, name + " deeper-half slope " + fixed(slope, 3), "lines dt 2", ""});
    Value v = Value::object();
    v.set("loss", Value::array_of(loss)), v.set("se", Value::array_of(se));
    v.set("slope", slope), v.set("slope_se", slope_se);
    out.value.set(name, v);
    out.notes += "- " + name + ": loss on h_1 … h_" + std::to_string(L) + " " + list_text(loss, 3) +
                 "; deeper-half slope " + fixed(slope, 3) + " ± " + fixed(slope_se, 3) + "\n";
  }
  out.value.set("probe", Value(std::string("steps ") + std::to_string(o.steps) + ", batch 16, T = 128, " +
                               std::to_string(o.eval_windows) + " validation windows, lr 3e-4"));
  out.draw(f, out.add(t), "probe_loss");
}

// The last layer's head–head (Fig. 13) or token–token (Fig. 14) cosine matrix of both models.
void cosine_maps(Session& s, Output& out, analysis::Kind kind) {
  const bool heads = kind == analysis::Kind::heads;
  for (const std::string name : {"vanilla", "skipv1"}) {
    analysis::Report r = s.analyze(name, kind, {}, heads ? 128 : 64);
    double off = 0, magnitude = 0;
    std::int64_t n = 0;
    const auto& rows = r.value["matrix"].items();
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::size_t j = 0; j < rows[i].items().size(); ++j)
        if (i != j) off += rows[i].items()[j].number(), magnitude += std::abs(rows[i].items()[j].number()), ++n;
    out.value.set(name, r.value);
    out.value.set(name + "_mean_off_diagonal", off / double(n));
    out.value.set(name + "_mean_abs_off_diagonal", magnitude / double(n));
    out.notes += "- " + name + ": off-diagonal cosines at layer " + fixed(r.value["layer"].number(), 0) + ": mean " +
                 fixed(off / double(n), 3) + ", mean absolute value " + fixed(magnitude / double(n), 3) + "\n";
    r.figures[0].title = name + ": " + r.figures[0].title;
    r.tables[0].name = name + (heads ? "-heads" : "-tokens");
    out.draw(r.figures[0], out.add(r.tables[0]), r.tables[0].name);
  }
}
void skipv1_fig13(Session& s, Output& out) { cosine_maps(s, out, analysis::Kind::heads); }
void skipv1_fig14(Session& s, Output& out) { cosine_maps(s, out, analysis::Kind::tokens); }

// SkipV1Former Table 2's configurations (GPT2-355M with GQA or MLA, each with and without SkipV1) and the
// tiny preset: parameters and KV-cache bytes per token (docs/accounting.md).
void skipv1_table2(Session& s, Output& out) {
  struct Row {
    std::string name;
    lm::Config config;
  };
  lm::Config big = lm::find_preset("tiny").options.model;
  big.layers = 24, big.d = 1024, big.heads = 16, big.kv_heads = 16, big.head_dim = 64, big.ffn = 4096;
  big.vocab = 50257, big.positions = 1024;
  std::vector<Row> rows;
  for (const bool mla : {false, true})
    for (const bool skip : {false, true}) {
      lm::Config c = big;
      if (mla) c.mla = true, c.d_c = 256, c.d_r = 32;
      else c.kv_heads = 8;
      c.variant.kind = skip ? lm::VariantKind::skipv1 : lm::VariantKind::vanilla;
      rows.push_back({std::string(skip ? "SkipV1Former" : "Transformer") + (mla ? "-MLA" : "-GQA") + " (GPT2-355M)", c});
    }
  for (const bool skip : {false, true}) {
    lm::Config c = lm::find_preset("tiny").options.model;
    c.variant.kind = skip ? lm::VariantKind::skipv1 : lm::VariantKind::vanilla;
    rows.push_back({std::string(skip ? "SkipV1Former" : "Transformer") + " (tiny preset)", c});
  }
  Table t{"accounting", {{"row", {}}, {"parameters", {}}, {"kv_bytes_f32", {}}, {"kv_bytes_bf16", {}}, {"delta_kv_percent", {}}}};
  Value list = Value::array();
  out.notes += "| model | parameters | KV bytes/token (f32) | (bf16) | Δ KV |\n|---|---|---|---|---|\n";
  double base = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    lm::validate(rows[i].config);
    const std::int64_t params = lm::count_parameters(rows[i].config).total;
    const std::int64_t elements = lm::count_kv(rows[i].config).elements_per_token();
    if (i % 2 == 0) base = double(elements);
    const double delta = i % 2 == 1 ? 100.0 * (double(elements) - base) / base : 0.0;
    t.columns[0].values.push_back(double(i)), t.columns[1].values.push_back(double(params));
    t.columns[2].values.push_back(4.0 * double(elements)), t.columns[3].values.push_back(2.0 * double(elements));
    t.columns[4].values.push_back(delta);
    Value v = Value::object();
    v.set("model", rows[i].name), v.set("parameters", params), v.set("kv_bytes_per_token_f32", 4 * elements);
    v.set("kv_bytes_per_token_bf16", 2 * elements), v.set("delta_kv_percent", delta);
    list.push(v);
    out.notes += "| " + rows[i].name + " | " + std::to_string(params) + " | " + std::to_string(4 * elements) + " | " +
                 std::to_string(2 * elements) + " | " + (i % 2 ? fixed(delta, 2) + "%" : "—") + " |\n";
  }
  out.value.set("rows", list);
  out.draw({"KV-cache bytes per token (bf16): rows of the table", "row", "bytes", false, true,
            {{"row", "kv_bytes_bf16", "", "", "boxes fs solid 0.5", ""}}, {"set boxwidth 0.6", "unset key", "set xtics 1"}},
           out.add(t), "kv_bytes");
  (void)s;
}

// ---- Query-weight elimination --------------------------------------------------------------------------

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
  out.draw({"final validation loss (whole validation split), seed " + std::to_string(s.options().seed), "",
            "loss (nats/token)", false, false, {{"index", "final_validation_loss", "", "", "boxes fs solid 0.5", ""}},
            {"set xtics (" + tics + ")", "set boxwidth 0.6", "unset key", "set xrange [-0.6:1.6]"}},
           out.add(t), "qwe_table2");
}

void qwe_exp84(Session& s, Output& out) {
  transfer::TransferConfig c;  // `qkvlab transfer`'s defaults: d 16, 32, 64; 2,000 steps of 4,096
  c.seed = s.options().seed;
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

// `qkvlab icl anchor` and `icl depth` at their defaults (d = 4, n = 16, σ = 0.5, lr 5e-3; anchor:
// 3,000 steps of 128, 2 restarts, 40,000 held-out prompts; depth: 1,500 steps of 64, 20,000).
icl::TrainConfig icl_train(const Options& o, int steps, int batch) {
  icl::TrainConfig t;
  t.steps = o.steps > 0 ? int(o.steps) : steps, t.batch = batch, t.lr = 5e-3, t.log_every = std::max(1, t.steps / 100);
  return t;
}

void icl_anchor(Session& s, Output& out) {
  icl::AnchorConfig c;
  c.task = icl::Task{4, 16, 0.5, {}}, c.train = icl_train(s.options(), 3000, 128), c.restarts = 2;
  c.eval_samples = s.options().steps > 0 ? 2000 : 40000, c.seed = s.options().seed;
  c.threads = s.options().threads;  // 0: one per hardware thread, as everywhere
  const icl::AnchorResult r = icl::run_anchor(c, [&](int done, int total) { s.progress("icl anchor", "restarts", done, total); });
  const auto& best = r.runs[std::size_t(r.best)];
  Table t{"anchor", {{"step", best.curve.step}, {"loss", best.curve.loss}, {"one_step_gd", std::vector<double>(best.curve.step.size(), r.analytic.loss)}}};
  out.value.set("one_step_gd_loss", r.analytic.loss), out.value.set("one_step_gd_eta", r.analytic.eta);
  out.value.set("trained_loss", best.trained.value), out.value.set("trained_loss_se", best.trained.se);
  out.value.set("relative_gap", r.relative_gap());
  out.notes += "- best trained one-layer linear attention: held-out loss " + fixed(best.trained.value, 4) + " ± " +
               fixed(best.trained.se, 4) + "; best one-step GD (η* = " + fixed(r.analytic.eta, 4) + "): " +
               fixed(r.analytic.loss, 4) + "; relative gap " + fixed(100 * r.relative_gap(), 2) + "%\n";
  out.draw({"one-layer linear attention: training loss against the best one-step GD", "step", "loss", false, true,
            {{"step", "loss", "", "trained (best restart)", "lines", ""}, {"step", "one_step_gd", "", "one-step GD, eta*", "lines dt 2", ""}},
            {}},
           out.add(t), "anchor");
}

void icl_depth(Session& s, Output& out) {
  icl::DepthConfig c;
  c.task = icl::Task{4, 16, 0.5, {}}, c.train = icl_train(s.options(), 1500, 64);
  c.eval_samples = s.options().steps > 0 ? 2000 : 20000, c.seed = s.options().seed;
  c.threads = s.options().threads;  // 0: one per hardware thread, as everywhere
  const auto runs = icl::run_depth(c, [&](int done, int total) { s.progress("icl depth", "runs", done, total); });
  Table t{"depth", {{"layers", {}}, {"mha", {}}, {"skipv1", {}}}};
  Value list = Value::array();
  for (const auto& r : runs) {
    auto& col = t.columns[0].values;
    if (col.empty() || col.back() != r.layers) {
      col.push_back(r.layers);
      t.columns[1].values.push_back(std::nan("")), t.columns[2].values.push_back(std::nan(""));
    }
    (r.skipv1 ? t.columns[2] : t.columns[1]).values.back() = r.trained.value;
    if (r.layers == 1 && !r.skipv1) t.columns[2].values.back() = r.trained.value;  // at L = 1 SkipV1 is MHA
    Value v = Value::object();
    v.set("layers", r.layers), v.set("model", r.skipv1 ? "skipv1" : "mha"), v.set("loss", r.trained.value);
    v.set("se", r.trained.se);
    list.push(v);
    out.notes += "- L = " + std::to_string(r.layers) + ", " + (r.skipv1 ? "SkipV1" : "MHA") + ": held-out loss " +
                 fixed(r.trained.value, 4) + " ± " + fixed(r.trained.se, 4) + "\n";
  }
  out.value.set("runs", list);
  out.draw({"L-layer linear attention: held-out loss against depth", "layers L", "loss", false, false,
            {{"layers", "mha", "", "MHA", "linespoints", ""}, {"layers", "skipv1", "", "SkipV1", "linespoints", ""}}, {"set xtics 1"}},
           out.add(t), "depth");
}

// `qkvlab icl train`, `icl sweep` and `icl theory` at the committed runs' settings (docs/figures.md):
// the libraries' configurations from the commands' defaults (icl::TrainSettings), their runs, and
// their tables, figures, JSON and text, as the commands write them.

// An experiment's tables as the command writes them (its HDF5 groups, here one CSV each) and its
// figure, drawn from the table that holds its data (or from that data as a table of its own).
void add_experiment(Output& out, icl::ExperimentTables t, const std::string& stem) {
  std::optional<std::size_t> data;
  for (const auto& table : t.tables) {
    const std::size_t i = out.add(table);
    const bool same = table.name == t.plot.table.name && table.columns.size() == t.plot.table.columns.size() &&
                      std::equal(table.columns.begin(), table.columns.end(), t.plot.table.columns.begin(),
                                 [](const results::Column& a, const results::Column& b) {
                                   return a.name == b.name && a.values == b.values;
                                 });
    if (same && !data) data = i;
  }
  if (!data) t.plot.table.name = stem + "_figure", data = out.add(t.plot.table);
  out.draw(t.plot.figure, *data, stem);
}

// The command's printed table, in the README.
void add_text(Output& out, const std::string& command, const std::string& text) {
  out.notes += "\n`" + command + "` prints (the library's rendering, from these numbers):\n\n```\n" + text + "```\n";
}

// `icl train`'s and `icl sweep`'s defaults (icl::TrainSettings) with reproduce's seed and threads;
// --steps N: N Adam steps and, as icl-anchor and icl-depth, 2,000 held-out prompts.
icl::TrainSettings icl_settings(const Options& o, double w0_scale) {
  icl::TrainSettings t;
  t.w0_scale = w0_scale, t.seed = o.seed, t.threads = o.threads;  // threads 0: one per hardware thread
  if (o.steps > 0) t.steps = int(o.steps), t.eval_samples = 2000;
  return t;
}
// Monte Carlo prompts of the bounds and of icl theory: the command's, or 2,000 under --steps.
long icl_prompts(const Options& o, long prompts) { return o.steps > 0 ? 2000 : prompts; }

// The `qkvlab icl ...` command that computes the same numbers: `flags` the committed run's, `shortened`
// what --steps adds.
std::string icl_command(const Options& o, const std::string& flags, const std::string& shortened) {
  return "qkvlab icl " + flags + (o.seed != 1 ? " --seed " + std::to_string(o.seed) : "") +
         (o.steps > 0 && !shortened.empty() ? " " + shortened : "");
}
std::string shortened_training(const Options& o) {
  return "--steps " + std::to_string(o.steps) + " --eval-samples 2000 --theory-prompts " +
         std::to_string(icl_prompts(o, 0));
}

// `icl train [--assumption1] [--w0-scale 6]` (experiments 2 and 3).
void icl_train_figure(Session& s, Output& out, icl::FirstLayer first, double w0_scale) {
  const Options& o = s.options();
  const icl::TrainExperimentConfig c = icl::train_experiment_of(icl_settings(o, w0_scale), first, -1, icl::kAllVariants,
                                                                icl_prompts(o, icl::kTrainTheoryPrompts));
  const std::string command =
      icl_command(o, std::string("train") + (first == icl::FirstLayer::attention ? "" : " --assumption1") +
                         (w0_scale != 0 ? " --w0-scale " + fixed(w0_scale, 0) : ""),
                  shortened_training(o));
  const icl::TrainExperimentResult r =
      icl::run_train_experiment(c, [&](int done, int total) { s.progress("icl train", "runs", done, total); });
  out.value.set("command", command);
  out.value.set("experiment", icl::train_json(r));
  out.notes += "- Bayes loss C = " + fixed(r.C.value, 4) + " ± " + fixed(r.C.se, 4) + "\n";
  for (const auto& m : r.models) {
    out.notes += "- " + icl::variant_name(m.model) + ": best of " + std::to_string(c.restarts) + " restarts " +
                 fixed(m.best_loss, 4) + " ± " + fixed(m.best_se, 4) + " (restarts " + fixed(m.min, 4) + " … " +
                 fixed(m.max, 4) + ")";
    if (m.reference)
      out.notes += "; " + std::string(m.model == icl::Variant::mha ? "MHA lower bound " : "SkipV1 construction value ") +
                   fixed(m.reference->value, 4) + " ± " + fixed(m.reference->se, 4);
    out.notes += "\n";
  }
  if (r.skipv1_minus_mha)
    out.notes += "- SkipV1 − MHA (best runs, same prompts): " + fixed(r.skipv1_minus_mha->value, 4) + " ± " +
                 fixed(r.skipv1_minus_mha->se, 4) + "\n";
  add_experiment(out, icl::train_tables(r), "curves");
  add_text(out, command, icl::train_text(r));
}
void icl_assumption1(Session& s, Output& out) { icl_train_figure(s, out, icl::FirstLayer::copying_fixed, 0); }
void icl_assumption1_w0(Session& s, Output& out) { icl_train_figure(s, out, icl::FirstLayer::copying_fixed, 6); }
void icl_learned(Session& s, Output& out) { icl_train_figure(s, out, icl::FirstLayer::attention, 0); }
void icl_learned_w0(Session& s, Output& out) { icl_train_figure(s, out, icl::FirstLayer::attention, 6); }

// `icl sweep` at its defaults: d = 4, n = 16, σ = 0.5 (the task's single values), a = 0 … 4.
void icl_sweep(Session& s, Output& out) {
  const Options& o = s.options();
  const icl::TrainSettings t = icl_settings(o, 0);
  const icl::TrainExperimentConfig base = icl::sweep_base_of(t, icl_prompts(o, icl::kSweepTheoryPrompts));
  const icl::TrainSweep sweep = icl::run_train_sweep(icl::sweep_points(base, {t.d}, {t.n}, {t.sigma}),
                                                     [&](std::size_t done, std::size_t total) {
                                                       s.progress("icl sweep", "points", std::int64_t(done), std::int64_t(total));
                                                     });
  const std::string command = icl_command(o, "sweep", shortened_training(o));
  out.value.set("command", command);
  out.value.set("experiment", icl::sweep_json(sweep));
  for (std::size_t i = 0; i < sweep.points.size(); ++i) {
    const auto& r = sweep.results[i];
    const auto &mha = r.models[0], &skip = r.models[1];
    out.notes += "- a = " + std::to_string(sweep.points[i].a) + ": MHA trained " + fixed(mha.best_loss, 3) + " ± " +
                 fixed(mha.best_se, 3) + ", bound " + fixed(mha.reference->value, 3) + "; SkipV1 trained " +
                 fixed(skip.best_loss, 3) + " ± " + fixed(skip.best_se, 3) + ", construction " +
                 fixed(skip.reference->value, 3) + "\n";
  }
  add_experiment(out, icl::sweep_tables(sweep), "sweep");
  add_text(out, command, icl::sweep_text(sweep));
}

// `icl theory` as committed: W_0 = 0, W_0 = 3I (200,000 prompts each), and the sweep over d, n, σ
// and W_0 = cI (54 points, 50,000 prompts each); the MHA bound's and SkipV1's separation c_{d-1}.
void icl_theory(Session& s, Output& out) {
  const Options& o = s.options();
  struct Run {
    std::string stem, flags;
    icl::PriorMeanName w0;
  };
  for (const Run& run : {Run{"theory_w0_zero", "--w0 zero", {"zero", 1.0}}, Run{"theory_w0_3I", "--w0 identity --w0-scale 3", {"identity", 3.0}}}) {
    const long prompts = icl_prompts(o, icl::TheoryOptions{}.prompts);
    const icl::Task task{4, 16, 0.5, run.w0.w0 == "zero" ? MatD(MatD::Zero(4, 4)) : MatD(run.w0.scale * MatD::Identity(4, 4))};
    s.progress("icl theory " + run.flags, "runs", 0, 1);
    const icl::Theory t = icl::estimate_theory(task, {prompts, o.seed, o.threads});
    const std::string command = icl_command(o, "theory " + run.flags, "--prompts " + std::to_string(prompts));
    out.value.set(run.stem, icl::theory_json(t, run.w0, command));
    results::Table by_a = icl::theory_by_a_table(t), scalars = icl::theory_scalar_table(t);
    by_a.name = run.stem, scalars.name = run.stem + "_scalars";
    const std::size_t a = std::size_t(task.d), below = a - 1;
    out.notes += "- " + run.flags + ": SkipV1 at a = d (C + C_3) " + fixed(t.skipv1_value[a].value, 4) + " ± " +
                 fixed(t.skipv1_value[a].se, 4) + "; MHA bound at a = d − 1 " + fixed(t.mha_bound[below].value, 4) +
                 " ± " + fixed(t.mha_bound[below].se, 4) + ", at a = d " + fixed(t.mha_bound[a].value, 4) +
                 "; c_{d−1} = " + fixed(t.c_a[below].value, 4) + " ± " + fixed(t.c_a[below].se, 4) + "; C = " +
                 fixed(t.C.value, 4) + "\n";
    out.draw(icl::theory_figure(t), out.add(by_a), run.stem);
    out.add(scalars);
    add_text(out, command, icl::theory_text(t, run.w0));
  }
  const icl::TheoryGrid grid{{std::vector<double>{2, 4, 8}, std::vector<double>{8, 16, 32},
                              std::vector<double>{0.25, 0.5, 1}, std::vector<double>{0, 3}}};
  const icl::TheorySweep sweep = icl::run_theory_sweep(grid, true, {icl_prompts(o, 50000), o.seed, o.threads},
                                                       [&](std::size_t done, std::size_t total) {
                                                         s.progress("icl theory sweep", "points", std::int64_t(done), std::int64_t(total));
                                                       });
  const std::string command = icl_command(
      o, "theory --w0 identity --d-list 2,4,8 --n-list 8,16,32 --sigma-list 0.25,0.5,1 --w0-scale-list 0,3 --prompts " +
             std::to_string(icl_prompts(o, 50000)),
      "");
  out.value.set("theory_sweep", icl::sweep_json(sweep, command));
  results::Table points = icl::sweep_points_table(sweep), by_a = icl::sweep_by_a_table(sweep);
  points.name = "theory_sweep", by_a.name = "theory_sweep_by_a";
  out.add(points), out.add(by_a);
  results::Plot plot = icl::sweep_figure(sweep);
  plot.table.name = "theory_sweep_figure";
  out.draw(plot.figure, out.add(plot.table), "theory_sweep");
  // The separation MHA bound(a = d − 1) − SkipV1(a = d) = c_{d−1} at its smallest and largest point.
  std::size_t lo = 0, hi = 0;
  auto separation = [&](std::size_t p) { return sweep.points[p].c_a[std::size_t(sweep.points[p].task.d - 1)]; };
  for (std::size_t p = 1; p < sweep.points.size(); ++p) {
    if (separation(p).value < separation(lo).value) lo = p;
    if (separation(p).value > separation(hi).value) hi = p;
  }
  auto at = [&](std::size_t p) {
    return "d = " + fixed(grid.at(p, 0), 0) + ", n = " + fixed(grid.at(p, 1), 0) + ", σ = " + fixed(grid.at(p, 2), 2) +
           ", W_0 = " + (grid.at(p, 3) == 0 ? std::string("0") : fixed(grid.at(p, 3), 0) + "I");
  };
  out.notes += "- sweep (" + std::to_string(sweep.points.size()) + " points, " + std::to_string(icl_prompts(o, 50000)) +
               " prompts each; theory_sweep.csv, a row per point): c_{d−1} = MHA bound(a = d − 1) − SkipV1(a = d) from " +
               fixed(separation(lo).value, 6) + " ± " + fixed(separation(lo).se, 6) + " (" + at(lo) + ") to " +
               fixed(separation(hi).value, 4) + " ± " + fixed(separation(hi).se, 4) + " (" + at(hi) + ")\n";
  add_text(out, command, icl::sweep_text(sweep));
}

// The counts of figure_qwe_fdim.cpp (no training); --steps N > 0 counts at d = 4, L = 1 only.
void qwe_fdim(Session& s, Output& out) {
  FdimFigure f = qwe_fdim_counts(s.options().seed, s.options().steps > 0,
                                 [&](int done, int total) { s.progress("qwe-fdim", "settings", done, total); });
  out.value = std::move(f.value);
  for (auto& p : f.panels) out.draw(std::move(p.figure), out.add(std::move(p.table)), p.stem);
  out.notes += f.notes;
}

// ---- the registry -----------------------------------------------------------------------------------

// A figure and the function that makes it.
struct RegisteredFigure {
  Figure figure;
  void (*make)(Session&, Output&);
};

// Each figure and the function that makes it; registered() adds the measured durations.
std::vector<RegisteredFigure> registry() {
  return {
      {"resformer-fig1-left", "ResFormer Fig. 1 left: training loss of ResFormer ½(V_n + V_1) relative to vanilla",
       "ResFormer (002) Fig. 1, left: the relative training loss — the loss of each Transformer variant minus the "
       "vanilla Transformer's — along training, at a fixed size of 82M parameters. ResFormer's curve stays below zero "
       "and below those of DenseFormer and NeuTRENO: the paper's headline that value residual learning trains to a "
       "lower loss than the vanilla model of the same size.",
       "", {"vanilla", "resformer-half"},
       resformer_fig1_left},
      {"resformer-fig1-middle", "ResFormer Fig. 1 middle: attention entropy per layer, vanilla against ResFormer",
       "ResFormer (002) Fig. 1, middle: the average entropy of token importance (Eq. 11: the attention a token "
       "receives, averaged over queries and heads, normalized) per layer, in ResFormer and the vanilla Transformer. "
       "Lower entropy means attention concentrated on fewer tokens. The paper: concentration grows markedly with "
       "depth in the vanilla model and much less in ResFormer, whose entropy stays higher in the deeper layers.",
       "", {"vanilla", "resformer-half"},
       resformer_fig1_middle},
      {"resformer-fig3", "ResFormer Fig. 3: how well Eq. 3 and Eq. 6 approximate cross-layer attention to layer 1",
       "ResFormer (002) Fig. 3 (§3.2): for each layer of a trained baseline model, on 1,000 pre-training samples, "
       "the cosine similarity between the output of cross-layer attention (Eq. 2: the current queries over the keys "
       "and values of the current and an earlier layer) and that of Eq. 3 (the earlier keys replaced by the current "
       "ones: the current attention maps the earlier values) and of Eq. 6 (identity mapping). Eq. 3 is the better "
       "approximation; the paper derives ResFormer from it.",
       "", std::vector<std::string>(kFig3Seeds, "vanilla"),
       resformer_fig3},
      {"resformer-fig10", "ResFormer Fig. 10: the first token's importance, value norm and hidden norm per layer",
       "ResFormer (002) Fig. 10: the token importance, value-state norm and hidden-state norm of the first token of "
       "each sequence, per layer, in ResFormer and the vanilla Transformer. The first token is an attention sink "
       "(large importance) with a small value norm (a value-state drain) and a large hidden-state norm in the vanilla "
       "model; App. A.2 says ResFormer's first token gets less than 10 times the importance of the others.",
       "", {"vanilla", "resformer-half"},
       resformer_fig10},
      {"resformer-fig19", "ResFormer Fig. 19: token importance, value and hidden norms per position and layer",
       "ResFormer (002) Fig. 19 (App. A.2): token importance, value-state norms and hidden-state norms for tokens at "
       "different positions across layers, averaged over 1,000 sequences, so that only the start token is the same "
       "in every sequence. The start token attracts massive attention in the Transformer (and NeuTRENO) and shows a "
       "value-state drain; in ResFormer its importance is less than 10 times that of other positions.",
       "", {"vanilla", "resformer-half"},
       resformer_fig19},
      {"resformer-fig12", "ResFormer Fig. 12: value-state spectra (layer 1's eigenvalues; largest per layer)",
       "ResFormer (002) Fig. 12: left, the distribution of the eigenvalues of the value states' covariance in the "
       "first layer of ResFormer and the Transformer (descending, averaged over 1,000 sequences); right, the largest "
       "eigenvalue in each layer. The paper reads it as the value states of most of ResFormer's layers having a "
       "stronger representational capacity than the vanilla model's.",
       "", {"vanilla", "resformer-half"},
       resformer_fig12},
      {"resformer-fig18", "ResFormer Fig. 18: token similarity of the hidden states per layer",
       "ResFormer (002) Fig. 18: the average pairwise cosine similarity of the tokens' hidden states (Eq. 13) per "
       "layer, in Llama-3.1-8B and Mistral-7B. The paper finds an 'M'-shaped curve over depth where the entropy "
       "(Fig. 1 right) is 'W'-shaped: attention concentration goes with over-smoothing. Here the same measure on the "
       "small trained models, vanilla against ResFormer.",
       "", {"vanilla", "resformer-half"},
       resformer_fig18},
      {"resformer-fig20", "ResFormer Fig. 20: attention entropy per layer at several sequence lengths",
       "ResFormer (002) Fig. 20 (App. A.2): the average entropy of token importance per layer in ResFormer and the "
       "vanilla Transformer, on test sequences of different lengths. The paper: ResFormer mitigates attention "
       "concentration more when the sequences are shorter.",
       "", {"vanilla", "resformer-half"},
       resformer_fig20},
      {"skipv1-fig10", "SkipV1Former Fig. 10: validation loss of the vanilla model converted by each method",
       "SkipV1Former (000) Fig. 10 (App. B.1): the initial loss of a pretrained vanilla checkpoint converted to "
       "SkipV1Former by each method — Mean V (the paper's: mean-pool every two value-head projections), Mean VO, "
       "Top V, Top VO and SVD — before uptraining. The paper reports every alternative above Mean V, its method.",
       "", {"vanilla"},
       skipv1_fig10},
      {"skipv1-fig12", "SkipV1Former Fig. 12: layerwise linear probes and the deeper-half slopes",
       "SkipV1Former (000) Fig. 12 (App. C.1): a linear probe trained on the output of each layer of a 12-layer "
       "GPT-2, validation loss per layer for the baseline and SkipV1Former, with best-fit lines over layers 7–12. "
       "SkipV1Former's steeper negative slope is read as faster-improving representations in the deeper layers.",
       "", {"vanilla", "skipv1"},
       skipv1_fig12},
      {"skipv1-fig13", "SkipV1Former Fig. 13: head–head cosine similarity at the last layer",
       "SkipV1Former (000) Fig. 13: the head–head cosine similarity matrix at layer 12 of the baseline and of "
       "SkipV1Former. SkipV1Former shows lower inter-head similarity (more diverse heads), attributed to the "
       "uncompressed first-layer values injected into the deeper layers.",
       "", {"vanilla", "skipv1"},
       skipv1_fig13},
      {"skipv1-fig14", "SkipV1Former Fig. 14: token–token cosine similarity at the last layer",
       "SkipV1Former (000) Fig. 14: the token–token cosine similarity matrix at layer 12 of the baseline and of "
       "SkipV1Former. Apart from a few tokens, SkipV1Former's tokens are less similar to each other (less "
       "over-smoothing).",
       "", {"vanilla", "skipv1"},
       skipv1_fig14},
      {"skipv1-table2", "SkipV1Former Table 2: parameters and KV-cache bytes per token with GQA and MLA",
       "SkipV1Former (000) Table 2: validation loss, perplexity, parameters and KV-cache bytes per token of the "
       "Transformer and SkipV1Former with GQA and with MLA on GPT2-355M: SkipV1 reduces the KV bytes by 24.0% (GQA) "
       "and 44.4% (MLA) at a slightly lower loss. Here the exact accounting of the four configurations (no training; "
       "the losses need the paper's scale) and of the tiny preset.",
       "", {},
       skipv1_table2},
      {"qwe-table2", "Query-weight elimination Table 2 at small scale: vanilla against Q-identity",
       "Query-weight elimination (003) Table 2: GPT-2 124M-class models trained on OpenWebText — the baseline, "
       "smaller baselines, and reduced models without W_Q (Q-identity) at higher learning rates — with their "
       "non-embedding parameters and validation losses; the reduced model matches the baseline's loss with fewer "
       "parameters. Here the tiny GPT-2 preset: vanilla against Q-identity at twice the peak learning rate and a "
       "floor of peak/100 (the committed sweep's choice: the paper's rates were lost from its text).",
       "", {"vanilla", "q-identity-lr"},
       qwe_table2},
      {"qwe-exp8.4", "Query-weight elimination §8.4: MLP basis transfer (qkvlab transfer at its defaults)",
       "Query-weight elimination (003) App. 8.4: a skip MLP x + W̃₂GELU(W̃₁x) trained to reproduce a basis-changed "
       "skip block, against the best linear map; the trained MLP approximates the transformed block far better than "
       "any linear map, so the basis change can be absorbed approximately though not exactly.",
       "", {},
       qwe_exp84},
      {"icl-anchor", "SkipV1Former App. A, experiment 4: one-layer linear attention against one-step GD",
       "SkipV1Former (000) App. A (docs/math/icl.md, experiment 4): a one-layer linear self-attention trained on "
       "in-context linear regression reaches the loss of the best one-step gradient-descent predictor — the anchor "
       "of the theorem's comparison (qkvlab icl anchor at its defaults).",
       "", {},
       icl_anchor},
      {"icl-depth", "SkipV1Former App. A, experiment 5: held-out loss of L-layer MHA and SkipV1 linear attention",
       "SkipV1Former (000) App. A (docs/math/icl.md, experiment 5): L-layer linear attention, MHA and SkipV1, trained on "
       "in-context linear regression; the loss against depth, and the layerwise comparison with multi-step GD "
       "(qkvlab icl depth at its defaults).",
       "", {},
       icl_depth},
      {"icl-assumption1", "SkipV1Former App. A, experiment 2: trained two-layer MHA, SkipV1, ResFormer, SVFormer under Assumption 1",
       "SkipV1Former (000) §4 and App. A (Theorem 1/2; docs/math/icl.md, experiment 2): with Assumption 1's "
       "coordinate copying first layer (A = [I_a 0], B = [0 I_(d-a)], here a = d), every two-layer MHA has loss at "
       "least C + C_3 + c_a, while SkipV1 (half of the second layer's heads take their values from the first layer) "
       "reaches C + C_3 at the paper's construction: SkipV1 learns in context strictly better than MHA "
       "(qkvlab icl train --assumption1 at its defaults: W_0 = 0).",
       "", {},
       icl_assumption1},
      {"icl-assumption1-w0", "SkipV1Former App. A, experiment 2 at W_0 = 6I: the theorem's prior-mean regime",
       "SkipV1Former (000) App. A (docs/math/icl.md, experiment 2) with the prior mean W_0 = 6I, which satisfies the "
       "theorem's condition σ_d(W_0) > 2√d σ: the same comparison of trained MHA, SkipV1, ResFormer and SVFormer with "
       "Assumption 1's copying layer against MHA's bound and the SkipV1 construction (qkvlab icl train --assumption1 "
       "--w0-scale 6).",
       "", {},
       icl_assumption1_w0},
      {"icl-learned", "SkipV1Former App. A, experiment 3: the two-layer models with a learned first layer",
       "SkipV1Former (000) App. A (docs/math/icl.md, experiment 3): the theorem's comparison without Assumption 1 — "
       "the first attention layer is learned too — for MHA, SkipV1, ResFormer (V_2 + V_1) and SVFormer (V_1 only), "
       "on in-context linear regression at W_0 = 0 (qkvlab icl train at its defaults).",
       "", {},
       icl_learned},
      {"icl-learned-w0", "SkipV1Former App. A, experiment 3 at W_0 = 6I: learned first layer, the theorem's regime",
       "SkipV1Former (000) App. A (docs/math/icl.md, experiment 3) at the prior mean W_0 = 6I (σ_d(W_0) > 2√d σ): the "
       "four two-layer models with a learned first layer (qkvlab icl train --w0-scale 6; 3,000 steps — the "
       "30,000-step runs of docs/figures.md are not remade).",
       "", {},
       icl_learned_w0},
      {"icl-sweep", "SkipV1Former App. A, experiment 2 over a: trained MHA and SkipV1 against the bound lines",
       "SkipV1Former (000) App. A (docs/math/icl.md, experiment 2): under Assumption 1 with copy width a = 0 … d, "
       "trained MHA against its lower bound C + C_3 + c_a and trained SkipV1 against the construction's value "
       "(C + C_3 at a = d; an achieved value for a < d); the theorem: SkipV1 below every MHA (qkvlab icl sweep at "
       "its defaults).",
       "", {},
       icl_sweep},
      {"icl-theory", "SkipV1Former Theorem 1/2: the closed-form quantities C, C_3, c_a, MHA bound, SkipV1 value",
       "SkipV1Former (000) §4 (Theorem 1) and App. A (Theorem 2, Lemmas 1–4; docs/math/icl.md, experiment 1): MHA's "
       "loss is at least C + C_3 + c_a and SkipV1's construction reaches C + C_3, so SkipV1 is better by c_a > 0. "
       "Each quantity by Monte Carlo over prompts (qkvlab icl theory at W_0 = 0 and W_0 = 3I, 200,000 prompts; and "
       "its sweep over d, n, σ and W_0 = cI, 50,000 prompts a point).",
       "", {},
       icl_theory},
      {"qwe-fdim", "Query-weight elimination: what W_Q = I costs, as functional dimension (qkvlab fdim)",
       "Query-weight elimination argues that W_Q is redundant because a change of basis absorbs it (Theorems "
       "4.1-4.3, without normalization), and its GPT-2 experiment sets W_Q = I in every layer of a pre-LayerNorm "
       "model. Where the absorption holds, the model with W_Q = I computes the same set of functions; the count that "
       "settles it is the functional dimension, the rank of the Jacobian of parameters -> outputs (docs/math/fdim.md). "
       "Here the rank with free queries against W_Q = I in every layer, over skips x norm x layers at d = 4 and 6.",
       "", {},
       qwe_fdim},
  };
}

// Wall times measured at the default recipe on the 2-core machine (2026-11-23, shared with another
// compilation): each figure's own work with its models cached, and each training (docs/figures.md).
// The icl figures from icl-assumption1 on: with --threads 1, on the 2-core machine shared with
// another engineer's compiler; resformer-fig3 (2026-11-25) at the default threads, the machine
// shared with four other engineers' builds; qwe-fdim (2026-11-25) under a load average of 19 (30 s of CPU).
const std::map<std::string, double>& measured_seconds() {
  static const std::map<std::string, double> m = {
      {"resformer-fig1-left", 0.55}, {"resformer-fig1-middle", 1.73}, {"resformer-fig10", 1.98},
      {"resformer-fig19", 2.71},     {"resformer-fig12", 3.12},       {"resformer-fig18", 2.11},
      {"resformer-fig20", 2.84},     {"skipv1-fig10", 110},           {"skipv1-table2", 0.36},
      {"skipv1-fig12", 917},         {"skipv1-fig13", 1.93},          {"skipv1-fig14", 1.70},
      {"qwe-table2", 0.40},          {"icl-anchor", 7.54},            {"icl-depth", 23.3},
      {"qwe-exp8.4", 181},           {"icl-assumption1", 20.7},       {"icl-assumption1-w0", 19.6},
      {"icl-learned", 28.2},         {"icl-learned-w0", 27.5},        {"icl-sweep", 55.1},
      {"icl-theory", 43.8},          {"resformer-fig3", 21.8},        {"qwe-fdim", 394}};
  return m;
}
const std::map<std::string, double>& training_seconds() {
  static const std::map<std::string, double> m = {{"vanilla", 746}, {"resformer-half", 845}, {"skipv1", 718}, {"q-identity-lr", 866}};
  return m;
}

std::string duration_text(const Figure& f) {
  auto text = [](double s) { return s < 10 ? fixed(s, 1) + " s" : s < 120 ? fixed(s, 0) + " s" : fixed(s / 60, 1) + " min"; };
  const auto own = measured_seconds().find(f.name);
  std::string out = own == measured_seconds().end() ? "not measured" : text(own->second);
  if (f.recipes.empty()) return out;
  out += " with its models cached; training ";
  double total = 0;
  bool all = true;
  for (const auto& r : f.recipes) {
    const auto t = training_seconds().find(r);
    if (t == training_seconds().end()) all = false;
    else total += t->second;
  }
  return out + (all ? text(total) : "not all measured") + " first (measured, 2 cores)";
}

const std::vector<RegisteredFigure>& registered() {
  static const std::vector<RegisteredFigure> list = [] {
    std::vector<RegisteredFigure> e = registry();
    for (auto& entry : e) entry.figure.duration = duration_text(entry.figure);
    return e;
  }();
  return list;
}

}  // namespace

const std::vector<Figure>& figures() {
  static const std::vector<Figure> list = [] {
    std::vector<Figure> f;
    for (const auto& entry : registered()) f.push_back(entry.figure);
    return f;
  }();
  return list;
}

const Figure& find_figure(const std::string& name) {
  std::string known;
  for (const auto& f : figures()) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + f.name;
  }
  throw UsageError("unknown figure \"" + name + "\" (known: " + known + ")");
}

Result run_figure(const Context& context, const Figure& figure, const fs::path& dir) {
  const std::string& name = figure.name;
  const auto& all = registered();
  const auto entry = std::find_if(all.begin(), all.end(), [&](const RegisteredFigure& e) { return e.figure.name == name; });
  if (entry == all.end()) throw UsageError("unknown figure \"" + name + "\"");
  Session session(context);
  Output out;
  entry->make(session, out);

  Value v = Value::object();
  v.set("figure", name);
  v.set("remakes", figure.remakes);
  v.set("paper", figure.paper);
  v.set("seed", context.options.seed);
  v.set("steps", context.options.steps > 0 ? Value(context.options.steps) : Value("recipe"));
  v.set("sequences", context.options.sequences);
  v.set("device", session.backend().description());
  v.set("runs", session.runs());
  v.set("results", out.value);
  v.set("command_line", context.options.command_line);
  v = with_verdict(name, v);

  std::string readme = "# " + name + "\n\n" + figure.remakes + ".\n\n## The paper's figure\n\n" + figure.paper +
                       "\n\n## Remade here\n\n";
  for (const auto& d : out.drawn) readme += "![" + d.figure.title + "](" + d.stem + ".png)\n\n";
  readme += "Numbers (also in " + name + ".json):\n\n" + out.notes + "\n## Verdict\n\n" + v["claim"].string() + ": **" +
            v["verdict"].string() + "** (" + v["rule"].string() + ").\n\nCommand: `" + context.options.command_line + "`\n";

  fs::create_directories(dir);
  StagedFiles files;  // every file of the figure: all or none
  Result result;
  auto staged = [&](const fs::path& p) { result.written.push_back(p); };
  files.add_bytes(dir / (name + ".json"), "JSON", v.json());
  staged(dir / (name + ".json"));
  for (const auto& t : out.tables) results::stage_csv(files, dir / (t.name + ".csv"), t), staged(dir / (t.name + ".csv"));
  for (const auto& d : out.drawn)
    if (results::stage_figure(files, d.figure, out.tables[d.table], dir / d.stem))
      staged(dir / (d.stem + ".svg")), staged(dir / (d.stem + ".png"));
  files.add_bytes(dir / "README.md", "Markdown", readme);
  staged(dir / "README.md");
  files.commit();
  result.value = v;
  return result;
}

}  // namespace qkvlab::reproduce
