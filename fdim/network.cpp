#include "fdim/network.hpp"

namespace qkvlab::fdim {

namespace {
bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}
bool is_gain(const std::string& name) { return ends_with(name, "gain") || ends_with(name, "alpha"); }
bool is_square_skip(const Tensor& t) { return t.name.find(".skip") != std::string::npos && t.rows == t.cols; }
bool is_bias(const Tensor& t) { return t.rows == 1 && !is_gain(t.name) && t.name != "P"; }
}  // namespace

Point draw_point(const Network& c, const Layout& layout) {
  Rng rng(c.seed, "fdim.theta");
  Point p;
  p.theta.resize(layout.size);
  for (const Tensor& t : layout.tensors) {
    const double sd = is_gain(t.name) || is_bias(t) ? 0.3 : 1.0 / std::sqrt(double(t.rows));
    MatD w = rng.gaussian(t.rows, t.cols, sd);
    if (is_gain(t.name)) w.array() += 1.0;
    if (is_square_skip(t)) w = MatD::Identity(t.rows, t.cols) + 0.3 * w;  // a learned skip near the identity
    p.theta.segment(t.offset, w.size()) = Eigen::Map<const VecD>(w.data(), w.size());
  }
  Rng inputs(c.seed, "fdim.inputs");
  for (int n = 0; n < c.inputs; ++n) {
    Sequence s;
    if (c.embed == Embed::tokens)
      for (int i = 0; i < c.seq; ++i) s.tokens.push_back(inputs.uniform_int(c.vocab));
    else
      s.x = inputs.gaussian(c.seq, c.input_dim(), 1.0);
    p.inputs.push_back(std::move(s));
  }
  return p;
}

}  // namespace qkvlab::fdim
