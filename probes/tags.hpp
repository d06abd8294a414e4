// The tag names of a prepared corpus (tags.json, written by `qkvlab data brown`:
// a JSON array of the coarse tag names) and the check of a tag stream against
// them, for `qkvlab probe --target pos`. Every error is a UsageError naming the
// file and what is wrong.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace qkvlab::probes {

inline constexpr int kMaxTags = 1 << 20;

// The number of tag names in tags.json's text: a JSON array of 2 to kMaxTags strings.
// `source` names the file in messages.
int tag_count(std::string_view text, const std::string& source);
int read_tag_count(const std::filesystem::path& path);  // the file's text, as above

// Every tag of `tags` (read from `file`) indexes the `count` tag names, or is -1 (no tag).
void check_tags(const std::vector<std::int32_t>& tags, int count, const std::filesystem::path& file);

}  // namespace qkvlab::probes
