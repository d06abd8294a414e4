#include "probes/tags.hpp"

#include <stdexcept>

#include "core/errors.hpp"
#include "core/text_file.hpp"
#include "engine/json.hpp"

namespace qkvlab::probes {

int tag_count(std::string_view text, const std::string& source) {
  engine::Json names;
  try {
    names = engine::parse_json(text);
  } catch (const std::runtime_error& e) {
    throw UsageError(source + ": " + e.what());
  }
  if (names.kind != engine::Json::Kind::array) throw UsageError(source + ": not a JSON array of tag names");
  for (std::size_t k = 0; k < names.items.size(); ++k)
    if (names.items[k].kind != engine::Json::Kind::string)
      throw UsageError(source + ": entry " + std::to_string(k) + " is not a tag name (a string)");
  if (names.items.size() < 2)
    throw UsageError(source + ": " + std::to_string(names.items.size()) + " tag names; a tag probe needs at least 2");
  if (names.items.size() > std::size_t(kMaxTags)) throw UsageError(source + ": more than 2^20 tag names");
  return int(names.items.size());
}

int read_tag_count(const std::filesystem::path& path) { return tag_count(read_text_file(path), path.string()); }

void check_tags(const std::vector<std::int32_t>& tags, int count, const std::filesystem::path& file) {
  for (std::size_t k = 0; k < tags.size(); ++k)
    if (tags[k] >= count)
      throw UsageError(file.string() + ": tag id " + std::to_string(tags[k]) + " at position " + std::to_string(k) +
                       " is outside tags.json's " + std::to_string(count) + " tags (0 to " +
                       std::to_string(count - 1) + ", or -1 for none)");
}

}  // namespace qkvlab::probes
