// `qkvlab lm generate CKPT --tokens FILE | --prompt TEXT | --prompt-file FILE`: decoding with the
// cache (lm/generate.hpp): the new tokens (and their text, by the checkpoint's tokenizer), the
// cache's measured bytes per token, prefill and decode throughput, peak memory.
#include <iostream>
#include <optional>

#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/dtype_option.hpp"
#include "cli/nonfinite_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/token_options.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/peak_memory.hpp"
#include "corpus/token_file.hpp"
#include "engine/make_backend.hpp"
#include "lm/generate.hpp"
#include "lm/model_files.hpp"
#include "lm/tokenizer.hpp"
#include "results/value.hpp"

namespace qkvlab::cli {

namespace {

struct GenerateArgs {
  std::string checkpoint, tokens, prompt, prompt_file, format = "text";
  int max_new = 32, batch = 1, threads = 0;
  lm::Sampling sampling;
  Device device = Device::cpu;
  std::string dtype = "auto";
  bool allow_nonfinite = false, quiet = false;
};

// The prompt's ids: a 1-D token file (--tokens), or text (--prompt, --prompt-file) encoded by the
// checkpoint's tokenizer (lm/tokenizer.hpp; a checkpoint without one is a usage error).
std::vector<std::int32_t> prompt_ids(const GenerateArgs& a, const std::optional<lm::Tokenizer>& tokenizer) {
  if (a.tokens.empty()) {
    const std::vector<std::int32_t> ids =  // without a tokenizer, load() names what is missing
        !a.prompt_file.empty() ? text_token_ids(a.prompt_file, a.checkpoint)
        : tokenizer            ? tokenizer->encode(a.prompt)
                               : lm::Tokenizer::load(a.checkpoint).encode(a.prompt);
    if (ids.empty()) throw UsageError((a.prompt_file.empty() ? "--prompt" : a.prompt_file) + ": the prompt is empty");
    return ids;
  }
  const corpus::TokenArray t = corpus::read_token_file(a.tokens);
  if (t.cols != 0) throw UsageError(a.tokens + ": --tokens needs a 1-D array of ids, got a 2-D one");
  if (t.ids.empty()) throw UsageError(a.tokens + ": the prompt is empty");
  return t.ids;
}

// The new tokens as text, where the checkpoint has a tokenizer (invalid UTF-8 replaced, for JSON); a
// sequence holding an id the tokenizer lacks (a model vocabulary larger than its tokenizer's) has
// text null, its ids kept.
void set_text(results::Value& out, const GenerateArgs& a, const std::optional<lm::Tokenizer>& tokenizer,
              const std::vector<std::vector<std::int32_t>>& ids) {
  if (!tokenizer) return;
  const auto text = [&](const std::vector<std::int32_t>& seq) {
    try {
      return results::Value(lm::replace_invalid_utf8(tokenizer->decode(seq)));
    } catch (const UsageError&) {  // an id the tokenizer has no token for
      return results::Value();
    }
  };
  if (a.batch == 1) {
    out.set("text", text(ids[0]));
    return;
  }
  results::Value all = results::Value::array();
  for (const auto& seq : ids) all.push(text(seq));
  out.set("text", std::move(all));
}

results::Value ids_value(const std::vector<std::int32_t>& ids) {
  return results::Value::array_of(std::vector<std::int64_t>(ids.begin(), ids.end()));
}

int run_generate(const GenerateArgs& a) {
  require_device(a.device);
  // The checkpoint's tokenizer, read before the decoding (a broken one is refused before the work).
  const std::optional<lm::Tokenizer> tokenizer =
      lm::has_tokenizer(a.checkpoint) ? std::optional(lm::Tokenizer::load(a.checkpoint)) : std::nullopt;
  const std::vector<std::int32_t> prompt = prompt_ids(a, tokenizer);
  apply_threads(a.threads, BlasUse::per_worker);
  const auto backend = engine::make_backend(a.device, a.threads);
  const auto model = lm::load_model(a.checkpoint, *backend, a.allow_nonfinite, a.dtype);
  const Progress show{"lm generate", Progress::wanted(a.quiet)};
  const lm::Generation g = lm::generate(*model, prompt, a.max_new, a.batch, a.sampling,
                                        [&](int done, int total) { show("tokens", done, total); });
  if (!g.nonfinite.empty()) return report_nonfinite("lm generate", g.nonfinite);
  results::Value out = results::Value::object();
  out.set("prompt_ids", ids_value(g.prompt_ids));
  if (a.batch == 1) {
    out.set("ids", ids_value(g.ids[0]));
  } else {
    results::Value all = results::Value::array();
    for (const auto& seq : g.ids) all.push(ids_value(seq));
    out.set("ids", std::move(all));
  }
  set_text(out, a, tokenizer, g.ids);
  out.set("cache_bytes_per_token", g.cache_bytes_per_token);
  out.set("prefill_tokens_per_s", double(a.batch) * double(prompt.size()) / g.prefill_seconds);
  out.set("decode_tokens_per_s", g.decode_steps ? results::Value(double(a.batch) * double(g.decode_steps) /
                                                                  g.decode_seconds)
                                                : results::Value());
  out.set("peak_bytes", std::int64_t(peak_resident_bytes()));
  set_dtype_fields(out, model->weight_type());
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

}  // namespace

std::vector<Command> add_lm_generate_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = lm.add_subcommand("generate", "Decode new tokens after a prompt with the model's key/value cache");
  cmd->add_option("CKPT", a->checkpoint, "Checkpoint directory (qkvlab's own or Hugging Face's)")->required();
  auto* tokens = cmd->add_option("--tokens", a->tokens, "The prompt: a 1-D .npy of token ids (or nanoGPT's .bin)");
  auto* prompt = cmd->add_option("--prompt", a->prompt, "The prompt as text, encoded by the checkpoint's tokenizer (tokenizer.json or vocab.json + merges.txt)");
  auto* file = cmd->add_option("--prompt-file", a->prompt_file, "The prompt as a text file, encoded by the checkpoint's tokenizer");
  tokens->excludes(prompt)->excludes(file);
  prompt->excludes(file);
  cmd->add_option("--max-new", a->max_new, "New tokens to generate")->check(integer_in(1, 1 << 20))->capture_default_str();
  cmd->add_option("--temperature", a->sampling.temperature, "Sampling temperature; 0 is greedy (argmax)")
      ->check(non_negative_real)
      ->capture_default_str();
  cmd->add_option("--top-k", a->sampling.top_k, "Sample among the k most likely tokens (0: all)")
      ->check(integer_in(0, INT_MAX))
      ->capture_default_str();
  cmd->add_option("--top-p", a->sampling.top_p, "Sample among the most likely tokens of total probability p")
      ->check(real_in(1e-9, 1))
      ->capture_default_str();
  cmd->add_option("--seed", a->sampling.seed, "Seed of the sampling (sequence b draws from stream generate/b)")
      ->check(seed_value)
      ->capture_default_str();
  cmd->add_option("--batch", a->batch, "Sequences decoded side by side from the same prompt")
      ->check(integer_in(1, 4096))
      ->capture_default_str();
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  add_format_option(cmd, a->format, Readable::text);
  add_allow_nonfinite_option(cmd, a->allow_nonfinite);
  add_dtype_option(cmd, a->dtype);
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  cmd->callback([tokens, prompt, file] {
    if (!tokens->count() && !prompt->count() && !file->count())
      throw CLI::RequiredError("one of --tokens, --prompt, --prompt-file");
  });
  return {{cmd, [a] { return run_generate(*a); }}};
}

}  // namespace qkvlab::cli
