#include "analysis/analyze.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <iterator>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "core/errors.hpp"
#include "core/parallel.hpp"
#include "core/random_matrix.hpp"
#include "core/rng.hpp"
#include "core/statistics.hpp"

namespace qkvlab::analysis {

namespace {

using lm::Activation;
using lm::Site;

constexpr const char* kNames[] = {"entropy", "similarity", "spectrum", "first-token", "heads", "tokens", "cross-layer", "all"};
constexpr Kind kAllParts[] = {Kind::entropy, Kind::similarity, Kind::spectrum, Kind::first_token};

// The table of a kind's report: its name, '-' written '_'.
std::string table_name(Kind kind) {
  std::string name = kNames[int(kind)];
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// One analysis: a recorder told, before each batch, how many of its sequences count.
class Analysis : public lm::Recorder<float> {
 public:
  int valid = 0;
  int threads = 1;  // workers for the per-sequence measures (0: all cores)
  virtual void report(Report& out) const = 0;

 protected:
  // Sequence b's pattern reductions, from the attention (streamed) or from its whole pattern.
  static HeadSums sums_of(const lm::PatternReduction& r, int b) {
    const std::size_t at = std::size_t(b) * r.heads * r.T;
    return {r.columns + at, r.mass + at, r.entropy + at, r.heads, r.T};
  }
  static PatternReductions sums_of(const Activation<float>& a, int b) {
    return reduce_pattern(a.data + std::size_t(b) * a.heads * a.T * a.T, a.heads, a.T);
  }
  // measure(b) for each counted sequence b of the batch, on `threads` workers, returned in
  // sequence order: the summaries add them in that order, so no number depends on the threads.
  template <class Measure> auto each_sequence(const Measure& measure) const {
    std::vector<decltype(measure(0))> out(static_cast<std::size_t>(valid));
    parallel_for(valid, threads, [&](std::int64_t b) { out[std::size_t(b)] = measure(int(b)); });
    return out;
  }
};

// Forwards every activation to the analysis, noting the first site and layer whose counted
// sequences hold NaN or ±Inf: that is the finding (Report::nonfinite), never summarised; from
// then on the analysis sees nothing (a measure of non-finite values may refuse them).
class FiniteGuard final : public lm::Recorder<float> {
 public:
  explicit FiniteGuard(Analysis& inner) : inner_(inner) {}
  bool wants(Site s, int l) const override { return inner_.wants(s, l); }
  int pattern_block(int l) const override { return inner_.pattern_block(l); }
  bool pattern_entropy(int l) const override { return inner_.pattern_entropy(l); }
  void record_sums(const lm::PatternReduction& r) override {
    const std::size_t n = std::size_t(inner_.valid) * r.heads * r.T;
    for (const double* x : {r.columns, r.mass, r.entropy})
      for (std::size_t k = 0; x && k < n && found.empty(); ++k)
        if (!std::isfinite(x[k])) note(r.layer, Site::pattern, std::isnan(x[k]), k / (std::size_t(r.heads) * r.T));
    if (found.empty()) inner_.record_sums(r);
  }
  void record(const Activation<float>& a) override {
    const std::size_t per = std::size_t(a.T) * a.heads * a.width, n = std::size_t(inner_.valid) * per;
    for (std::size_t k = 0; k < n && found.empty(); ++k)
      if (!std::isfinite(a.data[k])) note(a.layer, a.site, std::isnan(a.data[k]), k / per);
    if (found.empty()) inner_.record(a);
  }
  lm::StateRequest state_request(Site s, int l) const override { return inner_.state_request(s, l); }
  // A reduced state: the first non-finite value of its reductions (a NaN or ±Inf entry makes its row's
  // norm and unit row, and its sequence's Gram matrix, non-finite), norms first.
  void record_state(const lm::StateReduction& r) override {
    const std::size_t mm = std::size_t(r.m) * r.m;
    const std::pair<const double*, std::size_t> parts[] = {
        {r.norms, std::size_t(r.T)}, {r.gram, mm}, {r.unit, std::size_t(r.columns)}, {r.nonzero, 1}};
    for (const auto& [x, per] : parts)
      for (std::size_t k = 0; x && k < inner_.valid * per && found.empty(); ++k)
        if (!std::isfinite(x[k])) note(r.layer, r.site, std::isnan(x[k]), k / per);
    if (found.empty()) inner_.record_state(r);
  }
  std::string found;
  std::int64_t first = 0;  // the batch's first sequence

 private:
  // The final norm's output comes with layer = L (after the last block), so it is named, not numbered.
  void note(int layer, Site site, bool nan, std::size_t b) {
    const std::string where =
        site == Site::final ? "the final norm's output" : "layer " + std::to_string(layer + 1) + "'s " + lm::to_string(site);
    found = where + " holds " + (nan ? "nan" : "inf") + " (sequence " + std::to_string(first + std::int64_t(b)) + ")";
  }
  Analysis& inner_;
};

// A token-major activation of sequence b as a T × (heads·width) matrix, heads combined.
RowMatrix sequence(const Activation<float>& a, int b, HeadCombination how) {
  return combine_heads(a.data + std::size_t(b) * a.T * a.heads * a.width, a.T, a.heads, a.width, how);
}

// Per-layer scalar summaries, and a table whose figure is the mean over layers with a band of ±
// one standard deviation over sequences.
void scalar_layers(Report& out, std::vector<LayerSummary>& rows, const std::string& name,
                   const std::vector<RunningStats>& stats, int first) {
  results::Table t{name, {{"layer", {}}, {"mean", {}}, {"std", {}}, {"se", {}}, {"low", {}}, {"high", {}}}};
  for (std::size_t l = 0; l < stats.size(); ++l) {
    const Summary s = stats[l].summary();
    rows.push_back({int(l) + first, s});
    const double x[] = {double(l) + first, s.value, s.std, s.se, s.value - s.std, s.value + s.std};
    for (std::size_t c = 0; c < 6; ++c) t.columns[c].values.push_back(x[c]);
  }
  out.tables.push_back(t);
  out.figures.push_back({name + " per layer (mean over sequences, band: ± 1 std)", "layer", name, false, false,
                         {{"layer", "low", "", "± 1 std", "filledcurves fs transparent solid 0.25 noborder", "high"},
                          {"layer", "mean", "", "mean", "linespoints", ""}},
                         {}});
}

class Entropy final : public Analysis {
 public:
  Entropy(int L, EntropyDefinition d, int block) : stats_(std::size_t(L)), definition_(d), block_(block) {}
  bool wants(Site s, int) const override { return s == Site::pattern && block_ == 0; }
  int pattern_block(int) const override { return block_; }
  bool pattern_entropy(int) const override { return definition_ == EntropyDefinition::row; }
  void record(const Activation<float>& a) override {
    add(a.layer, each_sequence([&](int b) { return attention_entropy(sums_of(a, b).view(), definition_); }));
  }
  void record_sums(const lm::PatternReduction& r) override {
    add(r.layer, each_sequence([&](int b) { return attention_entropy(sums_of(r, b), definition_); }));
  }
  void report(Report& out) const override { scalar_layers(out, out.entropy, table_name(Kind::entropy), stats_, 1); }

 private:
  void add(int layer, const std::vector<double>& entropies) {
    for (double e : entropies) stats_[std::size_t(layer)].add(e);
  }
  std::vector<RunningStats> stats_;
  EntropyDefinition definition_;
  int block_;
};

class Similarity final : public Analysis {
 public:
  Similarity(int L, const Options& o) : L_(L), o_(o), stats_(std::size_t(o.of == Of::hidden ? L + 1 : L)) {}
  bool wants(Site, int) const override { return false; }
  void record(const Activation<float>&) override {}
  lm::StateRequest state_request(Site s, int l) const override {
    lm::StateRequest r;
    r.unit = state(s, l) >= 0, r.combine = o_.heads;
    return r;
  }
  void record_state(const lm::StateReduction& r) override {
    auto& stats = stats_[std::size_t(state(r.site, r.layer))];
    for (int b = 0; b < valid; ++b)
      stats.add(token_similarity(r.unit + std::size_t(b) * r.columns, r.columns, r.nonzero[b], r.T));
  }
  void report(Report& out) const override {
    scalar_layers(out, out.similarity, table_name(Kind::similarity), stats_, o_.of == Of::hidden ? 0 : 1);
  }

 private:
  // The state a site is, or −1: hidden states 0 … L (0 the embedding output), else layer l's keys or values.
  int state(Site s, int l) const {
    if (o_.of == Of::keys) return s == Site::k ? l : -1;
    if (o_.of == Of::values) return s == Site::v ? l : -1;
    if (s == Site::resid_pre && l == 0) return 0;
    if (s == Site::resid_post && (o_.states == States::raw || l < L_ - 1)) return l + 1;
    if (s == Site::final && o_.states == States::hf) return L_;
    return -1;
  }
  int L_;
  Options o_;
  std::vector<RunningStats> stats_;
};

class Spectrum final : public Analysis {
 public:
  Spectrum(int L, int top_k) : top_k_(top_k), sums_(std::size_t(L)), max_(std::size_t(L)), count_(std::size_t(L), 0) {}
  bool wants(Site, int) const override { return false; }
  void record(const Activation<float>&) override {}
  lm::StateRequest state_request(Site s, int) const override {
    lm::StateRequest r;
    r.gram = s == Site::v;
    return r;
  }
  void record_state(const lm::StateReduction& r) override {
    auto& sum = sums_[std::size_t(r.layer)];
    const std::size_t mm = std::size_t(r.m) * r.m;
    for (const auto& e : each_sequence([&](int b) { return gram_spectrum(r.gram + b * mm, r.m, top_k_); })) {
      if (sum.empty()) sum.assign(e.size(), 0.0);
      for (std::size_t i = 0; i < e.size(); ++i) sum[i] += e[i];
      max_[std::size_t(r.layer)].add(e.front());
      ++count_[std::size_t(r.layer)];
    }
  }
  void report(Report& out) const override {
    results::Table t{table_name(Kind::spectrum), {{"rank", {}}}};
    for (std::size_t l = 0; l < sums_.size(); ++l) {
      std::vector<double> mean(sums_[l].size());
      for (std::size_t i = 0; i < mean.size(); ++i) mean[i] = sums_[l][i] / double(count_[l]);
      out.spectrum.push_back({int(l) + 1, mean, max_[l].summary()});
      if (t.columns[0].values.empty())
        for (std::size_t i = 0; i < mean.size(); ++i) t.columns[0].values.push_back(double(i) + 1);
      t.columns.push_back({"layer " + std::to_string(l + 1), mean});
    }
    out.tables.push_back(t);
    results::Figure f{"value covariance eigenvalues by rank (mean over sequences)", "rank", "eigenvalue", false, true, {}, {}};
    for (std::size_t c = 1; c < t.columns.size(); ++c) f.series.push_back({"rank", t.columns[c].name, "", t.columns[c].name, "lines", ""});
    out.figures.push_back(f);
  }

 private:
  int top_k_;
  std::vector<std::vector<double>> sums_;
  std::vector<RunningStats> max_;
  std::vector<std::int64_t> count_;
};

// The first token's importance, value norm and hidden norm over the others' mean, per layer,
// and each position's over the mean of all positions.
class FirstToken final : public Analysis {
 public:
  FirstToken(int L, int block)
      : ratio_(3, std::vector<RunningStats>(std::size_t(L))), profile_(3, std::vector<std::vector<double>>(std::size_t(L))),
        n_(3, std::vector<std::int64_t>(std::size_t(L), 0)), block_(block) {}
  bool wants(Site s, int) const override { return s == Site::pattern && block_ == 0; }
  int pattern_block(int) const override { return block_; }
  void record(const Activation<float>& a) override {
    add(0, a.layer, each_sequence([&](int b) { return token_importance(sums_of(a, b).view()); }));
  }
  lm::StateRequest state_request(Site s, int) const override {
    lm::StateRequest r;
    r.norms = s == Site::v || s == Site::resid_post;
    return r;
  }
  void record_state(const lm::StateReduction& r) override {
    std::vector<std::vector<double>> norms;
    for (int b = 0; b < valid; ++b) norms.emplace_back(r.norms + std::size_t(b) * r.T, r.norms + std::size_t(b + 1) * r.T);
    add(r.site == Site::v ? 1 : 2, r.layer, norms);
  }
  void record_sums(const lm::PatternReduction& r) override {
    add(0, r.layer, each_sequence([&](int b) { return token_importance(sums_of(r, b)); }));
  }
  void report(Report& out) const override {
    static const char* names[3] = {"importance_ratio", "value_norm_ratio", "hidden_norm_ratio"};
    results::Table t{table_name(Kind::first_token), {{"layer", {}}}};
    for (int k = 0; k < 3; ++k)
      for (const char* part : {"", "_std", "_se"}) t.columns.push_back({std::string(names[k]) + part, {}});
    for (std::size_t l = 0; l < ratio_[0].size(); ++l) {
      FirstTokenLayer row{int(l) + 1, {}, {}, {}};
      FirstTokenMeasure* measures[3] = {&row.importance, &row.value_norm, &row.hidden_norm};
      t.columns[0].values.push_back(double(l) + 1);
      for (std::size_t k = 0; k < 3; ++k) {
        FirstTokenMeasure& m = *measures[k];
        m.ratio = ratio_[k][l].summary();
        const double parts[3] = {m.ratio.value, m.ratio.std, m.ratio.se};
        for (std::size_t j = 0; j < 3; ++j) t.columns[1 + 3 * k + j].values.push_back(parts[j]);
        m.per_position = profile_[k][l];
        for (double& x : m.per_position) x /= double(n_[k][l]);
      }
      out.first_token.push_back(row);
    }
    out.tables.push_back(t);
    results::Figure f{"first token over the mean of the others", "layer", "ratio", false, true, {}, {}};
    for (int k = 0; k < 3; ++k) f.series.push_back({"layer", names[k], "", names[k], "linespoints", ""});
    out.figures.push_back(f);
  }

 private:
  void add(int what, int layer, const std::vector<std::vector<double>>& per_sequence) {
    for (const auto& x : per_sequence) {
      ratio_[std::size_t(what)][std::size_t(layer)].add(first_ratio(x));
      add_profile(what, layer, x);
    }
  }
  void add_profile(int what, int layer, const std::vector<double>& x) {
    double mean = 0;
    for (double v : x) mean += v / double(x.size());
    auto& p = profile_[std::size_t(what)][std::size_t(layer)];
    if (p.empty()) p.assign(x.size(), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i) p[i] += x[i] / mean;
    ++n_[std::size_t(what)][std::size_t(layer)];
  }
  std::vector<std::vector<RunningStats>> ratio_;
  std::vector<std::vector<std::vector<double>>> profile_;
  std::vector<std::vector<std::int64_t>> n_;
  int block_;
};

// The mean over sequences of one layer's cosine matrix (heads or tokens).
class CosineMatrix final : public Analysis {
 public:
  CosineMatrix(Site site, int layer, std::string name) : site_(site), layer_(layer), name_(std::move(name)) {}
  bool wants(Site s, int l) const override { return s == site_ && l == layer_; }
  void record(const Activation<float>& a) override {
    for (int b = 0; b < valid; ++b) {
      const RowMatrix c = cosine_matrix(rows_of(a, b));
      if (n_ == 0) sum_ = running_ = c, m2_ = RowMatrix::Zero(c.rows(), c.cols());
      else sum_ += c;
      ++n_;
      if (n_ == 1) continue;
      const RowMatrix delta = c - running_;  // Welford, entry by entry (core/statistics.hpp's RunningStats)
      running_ += delta / double(n_);
      m2_ += delta.cwiseProduct(c - running_);
    }
  }
  void report(Report& out) const override {
    const RowMatrix m = sum_ / double(n_);
    const RowMatrix sd = n_ > 1 ? RowMatrix((m2_ / double(n_ - 1)).cwiseSqrt())
                                : RowMatrix::Constant(m.rows(), m.cols(), std::numeric_limits<double>::quiet_NaN());
    const RowMatrix se = sd / std::sqrt(double(n_));
    results::Table t{name_, {{"i", {}}, {"j", {}}, {"cosine", {}}, {"std", {}}, {"se", {}}}};
    for (Eigen::Index i = 0; i < m.rows(); ++i) {
      for (Eigen::Index j = 0; j < m.cols(); ++j) {
        const double x[] = {double(i), double(j), m(i, j), sd(i, j), se(i, j)};
        for (std::size_t k = 0; k < 5; ++k) t.columns[k].values.push_back(x[k]);
      }
    }
    out.cosine = CosineMap{layer_ + 1, m, sd, se};
    out.tables.push_back(t);
    out.figures.push_back({name_ + ": cosine similarity, layer " + std::to_string(layer_ + 1), name_ == "heads" ? "head" : "token",
                           name_ == "heads" ? "head" : "token", false, false, {{"i", "j", "", "", "image", "cosine"}},
                           {"set yrange [*:*] reverse", "set palette rgbformulae 33,13,10", "set cbrange [-1:1]"}});
  }

 private:
  // The rows compared: heads' flattened outputs (z), flattened patterns, or tokens' hidden states.
  RowMatrix rows_of(const Activation<float>& a, int b) const {
    if (site_ == Site::pattern) {
      const std::size_t per = std::size_t(a.T) * a.T;
      return Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                 a.data + std::size_t(b) * a.heads * per, a.heads, Eigen::Index(per))
          .cast<double>();
    }
    const RowMatrix X = sequence(a, b, HeadCombination::concat);  // T × heads·width
    if (site_ != Site::z) return X;
    RowMatrix heads(a.heads, Eigen::Index(a.T) * a.width);
    for (int h = 0; h < a.heads; ++h)
      for (int t = 0; t < a.T; ++t) heads.row(h).segment(Eigen::Index(t) * a.width, a.width) = X.row(t).segment(Eigen::Index(h) * a.width, a.width);
    return heads;
  }
  Site site_;
  int layer_;
  std::string name_;
  RowMatrix sum_, running_, m2_;  // the mean is sum_ / n_; running_ and m2_ Welford's, for the spread
  std::int64_t n_ = 0;
};

// ResFormer Fig. 3: per layer n, cos(Eq. 2, Eq. 3) and cos(Eq. 2, Eq. 6) against layer 1's keys
// and values (measures.hpp). The record hands a layer's q, k and v before its pattern: they are
// kept until the pattern comes, and layer 1's k and v for the rest of the pass.
class CrossLayer final : public Analysis {
 public:
  explicit CrossLayer(const lm::Config& c) : eq3_(std::size_t(c.layers)), eq6_(std::size_t(c.layers)) {
    for (int l = 0; l < c.layers; ++l) scale_.push_back(c.attention_scale(l));  // q-identity layers have their own
  }
  bool wants(Site s, int) const override { return s == Site::q || s == Site::k || s == Site::v || s == Site::pattern; }
  void record(const Activation<float>& a) override {
    if (a.site != Site::pattern) return keep(a);
    const Kept &q = kept_[0], &k = kept_[1], &v = kept_[2];
    if (q.layer != a.layer || k.layer != a.layer || v.layer != a.layer || first_[0].layer != 0)
      throw std::logic_error("cross-layer: a layer's pattern came before its queries, keys and values");
    const std::size_t T = std::size_t(a.T);
    const auto at = [&](const Kept& x, int b) { return x.data.data() + std::size_t(b) * T * x.heads * x.width; };
    try {
      for (const CrossLayerCosines& c : each_sequence([&](int b) {
             const AttentionLayer n{at(q, b), at(k, b), at(v, b), a.data + std::size_t(b) * a.heads * T * T,
                                    a.T,      a.heads,  k.heads,  k.width, v.width};
             return cross_layer_cosines(n, at(first_[0], b), at(first_[1], b), scale_[std::size_t(a.layer)]);
           }))
        eq3_[std::size_t(a.layer)].add(c.eq3), eq6_[std::size_t(a.layer)].add(c.eq6);
    } catch (const NumericalError& e) {
      throw NumericalError("layer " + std::to_string(a.layer + 1) + ": " + e.what());
    }
  }
  void report(Report& out) const override {
    results::Table t{table_name(Kind::cross_layer), {{"layer", {}}}};
    for (const char* name : {"eq3", "eq3_std", "eq3_se", "eq6", "eq6_std", "eq6_se"}) t.columns.push_back({name, {}});
    for (std::size_t l = 0; l < eq3_.size(); ++l) {
      const Summary s3 = eq3_[l].summary(), s6 = eq6_[l].summary();
      const double x[] = {double(l) + 1, s3.value, s3.std, s3.se, s6.value, s6.std, s6.se};
      for (std::size_t c = 0; c < 7; ++c) t.columns[c].values.push_back(x[c]);
      out.cross_layer.push_back({int(l) + 1, s3, s6});
    }
    out.tables.push_back(t);
    out.figures.push_back({"cosine with true cross-layer attention to layer 1 (Eq. 2), mean over sequences", "layer",
                           "cosine", false, false,
                           {{"layer", "eq3", "", "Eq. 3: the current attention as the map", "linespoints", ""},
                            {"layer", "eq6", "", "Eq. 6: identity mapping", "linespoints", ""}},
                           {"set key center right", "set xtics 1"}});
  }

 private:
  struct Kept {
    std::vector<float> data;
    int layer = -1, heads = 0, width = 0;
  };
  void keep(const Activation<float>& a) {
    Kept& k = kept_[a.site == Site::q ? 0 : a.site == Site::k ? 1 : 2];
    k.data.assign(a.data, a.data + std::size_t(a.B) * a.T * a.heads * a.width);
    k.layer = a.layer, k.heads = a.heads, k.width = a.width;
    if (a.layer == 0 && a.site != Site::q) first_[a.site == Site::k ? 0 : 1] = k;
  }
  std::vector<double> scale_;  // per layer
  Kept kept_[3], first_[2];  // q, k, v of the current layer; k, v of layer 1
  std::vector<RunningStats> eq3_, eq6_;
};

// Several analyses fed from one forward pass.
class Together final : public Analysis {
 public:
  std::vector<std::unique_ptr<Analysis>> parts;
  bool wants(Site s, int l) const override {
    for (const auto& p : parts)
      if (p->wants(s, l)) return true;
    return false;
  }
  int pattern_block(int l) const override {
    int block = 0;
    for (const auto& p : parts) block = std::max(block, p->pattern_block(l));
    return block;
  }
  bool pattern_entropy(int l) const override {
    for (const auto& p : parts)
      if (p->pattern_entropy(l)) return true;
    return false;
  }
  void record(const Activation<float>& a) override {
    for (auto& p : parts)
      if (p->wants(a.site, a.layer)) p->valid = valid, p->threads = threads, p->record(a);
  }
  void record_sums(const lm::PatternReduction& r) override {
    for (auto& p : parts)
      if (p->pattern_block(r.layer) > 0) p->valid = valid, p->threads = threads, p->record_sums(r);
  }
  lm::StateRequest state_request(Site s, int l) const override {
    lm::StateRequest all;
    for (const auto& p : parts) {
      const lm::StateRequest r = p->state_request(s, l);
      all.norms |= r.norms, all.gram |= r.gram;
      if (r.unit) all.unit = true, all.combine = r.combine;  // one similarity at most
    }
    return all;
  }
  void record_state(const lm::StateReduction& r) override {
    for (auto& p : parts)
      if (p->state_request(r.site, r.layer).any()) p->valid = valid, p->threads = threads, p->record_state(r);
  }
  void report(Report& out) const override {
    for (const auto& p : parts) p->report(out);
  }
};

std::unique_ptr<Analysis> make(Kind kind, const lm::Config& c, const Options& o) {
  const int L = c.layers, layer = o.layer < 0 ? L - 1 : o.layer;
  if (layer >= L) throw UsageError("layer " + std::to_string(layer + 1) + " is beyond the model's " + std::to_string(L) + " layers");
  switch (kind) {
    case Kind::entropy: return std::make_unique<Entropy>(L, o.entropy, o.query_block);
    case Kind::similarity: return std::make_unique<Similarity>(L, o);
    case Kind::spectrum: return std::make_unique<Spectrum>(L, o.top_k);
    case Kind::first_token: return std::make_unique<FirstToken>(L, o.query_block);
    case Kind::heads: return std::make_unique<CosineMatrix>(o.head_matrix == HeadMatrixOf::outputs ? Site::z : Site::pattern, layer, table_name(kind));
    case Kind::tokens: return std::make_unique<CosineMatrix>(Site::resid_post, layer, table_name(kind));
    case Kind::cross_layer: return std::make_unique<CrossLayer>(c);
    case Kind::all: {
      auto all = std::make_unique<Together>();
      for (Kind k : kAllParts) all->parts.push_back(make(k, c, o));
      return all;
    }
  }
  return nullptr;
}


}  // namespace

namespace {

const char* entropy_name(EntropyDefinition d) {
  return d == EntropyDefinition::column ? "column" : d == EntropyDefinition::row ? "row" : "printed";
}

// The options that define what was measured, for the record.
results::Value definition(Kind kind, const Options& o, int layers) {
  results::Value d = results::Value::object();
  const bool all = kind == Kind::all;
  if (kind == Kind::entropy || all) d.set("entropy", entropy_name(o.entropy)), d.set("log", "natural");
  if (kind == Kind::similarity || all) {
    d.set("states", o.of != Of::hidden ? "-" : o.states == States::hf ? "hf" : "raw");
    d.set("of", o.of == Of::hidden ? "hidden" : o.of == Of::keys ? "keys" : "values");
    d.set("heads", o.heads == HeadCombination::concat ? "concat" : "mean");
  }
  if (kind == Kind::spectrum || all) d.set("eigenvalues", o.top_k > 0 ? "top " + std::to_string(o.top_k) + " (Lanczos)" : "all");
  if (kind == Kind::first_token || all) d.set("first_token", "x_0 / mean(x_1 ... x_{T-1}); per position x_p / mean(x)");
  if (kind == Kind::heads) d.set("of", o.head_matrix == HeadMatrixOf::outputs ? "outputs" : "patterns");
  if (kind == Kind::heads || kind == Kind::tokens) d.set("layer", std::int64_t(o.layer < 0 ? layers : o.layer + 1));
  if (kind == Kind::tokens) d.set("of", "block output before the final norm");
  if (kind == Kind::cross_layer) {
    d.set("reference_layer", std::int64_t(1));
    d.set("compared", "per token, U_n with the heads concatenated (before W_O): Eq. 2 (one causal softmax over the "
                      "keys of layer n and layer 1) against Eq. 3 = 1/2 A_n (V_n + V_1) and Eq. 6 = A_n V_n + V_1; "
                      "cosine, mean over the tokens");
  }
  return d;
}

}  // namespace

Kind parse_kind(const std::string& name) {
  std::string known;
  for (int i = 0; i < int(std::size(kNames)); ++i) {
    if (name == kNames[i]) return Kind(i);
    known += (i ? "|" : "") + std::string(kNames[i]);
  }
  throw UsageError("unknown analysis \"" + name + "\" (known: " + known + ")");
}

std::string to_string(Kind kind) { return kNames[int(kind)]; }

std::vector<std::string> table_names(Kind kind) {
  if (kind != Kind::all) return {table_name(kind)};
  std::vector<std::string> names;
  for (Kind k : kAllParts) names.push_back(table_name(k));
  return names;
}

lm::TokenSequences choose_sequences(const lm::TokenSequences& all, std::int64_t n, std::uint64_t seed) {
  if (n <= 0 || n >= all.sequences) return all;
  std::vector<std::int64_t> order(std::size_t(all.sequences));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed, "analysis/sequences");
  for (std::int64_t i = 0; i < n; ++i) {  // order[i] := a uniform pick among order[i …]
    const std::uint64_t left = std::uint64_t(all.sequences - i);
    std::swap(order[std::size_t(i)], order[std::size_t(i + std::int64_t(rng.next_u64() % left))]);
  }
  std::sort(order.begin(), order.begin() + n);
  lm::TokenSequences out{{}, n, all.length};
  out.ids.reserve(std::size_t(n) * all.length);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto first = all.ids.begin() + std::ptrdiff_t(order[std::size_t(i)] * all.length);
    out.ids.insert(out.ids.end(), first, first + all.length);
  }
  return out;
}

namespace {

// --k above the spectrum's dimension, min(T, width of the values the attention reads: H_kv·d_h, MLA's
// H·d_h as lm/model_impl.hpp's attn_kv()), is refused: no k is reported that was not computed.
void check_top_k(Kind kind, const Options& o, const lm::Config& c, int T) {
  if (o.top_k <= 0 || (kind != Kind::spectrum && kind != Kind::all)) return;
  const int width = (c.mla ? c.heads : c.kv_heads) * c.head_dim, m = std::min(T, width);
  if (o.top_k > m)
    throw UsageError("--k " + std::to_string(o.top_k) + ": the spectrum has " + std::to_string(m) +
                     " eigenvalues (min(T, " + (c.mla ? "H*d_h" : "H_kv*d_h") + ") = min(" + std::to_string(T) + ", " +
                     std::to_string(width) + "))");
}

}  // namespace

Report analyze(lm::Model<float>& model, Kind kind, const lm::TokenSequences& data, const Options& o,
               const std::function<void(std::int64_t, std::int64_t)>& progress) {
  if (data.sequences < 1 || data.length < 2) throw UsageError("analyses need at least one sequence of 2 tokens");
  if (o.query_block < 0) throw UsageError("--query-block " + std::to_string(o.query_block) + ": must be >= 0");
  check_top_k(kind, o, model.config(), data.length);
  const int B = int(std::min<std::int64_t>(o.batch, data.sequences)), T = data.length;
  auto analysis = make(kind, model.config(), o);
  analysis->threads = o.threads;
  FiniteGuard guard(*analysis);
  std::vector<std::int32_t> ids(std::size_t(B) * T);
  for (std::int64_t first = 0; first < data.sequences && guard.found.empty(); first += B) {
    analysis->valid = int(std::min<std::int64_t>(B, data.sequences - first));
    guard.first = first;
    for (int b = 0; b < B; ++b) {  // rows past the end repeat the last sequence and are not counted
      const std::int64_t k = std::min(first + b, data.sequences - 1);
      std::copy_n(data.ids.begin() + std::ptrdiff_t(k * T), T, ids.begin() + std::ptrdiff_t(b) * T);
    }
    model.forward(ids.data(), nullptr, B, T, lm::Pass::eval, 0, &guard);
    if (progress) progress(first + analysis->valid, data.sequences);
  }
  Report out;
  out.kind = kind;
  out.definition = definition(kind, o, model.config().layers);
  out.sequences = data.sequences;
  out.seq_len = T;
  if (!guard.found.empty()) {
    out.nonfinite = guard.found;
    return out;
  }
  analysis->report(out);
  return out;
}

namespace {

results::Value matrix_value(const RowMatrix& m) {
  results::Value rows = results::Value::array();
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    rows.push(results::Value::array_of(std::vector<double>(m.row(i).data(), m.row(i).data() + m.cols())));
  return rows;
}

results::Value summary_rows(const std::vector<LayerSummary>& rows) {
  results::Value layers = results::Value::array();
  for (const LayerSummary& r : rows) {
    results::Value row = results::Value::object();
    row.set("layer", std::int64_t(r.layer)), row.set("mean", r.summary.value), row.set("std", r.summary.std);
    row.set("se", r.summary.se);
    layers.push(row);
  }
  return layers;
}

results::Value spectrum_rows(const std::vector<SpectrumLayer>& rows) {
  results::Value layers = results::Value::array();
  for (const SpectrumLayer& r : rows) {
    results::Value row = results::Value::object();
    row.set("layer", std::int64_t(r.layer)), row.set("eigenvalues", results::Value::array_of(r.eigenvalues));
    row.set("max", r.max.value), row.set("max_std", r.max.std), row.set("max_se", r.max.se);
    layers.push(row);
  }
  return layers;
}

results::Value first_token_rows(const std::vector<FirstTokenLayer>& rows) {
  static const char* names[3] = {"importance", "value_norm", "hidden_norm"};
  results::Value layers = results::Value::array();
  for (const FirstTokenLayer& r : rows) {
    const FirstTokenMeasure* measures[3] = {&r.importance, &r.value_norm, &r.hidden_norm};
    results::Value row = results::Value::object(), positions = results::Value::object();
    row.set("layer", std::int64_t(r.layer));
    for (int k = 0; k < 3; ++k) {
      row.set(std::string(names[k]) + "_ratio", measures[k]->ratio.value);
      row.set(std::string(names[k]) + "_ratio_std", measures[k]->ratio.std);
      row.set(std::string(names[k]) + "_ratio_se", measures[k]->ratio.se);
      positions.set(names[k], results::Value::array_of(measures[k]->per_position));
    }
    row.set("per_position", positions);
    layers.push(row);
  }
  return layers;
}

results::Value cross_layer_rows(const std::vector<CrossLayerCosine>& rows) {
  results::Value layers = results::Value::array();
  for (const CrossLayerCosine& r : rows) {
    results::Value row = results::Value::object();
    row.set("layer", std::int64_t(r.layer));
    row.set("eq3", r.eq3.value), row.set("eq3_std", r.eq3.std), row.set("eq3_se", r.eq3.se);
    row.set("eq6", r.eq6.value), row.set("eq6_std", r.eq6.std), row.set("eq6_se", r.eq6.se);
    layers.push(row);
  }
  return layers;
}

results::Value layers_of(const results::Value& rows) {
  results::Value v = results::Value::object();
  v.set("layers", rows);
  return v;
}

// The off-diagonal entries of a square matrix, each through f, averaged.
template <class F>
double off_diagonal_mean(const RowMatrix& m, F f) {
  double sum = 0;
  std::int64_t n = 0;
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      if (i != j) sum += f(m(i, j)), ++n;
  return sum / double(n);
}

}  // namespace

double CosineMap::mean_off_diagonal() const {
  return off_diagonal_mean(mean, [](double x) { return x; });
}
double CosineMap::mean_abs_off_diagonal() const {
  return off_diagonal_mean(mean, [](double x) { return std::abs(x); });
}

results::Value Report::to_value() const {
  results::Value v = results::Value::object();
  v.set("analysis", to_string(kind));
  v.set("definition", definition);
  v.set("sequences", sequences);
  v.set("seq_len", std::int64_t(seq_len));
  if (!nonfinite.empty()) return v;
  switch (kind) {
    case Kind::entropy: v.set("layers", summary_rows(entropy)); break;
    case Kind::similarity: v.set("layers", summary_rows(similarity)); break;
    case Kind::spectrum: v.set("layers", spectrum_rows(spectrum)); break;
    case Kind::first_token: v.set("layers", first_token_rows(first_token)); break;
    case Kind::cross_layer: v.set("layers", cross_layer_rows(cross_layer)); break;
    case Kind::heads:
    case Kind::tokens:
      v.set("layer", std::int64_t(cosine->layer));
      v.set("matrix", matrix_value(cosine->mean));
      v.set("matrix_std", matrix_value(cosine->std));
      v.set("matrix_se", matrix_value(cosine->se));
      break;
    case Kind::all:
      v.set("entropy", layers_of(summary_rows(entropy)));
      v.set("similarity", layers_of(summary_rows(similarity)));
      v.set("spectrum", layers_of(spectrum_rows(spectrum)));
      v.set("first_token", layers_of(first_token_rows(first_token)));
      break;
  }
  return v;
}

double uniform_causal_importance_ratio(int T) {
  std::vector<double> a(std::size_t(T), 0.0);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j <= i; ++j) a[std::size_t(j)] += 1.0 / (i + 1);
  double others = 0;
  for (int j = 1; j < T; ++j) others += a[std::size_t(j)] / (T - 1);
  return a[0] / others;
}

}  // namespace qkvlab::analysis
