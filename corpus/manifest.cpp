#include "corpus/manifest.hpp"

#include "core/json_text.hpp"

namespace qkvlab::corpus {

std::string output_record(const std::string& name, const FileSum& sum) {
  return json_quote(name) + ": {\"bytes\": " + std::to_string(sum.bytes) + ", \"fnv1a64\": " + json_quote(hex64(sum.fnv1a64)) + "}";
}

std::string stale_output(std::string_view manifest, const std::string& key,
                         const std::function<std::optional<FileSum>(const std::string&)>& sum_of) {
  if (manifest.find("\"options\": " + json_quote(key) + ",\n") == std::string_view::npos) return "manifest.json";
  for (const auto& name : kPreparedOutputs) {
    const std::optional<FileSum> sum = sum_of(name);
    if (!sum || manifest.find(output_record(name, *sum)) == std::string_view::npos) return name;
  }
  return "";
}

}  // namespace qkvlab::corpus
