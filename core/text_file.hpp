// Reading a whole text file, with one-line errors that name the path.
#pragma once

#include <filesystem>
#include <string>

namespace qkvlab {

// The file's bytes. UsageError "PATH: not a readable file" when it is missing or not a regular
// file, "PATH: cannot open for reading" when it cannot be opened.
std::string read_text_file(const std::filesystem::path& path);

}  // namespace qkvlab
