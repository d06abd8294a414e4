// core/absorb.hpp and core/npy.hpp: the skip-absorption construction of
// qwe.thm8.4 at double and mp50, the decision procedure of qwe.cor8.4.1 (yes with
// a valid J, no, the hypotheses, undecided beyond the exact-search limit), and the
// .npy reader/writer (bit-exact round trips, every malformed case a UsageError).
#include "core/absorb.hpp"
#include "core/errors.hpp"
#include "core/linalg.hpp"
#include "core/npy.hpp"
#include "core/rng.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace qkvlab {
namespace {

struct Drawn {
  MatD W_1, W_2;
  std::vector<int> J;
};

// W_1 (m×d, N(0, 1/d)), a random J of size k, W_2 (d×m, N(0, 1/m)); W_2's
// J-columns replaced by −(W_1[J,:])⁺ when representable.
Drawn draw_pair(std::uint64_t seed, int d, int m, int k, bool representable) {
  Rng rng(seed, "absorb_test d=" + std::to_string(d) + " m=" + std::to_string(m));
  std::vector<int> perm(std::size_t(m), 0);
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = m - 1; i > 0; --i) std::swap(perm[std::size_t(i)], perm[std::size_t(rng.uniform_int(i + 1))]);
  Drawn p{rng.gaussian(m, d, 1 / std::sqrt(double(d))), rng.gaussian(d, m, 1 / std::sqrt(double(m))),
          std::vector<int>(perm.begin(), perm.begin() + k)};
  std::sort(p.J.begin(), p.J.end());
  if (representable) p.W_2 = representable_w2<double>(p.W_1, p.W_2, p.J);
  return p;
}

double tolerance(const MatD& W_1, const MatD& W_2) { return 1e3 * unit_roundoff<double>() * W_2.norm() * W_1.norm(); }

// --- the construction ------------------------------------------------------------------

template <class S> void expect_construction_exact(std::uint64_t seed, int d, int m, int k) {
  const Drawn p = draw_pair(seed, d, m, k, false);
  const Mat<S> W_1 = cast<S>(p.W_1);
  const Mat<S> W_2 = representable_w2<S>(W_1, cast<S>(p.W_2), p.J);
  Rng rng(seed, "inputs");
  const Mat<S> X = cast<S>(rng.gaussian(d, 10));
  const Mat<S> ref = skip_relu_mlp<S>(W_1, W_2, X);
  const auto a = absorb_skip<S>(W_1, W_2, p.J);
  std::vector<int> perm(std::size_t(m), 0);
  std::iota(perm.rbegin(), perm.rend(), 0);
  std::vector<S> scale;
  for (int i = 0; i < m; ++i) scale.push_back(S(0.5 + 0.1 * i));
  const auto b = permute_and_rescale<S>(a, perm, scale);
  MatD rows(k, d);
  for (int i = 0; i < k; ++i) rows.row(i) = p.W_1.row(p.J[std::size_t(i)]);
  const auto sv = Eigen::JacobiSVD<MatD>(rows).singularValues();
  const double kappa = sv(0) / sv(sv.size() - 1);
  const double bound = 1e3 * unit_roundoff<S>() * kappa;
  EXPECT_LE(rel_err<S>(ref, relu_mlp<S>(a.W_1, a.W_2, X)), bound);
  EXPECT_LE(rel_err<S>(ref, relu_mlp<S>(b.W_1, b.W_2, X)), bound);
  EXPECT_GT(rel_err<S>(ref, relu_mlp<S>(a.W_1, a.W_2, X)), 0.0);  // two genuinely different computations
  // The construction on a generic W_2 changes the map by O(1).
  const Mat<S> W_2g = cast<S>(p.W_2);
  const auto g = absorb_skip<S>(W_1, W_2g, p.J);
  EXPECT_GT(rel_err<S>(skip_relu_mlp<S>(W_1, W_2g, X), relu_mlp<S>(g.W_1, g.W_2, X)), 0.1);
}

TEST(AbsorbConstruction, ExactAtDouble) {
  for (std::uint64_t seed : {1, 2, 3}) {
    expect_construction_exact<double>(seed, 8, 16, 8);
    expect_construction_exact<double>(seed, 8, 16, 12);
  }
}

TEST(AbsorbConstruction, ExactAtMp50) { expect_construction_exact<mp50>(1, 8, 16, 12); }

// --- the decision ----------------------------------------------------------------------

TEST(DecideAbsorption, YesOnRepresentablePairsWithAValidJ) {
  struct Case {
    int d, m, k;
  };
  // (2, 6, *): m > d², dependent rank-one matrices, decided by exhaustive search.
  for (const Case c : {Case{2, 6, 2}, Case{2, 6, 4}, Case{4, 8, 4}, Case{4, 8, 6}, Case{8, 16, 8}, Case{8, 12, 10},
                       Case{16, 32, 24}})
    for (std::uint64_t seed : {1, 2, 3}) {
      const Drawn p = draw_pair(seed, c.d, c.m, c.k, true);
      const auto dec = decide_absorption(p.W_1, p.W_2);
      const std::string where = "d=" + std::to_string(c.d) + " m=" + std::to_string(c.m) + " |J|=" +
                                std::to_string(c.k) + " seed=" + std::to_string(seed);
      ASSERT_EQ(dec.verdict, Verdict::yes) << where << ": " << dec.reason;
      EXPECT_TRUE(dec.hypotheses_hold) << where;
      EXPECT_EQ(dec.independent, c.m <= c.d * c.d) << where;
      EXPECT_GE(int(dec.J.size()), c.d) << where;
      const MatD I = MatD::Identity(c.d, c.d);
      EXPECT_LE((skip_product<double>(p.W_1, p.W_2, dec.J) + I).norm(), tolerance(p.W_1, p.W_2)) << where;
      if (dec.independent) {
        EXPECT_EQ(dec.J, p.J) << where;  // the unique solution
      }
      EXPECT_LE(dec.residual, dec.tolerance) << where;
      ASSERT_TRUE(dec.absorbed.has_value());
      Rng rng(seed, "x");
      const MatD X = rng.gaussian(c.d, 20);
      EXPECT_LE(rel_err<double>(skip_relu_mlp<double>(p.W_1, p.W_2, X),
                                relu_mlp<double>(dec.absorbed->W_1, dec.absorbed->W_2, X)),
                1e-10)
          << where;
    }
}

TEST(DecideAbsorption, NoOnGenericPairs) {
  for (std::uint64_t seed : {1, 2, 3}) {
    for (auto [d, m] : {std::pair{4, 8}, std::pair{8, 16}, std::pair{16, 32}}) {
      const Drawn p = draw_pair(seed, d, m, d, false);
      const auto dec = decide_absorption(p.W_1, p.W_2);
      EXPECT_EQ(dec.verdict, Verdict::no) << dec.reason;
      EXPECT_TRUE(dec.independent);
      EXPECT_GE(dec.relaxation_residual, 1e-3);
      EXPECT_TRUE(dec.J.empty());
      EXPECT_FALSE(dec.absorbed.has_value());
    }
    // Dependent (m > d²) but m within the exact limit: every subset searched.
    const Drawn p = draw_pair(seed, 2, 6, 2, false);
    const auto dec = decide_absorption(p.W_1, p.W_2);
    EXPECT_EQ(dec.verdict, Verdict::no) << dec.reason;
    EXPECT_FALSE(dec.independent);
    EXPECT_EQ(dec.subsets_searched, 63u);
  }
}

TEST(DecideAbsorption, NoForAGenericSkipMatrixR) {
  const Drawn p = draw_pair(4, 8, 16, 12, true);
  Rng rng(4, "R");
  const MatD R = draw_basis(rng, 8, 1 / std::sqrt(8.0));
  const auto dec = decide_absorption(p.W_1, p.W_2, R, AbsorbLimits{});
  EXPECT_EQ(dec.verdict, Verdict::no) << dec.reason;
  EXPECT_GE(dec.relaxation_residual, 1e-3);
  // ... while R = I is absorbable, and so is R = −W_2 P_J W_1 for any J.
  EXPECT_EQ(decide_absorption(p.W_1, p.W_2).verdict, Verdict::yes);
  const std::vector<int> K{0, 3, 5, 7, 9, 11, 13, 15};
  EXPECT_EQ(decide_absorption(p.W_1, p.W_2, MatD(-skip_product<double>(p.W_1, p.W_2, K)), AbsorbLimits{}).J, K);
}

TEST(DecideAbsorption, ReportsCollinearRowsAndZeroColumns) {
  Drawn p = draw_pair(5, 4, 8, 4, false);
  p.W_1.row(6) = -2.5 * p.W_1.row(2);
  auto dec = decide_absorption(p.W_1, p.W_2);
  EXPECT_FALSE(dec.hypotheses_hold);
  EXPECT_NE(dec.hypothesis_failure.find("rows 2 and 6 of W_1 are collinear"), std::string::npos)
      << dec.hypothesis_failure;
  EXPECT_EQ(dec.verdict, Verdict::undecided) << "no without the hypotheses would be a guess";
  EXPECT_NE(dec.reason.find("collinear"), std::string::npos) << dec.reason;

  Drawn q = draw_pair(5, 4, 8, 4, false);
  q.W_2.col(3).setZero();
  dec = decide_absorption(q.W_1, q.W_2);
  EXPECT_EQ(dec.hypothesis_failure, "column 3 of W_2 is zero");
  q.W_1.row(1).setZero();
  EXPECT_EQ(*absorption_hypothesis_failure(q.W_1, q.W_2, AbsorbLimits{}), "row 1 of W_1 is zero");

  // Sufficiency needs no hypothesis: a representable pair with collinear rows outside J is still yes.
  Drawn r = draw_pair(6, 4, 8, 4, true);
  int outside = 0;
  while (std::count(r.J.begin(), r.J.end(), outside)) ++outside;
  r.W_1.row(outside) = 3 * r.W_1.row(r.J[0]);
  dec = decide_absorption(r.W_1, r.W_2);
  EXPECT_FALSE(dec.hypotheses_hold);
  EXPECT_EQ(dec.verdict, Verdict::yes) << dec.reason;
}

TEST(DecideAbsorption, UndecidedBeyondTheExactSearchLimit) {
  // m = 22 > d² = 4: the rank-one matrices are dependent and the relaxation is feasible.
  const Drawn p = draw_pair(7, 2, 22, 2, false);
  auto dec = decide_absorption(p.W_1, p.W_2);
  EXPECT_EQ(dec.verdict, Verdict::undecided) << dec.reason;
  EXPECT_FALSE(dec.independent);
  EXPECT_LE(dec.relaxation_residual, dec.tolerance);
  EXPECT_NE(dec.reason.find("m <= 20"), std::string::npos) << dec.reason;
  EXPECT_EQ(dec.subsets_searched, 0u);
  // A representable pair of the same shape is undecided too: no guess either way.
  EXPECT_EQ(decide_absorption(draw_pair(7, 2, 22, 3, true).W_1, draw_pair(7, 2, 22, 3, true).W_2).verdict,
            Verdict::undecided);
  // A lower limit turns a searchable case into undecided.
  AbsorbLimits low;
  low.max_exact = 5;
  EXPECT_EQ(decide_absorption(draw_pair(1, 2, 6, 2, true).W_1, draw_pair(1, 2, 6, 2, true).W_2, low).verdict,
            Verdict::undecided);
}

TEST(DecideAbsorption, RejectsShapesThatDoNotFit) {
  EXPECT_THROW(decide_absorption(MatD::Ones(4, 2), MatD::Ones(2, 3)), std::invalid_argument);
  EXPECT_THROW(decide_absorption(MatD::Ones(4, 2), MatD::Ones(4, 2)), std::invalid_argument);
}

// --- .npy ------------------------------------------------------------------------------

bool bit_equal(const MatD& a, const MatD& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.size(); ++i)
    if (std::memcmp(&a.data()[i], &b.data()[i], sizeof(double)) != 0) return false;
  return true;
}

MatD sample(bool as_float) {
  Rng rng(11, "npy");
  MatD m = rng.gaussian(3, 5, 1e3);
  m(0, 0) = -0.0;
  m(1, 2) = std::numeric_limits<double>::denorm_min();
  if (as_float) m = m.cast<float>().cast<double>();
  return m;
}

TEST(Npy, RoundTripIsBitExact) {
  const auto dir = std::filesystem::path(::testing::TempDir());
  for (NpyDtype dtype : {NpyDtype::f8, NpyDtype::f4})
    for (bool fortran : {false, true}) {
      const MatD m = sample(dtype == NpyDtype::f4);
      const auto parsed = parse_npy(npy_bytes(m, dtype, fortran), "mem");
      EXPECT_TRUE(bit_equal(parsed.data, m));
      EXPECT_EQ(parsed.dtype, dtype);
      EXPECT_EQ(parsed.fortran_order, fortran);
      const auto path = dir / ("qkvlab_npy_" + std::to_string(int(dtype)) + std::to_string(fortran) + ".npy");
      write_npy(path, m, dtype, fortran);
      EXPECT_TRUE(bit_equal(read_npy(path).data, m));
      std::filesystem::remove(path);
    }
  // The header is padded so that the data start at a multiple of 64 bytes.
  EXPECT_EQ((npy_bytes(sample(false)).size() - 15 * 8) % 64, 0u);
}

TEST(Npy, ReadsVersion2AndFortranOrderWrittenByHand) {
  // numpy.save of [[1, 2, 3], [4, 5, 6]] in Fortran order is 1 4 2 5 3 6.
  const std::string header = "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }\n";
  std::string bytes = std::string("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i) bytes += char(header.size() >> (8 * i) & 0xff);
  bytes += header;
  for (double v : {1.0, 4.0, 2.0, 5.0, 3.0, 6.0}) bytes.append(reinterpret_cast<const char*>(&v), 8);
  const auto parsed = parse_npy(bytes, "v2");
  MatD expected(2, 3);
  expected << 1, 2, 3, 4, 5, 6;
  EXPECT_TRUE(bit_equal(parsed.data, expected));
}

TEST(Npy, EveryMalformedFileIsAUsageErrorNamingTheFile) {
  const MatD m = sample(false);
  const std::string good = npy_bytes(m);
  const std::string header_end = good.substr(0, good.find('\n') + 1);
  auto with_header = [&](const std::string& dict) {
    std::string h = dict;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    std::string b = std::string("\x93NUMPY\x01\x00", 8);
    b += char(h.size() & 0xff);
    b += char(h.size() >> 8);
    return b + h + good.substr(header_end.size());
  };
  std::string nan_data = good, inf_data = good;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = -std::numeric_limits<double>::infinity();
  std::memcpy(nan_data.data() + header_end.size() + 8, &nan, 8);
  std::memcpy(inf_data.data() + good.size() - 8, &inf, 8);
  std::string v3 = good;
  v3[6] = 3;
  const std::pair<const char*, std::string> cases[] = {
      {"empty", ""},
      {"bad magic", "\x93NUMPZ" + good.substr(6)},
      {"version 3", v3},
      {"truncated header", good.substr(0, 40)},
      {"truncated data", good.substr(0, good.size() - 3)},
      {"trailing bytes", good + "x"},
      {"int dtype", with_header("{'descr': '<i8', 'fortran_order': False, 'shape': (3, 5), }")},
      {"big-endian", with_header("{'descr': '>f8', 'fortran_order': False, 'shape': (3, 5), }")},
      {"1-D", with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (15,), }")},
      {"3-D", with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 5, 1), }")},
      {"shape too large", with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (300000, 500000), }")},
      {"bad fortran_order", with_header("{'descr': '<f8', 'fortran_order': 1, 'shape': (3, 5), }")},
      {"missing descr", with_header("{'fortran_order': False, 'shape': (3, 5), }")},
      {"NaN entry", nan_data},
      {"infinite entry", inf_data},
  };
  for (const auto& [what, bytes] : cases) {
    try {
      parse_npy(bytes, "weights.npy");
      ADD_FAILURE() << what << ": accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("weights.npy: ", 0), 0u) << what << ": " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << what;
    }
  }
  EXPECT_THROW(read_npy("/nonexistent/qkvlab.npy"), UsageError);
}

}  // namespace
}  // namespace qkvlab
