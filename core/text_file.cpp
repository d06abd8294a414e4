#include "core/text_file.hpp"

#include "core/errors.hpp"

#include <fstream>
#include <sstream>

namespace qkvlab {

std::string read_text_file(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) throw UsageError(path.string() + ": not a readable file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path.string() + ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace qkvlab
