#include "fdim/config.hpp"

#include "core/errors.hpp"

#include <algorithm>
#include <cmath>

namespace qkvlab::fdim {

bool Network::identity_query(int layer) const {
  return std::find(identity_layers.begin(), identity_layers.end(), layer + 1) != identity_layers.end();
}

int Network::input_dim() const { return embed == Embed::tokens ? vocab : embed == Embed::linear ? din : d; }

bool Network::gated() const { return mlp == Mlp::reglu || mlp == Mlp::swiglu || mlp == Mlp::geglu || mlp == Mlp::glu; }

int Network::hidden_columns() const { return gated() ? 2 * ffn : ffn; }

int Network::output_dim() const {
  return readout == Readout::linear ? dout : readout == Readout::tied ? input_dim() : d;
}

void validate(const Network& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw UsageError(what);
  };
  need(c.layers >= 0, "--layers must be >= 0");
  for (auto [v, name] : {std::pair{c.d, "--d"}, {c.heads, "--heads"}, {c.head_dim, "--head-dim"}, {c.seq, "--seq"},
                         {c.inputs, "--inputs"}, {c.ffn, "--ffn"}, {c.vocab, "--vocab"}, {c.din, "--din"},
                         {c.dout, "--dout"}})
    need(v >= 1, std::string(name) + " must be >= 1");
  for (int l : c.identity_layers)
    need(l >= 1 && l <= c.layers, "--query-layers: layer " + std::to_string(l) + " is not in 1.." +
                                      std::to_string(c.layers));
  need(c.identity_layers.empty() || (long long)c.heads * c.head_dim == c.d,
       "--query identity needs --heads x --head-dim = --d (W_Q = I is d x d)");
  need(c.readout != Readout::tied || c.embed != Embed::none, "--readout tied needs --embed tokens or linear");
  need(!c.norm_gain || c.norm != Norm::none, "--norm-gain needs --norm layernorm, rmsnorm or dyt");
  need(!c.norm_bias || c.norm == Norm::dyt, "--norm-bias is DyT's offset beta: it needs --norm dyt");
  need(c.norm_eps >= 0 && std::isfinite(c.norm_eps), "--norm-eps must be a finite number >= 0");
  need(c.attention() || c.mlp != Mlp::none, "--mixer none needs an --mlp (a block without attention is an MLP)");
  need(c.attention() || c.skips != Skips::attention, "--skips attention needs --mixer attention (use both or none)");
  need(c.attention() || c.identity_layers.empty(), "--query identity needs --mixer attention");
  const bool learned = c.skip_kind != SkipKind::identity;
  need(!learned || c.skips != Skips::none, "--skip-kind " + std::string(skip_kind_name(c.skip_kind)) +
                                               " needs skips (--skips both or attention)");
  need(!learned || c.norm == Norm::none || c.norm == Norm::rmsnorm,
       "--skip-kind " + std::string(skip_kind_name(c.skip_kind)) + " is modelled with --norm none or rmsnorm");
  need(!learned || !c.bias, "--skip-kind " + std::string(skip_kind_name(c.skip_kind)) + " is modelled without --bias");
  need(!learned || c.identity_layers.empty(), "--skip-kind " + std::string(skip_kind_name(c.skip_kind)) +
                                                  " is modelled with free queries (--query free)");
  need(c.skip_rank >= 1 && c.skip_rank <= c.d, "--skip-rank must be in 1..--d");
}

const char* skips_name(Skips s) { return s == Skips::both ? "both" : s == Skips::attention ? "attention" : "none"; }
const char* norm_name(Norm n) {
  switch (n) {
    case Norm::none: return "none";
    case Norm::layernorm: return "layernorm";
    case Norm::rmsnorm: return "rmsnorm";
    case Norm::dyt: return "dyt";
  }
  return "?";
}
const char* mlp_name(Mlp m) {
  switch (m) {
    case Mlp::none: return "none";
    case Mlp::relu: return "relu";
    case Mlp::gelu: return "gelu";
    case Mlp::tanh: return "tanh";
    case Mlp::relu2: return "relu2";
    case Mlp::reglu: return "reglu";
    case Mlp::swiglu: return "swiglu";
    case Mlp::geglu: return "geglu";
    case Mlp::glu: return "glu";
  }
  return "?";
}
const char* mixer_name(Mixer m) { return m == Mixer::attention ? "attention" : "none"; }
const char* skip_kind_name(SkipKind k) {
  switch (k) {
    case SkipKind::identity: return "identity";
    case SkipKind::learned: return "learned";
    case SkipKind::units: return "units";
    case SkipKind::lowrank: return "lowrank";
  }
  return "?";
}
const char* embed_name(Embed e) { return e == Embed::tokens ? "tokens" : e == Embed::linear ? "linear" : "none"; }
const char* readout_name(Readout r) { return r == Readout::linear ? "linear" : r == Readout::tied ? "tied" : "none"; }

namespace {

struct LayoutBuilder {
  Layout& out;
  int add(const std::string& name, int rows, int cols) {
    out.tensors.push_back({name, rows, cols, out.size});
    out.size += Eigen::Index(rows) * cols;
    return int(out.tensors.size()) - 1;
  }
  int add_if(bool present, const std::string& name, int rows, int cols) {
    return present ? add(name, rows, cols) : -1;
  }
};

NormTensors add_norm(const Network& c, const std::string& p, LayoutBuilder& b) {
  NormTensors n;
  n.alpha = b.add_if(c.norm == Norm::dyt, p + "alpha", 1, 1);
  n.gain = b.add_if(c.norm_gain, p + "gain", 1, c.d);
  n.offset = b.add_if(c.norm_bias, p + "beta", 1, c.d);
  return n;
}

// The skip's matrices where it is learned (the identity skip has none).
SkipTensors add_skip(const Network& c, bool present, const std::string& p, LayoutBuilder& b) {
  SkipTensors s;
  if (!present) return s;
  const int r = c.skip_kind == SkipKind::lowrank ? c.skip_rank : c.d;
  s.A = b.add_if(c.skip_kind == SkipKind::learned, p + "A", c.d, c.d);
  s.U = b.add_if(c.skip_kind == SkipKind::units || c.skip_kind == SkipKind::lowrank, p + "U", c.d, r);
  s.V = b.add_if(c.skip_kind == SkipKind::units || c.skip_kind == SkipKind::lowrank, p + "V", r, c.d);
  s.lowrank = c.skip_kind == SkipKind::lowrank;
  return s;
}

void add_layer(const Network& c, int l, LayoutBuilder& b) {
  LayerTensors t;
  const std::string p = "layer" + std::to_string(l + 1) + ".";
  if (c.attention()) {
    t.norm1 = add_norm(c, p + "norm1.", b);
    for (int h = 0; h < c.heads; ++h) {
      const std::string q = p + "head" + std::to_string(h + 1) + ".";
      if (!c.identity_query(l)) {
        t.W_Q.push_back(b.add(q + "W_Q", c.d, c.head_dim));
        if (c.bias) t.b_Q.push_back(b.add(q + "b_Q", 1, c.head_dim));
      }
      t.W_K.push_back(b.add(q + "W_K", c.d, c.head_dim));
      if (c.bias) t.b_K.push_back(b.add(q + "b_K", 1, c.head_dim));
      t.W_V.push_back(b.add(q + "W_V", c.d, c.head_dim));
      if (c.bias) t.b_V.push_back(b.add(q + "b_V", 1, c.head_dim));
      t.W_O.push_back(b.add(q + "W_O", c.head_dim, c.d));
    }
    t.b_O = b.add_if(c.bias, p + "b_O", 1, c.d);
    t.skip1 = add_skip(c, c.attention_skip() && c.skip_kind != SkipKind::identity, p + "skip1.", b);
  }
  if (c.mlp != Mlp::none) {
    t.norm2 = add_norm(c, p + "norm2.", b);
    t.W_1 = b.add(p + "W_1", c.d, c.hidden_columns());
    t.b_1 = b.add_if(c.bias, p + "b_1", 1, c.hidden_columns());
    t.W_2 = b.add(p + "W_2", c.ffn, c.d);
    t.b_2 = b.add_if(c.bias, p + "b_2", 1, c.d);
    t.skip2 = add_skip(c, c.mlp_skip() && c.skip_kind != SkipKind::identity, p + "skip2.", b);
  }
  b.out.layers.push_back(t);
}

}  // namespace

Layout layout(const Network& c) {
  Layout out;
  LayoutBuilder b{out};
  out.embed = b.add_if(c.embed != Embed::none, "E", c.input_dim(), c.d);
  out.embed_bias = b.add_if(c.embed == Embed::linear && c.bias, "e", 1, c.d);
  out.positions = b.add_if(c.pos_emb, "P", c.seq, c.d);
  for (int l = 0; l < c.layers; ++l) add_layer(c, l, b);
  const bool head = c.readout != Readout::none;
  if (head && c.norm != Norm::none) out.final_norm = add_norm(c, "final_norm.", b);
  out.readout = b.add_if(c.readout == Readout::linear, "D", c.d, c.dout);
  out.readout_bias = b.add_if(c.readout == Readout::linear && c.bias, "b_D", 1, c.dout);
  return out;
}

double parameter_count(const Network& c) {
  const double d = c.d, dh = c.head_dim, b = c.bias ? 1 : 0, hidden = (c.gated() ? 2.0 : 1.0) * c.ffn;
  const double norm = (c.norm == Norm::dyt ? 1 : 0) + (c.norm_gain ? d : 0) + (c.norm_bias ? d : 0);
  const double skip = c.skip_kind == SkipKind::identity ? 0
                      : c.skip_kind == SkipKind::learned ? d * d
                      : 2 * d * (c.skip_kind == SkipKind::lowrank ? c.skip_rank : d);
  double P = (c.embed == Embed::none ? 0 : double(c.input_dim()) * d) + (c.embed == Embed::linear ? b * d : 0) +
             (c.pos_emb ? double(c.seq) * d : 0);
  for (int l = 0; l < c.layers; ++l) {
    const double query = c.identity_query(l) ? 0 : d * dh + b * dh;
    if (c.attention())
      P += norm + double(c.heads) * (query + 2 * (d * dh + b * dh) + dh * d) + b * d + (c.attention_skip() ? skip : 0);
    if (c.mlp != Mlp::none) P += norm + (d + b) * hidden + double(c.ffn) * d + b * d + (c.mlp_skip() ? skip : 0);
  }
  if (c.readout != Readout::none && c.norm != Norm::none) P += norm;
  if (c.readout == Readout::linear) P += (d + b) * c.dout;
  return P;
}

}  // namespace qkvlab::fdim
