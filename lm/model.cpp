// The model of lm/model.hpp: forward and backward passes over the backend's
// kernels. Names follow the header's formulas: per layer ℓ, x (block input),
// n1, q, k, v (used keys and values), pattern, z, a (attention output),
// m = x + a, n2, h (MLP hidden), y (block output).
#include "lm/model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/buffer.hpp"
#include "engine/linear.hpp"
#include "lm/parameters.hpp"

namespace qkvlab::lm {

using engine::Buffer;
using engine::Centering;
using engine::View;

// Named, not anonymous: Model<S>::Impl (declared in the header) holds these, and a class with
// external linkage may not hold members of internal-linkage types (GCC's -Wsubobject-linkage
// says so whenever this file is not the main file, as in a unity build).
namespace model_parts {

constexpr int kHeadRows = 512;  // rows of logits computed at a time
constexpr int kQueryBlock = 64;  // queries at a time of an eval pass's attention that keeps no pattern

template <class S>
struct Linear {
  const S* W = nullptr;
  const S* b = nullptr;
  S* dW = nullptr;
  S* db = nullptr;
};

template <class S>
struct Norm {
  const S* g = nullptr;
  const S* b = nullptr;
  S* dg = nullptr;
  S* db = nullptr;
};

template <class S>
struct LayerWeights {
  Norm<S> ln1, ln2;
  Linear<S> q, k, v, o, fc, proj, gate, up, down;
  Linear<S> dkv, uk, uv, kr, qr;  // MLA
  const S* dwa = nullptr;
  S* ddwa = nullptr;
};

// One layer's activations (a training pass keeps one per layer, an eval pass one in all).
template <class S>
struct LayerActs {
  Buffer<S> n1, mean1, rstd1, q, kmix, vmix, pattern, z, m, n2, mean2, rstd2, h1, h2, act;
  Buffer<S> c;  // MLA: the mixed latent, when it is not the layer's own
};

}  // namespace model_parts
using namespace model_parts;

template <class S>
struct Model<S>::Impl {
  Impl(const Config& c, engine::Backend<S>& be)
      : config(c), plan(make_plan(c)), backend(be), params(be, parameter_layout(c, plan)) {
    resolve_weights();
  }

  Config config;
  std::vector<LayerPlan> plan;
  engine::Backend<S>& backend;
  engine::ParameterSet<S> params;

  // weights
  const S* wte = nullptr;
  S* dwte = nullptr;
  const S* wpe = nullptr;
  S* dwpe = nullptr;
  const S* head = nullptr;  // U (V×d): wte when tied
  S* dhead = nullptr;
  Norm<S> lnf;
  std::vector<LayerWeights<S>> layers;

  // workspace for (B, T, pass)
  int B = 0, T_ = 0, N = 0;
  Pass pass = Pass::eval;       // the last forward's pass
  bool train_workspace = false;  // every layer's activations kept (a training pass needs it; an eval pass may use it)
  bool allocated = false;
  std::vector<LayerActs<S>> acts;          // L (train) or 1 (eval)
  std::vector<Buffer<S>> x;                // block inputs X_0 … X_L (train, dense) or 2 (eval)
  std::vector<Buffer<S>> y;                // DenseFormer's raw block outputs Y_0 … Y_L
  std::vector<Buffer<S>> kown, vown;       // each layer's own key and value heads
  std::vector<Buffer<S>> dkown, dvown;     // their gradients (train)
  Buffer<S> shared_kv_[2];                 // eval: own heads nobody reuses (keys, values)
  Buffer<S> mla_tmp[3], dc;                // MLA: q_C or k_C (N, H·d_h), q_R (N, H·d_R), k_R (N, d_R); dc
  Buffer<S> a, mlp, nf, meanf, rstdf, logits, losses, dnf;
  Buffer<std::int32_t> ids, targets;
  Buffer<S> dx, dn, dact, dh1, dh2, dz, dq, dkmix, dvmix, dpattern;
  std::vector<Buffer<S>> dy;               // DenseFormer: gradients of Y_0 … Y_L
  bool have_targets = false;
  std::vector<S> staging;                  // host copies for the recorder (non-CPU backends)
  Buffer<double> pattern_sums;             // a layer's PatternSums when a recorder takes them
  std::vector<double> sums_staging;        // their host copy (non-CPU backends)

  // The positions computed are past … past + T_ − 1 of each sequence; the buffers that span positions
  // (own heads, mixed heads, MLA's rotary keys) hold `cap` rows per sequence. A plain forward is the
  // case past = 0, cap = T_; incremental decoding keeps them as the cache (`caching`).
  int past = 0, cap = 0;
  bool caching = false;
  bool drop_shared = false;                // the tests' faulty cache: heads from other layers read as zero
  std::vector<Buffer<S>> krown;            // MLA, caching: each layer's rotary key k_R
  Buffer<S> fresh;                         // caching, B > 1: the new positions' own heads before store()

  // ---- setup ------------------------------------------------------------------------------------

  Linear<S> linear(int l, const std::string& what) {
    Linear<S> lin;
    const std::string w = layer_tensor(l, what + ".weight"), b = layer_tensor(l, what + ".bias");
    if (params.layout.find(w)) lin.W = params.value(w), lin.dW = params.grad(w);
    if (params.layout.find(b)) lin.b = params.value(b), lin.db = params.grad(b);
    return lin;
  }

  Norm<S> norm(const std::string& name) {
    Norm<S> n;
    if (!config.norm) return n;  // --norm none: no tensors, N is the identity
    n.g = params.value(name + ".weight"), n.dg = params.grad(name + ".weight");
    if (params.layout.find(name + ".bias")) n.b = params.value(name + ".bias"), n.db = params.grad(name + ".bias");
    return n;
  }

  void resolve_weights() {
    wte = params.value("wte"), dwte = params.grad("wte");
    if (params.layout.find("wpe")) wpe = params.value("wpe"), dwpe = params.grad("wpe");
    head = config.tied ? wte : params.value("lm_head.weight");
    dhead = config.tied ? dwte : params.grad("lm_head.weight");
    lnf = norm("ln_f");
    layers.resize(std::size_t(config.layers));
    for (int l = 0; l < config.layers; ++l) {
      LayerWeights<S>& w = layers[std::size_t(l)];
      w.ln1 = norm(layer_tensor(l, "ln_1")), w.ln2 = norm(layer_tensor(l, "ln_2"));
      w.q = linear(l, "attn.q"), w.k = linear(l, "attn.k"), w.v = linear(l, "attn.v"), w.o = linear(l, "attn.o");
      w.dkv = linear(l, "attn.dkv"), w.uk = linear(l, "attn.uk"), w.uv = linear(l, "attn.uv");
      w.kr = linear(l, "attn.kr"), w.qr = linear(l, "attn.qr");
      w.fc = linear(l, "mlp.fc"), w.proj = linear(l, "mlp.proj");
      w.gate = linear(l, "mlp.gate"), w.up = linear(l, "mlp.up"), w.down = linear(l, "mlp.down");
      if (plan[std::size_t(l)].dense)
        w.dwa = params.value(layer_tensor(l, "dwa")), w.ddwa = params.grad(layer_tensor(l, "dwa"));
    }
  }

  bool dense() const { return config.variant.kind == VariantKind::denseformer; }
  bool gpt2() const { return config.family == Family::gpt2; }
  Centering centering() const { return gpt2() ? Centering::mean : Centering::none; }
  int qwidth() const { return config.heads * config.head_dim; }    // z: H heads of d_h
  int dk() const { return config.head_dim + (config.mla ? config.d_r : 0); }  // a query or key head's width
  int attn_kv() const { return config.mla ? config.heads : config.kv_heads; }  // key/value heads the attention sees
  int slot() const { return config.mla ? config.d_c / config.kv_heads : 0; }  // MLA: width of a latent slot
  // Width of one own head: keys d_h; values d_h, or a latent slot with MLA.
  int head_width(bool keys) const { return keys || !config.mla ? config.head_dim : slot(); }
  int own_heads(int l, bool keys) const {
    return keys ? plan[std::size_t(l)].own_key_heads : plan[std::size_t(l)].own_value_heads;
  }

  // Whether layer l's own keys (values) are read by a later layer.
  bool reused(int l, bool keys) const {
    for (std::size_t n = std::size_t(l) + 1; n < plan.size(); ++n)
      for (const Mix* mix : {keys ? &plan[n].keys : &plan[n].values, keys ? nullptr : &plan[n].direct})
        if (mix)
          for (const auto& sources : *mix)
            for (const Source& s : sources)
              if (s.layer == l) return true;
    return false;
  }

  // The workspace for (B, T): an eval pass reuses a training workspace of the same shape. With a
  // capacity (incremental decoding), the cache of B sequences of `capacity` positions, fed T at a time.
  void allocate(int B_, int T__, Pass pass_, int capacity = 0) {
    pass = pass_, past = 0;
    if (allocated && !caching && !capacity && B_ == B && T__ == T_ && (train_workspace || pass_ == Pass::eval))
      return;
    B = B_, T_ = T__, N = B_ * T__, train_workspace = pass_ == Pass::train;
    caching = capacity > 0, cap = caching ? capacity : T__;
    const bool train = train_workspace;
    const int L = config.layers, d = config.d, r = config.ffn, H = config.heads;
    const std::size_t n = std::size_t(N), patterns = std::size_t(B) * H * T_ * cap, rows = std::size_t(B) * cap;
    auto buf = [&](std::size_t count) { return Buffer<S>(backend, count); };
    acts.clear();
    acts.resize(train ? std::size_t(L) : 1);
    auto needs_mix = [&](std::size_t i, bool keys) {
      auto mixes = [&](std::size_t l) {
        const LayerPlan& q = plan[l];
        return keys ? !is_own(q.keys, int(l), q.own_key_heads) : !is_own(q.values, int(l), q.own_value_heads);
      };
      if (train) return mixes(i);
      for (std::size_t l = 0; l < plan.size(); ++l)
        if (mixes(l)) return true;
      return false;
    };
    const std::size_t q_count = n * config.heads * dk(), k_count = rows * attn_kv() * dk(),
                      v_count = rows * attn_kv() * config.head_dim;
    for (std::size_t i = 0; i < acts.size(); ++i) {
      LayerActs<S>& s = acts[i];
      s.n1 = buf(n * d), s.mean1 = buf(n), s.rstd1 = buf(n), s.q = buf(q_count);
      s.pattern = train ? buf(patterns) : Buffer<S>(), s.z = buf(n * qwidth()), s.m = buf(n * d);  // eval: at first use
      s.n2 = buf(n * d), s.mean2 = buf(n), s.rstd2 = buf(n), s.h1 = buf(n * r), s.act = buf(n * r);
      if (!gpt2()) s.h2 = buf(n * r);
      if (config.mla || needs_mix(i, true)) s.kmix = buf(k_count);
      if (config.mla || needs_mix(i, false)) s.vmix = buf(v_count);
      if (config.mla && needs_mix(i, false)) s.c = buf(rows * config.d_c);
    }
    const bool all_x = train || dense();
    x.clear();
    for (int i = 0; i < (all_x ? L + 1 : 2); ++i) x.push_back(buf(n * d));
    y.clear();
    if (dense())
      for (int i = 0; i <= L; ++i) y.push_back(buf(n * d));
    kown.clear(), vown.clear(), dkown.clear(), dvown.clear();
    for (int l = 0; l < L; ++l) {
      const LayerPlan& p = plan[std::size_t(l)];
      const std::size_t kc = rows * p.own_key_heads * head_width(true), vc = rows * p.own_value_heads * head_width(false);
      kown.push_back(train || reused(l, true) || (caching && !config.mla) ? buf(kc) : Buffer<S>());
      vown.push_back(train || reused(l, false) || caching ? buf(vc) : Buffer<S>());
      if (train) dkown.push_back(buf(kc)), dvown.push_back(buf(vc));
    }
    shared_kv_[0] = train ? Buffer<S>() : buf(n * config.kv_heads * head_width(true));
    shared_kv_[1] = train ? Buffer<S>() : buf(n * config.kv_heads * head_width(false));
    if (config.mla) {  // MLA's projections of one layer at a time, before they are interleaved per head
      mla_tmp[0] = buf(rows * qwidth()), mla_tmp[1] = buf(n * config.heads * config.d_r), mla_tmp[2] = buf(n * config.d_r);
      if (train) dc = buf(n * config.d_c);
    }
    krown.clear();
    for (int l = 0; l < L && caching && config.mla; ++l) krown.push_back(buf(rows * config.d_r));
    const int fresh_width = std::max({config.kv_heads * config.head_dim, config.d_c, config.d_r});
    fresh = caching && B > 1 ? buf(n * fresh_width) : Buffer<S>();
    a = buf(n * d), mlp = buf(n * d), nf = buf(n * d), meanf = buf(n), rstdf = buf(n);
    logits = buf(std::size_t(std::min(N, kHeadRows)) * config.vocab), losses = buf(n);
    ids = Buffer<std::int32_t>(backend, n), targets = Buffer<std::int32_t>(backend, n);
    dy.clear();
    if (train) {
      dnf = buf(n * d), dx = buf(n * d), dn = buf(n * d), dact = buf(n * r), dh1 = buf(n * r);
      if (!gpt2()) dh2 = buf(n * r);
      dz = buf(n * qwidth()), dq = buf(q_count), dkmix = buf(k_count), dvmix = buf(v_count);
      dpattern = buf(patterns);
      if (dense())
        for (int i = 0; i <= L; ++i) dy.push_back(buf(n * d));
    }
    allocated = true;
  }

  S* own_keys(int l) { return kown[std::size_t(l)].empty() ? shared_kv_[0].data() : kown[std::size_t(l)].data(); }
  S* own_values(int l) {
    return vown[std::size_t(l)].empty() ? shared_kv_[1].data() : vown[std::size_t(l)].data();
  }
  S* rotary_key(int l) { return caching ? krown[std::size_t(l)].data() : mla_tmp[2].data(); }  // MLA's k_R
  LayerActs<S>& act_of(int l) { return acts[train_workspace ? std::size_t(l) : 0]; }

  // ---- positions: the rows computed and the rows that span positions (the cache) --------------------

  // Whether the computed positions' rows are contiguous in a buffer that spans positions.
  bool contiguous() const { return B == 1 || cap == T_; }
  // fn(at, row, rows): rows row … row + rows − 1 of a per-position buffer are rows at … of one spanning positions.
  template <class F>
  void each_block(F&& fn) const {
    if (contiguous()) return fn(std::size_t(past), std::size_t(0), N);
    for (int b = 0; b < B; ++b) fn(std::size_t(b) * cap + past, std::size_t(b) * T_, T_);
  }
  // fn(row0, rows) over the positions 0 … past + T_ − 1 of every sequence, in a buffer that spans positions.
  template <class F>
  void each_sequence(F&& fn) const {
    if (B == 1 || cap == past + T_) return fn(std::size_t(0), B == 1 ? past + T_ : B * cap);
    for (int b = 0; b < B; ++b) fn(std::size_t(b) * cap, past + T_);
  }
  // Where the computed positions' own heads (w columns) of a buffer spanning positions are written:
  // in place where contiguous, else into `fresh`, which store() copies in.
  S* new_rows(S* spanning, int w) { return contiguous() ? spanning + std::size_t(past) * w : fresh.data(); }
  void store(S* spanning, int w) {
    if (contiguous()) return;
    each_block([&](std::size_t at, std::size_t row, int rows) {
      backend.axpby(rows, w, S(1), fresh.data() + row * w, w, S(0), spanning + at * w, w);
    });
  }

  S* x_in(int l) {  // X_l
    if (train_workspace || dense()) return x[std::size_t(l)].data();
    return x[std::size_t(l % 2)].data();
  }

  // out = N(x) with w's gain and bias; the identity in a model without norms.
  void normalize(const S* x, const Norm<S>& w, S* out, S* mean, S* rstd) {
    if (!config.norm) return backend.axpby(N, config.d, S(1), x, config.d, S(0), out, config.d);
    backend.norm_forward(N, config.d, centering(), S(config.norm_eps), x, w.g, w.b, out, mean, rstd);
  }
  // dx += (∂N(x)/∂x)ᵀ dn, and w's gradients.
  void normalize_backward(const S* x, const Norm<S>& w, const S* mean, const S* rstd, const S* dn, S* dx) {
    if (!config.norm) return backend.axpby(N, config.d, S(1), dn, config.d, S(1), dx, config.d);
    backend.norm_backward(N, config.d, centering(), x, w.g, mean, rstd, dn, dx, w.dg, w.db);
  }

  // ---- recording ----------------------------------------------------------------------------

  const S* host(const S* p, std::size_t count) {
    if (backend.device() == engine::Device::cpu) return p;
    staging.resize(count);
    backend.download(staging.data(), p, count * sizeof(S));
    return staging.data();
  }

  void emit(Recorder<S>* rec, Site site, int l, const S* p, int heads, int width) {
    if (!rec || !rec->wants(site, l)) return;
    const std::size_t count =
        site == Site::pattern ? std::size_t(B) * heads * T_ * T_ : std::size_t(N) * heads * width;
    rec->record(Activation<S>{site, l, host(p, count), B, T_, heads, site == Site::pattern ? T_ : width});
  }

  // ---- mixing (lm/plan.hpp) -----------------------------------------------------------------

  // The key (value) heads layer l attends with: its own buffer when the plan
  // says "own heads as they are", else Σ w · source heads written into `out`
  // (MLA: the latent's slots).
  // Over every position so far (with a cache, the cached ones too: the cache keeps own heads only).
  const S* mixed(const Mix& mix, int l, bool keys, S* out) {
    if (is_own(mix, l, own_heads(l, keys))) return keys ? own_keys(l) : own_values(l);
    if (const S* owner = whole_layer(mix, keys)) return owner;
    const int w = head_width(keys), G = config.kv_heads;
    each_sequence([&](std::size_t r0, int rows) {
      for (int g = 0; g < G; ++g) {
        S* dst = out + (r0 * G + std::size_t(g)) * w;
        if (mix[std::size_t(g)].empty()) backend.axpby(rows, w, S(0), dst, G * w, S(0), dst, G * w);
        bool first = true;
        for (const Source& src : mix[std::size_t(g)]) {
          const int ld = own_heads(src.layer, keys) * w;
          const S* from = (keys ? own_keys(src.layer) : own_values(src.layer)) + r0 * ld + std::size_t(src.head) * w;
          backend.axpby(rows, w, S(dropped(src, l) ? 0 : src.weight), from, ld, first ? S(0) : S(1), dst, G * w);
          first = false;
        }
      }
    });
    return out;
  }

  // With a cache: the buffer of the one layer whose own heads `mix` takes unchanged (SVFormer's,
  // YOCO-V's and CLA-V's values, SkipV1-YOCO's keys), read in place by a step instead of copied;
  // null otherwise (and in a plain forward, whose backward expects the copy).
  const S* whole_layer(const Mix& mix, bool keys) {
    if (!caching || drop_shared || mix.empty() || mix[0].empty()) return nullptr;
    const int owner = mix[0][0].layer;
    if (!is_own(mix, owner, own_heads(owner, keys))) return nullptr;
    return keys ? own_keys(owner) : own_values(owner);
  }

  bool dropped(const Source& src, int l) const { return caching && drop_shared && src.layer != l; }

  // dOwn[source] += w · dmix[g] for every source of every head g.
  void unmix(const Mix& mix, bool keys, const S* dmix) {
    const int w = head_width(keys), G = config.kv_heads;
    for (int g = 0; g < G; ++g)
      for (const Source& src : mix[std::size_t(g)]) {
        S* to = (keys ? dkown : dvown)[std::size_t(src.layer)].data() + std::size_t(src.head) * w;
        backend.axpby(N, w, S(src.weight), dmix + std::size_t(g) * w, G * w, S(1), to, own_heads(src.layer, keys) * w);
      }
  }

  // NeuTRENO's direct terms: z_h += Σ w · (own value head of the source) for each query head h reading g.
  void add_direct(int l, S* z, bool backward_pass, const S* dz) {
    const Mix& direct = plan[std::size_t(l)].direct;
    const int w = config.head_dim, H = config.heads, group = config.heads / config.kv_heads;
    for (int h = 0; h < H; ++h)
      for (const Source& s : direct[std::size_t(h / group)]) {
        const int src_heads = plan[std::size_t(s.layer)].own_value_heads;
        if (!backward_pass)
          each_block([&](std::size_t at, std::size_t row, int rows) {
            backend.axpby(rows, w, S(dropped(s, l) ? 0 : s.weight), own_values(s.layer) + at * src_heads * w + std::size_t(s.head) * w,
                          src_heads * w, S(1), z + row * H * w + std::size_t(h) * w, H * w);
          });
        else
          backend.axpby(N, w, S(s.weight), dz + std::size_t(h) * w, H * w, S(1),
                        dvown[std::size_t(s.layer)].data() + std::size_t(s.head) * w, src_heads * w);
      }
  }

  engine::AttentionShape shape() const {
    return {B, T_, config.heads, attn_kv(), dk(), config.head_dim, past, cap};
  }

  // Copies the (rows, heads·w) tensor X into column offset `at` of each head of Y
  // (rows, heads·wy), or, with `gather`, the other way (Y's block into X); rows N unless given.
  void interleave(int heads, int w, S* X, S* Y, int wy, int at, bool gather, bool accumulate = false, int rows = 0) {
    for (int h = 0; h < heads; ++h) {
      S* x = X + std::size_t(h) * w;
      S* y = Y + std::size_t(h) * wy + at;
      if (gather)
        backend.axpby(rows ? rows : N, w, S(1), y, heads * wy, accumulate ? S(1) : S(0), x, heads * w);
      else
        backend.axpby(rows ? rows : N, w, S(1), x, heads * w, S(0), y, heads * wy);
    }
  }

  // ---- forward ---------------------------------------------------------------------------------

  struct KV {
    const S* k;
    const S* v;
  };

  // Standard attention: q = n1 W_Q (Q-identity: n1), own k, v = n1 W_K, n1 W_V, RoPE (llama), the plan's mixing.
  KV project(int l, LayerActs<S>& s) {
    const LayerPlan& p = plan[std::size_t(l)];
    const LayerWeights<S>& w = layers[std::size_t(l)];
    const int d = config.d, dh = config.head_dim, kw = p.own_key_heads * dh, vw = p.own_value_heads * dh;
    if (p.identity_query)
      backend.axpby(N, d, S(1), s.n1.data(), d, S(0), s.q.data(), qwidth());
    else
      engine::linear_forward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W, w.q.b, {s.q.data(), qwidth()});
    if (config.rope()) backend.rope(B, T_, past, config.heads, dh, qwidth(), config.rope_frequencies(), false, s.q.data());
    if (p.own_key_heads) {
      S* k = new_rows(own_keys(l), kw);
      engine::linear_forward<S>(backend, N, d, kw, {s.n1.data(), d}, w.k.W, w.k.b, {k, kw});
      if (config.rope()) backend.rope(B, T_, past, p.own_key_heads, dh, kw, config.rope_frequencies(), false, k);
      store(own_keys(l), kw);
    }
    if (p.own_value_heads) {
      engine::linear_forward<S>(backend, N, d, vw, {s.n1.data(), d}, w.v.W, w.v.b, {new_rows(own_values(l), vw), vw});
      store(own_values(l), vw);
    }
    return {mixed(p.keys, l, true, s.kmix.data()), mixed(p.values, l, false, s.vmix.data())};
  }

  // MLA: latent c = the plan's mix of n1 W_DKV slots; per head, query [n1 W_Q, RoPE(n1 W_QR)],
  // key [c W_UK, RoPE(n1 W_KR)] (the rotary key shared by every head), value c W_UV.
  // With a cache, the latent slots and k_R of the new positions are cached and the keys and values
  // of every position are expanded from them at each step (no absorption of W_UK into W_Q).
  KV project_mla(int l, LayerActs<S>& s) {
    const LayerPlan& p = plan[std::size_t(l)];
    const LayerWeights<S>& w = layers[std::size_t(l)];
    const int d = config.d, dh = config.head_dim, dr = config.d_r, H = config.heads, dc = config.d_c;
    const int cw = p.own_value_heads * slot();
    engine::linear_forward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W, w.q.b, {mla_tmp[0].data(), qwidth()});
    interleave(H, dh, mla_tmp[0].data(), s.q.data(), dk(), 0, false);
    if (p.own_value_heads) {
      engine::linear_forward<S>(backend, N, d, cw, {s.n1.data(), d}, w.dkv.W, nullptr, {new_rows(own_values(l), cw), cw});
      store(own_values(l), cw);
    }
    const S* c = mixed(p.values, l, false, s.c.data());
    if (dr > 0) {
      engine::linear_forward<S>(backend, N, d, H * dr, {s.n1.data(), d}, w.qr.W, nullptr, {mla_tmp[1].data(), H * dr});
      backend.rope(B, T_, past, H, dr, H * dr, config.rope_frequencies(), false, mla_tmp[1].data());
      interleave(H, dr, mla_tmp[1].data(), s.q.data(), dk(), dh, false);
      S* kr = new_rows(rotary_key(l), dr);
      engine::linear_forward<S>(backend, N, d, dr, {s.n1.data(), d}, w.kr.W, nullptr, {kr, dr});
      backend.rope(B, T_, past, 1, dr, dr, config.rope_frequencies(), false, kr);
      store(rotary_key(l), dr);
    }
    each_sequence([&](std::size_t r0, int rows) {
      S* kmix = s.kmix.data() + r0 * H * dk();
      engine::linear_forward<S>(backend, rows, dc, qwidth(), {c + r0 * dc, dc}, w.uk.W, nullptr,
                                {mla_tmp[0].data() + r0 * qwidth(), qwidth()});
      interleave(H, dh, mla_tmp[0].data() + r0 * qwidth(), kmix, dk(), 0, false, false, rows);
      engine::linear_forward<S>(backend, rows, dc, qwidth(), {c + r0 * dc, dc}, w.uv.W, nullptr,
                                {s.vmix.data() + r0 * qwidth(), qwidth()});
      for (int h = 0; h < H && dr > 0; ++h)
        backend.axpby(rows, dr, S(1), rotary_key(l) + r0 * dr, dr, S(0), kmix + std::size_t(h) * dk() + dh, H * dk());
    });
    return {s.kmix.data(), s.vmix.data()};
  }

  // An eval pass over whole sequences forms no pattern unless the recorder wants one: the attention
  // runs `block` queries at a time (attention_reduce), and reduces the patterns into pattern_sums
  // (columns, mass, entropy, each (B, H, T)) when the recorder takes them (Recorder::pattern_block).
  // 0: the pattern is formed (attention_forward).
  int query_block(int l, const Recorder<S>* rec) const {
    if (pass != Pass::eval || !shape().plain()) return 0;
    if (rec && rec->pattern_block(l) > 0) return rec->pattern_block(l);
    return rec && rec->wants(Site::pattern, l) ? 0 : kQueryBlock;
  }
  void attention_reduced(int l, LayerActs<S>& s, const KV& kv, int block, const Recorder<S>* rec) {
    const bool sums = rec && rec->pattern_block(l) > 0, entropy = sums && rec->pattern_entropy(l);
    if (sums && pattern_sums.size() < 3 * sums_count()) pattern_sums = Buffer<double>(backend, 3 * sums_count());
    double* p = pattern_sums.data();
    backend.attention_reduce(shape(), S(config.attention_scale(l)), s.q.data(), kv.k, kv.v, block, s.z.data(),
                             sums ? engine::PatternSums{p, p + sums_count(), entropy ? p + 2 * sums_count() : nullptr}
                                  : engine::PatternSums{});
    if (!sums || backend.device() == engine::Device::cpu) return;
    sums_staging.resize(3 * sums_count());
    pattern_sums.download(sums_staging.data(), sums_staging.size());
  }
  std::size_t sums_count() const { return std::size_t(B) * config.heads * T_; }
  const double* host_sums() const {
    return backend.device() == engine::Device::cpu ? pattern_sums.data() : sums_staging.data();
  }

  void attention_forward(int l, Recorder<S>* rec) {
    const LayerWeights<S>& w = layers[std::size_t(l)];
    LayerActs<S>& s = act_of(l);
    const int d = config.d, dh = config.head_dim;
    const S* x = x_in(l);
    emit(rec, Site::resid_pre, l, x, 1, d);
    normalize(x, w.ln1, s.n1.data(), s.mean1.data(), s.rstd1.data());
    const KV kv = config.mla ? project_mla(l, s) : project(l, s);
    const int block = query_block(l, rec);
    if (block > 0) {
      attention_reduced(l, s, kv, block, rec);
    } else {
      const std::size_t patterns = std::size_t(B) * config.heads * T_ * shape().keys();
      if (s.pattern.size() < patterns) s.pattern = Buffer<S>(backend, patterns);
      backend.attention_forward(shape(), S(config.attention_scale(l)), s.q.data(), kv.k, kv.v, s.pattern.data(),
                                s.z.data());
    }
    add_direct(l, s.z.data(), false, nullptr);
    emit(rec, Site::q, l, s.q.data(), config.heads, dk());
    emit(rec, Site::k, l, kv.k, attn_kv(), dk());
    emit(rec, Site::v, l, kv.v, attn_kv(), dh);
    if (block > 0 && rec && rec->pattern_block(l) > 0)
      rec->record_sums({l, host_sums(), host_sums() + sums_count(),
                        rec->pattern_entropy(l) ? host_sums() + 2 * sums_count() : nullptr, B, T_, config.heads});
    else
      emit(rec, Site::pattern, l, s.pattern.data(), config.heads, T_);
    emit(rec, Site::z, l, s.z.data(), config.heads, dh);
    engine::linear_forward<S>(backend, N, qwidth(), d, {s.z.data(), qwidth()}, w.o.W, w.o.b, {a.data(), d});
    emit(rec, Site::attn_out, l, a.data(), 1, d);
    backend.axpby(N, d, S(1), x, d, S(0), s.m.data(), d);
    backend.axpby(N, d, S(1), a.data(), d, S(1), s.m.data(), d);
  }

  // MLP(n2) into `mlp`; Y = m + MLP(n2) into `out`.
  void mlp_forward(int l, S* out, Recorder<S>* rec) {
    const LayerWeights<S>& w = layers[std::size_t(l)];
    LayerActs<S>& s = act_of(l);
    const int d = config.d, r = config.ffn;
    normalize(s.m.data(), w.ln2, s.n2.data(), s.mean2.data(), s.rstd2.data());
    const std::size_t nr = std::size_t(N) * r;
    if (gpt2()) {
      engine::linear_forward<S>(backend, N, d, r, {s.n2.data(), d}, w.fc.W, w.fc.b, {s.h1.data(), r});
      backend.gelu_forward(nr, config.gelu, s.h1.data(), s.act.data());
      engine::linear_forward<S>(backend, N, r, d, {s.act.data(), r}, w.proj.W, w.proj.b, {mlp.data(), d});
    } else {
      engine::linear_forward<S>(backend, N, d, r, {s.n2.data(), d}, w.gate.W, w.gate.b, {s.h1.data(), r});
      engine::linear_forward<S>(backend, N, d, r, {s.n2.data(), d}, w.up.W, w.up.b, {s.h2.data(), r});
      backend.swiglu_forward(nr, s.h1.data(), s.h2.data(), s.act.data());
      engine::linear_forward<S>(backend, N, r, d, {s.act.data(), r}, w.down.W, w.down.b, {mlp.data(), d});
    }
    emit(rec, Site::mlp_out, l, mlp.data(), 1, d);
    backend.axpby(N, d, S(1), s.m.data(), d, S(0), out, d);
    backend.axpby(N, d, S(1), mlp.data(), d, S(1), out, d);
  }

  // X_{l+1} = Σ_{j ≤ l+1} α_{l,j} Y_j (DenseFormer), α read from the device once per layer.
  void dense_mix(int l) {
    std::vector<S> alpha(std::size_t(l) + 2);
    backend.download(alpha.data(), layers[std::size_t(l)].dwa, alpha.size() * sizeof(S));
    S* out = x[std::size_t(l) + 1].data();
    for (int j = 0; j <= l + 1; ++j)
      backend.axpby(N, config.d, alpha[std::size_t(j)], y[std::size_t(j)].data(), config.d, j ? S(1) : S(0), out,
                    config.d);
  }

  void layer_forward(int l, Recorder<S>* rec) {
    attention_forward(l, rec);
    S* out = dense() ? y[std::size_t(l) + 1].data() : x_in(l + 1);
    mlp_forward(l, out, rec);
    if (dense()) dense_mix(l);
    emit(rec, Site::resid_post, l, x_in(l + 1), 1, config.d);
  }

  LossSum head_forward(double grad_scale) {
    const int d = config.d, V = config.vocab;
    const bool train = pass == Pass::train;
    for (int r0 = 0; r0 < N; r0 += kHeadRows) {
      const int rows = std::min(kHeadRows, N - r0);
      const S* nf_rows = nf.data() + std::size_t(r0) * d;
      backend.gemm(engine::Trans::none, engine::Trans::transpose, rows, V, d, S(1), nf_rows, d, 0, head, d, 0, S(0),
                   logits.data(), V, 0, 1);
      backend.cross_entropy(rows, V, logits.data(), targets.data() + r0, losses.data() + r0, S(grad_scale),
                            train ? logits.data() : nullptr);
      if (!train) continue;
      backend.gemm(engine::Trans::none, engine::Trans::none, rows, d, V, S(1), logits.data(), V, 0, head, d, 0, S(0),
                   dnf.data() + std::size_t(r0) * d, d, 0, 1);
      backend.gemm(engine::Trans::transpose, engine::Trans::none, V, d, rows, S(1), logits.data(), V, 0, nf_rows, d,
                   0, S(1), dhead, d, 0, 1);
    }
    std::vector<S> host_losses(static_cast<std::size_t>(N));
    losses.download(host_losses.data(), host_losses.size());
    LossSum total;
    for (S v : host_losses) total.sum += double(v);
    return total;
  }

  LossSum forward(const std::int32_t* ids_host, const std::int32_t* targets_host, int B_, int T__, Pass pass_,
                  double grad_scale, Recorder<S>* rec) {
    check_tokens(ids_host, targets_host, B_, T__);
    allocate(B_, T__, pass_);
    ids.upload(ids_host, std::size_t(N));
    have_targets = targets_host != nullptr;
    LossSum result;
    if (have_targets) {
      targets.upload(targets_host, std::size_t(N));
      for (int n = 0; n < N; ++n) result.count += targets_host[n] >= 0;
    }
    blocks_forward(rec);
    if (have_targets) result.sum = head_forward(grad_scale).sum;
    return result;
  }

  // From the ids on the device to nf = N_f(X_L) at positions past … past + T_ − 1.
  void blocks_forward(Recorder<S>* rec) {
    S* x0 = dense() ? y[0].data() : x_in(0);
    backend.embedding_forward(B, T_, config.d, ids.data(), wte, wpe ? wpe + std::size_t(past) * config.d : nullptr,
                              x0);
    if (dense()) backend.axpby(N, config.d, S(1), x0, config.d, S(0), x_in(0), config.d);
    for (int l = 0; l < config.layers; ++l) layer_forward(l, rec);
    normalize(x_in(config.layers), lnf, nf.data(), meanf.data(), rstdf.data());
    emit(rec, Site::final, config.layers, nf.data(), 1, config.d);
  }

  // ---- incremental decoding ---------------------------------------------------------------------

  void begin_cache(int B_, int capacity, int block) {
    if (B_ < 1 || block < 1 || capacity < block)
      throw std::invalid_argument("begin_cache: need B >= 1 and 1 <= block <= capacity");
    if (capacity > config.positions)
      throw std::invalid_argument("a cache of " + std::to_string(capacity) + " positions is longer than the model's " +
                                  std::to_string(config.positions) + " positions");
    allocate(B_, block, Pass::eval, capacity);
    for (auto* spanning : {&kown, &vown, &krown})
      for (auto& b : *spanning) backend.fill(b.size(), S(0), b.data());
  }

  void extend(const std::int32_t* ids_host, int T__, S* logits_host) {
    if (!caching) throw std::logic_error("extend: no cache (begin_cache first)");
    check_tokens(ids_host, nullptr, B, T__, past);
    if (past + T__ > cap || B * T__ > int(ids.size()))
      throw std::invalid_argument("extend: " + std::to_string(T__) + " positions after " + std::to_string(past) +
                                  " do not fit the cache (" + std::to_string(cap) + " positions, blocks of " +
                                  std::to_string(int(ids.size()) / B) + ")");
    T_ = T__, N = B * T__;
    ids.upload(ids_host, std::size_t(N));
    blocks_forward(nullptr);
    last_logits(logits_host);
    past += T__;
  }

  // logits (host, B·V) = nf Uᵀ at the last computed position of each sequence.
  void last_logits(S* out) {
    const int d = config.d, V = config.vocab;
    for (int b0 = 0; b0 < B; b0 += kHeadRows) {
      const int rows = std::min(kHeadRows, B - b0);
      backend.gemm(engine::Trans::none, engine::Trans::transpose, rows, V, d, S(1),
                   nf.data() + (std::size_t(b0) * T_ + T_ - 1) * d, T_ * d, 0, head, d, 0, S(0), logits.data(), V, 0,
                   1);
      logits.download(out + std::size_t(b0) * V, std::size_t(rows) * V);
    }
  }

  std::size_t cache_bytes() const {
    std::size_t count = 0;
    for (const auto* spanning : {&kown, &vown, &krown})
      for (const auto& b : *spanning) count += b.size();
    return caching ? count * sizeof(S) : 0;
  }

  // past: positions before these T (a decoder's cache).
  void check_tokens(const std::int32_t* ids_host, const std::int32_t* targets_host, int B_, int T__,
                    int past_ = 0) const {
    if (B_ < 1 || T__ < 1) throw std::invalid_argument("forward: need at least one sequence of one token");
    if (past_ + T__ > config.positions)
      throw std::invalid_argument("sequences of " + std::to_string(past_ + T__) + " tokens are longer than the model's " +
                                  std::to_string(config.positions) + " positions");
    for (std::size_t n = 0; n < std::size_t(B_) * T__; ++n) {
      if (ids_host[n] < 0 || ids_host[n] >= config.vocab)
        throw std::invalid_argument("token id " + std::to_string(ids_host[n]) + " at position " + std::to_string(n) +
                                    " is outside the vocabulary [0, " + std::to_string(config.vocab) + ")");
      if (targets_host && targets_host[n] >= config.vocab)
        throw std::invalid_argument("target id " + std::to_string(targets_host[n]) + " at position " +
                                    std::to_string(n) + " is outside the vocabulary");
    }
  }

  // ---- backward --------------------------------------------------------------------------------

  // dx holds dY (the block output's gradient); on return it holds dX_l.
  void mlp_backward(int l) {
    const LayerWeights<S>& w = layers[std::size_t(l)];
    LayerActs<S>& s = act_of(l);
    const int d = config.d, r = config.ffn;
    const std::size_t nr = std::size_t(N) * r;
    if (gpt2()) {
      engine::linear_backward<S>(backend, N, r, d, {s.act.data(), r}, w.proj.W, {dx.data(), d}, {dact.data(), r},
                                 w.proj.dW, w.proj.db);
      backend.fill(nr, S(0), dh1.data());
      backend.gelu_backward(nr, config.gelu, s.h1.data(), dact.data(), dh1.data());
      engine::linear_backward<S>(backend, N, d, r, {s.n2.data(), d}, w.fc.W, {dh1.data(), r}, {dn.data(), d},
                                 w.fc.dW, w.fc.db);
    } else {
      engine::linear_backward<S>(backend, N, r, d, {s.act.data(), r}, w.down.W, {dx.data(), d}, {dact.data(), r},
                                 w.down.dW, w.down.db);
      backend.fill(nr, S(0), dh1.data());
      backend.fill(nr, S(0), dh2.data());
      backend.swiglu_backward(nr, s.h1.data(), s.h2.data(), dact.data(), dh1.data(), dh2.data());
      engine::linear_backward<S>(backend, N, d, r, {s.n2.data(), d}, w.gate.W, {dh1.data(), r}, {dn.data(), d},
                                 w.gate.dW, w.gate.db);
      engine::linear_backward<S>(backend, N, d, r, {s.n2.data(), d}, w.up.W, {dh2.data(), r}, {dn.data(), d},
                                 w.up.dW, w.up.db, true);
    }
    normalize_backward(s.m.data(), w.ln2, s.mean2.data(), s.rstd2.data(), dn.data(), dx.data());
  }

  // Backward of project(): dq, the used keys' and values' gradients (dk, dv: own buffers when
  // aliased, else dkmix/dvmix) → the own heads' gradients, then dn (overwritten).
  void project_backward(int l, LayerActs<S>& s, bool own_k, bool own_v) {
    const LayerPlan& p = plan[std::size_t(l)];
    const LayerWeights<S>& w = layers[std::size_t(l)];
    const int d = config.d, dh = config.head_dim;
    if (!own_k) unmix(p.keys, true, dkmix.data());
    if (!own_v) unmix(p.values, false, dvmix.data());
    if (config.rope()) {
      backend.rope(B, T_, 0, config.heads, dh, qwidth(), config.rope_frequencies(), true, dq.data());
      if (p.own_key_heads)
        backend.rope(B, T_, 0, p.own_key_heads, dh, p.own_key_heads * dh, config.rope_frequencies(), true,
                     dkown[std::size_t(l)].data());
    }
    if (p.identity_query)
      backend.axpby(N, d, S(1), dq.data(), qwidth(), S(0), dn.data(), d);
    else
      engine::linear_backward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W, {dq.data(), qwidth()},
                                 {dn.data(), d}, w.q.dW, w.q.db);
    if (p.own_key_heads)
      engine::linear_backward<S>(backend, N, d, p.own_key_heads * dh, {s.n1.data(), d}, w.k.W,
                                 {dkown[std::size_t(l)].data(), p.own_key_heads * dh}, {dn.data(), d}, w.k.dW,
                                 w.k.db, true);
    if (p.own_value_heads)
      engine::linear_backward<S>(backend, N, d, p.own_value_heads * dh, {s.n1.data(), d}, w.v.W,
                                 {dvown[std::size_t(l)].data(), p.own_value_heads * dh}, {dn.data(), d}, w.v.dW,
                                 w.v.db, true);
  }

  // Backward of project_mla(): from dq, dkmix, dvmix (the attention's q, k, v gradients) to dn.
  void project_mla_backward(int l, LayerActs<S>& s) {
    const LayerPlan& p = plan[std::size_t(l)];
    const LayerWeights<S>& w = layers[std::size_t(l)];
    const int d = config.d, dh = config.head_dim, dr = config.d_r, H = config.heads, dcw = config.d_c;
    const bool own_c = is_own(p.values, l, p.own_value_heads);
    const S* c = own_c ? own_values(l) : s.c.data();
    interleave(H, dh, mla_tmp[0].data(), dq.data(), dk(), 0, true);  // dq_C
    engine::linear_backward<S>(backend, N, d, qwidth(), {s.n1.data(), d}, w.q.W, {mla_tmp[0].data(), qwidth()},
                               {dn.data(), d}, w.q.dW, w.q.db);
    interleave(H, dh, mla_tmp[0].data(), dkmix.data(), dk(), 0, true);  // dk_C
    S* dlatent = own_c ? dvown[std::size_t(l)].data() : dc.data();
    engine::linear_backward<S>(backend, N, dcw, qwidth(), {c, dcw}, w.uk.W, {mla_tmp[0].data(), qwidth()},
                               {dlatent, dcw}, w.uk.dW, nullptr, own_c);
    engine::linear_backward<S>(backend, N, dcw, qwidth(), {c, dcw}, w.uv.W, {dvmix.data(), qwidth()},
                               {dlatent, dcw}, w.uv.dW, nullptr, true);
    if (!own_c) unmix(p.values, false, dc.data());
    if (dr > 0) {
      interleave(H, dr, mla_tmp[1].data(), dq.data(), dk(), dh, true);  // dq_R
      backend.rope(B, T_, 0, H, dr, H * dr, config.rope_frequencies(), true, mla_tmp[1].data());
      engine::linear_backward<S>(backend, N, d, H * dr, {s.n1.data(), d}, w.qr.W, {mla_tmp[1].data(), H * dr},
                                 {dn.data(), d}, w.qr.dW, nullptr, true);
      for (int h = 0; h < H; ++h)  // dk_R: the shared rotary key collects every head's gradient
        backend.axpby(N, dr, S(1), dkmix.data() + std::size_t(h) * dk() + dh, H * dk(), h ? S(1) : S(0),
                      mla_tmp[2].data(), dr);
      backend.rope(B, T_, 0, 1, dr, dr, config.rope_frequencies(), true, mla_tmp[2].data());
      engine::linear_backward<S>(backend, N, d, dr, {s.n1.data(), d}, w.kr.W, {mla_tmp[2].data(), dr},
                                 {dn.data(), d}, w.kr.dW, nullptr, true);
    }
    if (p.own_value_heads)
      engine::linear_backward<S>(backend, N, d, p.own_value_heads * slot(), {s.n1.data(), d}, w.dkv.W,
                                 {dvown[std::size_t(l)].data(), p.own_value_heads * slot()}, {dn.data(), d},
                                 w.dkv.dW, nullptr, true);
  }

  void attention_backward(int l) {
    const LayerPlan& p = plan[std::size_t(l)];
    const LayerWeights<S>& w = layers[std::size_t(l)];
    LayerActs<S>& s = act_of(l);
    const int d = config.d;
    engine::linear_backward<S>(backend, N, qwidth(), d, {s.z.data(), qwidth()}, w.o.W, {dx.data(), d},
                               {dz.data(), qwidth()}, w.o.dW, w.o.db);
    add_direct(l, nullptr, true, dz.data());
    const bool own_k = !config.mla && is_own(p.keys, l, p.own_key_heads);
    const bool own_v = !config.mla && is_own(p.values, l, p.own_value_heads);
    const S* k = own_k ? own_keys(l) : s.kmix.data();
    const S* v = own_v ? own_values(l) : s.vmix.data();
    S* dk_ = own_k ? dkown[std::size_t(l)].data() : dkmix.data();
    S* dv_ = own_v ? dvown[std::size_t(l)].data() : dvmix.data();
    backend.fill(dq.size(), S(0), dq.data());
    if (!own_k) backend.fill(dkmix.size(), S(0), dkmix.data());
    if (!own_v) backend.fill(dvmix.size(), S(0), dvmix.data());
    backend.attention_backward(shape(), S(config.attention_scale(l)), s.q.data(), k, v, s.pattern.data(), dz.data(),
                               dq.data(), dk_, dv_, dpattern.data());
    if (config.mla)
      project_mla_backward(l, s);
    else
      project_backward(l, s, own_k, own_v);
    normalize_backward(x_in(l), w.ln1, s.mean1.data(), s.rstd1.data(), dn.data(), dx.data());
  }

  // DenseFormer: dx = dX_{l+1} → dY_j += α_{l,j} dX_{l+1}, dα_{l,j} += ⟨Y_j, dX_{l+1}⟩; then dx = dY_{l+1}.
  void dense_backward(int l) {
    const std::size_t count = std::size_t(N) * config.d;
    std::vector<S> alpha(std::size_t(l) + 2), dalpha(alpha.size());
    backend.download(alpha.data(), layers[std::size_t(l)].dwa, alpha.size() * sizeof(S));
    backend.download(dalpha.data(), layers[std::size_t(l)].ddwa, alpha.size() * sizeof(S));
    for (int j = 0; j <= l + 1; ++j) {
      dalpha[std::size_t(j)] += S(backend.dot(count, y[std::size_t(j)].data(), dx.data()));
      backend.axpby(N, config.d, alpha[std::size_t(j)], dx.data(), config.d, S(1), dy[std::size_t(j)].data(),
                    config.d);
    }
    backend.upload(layers[std::size_t(l)].ddwa, dalpha.data(), alpha.size() * sizeof(S));
    backend.axpby(N, config.d, S(1), dy[std::size_t(l) + 1].data(), config.d, S(0), dx.data(), config.d);
  }

  void backward() {
    if (pass != Pass::train || !have_targets)
      throw std::logic_error("backward: the last forward pass was not a training pass with targets");
    const std::size_t count = std::size_t(N) * config.d;
    backend.fill(count, S(0), dx.data());
    for (auto& b : dkown) backend.fill(b.size(), S(0), b.data());
    for (auto& b : dvown) backend.fill(b.size(), S(0), b.data());
    for (auto& b : dy) backend.fill(b.size(), S(0), b.data());
    normalize_backward(x_in(config.layers), lnf, meanf.data(), rstdf.data(), dnf.data(), dx.data());
    for (int l = config.layers - 1; l >= 0; --l) {
      if (dense()) dense_backward(l);
      mlp_backward(l);
      attention_backward(l);
    }
    if (dense()) backend.axpby(N, config.d, S(1), dy[0].data(), config.d, S(1), dx.data(), config.d);
    backend.embedding_backward(B, T_, config.d, ids.data(), dx.data(), dwte, dwpe);
  }
};

template <class S>
Model<S>::Model(const Config& config, engine::Backend<S>& backend) : impl_(std::make_unique<Impl>(config, backend)) {}
template <class S>
Model<S>::~Model() = default;
template <class S>
const Config& Model<S>::config() const {
  return impl_->config;
}
template <class S>
const std::vector<LayerPlan>& Model<S>::plan() const {
  return impl_->plan;
}
template <class S>
engine::Backend<S>& Model<S>::backend() {
  return impl_->backend;
}
template <class S>
engine::ParameterSet<S>& Model<S>::parameters() {
  return impl_->params;
}

template <class S>
void Model<S>::initialize(std::uint64_t seed) {
  set_parameters(initial_values<S>(impl_->config, impl_->params.layout, seed));
}

template <class S>
void Model<S>::set_parameters(const std::vector<S>& values) {
  if (values.size() != impl_->params.layout.total())
    throw std::invalid_argument("set_parameters: " + std::to_string(values.size()) + " values for a layout of " +
                                std::to_string(impl_->params.layout.total()));
  impl_->params.values.upload(values);
}

template <class S>
std::vector<S> Model<S>::parameter_values() const {
  return impl_->params.values.to_host();
}

template <class S>
LossSum Model<S>::forward(const std::int32_t* ids, const std::int32_t* targets, int B, int T_, Pass pass,
                          double grad_scale, Recorder<S>* recorder) {
  return impl_->forward(ids, targets, B, T_, pass, grad_scale, recorder);
}

template <class S>
void Model<S>::backward() {
  impl_->backward();
}

template <class S>
void Model<S>::begin_cache(int B, int capacity, int block) {
  impl_->begin_cache(B, capacity, block);
}

template <class S>
void Model<S>::extend(const std::int32_t* ids, int T, S* logits) {
  impl_->extend(ids, T, logits);
}

template <class S>
std::size_t Model<S>::cache_bytes() const {
  return impl_->cache_bytes();
}

template <class S>
void Model<S>::set_cache_fault(bool drop_shared) {
  impl_->drop_shared = drop_shared;
}

template class Model<float>;
template class Model<double>;

}  // namespace qkvlab::lm
