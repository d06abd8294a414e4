// The manifest.json of a prepared corpus directory (corpus/prepare.hpp) as the
// next `qkvlab data brown` reads it: is the directory up to date? It is when the
// manifest records the same options and each output's size and FNV-1a checksum
// as the file has now, so a truncated or edited token file is prepared again.
// The reader compares the records it would write with the manifest's text,
// byte for byte: it parses nothing, and a manifest it did not write (hand-made,
// older, damaged) is simply not up to date.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fnv.hpp"

namespace qkvlab::corpus {

// The files a prepared directory holds besides manifest.json.
inline const std::vector<std::string> kPreparedOutputs = {
    "vocab.json", "merges.txt", "train_tokens.npy", "validation_tokens.npy", "train_tags.npy", "validation_tags.npy",
    "tags.json",  "baselines.json"};

// The manifest's record of one output: "NAME": {"bytes": N, "fnv1a64": "HEX"}.
std::string output_record(const std::string& name, const FileSum& sum);
// Reads a manifest.json's text: the first of manifest.json (it records options other than `key`)
// and the outputs whose size and checksum now (sum_of; nullopt: missing) it does not record;
// empty when it records all of them as they are.
std::string stale_output(std::string_view manifest, const std::string& key,
                         const std::function<std::optional<FileSum>(const std::string&)>& sum_of);

// The path of file `name` of the prepared directory `dir`, for a command to read, once checked: its
// size and checksum are as `dir`/manifest.json records them, else a UsageError naming it (missing,
// changed since, or an unfinished preparation's), telling to run `qkvlab data brown` again. Every
// reader of a prepared corpus (lm train --corpus, --corpus brown of analyze, verify, probe,
// reproduce) opens its files through it.
std::filesystem::path prepared_file(const std::filesystem::path& dir, const std::string& name);

}  // namespace qkvlab::corpus
