// The attention that reduces its patterns instead of keeping them (Backend::attention_reduce,
// engine/kernels/attention_reduce.hpp) against the layer-by-layer path that forms them whole
// (attention_forward, then engine/kernels/pattern_reduction.hpp's reduce_pattern_rows over each
// head's T × T pattern): the kernel at several T and block sizes with grouped heads, T not a
// multiple of the block, and the analyses of `qkvlab analyze` on tiny models of both families.
// The budget: with one block (block ≥ T) the products, the softmax and the reductions are the same
// operations in the same order, so the results are equal bit for bit. With smaller blocks the
// scores are products of fewer rows, which OpenBLAS may sum in another order (its kernels depend on
// the row count), so they agree to float rounding: rel = ‖x − whole‖/‖whole‖ ≤ tol(k) = 4 u k
// (tests/gpu_error_model.hpp, u = 2⁻²⁴) with k the chained length (the kernel: d_k + 2T; an
// analysis: the model's forward plus the measure's sums). At any thread count: the same bits.
// Controls: a reduction that skips the diagonal or the last partial block, or puts a block's rows at
// the wrong queries, is caught by the same comparison, by a wide margin. Also: both attentions with
// their keys and values read head by head where each lives (engine::KvHeads) give the tensors' bits;
// control: two heads' views swapped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "analysis/analyze.hpp"
#include "core/rng.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/kernels/pattern_reduction.hpp"
#include "lm/model.hpp"
#include "tests/gpu_error_model.hpp"

namespace qkvlab {
namespace {

using engine::AttentionShape;

struct Sums {
  std::vector<double> columns, mass, entropy;
  explicit Sums(std::size_t n = 0) : columns(n, 0.0), mass(n, 0.0), entropy(n, 0.0) {}
  engine::PatternSums view() { return {columns.data(), mass.data(), entropy.data()}; }
};

using gpu_test::rel;
using gpu_test::tol;

// The largest relative difference of the three reductions.
double rel(const Sums& reference, const Sums& x) {
  return std::max({rel(reference.columns, x.columns), rel(reference.mass, x.mass), rel(reference.entropy, x.entropy)});
}

struct Inputs {
  AttentionShape s;
  std::vector<float> q, k, v;
  Inputs(int B, int T, int H, int Hkv, int dk, int dv) : s{B, T, H, Hkv, dk, dv, 0, 0} {
    Rng rng(3, "attention_reduce_test/inputs");
    auto draw = [&](std::size_t n) {
      std::vector<float> x(n);
      for (float& e : x) e = float(2 * rng.normal());  // far from uniform patterns
      return x;
    };
    q = draw(std::size_t(B) * T * H * dk), k = draw(std::size_t(B) * T * Hkv * dk), v = draw(std::size_t(B) * T * Hkv * dv);
  }
  std::size_t heads() const { return std::size_t(s.B) * s.H * s.T; }
  float scale() const { return 1 / std::sqrt(float(s.dk)); }
};

struct Result {
  std::vector<float> z;
  Sums sums;
};

// The layer-by-layer path: the whole pattern, reduced per head by a `reduce` of its rows.
template <class Reduce>
Result materialized(const Inputs& in, const Reduce& reduce) {
  engine::CpuBackend<float> be(1);
  std::vector<float> pattern(in.heads() * in.s.T), z(std::size_t(in.s.B) * in.s.T * in.s.H * in.s.dv);
  be.attention_forward(in.s, in.scale(), in.q.data(), in.k.data(), in.v.data(), pattern.data(), z.data());
  Result r{z, Sums(in.heads())};
  for (std::size_t bh = 0; bh < in.heads() / in.s.T; ++bh) {
    const std::size_t at = bh * in.s.T;
    reduce(pattern.data() + at * in.s.T, r.sums.columns.data() + at, r.sums.mass.data() + at, r.sums.entropy.data() + at);
  }
  return r;
}
Result materialized(const Inputs& in) {
  const int T = in.s.T;
  return materialized(in, [T](const float* P, double* c, double* m, double* e) {
    engine::kernels::reduce_pattern_rows(P, std::size_t(T), 0, T, c, m, e);
  });
}

Result streamed(const Inputs& in, int block, int threads) {
  engine::CpuBackend<float> be(threads);
  Result r{std::vector<float>(std::size_t(in.s.B) * in.s.T * in.s.H * in.s.dv, 0.0f), Sums(in.heads())};
  be.attention_reduce(in.s, in.scale(), in.q.data(), in.k.data(), in.v.data(), block, r.z.data(), r.sums.view());
  return r;
}

TEST(AttentionReduce, EqualsTheWholePatternsReduction) {
  for (int T : {1, 7, 33, 100})
    for (int block : {1, 5, 16, 64, 200}) {
      SCOPED_TRACE("T = " + std::to_string(T) + ", block = " + std::to_string(block));
      const Inputs in(2, T, 4, 2, 8, 6);
      const Result whole = materialized(in), one = streamed(in, block, 1), three = streamed(in, block, 3);
      if (block >= T) {  // one block: the same operations
        EXPECT_EQ(whole.z, one.z);
        EXPECT_EQ(whole.sums.columns, one.sums.columns);
        EXPECT_EQ(whole.sums.entropy, one.sums.entropy);
      }
      const double k = in.s.dk + 2.0 * T;
      EXPECT_LE(rel(whole.z, one.z), tol(k));
      EXPECT_LE(rel(whole.sums, one.sums), tol(k));
      EXPECT_EQ(one.z, three.z);  // any thread count: the same bits
      EXPECT_EQ(one.sums.columns, three.sums.columns);
      EXPECT_EQ(one.sums.entropy, three.sums.entropy);
      for (double m : one.sums.mass) EXPECT_NEAR(m, 1.0, 1e-6);  // each row of a pattern sums to 1
    }
}

// Reductions a faulty streaming could produce, from the same whole pattern cut into blocks of 16
// rows: the diagonal left out (a mask one key short), the last partial block dropped, a block's
// rows reduced as the block's first queries (offset forgotten). Each is caught by a wide margin.
TEST(AttentionReduce, ControlsFaultyReductionsAreCaught) {
  const int T = 37, block = 16;
  const Inputs in(1, T, 2, 1, 8, 4);
  const Result good = streamed(in, block, 1);
  using Fault = std::function<void(const float*, double*, double*, double*)>;
  const std::vector<std::pair<std::string, Fault>> faults = {
      {"diagonal skipped",
       [&](const float* P, double* c, double* m, double* e) {
         for (int t = 0; t < T; ++t) {
           std::vector<float> row(P + std::size_t(t) * T, P + std::size_t(t + 1) * T);
           row[std::size_t(t)] = 0;
           engine::kernels::reduce_pattern_rows(row.data(), std::size_t(T), t, 1, c, m + t, e + t);
         }
       }},
      {"last partial block dropped",
       [&](const float* P, double* c, double* m, double* e) {
         engine::kernels::reduce_pattern_rows(P, std::size_t(T), 0, T / block * block, c, m, e);
       }},
      {"block offset forgotten",
       [&](const float* P, double* c, double* m, double* e) {
         for (int t0 = 0; t0 < T; t0 += block)
           engine::kernels::reduce_pattern_rows(P + std::size_t(t0) * T, std::size_t(T), 0, std::min(block, T - t0), c,
                                                m + t0, e + t0);
       }},
  };
  for (const auto& [name, fault] : faults)
    EXPECT_GT(rel(good.sums, materialized(in, fault).sums), 1e3 * tol(in.s.dk + 2.0 * T)) << "control: " << name;
}

TEST(AttentionReduce, RefusesACacheAndAnEmptyBlock) {
  Inputs in(1, 4, 2, 2, 4, 4);
  Result r = streamed(in, 2, 1);
  engine::CpuBackend<float> be(1);
  EXPECT_THROW(be.attention_reduce(in.s, 1.0f, in.q.data(), in.k.data(), in.v.data(), 0, r.z.data(), r.sums.view()),
               std::invalid_argument);
  in.s.past = 1;
  EXPECT_THROW(be.attention_reduce(in.s, 1.0f, in.q.data(), in.k.data(), in.v.data(), 2, r.z.data(), r.sums.view()),
               std::invalid_argument);
}

// ---- keys and values head by head (engine::KvHeads) ----

// The tensor's key/value heads stored apart as a decoder's cache keeps SkipV1's (lm/model.cpp's
// attended): head 0 alone (leading dimension w), head 1 as the third of three heads (3w).
struct ApartHeads {
  std::vector<float> alone, wide;
  std::vector<engine::View<const float>> views;
  ApartHeads(const std::vector<float>& tensor, int rows, int w) : alone(std::size_t(rows) * w), wide(alone.size() * 3) {
    for (std::size_t r = 0; r < std::size_t(rows); ++r)
      for (std::size_t c = 0; c < std::size_t(w); ++c)
        alone[r * w + c] = tensor[r * 2 * w + c], wide[r * 3 * w + 2 * w + c] = tensor[r * 2 * w + w + c];
    views = {{alone.data(), w}, {wide.data() + 2 * w, 3 * w}};
  }
  engine::KvHeads<float> heads() const { return engine::KvHeads<float>(views.data()); }
  engine::KvHeads<float> swapped() {
    std::swap(views[0], views[1]);
    return heads();
  }
};

// attention_forward with a cache (past 4 of capacity 9) and attention_reduce (plain), their k and v
// read head by head from two buffers: the same bits as from the tensors (the same products over
// the same rows). Control: the two heads' views swapped (each query head reads the other group's
// keys and values) is caught by a wide margin.
TEST(AttentionKvHeads, ReadWhereTheyLiveEqualsTheTensorBitForBit) {
  Inputs in(2, 9, 4, 2, 6, 5);
  engine::CpuBackend<float> be(2);
  const int rows = in.s.B * in.s.T;
  ApartHeads k(in.k, rows, in.s.dk), v(in.v, rows, in.s.dv);
  AttentionShape cached = in.s;
  cached.T = 2, cached.past = 4, cached.capacity = 9;
  const std::size_t nz = std::size_t(cached.B) * cached.T * cached.H * cached.dv;
  const std::size_t np = std::size_t(cached.B) * cached.H * cached.T * cached.keys();
  auto decode = [&](engine::KvHeads<float> keys, engine::KvHeads<float> values) {
    std::vector<float> pattern(np), z(nz);
    be.attention_forward(cached, in.scale(), in.q.data(), keys, values, pattern.data(), z.data());
    return z;
  };
  const std::vector<float> tensor = decode(in.k.data(), in.v.data());
  EXPECT_EQ(decode(k.heads(), v.heads()), tensor);
  Result reduced = streamed(in, 4, 2), apart{std::vector<float>(reduced.z.size()), Sums(in.heads())};
  be.attention_reduce(in.s, in.scale(), in.q.data(), k.heads(), v.heads(), 4, apart.z.data(), apart.sums.view());
  EXPECT_EQ(apart.z, reduced.z);
  EXPECT_EQ(apart.sums.columns, reduced.sums.columns);
  EXPECT_GT(rel(tensor, decode(k.swapped(), v.swapped())), 0.1) << "control: heads swapped";
}

// ---- the analyses ----

lm::TokenSequences random_tokens(std::int64_t n, int T, int vocab) {
  Rng rng(6, "attention_reduce_test/tokens");
  lm::TokenSequences s{{}, n, T};
  for (std::int64_t i = 0; i < n * T; ++i) s.ids.push_back(std::int32_t(rng.uniform_int(vocab)));
  return s;
}

lm::Config tiny(lm::Family family) {
  lm::Config c = lm::family_defaults(family, 2, 16, 4, 32, 128);
  if (family == lm::Family::llama) c.kv_heads = 2;  // GQA and RoPE
  return c;
}

analysis::Report analyze(lm::Family family, analysis::Kind kind, const lm::TokenSequences& data, int block,
                         int threads, analysis::EntropyDefinition definition = analysis::EntropyDefinition::column) {
  engine::CpuBackend<float> be(threads);
  lm::Model<float> model(tiny(family), be);
  model.set_parameters(gpu_test::random_parameters(model.parameters().layout, 12));  // far from uniform attention
  analysis::Options o;
  o.batch = 2, o.threads = threads, o.query_block = block, o.entropy = definition;
  return analysis::analyze(model, kind, data, o);
}

// Every number of a report's tables but their first column (layer or position).
std::vector<double> numbers(const analysis::Report& r) {
  std::vector<double> x;
  for (const auto& t : r.tables)
    for (std::size_t c = 1; c < t.columns.size(); ++c) x.insert(x.end(), t.columns[c].values.begin(), t.columns[c].values.end());
  return x;
}

// entropy (each definition), first-token and all, reduced inside the attention at several block
// sizes, T a multiple of the block or not, against the whole patterns: the same bits with one block,
// within the error model with several; the same bits at 1 and 3 threads. Control: one token moved
// moves the numbers past the budget.
TEST(AnalyzeStreamed, TheSameNumbersAsTheWholePatterns) {
  using analysis::Kind;
  for (lm::Family family : {lm::Family::gpt2, lm::Family::llama})
    for (int T : {7, 40}) {
      SCOPED_TRACE(std::string(family == lm::Family::gpt2 ? "gpt2" : "llama") + " T " + std::to_string(T));
      const lm::Config c = tiny(family);
      const double k = gpu_test::model_k(c, T) + double(T) * (c.d + c.heads);
      const auto data = random_tokens(3, T, 32);
      auto moved = data;
      moved.ids[1] = (moved.ids[1] + 1) % 32;
      for (auto definition : {analysis::EntropyDefinition::column, analysis::EntropyDefinition::row,
                              analysis::EntropyDefinition::printed}) {
        const auto whole = analyze(family, Kind::entropy, data, 0, 1, definition);
        EXPECT_EQ(whole.to_value().json(), analyze(family, Kind::entropy, data, 64, 1, definition).to_value().json());
        for (int block : {1, 8}) {
          const auto one = analyze(family, Kind::entropy, data, block, 1, definition);
          EXPECT_LE(rel(numbers(whole), numbers(one)), tol(k)) << "block " << block;
          EXPECT_EQ(one.to_value().json(), analyze(family, Kind::entropy, data, block, 3, definition).to_value().json());
        }
        if (definition != analysis::EntropyDefinition::printed) {  // printed is ln T whatever the pattern
          EXPECT_GT(rel(numbers(whole), numbers(analyze(family, Kind::entropy, moved, 8, 1, definition))), tol(k))
              << "control: one token moved";
        }
      }
      for (Kind kind : {Kind::first_token, Kind::all}) {
        const auto whole = analyze(family, kind, data, 0, 1), blocks = analyze(family, kind, data, 5, 3);
        EXPECT_LE(rel(numbers(whole), numbers(blocks)), tol(k)) << analysis::to_string(kind);
        EXPECT_EQ(blocks.to_value().json(), analyze(family, kind, data, 5, 1).to_value().json()) << analysis::to_string(kind);
        EXPECT_GT(rel(numbers(whole), numbers(analyze(family, kind, moved, 5, 3))), tol(k)) << "control: one token moved";
      }
    }
}

// A NaN in the model reaches the streamed reductions and is reported as the pattern's, as the
// whole patterns' path reports it.
TEST(AnalyzeStreamed, ANaNInThePatternIsReportedNotMeasured) {
  engine::CpuBackend<float> be(1);
  lm::Model<float> model(tiny(lm::Family::llama), be);
  model.initialize(12);
  std::vector<float> values = model.parameter_values();
  for (const auto& spec : model.parameters().layout.specs())
    if (spec.name.find("h.1.attn.k.weight") != std::string::npos) values[spec.offset] = NAN;
  model.set_parameters(values);
  const auto data = random_tokens(2, 9, 32);
  for (int block : {0, 4}) {
    analysis::Options o;
    o.query_block = block;
    const analysis::Report r = analysis::analyze(model, analysis::Kind::entropy, data, o);
    EXPECT_EQ(r.nonfinite, "layer 2's pattern holds nan (sequence 0)") << "block " << block;
  }
}

// Peak resident memory of a long context: entropy at T = 16,384 on a 1-layer, d = 64, 2-head model
// stays under a bound computed from the model: the weights, one layer's activations in float (16
// vectors of width d and 4 of the MLP's width per token, generously), three double sums per head and
// token, one block of 64 × T pattern rows per thread, and 32 MiB for the rest of the program's growth.
// The whole patterns it never forms would need H·T² floats (2 GiB) alone; the bound is under a tenth.
long peak_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

TEST(AnalyzeStreamed, LongContextMemoryStaysUnderTheModelsBound) {
  const int T = 16384, threads = 2;
  lm::Config c = lm::family_defaults(lm::Family::llama, 1, 64, 2, 64, T);
  c.ffn = 128;
  engine::CpuBackend<float> be(threads);
  lm::Model<float> model(c, be);
  model.initialize(1);
  const auto data = random_tokens(1, T, c.vocab);
  std::ofstream reset("/proc/self/clear_refs");
  reset << "5" << std::flush;  // resets the peak (VmHWM) to the current resident set
  ASSERT_TRUE(reset.good()) << "cannot reset the peak resident set (/proc/self/clear_refs)";
  const long before = peak_kib();
  analysis::Options o;
  o.batch = 1, o.threads = threads;
  const analysis::Report r = analysis::analyze(model, analysis::Kind::entropy, data, o);
  const long used = peak_kib() - before;
  ASSERT_EQ(r.entropy.size(), 1u);
  const double floats = double(model.parameters().layout.total()) + double(T) * (16.0 * c.d + 4.0 * c.ffn) +
                        double(threads) * o.query_block * T;
  const double bound = floats * 4 + 3.0 * 8 * c.heads * T + 32.0 * (1 << 20);
  const double whole = 4.0 * c.heads * T * T;
  EXPECT_LT(bound, whole / 10);
  EXPECT_LT(used * 1024.0, bound) << "peak grew by " << used << " KiB, bound " << bound / 1024 << " KiB";
  std::cout << "peak resident set grew by " << used << " KiB (bound " << long(bound / 1024) << " KiB)\n";
}

}  // namespace
}  // namespace qkvlab
