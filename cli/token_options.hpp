// Where a command that runs a model takes its token sequences from: --tokens FILE,
// --text FILE (encoded by the checkpoint's own tokenizer, lm/tokenizer.hpp, a BOS at the start
// of every sequence where the tokenizer puts one before a text), --corpus brown
// (--data, --split), and how many: --sequences, --seq-len, chosen among the file's sequences
// by the command's --seed. `verify --checkpoint` also accepts none of them: seeded random
// tokens (lm::random_sequences).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/output_paths.hpp"
#include "core/atomic_file.hpp"
#include "corpus/token_file.hpp"
#include "lm/evaluate.hpp"
#include "results/value.hpp"

namespace qkvlab::cli {

struct TokenOptions {
  std::string tokens, text, corpus, data = "data/brown", split = "validation";
  std::int64_t sequences = 64;
  int seq_len = 256;
  // Set by add_token_options: whether --sequences and --seq-len were given (a given --seq-len with a
  // 2-D token file, and a given --sequences beyond what the source holds, are refused).
  const CLI::Option *sequences_option = nullptr, *seq_len_option = nullptr;
  // The directory the sequences are read from with --corpus (its files must not be outputs); empty otherwise.
  std::string corpus_directory() const { return corpus.empty() ? "" : data; }
};

// Adds --tokens, --text, --corpus, --data, --split, --sequences and --seq-len with `o`'s values as defaults.
void add_token_options(CLI::App* cmd, TokenOptions& o);

// --text FILE alone, for the commands that read tokens their own way (lm eval, probe); `use` says
// how the command cuts the encoded text.
inline const std::string kTextPieces =
    "one stream, cut into --seq-len pieces, each with the BOS (or other special tokens) the tokenizer puts around a text";
CLI::Option* add_text_option(CLI::App* cmd, std::string& text, const std::string& use = kTextPieces);
// The ids of the text file under the tokenizer of the checkpoint directory (lm/tokenizer.hpp).
std::vector<std::int32_t> text_token_ids(const std::string& text_file, const std::string& checkpoint);
// The text file as sequences of `seq_len` ids under that tokenizer, each with the special tokens its
// post-processor puts around a text (BOS at position 0: Tokenizer::encode_pieces); UsageError naming
// the file when it does not fill one.
corpus::TokenArray text_token_rows(const std::string& text_file, const std::string& checkpoint, int seq_len);

// A --seq-len given with a 2-D token file `source` of `cols` tokens a row (its rows are the sequences)
// must be that length: another is a UsageError (lm eval and read_token_sequences alike).
void require_row_length(bool seq_len_given, int seq_len, std::int64_t cols, const std::string& source);

// The sequences for `model`: from the token file, text file or corpus (more than one given:
// UsageError), or, when `random_default`, `sequences` random sequences of `seq_len` tokens below its
// vocabulary; otherwise one of them is required. A text file is encoded by `checkpoint`'s tokenizer.
// Sequences longer than the model's positions, or an id outside its vocabulary, are a UsageError
// naming the source (lm::check_sequences), as are a given --seq-len other than a 2-D token file's rows
// (require_row_length) and a given --sequences N above the sequences the source holds (the default takes
// up to N).
lm::TokenSequences read_token_sequences(const TokenOptions& o, const std::string& checkpoint, std::uint64_t seed,
                                        const lm::Config& model, bool random_default);

// The file the sequences are read from (a token file, the corpus split's, a text), with its option.
FileList input_files(const TokenOptions& o);

// Protects input_files(o) in `files`: no output staged there replaces it (StagedFiles::protect).
void protect_inputs(StagedFiles& files, const TokenOptions& o);

// Where they come from, as the output names it: "file F", "text F", "corpus brown (D, S)" or "random tokens".
std::string token_source(const TokenOptions& o);

// {"source", "sequences", "length", "count", "seed"}: what the output records of its inputs.
results::Value tokens_value(const TokenOptions& o, const lm::TokenSequences& s, std::uint64_t seed);

}  // namespace qkvlab::cli
