// The options of lm_bench and lm_gpu_bench (bench/lm_bench_common.hpp), which ctest does not build:
// a bad value is one line on stderr naming the option, and nullopt (the programs exit 2), never an
// exception out of main (std::stoi's ended them in std::terminate). Control: valid values are taken.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bench/lm_bench_common.hpp"

namespace {

struct Parsed {
  std::optional<qkvlab::bench::LmBenchOptions> options;
  std::string err;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "lm_bench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStderr();
  Parsed p;
  try {
    p.options = qkvlab::bench::parse_lm_bench_options(int(argv.size()), argv.data(), "lm_bench", {});
  } catch (...) {
    p.err = "threw ";
  }
  p.err += testing::internal::GetCapturedStderr();
  return p;
}

}  // namespace

TEST(LmBenchOptions, ABadValueIsOneLineNotAnException) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--layers", "abc"}, "lm_bench: --layers must be a positive integer, got 'abc'\n"},
      {{"--seq", "1e12"}, "lm_bench: --seq must be a positive integer, got '1e12'\n"},
      {{"--batch", "0"}, "lm_bench: --batch must be a positive integer, got '0'\n"},
      {{"--d", "99999999999999999999"},
       "lm_bench: --d must be a positive integer, got '99999999999999999999' (too large: at most 2147483647)\n"},
      {{"--threads", "999"}, "lm_bench: --threads must be an integer from 0 to 256, got '999' (too large: at most 256)\n"},
      {{"--warmup", "-1"}, "lm_bench: --warmup must be an integer of at least 0, got '-1'\n"},
      {{"--family", "foo"}, "lm_bench: unknown family \"foo\" (known: gpt2|llama)\n"},
      {{"--heads"}, "lm_bench: --heads needs a value\n"},
      {{"--bogus"}, "lm_bench: unknown option --bogus\n"},
      {{"--dtype", "f16"}, "lm_bench: --dtype takes f32 or bf16\n"},
      {{"--family", "llama", "--d", "96", "--heads", "32"}, "lm_bench: RoPE needs an even head width, got 3\n"}};
  for (const auto& [args, line] : cases) {
    const Parsed p = parse(args);
    EXPECT_FALSE(p.options.has_value()) << args[0];
    EXPECT_EQ(p.err, line) << args[0];
  }
  const Parsed ok = parse({"--family", "llama", "--layers", "2", "--d", "64", "--heads", "4", "--seq", "16", "--threads",
                           "0", "--warmup", "0", "--steps", "1", "--dtype", "bf16", "--eval"});
  ASSERT_TRUE(ok.options.has_value()) << ok.err;
  EXPECT_EQ(ok.err, "");
  EXPECT_EQ(ok.options->L, 2);
  EXPECT_EQ(ok.options->d, 64);
  EXPECT_EQ(ok.options->T, 16);
  EXPECT_EQ(ok.options->warmup, 0);
  EXPECT_TRUE(ok.options->eval);
  EXPECT_EQ(ok.options->family, qkvlab::lm::Family::llama);
  EXPECT_EQ(ok.options->products, qkvlab::engine::WeightType::bf16);
}
