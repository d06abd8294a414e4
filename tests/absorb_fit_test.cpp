// qwe.cor8.4.1, empirical half (synthetic/absorb_fit.hpp, `qkvlab absorb fit`):
// a skipless ReLU MLP of the same width fits a representable skip network to
// optimizer precision, and stays above the floor on a generic one (the negative
// control, same code path). Also: the trainer's hand-written backward against central differences,
// the reported restart is the lowest-loss one,
// the same seed gives the same numbers, and the CLI's usage errors and the
// `qkvlab absorb W1 W2` form of the parent command.
#include "core/absorb.hpp"
#include "core/npy.hpp"
#include "synthetic/absorb_fit.hpp"
#include "synthetic/absorb_fit_check.hpp"
#include "engine/cpu_backend.hpp"
#include "tests/backend_gradient.hpp"
#include "tests/run_command.hpp"
#include "tests/scratch_dir.hpp"

#include <gtest/gtest.h>


#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using namespace qkvlab;
using namespace qkvlab::synthetic;

// The CLI's defaults at half the steps (16 restarts × 5000 steps instead of × 10000),
// d = 3, m = 6. With 8 restarts of 5000 steps, 2/8, 1/8 and 6/8 restarts on a
// representable pair reached rounding level on seeds 1–3: one success on seed 2 is
// too thin a margin, so the test keeps all 16 restarts.
FitConfig test_config() {
  FitConfig c;
  c.restarts = 16;
  c.steps = 5000;
  c.heldout_samples = 16384;
  return c;
}

constexpr double kMinSine = 0.2;  // the CLI's default

// The pairs `qkvlab absorb fit --d 3 --seed S` draws (same streams).
SkipNetwork pair(bool representable, std::uint64_t seed, std::vector<int>* J = nullptr) {
  Rng rng(seed, representable ? "absorb fit/pair/representable" : "absorb fit/pair/generic");
  const MatD I = MatD::Identity(3, 3);
  return representable ? representable_network(rng, 3, 6, I, kMinSine, J) : generic_network(rng, 3, 6, I, kMinSine);
}

FitResult fit(bool representable, std::uint64_t seed, const FitConfig& c = test_config()) {
  return fit_skipless(pair(representable, seed), c, seed, representable ? "absorb fit/representable" : "absorb fit/generic");
}

TEST(AbsorbFit, PairsAreWhatTheDecisionSays) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    std::vector<int> J;
    const SkipNetwork r = pair(true, seed, &J), g = pair(false, seed);
    EXPECT_GE(min_row_sine(r.W_1), kMinSine);
    EXPECT_GE(min_row_sine(g.W_1), kMinSine);
    const auto yes = decide_absorption(r.W_1, r.W_2, r.R, AbsorbLimits{});
    EXPECT_EQ(yes.verdict, Verdict::yes) << yes.reason;
    EXPECT_EQ(yes.J, J);
    const auto no = decide_absorption(g.W_1, g.W_2, g.R, AbsorbLimits{});
    EXPECT_EQ(no.verdict, Verdict::no) << no.reason;
  }
  // A generic R: W_2 P_J W_1 = −R, so the pair is representable for R, not for I.
  Rng rng(5, "test/R");
  const MatD R = rng.gaussian(3, 3, 1 / std::sqrt(3.0));
  std::vector<int> J;
  const SkipNetwork f = representable_network(rng, 3, 6, R, kMinSine, &J);
  EXPECT_LE((skip_product<double>(f.W_1, f.W_2, J) + R).norm() / R.norm(), 1e-12);
  EXPECT_EQ(decide_absorption(f.W_1, f.W_2, f.R, AbsorbLimits{}).verdict, Verdict::yes);
  EXPECT_EQ(decide_absorption(f.W_1, f.W_2, AbsorbLimits{}).verdict, Verdict::no);
}

// The statement, over three seeds: exact on representable pairs; on generic ones (the
// negative control, same code path) the best restart stays above the floor.
TEST(AbsorbFit, RepresentableReachesPrecisionAndGenericStaysAboveTheFloor) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    const FitResult r = fit(true, seed), g = fit(false, seed);
    EXPECT_LE(r.best_fit().rel_err, optimizer_precision) << "seed " << seed;
    EXPECT_EQ(r.best_fit().matched_units, 6) << "seed " << seed;  // every kink found
    EXPECT_GE(g.best_fit().rel_err, generic_floor) << "seed " << seed;
    EXPECT_LT(g.best_fit().matched_units, 6) << "seed " << seed;
    EXPECT_GE(g.best_fit().rel_err, 1e6 * r.best_fit().rel_err) << "seed " << seed;  // a wide margin
  }
}

TEST(AbsorbFit, TheReportedRestartHasTheLowestLoss) {
  FitConfig c = test_config();
  c.steps = 2000;
  const FitResult g = fit(false, 4, c);
  ASSERT_EQ(g.restarts.size(), 16u);
  for (const auto& r : g.restarts) EXPECT_LE(g.best_fit().loss, r.loss);
  // The restarts differ (their own streams), so the choice is not vacuous.
  EXPECT_NE(g.restarts[0].loss, g.restarts[1].loss);
  // The loss that selects tracks the held-out error (4096 vs 16384 other samples).
  for (const auto& r : g.restarts) EXPECT_NEAR(std::sqrt(r.loss), r.rel_err, 0.2 * r.rel_err);
}

TEST(AbsorbFit, SameSeedSameNumbersOtherSeedOtherNumbers) {
  FitConfig c = test_config();
  c.steps = 300;
  c.restarts = 3;
  const SkipNetwork f = pair(false, 6);
  const FitResult a = fit_skipless(f, c, 6, "test/fit"), b = fit_skipless(f, c, 6, "test/fit");
  const FitResult other = fit_skipless(f, c, 7, "test/fit");
  for (std::size_t i = 0; i < a.restarts.size(); ++i) {
    EXPECT_EQ(a.restarts[i].loss, b.restarts[i].loss);
    EXPECT_EQ(a.restarts[i].rel_err, b.restarts[i].rel_err);
    EXPECT_TRUE(a.restarts[i].g.W_1 == b.restarts[i].g.W_1);
    EXPECT_NE(a.restarts[i].rel_err, other.restarts[i].rel_err);
  }
  // One restart does not depend on how many others run.
  c.restarts = 1;
  EXPECT_EQ(fit_skipless(f, c, 6, "test/fit").restarts[0].rel_err, a.restarts[0].rel_err);
}

// SkiplessTrainer on the CPU backend: its loss is the host formula Σ‖g − f‖²/Σ‖f‖² of its weights, and
// its hand-written backward matches central differences in A and B within 1e-7 (tests/backend_gradient.hpp;
// controls: each tensor's gradient off by 1e-3 relative, and the gradient of another batch, are caught).
TEST(AbsorbFit, TrainerLossAndGradientMatchTheirDefinitions) {
  engine::CpuBackend<double> be(2);
  const SkipNetwork f = pair(false, 1);
  FitConfig c;
  c.batch = 16;
  Rng rng(9, "test/trainer");
  const MatD A = rng.gaussian(3, 6), B = rng.gaussian(6, 3);
  SkiplessTrainer m(be, A, B, c);
  auto batch = [&](std::uint64_t s) {
    Rng r(s, "test/batch");
    const MatD X = r.gaussian(16, 3);
    return SkiplessBatch{X, apply(f, X.transpose()).transpose()};
  };
  const SkiplessBatch b = batch(1);
  const SkiplessMlp<double> g = m.weights();
  const double host = (apply(g, b.X.transpose()) - b.F.transpose()).squaredNorm() / b.F.squaredNorm();
  EXPECT_NEAR(m.loss(b), host, 1e-14 * host);
  EXPECT_GT(std::abs(m.loss(batch(2)) - host), 1e-3 * host);  // control: another batch
  qkvlab::test_support::expect_gradient_matches(m, b, batch(2), "skipless trainer");
}

TEST(AbsorbFit, BadConfigurationThrows) {
  FitConfig c = test_config();
  c.restarts = 0;
  EXPECT_THROW(fit_skipless(pair(false, 1), c, 1, "x"), std::invalid_argument);
  SkipNetwork bad = pair(false, 1);
  bad.W_2 = MatD::Zero(2, 6);
  EXPECT_THROW(fit_skipless(bad, test_config(), 1, "x"), std::invalid_argument);
}

// The verdict on a pair (synthetic/absorb_fit_check.hpp): its decision must match its kind, and the
// best rel_err must sit on the right side of the precision (representable) or the floor (generic).
TEST(AbsorbFitCheck, AVerdictPerPairKind) {
  const auto fit_with = [](double rel_err) {
    FitResult f;
    f.restarts.resize(2);
    f.restarts[0].rel_err = 0.5, f.restarts[1].rel_err = rel_err, f.best = 1;
    return f;
  };
  AbsorbDecision yes, no, undecided;
  yes.verdict = Verdict::yes, no.verdict = Verdict::no, undecided.verdict = Verdict::undecided;
  undecided.reason = "dependent";
  EXPECT_EQ(pair_failure(PairKind::representable, 1, yes, fit_with(1e-9)), "");
  EXPECT_EQ(pair_failure(PairKind::generic, 1, no, fit_with(0.05)), "");
  EXPECT_EQ(pair_failure(PairKind::given, 1, no, fit_with(0.05)), "");
  // Negative controls: each condition broken on its own.
  EXPECT_EQ(pair_failure(PairKind::representable, 7, yes, fit_with(1e-4)),
            "representable seed 7: best rel_err 0.0001 > precision 1e-06 on a representable pair");
  EXPECT_EQ(pair_failure(PairKind::generic, 2, no, fit_with(1e-5)),
            "generic seed 2: best rel_err 1e-05 < floor 0.001 on a non-representable pair");
  EXPECT_EQ(pair_failure(PairKind::generic, 3, yes, fit_with(0.05)), "generic seed 3: decision yes, expected no");
  EXPECT_EQ(pair_failure(PairKind::representable, 4, no, fit_with(1e-9)), "representable seed 4: decision no, expected yes");
  EXPECT_EQ(pair_failure(PairKind::given, 5, undecided, fit_with(1e-9)), "given seed 5: decision undecided: dependent");
}

// --out's tables hold every row's seed exactly (an integer column, uint64 in HDF5): 2^53 + 1 is not
// rounded to 2^53. Control: the same seed as a double is 2^53.
TEST(AbsorbFitCheck, SeedColumnsAreExact) {
  AbsorbFitConfig c;
  c.seed = (std::uint64_t(1) << 53) + 1, c.seeds = 1, c.kinds = {PairKind::generic};
  c.fit.restarts = 2, c.fit.steps = 10, c.fit.select_samples = 256, c.fit.heldout_samples = 256;
  const AbsorbFitResult r = run_absorb_fit(c, {});
  const auto tables = absorb_fit_tables(r);
  ASSERT_EQ(tables.size(), 3u);
  for (const auto& t : tables) {
    const results::Column* seed = t.find("seed");
    ASSERT_TRUE(seed) << t.name;
    EXPECT_TRUE(seed->integer) << t.name;
    ASSERT_FALSE(seed->integers.empty()) << t.name;
    for (std::uint64_t s : seed->integers) EXPECT_EQ(s, c.seed) << t.name;
  }
  EXPECT_NE(std::uint64_t(double(c.seed)), c.seed);
}

// --- the CLI ------------------------------------------------------------------------------

using RunResult = qkvlab::test_support::CommandResult;

class AbsorbFitCli : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directory(dir_ / "out"); }

  RunResult qkvlab(const std::string& args) const { return qkvlab::test_support::run_qkvlab(args); }

  const qkvlab::test_support::ScratchDir scratch_;
  const fs::path dir_ = scratch_.path();
};

std::size_t lines(const std::string& s) { return std::size_t(std::count(s.begin(), s.end(), '\n')); }

TEST_F(AbsorbFitCli, BadInputExitsTwoWithOneLineAndWritesNothing) {
  const std::string out = " --out '" + (dir_ / "out" / "fit.h5").string() + "'";
  const std::pair<std::string, std::string> cases[] = {
      {"absorb fit --pair both-ways" + out, "--pair"},
      {"absorb fit --d 0" + out, "--d"},
      {"absorb fit --lr -1" + out, "--lr"},
      {"absorb fit --restarts 0" + out, "--restarts"},
      {"absorb fit --d 4 --m 3 --pair representable" + out, "--m"},
      {"absorb fit --w1 '" + (dir_ / "W1.npy").string() + "'" + out, "--w1 and --w2"},
      {"absorb fit --w1 '" + (dir_ / "nope.npy").string() + "' --w2 '" + (dir_ / "nope.npy").string() + "'" + out,
       "nope.npy"},
      {"absorb fit --out '" + (dir_ / "missing" / "fit.h5").string() + "'", "--out"},
      {"absorb fit --out '" + (dir_ / "W1.npy" / "fit.h5").string() + "'", "is not a directory"},
      // A given pair is not drawn: the options that draw one are refused with it (cli/README.md).
      {"absorb fit --w1 a.npy --w2 b.npy --d 5" + out, "--d: does not apply to a given pair"},
      {"absorb fit --w1 a.npy --w2 b.npy --m 3" + out, "--m: does not apply to a given pair"},
      {"absorb fit --w1 a.npy --w2 b.npy --pair representable" + out, "--pair: does not apply to a given pair"},
      {"absorb fit --w1 a.npy --w2 b.npy --min-sine 0.5" + out, "--min-sine: does not apply to a given pair"},
      {"absorb fit --w1 a.npy --w2 b.npy --skip identity" + out, "--skip: does not apply to a given pair"},
      {"absorb fit --w1 a.npy --w2 b.npy --skip generic" + out, "--skip: does not apply to a given pair"},
      {"absorb", "W1 is required"},
  };
  std::ofstream(dir_ / "W1.npy") << "a file, not a directory";
  for (const auto& [args, mention] : cases) {
    const RunResult r = qkvlab(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.out << r.err;
    EXPECT_EQ(r.out, "") << args;
    EXPECT_EQ(lines(r.err), 1u) << args << ": " << r.err;
    EXPECT_NE(r.err.find(mention), std::string::npos) << args << ": " << r.err;
    EXPECT_TRUE(fs::is_empty(dir_ / "out")) << args;
  }
}

TEST_F(AbsorbFitCli, FitRunsAndTheDecisionFormStillWorks) {
  const fs::path h5 = dir_ / "out" / "fit.h5";
  const RunResult fit = qkvlab("absorb fit --d 3 --seed 3 --seeds 2 --restarts 4 --steps 5000 --quiet --out '" +
                               h5.string() + "'");
  EXPECT_EQ(fit.status, 0) << fit.out << fit.err;
  EXPECT_NE(fit.out.find("verdict: holds"), std::string::npos) << fit.out;
  EXPECT_NE(fit.out.find("representable      3 yes"), std::string::npos) << fit.out;
  EXPECT_NE(fit.out.find("generic            4 no"), std::string::npos) << fit.out;
  EXPECT_TRUE(fs::exists(h5));

  // A pair that breaks the statement: too few steps to reach precision; exit 1 names the seed.
  const RunResult short_fit = qkvlab("absorb fit --d 3 --seeds 1 --restarts 1 --steps 50 --pair representable");
  EXPECT_EQ(short_fit.status, 1) << short_fit.out << short_fit.err;
  EXPECT_NE(short_fit.out.find("broken: representable seed 1: best rel_err"), std::string::npos) << short_fit.out;

  // The parent's positional form, next to its subcommand, on a pair drawn as the CLI draws it.
  std::vector<int> J;
  const SkipNetwork f = pair(true, 3, &J);
  std::ofstream(dir_ / "W1.npy", std::ios::binary) << npy_bytes(f.W_1);
  std::ofstream(dir_ / "W2.npy", std::ios::binary) << npy_bytes(f.W_2);
  const std::string w1 = "'" + (dir_ / "W1.npy").string() + "'", w2 = "'" + (dir_ / "W2.npy").string() + "'";
  const RunResult decision = qkvlab("absorb " + w1 + " " + w2 + " --out-dir '" + (dir_ / "out").string() + "'");
  EXPECT_EQ(decision.status, 0) << decision.out << decision.err;
  EXPECT_EQ(decision.out.substr(0, 4), "yes\n") << decision.out;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "W1_absorbed.npy"));

  // The same files through --w1/--w2: decision yes, fitted to precision.
  const RunResult given = qkvlab("absorb fit --w1 " + w1 + " --w2 " + w2 +
                                 " --seeds 1 --restarts 8 --steps 5000 --format json");
  EXPECT_EQ(given.status, 0) << given.out << given.err;
  EXPECT_NE(given.out.find("\"pair\": \"given\", \"seed\": 1, \"decision\": \"yes\""), std::string::npos) << given.out;
  // Its text states what was checked of a given pair, not of drawn ones (no min sine, no generic pairs).
  const RunResult text = qkvlab("absorb fit --w1 " + w1 + " --w2 " + w2 + " --seeds 1 --restarts 1 --steps 10");
  EXPECT_NE(text.out.find("the given pair is fitted as its decision says"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("generic ones"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("min sine"), std::string::npos) << text.out;
  EXPECT_NE(fit.out.find("generic ones stay above the floor"), std::string::npos) << fit.out;  // control: drawn pairs
  EXPECT_NE(fit.out.find("min sine"), std::string::npos) << fit.out;

  // Stored in float32, the pair is representable to float's precision: absorb and absorb fit both
  // decide yes (fit decided at double's and printed no beside absorb's yes). Control: the same
  // rounded values stored in float64 are judged at double's precision, no in both.
  for (const auto& [dtype, says] : {std::pair{NpyDtype::f4, "yes"}, std::pair{NpyDtype::f8, "no"}}) {
    const MatD r1 = f.W_1.cast<float>().cast<double>(), r2 = f.W_2.cast<float>().cast<double>();
    std::ofstream(dir_ / "R1.npy", std::ios::binary) << npy_bytes(r1, dtype);
    std::ofstream(dir_ / "R2.npy", std::ios::binary) << npy_bytes(r2, dtype);
    const std::string r = "'" + (dir_ / "R1.npy").string() + "' '" + (dir_ / "R2.npy").string() + "'";
    const RunResult absorb = qkvlab("absorb " + r + " --out-dir '" + (dir_ / "out").string() + "' --format json");
    EXPECT_NE(absorb.out.find(std::string("{\"verdict\": \"") + says + "\""), std::string::npos) << absorb.out;
    const RunResult fit = qkvlab("absorb fit --w1 '" + (dir_ / "R1.npy").string() + "' --w2 '" + (dir_ / "R2.npy").string() +
                                 "' --seeds 1 --restarts 1 --steps 20 --format json");
    EXPECT_NE(fit.out.find(std::string("\"decision\": \"") + says + "\""), std::string::npos) << fit.out;
  }
}

}  // namespace
