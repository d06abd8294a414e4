#include "cli/token_options.hpp"

#include <filesystem>

#include "analysis/analyze.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "core/text_file.hpp"
#include "corpus/manifest.hpp"
#include "corpus/token_file.hpp"
#include "lm/tokenizer.hpp"

namespace qkvlab::cli {

CLI::Option* add_text_option(CLI::App* cmd, std::string& text, const std::string& use) {
  return cmd->add_option("--text", text, "Text file, encoded by the checkpoint's own tokenizer (see 'qkvlab lm tokenize'); " + use);
}

void add_token_options(CLI::App* cmd, TokenOptions& o) {
  cmd->add_option("--tokens", o.tokens, "Token file: .npy of integers (2-D: one sequence per row) or nanoGPT .bin");
  add_text_option(cmd, o.text);
  cmd->add_option("--corpus", o.corpus, "A prepared corpus: brown (see --data, --split)")->check(CLI::IsMember({"brown"}));
  cmd->add_option("--data", o.data, "Where 'qkvlab data brown' prepared the corpus")->capture_default_str();
  cmd->add_option("--split", o.split, "Corpus split")->check(CLI::IsMember({"train", "validation"}))->capture_default_str();
  o.sequences_option = cmd->add_option("--sequences", o.sequences,
                                        "Sequences, chosen by --seed among all (0: all; given, at most those the source holds; "
                                        "by default up to this many)")
                           ->check(integer64_in(0, 1LL << 40))
                           ->capture_default_str();
  o.seq_len_option = cmd->add_option("--seq-len", o.seq_len,
                                     "Tokens per sequence: a 1-D stream or a text is cut into pieces of this length "
                                     "(a 2-D file's rows are its sequences: another length is refused)")
                         ->check(integer_in(2, 1 << 20))
                         ->capture_default_str();
}

std::vector<std::int32_t> text_token_ids(const std::string& text_file, const std::string& checkpoint) {
  return lm::Tokenizer::load(checkpoint).encode(read_text_file(text_file));
}

corpus::TokenArray text_token_rows(const std::string& text_file, const std::string& checkpoint, int seq_len) {
  const lm::Tokenizer tokenizer = lm::Tokenizer::load(checkpoint);
  const std::string text = read_text_file(text_file);
  corpus::TokenArray t{tokenizer.encode_pieces(text, seq_len), 0, seq_len};
  t.rows = std::int64_t(t.ids.size()) / seq_len;
  if (t.rows == 0)
    throw UsageError(text_file + ": " + std::to_string(tokenizer.encode(text).size()) + " tokens under " +
                     tokenizer.source() + ", not one sequence of " + std::to_string(seq_len));
  return t;
}

namespace {
bool was_given(const CLI::Option* option) { return option && option->count() > 0; }

std::filesystem::path token_file(const TokenOptions& o) {
  return o.tokens.empty() ? std::filesystem::path(o.data) / (o.split + "_tokens.npy") : std::filesystem::path(o.tokens);
}

// `s`, once lm::check_sequences has found it fits `model` (a UsageError naming `source` otherwise).
lm::TokenSequences checked(lm::TokenSequences s, const lm::Config& model, const std::string& source) {
  lm::check_sequences(s, model, source);
  return s;
}
}  // namespace

void require_row_length(bool seq_len_given, int seq_len, std::int64_t cols, const std::string& source) {
  if (seq_len_given && cols > 0 && cols != seq_len)
    throw UsageError("--seq-len " + std::to_string(seq_len) + ": " + source + " is 2-D, its rows of " + std::to_string(cols) +
                     " tokens are the sequences");
}

lm::TokenSequences read_token_sequences(const TokenOptions& o, const std::string& checkpoint, std::uint64_t seed,
                                        const lm::Config& model, bool random_default) {
  const int given = int(!o.tokens.empty()) + int(!o.text.empty()) + int(!o.corpus.empty());
  if (given > 1) throw UsageError("give one of --tokens FILE, --text FILE and --corpus brown, not several");
  if (given == 0) {
    if (!random_default) throw UsageError("give one of --tokens FILE, --text FILE and --corpus brown");
    if (o.sequences == 0) throw UsageError("--sequences 0 (all) needs --tokens, --text or --corpus");
    return checked(lm::random_sequences(model.vocab, o.sequences, o.seq_len, seed), model,
                   "--seq-len " + std::to_string(o.seq_len));
  }
  const std::string source = o.text.empty() ? token_file(o).string() : o.text;
  const corpus::TokenArray t =
      !o.text.empty()   ? text_token_rows(o.text, checkpoint, o.seq_len)
      : o.tokens.empty() ? corpus::read_token_file(corpus::prepared_file(o.data, o.split + "_tokens.npy"))
                         : corpus::read_token_file(o.tokens);
  if (o.text.empty()) require_row_length(was_given(o.seq_len_option), o.seq_len, t.cols, source);
  const lm::TokenSequences all = lm::token_sequences(t.ids, t.rows, t.cols, o.seq_len, 0);
  if (was_given(o.sequences_option) && o.sequences > all.sequences)
    throw UsageError("--sequences " + std::to_string(o.sequences) + ": " + source + " holds " +
                     std::to_string(all.sequences) + " sequences of " + std::to_string(all.length) +
                     " tokens (0: all of them)");
  return checked(analysis::choose_sequences(all, o.sequences, seed), model, source);
}

FileList input_files(const TokenOptions& o) {
  if (!o.text.empty()) return {{"--text", o.text}};
  if (o.tokens.empty() && o.corpus.empty()) return {};  // random tokens
  return {{o.tokens.empty() ? "--corpus" : "--tokens", token_file(o).string()}};
}

void protect_inputs(StagedFiles& files, const TokenOptions& o) {
  for (const auto& [option, file] : input_files(o)) files.protect(file, option);
}

std::string token_source(const TokenOptions& o) {
  if (!o.tokens.empty()) return "file " + o.tokens;
  if (!o.text.empty()) return "text " + o.text;
  if (!o.corpus.empty()) return "corpus " + o.corpus + " (" + o.data + ", " + o.split + ")";
  return "random tokens";
}

results::Value tokens_value(const TokenOptions& o, const lm::TokenSequences& s, std::uint64_t seed) {
  results::Value v = results::Value::object();
  v.set("source", token_source(o));
  v.set("sequences", s.sequences);
  v.set("length", std::int64_t(s.length));
  v.set("count", s.sequences * std::int64_t(s.length));
  v.set("seed", seed);
  return v;
}

}  // namespace qkvlab::cli
