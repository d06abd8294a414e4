// Files appear whole or not at all, and a set of files all or none.
//
// A writer stages each file as a temporary in its target's directory, created
// exclusively under an unpredictable name (mkostemp: O_CREAT | O_EXCL, so a file
// or a symlink already at that name is never opened, let alone followed), and
// fills it through the descriptor mkostemp returned, never by name. commit()
// renames every staged file over its target: all temporaries first, then the
// renames, so a failure or a kill while staging leaves every target as it was.
// A set destroyed before commit() removes its temporaries.
//
// Temporary names are ".qkvlab-tmp.<pid>.<target name>.XXXXXX". A killed run
// leaves such files behind; the first staging into a directory removes the ones
// there whose process has ended (regular files owned by this user, never
// following a symlink). Errors are std::runtime_error("cannot write KIND file
// PATH: reason"), one line.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace qkvlab {

class StagedFiles {
 public:
  StagedFiles() = default;
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;
  ~StagedFiles();  // removes the temporaries of a set not committed

  // Creates the temporary for `path` and calls fill(fd) to write it (fd is open
  // for writing, close-on-exec; fill must not close it). Throws, having removed
  // the temporary, when the fill throws or the file cannot be created or written.
  void add(const std::filesystem::path& path, std::string_view kind, const std::function<void(int fd)>& fill);
  void add_bytes(const std::filesystem::path& path, std::string_view kind, std::string_view bytes);

  // Renames every staged file over its target, in the order staged. Targets
  // that are directories are refused before any rename.
  void commit();

  // The temporaries staged so far (for tests).
  std::vector<std::filesystem::path> temporaries() const;

 private:
  struct Staged {
    std::filesystem::path target, temporary;
    std::string kind;
  };
  std::vector<Staged> staged_;
  bool committed_ = false;
};

// One file, staged and committed.
void write_atomically(const std::filesystem::path& path, std::string_view kind, const std::function<void(int fd)>& fill);
void write_bytes_atomically(const std::filesystem::path& path, std::string_view kind, std::string_view bytes);

// Writes all of `bytes` to fd (retrying short writes); throws std::runtime_error.
void write_all(int fd, std::string_view bytes);

// True for a name staged files use (".qkvlab-tmp.<pid>.…").
bool is_temporary_name(std::string_view file_name);

// Removes the leftovers of ended runs from `directory` (see above); returns how many.
// Called by the first staging into each directory; exposed for tests.
int remove_stale_temporaries(const std::filesystem::path& directory);

}  // namespace qkvlab
