#include "probes/probe_data.hpp"

#include "core/errors.hpp"
#include "corpus/manifest.hpp"
#include "corpus/token_file.hpp"
#include "probes/tags.hpp"

namespace qkvlab::probes {

ProbeData corpus_probe_data(const std::filesystem::path& dir, bool tags) {
  const auto read = [&dir](const char* name, bool tag_file) {
    const auto file = corpus::prepared_file(dir, name);
    return (tag_file ? corpus::read_tag_file(file) : corpus::read_token_file(file)).ids;
  };
  ProbeData d;
  d.train = read("train_tokens.npy", false), d.validation = read("validation_tokens.npy", false);
  if (!tags) return d;
  d.train_tags = read("train_tags.npy", true), d.validation_tags = read("validation_tags.npy", true);
  d.tags = read_tag_count(corpus::prepared_file(dir, "tags.json"));
  check_tags(d.train_tags, d.tags, dir / "train_tags.npy");
  check_tags(d.validation_tags, d.tags, dir / "validation_tags.npy");
  if (d.train_tags.size() != d.train.size() || d.validation_tags.size() != d.validation.size())
    throw UsageError(dir.string() + ": the tag files do not match the token files (run 'qkvlab data brown' again)");
  return d;
}

ProbeData stream_probe_data(std::vector<std::int32_t> train, std::optional<std::vector<std::int32_t>> validation) {
  ProbeData d;
  d.train = std::move(train);
  if (validation) {
    d.validation = std::move(*validation);
    return d;
  }
  const auto cut = d.train.begin() + std::ptrdiff_t(d.train.size() - d.train.size() / 10);
  d.validation.assign(cut, d.train.end()), d.train.erase(cut, d.train.end());
  return d;
}

}  // namespace qkvlab::probes
