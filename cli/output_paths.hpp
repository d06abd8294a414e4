// Outputs never replace the model a command reads. An output directory that is the checkpoint's
// own (lm export --hf, lm convert --out, lm eliminate --out), or an output file in the checkpoint's
// directory (the reports and tables of verify, analyze and probe: --out, --junit, --csv, --figure),
// is refused with a UsageError naming the option, before anything is read or written; so is a
// report file whose directory does not exist, two outputs given one file, and an output that is
// a file the command reads (its --tokens or --text).
#pragma once

#include <filesystem>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>
#include <system_error>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"

namespace qkvlab::cli {

// (option, file) pairs of a command's outputs or inputs: the options' own strings, or names made from them
// (a figure's STEM.svg).
using NamedFiles = std::initializer_list<std::pair<const char*, const std::string*>>;
using FileList = std::vector<std::pair<std::string, std::string>>;

// `dir`, which `option` names (or in which it names a file), is an existing directory: a file there is
// called one.
inline void require_directory(const std::string& option, const std::filesystem::path& dir) {
  if (std::filesystem::is_directory(dir)) return;
  if (std::filesystem::exists(dir)) throw UsageError(option + ": " + dir.string() + " is not a directory");
  throw UsageError(option + ": directory " + dir.string() + " does not exist");
}

// `out`, the directory a command writes a model into, must not be `checkpoint`'s directory.
inline void refuse_same_directory(const std::string& checkpoint, const std::string& option, const std::string& out) {
  std::error_code error;
  if (!out.empty() && std::filesystem::equivalent(checkpoint, out, error))
    throw UsageError(option + " " + out + " is the checkpoint's own directory " + checkpoint + ": write elsewhere");
}

// `file`, a file a command writes (or the stem of the files it writes beside it), must not be in
// `checkpoint`'s directory (a model's, a corpus's, or a run's that lm compare reads; none when
// empty): it could replace one of the files read.
inline void refuse_file_in(const std::string& checkpoint, const std::string& option, const std::string& file) {
  if (file.empty() || file == "-" || checkpoint.empty()) return;
  std::error_code error;
  if (std::filesystem::equivalent(checkpoint, std::filesystem::absolute(file).parent_path(), error))
    throw UsageError(option + " " + file + " is in the directory " + checkpoint + ", which the command reads: write elsewhere");
}

// refuse_file_in for each (option, file) of a command's outputs.
inline void refuse_files_in(const std::string& checkpoint, NamedFiles outputs) {
  for (const auto& [option, file] : outputs) refuse_file_in(checkpoint, option, *file);
}

// Whether two paths name one file: the same existing file (links included), or the same new name as
// staging resolves it (core/atomic_file.hpp).
inline bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  if (std::filesystem::equivalent(a, b, error)) return true;
  return resolved_output_path(a) == resolved_output_path(b);
}

// A command's output files: no two are one file (the second would silently replace the first),
// and none is one of the files it reads (`inputs`), which writing it would replace. Only regular
// files and new names are compared: "-", /dev/stdout, /dev/null or a FIFO are written into, never
// replaced, and may take several outputs. Called before the work, with every name the command
// will stage (derived ones too), so a refusal never comes after a long run.
inline void refuse_overlapping_files(const FileList& outputs, const FileList& inputs) {
  const auto given = [](const std::string& file) {
    std::error_code error;
    const auto status = std::filesystem::status(file, error);
    return !file.empty() && file != "-" && (!std::filesystem::exists(status) || std::filesystem::is_regular_file(status));
  };
  for (const auto& [option, file] : outputs) require_writable_target(file, option);
  for (auto out = outputs.begin(); out != outputs.end(); ++out) {
    if (!given(out->second)) continue;
    for (auto other = outputs.begin(); other != out; ++other)
      if (given(other->second) && same_file(out->second, other->second))
        throw UsageError(out->first + " " + out->second + " is also " + other->first + "'s file: give each output its own file");
    for (const auto& [option, input] : inputs)
      if (!input.empty() && same_file(out->second, input))
        throw UsageError(out->first + " " + out->second + " is the file " + option + " reads: write elsewhere");
  }
}

inline FileList file_list(NamedFiles files) {
  FileList list;
  for (const auto& [option, file] : files) list.emplace_back(option, *file);
  return list;
}

inline void refuse_overlapping_files(NamedFiles outputs, NamedFiles inputs) {
  refuse_overlapping_files(file_list(outputs), file_list(inputs));
}

// Each non-empty output's directory exists (else a UsageError naming the option), checked before the work.
inline void require_output_directories(const FileList& outputs) {
  for (const auto& [option, file] : outputs)
    if (!file.empty()) require_directory(option, std::filesystem::absolute(file).parent_path());
}

// A command's report files: each one's directory exists, none lies in a directory it reads
// (`read`: its models' and corpus's, empty strings skipped), and none is another's file or one of
// `inputs`.
inline void require_report_files(NamedFiles files, std::initializer_list<std::string> read, NamedFiles inputs) {
  require_output_directories(file_list(files));
  for (const std::string& dir : read) refuse_files_in(dir, files);
  refuse_overlapping_files(files, inputs);
}

}  // namespace qkvlab::cli
