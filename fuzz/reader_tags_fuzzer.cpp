// libFuzzer target: the tags.json reader of `qkvlab probe --target pos` (probes/tags.hpp).
// Any bytes give a count of 2 to 2^20 tag names or a UsageError; an accepted count must
// be the one the ids are checked against: -1, 0 and count − 1 pass, count is refused.
// Anything else (another exception, a wrong count, a sanitizer report, a leak) is a finding.
// Built and run by scripts/fuzz_readers.sh (docs/robustness.md).
#include "core/errors.hpp"
#include "probes/tags.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  int count = 0;
  try {
    count = qkvlab::probes::tag_count(text, "fuzz");
  } catch (const qkvlab::UsageError&) {
    return 0;
  }
  if (count < 2 || count > qkvlab::probes::kMaxTags) std::abort();
  qkvlab::probes::check_tags({-1, 0, count - 1}, count, "fuzz");  // must not throw
  try {
    qkvlab::probes::check_tags({count}, count, "fuzz");
  } catch (const qkvlab::UsageError&) {
    return 0;
  }
  std::abort();  // an id past the names was accepted
}
