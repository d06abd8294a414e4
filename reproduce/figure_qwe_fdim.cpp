// qwe-fdim (figure_qwe_fdim.hpp): free against identity queries, counted by fdim/.
#include "reproduce/figure_qwe_fdim.hpp"

#include "fdim/count.hpp"

namespace qkvlab::reproduce {

namespace {

using results::Value;

constexpr int head_dim = 2, positions = 3;
constexpr fdim::Skips all_skips[] = {fdim::Skips::none, fdim::Skips::attention, fdim::Skips::both};
constexpr fdim::Norm all_norms[] = {fdim::Norm::none, fdim::Norm::layernorm};

// Linear ends of width d, heads of size 2, a GELU MLP of width 2d, no biases or gains, free queries.
fdim::Network network(int d, int layers, fdim::Skips skips, fdim::Norm norm, std::uint64_t seed) {
  fdim::Network c;
  c.layers = layers, c.d = d, c.heads = d / head_dim, c.head_dim = head_dim, c.seq = positions;
  c.skips = skips, c.norm = norm, c.mlp = fdim::Mlp::gelu, c.ffn = 2 * d;
  c.embed = fdim::Embed::linear, c.din = d, c.readout = fdim::Readout::linear, c.dout = d;
  c.seed = seed;
  c.inputs = fdim::saturating_inputs(c);
  return c;
}

std::string column_name(fdim::Skips s, fdim::Norm n) {
  return std::string("skips_") + fdim::skips_name(s) + "_norm_" + fdim::norm_name(n);
}

Value side(long long parameters, long long rank, long long predicted) {
  Value v = Value::object();
  v.set("parameters", std::int64_t(parameters)), v.set("rank", std::int64_t(rank));
  v.set("deficiency", std::int64_t(parameters - rank)), v.set("predicted_deficiency", std::int64_t(predicted));
  return v;
}

struct Setting {
  Value value;
  long long lost = 0, predicted_lost = 0;
};

// The network with free queries against W_Q = I in every layer.
Setting setting(const fdim::Network& free) {
  fdim::Network identity = free;
  for (int l = 1; l <= free.layers; ++l) identity.identity_layers.push_back(l);
  const fdim::Count n = fdim::count(identity, false);
  const long long free_parameters = fdim::layout(free).size, free_predicted = fdim::predicted_deficiency(free);
  const long long identity_predicted = fdim::predicted_deficiency(n);
  Setting s;
  s.lost = *n.free_rank - n.rank.rank;
  s.predicted_lost = (free_parameters - free_predicted) - (n.parameters - identity_predicted);
  Value& v = s.value = Value::object();
  v.set("d", free.d), v.set("heads", free.heads), v.set("head_dim", free.head_dim), v.set("layers", free.layers);
  v.set("skips", fdim::skips_name(free.skips)), v.set("norm", fdim::norm_name(free.norm)), v.set("inputs", free.inputs);
  v.set("free", side(free_parameters, *n.free_rank, free_predicted));
  v.set("identity", side(n.parameters, n.rank.rank, identity_predicted));
  v.set("lost_vs_free", std::int64_t(s.lost)), v.set("predicted_lost", std::int64_t(s.predicted_lost));
  v.set("gap", n.rank.gap), v.set("saturated", n.saturated);
  return s;
}

}  // namespace

FdimFigure qwe_fdim_counts(std::uint64_t seed, bool quick, const std::function<void(int, int)>& progress) {
  const std::vector<int> widths = quick ? std::vector<int>{4} : std::vector<int>{4, 6};
  const std::vector<int> depths = quick ? std::vector<int>{1} : std::vector<int>{1, 2};
  const int total = int(widths.size() * depths.size() * 6);
  FdimFigure out;
  out.value = Value::object();
  out.value.set("network", "linear embedding and readout of width d, heads of size 2 (H = d/2), pre-norm, GELU MLP "
                           "of width 2d, no biases or gains, 3 positions; W_Q = I in every layer against free queries");
  Value settings = Value::array();
  int done = 0, agree = 0;
  for (int d : widths) {
    results::Table t{"qwe_fdim_d" + std::to_string(d), {{"layers", {}}}};
    results::Figure f{"dimensions lost by W_Q = I in every layer, d = " + std::to_string(d) + ", H = " +
                          std::to_string(d / head_dim) + ", d_h = 2",
                      "layers L", "lost_vs_free (rank, free - identity)", false, false, {},
                      {"set key top left", "set xtics 1", "set offsets 0.1, 0.1, 1, 0"}};
    for (int L : depths) t.columns[0].values.push_back(L);
    for (fdim::Skips skips : all_skips)
      for (fdim::Norm norm : all_norms) {
        results::Column lost{"lost_" + column_name(skips, norm), {}};
        results::Column predicted{"predicted_" + column_name(skips, norm), {}};
        for (int L : depths) {
          const Setting s = setting(network(d, L, skips, norm, seed));
          lost.values.push_back(double(s.lost)), predicted.values.push_back(double(s.predicted_lost));
          agree += s.lost == s.predicted_lost;
          settings.push(s.value);
          if (progress) progress(++done, total);
        }
        f.series.push_back({"layers", lost.name, "", std::string("skips ") + fdim::skips_name(skips) + ", norm " +
                                                        fdim::norm_name(norm), "linespoints", ""});
        t.columns.push_back(std::move(lost)), t.columns.push_back(std::move(predicted));
      }
    out.notes += "- d = " + std::to_string(d) + ":";
    for (std::size_t k = 1; k < t.columns.size(); k += 2) {
      out.notes += " " + t.columns[k].name.substr(5) + ":";
      for (double x : t.columns[k].values) out.notes += " " + std::to_string(std::int64_t(x));
      out.notes += k + 2 < t.columns.size() ? ";" : "\n";
    }
    out.panels.push_back({std::move(t), std::move(f), "qwe_fdim_d" + std::to_string(d)});
  }
  out.notes += "- the measured loss equals the gauge count's prediction in " + std::to_string(agree) + " of " +
               std::to_string(total) + " settings\n";
  out.value.set("settings", settings);
  return out;
}

}  // namespace qkvlab::reproduce
