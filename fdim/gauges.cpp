#include "fdim/gauges.hpp"

#include "fdim/dual.hpp"

namespace qkvlab::fdim {

namespace {

struct Reader {
  int W = -1, gain = -1;
};

// A hidden representation of width d between linear maps (docs/math/fdim.md, "Streams").
struct Stream {
  std::vector<int> writers;          // tensors written into it: W (n × d) or a bias (1 × d)
  std::vector<Reader> readers;       // linear maps reading it, through their pre-norm's gain
  std::vector<int> identity_layers;  // layers whose queries read it with W_Q = I
  int translation = -1;              // the bias (or token table) that absorbs a translation
  bool pinned = false, tied = false;
};

std::vector<Stream> streams(const Config& c, const Layout& L) {
  std::vector<Stream> s(1);
  auto open = [&](int translation) {
    s.emplace_back();
    s.back().translation = c.bias ? translation : -1;
  };
  auto write = [&](int t) {
    if (t >= 0) s.back().writers.push_back(t);
  };
  if (c.embed == Embed::none) s[0].pinned = true;
  write(L.embed);
  write(L.embed_bias);
  write(L.positions);
  s[0].translation = !c.bias ? -1 : c.embed == Embed::linear ? L.embed_bias : L.embed;
  for (int l = 0; l < c.layers; ++l) {
    const LayerTensors& t = L.layers[l];
    for (int W : t.W_Q) s.back().readers.push_back({W, t.norm1_gain});
    for (int W : t.W_K) s.back().readers.push_back({W, t.norm1_gain});
    for (int W : t.W_V) s.back().readers.push_back({W, t.norm1_gain});
    if (c.identity_query(l)) s.back().identity_layers.push_back(l);
    if (c.skips == Skips::none) open(t.b_O);
    for (int W : t.W_O) write(W);
    write(t.b_O);
    if (c.mlp == Mlp::none) continue;
    s.back().readers.push_back({t.W_1, t.norm2_gain});
    if (c.skips != Skips::both) open(t.b_2);
    write(t.W_2);
    write(t.b_2);
  }
  if (c.readout == Readout::none) s.back().pinned = true;
  if (c.readout == Readout::linear) s.back().readers.push_back({L.readout, L.final_gain});
  if (c.readout == Readout::tied) {
    if (s.size() == 1 && L.final_gain < 0) s[0].tied = true;  // E ↦ E G, D = Eᵀ ↦ G⁻¹ D: G orthogonal
    else s.front().pinned = s.back().pinned = true;         // the two ends tied: not enumerated
  }
  return s;
}

template <class T> class GaugeBuilder {
 public:
  GaugeBuilder(const Config& c, const Layout& L, const Vec<T>& theta) : c_(c), L_(L), theta_(theta) {}

  Gauges<T> finish() {
    Gauges<T> g;
    g.directions.resize(L_.size, Eigen::Index(columns_.size()));
    for (std::size_t j = 0; j < columns_.size(); ++j) g.directions.col(Eigen::Index(j)) = columns_[j];
    g.terms = terms_;
    return g;
  }

  void term(std::string name, long long dim) {
    if (dim > 0) terms_.push_back({std::move(name), dim});
  }
  Vec<T> zero() const { return Vec<T>::Zero(L_.size); }
  Mat<T> get(int id) const { return tensor<T>(L_, theta_, id); }
  // dir[tensor id] += delta.
  void add(Vec<T>& dir, int id, const Mat<T>& delta) const {
    const Tensor& t = L_.tensors[id];
    Eigen::Map<Mat<T>>(dir.data() + t.offset, t.rows, t.cols) += delta;
  }
  void push(Vec<T> dir) { columns_.push_back(std::move(dir)); }

  void heads() {
    const int dh = c_.head_dim;
    for (int l = 0; l < c_.layers; ++l) {
      const LayerTensors& t = L_.layers[l];
      for (int h = 0; h < c_.heads; ++h)
        for (int i = 0; i < dh; ++i)
          for (int j = 0; j < dh; ++j) {
            const Mat<T> E = unit(dh, i, j);
            if (!c_.identity_query(l)) {  // (W_Q, W_K) ↦ (W_Q A, W_K A⁻ᵀ)
              Vec<T> dir = zero();
              add(dir, t.W_Q[h], get(t.W_Q[h]) * E);
              add(dir, t.W_K[h], -get(t.W_K[h]) * E.transpose());
              if (c_.bias) {
                add(dir, t.b_Q[h], get(t.b_Q[h]) * E);
                add(dir, t.b_K[h], -get(t.b_K[h]) * E.transpose());
              }
              push(dir);
            }
            Vec<T> dir = zero();  // (W_V, W_O) ↦ (W_V B, B⁻¹ W_O)
            add(dir, t.W_V[h], get(t.W_V[h]) * E);
            add(dir, t.W_O[h], -E * get(t.W_O[h]));
            if (c_.bias) add(dir, t.b_V[h], get(t.b_V[h]) * E);
            push(dir);
          }
      const int free_heads = c_.identity_query(l) ? 0 : c_.heads;
      const std::string p = "layer " + std::to_string(l + 1) + ": ";
      term(p + "Lemma 3.1 (W_Q, W_K), H·d_h² = " + std::to_string(free_heads) + "·" + std::to_string(dh) + "²",
           (long long)free_heads * dh * dh);
      term(p + "Lemma 3.1 (W_V, W_O), H·d_h² = " + std::to_string(c_.heads) + "·" + std::to_string(dh) + "²",
           (long long)c_.heads * dh * dh);
      if (c_.bias) head_biases(l);
      if (c_.mlp == Mlp::relu) relu_scalings(l);
    }
  }

  void head_biases(int l) {
    const LayerTensors& t = L_.layers[l];
    const int dh = c_.head_dim;
    for (int h = 0; h < c_.heads; ++h)
      for (int k = 0; k < dh; ++k) {
        Vec<T> dir = zero();  // b_K^h ↦ b_K^h + u: each query's logits shift by a constant
        add(dir, t.b_K[h], unit(1, dh, 0, k));
        push(dir);
        Vec<T> vo = zero();  // b_V^h ↦ b_V^h + u, b_O ↦ b_O − u W_O^h (attention rows sum to 1)
        add(vo, t.b_V[h], unit(1, dh, 0, k));
        add(vo, t.b_O, -Mat<T>(get(t.W_O[h]).row(k)));
        push(vo);
      }
    const std::string p = "layer " + std::to_string(l + 1) + ": ";
    term(p + "b_K translations, H·d_h", (long long)c_.heads * dh);
    term(p + "b_V against b_O, H·d_h", (long long)c_.heads * dh);
  }

  void relu_scalings(int l) {
    const LayerTensors& t = L_.layers[l];
    for (int i = 0; i < c_.ffn; ++i) {
      Vec<T> dir = zero();
      add(dir, t.W_1, get(t.W_1) * unit(c_.ffn, i, i));
      if (t.b_1 >= 0) add(dir, t.b_1, get(t.b_1) * unit(c_.ffn, i, i));
      add(dir, t.W_2, -unit(c_.ffn, i, i) * get(t.W_2));
      push(dir);
    }
    term("layer " + std::to_string(l + 1) + ": ReLU positive scalings, ffn", c_.ffn);
  }

  // A norm's gain against the rows of its readers: γ_k ↦ s γ_k, row k of each reader ↦ row / s.
  void gain(int gain_id, const std::vector<int>& readers, const std::vector<int>& identity_W_K,
            const std::vector<int>& identity_b_K, const std::string& name) {
    if (gain_id < 0) return;
    for (int k = 0; k < c_.d; ++k) {
      const Mat<T> M = unit(c_.d, k, k);
      Vec<T> dir = zero();
      add(dir, gain_id, get(gain_id) * M);
      for (int W : readers) add(dir, W, -M * get(W));
      identity_reads(dir, M, identity_W_K, identity_b_K);
      push(dir);
    }
    term(name + " gain against its readers, d", c_.d);
  }

  // Through LayerNorm, Z = N(x) diag(γ) has Z (1/γ) = 0: any column of a reader may add 1/γ.
  void zero_means(const std::vector<int>& readers, int gain_id, const std::string& name) {
    long long n = 0;
    for (int W : readers) {
      const Tensor& t = L_.tensors[W];
      const Mat<T> u = gain_id < 0 ? Mat<T>(Mat<T>::Ones(c_.d, 1))
                                   : Mat<T>(get(gain_id).transpose().unaryExpr([](const T& x) { return T(T(1) / x); }));
      for (int j = 0; j < t.cols; ++j, ++n) {
        Vec<T> dir = zero();
        Mat<T> delta = Mat<T>::Zero(t.rows, t.cols);
        delta.col(j) = u.col(0);
        add(dir, W, delta);
        push(dir);
      }
    }
    term(name + " zero mean seen by its readers (a column of 1/gain each)", n);
  }

  void norm_readers() {
    if (c_.norm != Norm::layernorm) return;
    for (int l = 0; l < c_.layers; ++l) {
      const LayerTensors& t = L_.layers[l];
      std::vector<int> r = t.W_Q;
      r.insert(r.end(), t.W_K.begin(), t.W_K.end());
      r.insert(r.end(), t.W_V.begin(), t.W_V.end());
      const std::string p = "layer " + std::to_string(l + 1) + ": ";
      zero_means(r, t.norm1_gain, p + "norm 1's");
      if (t.W_1 >= 0) zero_means({t.W_1}, t.norm2_gain, p + "norm 2's");
    }
    if (c_.readout == Readout::linear) zero_means({L_.readout}, L_.final_gain, "final norm's");
  }

  // Token and position tables: E ↦ E + 1 cᵀ, P ↦ P − 1 cᵀ leaves X_0 unchanged (c ⊥ 1 through
  // LayerNorm, where c = 1 is already two dead means).
  void moved_vector() {
    if (c_.embed != Embed::tokens || L_.positions < 0 || c_.readout == Readout::tied) return;
    const int n = c_.norm == Norm::layernorm ? c_.d - 1 : c_.d;
    for (int k = 0; k < n; ++k) {
      Mat<T> c = Mat<T>::Zero(1, c_.d);
      c(0, k) = T(1);
      if (c_.norm == Norm::layernorm) c(0, k + 1) = T(-1);
      Vec<T> dir = zero();
      add(dir, L_.embed, Mat<T>::Ones(c_.vocab, 1) * c);
      add(dir, L_.positions, -Mat<T>::Ones(c_.seq, 1) * c);
      push(dir);
    }
    term("a vector moved between token and position rows", n);
  }

  void gains() {
    for (int l = 0; l < c_.layers; ++l) {
      const LayerTensors& t = L_.layers[l];
      std::vector<int> r = t.W_Q;
      r.insert(r.end(), t.W_K.begin(), t.W_K.end());
      r.insert(r.end(), t.W_V.begin(), t.W_V.end());
      const bool id = c_.identity_query(l);
      const std::string p = "layer " + std::to_string(l + 1) + ": ";
      gain(t.norm1_gain, r, id ? t.W_K : std::vector<int>{}, id ? t.b_K : std::vector<int>{}, p + "norm 1");
      gain(t.norm2_gain, {t.W_1}, {}, {}, p + "norm 2");
    }
    if (c_.readout == Readout::linear) gain(L_.final_gain, {L_.readout}, {}, {}, "final norm");
  }

  // Where W_Q = I reads Z ↦ Z (I + εM): W_K^h ↦ W_K^h (I − ε M_hᵀ), M_h the head's diagonal block.
  void identity_reads(Vec<T>& dir, const Mat<T>& M, const std::vector<int>& W_K, const std::vector<int>& b_K) const {
    const int dh = c_.head_dim;
    for (std::size_t h = 0; h < W_K.size(); ++h) {
      const Mat<T> Mh = M.block(Eigen::Index(h) * dh, Eigen::Index(h) * dh, dh, dh).transpose();
      add(dir, W_K[h], -get(W_K[h]) * Mh);
      if (!b_K.empty()) add(dir, b_K[h], -get(b_K[h]) * Mh);
    }
  }

  void stream(const Stream& s, int index) {
    if (s.pinned) return;
    const std::string p = "stream " + std::to_string(index + 1) + ": ";
    const int block = s.identity_layers.empty() ? c_.d : c_.head_dim;
    const std::vector<Mat<T>> basis = stream_algebra(s, block);
    for (const Mat<T>& B : basis) {
      Vec<T> dir = zero();
      for (int W : s.writers) add(dir, W, get(W) * B);
      for (const Reader& r : s.readers) add(dir, r.W, -conjugated(B, r.gain) * get(r.W));
      for (int l : s.identity_layers) {
        const LayerTensors& t = L_.layers[l];
        identity_reads(dir, conjugated(B, t.norm1_gain), t.W_K, t.b_K);
      }
      push(dir);
    }
    term(p + algebra_name(s, block), (long long)basis.size());
    if (c_.norm == Norm::layernorm) dead_means(s, p);
    if (s.translation >= 0 && c_.norm == Norm::none && !s.tied && s.identity_layers.empty()) translations(s, p);
  }

  void dead_means(const Stream& s, const std::string& p) {
    long long n = 0;
    for (int W : s.writers) {
      if (s.tied && W == L_.embed) continue;
      const Tensor& t = L_.tensors[W];
      for (int i = 0; i < t.rows; ++i, ++n) {
        Vec<T> dir = zero();
        add(dir, W, unit(t.rows, t.cols, i, -1));
        push(dir);
      }
    }
    term(p + "LayerNorm's centring: each writer row's component along 1", n);
  }

  void translations(const Stream& s, const std::string& p) {
    const Tensor& src = L_.tensors[s.translation];
    for (int k = 0; k < c_.d; ++k) {
      Vec<T> dir = zero();
      add(dir, s.translation, unit(src.rows, src.cols, -1, k));  // every row + e_k
      for (const Reader& r : s.readers) {
        const int b = reader_bias(r.W);
        if (b >= 0) add(dir, b, -Mat<T>(get(r.W).row(k)));
      }
      push(dir);
    }
    term(p + "translations of the stream (biases), d", c_.d);
  }

 private:
  // E_ij (n × n); unit(rows, cols, i, j): e_i e_jᵀ, or a whole row (j = −1) or column (i = −1) of ones.
  static Mat<T> unit(int n, int i, int j) { return unit(n, n, i, j); }
  static Mat<T> unit(int rows, int cols, int i, int j) {
    Mat<T> E = Mat<T>::Zero(rows, cols);
    for (int r = 0; r < rows; ++r)
      for (int q = 0; q < cols; ++q)
        if ((i < 0 || r == i) && (j < 0 || q == j)) E(r, q) = T(1);
    return E;
  }

  Mat<T> conjugated(const Mat<T>& B, int gain) const {
    if (gain < 0) return B;
    const Vec<T> g = get(gain).row(0).transpose();
    const Vec<T> inv = g.unaryExpr([](const T& x) { return T(T(1) / x); });
    return inv.asDiagonal() * B * g.asDiagonal();
  }

  int reader_bias(int W) const {
    for (const LayerTensors& t : L_.layers) {
      for (std::size_t h = 0; h < t.W_K.size(); ++h) {
        if (!t.W_Q.empty() && W == t.W_Q[h]) return t.b_Q[h];
        if (W == t.W_K[h]) return t.b_K[h];
        if (W == t.W_V[h]) return t.b_V[h];
      }
      if (W == t.W_1) return t.b_1;
    }
    return W == L_.readout ? L_.readout_bias : -1;
  }

  const char* kind(const Stream& s) const {
    if (c_.norm == Norm::layernorm) return "LN";
    return c_.norm == Norm::rmsnorm || s.tied ? "O" : "GL";
  }

  std::string algebra_name(const Stream& s, int block) const {
    const std::string k = kind(s), b = std::to_string(block);
    const std::string group = k == "LN" ? "O(" + b + ") fixing 1" : k + "(" + b + ")";
    return block == c_.d ? group + " (the stream's basis)"
                         : group + "^" + std::to_string(c_.heads) + " (block-diagonal: W_Q = I reads it)";
  }

  // A basis of the stream's Lie algebra, in blocks of size `block`: gl (E_ij), so (E_ij − E_ji)
  // or, through LayerNorm, so ∩ {B 1 = 0} (v_a v_bᵀ − v_b v_aᵀ with v_a = e_a − e_{a+1}).
  std::vector<Mat<T>> stream_algebra(const Stream& s, int block) const {
    std::vector<Mat<T>> basis;
    const std::string k = kind(s);
    for (int o = 0; o < c_.d; o += block) {
      if (k == "GL")
        for (int i = 0; i < block; ++i)
          for (int j = 0; j < block; ++j) basis.push_back(unit(c_.d, o + i, o + j));
      if (k == "O")
        for (int i = 0; i < block; ++i)
          for (int j = i + 1; j < block; ++j) basis.push_back(unit(c_.d, o + i, o + j) - unit(c_.d, o + j, o + i));
      if (k == "LN")
        for (int a = 0; a + 1 < block; ++a)
          for (int b = a + 1; b + 1 < block; ++b) {
            const Mat<T> va = unit(c_.d, 1, o + a, 0) - unit(c_.d, 1, o + a + 1, 0);
            const Mat<T> vb = unit(c_.d, 1, o + b, 0) - unit(c_.d, 1, o + b + 1, 0);
            basis.push_back(va * vb.transpose() - vb * va.transpose());
          }
    }
    return basis;
  }

  const Config& c_;
  const Layout& L_;
  const Vec<T>& theta_;
  std::vector<Vec<T>> columns_;
  std::vector<Term> terms_;
};

}  // namespace

template <class T> Gauges<T> gauge_directions(const Config& c, const Layout& L, const Vec<T>& theta) {
  GaugeBuilder<T> b(c, L, theta);
  b.heads();
  b.gains();
  b.norm_readers();
  b.moved_vector();
  const std::vector<Stream> s = streams(c, L);
  for (std::size_t i = 0; i < s.size(); ++i) b.stream(s[i], int(i));
  return b.finish();
}

template Gauges<double> gauge_directions<double>(const Config&, const Layout&, const VecD&);
template Gauges<Interval> gauge_directions<Interval>(const Config&, const Layout&, const Vec<Interval>&);

}  // namespace qkvlab::fdim
