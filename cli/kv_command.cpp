// `qkvlab kv [DIR]`: the KV cache a decoder keeps per token (and for --seq-len
// tokens), per layer, with the heads reused from other layers (lm/accounting.hpp).
#include <iostream>
#include <memory>
#include <optional>

#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/model_source.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "lm/accounting.hpp"

namespace qkvlab::cli {

namespace {

struct KvArgs {
  ModelSource model;
  std::string format = "table", dtype = "f32";
  std::optional<int> seq_len;
};

int run_kv(const KvArgs& a) {
  const lm::Config config = model_config(a.model);
  // A cache for more tokens than the model has positions is one no run of it holds (lm generate refuses
  // it): a checkpoint's, or a model of flags with a learned table of --positions N (one of flags with
  // RoPE has no table, and is priced at any length).
  if (a.seq_len && *a.seq_len > config.positions && (!a.model.dir.empty() || !config.rope()))
    throw UsageError("--seq-len " + std::to_string(*a.seq_len) + " is longer than " +
                     (a.model.dir.empty() ? "the model's learned table of " : a.model.dir + "'s ") +
                     std::to_string(config.positions) + " positions" + (a.model.dir.empty() ? " (--positions)" : ""));
  const auto seq_len = a.seq_len ? std::optional<std::int64_t>(*a.seq_len) : std::nullopt;
  const results::Value v = lm::kv_value(config, a.dtype, seq_len);
  std::cout << (a.format == "json" ? v.json() : v.text());
  return 0;
}

}  // namespace

Command add_kv_command(CLI::App& app, const std::string&) {
  auto a = std::make_shared<KvArgs>();
  auto* cmd = app.add_subcommand("kv", "KV-cache bytes per token of a model, per layer: own key and value heads "
                                       "(MLA: latent and rotary key), heads reused from other layers counted once");
  cmd->footer("Exit status: 0 success, 2 usage error (one line on stderr).");
  add_model_source(cmd, a->model);
  cmd->add_option("--dtype", a->dtype, "Cache dtype: f32 (4 bytes), bf16 or f16 (2 bytes)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  cmd->add_option("--seq-len", a->seq_len, "Also the total for this many tokens (one sequence; at most the positions of a checkpoint, "
                                              "or of a model of flags with learned positions: --positions N)")
      ->check(positive_integer);
  add_format_option(cmd, a->format);
  return {cmd, [a] { return run_kv(*a); }};
}

}  // namespace qkvlab::cli
