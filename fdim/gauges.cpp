#include "fdim/gauges.hpp"

#include "fdim/dual.hpp"

#include <algorithm>

namespace qkvlab::fdim {

namespace {

struct Reader {
  int W = -1;
  NormTensors norm;  // the pre-norm it reads through; none for a raw read (a learned skip's matrix)
  bool raw = false;
};

// A bias that injects a translation into a norm-free stream, absorbed by the biases of the readers
// from first_reader on (those that read after it).
struct Translation {
  int bias = -1;
  std::size_t first_reader = 0;
};

// A hidden representation between linear maps (docs/math/fdim.md, "Streams"): of width d, or the
// inside of a learned skip (U V: width d; low-rank U V: width r), which no norm reads.
struct Stream {
  int width = 0;
  bool inner = false;
  std::vector<int> writers;          // tensors written into it: W (n × width) or a bias (1 × width)
  std::vector<Reader> readers;       // linear maps reading it, in the order of the network
  std::vector<int> identity_layers;  // layers whose queries read it with W_Q = I
  std::vector<Translation> translations;
  // Reader positions (the readers before them have read) where a translation of the stream cannot be
  // absorbed and must vanish: a W_Q = I layer's queries, the output (--readout none), a tied readout.
  std::vector<std::size_t> fixed;
  bool pinned = false, output = false, tied = false;  // pinned: the input's or the output's coordinates
};

class StreamBuilder {
 public:
  StreamBuilder(const Network& c, const Layout& L) : c_(c), L_(L) { open(); }

  std::vector<Stream> build() {
    Stream& first = s_[0];
    first.pinned = c_.embed == Embed::none;
    write(L_.embed);
    write(L_.embed_bias);
    write(L_.positions);
    // The token table's translation E + 1uᵀ also moves a tied readout X Eᵀ by (X u)1ᵀ: none there.
    if (c_.embed == Embed::linear) translate(L_.embed_bias);
    else if (c_.readout != Readout::tied) translate(L_.embed);
    for (int l = 0; l < c_.layers; ++l) layer(l);
    Stream& last = s_[cur_];
    if (c_.readout != Readout::linear) last.fixed.push_back(last.readers.size());
    if (c_.readout == Readout::none) last.pinned = last.output = true;
    if (c_.readout == Readout::linear) read(L_.readout, L_.final_norm);
    if (c_.readout == Readout::tied) {
      // E ↦ E G, D = Eᵀ ↦ G⁻¹ D: G orthogonal; otherwise the two ends are tied: not enumerated.
      if (s_.size() == 1 && L_.final_norm.gain < 0 && c_.norm != Norm::dyt) s_[0].tied = true;
      else s_.front().pinned = last.pinned = true;
    }
    return s_;
  }

 private:
  void layer(int l) {
    const LayerTensors& t = L_.layers[l];
    if (c_.attention()) {
      const std::size_t at = s_[cur_].readers.size();
      for (const auto* group : {&t.W_Q, &t.W_K, &t.W_V})
        for (int W : *group) read(W, t.norm1);
      if (c_.identity_query(l)) {
        s_[cur_].identity_layers.push_back(l);
        s_[cur_].fixed.push_back(at);
      }
      sublayer(c_.attention_skip(), t.skip1, t.W_O, t.b_O);
    }
    if (c_.mlp == Mlp::none) return;
    read(t.W_1, t.norm2);
    sublayer(c_.mlp_skip(), t.skip2, {t.W_2}, t.b_2);
  }

  // A sublayer's writes and its skip: an identity or low-rank skip keeps the stream; no skip, a
  // learned one (X A) or identity units (X U V) start a new one, which A or V writes.
  void sublayer(bool skipped, const SkipTensors& k, const std::vector<int>& writers, int bias) {
    const std::size_t prev = cur_;
    if (!skipped || k.A >= 0 || (k.U >= 0 && !k.lowrank)) open();
    raw(prev, k.A);
    write(k.A);
    if (k.U >= 0) {
      raw(prev, k.U);
      const std::size_t outer = cur_;
      open();
      s_[cur_].inner = true;
      s_[cur_].width = L_.tensors[k.U].cols;
      write(k.U);
      raw(cur_, k.V);
      cur_ = outer;
      write(k.V);
    }
    for (int W : writers) write(W);
    write(bias);
    translate(bias);
  }

  void open() {
    s_.emplace_back();
    s_.back().width = c_.d;
    cur_ = s_.size() - 1;
  }
  void write(int t) {
    if (t >= 0) s_[cur_].writers.push_back(t);
  }
  void read(int W, const NormTensors& n) { s_[cur_].readers.push_back({W, n, false}); }
  void raw(std::size_t stream, int W) {
    if (W >= 0) s_[stream].readers.push_back({W, {}, true});
  }
  void translate(int bias) {
    if (c_.bias && bias >= 0) s_[cur_].translations.push_back({bias, s_[cur_].readers.size()});
  }

  const Network& c_;
  const Layout& L_;
  std::vector<Stream> s_;
  std::size_t cur_ = 0;
};

template <class T> class GaugeBuilder {
 public:
  GaugeBuilder(const Network& c, const Layout& L, const Vec<T>& theta) : c_(c), L_(L), theta_(theta) {}

  Gauges<T> finish() {
    Gauges<T> g;
    g.directions.resize(L_.size, Eigen::Index(columns_.size()));
    for (std::size_t j = 0; j < columns_.size(); ++j) g.directions.col(Eigen::Index(j)) = columns_[j];
    g.terms = terms_;
    return g;
  }

  void term(std::string name, long long dim) {
    if (dim > 0) terms_.push_back({std::move(name), dim, true});
  }
  void formula(std::string name, long long dim) {
    if (dim > 0) terms_.push_back({std::move(name), dim, false});
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
    if (!c_.attention()) return;
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

  // Scalings of hidden units: σ(s z) = s^k σ(z) for ReLU (k = 1) and ReLU² (k = 2), so W_1's column i
  // (and b_1,i) ↦ s·, W_2's row i ↦ s^−k ·; gated MLPs: each value column (k = 1), and ReGLU's gate too.
  void unit_scalings() {
    const int k = c_.mlp == Mlp::relu2 ? 2 : 1;
    std::vector<int> columns;  // W_1's columns that scale
    if (c_.mlp == Mlp::relu || c_.mlp == Mlp::relu2 || c_.mlp == Mlp::reglu)
      for (int i = 0; i < c_.ffn; ++i) columns.push_back(i);
    if (c_.gated())
      for (int i = 0; i < c_.ffn; ++i) columns.push_back(c_.ffn + i);
    for (int l = 0; l < c_.layers && !columns.empty(); ++l) {
      const LayerTensors& t = L_.layers[l];
      for (int i : columns) {
        const Mat<T> S = unit(c_.hidden_columns(), i, i);
        Vec<T> dir = zero();
        add(dir, t.W_1, get(t.W_1) * S);
        if (t.b_1 >= 0) add(dir, t.b_1, get(t.b_1) * S);
        add(dir, t.W_2, -T(k) * unit(c_.ffn, i % c_.ffn, i % c_.ffn) * get(t.W_2));
        push(dir);
      }
      const std::string what = c_.mlp == Mlp::reglu ? "ReGLU gate and value scalings, 2·ffn"
                               : c_.gated()         ? std::string(mlp_name(c_.mlp)) + " value scalings, ffn"
                               : k == 2             ? "ReLU² positive scalings, ffn"
                                                    : "ReLU positive scalings, ffn";
      term("layer " + std::to_string(l + 1) + ": " + what, (long long)columns.size());
    }
  }

  // A norm's gain against the rows of its readers: γ_k (and DyT's β_k) ↦ s·, row k of each reader ↦ /s.
  void gain(const NormTensors& n, const std::vector<int>& readers, const std::vector<int>& identity_W_K,
            const std::vector<int>& identity_b_K, const std::string& name) {
    if (n.gain < 0) return;
    for (int k = 0; k < c_.d; ++k) {
      const Mat<T> M = unit(c_.d, k, k);
      Vec<T> dir = zero();
      add(dir, n.gain, get(n.gain) * M);
      if (n.offset >= 0) add(dir, n.offset, get(n.offset) * M);
      for (int W : readers) add(dir, W, -M * get(W));
      identity_reads(dir, M, identity_W_K, identity_b_K);
      push(dir);
    }
    term(name + (n.offset >= 0 ? " gain and offset" : " gain") + " against its readers, d", c_.d);
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
      if (c_.attention()) zero_means(r, t.norm1.gain, p + "norm 1's");
      if (t.W_1 >= 0) zero_means({t.W_1}, t.norm2.gain, p + "norm 2's");
    }
    if (c_.readout == Readout::linear) zero_means({L_.readout}, L_.final_norm.gain, "final norm's");
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
      gain(t.norm1, r, id ? t.W_K : std::vector<int>{}, id ? t.b_K : std::vector<int>{}, p + "norm 1");
      gain(t.norm2, {t.W_1}, {}, {}, p + "norm 2");
    }
    if (c_.readout == Readout::linear) gain(L_.final_norm, {L_.readout}, {}, {}, "final norm");
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
    const std::string p = "stream " + std::to_string(index + 1) + (s.inner ? " (inside a skip): " : ": ");
    if (!s.inner && c_.norm == Norm::none) translations(s, p);
    if (!s.pinned) basis(s, p);
    if (c_.norm == Norm::layernorm && !s.inner && !s.output) dead_means(s, p);
    if (!s.pinned && scale_invariant(s)) scaling(s, p);
  }

  // The stream's change of basis X ↦ X G (module comment), G in the stream's group.
  void basis(const Stream& s, const std::string& p) {
    const bool dyt = kind(s) == std::string("R+");
    const int block = s.identity_layers.empty() || dyt ? s.width : c_.head_dim;
    const std::vector<Mat<T>> basis = stream_algebra(s, block);
    for (const Mat<T>& B : basis) {
      Vec<T> dir = zero();
      for (int W : s.writers) add(dir, W, get(W) * B);
      std::vector<int> alphas;  // DyT: X ↦ X(1 + εB) with B = I, each α ↦ α(1 − ε), its readers unchanged
      for (const Reader& r : s.readers) {
        if (dyt && !r.raw) {
          if (std::find(alphas.begin(), alphas.end(), r.norm.alpha) == alphas.end()) alphas.push_back(r.norm.alpha);
          continue;
        }
        add(dir, r.W, -conjugated(B, r.raw ? -1 : r.norm.gain) * get(r.W));
      }
      for (int a : alphas) add(dir, a, -get(a));
      for (int l : dyt ? std::vector<int>{} : s.identity_layers) {
        const LayerTensors& t = L_.layers[l];
        identity_reads(dir, conjugated(B, t.norm1.gain), t.W_K, t.b_K);
      }
      push(dir);
    }
    term(p + algebra_name(s, block), (long long)basis.size());
  }

  // At ε = 0 RMSNorm and LayerNorm are scale-invariant: X ↦ c X with every writer ↦ c·, every raw
  // reader (a learned skip's matrix) ↦ ·/c, and what the norms return unchanged.
  bool scale_invariant(const Stream& s) const {
    return !s.inner && !s.tied && c_.norm_eps == 0 && (c_.norm == Norm::rmsnorm || c_.norm == Norm::layernorm);
  }
  void scaling(const Stream& s, const std::string& p) {
    Vec<T> dir = zero();
    for (int W : s.writers) add(dir, W, get(W));
    for (const Reader& r : s.readers)
      if (r.raw) add(dir, r.W, -get(r.W));
    push(dir);
    term(p + "its scale (the norms are scale-invariant at eps = 0)", 1);
  }

  // LayerNorm's centring: a writer's row i + t·1 moves the stream by a multiple of 1 per row, which
  // every reader removes, since every reader reads through a LayerNorm (the stream is not the output),
  // whether or not the stream's basis is pinned. A tied E is also the readout: N_f(X)(E + t e_i 1ᵀ)ᵀ
  // adds t N_f(X) 1 = t N(X) γ, zero without a final gain only.
  void dead_means(const Stream& s, const std::string& p) {
    long long n = 0;
    for (int W : s.writers) {
      if (W == L_.embed && c_.readout == Readout::tied && L_.final_norm.gain >= 0) continue;
      const Tensor& t = L_.tensors[W];
      for (int i = 0; i < t.rows; ++i, ++n) {
        Vec<T> dir = zero();
        add(dir, W, unit(t.rows, t.cols, i, -1));
        push(dir);
      }
    }
    term(p + "LayerNorm's centring: each writer row's component along 1", n);
  }

  // Translations of a norm-free stream (Lemma 9 of the skips-as-gauges note): a bias that writes it,
  // every row + u (the token table's too), shifts the stream by u from there on, and the bias of each
  // later reader W absorbs it, b ↦ b − u W. At a fixed point (Stream::fixed) the shift cannot be
  // absorbed (W_Q = I: the logits gain u_h·k_j, which varies over the keys; the output; a tied
  // readout), so the shifts written since the previous fixed point sum to 0 there. A basis: T_i − T_{i+1}
  // for consecutive biases before the same fixed point, T_i alone after the last: d per bias, less d per
  // fixed point with a bias written before it (since the previous one).
  void translations(const Stream& s, const std::string& p) {
    const auto& tr = s.translations;
    for (std::size_t i = 0; i < tr.size(); ++i) {
      const std::size_t seg = segment(s, tr[i]);
      const bool paired = i + 1 < tr.size() && segment(s, tr[i + 1]) == seg;
      if (seg < s.fixed.size() && !paired) continue;
      for (int k = 0; k < s.width; ++k) {
        Vec<T> dir = translation(s, tr[i], k);
        if (paired) dir -= translation(s, tr[i + 1], k);
        push(dir);
      }
      std::string what = "translations injected by " + L_.tensors[tr[i].bias].name;
      if (paired) what += " against " + L_.tensors[tr[i + 1].bias].name + " (they must cancel where W_Q = I reads "
                          "or at the output)";
      term(p + what + ", d", s.width);
    }
  }

  // The first fixed point that sees the translation (s.fixed.size(): none).
  static std::size_t segment(const Stream& s, const Translation& tr) {
    std::size_t f = 0;
    while (f < s.fixed.size() && s.fixed[f] < tr.first_reader) ++f;
    return f;
  }

  // T: the bias's every row + e_k, each later reader's bias − row k of the reader.
  Vec<T> translation(const Stream& s, const Translation& tr, int k) const {
    const Tensor& src = L_.tensors[tr.bias];
    Vec<T> dir = zero();
    add(dir, tr.bias, unit(src.rows, src.cols, -1, k));
    for (std::size_t i = tr.first_reader; i < s.readers.size(); ++i) {
      const int b = reader_bias(s.readers[i].W);
      if (b >= 0) add(dir, b, -Mat<T>(get(s.readers[i].W).row(k)));
    }
    return dir;
  }

  // Low-rank skips X + X U V: beyond U V's GL(r), the note's count of the rest (Section 4: Theorem 2's
  // sweep removes all of U, V without a norm, 2dr − r² more per skip; under RMSNorm the rotations that
  // keep the skip within rank r of I, r(r − 1) per skip when 2r ≤ d). A formula: no directions.
  void lowrank_rest() {
    if (c_.skip_kind != SkipKind::lowrank) return;
    const long long d = c_.d, r = c_.skip_rank;
    long long skips = 0;
    for (const LayerTensors& t : L_.layers) skips += (t.skip1.U >= 0) + (t.skip2.U >= 0);
    if (c_.norm == Norm::none)
      formula("low-rank skips: Theorem 2's sweep, 2dr - r^2 per skip (formula, no directions)", skips * (2 * d * r - r * r));
    if (c_.norm == Norm::rmsnorm && 2 * r <= d)
      formula("low-rank skips: rotations keeping each skip of rank r, r(r-1) per skip when 2r <= d (formula, no "
              "directions)", skips * r * (r - 1));
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
    if (s.inner) return "GL";
    switch (c_.norm) {
      case Norm::layernorm: return "LN";
      case Norm::rmsnorm: return "O";
      case Norm::dyt: return "R+";
      case Norm::none: break;
    }
    return s.tied ? "O" : "GL";
  }

  std::string algebra_name(const Stream& s, int block) const {
    const std::string k = kind(s), b = std::to_string(block);
    if (k == "R+") return "its scale against each DyT's alpha, 1";
    const std::string group = k == "LN" ? "O(" + b + ") fixing 1" : k + "(" + b + ")";
    if (s.inner) return group + " (U -> U G, V -> G^-1 V)";
    return block == s.width ? group + " (the stream's basis)"
                            : group + "^" + std::to_string(c_.heads) + " (block-diagonal: W_Q = I reads it)";
  }

  // A basis of the stream's Lie algebra, in blocks of size `block`: gl (E_ij), so (E_ij − E_ji)
  // or, through LayerNorm, so ∩ {B 1 = 0} (v_a v_bᵀ − v_b v_aᵀ with v_a = e_a − e_{a+1}); DyT: I.
  std::vector<Mat<T>> stream_algebra(const Stream& s, int block) const {
    std::vector<Mat<T>> basis;
    const std::string k = kind(s);
    const int n = s.width;
    if (k == "R+") return {Mat<T>(Mat<T>::Identity(n, n))};
    for (int o = 0; o < n; o += block) {
      if (k == "GL")
        for (int i = 0; i < block; ++i)
          for (int j = 0; j < block; ++j) basis.push_back(unit(n, o + i, o + j));
      if (k == "O")
        for (int i = 0; i < block; ++i)
          for (int j = i + 1; j < block; ++j) basis.push_back(unit(n, o + i, o + j) - unit(n, o + j, o + i));
      if (k == "LN")
        for (int a = 0; a + 1 < block; ++a)
          for (int b = a + 1; b + 1 < block; ++b) {
            const Mat<T> va = unit(n, 1, o + a, 0) - unit(n, 1, o + a + 1, 0);
            const Mat<T> vb = unit(n, 1, o + b, 0) - unit(n, 1, o + b + 1, 0);
            basis.push_back(va * vb.transpose() - vb * va.transpose());
          }
    }
    return basis;
  }

  const Network& c_;
  const Layout& L_;
  const Vec<T>& theta_;
  std::vector<Vec<T>> columns_;
  std::vector<Term> terms_;
};

}  // namespace

template <class T> Gauges<T> gauge_directions(const Network& c, const Layout& L, const Vec<T>& theta) {
  GaugeBuilder<T> b(c, L, theta);
  b.heads();
  b.unit_scalings();
  b.gains();
  b.norm_readers();
  b.moved_vector();
  const std::vector<Stream> s = StreamBuilder(c, L).build();
  for (std::size_t i = 0; i < s.size(); ++i) b.stream(s[i], int(i));
  b.lowrank_rest();
  return b.finish();
}

template Gauges<double> gauge_directions<double>(const Network&, const Layout&, const VecD&);
template Gauges<Interval> gauge_directions<Interval>(const Network&, const Layout&, const Vec<Interval>&);

}  // namespace qkvlab::fdim
