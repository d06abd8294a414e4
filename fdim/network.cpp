#include "fdim/network.hpp"

namespace qkvlab::fdim {

namespace {
bool is_gain(const std::string& name) { return name.size() >= 4 && name.compare(name.size() - 4, 4, "gain") == 0; }
bool is_bias(const Tensor& t) { return t.rows == 1 && !is_gain(t.name) && t.name != "P"; }
}  // namespace

Point draw_point(const Config& c, const Layout& layout) {
  Rng rng(c.seed, "fdim.theta");
  Point p;
  p.theta.resize(layout.size);
  for (const Tensor& t : layout.tensors) {
    const double sd = is_gain(t.name) || is_bias(t) ? 0.3 : 1.0 / std::sqrt(double(t.rows));
    MatD w = rng.gaussian(t.rows, t.cols, sd);
    if (is_gain(t.name)) w.array() += 1.0;
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
