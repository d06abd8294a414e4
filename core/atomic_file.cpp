#include "core/atomic_file.hpp"

#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace qkvlab {

void write_atomically(const std::filesystem::path& path, std::string_view kind,
                      const std::function<void(const std::filesystem::path& temporary)>& fill) {
  std::filesystem::path temporary = path;
  temporary += ".tmp-" + std::to_string(::getpid());
  try {
    fill(temporary);
    std::error_code error;
    std::filesystem::rename(temporary, path, error);
    if (error) throw std::runtime_error("cannot rename temporary file (" + error.message() + ")");
  } catch (const std::exception& e) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw std::runtime_error("cannot write " + std::string(kind) + " file " + path.string() + ": " + e.what());
  }
}

void write_bytes_atomically(const std::filesystem::path& path, std::string_view kind, std::string_view bytes) {
  write_atomically(path, kind, [&](const std::filesystem::path& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) throw std::runtime_error("cannot write temporary file " + temporary.string());
  });
}

}  // namespace qkvlab
