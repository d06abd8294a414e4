// core/npy.hpp: the .npy reader and writer (bit-exact round trips, every malformed case a
// UsageError). Also built with ASan + UBSan in the sanitizer stage (scripts/sanitize.sh).
#include "core/errors.hpp"
#include "core/npy.hpp"
#include "core/rng.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace qkvlab {
namespace {

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
