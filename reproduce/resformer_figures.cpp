// ResFormer's figures (figure_kit.hpp): the analyses of analysis/ on the trained vanilla and
// ResFormer ½(V_n + V_1) models, and their relative training loss (lm/compare).
#include <algorithm>
#include <cmath>

#include "analysis/analyze.hpp"
#include "lm/compare.hpp"  // moving_average
#include "lm/run_log.hpp"  // read_log
#include "reproduce/figure_kit.hpp"

namespace qkvlab::reproduce {

namespace {
// Per-layer mean and se of a scalar analysis (entropy, similarity).
struct Curve {
  std::vector<double> layer, mean, se;
};
Curve layer_curve(const analysis::Report& r) {
  Curve c;
  for (const analysis::LayerSummary& row : r.kind == analysis::Kind::entropy ? r.entropy : r.similarity)
    c.layer.push_back(row.layer), c.mean.push_back(row.summary.value), c.se.push_back(row.summary.se);
  return c;
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
    f.series.push_back({"layer", name, "", name + " (± se over sequences)", "yerrorlines", name + "_se"});
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
  results::Figure f{"training loss minus vanilla's (moving average of 10 steps)",
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
    const auto& layers = r.first_token;
    const auto measure = [](const analysis::FirstTokenLayer& row, int k) -> const analysis::FirstTokenMeasure& {
      return k == 0 ? row.importance : k == 1 ? row.value_norm : row.hidden_norm;
    };
    out.value.set(name, r.to_value()["layers"]);
    if (!per_position) {
      if (t.columns.empty()) {
        t.columns.push_back({"layer", {}});
        for (const auto& row : layers) t.columns[0].values.push_back(row.layer);
      }
      for (int k = 0; k < 3; ++k) {
        Column c{name + " " + short_names[k], {}}, spread{c.name + " std", {}};  // the spread over the sequences
        for (const auto& row : layers)
          c.values.push_back(measure(row, k).ratio.value), spread.values.push_back(measure(row, k).ratio.std);
        out.notes += "- " + c.name + ": " + list_text(c.values, 2) + "\n";
        t.columns.push_back(c), t.columns.push_back(spread);
        f.series.push_back({"layer", c.name, "", c.name + " (± std over sequences)", "yerrorlines", spread.name});
      }
      continue;
    }
    // Fig. 19: per layer and position (the first 32), each position's value over the mean of all.
    for (int k = 0; k < 3; ++k) {
      Table m{name + "-" + short_names[k], {{"position", {}}, {"layer", {}}, {"ratio", {}}}};
      std::string first;
      for (const auto& row : layers) {
        const auto& p = measure(row, k).per_position;
        for (std::size_t i = 0; i < std::min<std::size_t>(32, p.size()); ++i)
          m.columns[0].values.push_back(double(i)), m.columns[1].values.push_back(row.layer),
              m.columns[2].values.push_back(std::log10(p[i]));
        if (!first.empty()) first += ' ';
        first += fixed(p[0], 2);
      }
      out.notes += "- " + name + ", " + short_names[k] + " of position 0 over the mean of all positions, layers 1 … L: " + first + "\n";
      out.draw({name + ": " + short_names[k] + " per position / mean (log10)", "position", "layer", false, false,
                {{"position", "layer", "", "", "image", "ratio"}},
                {"set palette rgbformulae 33,13,10", "set cbrange [-1:2]", "set xrange [-0.5:31.5]",
                 "set yrange [0.5:" + std::to_string(layers.size()) + ".5]"}},
               out.add(m), name + "-" + short_names[k]);
    }
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
    const std::vector<double>& e1 = r.spectrum.front().eigenvalues;
    std::vector<double> mx, mx_se, ranks, index;
    for (std::size_t i = 0; i < e1.size(); ++i) ranks.push_back(double(i + 1));
    for (const analysis::SpectrumLayer& row : r.spectrum)
      mx.push_back(row.max.value), mx_se.push_back(row.max.se), index.push_back(row.layer);
    if (first.columns.empty()) first.columns.push_back({"rank", ranks}), largest.columns.push_back({"layer", index});
    first.columns.push_back({name, e1}), largest.columns.push_back({name, mx}), largest.columns.push_back({name + "_se", mx_se});
    left.series.push_back({"rank", name, "", name, "lines", ""});
    right.series.push_back({"layer", name, "", name + " (± se over sequences)", "yerrorlines", name + "_se"});
    out.notes += "- " + name + ": largest eigenvalue per layer " + list_text(mx, 2) + "; layer 1's eigenvalues at ranks 1, 8, 32, 64: " +
                 fixed(e1[0], 3) + ", " + fixed(e1[std::min<std::size_t>(7, e1.size() - 1)], 3) + ", " +
                 fixed(e1[std::min<std::size_t>(31, e1.size() - 1)], 3) + ", " + fixed(e1[std::min<std::size_t>(63, e1.size() - 1)], 3) + "\n";
    out.value.set(name, r.to_value()["layers"]);
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
      t.columns.push_back({col, c.mean}), t.columns.push_back({col + " se", c.se});
      f.series.push_back({"layer", col, "", col + " (± se)", "yerrorlines", col + " se"});
      out.value.set(col, Value::array_of(c.mean)), out.value.set(col + " se", Value::array_of(c.se));
      out.notes += "- " + col + ": " + list_text(c.mean, 3) + " (mean " + fixed(mean_of(c.mean), 3) + "; ln T = " +
                   fixed(std::log(double(T)), 3) + ")\n";
    }
  out.draw(f, out.add(t), "entropy_by_length");
}

// Fig. 3: the vanilla model's cosines of Eq. 3 and Eq. 6 with true cross-layer attention to layer 1
// (Eq. 2) per layer, ± se over the sequences; replicated over seeds by the registry (Entry::seeds),
// each seed's model on the same sequences.
void resformer_fig3(Session& s, Output& out) {
  const analysis::Report r = s.analyze("vanilla", analysis::Kind::cross_layer, {}, 128);
  Table t{"cross_layer", {{"layer", {}}, {"eq3", {}}, {"eq3_se", {}}, {"eq6", {}}, {"eq6_se", {}}}};
  std::vector<double> difference;
  for (const analysis::CrossLayerCosine& row : r.cross_layer) {
    for (const auto& [k, x] : {std::pair{0, double(row.layer)}, std::pair{1, row.eq3.value}, std::pair{2, row.eq3.se},
                               std::pair{3, row.eq6.value}, std::pair{4, row.eq6.se}})
      t.columns[std::size_t(k)].values.push_back(x);
    if (row.layer > 1) difference.push_back(row.eq3.value - row.eq6.value);
  }
  results::Figure f{"cosine with true cross-layer attention to layer 1 (Eq. 2), vanilla, T = 128", "layer",
                    "cosine (mean over sequences)", false, false,
                    {{"layer", "eq3", "", "Eq. 3 (current attention) (± se over sequences)", "yerrorlines lc 1", "eq3_se"},
                     {"layer", "eq6", "", "Eq. 6 (identity) (± se over sequences)", "yerrorlines lc 2", "eq6_se"}},
                    {"set key bottom right", "set xtics 1"}};
  out.value.set("layers", r.to_value()["layers"]);
  out.notes += "- layers 1 … " + std::to_string(r.cross_layer.size()) + ": Eq. 3 " + list_text(t.columns[1].values, 3) +
               "; Eq. 6 " + list_text(t.columns[3].values, 3) + "; Eq. 3 − Eq. 6 in layers 2 … L: " +
               list_text(difference, 3) + "\n";
  out.draw(f, out.add(t), "cross_layer");
}

}  // namespace

std::vector<Entry> resformer_figures() {
  return {
      {"resformer-fig1-left", {"vanilla", "resformer-half"}, resformer_fig1_left, 3},
      {"resformer-fig1-middle", {"vanilla", "resformer-half"}, resformer_fig1_middle, 3},
      {"resformer-fig3", {"vanilla"}, resformer_fig3, 3},
      {"resformer-fig10", {"vanilla", "resformer-half"}, resformer_fig10, 3},
      {"resformer-fig19", {"vanilla", "resformer-half"}, resformer_fig19, 3},
      {"resformer-fig12", {"vanilla", "resformer-half"}, resformer_fig12, 3},
      {"resformer-fig18", {"vanilla", "resformer-half"}, resformer_fig18, 3},
      {"resformer-fig20", {"vanilla", "resformer-half"}, resformer_fig20, 3},
  };
}

}  // namespace qkvlab::reproduce
