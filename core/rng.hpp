// Seeded random draws whose values depend only on (seed, stream name), never on
// the number of threads: every check configuration opens its own stream, keyed
// by a hash of its claim id and configuration. xoshiro256** seeded through
// splitmix64; normals by Box–Muller in double, so the same matrix is drawn for
// every precision and only then rounded to the working scalar.
#pragma once

#include "core/types.hpp"

#include <array>
#include <cstdint>
#include <string_view>

namespace qkvlab {

class Rng {
 public:
  // A named stream is the numbered stream stream_hash(name).
  Rng(std::uint64_t seed, std::string_view stream);
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0);

  std::uint64_t next_u64();
  double uniform();   // in [0, 1)
  double normal();    // N(0, 1)

  // rows × cols matrix with i.i.d. N(0, stddev²) entries (column-major fill).
  MatD gaussian(Eigen::Index rows, Eigen::Index cols, double stddev = 1.0);
  // Rows drawn uniformly on the unit sphere.
  MatD unit_rows(Eigen::Index rows, Eigen::Index cols);
  int uniform_int(int n);  // in [0, n)

 private:
  std::array<std::uint64_t, 4> s_{};
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// FNV-1a hash of a stream name, for keying streams.
std::uint64_t stream_hash(std::string_view name);

// splitmix64: advances the state by the golden-ratio increment and mixes it
// (Vigna's reference; used to fill xoshiro's state).
std::uint64_t splitmix64(std::uint64_t& state);

}  // namespace qkvlab
