// Files appear whole or not at all. A writer fills a temporary file beside the
// target, which is then renamed into place; on any failure the temporary is
// removed and the error rethrown as "cannot write KIND file PATH: reason".
#pragma once

#include <filesystem>
#include <functional>
#include <string_view>

namespace qkvlab {

void write_atomically(const std::filesystem::path& path, std::string_view kind,
                      const std::function<void(const std::filesystem::path& temporary)>& fill);

// The common case: the whole file is one byte buffer.
void write_bytes_atomically(const std::filesystem::path& path, std::string_view kind, std::string_view bytes);

}  // namespace qkvlab
