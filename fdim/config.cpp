#include "fdim/config.hpp"

#include "core/errors.hpp"

#include <algorithm>

namespace qkvlab::fdim {

bool Config::identity_query(int layer) const {
  return std::find(identity_layers.begin(), identity_layers.end(), layer + 1) != identity_layers.end();
}

int Config::input_dim() const { return embed == Embed::tokens ? vocab : embed == Embed::linear ? din : d; }

int Config::output_dim() const {
  return readout == Readout::linear ? dout : readout == Readout::tied ? input_dim() : d;
}

void validate(const Config& c) {
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
  need(c.identity_layers.empty() || c.heads * c.head_dim == c.d,
       "--query identity needs --heads x --head-dim = --d (W_Q = I is d x d)");
  need(c.readout != Readout::tied || c.embed != Embed::none, "--readout tied needs --embed tokens or linear");
  need(!c.norm_gain || c.norm != Norm::none, "--norm-gain needs --norm layernorm or rmsnorm");
}

const char* skips_name(Skips s) { return s == Skips::both ? "both" : s == Skips::attention ? "attention" : "none"; }
const char* norm_name(Norm n) { return n == Norm::none ? "none" : n == Norm::layernorm ? "layernorm" : "rmsnorm"; }
const char* mlp_name(Mlp m) { return m == Mlp::none ? "none" : m == Mlp::relu ? "relu" : "gelu"; }
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

void add_layer(const Config& c, int l, LayoutBuilder& b) {
  LayerTensors t;
  const std::string p = "layer" + std::to_string(l + 1) + ".";
  const bool gain = c.norm_gain;
  t.norm1_gain = b.add_if(gain, p + "norm1.gain", 1, c.d);
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
  if (c.mlp != Mlp::none) {
    t.norm2_gain = b.add_if(gain, p + "norm2.gain", 1, c.d);
    t.W_1 = b.add(p + "W_1", c.d, c.ffn);
    t.b_1 = b.add_if(c.bias, p + "b_1", 1, c.ffn);
    t.W_2 = b.add(p + "W_2", c.ffn, c.d);
    t.b_2 = b.add_if(c.bias, p + "b_2", 1, c.d);
  }
  b.out.layers.push_back(t);
}

}  // namespace

Layout layout(const Config& c) {
  Layout out;
  LayoutBuilder b{out};
  out.embed = b.add_if(c.embed != Embed::none, "E", c.input_dim(), c.d);
  out.embed_bias = b.add_if(c.embed == Embed::linear && c.bias, "e", 1, c.d);
  out.positions = b.add_if(c.pos_emb, "P", c.seq, c.d);
  for (int l = 0; l < c.layers; ++l) add_layer(c, l, b);
  const bool head = c.readout != Readout::none;
  out.final_gain = b.add_if(head && c.norm_gain, "final_norm.gain", 1, c.d);
  out.readout = b.add_if(c.readout == Readout::linear, "D", c.d, c.dout);
  out.readout_bias = b.add_if(c.readout == Readout::linear && c.bias, "b_D", 1, c.dout);
  return out;
}

}  // namespace qkvlab::fdim
