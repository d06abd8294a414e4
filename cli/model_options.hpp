// The flags that describe a language model (lm/config.hpp), defined once for
// every command that builds one from flags: `lm init`, `lm train`, `params`
// and `kv`. Sizes not given take the family's defaults (head width d/H, MLP
// width 4d for gpt2 and 8d/3 rounded up to a multiple of 32 for llama);
// --tied and --bias are off unless given, in both families. Over a preset
// (`lm train --preset`), --family brings that family's tying and biases (gpt2
// tied with biases, llama neither) unless --tied or --bias is given.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

#include "lm/config.hpp"

namespace qkvlab::cli {

struct ModelOptions {
  std::string family = "gpt2", variant = "vanilla", strategy = "second-half", gelu = "tanh", norm;
  int layers = 6, d = 128, heads = 4, vocab = 4096;
  std::string positions = "1024";  // --positions: N, learned|rope, or both ("rope,4096")
  std::optional<int> kv_heads, head_dim, ffn;
  std::optional<double> mlp_ratio, lambda, alpha, beta, norm_eps;
  double skip_ratio = 0.5, rope_theta = 10000;
  int source_layer = 1;
  bool tied = false, bias = false, mla = false;
  int d_c = 0, d_r = 0;
  const CLI::App* app = nullptr;  // the command the flags were added to: which of them were given
};

void add_model_options(CLI::App* cmd, ModelOptions& options);

// What --positions says: the longest sequence, how positions enter, or both (each
// optional); a UsageError names what is wrong with it.
struct PositionsFlag {
  std::optional<int> count;
  std::optional<lm::PositionEncoding> encoding;
};
PositionsFlag parse_positions(const std::string& value);

// The configuration the flags describe; a UsageError names the flag or the
// inconsistency (heads not a multiple of --kv-heads, --lambda with --alpha, …).
lm::Config model_config(const ModelOptions& options);

// `base` (a preset's model) with only the flags given on `cmd`'s command line
// applied: --preset tiny --variant resformer is the tiny model as ResFormer.
lm::Config model_config(const lm::Config& base, const ModelOptions& options, const CLI::App& cmd);

}  // namespace qkvlab::cli
