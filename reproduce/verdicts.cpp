// Each figure's claim, rule and measured quantity (reproduce.hpp: judge_figure), its verdict
// rewritten into a committed FIGURE.json (rejudge) and the generated verdict table of
// docs/figures.md (verdicts_markdown). The quantities are read from the figure's own results, so a
// verdict is a function of the recorded numbers and can be recomputed from them at any time.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "reproduce/reproduce.hpp"
#include "synthetic/icl/train.hpp"

namespace qkvlab::reproduce {

namespace fs = std::filesystem;
using results::Claim;
using results::Element;
using results::Rule;
using results::Sense;
using results::Value;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double num(const Value& v) { return v.kind() == Value::Kind::null ? kNaN : v.number(); }
double both(double a, double b) { return std::sqrt(a * a + b * b); }  // se of a difference of independent estimates
std::vector<double> numbers(const Value& array) {
  std::vector<double> x;
  for (const Value& v : array.items()) x.push_back(num(v));
  return x;
}
// One seed's element: no standard error over seeds; `within` the spread inside the run.
Element one_seed(std::string label, double value, double within = kNaN) { return {std::move(label), value, kNaN, 1, within}; }

// Per layer, `other` − `base` of a field of analysis rows (`layers` arrays of {layer, field, ...}).
std::vector<Element> layer_differences(const Value& base, const Value& other, const std::string& field,
                                       const std::string& se_field = "") {
  std::vector<Element> e;
  for (std::size_t l = 0; l < base.items().size(); ++l) {
    const Value &a = base.items()[l], &b = other.items()[l];
    e.push_back(one_seed("layer " + std::to_string(l + 1), num(b[field]) - num(a[field]),
                         se_field.empty() ? kNaN : both(num(a[se_field]), num(b[se_field]))));
  }
  return e;
}
// Per layer, `other` − `base` of two scalar curves ({per_layer, per_layer_se}).
std::vector<Element> curve_differences(const Value& base, const Value& other) {
  const auto a = numbers(base["per_layer"]), b = numbers(other["per_layer"]);
  const auto sa = numbers(base["per_layer_se"]), sb = numbers(other["per_layer_se"]);
  std::vector<Element> e;
  for (std::size_t l = 0; l < a.size(); ++l) e.push_back(one_seed("layer " + std::to_string(l + 1), b[l] - a[l], both(sa[l], sb[l])));
  return e;
}

const Rule kSeeds{0.975, "seeds", 2, ""};
// The trained icl figures are replicated over training seeds (icl_figures.cpp): each seed's value is
// measured on its held-out prompts (the best restart's, chosen on other prompts, where there are
// restarts), and the replicates are the seeds, whose spread is many times the prompts' standard error.
const Rule kIclSeeds{0.975, "training seeds", 2, "each seed's value on its held-out prompts, the best restart's"};
// SkipV1 − MHA of the trained icl models, over the zero predictor's loss E‖y‖², judged against a margin
// of 0.01: a separation must be at least a hundredth of what predicting nothing costs.
constexpr double kIclMargin = 0.01;
const Rule kIclSeedsMargin{0.975, "training seeds", 2,
                           "each seed's value on its held-out prompts (the best restart's, chosen on other prompts, "
                           "where there are restarts); the difference is over the zero predictor's loss E|y|^2 = "
                           "|W_0|_F^2 + d^2 + d sigma^2, and a separation must exceed 0.01 of it"};

struct FigureClaim {
  std::string figure;
  Claim claim;
  Rule rule;
  std::string within_over;  // what the recorded within-run spread is over
  std::vector<Element> (*measure)(const Value& json);  // from the figure's JSON
};

std::vector<Element> fig1_left(const Value& j) {
  const Value& g = j["results"]["compare"]["groups"].items().at(1);
  return {{"ResFormer ½ − vanilla", num(g["delta_vs_baseline_mean"]), num(g["delta_vs_baseline_se"]),
           std::int64_t(num(g["paired_seeds"])), kNaN}};
}
std::vector<Element> fig1_middle(const Value& j) {
  const Value& r = j["results"]["entropy"];
  return curve_differences(r["vanilla"], r["resformer-half"]);
}
std::vector<Element> fig3(const Value& j) {  // one seed's run; the registry's seeds are the replicates
  std::vector<Element> e;
  for (const Value& row : j["results"]["layers"].items())
    if (num(row["layer"]) > 1)
      e.push_back(one_seed("layer " + std::to_string(std::int64_t(num(row["layer"]))), num(row["eq3"]) - num(row["eq6"])));
  return e;
}
std::vector<Element> fig10(const Value& j) {
  return layer_differences(j["results"]["vanilla"], j["results"]["resformer-half"], "importance_ratio");
}
std::vector<Element> fig19(const Value& j) {
  const Value &a = j["results"]["vanilla"], &b = j["results"]["resformer-half"];
  std::vector<Element> e;
  for (std::size_t l = 0; l < a.items().size(); ++l)
    e.push_back(one_seed("layer " + std::to_string(l + 1),
                         num(b.items()[l]["per_position"]["importance"].items()[0]) -
                             num(a.items()[l]["per_position"]["importance"].items()[0])));
  return e;
}
std::vector<Element> fig12(const Value& j) {
  return layer_differences(j["results"]["vanilla"], j["results"]["resformer-half"], "max", "max_se");
}
std::vector<Element> fig18(const Value& j) {
  const Value& r = j["results"]["similarity"];
  return curve_differences(r["vanilla"], r["resformer-half"]);
}
std::vector<Element> fig20(const Value& j) {
  std::vector<Element> e;
  for (const char* T : {"32", "64", "128"}) {
    const auto a = numbers(j["results"][std::string("vanilla T=") + T]), b = numbers(j["results"][std::string("resformer-half T=") + T]);
    double d = 0;
    for (std::size_t l = 0; l < a.size(); ++l) d += (b[l] - a[l]) / double(a.size());
    e.push_back(one_seed(std::string("T = ") + T, d));
  }
  return e;
}
std::vector<Element> skipv1_fig10(const Value& j) {
  const Value& r = j["results"];
  std::vector<Element> e;
  for (const std::string& key : r.keys())
    if (key != "mean-v" && key != "validation_tokens" && key.find("not converted") == std::string::npos &&
        r[key].kind() != Value::Kind::object && r[key].kind() != Value::Kind::array)
      e.push_back(one_seed(key + " − mean-v", num(r[key]) - num(r["mean-v"])));
  return e;
}
std::vector<Element> skipv1_fig12(const Value& j) {
  const Value &a = j["results"]["vanilla"], &b = j["results"]["skipv1"];
  return {one_seed("slope SkipV1 − vanilla", num(b["slope"]) - num(a["slope"]), both(num(a["slope_se"]), num(b["slope_se"])))};
}
std::vector<Element> cosines(const Value& j) {
  const Value& r = j["results"];
  return {one_seed("mean cosine, SkipV1 − vanilla", num(r["skipv1_mean_off_diagonal"]) - num(r["vanilla_mean_off_diagonal"])),
          one_seed("mean absolute cosine, SkipV1 − vanilla",
                   num(r["skipv1_mean_abs_off_diagonal"]) - num(r["vanilla_mean_abs_off_diagonal"]))};
}
// Fig. 13: the head outputs' cosines, as Fig. 14's, and the attention patterns' (the released
// script's matrix; non-negative patterns, so one mean).
std::vector<Element> head_cosines(const Value& j) {
  const Value& r = j["results"];
  std::vector<Element> e = cosines(j);
  for (Element& x : e) x.label = "outputs: " + x.label;
  e.push_back(one_seed("patterns (released): mean cosine, SkipV1 − vanilla",
                       num(r["skipv1-patterns_mean_off_diagonal"]) - num(r["vanilla-patterns_mean_off_diagonal"])));
  return e;
}
std::vector<Element> skipv1_table2(const Value& j) {
  const auto& rows = j["results"]["rows"].items();
  return {{"GQA: Δ KV − (−24.0%)", num(rows.at(1)["delta_kv_percent"]) + 24.0, 0, 1, kNaN, true},
          {"MLA: Δ KV − (−44.4%)", num(rows.at(3)["delta_kv_percent"]) + 44.4, 0, 1, kNaN, true}};
}
// SkipV1's saving of cache bytes per token, measured, minus the paper's (1 − 1/L)·25% (half the
// value heads of layers 2 … L), for each pair of a variant and its SkipV1 form; and SkipV1's decode
// throughput against vanilla's at batch 8, per context, paired within each repeat (percent).
std::vector<Element> skipv1_fig6c_7(const Value& j) {
  std::map<std::string, const Value*> by_name;
  for (const Value& v : j["results"]["variants"].items()) by_name[v["variant"].string()] = &v;
  const auto repeats = std::int64_t(num(j["results"]["repeats"]));
  std::vector<Element> e;
  for (const auto& [skip, base] : std::vector<std::pair<std::string, std::string>>{{"skipv1", "vanilla"}, {"gqa+skipv1", "gqa"}}) {
    const Value &s = *by_name.at(skip), &b = *by_name.at(base);
    const double saving = 100 * (1 - num(s["cache_bytes_per_token_measured"]) / num(b["cache_bytes_per_token_measured"]));
    e.push_back({"cache, " + skip + " vs " + base + ": saving − (1 − 1/L)·25%", saving - 25 * (1 - 1 / num(s["layers"])), 0,
                 repeats, kNaN, true});
  }
  std::map<std::pair<std::string, double>, std::vector<double>> decode;  // (variant, context) at B = 8
  for (const Value& t : j["results"]["timings"].items())
    if (num(t["batch"]) == 8) decode[{t["variant"].string(), num(t["context"])}] = numbers(t["decode_tokens_per_s"]);
  for (const auto& [key, skip] : decode) {
    if (key.first != "skipv1") continue;
    const std::vector<double>& base = decode.at({"vanilla", key.second});
    if (base.size() != skip.size())  // a logic_error: judged_file names the file
      throw std::invalid_argument("decode timings at context " + std::to_string(std::int64_t(key.second)) + ": " +
                                  std::to_string(skip.size()) + " SkipV1 repeats and " + std::to_string(base.size()) +
                                  " vanilla ones do not pair");
    std::vector<double> change;
    for (std::size_t r = 0; r < skip.size(); ++r) change.push_back(100 * (skip[r] / base[r] - 1));
    e.push_back(results::over_replicates("decode B = 8, context " + std::to_string(std::int64_t(key.second)) +
                                             ": SkipV1 / vanilla − 1",
                                         change));
  }
  return e;
}
std::vector<Element> qwe_table2(const Value& j) {
  const auto& rows = j["results"]["rows"].items();
  return {one_seed("baseline − Q-identity", num(rows.at(0)["final_validation_loss"]) - num(rows.at(1)["final_validation_loss"]))};
}
std::vector<Element> qwe_exp84(const Value& j) {
  std::vector<Element> e;
  for (const Value& r : j["results"]["runs"].items())
    e.push_back(one_seed("d = " + std::to_string(std::int64_t(num(r["d"]))), num(r["mlp_rel_l2"]) - num(r["linear_rel_l2"])));
  return e;
}
// The trained icl figures' elements are one training seed's (the replicates are seeds: over_seeds),
// each with its standard error over the held-out prompts as the within-run spread.
std::vector<Element> icl_anchor(const Value& j) {
  const Value& r = j["results"];
  return {one_seed("relative gap", num(r["relative_gap"]), num(r["trained_loss_se"]) / num(r["one_step_gd_loss"]))};
}
// The loss scale of an icl task (d, n, σ, W_0 = w0_scale · I, fields of its JSON): the zero
// predictor's loss E‖y‖² = ‖W_0‖²_F + d² + dσ² (icl::zero_predictor_loss).
double zero_predictor_loss(const Value& x) {
  const int d = int(num(x["d"]));
  icl::Task t{d, int(num(x["n"])), num(x["sigma"]), {}};
  if (num(x["w0_scale"]) != 0) t.W0 = num(x["w0_scale"]) * MatD::Identity(d, d);
  return icl::zero_predictor_loss(t);
}
// SkipV1 − MHA over the zero predictor's loss: the rule's margin is a fraction of what predicting
// nothing costs, so a rounding-level difference between two models at the zero predictor is not a separation.
Element relative_difference(std::string label, const Value& difference, const Value& task) {
  const double scale = zero_predictor_loss(task);
  return one_seed(std::move(label), num(difference["value"]) / scale, num(difference["se"]) / scale);
}
// SkipV1 − MHA per depth over the zero predictor's loss, as the trained icl figures below.
std::vector<Element> icl_depth(const Value& j) {
  const Value& r = j["results"];
  std::map<std::int64_t, std::pair<const Value*, const Value*>> by_layers;  // mha, skipv1
  for (const Value& run : r["runs"].items()) {
    auto& p = by_layers[std::int64_t(num(run["layers"]))];
    (run["model"].string() == "skipv1" ? p.second : p.first) = &run;
  }
  const double scale = zero_predictor_loss(r["task"]);
  std::vector<Element> e;
  for (const auto& [L, p] : by_layers)
    if (p.first && p.second)
      e.push_back(one_seed("L = " + std::to_string(L), (num((*p.second)["loss"]) - num((*p.first)["loss"])) / scale,
                           both(num((*p.first)["se"]), num((*p.second)["se"])) / scale));
  return e;
}
std::vector<Element> icl_train(const Value& j) {
  const Value& x = j["results"]["experiment"];
  return {relative_difference("SkipV1 − MHA", x["skipv1_minus_mha"], x)};
}
std::vector<Element> icl_sweep(const Value& j) {
  std::vector<Element> e;
  for (const Value& p : j["results"]["experiment"]["points"].items())
    if (num(p["a"]) >= 1)
      e.push_back(relative_difference("a = " + std::to_string(std::int64_t(num(p["a"]))), p["skipv1_minus_mha"], p));
  return e;
}
// The separation c_{d−1} at the tasks with W_0 = 0 only: there the MHA bound is proved (Lemmas 2–4
// hold, icl lemmas); at W_0 = cI they fail and the bound is the formula's value, not a bound.
std::vector<Element> icl_theory(const Value& j) {
  const Value& r = j["results"];
  auto separation = [](const Value& t, const std::string& label, std::int64_t prompts) {
    const std::size_t below = std::size_t(num(t["d"])) - 1;
    return Element{label, num(t["c_a"].items().at(below)), num(t["c_a_se"].items().at(below)), prompts, kNaN};
  };
  std::vector<Element> e = {separation(r["theory_w0_zero"], "W_0 = 0", std::int64_t(num(r["theory_w0_zero"]["prompts"])))};
  const std::int64_t prompts = std::int64_t(num(r["theory_sweep"]["prompts"]));
  for (const Value& p : r["theory_sweep"]["points"].items()) {
    if (num(p["w0_scale"]) != 0) continue;
    char label[96];
    std::snprintf(label, sizeof label, "d = %g, n = %g, σ = %g, W_0 = 0", num(p["d"]), num(p["n"]), num(p["sigma"]));
    e.push_back(separation(p, label, prompts));
  }
  return e;
}

std::vector<Element> qwe_fdim(const Value& j) {
  std::vector<Element> e;
  for (const Value& r : j["results"]["settings"].items())
    e.push_back({"d = " + std::to_string(std::int64_t(num(r["d"]))) + ", L = " + std::to_string(std::int64_t(num(r["layers"]))) +
                     ", skips " + r["skips"].string() + ", norm " + r["norm"].string(),
                 num(r["lost_vs_free"]), 0, 1, kNaN, true});
  return e;
}

const std::vector<FigureClaim>& claims() {
  static const std::vector<FigureClaim> list = {
      {"resformer-fig1-left",
       {"ResFormer trains to a lower loss than the vanilla Transformer of the same size (ResFormer Fig. 1 left)",
        "final validation loss, ResFormer ½(V_n + V_1) − vanilla (nats)", Sense::less},
       kSeeds, "", fig1_left},
      {"resformer-fig1-middle",
       {"ResFormer's attention is less concentrated: its entropy is higher than vanilla's, most in the deeper layers "
        "(ResFormer Fig. 1 middle)",
        "column entropy per layer, ResFormer − vanilla (nats)", Sense::greater},
       kSeeds, "sequences", fig1_middle},
      {"resformer-fig3",
       {"Eq. 3 (the current attention as the map) approximates cross-layer attention to layer 1 better than Eq. 6 "
        "(identity) (ResFormer Fig. 3)",
        "cos(Eq. 2, Eq. 3) − cos(Eq. 2, Eq. 6) per layer n ≥ 2", Sense::greater},
       kSeeds, "", fig3},
      {"resformer-fig10",
       {"ResFormer's first token draws less attention than vanilla's (the sink mitigated; ResFormer Fig. 10)",
        "first-token importance ratio per layer, ResFormer − vanilla", Sense::less},
       kSeeds, "", fig10},
      {"resformer-fig19",
       {"ResFormer's start token draws less attention than vanilla's (ResFormer Fig. 19)",
        "position 0's importance over the mean of all positions, per layer, ResFormer − vanilla", Sense::less},
       kSeeds, "", fig19},
      {"resformer-fig12",
       {"ResFormer's value states have larger covariance eigenvalues than vanilla's ('larger eigenvalues are more "
        "transferable'; ResFormer Fig. 12)",
        "largest eigenvalue of the value covariance per layer, ResFormer − vanilla", Sense::greater},
       kSeeds, "sequences", fig12},
      {"resformer-fig18",
       {"ResFormer's hidden states are less similar to each other than vanilla's (less over-smoothing; ResFormer Fig. 18)",
        "mean pairwise cosine of the hidden states per layer, ResFormer − vanilla", Sense::less},
       kSeeds, "sequences", fig18},
      {"resformer-fig20",
       {"ResFormer's attention entropy is higher than vanilla's at every sequence length (ResFormer Fig. 20)",
        "column entropy averaged over layers, ResFormer − vanilla (nats)", Sense::greater},
       kSeeds, "", fig20},
      {"skipv1-fig10",
       {"Mean V starts lowest: every other conversion's initial loss is higher (SkipV1Former Fig. 10)",
        "initial validation loss after conversion, each method − mean-v (nats)", Sense::greater},
       kSeeds, "", skipv1_fig10},
      {"skipv1-fig12",
       {"SkipV1Former's probe loss falls more steeply over the deeper half of the layers (SkipV1Former Fig. 12)",
        "least-squares slope of probe loss over the deeper half of the layers, SkipV1 − vanilla", Sense::less},
       kSeeds, "the fit's residuals over the layers", skipv1_fig12},
      {"skipv1-fig12-released",
       {"SkipV1Former's probe loss falls more steeply over the deeper half of the layers, with the released "
        "probe (SkipV1Former Fig. 12)",
        "least-squares slope of probe loss over the deeper half of the layers, SkipV1 − vanilla", Sense::less},
       kSeeds, "the fit's residuals over the layers", skipv1_fig12},
      {"skipv1-fig13",
       {"SkipV1Former's heads at the last layer are less similar to each other than vanilla's (SkipV1Former Fig. 13)",
        "off-diagonal head–head cosine at the last layer, of the head outputs and of the attention patterns (the "
        "released script's), SkipV1 − vanilla", Sense::less},
       kSeeds, "", head_cosines},
      {"skipv1-fig14",
       {"SkipV1Former's tokens at the last layer are less similar to each other than vanilla's (SkipV1Former Fig. 14)",
        "off-diagonal token–token cosine at the last layer, SkipV1 − vanilla", Sense::less},
       kSeeds, "", cosines},
      {"skipv1-table2",
       {"SkipV1 cuts the KV cache by 24.0% with GQA and 44.4% with MLA (SkipV1Former Table 2, GPT2-355M)",
        "KV bytes per token, SkipV1's change minus the paper's (percentage points)", Sense::within, 0, 0.05},
       Rule{0.975, "exact counts", 1, "no randomness"}, "", skipv1_table2},
      {"skipv1-fig6c-7",
       {"SkipV1 cuts the KV cache per token by ~25% ((1 − 1/L)·25% for L layers) and decodes within ±2% of the "
        "baseline's throughput at batch 8 (SkipV1Former Fig. 6, Fig. 7)",
        "percent: SkipV1's cache saving minus (1 − 1/L)·25%; SkipV1's decode tokens/s over vanilla's − 1",
        Sense::within, 0, 2},
       Rule{0.975, "timing repeats", 2,
            "each repeat times vanilla and SkipV1 back to back on a shared 2-core machine; the cache is an exact count, "
            "the same in every repeat (se 0)"},
       "", skipv1_fig6c_7},
      {"qwe-table2",
       {"The model without W_Q trains to the baseline's loss or lower (Query-weight elimination Table 2)",
        "final validation loss, baseline − Q-identity (nats)", Sense::not_below, 0,
        0.011},  // the margin: the gap the paper calls "meaningfully worse" (Table 2: 2.955 − 2.944)
       kSeeds, "", qwe_table2},
      {"qwe-exp8.4",
       {"A trained skip MLP reproduces a basis-changed skip block far better than any linear map (Query-weight elimination §8.4)",
        "relative L2 error, trained MLP − best linear map, per d", Sense::less},
       kSeeds, "", qwe_exp84},
      {"icl-anchor",
       {"One-layer linear attention trained on in-context regression reaches the best one-step GD loss "
        "(SkipV1Former App. A, experiment 4)",
        "relative gap (trained − one-step GD) / one-step GD", Sense::within, 0, 0.01},
       kIclSeeds, "held-out prompts", icl_anchor},
      {"icl-depth",
       {"SkipV1 learns in context better than MHA of the same depth (SkipV1Former §4, experiment 5)",
        "held-out loss, SkipV1 − MHA, over the zero predictor's loss E‖y‖², per depth L ≥ 2", Sense::less, -kIclMargin},
       kIclSeedsMargin, "held-out prompts", icl_depth},
      {"icl-assumption1",
       {"Under Assumption 1 SkipV1 learns in context strictly better than MHA (SkipV1Former Theorem 1/2)",
        "held-out loss, SkipV1 − MHA (best runs, same prompts), over the zero predictor's loss E‖y‖²", Sense::less,
        -kIclMargin},
       kIclSeedsMargin, "held-out prompts", icl_train},
      {"icl-assumption1-w0",
       {"Under Assumption 1 at W_0 = 6I SkipV1 learns in context strictly better than MHA (SkipV1Former Theorem 1/2)",
        "held-out loss, SkipV1 − MHA (best runs, same prompts), over the zero predictor's loss E‖y‖²", Sense::less,
        -kIclMargin},
       kIclSeedsMargin, "held-out prompts", icl_train},
      {"icl-learned",
       {"With a learned first layer SkipV1 learns in context better than MHA (SkipV1Former App. A, experiment 3)",
        "held-out loss, SkipV1 − MHA (best runs, same prompts), over the zero predictor's loss E‖y‖²", Sense::less,
        -kIclMargin},
       kIclSeedsMargin, "held-out prompts", icl_train},
      {"icl-learned-w0",
       {"With a learned first layer at W_0 = 6I SkipV1 learns in context better than MHA (SkipV1Former App. A, experiment 3)",
        "held-out loss, SkipV1 − MHA (best runs, same prompts), over the zero predictor's loss E‖y‖²", Sense::less,
        -kIclMargin},
       kIclSeedsMargin, "held-out prompts", icl_train},
      {"icl-sweep",
       {"Under Assumption 1 SkipV1 is below MHA at every copy width a ≥ 1 (SkipV1Former App. A, experiment 2)",
        "held-out loss, SkipV1 − MHA (best runs, same prompts), over the zero predictor's loss E‖y‖², per a ≥ 1",
        Sense::less, -kIclMargin},
       kIclSeedsMargin, "held-out prompts", icl_sweep},
      {"icl-theory",
       {"Where MHA's bound is proved (W_0 = 0: Lemmas 2–4 hold; under W_0 = 3I they fail and the W_0 = 3I tasks are not "
        "judged) it exceeds SkipV1's value: the separation c_{d−1} is positive (SkipV1Former Theorem 1/2)",
        "c_{d−1} = MHA bound at a = d − 1 − SkipV1 at a = d = E s_d(ΛYXᵀ)², per task at W_0 = 0", Sense::greater},
       Rule{0.975, "Monte Carlo prompts", 2,
            "no training; c_{d−1} is a mean of squared singular values, ≥ 0 by construction (C and C_3 cancel), so the "
            "rule can tell a positive separation from a zero one (rank YXᵀ < d when n < d), never find it negative: "
            "it holds by construction where it is resolved, not as a measured agreement"},
       "", icl_theory},
      {"qwe-fdim",
       {"W_Q can be replaced with the identity in every layer: the model computes the same set of functions "
        "(Query-weight elimination, abstract and §5)",
        "functional dimension lost by W_Q = I in every layer (rank with free queries − rank with W_Q = I), per "
        "setting", Sense::within, 0, 0.5},
       Rule{0.975, "exact counts", 1, "float ranks at a seeded random point, saturated in the inputs"}, "", qwe_fdim},
  };
  return list;
}

const FigureClaim& claim_of(const std::string& figure) {
  for (const auto& c : claims())
    if (c.figure == figure) return c;
  throw UsageError("figure \"" + figure + "\" has no registered claim");
}

// A figure replicated over seeds (figure_kit.hpp: Entry::seeds) holds each run's results under
// "seed S": the quantity is measured in each run as in a single one, and each element's replicates
// are its values in the runs (paired: the runs share the sequences, and each run's models share its seed).
// A run that recorded no value for an element (null: an icl-depth run that diverged) is left out of
// that element's replicates, whose count n (the element's `replicates`) then says how many remain.
std::vector<Element> over_seeds(const FigureClaim& c, const Value& results) {
  std::vector<std::string> labels;
  std::vector<std::vector<double>> values;
  for (const Value& seed : results["seeds"].items()) {
    Value run = Value::object();
    run.set("results", results["seed " + std::to_string(std::int64_t(num(seed)))]);
    const std::vector<Element> e = c.measure(run);
    if (labels.empty())
      for (const Element& x : e) labels.push_back(x.label), values.emplace_back();
    if (e.size() != labels.size()) throw std::logic_error("the seeds' runs measure different elements");
    for (std::size_t i = 0; i < e.size(); ++i) {
      if (e[i].label != labels[i])  // elements pair by what they measure, not by their place in a run's list
        throw std::logic_error("seed " + std::to_string(std::int64_t(num(seed))) + " measures \"" + e[i].label +
                               "\" where the first seed measures \"" + labels[i] + "\"");
      if (!std::isnan(e[i].value)) values[i].push_back(e[i].value);
    }
  }
  std::vector<Element> e;
  for (std::size_t i = 0; i < labels.size(); ++i) e.push_back(results::over_replicates(labels[i], values[i]));
  return e;
}

}  // namespace

results::Verdict judge_figure(const std::string& figure, const Value& json) {
  const FigureClaim& c = claim_of(figure);
  if (json["results"].find("seeds")) return results::judge(c.claim, c.rule, over_seeds(c, json["results"]));
  return results::judge(c.claim, c.rule, c.measure(json), c.within_over);
}

namespace {

// A smoke run's caveat, from the recorded steps: a number where the recipe's ran ("recipe") means
// --steps replaced every training's, probe's and synthetic run's steps, so the verdict reports those
// short runs and does not judge the recipe (a run of the recipe has no caveat). Empty for a recipe run.
std::string smoke_caveat(const Value& json) {
  const Value* steps = json.find("steps");
  if (!steps || steps->kind() == Value::Kind::string) return "";
  return "smoke run: --steps " + std::to_string(std::int64_t(num(*steps))) +
         " replaced the recipe's steps, so this verdict is of those short runs and does not judge the recipe";
}

}  // namespace

Value with_verdict(const std::string& figure, const Value& json) {
  Value verdict = judge_figure(figure, json).to_value();
  if (const std::string caveat = smoke_caveat(json); !caveat.empty()) verdict.set("caveat", caveat);
  Value out = Value::object();
  for (std::size_t k = 0; k < json.keys().size(); ++k) {
    const std::string& key = json.keys()[k];
    if (verdict.find(key) || key == "caveat") continue;  // replaced below (a caveat only where the steps call for one)
    if (key == "command_line")
      for (const std::string& v : verdict.keys()) out.set(v, verdict[v]);
    out.set(key, json.items()[k]);
  }
  return out;
}

namespace {

// OUTPUTS/FIGURE/FIGURE.json judged; a file that lacks what the figure's claim measures is a
// UsageError naming it.
Value judged_file(const std::string& figure, const fs::path& path) {
  const Value json = read_json_file(path);
  try {
    return with_verdict(figure, json);
  } catch (const std::logic_error& e) {  // a missing key or a string where a number belongs
    throw UsageError(path.string() + ": not " + figure + "'s results (" + e.what() + ")");
  }
}

}  // namespace

std::string verdict_section(const Value& judged) {
  const Value* caveat = judged.find("caveat");
  return "## Verdict\n\n" + judged["claim"].string() + ": **" + judged["verdict"].string() + "** (" +
         judged["rule"].string() + ")." + (caveat ? " Note — " + caveat->string() + "." : "");
}

namespace {

// One figure's rejudged FIGURE.json and README.md, staged into `files` (refusals before any is written).
Value stage_rejudged(const Figure& figure, const fs::path& outputs, StagedFiles& files) {
  const fs::path path = outputs / figure.name / (figure.name + ".json"), readme = path.parent_path() / "README.md";
  const Value judged = judged_file(figure.name, path);
  if (!fs::is_regular_file(readme))  // the verdict is written into both or neither
    throw UsageError(readme.string() + " does not exist: the verdict goes into it and " + path.filename().string() +
                     " together; remake the figure");
  files.add_bytes(path, "JSON", judged.json());
  {  // its verdict section, from "## Verdict" to the blank line after its paragraph
    std::ifstream in(readme, std::ios::binary);
    std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    const std::size_t at = text.find("## Verdict\n\n"), end = at == std::string::npos ? at : text.find("\n\n", at + 13);
    if (end != std::string::npos) {
      text.replace(at, end - at, verdict_section(judged));
    } else if (const std::size_t command = text.rfind("\nCommand: `"); command != std::string::npos) {
      text.insert(command + 1, verdict_section(judged) + "\n\n");  // a README made before verdicts existed
    } else {
      throw UsageError(readme.string() + ": neither a \"## Verdict\" section nor a command line: remake the figure");
    }
    files.add_bytes(readme, "Markdown", text);
  }
  return judged;
}

}  // namespace

std::vector<Value> rejudge(const std::vector<const Figure*>& figures, const fs::path& outputs) {
  StagedFiles files;  // every figure's files, or none
  std::vector<Value> judged;
  for (const Figure* f : figures) judged.push_back(stage_rejudged(*f, outputs, files));
  files.commit();
  return judged;
}

Value rejudge(const Figure& figure, const fs::path& outputs) { return rejudge({&figure}, outputs).front(); }

namespace {

std::string short_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// "label: value ± se (outcome)" for each element, or, past eight, the count of each outcome and
// the smallest and largest element.
std::string measured_text(const Value& j) {
  const auto& elements = j["quantity"]["elements"].items();
  auto one = [&](std::size_t i) {
    const double se = num(j["uncertainty"]["se"].items()[i]);
    return elements[i]["label"].string() + ": " + short_number(num(elements[i]["value"])) +
           (std::isfinite(se) ? " ± " + short_number(se) : "") + " (" + elements[i]["outcome"].string() + ")";
  };
  std::string text;
  if (elements.size() <= 8) {
    for (std::size_t i = 0; i < elements.size(); ++i) text += (i ? "; " : "") + one(i);
  } else {
    std::map<std::string, int> count;
    std::size_t lo = 0, hi = 0;
    for (std::size_t i = 0; i < elements.size(); ++i) {
      ++count[elements[i]["outcome"].string()];
      if (num(elements[i]["value"]) < num(elements[lo]["value"])) lo = i;
      if (num(elements[i]["value"]) > num(elements[hi]["value"])) hi = i;
    }
    text = std::to_string(elements.size()) + " elements:";
    for (const auto& [outcome, n] : count) text += " " + std::to_string(n) + " " + outcome;
    text += "; smallest " + one(lo) + "; largest " + one(hi);
  }
  std::vector<std::int64_t> n;  // the replicates' numbers recorded, smallest to largest
  for (const Value& x : j["uncertainty"]["replicates"].items())
    if (x.kind() != Value::Kind::null) n.push_back(std::int64_t(num(x)));
  std::sort(n.begin(), n.end());
  if (!n.empty())
    text += " [" + j["uncertainty"]["over"].string() + ": " + std::to_string(n.front()) +
            (n.back() != n.front() ? "–" + std::to_string(n.back()) : "") + "]";
  return text;
}

}  // namespace

std::string verdicts_markdown(const fs::path& outputs) {
  std::string table = "| figure | claim | quantity | measured (± se over the rule's replicates) | verdict |\n|---|---|---|---|---|\n";
  std::vector<std::pair<std::string, std::string>> rules;  // rule, the figures that use it
  for (const Figure& f : figures()) {
    const fs::path path = outputs / f.name / (f.name + ".json");
    const Value j = read_json_file(path);
    for (const char* key : {"claim", "quantity", "uncertainty", "rule", "verdict"})
      if (!j.find(key)) throw UsageError(path.string() + ": no \"" + key + "\" (run 'qkvlab reproduce --verdicts')");
    const Value& q = j["quantity"];
    table += "| " + f.name + " | " + j["claim"].string() + " | " + q["name"].string() + " " + q["claimed"].string() +
             " | " + measured_text(j) + " | **" + j["verdict"].string() + "**" +
             (j.find("caveat") ? " (smoke run: not the recipe)" : "") + " |\n";
    const auto same = std::find_if(rules.begin(), rules.end(), [&](const auto& r) { return r.first == j["rule"].string(); });
    if (same == rules.end()) rules.push_back({j["rule"].string(), f.name});
    else same->second += ", " + f.name;
  }
  std::string text = table + "\nThe rules (the same for the figures named together):\n\n";
  for (const auto& [rule, names] : rules) text += "- " + names + ": " + rule + ".\n";
  return text;
}

}  // namespace qkvlab::reproduce
