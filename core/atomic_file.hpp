// Files appear whole or not at all, and a set of files all or none.
//
// A writer stages each file as a temporary in its target's directory, created
// exclusively under an unpredictable name (mkostemp: O_CREAT | O_EXCL, so a file
// or a symlink already at that name is never opened, let alone followed), and
// fills it through the descriptor mkostemp returned, never by name. commit()
// renames every staged file over its target: all temporaries first (each synced
// to disk), then the renames (their directories synced after), so a failure, a
// kill or a crash while staging leaves every target as it was.
// A set destroyed before commit() removes its temporaries.
//
// Only a regular file or a new name is staged and renamed. A FIFO or a
// character device (a pipe, /dev/null, a terminal) is written in place, never
// replaced: its bytes are staged in memory (memfd) and copied into it by
// commit(), after every rename before it. "-", /dev/stdout, /dev/stderr and
// /dev/fd/N (/proc/self/fd/N) name this process's own descriptors and are
// written to them. A symbolic link as the target is refused: it is neither
// followed nor replaced (qkvlab creates none, so any link there is someone
// else's); so are a directory, a block device and a socket. These refusals are
// UsageErrors ("cannot write KIND file PATH: it is a symbolic link …"), made
// when the file is staged and again before the first rename. So is a second file
// of one set staged at the path of a first (two outputs given one name), and a
// file staged at the path of an input the set protects.
//
// A set may also withdraw a target it does not write this time (a figure that could not be drawn):
// commit() removes the older file there, in its turn among the renames, so it never outlives the
// files written beside it. Refused like a staged file; a FIFO or device is left as it is.
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
#include <utility>
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

  // Removes the regular file at `path`, if any, when the set is committed (see above), not before.
  void withdraw(const std::filesystem::path& path, std::string_view kind);

  // `input`, a file the command reads (its `option`'s, e.g. "--tokens"): staging a file at its path
  // later is a UsageError, so an output whose name is derived from another (analyze all's
  // STEM-TABLE.csv, a figure's STEM.svg) never replaces an input. An empty path is ignored.
  void protect(const std::filesystem::path& input, std::string_view option);

  // Renames every staged file over its target (or writes it into its FIFO,
  // device or descriptor), in the order staged. Every target is checked again
  // before the first rename (see above).
  void commit();

  // The temporaries staged so far (for tests; a streamed target has none).
  std::vector<std::filesystem::path> temporaries() const;

 private:
  void add_streamed(const std::filesystem::path& path, std::string_view kind, int descriptor,
                    const std::function<void(int fd)>& fill);
  void sync_directories() const;
  void refuse_second_staging(std::string_view kind, const std::filesystem::path& path) const;
  struct Staged {
    std::filesystem::path target, temporary;  // temporary empty: streamed
    std::string kind;
    int memory = -1;      // a streamed target's bytes (memfd), open until destruction
    int descriptor = -1;  // for "-", /dev/stdout, /dev/fd/N: that descriptor
    bool withdrawn = false;  // withdraw()'s: the target is removed, nothing written
  };
  std::vector<Staged> staged_;
  std::vector<std::pair<std::filesystem::path, std::string>> inputs_;  // protect()'s
  bool committed_ = false;
};

// The refusals staging makes of `path`'s kind (a symbolic link, a directory, a block device, a
// socket: UsageErrors, see above), made before any work, so a long run never ends in one.
void require_writable_target(const std::filesystem::path& path, std::string_view kind);

// The file a path names as staging compares targets: its directory resolved (symbolic links, "..",
// relative to the working directory), its own name as given. Two outputs are one file when these agree.
std::filesystem::path resolved_output_path(const std::filesystem::path& path);

// One file, staged and committed.
void write_atomically(const std::filesystem::path& path, std::string_view kind, const std::function<void(int fd)>& fill);
void write_bytes_atomically(const std::filesystem::path& path, std::string_view kind, std::string_view bytes);

// Writes all of `bytes` to fd (retrying short writes); throws std::runtime_error.
void write_all(int fd, std::string_view bytes);

// One writer per directory: an exclusive flock on DIR/.qkvlab-lock (or DIR/NAME), held from
// construction to destruction (and released by the kernel when the process
// dies, so a killed run never leaves it stale). The holder's PID and `what`
// are written into the file; a second DirectoryLock on the directory, in this
// or another process, fails at once with a UsageError naming them ("DIR is in
// use by lm train (pid 1234)"). The lock file itself is never followed when it
// is a symlink.
class DirectoryLock {
 public:
  DirectoryLock(const std::filesystem::path& directory, std::string_view what, const std::string& name = ".qkvlab-lock");
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  ~DirectoryLock();

 private:
  int fd_ = -1;
};

// True for a name staged files use (".qkvlab-tmp.<pid>.…").
bool is_temporary_name(std::string_view file_name);

// Removes the leftovers of ended runs from `directory` (see above); returns how many.
// Called by the first staging into each directory; exposed for tests.
int remove_stale_temporaries(const std::filesystem::path& directory);

}  // namespace qkvlab
