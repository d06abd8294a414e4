// The token streams a probe trains and validates on (ProbeData, probes/layerwise.hpp): a prepared
// corpus's two splits, with the tags of their words for `--target pos`, or one stream of the user's
// whose last tenth validates unless a validation stream is given. Every error is a UsageError naming
// the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "probes/layerwise.hpp"

namespace qkvlab::probes {

// `dir`'s train_tokens.npy and validation_tokens.npy (prepared by `qkvlab data brown`, checked
// against its manifest), and with `tags` their tag files and the number of tags in tags.json, every
// tag checked against it and each tag stream as long as its token stream.
ProbeData corpus_probe_data(const std::filesystem::path& dir, bool tags);

// `train`, validated on `validation` when given, else on its own last tenth (cut off the training stream).
ProbeData stream_probe_data(std::vector<std::int32_t> train, std::optional<std::vector<std::int32_t>> validation);

}  // namespace qkvlab::probes
