// `qkvlab analyze --device cuda` against the CPU: the forward pass runs on the CUDA backend,
// the patterns are reduced inside the attention and the states (similarity, spectrum, the
// first-token norms) by Backend::state_rows and state_gram on the device; only those reductions
// come back to the host, where the same measures finish (analysis/analyze.hpp). Every table of `all` (entropy, similarity, spectrum, first-token),
// the H×H and T×T matrices of `heads` and `tokens` and the cosines of `cross-layer` must agree
// with the CPU backend's to the error model of tests/gpu_error_model.hpp, with k the forward pass's chained length
// (model_k) plus the measures' own sums over the T tokens and their d coordinates (and the H
// heads of a column importance): k = model_k(c, T) + T (d + H). Both families, GQA, the last
// batch not full, two sequence lengths. Control: one token of the first sequence changed on
// the CUDA side moves every analysis past the same tolerance. Without a CUDA device the tests
// skip; scripts/cuda_emulation runs them on the CPU. The patterns reduced inside the attention
// (entropy, first-token, all by default) against the whole patterns' path on the device too.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "analysis/analyze.hpp"
#include "core/rng.hpp"
#include "engine/cpu_backend.hpp"
#include "gpu/backend.hpp"
#include "gpu/device.hpp"
#include "lm/model.hpp"
#include "tests/gpu_error_model.hpp"

namespace {

using namespace qkvlab;
using gpu_test::rel;
using gpu_test::tol;

struct Case {
  std::string name;
  lm::Config config;
  int T;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int T : {9, 40}) {
    lm::Config gpt2 = lm::family_defaults(lm::Family::gpt2, 2, 16, 4, 32, 64);
    lm::Config llama = lm::family_defaults(lm::Family::llama, 2, 16, 4, 32, 64);
    llama.kv_heads = 2;
    out.push_back({"gpt2_T" + std::to_string(T), gpt2, T});
    out.push_back({"llama_gqa_T" + std::to_string(T), llama, T});
  }
  return out;
}

lm::TokenSequences tokens(int vocab, int T, std::uint64_t seed) {
  Rng rng(seed, "analysis_gpu_test/tokens");
  lm::TokenSequences s{{}, 3, T};  // batch 2 below: the last batch holds one sequence
  for (int i = 0; i < 3 * T; ++i) s.ids.push_back(std::int32_t(rng.uniform_int(vocab)));
  return s;
}

// Every number of a report's tables but their first column (layer, rank or row index).
std::vector<double> numbers(const analysis::Report& r, std::size_t table) {
  std::vector<double> x;
  const auto& columns = r.tables.at(table).columns;
  for (std::size_t c = 1; c < columns.size(); ++c) x.insert(x.end(), columns[c].values.begin(), columns[c].values.end());
  return x;
}

class AnalysisGpu : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!gpu::device_status().available) GTEST_SKIP() << gpu::device_status().description;
    cuda = gpu::make_cuda_backend();
  }
  analysis::Report run(engine::Backend<float>& backend, analysis::Kind kind, const lm::TokenSequences& data,
                       int query_block = 64,
                       analysis::EntropyDefinition entropy = analysis::EntropyDefinition::column) const {
    analysis::Options o;
    o.batch = 2, o.threads = 1, o.layer = 1;
    o.head_matrix = analysis::HeadMatrixOf::patterns;
    o.query_block = query_block, o.entropy = entropy;
    return run_with(backend, kind, data, o);
  }
  analysis::Report run_with(engine::Backend<float>& backend, analysis::Kind kind, const lm::TokenSequences& data,
                            const analysis::Options& o) const {
    lm::Model<float> model(GetParam().config, backend);
    model.set_parameters(gpu_test::random_parameters(model.parameters().layout, 11));
    return analysis::analyze(model, kind, data, o);
  }
  // The error model's chained length: the forward pass's, plus the measures' sums over the T tokens and
  // their d coordinates (and the H heads of a column importance).
  double chain() const {
    const lm::Config& c = GetParam().config;
    return gpu_test::model_k(c, GetParam().T) + double(GetParam().T) * (c.d + c.heads);
  }
  lm::TokenSequences moved(lm::TokenSequences data) const {  // the controls' input: one token changed
    data.ids[0] = (data.ids[0] + 1) % GetParam().config.vocab;
    return data;
  }
  engine::CpuBackend<float> cpu{2};
  std::unique_ptr<engine::Backend<float>> cuda;
};

TEST_P(AnalysisGpu, AgreesWithCpu) {
  const double k = chain();
  const auto data = tokens(GetParam().config.vocab, GetParam().T, 5);
  for (analysis::Kind kind :
       {analysis::Kind::all, analysis::Kind::heads, analysis::Kind::tokens, analysis::Kind::cross_layer}) {
    const analysis::Report a = run(cpu, kind, data), b = run(*cuda, kind, data), control = run(*cuda, kind, moved(data));
    ASSERT_EQ(a.tables.size(), b.tables.size());
    for (std::size_t t = 0; t < a.tables.size(); ++t) {
      const std::string what = analysis::to_string(kind) + "/" + a.tables[t].name;
      EXPECT_LE(rel(numbers(a, t), numbers(b, t)), tol(k)) << what << " (k = " << k << ")";
      EXPECT_GT(rel(numbers(a, t), numbers(control, t)), tol(k)) << what << ": control (one token moved)";
    }
  }
}

// The patterns reduced inside the attention on the device (Backend::attention_reduce), 7 queries at
// a time (T = 9: a partial last block; T = 40: several), against the whole patterns on the device
// and against the CPU's reduction, to the same error model; two runs bit-identical. Both entropies
// that read the reductions (column sums; the rows' entropies). The control of AgreesWithCpu holds.
TEST_P(AnalysisGpu, ReducedInsideTheAttentionAsTheWholePatterns) {
  const double k = chain();
  const auto data = tokens(GetParam().config.vocab, GetParam().T, 5);
  for (auto entropy : {analysis::EntropyDefinition::column, analysis::EntropyDefinition::row}) {
    const analysis::Report whole = run(*cuda, analysis::Kind::all, data, 0, entropy),
                           blocks = run(*cuda, analysis::Kind::all, data, 7, entropy),
                           again = run(*cuda, analysis::Kind::all, data, 7, entropy),
                           host = run(cpu, analysis::Kind::all, data, 7, entropy);
    for (std::size_t t = 0; t < whole.tables.size(); ++t) {
      const std::string what = whole.tables[t].name;
      EXPECT_LE(rel(numbers(whole, t), numbers(blocks, t)), tol(k)) << what << " (k = " << k << ")";
      EXPECT_LE(rel(numbers(host, t), numbers(blocks, t)), tol(k)) << what << " against the CPU";
      EXPECT_EQ(numbers(blocks, t), numbers(again, t)) << what << ": a second run";
    }
  }
}

// The states reduced on the device (Backend::state_rows, state_gram) with the options `all` does not take
// by default: the values' similarity with the heads averaged, and the spectrum's 3 largest eigenvalues
// by Lanczos on the Gram matrix. Against the CPU backend to the same error model; two runs
// bit-identical; the control of AgreesWithCpu (one token moved) exceeds the tolerance.
TEST_P(AnalysisGpu, StatesReducedOnTheDeviceAsOnTheCpu) {
  const double k = chain();
  const auto data = tokens(GetParam().config.vocab, GetParam().T, 5);
  analysis::Options o;
  o.batch = 2, o.threads = 1, o.top_k = 3;
  o.of = analysis::Of::values, o.heads = analysis::HeadCombination::mean;
  for (analysis::Kind kind : {analysis::Kind::similarity, analysis::Kind::spectrum}) {
    const analysis::Report a = run_with(cpu, kind, data, o), b = run_with(*cuda, kind, data, o),
                           again = run_with(*cuda, kind, data, o), control = run_with(*cuda, kind, moved(data), o);
    const std::string what = analysis::to_string(kind);
    EXPECT_LE(rel(numbers(a, 0), numbers(b, 0)), tol(k)) << what << " (k = " << k << ")";
    EXPECT_EQ(numbers(b, 0), numbers(again, 0)) << what << ": a second run";
    EXPECT_GT(rel(numbers(a, 0), numbers(control, 0)), tol(k)) << what << ": control (one token moved)";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, AnalysisGpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
