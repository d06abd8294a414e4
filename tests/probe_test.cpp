// probes/: the probe's gradient against central differences; an untrained probe started
// from the model is the model's own head at the last layer (and not at the one before);
// training lowers a random probe's loss; the least-squares slope against a hand computation; the
// command's --figure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "core/rng.hpp"
#include "corpus/token_file.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/model.hpp"
#include "probes/layerwise.hpp"
#include "probes/probe.hpp"
#include "probes/probe_data.hpp"
#include "results/figure.hpp"
#include "tests/run_command.hpp"
#include "tests/scratch_dir.hpp"

namespace qkvlab::probes {
namespace {

lm::Config tiny(lm::Family family) {
  lm::Config c = lm::family_defaults(family, 2, 16, 4, 32, 64);
  c.bias = family == lm::Family::gpt2;
  return c;
}

std::vector<std::int32_t> random_stream(std::size_t n, int vocab, const char* name) {
  Rng rng(2, name);
  std::vector<std::int32_t> s(n);
  for (auto& x : s) x = std::int32_t(rng.uniform_int(vocab));
  return s;
}

// d(loss)/dθ for every parameter against (f(θ + h) − f(θ − h)) / 2h, in double.
TEST(Probe, GradientMatchesCentralDifferencesInBothFamilies) {
  for (lm::Family family : {lm::Family::gpt2, lm::Family::llama}) {
    engine::CpuBackend<double> be(1);
    const lm::Config c = tiny(family);
    const int N = 6, V = 7;
    Probe<double> probe(c, V, N, be);
    probe.initialize_random(3);
    Rng rng(4, "probe_test/h");
    std::vector<double> h_host(std::size_t(N) * c.d);
    for (auto& x : h_host) x = rng.normal();
    engine::Buffer<double> h(be, h_host.size());
    h.upload(h_host);
    const std::vector<std::int32_t> targets = {0, 3, -1, 6, 2, 5};
    auto& p = probe.parameters();
    be.fill(p.grads.size(), 0.0, p.grads.data());
    probe.forward(h.data(), targets.data(), N, true, 1.0);
    const std::vector<double> grad = p.grads.to_host();
    std::vector<double> theta = p.values.to_host();
    const auto loss_at = [&](std::size_t i, double delta) {
      std::vector<double> t = theta;
      t[i] += delta;
      p.values.upload(t);
      return probe.forward(h.data(), targets.data(), N, false, 1.0).sum;
    };
    double worst = 0, control = 0;
    for (const auto& spec : p.layout.specs())
      for (std::size_t k = 0; k < spec.size(); k += 3) {
        const std::size_t i = spec.offset + k;
        const double fd = (loss_at(i, 1e-6) - loss_at(i, -1e-6)) / 2e-6;
        worst = std::max(worst, std::abs(fd - grad[i]) / std::max(1.0, std::abs(fd)));
        // Control: the neighbouring entry's gradient is not this one's derivative.
        const std::size_t j = spec.offset + (k + 1) % spec.size();
        control = std::max(control, std::abs(fd - grad[j]) / std::max(1.0, std::abs(fd)));
      }
    EXPECT_LT(worst, 1e-7) << lm::to_string(family);
    EXPECT_GT(control, 1e-3) << lm::to_string(family);
  }
}

// A token stream whose next token is a function of the current one, x_{t+1} = (x_t + 3) mod 32,
// restarted at a random token every 17 tokens.
std::vector<std::int32_t> rule_stream(std::size_t n, const char* name) {
  std::vector<std::int32_t> s = random_stream(n, 32, name);
  for (std::size_t i = 1; i < n; ++i)
    if (i % 17 != 0) s[i] = (s[i - 1] + 3) % 32;
  return s;
}

// A random model whose blocks' weights are scaled by 10, so that each block changes the residual
// stream by much more than initialization's 0.02 would.
struct Fixture {
  engine::CpuBackend<float> be{1};
  lm::Model<float> model;
  ProbeData data;
  explicit Fixture(lm::Family family) : model(tiny(family), be) {
    model.initialize(5);
    std::vector<float> v = model.parameter_values();
    for (const auto& spec : model.parameters().layout.specs())
      if (spec.name.rfind("h.", 0) == 0 && spec.shape.size() == 2)
        for (std::size_t i = 0; i < spec.size(); ++i) v[spec.offset + i] *= 10;
    model.set_parameters(v);
    data.train = rule_stream(4000, "probe_test/train");
    data.validation = rule_stream(400, "probe_test/validation");
  }
};

double layer_loss(const ProbeReport& r, std::size_t l) { return r.layers.at(l).loss.value; }

TEST(Probes, AnUntrainedProbeFromTheModelIsItsHeadAtTheLastLayer) {
  for (lm::Family family : {lm::Family::gpt2, lm::Family::llama}) {
    Fixture f(family);
    ProbeOptions o;
    o.steps = 0, o.lr_grid = {1e-3}, o.batch = 2, o.seq_len = 8, o.eval_windows = 6;
    const ProbeReport r = run_probes(f.model, f.data, o);
    // The model's own loss on the same windows: window k is tokens kT … kT + T − 1, targets one later.
    std::vector<std::int32_t> ids, targets;
    for (int k = 0; k < 6; ++k)
      for (int t = 0; t < 8; ++t) ids.push_back(f.data.validation[std::size_t(8 * k + t)]),
                                  targets.push_back(f.data.validation[std::size_t(8 * k + t + 1)]);
    const double model_loss = f.model.forward(ids.data(), targets.data(), 6, 8, lm::Pass::eval).mean();
    EXPECT_NEAR(layer_loss(r, 2), model_loss, 1e-5 * model_loss) << lm::to_string(family);
    EXPECT_GT(std::abs(layer_loss(r, 1) - model_loss), 1e-3) << "control: the layer before";
    EXPECT_EQ(r.layers.size(), 3u);
    EXPECT_EQ(r.to_value()["layers"].items()[2]["loss"].number(), r.layers[2].loss.value);  // the JSON is the typed report's
  }
}

// The released recipe (dense_skip's optim/train_linear_p_skip.py): the norm has no bias and every
// parameter decays (control: qkvlab's has GPT-2's bias and decays U only); validation windows are drawn
// from Rng(seed, "probe/validation"), so an untrained probe from a Llama model (whose head has no bias to
// drop) is the model's own loss on those windows, not on the consecutive ones (control); trained, it
// learns, repeats itself, differs from the qkvlab recipe and says which recipe ran.
TEST(Probes, TheReleasedRecipeIsDenseSkipsProbe) {
  engine::CpuBackend<float> be(1);
  for (ProbeRecipe recipe : {ProbeRecipe::released, ProbeRecipe::qkvlab}) {
    const bool released = recipe == ProbeRecipe::released;
    Probe<float> probe(tiny(lm::Family::gpt2), 7, 4, be, recipe);
    const auto& layout = probe.parameters().layout;
    EXPECT_EQ(layout.find("norm.bias") == nullptr, released);
    EXPECT_EQ(layout.at("norm.weight").decay, released);
    EXPECT_TRUE(layout.at("head").decay);
  }
  Fixture f(lm::Family::llama);
  ProbeOptions o;
  o.recipe = ProbeRecipe::released, o.steps = 0, o.lr_grid = {1e-3}, o.batch = 2, o.seq_len = 8, o.eval_windows = 6;
  const ProbeReport r = run_probes(f.model, f.data, o);
  const auto model_loss = [&](bool random) {
    Rng rng(o.seed, "probe/validation");
    std::vector<std::int32_t> ids, targets;
    for (int k = 0; k < 6; ++k) {
      const std::size_t at = random ? std::size_t(rng.next_u64() % (f.data.validation.size() - 8)) : std::size_t(8 * k);
      for (int t = 0; t < 8; ++t) ids.push_back(f.data.validation[at + t]), targets.push_back(f.data.validation[at + t + 1]);
    }
    return f.model.forward(ids.data(), targets.data(), 6, 8, lm::Pass::eval).mean();
  };
  EXPECT_NEAR(layer_loss(r, 2), model_loss(true), 1e-5 * model_loss(true));
  EXPECT_GT(std::abs(layer_loss(r, 2) - model_loss(false)), 1e-3) << "control: the consecutive windows";
  EXPECT_EQ(r.to_value()["recipe"].string(), "released");

  o.init_model = false, o.lr_grid = {3e-2}, o.batch = 8, o.seq_len = 16, o.eval_windows = 16, o.steps = 0;
  const ProbeReport before = run_probes(f.model, f.data, o);
  o.steps = 150;
  const ProbeReport after = run_probes(f.model, f.data, o), again = run_probes(f.model, f.data, o);
  o.recipe = ProbeRecipe::qkvlab;
  const ProbeReport qkvlab = run_probes(f.model, f.data, o);
  EXPECT_LT(layer_loss(after, 0), layer_loss(before, 0) - 1.0);
  EXPECT_EQ(layer_loss(after, 0), layer_loss(again, 0));
  EXPECT_NE(layer_loss(after, 0), layer_loss(qkvlab, 0));
  o.recipe = ProbeRecipe::released, o.steps = 10;  // warmup 1: OneCycleLR would divide 0 by 0
  EXPECT_THROW(run_probes(f.model, f.data, o), UsageError);
}

// The embedding output holds the current token, which determines the next one but at a
// restart (1 position in 17, which a window at a random offset cannot locate). The best a probe
// can do is the entropy of the mixture: p = 16/17 + 1/544 on the rule's token, 1/544 on each
// other: about 0.414 nats. Trained on h_0 it comes within 0.2 of that, from chance (about
// ln 32 = 3.47) untrained; and not below it (allowing 0.05 for the 256 validation positions).
// The same options give the same numbers.
TEST(Probes, AProbeLearnsTheNextTokenFromTheEmbeddingOutput) {
  Fixture f(lm::Family::gpt2);
  ProbeOptions o;
  o.init_model = false, o.lr_grid = {3e-2}, o.batch = 8, o.seq_len = 16, o.eval_windows = 16;
  o.steps = 0;
  const ProbeReport before = run_probes(f.model, f.data, o);
  o.steps = 150;
  const ProbeReport after = run_probes(f.model, f.data, o), again = run_probes(f.model, f.data, o);
  EXPECT_GT(layer_loss(before, 0), 3.0);
  const double p = 16.0 / 17 + 1.0 / 544, q = 1.0 / 544;
  const double floor = -p * std::log(p) - 31 * q * std::log(q);
  EXPECT_LT(layer_loss(after, 0), floor + 0.2);
  EXPECT_GT(layer_loss(after, 0), floor - 0.05);
  for (std::size_t l = 0; l < 3; ++l) EXPECT_EQ(layer_loss(after, l), layer_loss(again, l)) << l;
}

TEST(Probes, LeastSquaresSlopeAgainstAHandComputation) {
  const Slope exact = least_squares_slope({0, 1, 2, 3}, {2, 1.5, 1, 0.5});
  EXPECT_NEAR(exact.slope, -0.5, 1e-15);
  EXPECT_NEAR(exact.se, 0.0, 1e-15);
  // x̄ = 1.5, ȳ = 2.75, Sxx = 5, Sxy = 5.5: slope 1.1; residuals −0.1, 0.8, −1.3, 0.6: RSS 2.7,
  // se = sqrt(2.7 / 2 / 5).
  const Slope noisy = least_squares_slope({0, 1, 2, 3}, {1, 3, 2, 5});
  EXPECT_NEAR(noisy.slope, 1.1, 1e-14);
  EXPECT_NEAR(noisy.se, std::sqrt(0.27), 1e-14);
  EXPECT_NEAR(noisy.x_mean, 1.5, 1e-15);  // the line passes through (x̄, ȳ)
  EXPECT_NEAR(noisy.y_mean, 2.75, 1e-15);
  EXPECT_TRUE(std::isnan(least_squares_slope({0, 1}, {1, 2}).se));
}

// One stream of 25 tokens: its last tenth (2 tokens, 25 / 10 rounded down) validates and is cut from
// training; a given validation stream leaves the training stream whole.
TEST(ProbeData, OneStreamValidatesOnItsLastTenthUnlessAStreamIsGiven) {
  std::vector<std::int32_t> stream(25);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = std::int32_t(i);
  const ProbeData cut = stream_probe_data(stream, std::nullopt);
  EXPECT_EQ(cut.train, std::vector<std::int32_t>(stream.begin(), stream.begin() + 23));
  EXPECT_EQ(cut.validation, (std::vector<std::int32_t>{23, 24}));
  const ProbeData given = stream_probe_data(stream, std::vector<std::int32_t>{7, 8, 9});
  EXPECT_EQ(given.train, stream);  // control: nothing is cut when the validation stream is given
  EXPECT_EQ(given.validation, (std::vector<std::int32_t>{7, 8, 9}));
}

// probe --figure STEM means what it means in icl and transfer (cli/plot_common.hpp): the figure and its
// numbers beside it, STEM.csv, without --csv (it was refused: "--figure needs --csv"); with --csv naming
// another file both are written, with --csv STEM.csv that one file. A clash of STEM.csv with --out is
// refused before the probes train (control: exit 2).
TEST(ProbeCli, FigureAloneWritesItsNumbersBesideIt) {
  const test_support::ScratchDir dir;
  const auto ckpt = dir / "ckpt", stream = dir / "stream.npy";
  ASSERT_EQ(test_support::run_bounded("lm init " + test_support::shell_quoted(ckpt) +
                                      " --family gpt2 --layers 2 --d 16 --heads 2 --vocab 50 --positions 16")
                .status,
            0);
  corpus::write_tokens_npy(stream, random_stream(600, 50, "probe_test/cli"), 600, 0);
  const std::string probe = "probe " + test_support::shell_quoted(ckpt) + " --tokens " + test_support::shell_quoted(stream) +
                            " --steps 2 --warmup 1 --lr-grid 1e-3 --seq-len 8 --batch 2 --eval-windows 2 --quiet";
  const std::string stem = (dir / "fig").string(), other = (dir / "other.csv").string();
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const test_support::CommandResult alone = test_support::run_bounded(probe + " --figure '" + stem + "'");
  ASSERT_EQ(alone.status, 0) << alone.err;
  EXPECT_EQ(read(stem + ".csv").rfind("layer,loss", 0), 0u);
  if (results::gnuplot_available()) {
    EXPECT_TRUE(std::filesystem::exists(stem + ".svg"));
  }
  std::filesystem::remove(stem + ".csv");
  const test_support::CommandResult both = test_support::run_bounded(probe + " --csv '" + other + "' --figure '" + stem + "'");
  ASSERT_EQ(both.status, 0) << both.err;
  EXPECT_EQ(read(stem + ".csv"), read(other));
  const test_support::CommandResult clash = test_support::run_bounded(probe + " --out '" + stem + ".csv' --figure '" + stem + "'");
  EXPECT_EQ(clash.status, 2) << clash.err;
  EXPECT_EQ(std::count(clash.err.begin(), clash.err.end(), '\n'), 1) << clash.err;
}

}  // namespace
}  // namespace qkvlab::probes
