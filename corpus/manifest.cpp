#include "corpus/manifest.hpp"

#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "core/text_file.hpp"

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

std::filesystem::path prepared_file(const std::filesystem::path& dir, const std::string& name) {
  const std::filesystem::path file = dir / name, manifest = dir / "manifest.json";
  if (!std::filesystem::is_regular_file(manifest))
    throw UsageError(dir.string() + ": no manifest.json: not a prepared corpus directory (run 'qkvlab data brown')");
  if (!std::filesystem::is_regular_file(file) ||
      read_text_file(manifest).find(output_record(name, file_sum(file))) == std::string::npos)
    throw UsageError(file.string() + ": not as " + manifest.string() +
                     " records it (changed since, or an unfinished preparation): run 'qkvlab data brown' again");
  return file;
}

}  // namespace qkvlab::corpus
