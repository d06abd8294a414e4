#include "cli/token_options.hpp"

#include <filesystem>

#include "analysis/analyze.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "corpus/token_file.hpp"

namespace qkvlab::cli {

void add_token_options(CLI::App* cmd, TokenOptions& o) {
  cmd->add_option("--tokens", o.tokens, "Token file: .npy of integers (2-D: one sequence per row) or nanoGPT .bin");
  cmd->add_option("--corpus", o.corpus, "A prepared corpus: brown (see --data, --split)")->check(CLI::IsMember({"brown"}));
  cmd->add_option("--data", o.data, "Where 'qkvlab data brown' prepared the corpus")->capture_default_str();
  cmd->add_option("--split", o.split, "Corpus split")->check(CLI::IsMember({"train", "validation"}))->capture_default_str();
  cmd->add_option("--sequences", o.sequences, "Sequences, chosen by --seed among all (0: all)")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40))
      ->capture_default_str();
  cmd->add_option("--seq-len", o.seq_len, "Tokens per sequence (a 1-D stream is cut into pieces of this length)")
      ->check(integer_in(2, 1 << 20))
      ->capture_default_str();
}

namespace {
std::filesystem::path token_file(const TokenOptions& o) {
  return o.tokens.empty() ? std::filesystem::path(o.data) / (o.split + "_tokens.npy") : std::filesystem::path(o.tokens);
}
}  // namespace

lm::TokenSequences read_token_sequences(const TokenOptions& o, std::uint64_t seed, const lm::Config& model,
                                        bool random_default) {
  if (!o.corpus.empty() && !o.tokens.empty()) throw UsageError("give one of --tokens FILE and --corpus brown, not both");
  if (o.corpus.empty() && o.tokens.empty()) {
    if (!random_default) throw UsageError("give one of --tokens FILE and --corpus brown");
    if (o.sequences == 0) throw UsageError("--sequences 0 (all) needs --tokens or --corpus");
    const lm::TokenSequences s = lm::random_sequences(model.vocab, o.sequences, o.seq_len, seed);
    lm::check_sequences(s, model, "--seq-len " + std::to_string(o.seq_len));
    return s;
  }
  const corpus::TokenArray t = corpus::read_token_file(token_file(o));
  const lm::TokenSequences s =
      analysis::choose_sequences(lm::token_sequences(t.ids, t.rows, t.cols, o.seq_len, 0), o.sequences, seed);
  lm::check_sequences(s, model, token_file(o).string());
  return s;
}

std::string token_source(const TokenOptions& o) {
  if (!o.tokens.empty()) return "file " + o.tokens;
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
