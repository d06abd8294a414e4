#include "theory_lm/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <limits>
#include <set>
#include <utility>

#include "core/errors.hpp"
#include "core/linalg.hpp"
#include "engine/safetensors.hpp"
#include "lm/eliminate.hpp"
#include "lm/parameters.hpp"
#include "results/table_grid.hpp"
#include "theory_lm/verify_checkpoint.hpp"

namespace qkvlab::theory_lm {
namespace {

using results::Value;

// An object from its members, in order.
Value object(std::initializer_list<std::pair<const char*, Value>> members) {
  Value v = Value::object();
  for (const auto& [key, value] : members) v.set(key, value);
  return v;
}

// Every field of the configuration equal (sizes, positions and their encoding, RoPE's base and
// scaling, norms and their epsilon, GELU's form, biases, tying: whatever the function depends on
// besides the tensors), and vanilla attention with W_Q in every layer, the form whose head-wise
// reparametrizations the invariants cover.
bool same_architecture(const lm::Config& a, const lm::Config& b) {
  return lm::to_metadata(a) == lm::to_metadata(b) && a.q_identity_layers.empty() && !a.mla &&
         a.variant.kind == lm::VariantKind::vanilla;
}

bool attention_weight(const std::string& name) {
  for (const char* w : {".attn.q.", ".attn.k.", ".attn.v.", ".attn.o.weight"})
    if (name.find(w) != std::string::npos) return true;
  return false;
}

// ‖b − a‖/‖a‖ (core/linalg.hpp's rel_err: 0 for two zero tensors); +inf when the shapes differ
// (nothing to subtract: they are not the same).
double relative(const MatD& a, const MatD& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return std::numeric_limits<double>::infinity();
  return rel_err<double>(a, b);
}

// The invariants of query head h (key/value head g) named as they are reported.
struct Invariant {
  std::string name;
  MatD value;
};

std::vector<Invariant> head_invariants(const ModelWeights& w, int l, int h) {
  const lm::Config& c = w.config;
  const int dh = c.head_dim, g = h / (c.heads / c.kv_heads);
  const MatD Q = w.augmented(l, "attn.q").middleCols(h * dh, dh), K = w.augmented(l, "attn.k").middleCols(g * dh, dh);
  const MatD VO = w.augmented(l, "attn.v").middleCols(g * dh, dh) * w.layer(l, "attn.o.weight").middleRows(h * dh, dh);
  // Without RoPE the key bias adds q·b_K to every score of a query, which the softmax removes: its
  // column, W̃_Q b_Kᵀ, is left out (it would only dilute the relative error; under RoPE b_K is rotated
  // with the key and does count).
  if (!c.rope()) return {{"W_Q W_K^T", Q * K.topRows(K.rows() - 1).transpose()}, {"W_V W_O", VO}};
  // Pair i's score at offset t is cos(t ω_i) qᵀC_i k + sin(t ω_i) qᵀS_i k. Pairs of one frequency
  // (all of them at θ = 1) enter only through their sums, and a complex-linear map among them is a
  // freedom (qwe.ext.rope): the invariants are C and S summed over each distinct ω_i.
  const int half = dh / 2;
  const auto f = c.rope_frequencies();
  std::vector<double> omegas;  // the distinct frequencies, in pair order
  MatD sums = MatD::Zero(Q.rows() * dh, Q.rows());  // C and S of each distinct frequency stacked
  for (int i = 0; i < half; ++i) {
    const auto at = std::find(omegas.begin(), omegas.end(), f.omega(i, dh));
    const Eigen::Index k = at - omegas.begin();
    if (at == omegas.end()) omegas.push_back(f.omega(i, dh));
    sums.middleRows(2 * k * Q.rows(), Q.rows()) +=
        Q.col(i) * K.col(i).transpose() + Q.col(i + half) * K.col(i + half).transpose();
    sums.middleRows((2 * k + 1) * Q.rows(), Q.rows()) +=
        Q.col(i) * K.col(i + half).transpose() - Q.col(i + half) * K.col(i).transpose();
  }
  return {{"W_Q R W_K^T per frequency pair", sums.topRows(2 * Eigen::Index(omegas.size()) * Q.rows())}, {"W_V W_O", VO}};
}

std::string columns(const std::string& tensor, int head, int dh) {
  return tensor + " columns " + std::to_string(head * dh) + "-" + std::to_string((head + 1) * dh - 1);
}

// Every head's invariants and every other tensor; mismatches named.
void compare_gauge(const ModelWeights& B, const ModelWeights& A, double tol, Value& out, Value& mismatches) {
  const lm::Config& c = A.config;
  Value heads = Value::array(), tensors = Value::array();
  for (int l = 0; l < c.layers; ++l)
    for (int h = 0; h < c.heads; ++h) {
      const auto a = head_invariants(A, l, h), b = head_invariants(B, l, h);
      for (std::size_t k = 0; k < a.size(); ++k) {
        const double e = relative(a[k].value, b[k].value);
        const bool pass = e <= tol;  // NaN fails
        heads.push(object({{"layer", l + 1}, {"head", h + 1}, {"invariant", a[k].name}, {"rel_err", e}, {"pass", pass}}));
        if (pass) continue;
        const int g = h / (c.heads / c.kv_heads);
        const std::string where = k == 0 ? columns(lm::layer_tensor(l, "attn.q"), h, c.head_dim) + ", " +
                                               columns(lm::layer_tensor(l, "attn.k"), g, c.head_dim)
                                         : columns(lm::layer_tensor(l, "attn.v"), g, c.head_dim) + ", " +
                                               lm::layer_tensor(l, "attn.o.weight");
        mismatches.push("layer " + std::to_string(l + 1) + " head " + std::to_string(h + 1) + ": " + a[k].name +
                        " differs (rel_err " + results::format_number(e) + " > " + results::format_number(tol) + "; " + where + ")");
      }
    }
  for (const auto& [name, value] : B.tensors)  // tensors only B has (A's missing ones are named below)
    if (!attention_weight(name) && !A.has(name)) mismatches.push("tensor " + name + " is only in " + B.dir.string());
  for (const auto& [name, value] : A.tensors) {
    if (attention_weight(name)) continue;
    if (!B.has(name)) {
      mismatches.push("tensor " + name + " is missing");
      continue;
    }
    const double e = relative(value, B.at(name));
    const bool pass = e <= tol;  // NaN fails
    tensors.push(object({{"tensor", name}, {"rel_err", e}, {"pass", pass}}));
    if (!pass) mismatches.push("tensor " + name + " differs (rel_err " + results::format_number(e) + " > " + results::format_number(tol) + ")");
  }
  out.set("invariants", heads);
  out.set("tensors", tensors);
}

// A head of B for each head of A, each used once, among the pairs `close[a][b]` allows (Kuhn's
// augmenting paths): the identity when it is allowed; -1 for heads of A left without one.
std::vector<int> match_heads(const std::vector<std::vector<bool>>& close) {
  const int H = int(close.size());
  std::vector<int> of_b(std::size_t(H), -1);  // the head of A given each head of B
  std::vector<bool> seen;
  const std::function<bool(int)> augment = [&](int a) {
    for (int k = 0; k < H; ++k) {
      const int b = (a + k) % H;  // its own index first
      if (!close[std::size_t(a)][std::size_t(b)] || seen[std::size_t(b)]) continue;
      seen[std::size_t(b)] = true;
      if (of_b[std::size_t(b)] < 0 || augment(of_b[std::size_t(b)])) {
        of_b[std::size_t(b)] = a;
        return true;
      }
    }
    return false;
  };
  for (int a = 0; a < H; ++a) {
    seen.assign(std::size_t(H), false);
    augment(a);
  }
  std::vector<int> of_a(std::size_t(H), -1);
  for (int b = 0; b < H; ++b)
    if (of_b[std::size_t(b)] >= 0) of_a[std::size_t(of_b[std::size_t(b)])] = b;
  return of_a;
}

// The attention patterns of every layer on `sequence` (0-based), the heads of a layer matched as a
// set (a model whose heads are A's in another order computes A's function): names the first layer
// with a head of A whose pattern no head of B's has, and those heads. Patterns are invariant under
// head-wise reparametrizations and under a change of the residual stream's basis (`lm eliminate`),
// so where B computes A's function through the same heads they agree at every layer, and the first
// layer where they differ beyond the tolerance is where B's departure from A shows (later layers read
// its output and differ too; a change under the tolerance in an earlier layer can grow to it).
// They see a change in a head that the logits barely feel. A layer whose patterns match in another
// order but whose values were not permuted alike is not named (the logits, and the layers after it,
// see it). Needs the same layers and heads; returns what was compared (the report's "patterns",
// with the layers whose heads matched in another order), or why nothing was.
std::string compare_patterns(const ModelWeights& B, const ModelWeights& A, const Activations& act, Eigen::Index sequence,
                             double tol, Value& mismatches) {
  const lm::Config& c = A.config;
  if (B.config.layers != c.layers || B.config.heads != c.heads)
    return "not compared: the models have " + std::to_string(B.config.layers) + " and " + std::to_string(c.layers) +
           " layers of " + std::to_string(B.config.heads) + " and " + std::to_string(c.heads) + " heads";
  const std::string compared = "every layer's, on sequence " + std::to_string(sequence + 1);
  const int T = act.length;
  lm::TokenSequences one{{act.tokens.ids.begin() + sequence * T, act.tokens.ids.begin() + (sequence + 1) * T}, 1, T};
  const auto PA = attention_patterns(A.dir, one), PB = attention_patterns(B.dir, one);
  const int H = c.heads;
  std::string reordered;
  for (int l = 0; l < c.layers; ++l) {
    const auto pattern = [&](const auto& P, int h) { return P[std::size_t(l)].middleRows(h * T, T); };
    auto within = std::vector<std::vector<bool>>(std::size_t(H), std::vector<bool>(std::size_t(H), false));
    for (int a = 0; a < H; ++a)
      for (int b = 0; b < H; ++b) within[std::size_t(a)][std::size_t(b)] = relative(pattern(PA, a), pattern(PB, b)) <= tol;
    const std::vector<int> match = match_heads(within);
    if (std::find(match.begin(), match.end(), -1) != match.end()) {
      // In no order. The heads named: those left without a partner once every head that matches its
      // own index keeps it and the others are matched among themselves (a pair swapped beside a
      // changed head names the changed one only).
      auto rest = within;
      for (int h = 0; h < H; ++h)
        if (within[std::size_t(h)][std::size_t(h)])
          for (int k = 0; k < H; ++k) rest[std::size_t(h)][std::size_t(k)] = rest[std::size_t(k)][std::size_t(h)] = k == h;
      const std::vector<int> partner = match_heads(rest);
      for (int h = 0; h < H; ++h) {
        if (partner[std::size_t(h)] >= 0) continue;
        const double e = relative(pattern(PA, h), pattern(PB, h));
        mismatches.push("layer " + std::to_string(l + 1) + " head " + std::to_string(h + 1) +
                        ": attention pattern differs (rel_err " + results::format_number(e) + " > " +
                        results::format_number(tol) + " on sequence " + std::to_string(sequence + 1) +
                        ", in any order of the heads; the first layer whose attention differs beyond the tolerance: a "
                        "smaller change in an earlier layer can grow to it)");
      }
      break;
    }
    std::string order;
    for (int h = 0; h < H; ++h)
      if (match[std::size_t(h)] != h)
        order += (order.empty() ? "" : ", ") + std::to_string(h + 1) + " as " + std::to_string(match[std::size_t(h)] + 1);
    if (!order.empty()) reordered += "; layer " + std::to_string(l + 1) + "'s heads in another order (A's " + order + ")";
  }
  return compared + reordered;
}

}  // namespace

// By norm, not by each row's relative error: an all-zero row of A's made that 0/0 and named any position.
Eigen::Index most_different_row(const MatD& A, const MatD& B) {
  Eigen::Index worst = 0;
  (A - B).rowwise().norm().maxCoeff(&worst);
  return worst;
}

namespace {

Value compare_logits(const ModelWeights& B, const Activations& act_B, const ModelWeights& A, const Activations& act_A,
                     double tol, Value& mismatches) {
  const MatD LA = logits(A, act_A), LB = logits(B, act_B);
  const double e = relative(LA, LB);
  const Eigen::Index worst = most_different_row(LA, LB);
  const int T = act_A.length;
  const bool pass = e <= tol;  // NaN fails
  Value v = object({{"rel_err", e}, {"tolerance", tol}, {"pass", pass}, {"positions", std::int64_t(LA.rows())},
                    {"worst_sequence", std::int64_t(worst / T + 1)}, {"worst_position", std::int64_t(worst % T + 1)}});
  v.set("patterns", compare_patterns(B, A, act_A, worst / T, tol, mismatches));
  if (!pass)
    mismatches.push("logits differ (rel_err " + results::format_number(e) + " > " + results::format_number(tol) + "; worst at sequence " +
                    std::to_string(worst / T + 1) + ", position " + std::to_string(worst % T + 1) + ")");
  return v;
}

// What the logits and patterns were compared on: the distinct token ids of the vocabulary and the
// positions of the model's, the function's inputs a comparison by function does not see beyond.
Value coverage(const lm::Config& c, const Activations& act) {
  std::set<std::int32_t> ids(act.tokens.ids.begin(), act.tokens.ids.end());
  return object({{"token_ids", std::int64_t(ids.size())}, {"vocab", c.vocab}, {"positions", act.length},
                 {"of_positions", c.positions}});
}

}  // namespace

CompareResult compare_checkpoints(const ModelWeights& B, const Activations& act_B, const ModelWeights& A,
                                  const Activations& act_A, const CompareOptions& o) {
  if (A.config.vocab != B.config.vocab)
    throw UsageError("--against: the checkpoints have different vocabularies (" + std::to_string(B.config.vocab) +
                     " and " + std::to_string(A.config.vocab) + "): their logits cannot be compared");
  const bool same = same_architecture(A.config, B.config);
  if (o.method == Comparison::gauge && !same)
    throw UsageError("--compare gauge: the checkpoints differ in architecture (or are not vanilla attention); use --compare function");
  const bool gauge = o.method == Comparison::gauge || (o.method == Comparison::automatic && same);
  CompareResult r;
  Value& v = r.value = Value::object();
  Value mismatches = Value::array();
  v.set("method", gauge ? "gauge invariants (head-wise reparametrization) and every other tensor, the logits, and every "
                          "layer's attention patterns on the worst sequence"
                        : "function: the logits on the given tokens, and every layer's attention patterns on the worst "
                          "sequence");
  v.set("tolerance", o.tolerance);
  v.set("tolerance_basis", o.tolerance_basis);
  if (gauge) compare_gauge(B, A, o.tolerance, v, mismatches);
  v.set("logits", compare_logits(B, act_B, A, act_A, o.tolerance, mismatches));
  v.set("coverage", coverage(A.config, act_A));
  r.ok = mismatches.items().empty();
  v.set("mismatches", mismatches);
  v.set("ok", r.ok);
  return r;
}

namespace {

// The eliminated.kappa an `lm eliminate` output records (1 for any other model: one without Q-identity
// layers is none, whatever its metadata says). One that is not a number from 1 to the largest condition
// lm eliminate accepts (max_basis_condition) is not its record: a UsageError naming it (a tampered
// 1e300 would admit any output).
double recorded_kappa(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "model.safetensors";
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error)) return 1;
  const auto metadata = engine::safetensors_metadata(file);
  if (!metadata) return 1;
  const auto it = metadata->find(lm::kEliminatedKappa), layers = metadata->find("q_identity_layers");
  if (it == metadata->end() || layers == metadata->end() || layers->second.empty()) return 1;
  char* end = nullptr;
  const double kappa = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || !(kappa >= 1 && kappa <= max_basis_condition))
    throw UsageError(file.string() + ": " + lm::kEliminatedKappa + " \"" + it->second + "\" is not a condition lm eliminate " +
                     "records (a number from 1 to " + results::format_number(max_basis_condition) + ")");
  return kappa;
}

}  // namespace

CompareOptions default_against_options(Comparison method, const std::filesystem::path& B, const std::filesystem::path& A) {
  const double kappa = std::max(recorded_kappa(B), recorded_kappa(A)), by_kappa = unit_roundoff<float>() * kappa;
  CompareOptions o{method, 1e-4, "1e-4, about 1e3 unit roundoffs u of float"};
  if (by_kappa > o.tolerance) {
    char basis[160];
    std::snprintf(basis, sizeof basis, "u kappa: an lm eliminate output's change of basis of condition %.6g", kappa);
    o.tolerance = by_kappa, o.tolerance_basis = basis;
  }
  return o;
}

Comparison comparison_named(const std::string& name) {
  if (name == "gauge") return Comparison::gauge;
  if (name == "function") return Comparison::function;
  if (name == "auto") return Comparison::automatic;
  throw UsageError("--compare: unknown comparison '" + name + "' (auto, gauge or function)");
}

CompareResult compare_against(const std::filesystem::path& B, const ModelWeights& weights_B, const std::filesystem::path& A,
                              const lm::TokenSequences& tokens, const results::Value& tokens_value,
                              const CompareOptions& options, int threads, const std::string& command_line) {
  const ModelWeights weights_A = read_weights(A);
  // Before either model runs: the tokens were checked against B's vocabulary and positions only.
  if (weights_A.config.vocab != weights_B.config.vocab)
    throw UsageError("--against: the checkpoints have different vocabularies (" + std::to_string(weights_B.config.vocab) +
                     " and " + std::to_string(weights_A.config.vocab) + "): their logits cannot be compared");
  if (tokens.length > weights_A.config.positions)
    throw UsageError("--against " + A.string() + ": sequences of " + std::to_string(tokens.length) +
                     " tokens are longer than its " + std::to_string(weights_A.config.positions) + " positions");
  CompareResult r = compare_checkpoints(weights_B, record_activations(B, tokens, threads), weights_A,
                                        record_activations(A, tokens, threads), options);
  results::Value v = results::Value::object();
  v.set("checkpoint", checkpoint_value(weights_B));
  v.set("against", checkpoint_value(weights_A));
  v.set("tokens", tokens_value);
  v.set("comparison", r.value);
  v.set("command_line", command_line);
  r.value = v;
  return r;
}

}  // namespace qkvlab::theory_lm
