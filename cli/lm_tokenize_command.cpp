// `qkvlab lm tokenize DIR (--text FILE | --prompt TEXT)`: the ids of a text under the checkpoint's own
// tokenizer (lm/tokenizer.hpp); `--decode --tokens FILE`: the text of a 1-D .npy of ids.
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/text_file.hpp"
#include "corpus/token_file.hpp"
#include "lm/tokenizer.hpp"
#include "results/value.hpp"

namespace qkvlab::cli {

namespace {

struct TokenizeArgs {
  std::string dir, tokens, format = "text";
  std::optional<std::string> text, prompt;  // given or not (an empty --prompt is the empty text)
  bool decode = false;
};

int run_decode(const TokenizeArgs& a, const lm::Tokenizer& t) {
  if (a.tokens.empty()) throw UsageError("--decode needs --tokens FILE (a 1-D .npy of ids)");
  if (a.text || a.prompt) throw UsageError("--decode reads --tokens: --text and --prompt do not apply");
  const corpus::TokenArray ids = corpus::read_token_file(a.tokens);
  if (ids.cols != 0)
    throw UsageError("--tokens " + a.tokens + ": a 1-D array of ids is expected, not " + std::to_string(ids.rows) + " x " +
                     std::to_string(ids.cols));
  const std::string text = t.decode(ids.ids);
  if (a.format == "json") {
    results::Value out = results::Value::object();
    out.set("text", lm::replace_invalid_utf8(text));
    std::cout << out.json();
  } else {
    std::cout << text;  // the bytes as they are
  }
  return 0;
}

int run_tokenize(const TokenizeArgs& a) {
  if (!std::filesystem::exists(a.dir)) throw UsageError(a.dir + ": no such directory (a checkpoint or tokenizer directory)");
  if (!std::filesystem::is_directory(a.dir))
    throw UsageError(a.dir + ": a file, not a directory: give the checkpoint or tokenizer directory that holds it");
  const lm::Tokenizer t = lm::Tokenizer::load(a.dir);
  if (a.decode) return run_decode(a, t);
  if (!a.tokens.empty()) throw UsageError("--tokens FILE is read with --decode");
  if (!a.text && !a.prompt) throw UsageError("give one of --text FILE and --prompt TEXT");
  const std::vector<std::int32_t> ids = t.encode(a.prompt ? *a.prompt : read_text_file(*a.text));
  if (a.format == "json") {
    results::Value out = results::Value::object();
    out.set("ids", results::Value::array_of(ids));
    std::cout << out.json();
    return 0;
  }
  for (std::size_t k = 0; k < ids.size(); ++k) std::cout << (k ? " " : "") << ids[k];
  std::cout << '\n';
  return 0;
}

}  // namespace

std::vector<Command> add_lm_tokenize_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<TokenizeArgs>();
  auto* cmd = lm.add_subcommand("tokenize", "Token ids of a text under a checkpoint's own tokenizer (tokenizer.json, or "
                                            "GPT-2's vocab.json + merges.txt), or with --decode the text of ids");
  cmd->footer("Byte-level BPE as Hugging Face's tokenizers runs it; other tokenizer types are refused (docs/lm.md,\n"
              "\"Tokenizers\"). Output: the ids on one line, or {\"ids\": [...]}; decoded text as raw bytes, or\n"
              "{\"text\": ...} with invalid UTF-8 replaced by U+FFFD.");
  cmd->add_option("DIR", a->dir, "Checkpoint (or tokenizer) directory")->required();
  auto* text = cmd->add_option("--text", a->text, "Encode the text of this file")->check(path_value);
  cmd->add_option("--prompt", a->prompt, "Encode this text (\"\": the empty text: no ids, or only those the tokenizer's template adds, such as a BOS)")->excludes(text);
  cmd->add_flag("--decode", a->decode, "Decode --tokens instead");
  cmd->add_option("--tokens", a->tokens, "With --decode: a 1-D .npy of token ids");
  add_format_option(cmd, a->format, Readable::text);
  return {{cmd, [a] { return run_tokenize(*a); }}};
}

}  // namespace qkvlab::cli
