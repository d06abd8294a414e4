// SkipV1Former's figures (figure_kit.hpp): the conversions (lm/convert), the layerwise probes
// (probes/), the last layer's cosine maps (analysis/) and the accounting of Table 2 (lm/accounting).
#include <cmath>

#include "analysis/analyze.hpp"
#include "lm/accounting.hpp"
#include "lm/checkpoint.hpp"
#include "lm/convert.hpp"
#include "lm/evaluate.hpp"
#include "probes/layerwise.hpp"
#include "reproduce/figure_kit.hpp"

namespace qkvlab::reproduce {

namespace {

void skipv1_fig10(Session& s, Output& out) {
  const lm::Checkpoint vanilla = lm::load_checkpoint(s.checkpoint("vanilla"));
  const std::vector<std::int32_t>& validation = s.data().validation;
  const lm::TokenSequences data = lm::token_sequences(validation, std::int64_t(validation.size()), 0, 128, 0);
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
  // mean-v is the released average (released-avg) and svd the released SVD (released-svd); the
  // released column top-k conversions and qkvlab's own readings beside them (lm/convert.hpp).
  for (const char* method :
       {"mean-v", "mean-v-adjacent", "mean-vo", "top-v", "top-vo", "released-topk", "released-topk1", "svd",
        "released-topk-as-run", "released-svd-as-run"})
    eval(method, lm::convert_to_skipv1(vanilla, lm::parse_conversion(method)));
  eval("vanilla (not converted)", vanilla);
  out.value.set("validation_tokens", std::int64_t(data.sequences) * (data.length - 1));
  out.draw({"validation loss of the vanilla model converted to SkipV1 (before uptraining)", "", "loss (nats/token)",
            false, false, {{"index", "loss", "", "", "boxes fs solid 0.5", ""}},
            {"set xtics (" + tics + ") rotate by -30", "set boxwidth 0.6", "set yrange [*:*]", "set xrange [-0.6:" +
             fixed(double(t.columns[0].values.size()) - 0.4, 1) + "]", "unset key"}},
           out.add(t), "initial_loss");
}

// Fig. 12 with the toolkit's probe recipe (skipv1-fig12) or the released one (skipv1-fig12-released:
// probes/layerwise.hpp), at the same steps, batches, rate and number of validation windows.
void skipv1_fig12(Session& s, Output& out, probes::ProbeRecipe recipe) {
  probes::ProbeData data;
  data.train = s.data().train, data.validation = s.data().validation;
  // The committed probes (docs/lm-comparisons.md): 300 steps, B = 16, T = 128, 256 windows, at the
  // learning rate every layer of both models chose from the grid 1e-4, 2e-4, 3e-4 there (each rate's
  // probe is trained on its own, on the same batches, so this is that run's chosen probe at a third
  // of the cost).
  probes::ProbeOptions o;
  o.lr_grid = {3e-4};
  o.steps = s.options().steps > 0 ? s.options().steps : 300;
  o.batch = 16, o.seq_len = 128, o.eval_windows = s.options().steps > 0 ? 8 : 256, o.seed = s.options().seed;
  o.recipe = recipe;
  Table t{"probe_loss", {}};
  results::Figure f{"layerwise linear probes (next token): validation loss per layer output", "layer output h_l",
                    "probe loss (nats)", false, false, {}, {"set key top right"}};
  for (const std::string name : {"vanilla", "skipv1"}) {
    auto m = s.model(name);
    const probes::ProbeReport r = probes::run_probes(*m, data, o, [&](std::int64_t done, std::int64_t total) {
      s.progress("probe " + name, "steps", done, total);
    });
    std::vector<double> layer, loss, se;
    for (const probes::ProbeLayer& row : r.layers)
      layer.push_back(row.layer), loss.push_back(row.loss.value), se.push_back(row.loss.se);
    // h_0 (the embedding output, probed from the tied unembedding) is off the scale: layers 1 … L.
    layer.erase(layer.begin()), loss.erase(loss.begin()), se.erase(se.begin());
    if (t.columns.empty()) t.columns.push_back({"layer", layer});
    t.columns.push_back({name, loss}), t.columns.push_back({name + "_se", se});
    const double slope = r.deeper_half.slope, slope_se = r.deeper_half.se;
    const double xm = r.deeper_half.x_mean, ym = r.deeper_half.y_mean;  // the fitted line, drawn over the deeper half
    const int L = int(layer.size());
    f.series.push_back({"layer", name, "", name + " (± se over windows)", "yerrorlines", name + "_se"});
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
                               std::to_string(o.eval_windows) + " validation windows, lr 3e-4, recipe " +
                               (recipe == probes::ProbeRecipe::released ? "released" : "qkvlab")));
  out.draw(f, out.add(t), "probe_loss");
}

// The last layer's cosine matrix of both models: head–head of `of` (Fig. 13) or token–token
// (Fig. 14). Keys and files carry `tag` ("" for the figure's first matrix).
void cosine_maps(Session& s, Output& out, analysis::Kind kind, analysis::HeadMatrixOf of, const std::string& tag) {
  const bool heads = kind == analysis::Kind::heads;
  analysis::Options o;
  o.head_matrix = of;
  for (const std::string name : {"vanilla", "skipv1"}) {
    analysis::Report r = s.analyze(name, kind, o, heads ? 128 : 64);
    const double off = r.cosine->mean_off_diagonal(), magnitude = r.cosine->mean_abs_off_diagonal();
    out.value.set(name + tag, r.to_value());
    out.value.set(name + tag + "_mean_off_diagonal", off);
    out.value.set(name + tag + "_mean_abs_off_diagonal", magnitude);
    out.notes += "- " + name + tag + ": off-diagonal cosines at layer " + std::to_string(r.cosine->layer) + ": mean " +
                 fixed(off, 3) + ", mean absolute value " + fixed(magnitude, 3) + "\n";
    r.figures[0].title = name + ": " + r.figures[0].title;
    r.tables[0].name = name + (heads ? "-heads" : "-tokens") + tag;
    // Heads are not matched across seeds (any permutation of a layer's heads is the same model), so a
    // head–head map has no mean over seeds; tokens are the same sequences in every seed.
    out.draw(r.figures[0], out.add(r.tables[0]), r.tables[0].name, !heads);
  }
}
// Fig. 13: the heads' outputs z_h (qkvlab's first reading) and their attention patterns A_h (what the
// released script compares), both at the last layer.
// The maps have no mean over seeds; the verdict's three means do, drawn as bars.
void skipv1_fig13(Session& s, Output& out) {
  cosine_maps(s, out, analysis::Kind::heads, analysis::HeadMatrixOf::outputs, "");
  cosine_maps(s, out, analysis::Kind::heads, analysis::HeadMatrixOf::patterns, "-patterns");
  Table t{"off_diagonal", {{"index", {}}, {"cosine", {}}}};
  std::string tics;
  for (const auto& [what, label] : {std::pair{"_mean_off_diagonal", "outputs"}, std::pair{"_mean_abs_off_diagonal", "outputs |cos|"},
                                     std::pair{"-patterns_mean_off_diagonal", "patterns"}})
    for (const std::string name : {"vanilla", "skipv1"}) {
      const double i = double(t.columns[0].values.size());
      tics += (tics.empty() ? "" : ", ") + std::string("'") + name + ": " + label + "' " + fixed(i, 0);
      t.columns[0].values.push_back(i), t.columns[1].values.push_back(out.value[name + what].number());
    }
  out.draw({"last layer's mean off-diagonal head–head cosine", "",
            "cosine", false, false, {{"index", "cosine", "", "", "boxes fs solid 0.5", ""}},
            {"set xtics (" + tics + ") rotate by -30 noenhanced", "set boxwidth 0.6", "set xrange [-0.6:5.6]", "unset key"}},
           out.add(t), "off_diagonal");
}
void skipv1_fig14(Session& s, Output& out) {
  cosine_maps(s, out, analysis::Kind::tokens, analysis::HeadMatrixOf::outputs, "");
}

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

}  // namespace

std::vector<Entry> skipv1_figures() {
  return {
      {"skipv1-fig10", {"vanilla"}, skipv1_fig10, 3},
      {"skipv1-fig12", {"vanilla", "skipv1"},
       [](Session& s, Output& out) { skipv1_fig12(s, out, probes::ProbeRecipe::qkvlab); }, 3},
      {"skipv1-fig12-released", {"vanilla", "skipv1"},
       [](Session& s, Output& out) { skipv1_fig12(s, out, probes::ProbeRecipe::released); }, 3},
      {"skipv1-fig13", {"vanilla", "skipv1"}, skipv1_fig13, 3},
      {"skipv1-fig14", {"vanilla", "skipv1"}, skipv1_fig14, 3},
      {"skipv1-table2", {}, skipv1_table2},
      {"skipv1-fig6c-7", {},
       [](Session& s, Output& out) {
         skipv1_fig6c_7(s.options(), s.backend(), out, [&](const std::string& stage, const std::string& unit,
                                                           std::int64_t done, std::int64_t total,
                                                           const std::string& extra) { s.progress(stage, unit, done, total, extra); });
       }},
  };
}

}  // namespace qkvlab::reproduce
