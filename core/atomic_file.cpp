#include "core/atomic_file.hpp"

#include "core/errors.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace qkvlab {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = ".qkvlab-tmp.";

std::string errno_text(int error) { return std::strerror(error); }

[[noreturn]] void fail(std::string_view kind, const fs::path& path, const std::string& why) {
  throw std::runtime_error("cannot write " + std::string(kind) + " file " + path.string() + ": " + why);
}

[[noreturn]] void refuse(std::string_view kind, const fs::path& path, const std::string& why) {
  throw UsageError("cannot write " + std::string(kind) + " file " + path.string() + ": " + why);
}

// The descriptor a name denotes by itself ("-", /dev/stdout, /dev/stderr,
// /dev/fd/N, /proc/self/fd/N), or -1.
int own_descriptor(const fs::path& path) {
  const std::string name = path.string();
  if (name == "-" || name == "/dev/stdout") return 1;
  if (name == "/dev/stderr") return 2;
  for (const std::string_view prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    if (name.rfind(prefix, 0) != 0) continue;
    int fd = -1;
    const char* first = name.data() + prefix.size();
    const char* last = name.data() + name.size();
    const auto [end, ec] = std::from_chars(first, last, fd);
    if (ec == std::errc() && end == last && first != last) return fd;
  }
  return -1;
}

// Whether the target is streamed into (a FIFO or a character device) rather than
// staged (a regular file, or nothing yet); anything else is refused.
bool streamed(const fs::path& path, std::string_view kind) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return false;  // a new name (or an error the staging reports)
  if (S_ISREG(st.st_mode)) return false;
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) return true;
  if (S_ISLNK(st.st_mode))
    refuse(kind, path, "it is a symbolic link (qkvlab neither follows nor replaces one; name its target instead)");
  refuse(kind, path, S_ISDIR(st.st_mode) ? "it is a directory" : S_ISBLK(st.st_mode) ? "it is a block device" : "it is a socket");
}

// Copies a streamed target's staged bytes into it: its own descriptor, or the
// FIFO or device opened without creating, truncating or following anything.
void deliver(int memory, int descriptor, const fs::path& target) {
  int out = descriptor;
  if (out < 0) {
    out = ::open(target.c_str(), O_WRONLY | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
    if (out < 0) throw std::runtime_error(errno_text(errno));
    struct stat st {};
    if (::fstat(out, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode))) {
      ::close(out);
      throw std::runtime_error("it is no longer a FIFO or a device");
    }
  }
  std::string chunk(1 << 20, '\0');
  try {
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(memory, chunk.data(), chunk.size(), at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(errno_text(errno));
      if (n == 0) break;
      write_all(out, std::string_view(chunk.data(), std::size_t(n)));
      at += n;
    }
  } catch (...) {
    if (descriptor < 0) ::close(out);
    throw;
  }
  if (descriptor < 0 && ::close(out) != 0) throw std::runtime_error(errno_text(errno));
}

// The process's umask, read without changing it (/proc/self/status, Linux ≥ 4.7),
// else by setting and restoring it once.
mode_t process_umask() {
  static const mode_t mask = [] {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Umask:", 0) == 0) return mode_t(std::stoul(line.substr(6), nullptr, 8));
    const mode_t old = ::umask(022);
    ::umask(old);
    return old;
  }();
  return mask;
}

fs::path directory_of(const fs::path& path) {
  const fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// Cleans each directory once per process, at its first staging.
void clean_once(const fs::path& directory) {
  static std::mutex mutex;
  static std::set<std::string> cleaned;
  std::error_code error;
  const fs::path key = fs::weakly_canonical(directory, error);
  std::lock_guard lock(mutex);
  if (!cleaned.insert((error ? directory : key).string()).second) return;
  remove_stale_temporaries(directory);
}

// The pid in ".qkvlab-tmp.<pid>.…", or 0.
pid_t pid_of(std::string_view name) {
  if (!is_temporary_name(name)) return 0;
  name.remove_prefix(kPrefix.size());
  pid_t pid = 0;
  for (char c : name) {
    if (c == '.') break;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

// An existing `path` can be removed or replaced (renamed over) by this process: its directory is
// writable and searchable, and in a sticky directory (/tmp) the file or the directory is this user's.
// Checked when the file is staged, so that commit() does not fail on it after other targets were
// replaced (review r27, r28: the new CSV beside the old figure). `verb`: "removed" or "replaced".
void require_replaceable(std::string_view kind, const fs::path& path, const char* verb) {
  struct stat file {}, directory {};
  if (::lstat(path.c_str(), &file) != 0) return;  // nothing there: nothing to remove
  const fs::path dir = directory_of(path);
  const bool sticky = ::stat(dir.c_str(), &directory) == 0 && (directory.st_mode & S_ISVTX) != 0;
  const uid_t me = ::geteuid();
  if (::access(dir.c_str(), W_OK | X_OK) != 0 ||
      (sticky && me != 0 && file.st_uid != me && directory.st_uid != me))
    refuse(kind, path, std::string("the older file cannot be ") + verb + " (its directory " + dir.string() +
                           " does not let this user change it)" +
                           (std::string(verb) == "removed" ? ", and it would outlive the new numbers" : ""));
}

}  // namespace

void require_writable_target(const fs::path& path, std::string_view kind) {
  if (!path.empty() && own_descriptor(path) < 0) streamed(path, kind);
}

bool is_temporary_name(std::string_view name) {
  if (name.substr(0, kPrefix.size()) != kPrefix) return false;
  name.remove_prefix(kPrefix.size());
  std::size_t digits = 0;
  while (digits < name.size() && digits < 10 && name[digits] >= '0' && name[digits] <= '9') ++digits;
  return digits > 0 && digits < name.size() && name[digits] == '.';
}

int remove_stale_temporaries(const fs::path& directory) {
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) return 0;
  int removed = 0;
  const int dir_fd = ::dirfd(dir);
  while (const dirent* entry = ::readdir(dir)) {
    const pid_t pid = pid_of(entry->d_name);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its process may still be writing it
    struct stat st {};
    if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::unlinkat(dir_fd, entry->d_name, 0) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

void write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(errno_text(errno));
    }
    bytes.remove_prefix(std::size_t(n));
  }
}

StagedFiles::~StagedFiles() {
  for (const Staged& s : staged_) {
    if (s.memory >= 0) ::close(s.memory);
    else if (!committed_ && !s.temporary.empty()) ::unlink(s.temporary.c_str());
  }
}

void StagedFiles::add(const fs::path& path, std::string_view kind, const std::function<void(int fd)>& fill) {
  if (committed_) throw std::logic_error("StagedFiles: add after commit");
  const int descriptor = own_descriptor(path);
  if (descriptor >= 0 || streamed(path, kind)) return add_streamed(path, kind, descriptor, fill);
  if (path.filename().empty()) fail(kind, path, "no file name");
  const fs::path directory = directory_of(path);
  refuse_second_staging(kind, path);
  require_replaceable(kind, path, "replaced");
  clean_once(directory);
  std::string name = path.filename().string().substr(0, 96);
  std::string pattern =
      (directory / (std::string(kPrefix) + std::to_string(::getpid()) + "." + name + ".XXXXXX")).string();
  const int fd = ::mkostemp(pattern.data(), O_CLOEXEC);
  if (fd < 0) fail(kind, path, "cannot create a temporary file in " + directory.string() + " (" + errno_text(errno) + ")");
  const fs::path temporary = pattern;
  try {
    if (::fchmod(fd, 0666 & ~process_umask()) != 0) throw std::runtime_error(errno_text(errno));
    fill(fd);
    // On disk before the rename makes it the target: after a crash the target is the old file or
    // the new one, never the new name over bytes not yet written.
    if (::fsync(fd) != 0) throw std::runtime_error(errno_text(errno));
  } catch (const std::exception& e) {
    ::close(fd);
    ::unlink(temporary.c_str());
    const std::string what = e.what();
    if (what.rfind("cannot write ", 0) == 0) throw;  // already names the file
    fail(kind, path, what);
  }
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(kind, path, errno_text(error));
  }
  staged_.push_back({path, temporary, std::string(kind)});
}


void StagedFiles::withdraw(const fs::path& path, std::string_view kind) {
  if (committed_) throw std::logic_error("StagedFiles: withdraw after commit");
  if (own_descriptor(path) >= 0 || streamed(path, kind)) return;  // written into, never replaced: nothing to remove
  refuse_second_staging(kind, path);
  require_replaceable(kind, path, "removed");
  staged_.push_back({path, {}, std::string(kind), -1, -1, true});
}

void StagedFiles::add_streamed(const fs::path& path, std::string_view kind, int descriptor,
                               const std::function<void(int fd)>& fill) {
  const int memory = ::memfd_create("qkvlab-output", MFD_CLOEXEC);
  if (memory < 0) fail(kind, path, "cannot stage its bytes in memory (" + errno_text(errno) + ")");
  try {
    fill(memory);
  } catch (const std::exception& e) {
    ::close(memory);
    const std::string what = e.what();
    if (what.rfind("cannot write ", 0) == 0) throw;  // already names the file
    fail(kind, path, what);
  }
  staged_.push_back({path, {}, std::string(kind), memory, descriptor});
}

fs::path resolved_output_path(const fs::path& path) {
  std::error_code error;
  const fs::path directory = fs::weakly_canonical(fs::absolute(directory_of(path)), error);
  return (error ? fs::absolute(directory_of(path)).lexically_normal() : directory) / path.filename();
}

// One set never stages a file twice: the second rename would silently replace the first output
// (say --out and --junit given the same path). Names are compared with their directories resolved.
void StagedFiles::refuse_second_staging(std::string_view kind, const fs::path& path) const {
  const fs::path target = resolved_output_path(path);
  for (const Staged& s : staged_)
    if ((!s.temporary.empty() || s.withdrawn) && resolved_output_path(s.target) == target)
      refuse(kind, path, "it is also the " + s.kind + " output (" + s.target.string() + "): give each output its own file");
  std::error_code error;
  for (const auto& [input, option] : inputs_)
    if (resolved_output_path(input) == target || fs::equivalent(input, path, error))
      refuse(kind, path, "it is the file " + option + " reads: write elsewhere");
}

void StagedFiles::protect(const fs::path& input, std::string_view option) {
  if (!input.empty()) inputs_.emplace_back(input, std::string(option));
}

void StagedFiles::add_bytes(const fs::path& path, std::string_view kind, std::string_view bytes) {
  add(path, kind, [bytes](int fd) { write_all(fd, bytes); });
}

void StagedFiles::commit() {
  if (committed_) return;
  for (const Staged& s : staged_)
    if (s.descriptor < 0 && streamed(s.target, s.kind) != (s.memory >= 0))
      refuse(s.kind, s.target, "it was replaced while qkvlab was writing it");
  for (std::size_t k = 0; k < staged_.size(); ++k) {
    const Staged& s = staged_[k];
    try {
      if (s.memory >= 0) deliver(s.memory, s.descriptor, s.target);
      else if (s.withdrawn) {
        if (::unlink(s.target.c_str()) != 0 && errno != ENOENT)
          throw std::runtime_error("cannot remove the older file (" + errno_text(errno) + ")");
      } else if (::rename(s.temporary.c_str(), s.target.c_str()) != 0)
        throw std::runtime_error("cannot rename the temporary file (" + errno_text(errno) + ")");
    } catch (const std::exception& e) {
      std::string done;
      for (std::size_t j = 0; j < k; ++j) done += (j ? ", " : "") + staged_[j].target.string();
      for (std::size_t j = k; j < staged_.size(); ++j)
        if (staged_[j].memory < 0 && !staged_[j].temporary.empty()) ::unlink(staged_[j].temporary.c_str());
      committed_ = true;
      fail(s.kind, s.target, e.what() + (done.empty() ? std::string() : "; already written: " + done));
    }
  }
  committed_ = true;
  sync_directories();
}

// The renames on disk: each target's directory synced once (best effort: the files are written
// whole either way, and a directory that cannot be opened for reading is no error).
void StagedFiles::sync_directories() const {
  std::set<fs::path> done;
  for (const Staged& s : staged_) {
    if (s.memory >= 0 || !done.insert(directory_of(s.target)).second) continue;
    const int dir = ::open(directory_of(s.target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) continue;
    ::fsync(dir);
    ::close(dir);
  }
}

std::vector<fs::path> StagedFiles::temporaries() const {
  std::vector<fs::path> out;
  for (const Staged& s : staged_)
    if (s.memory < 0 && !s.withdrawn) out.push_back(s.temporary);
  return out;
}

void write_atomically(const fs::path& path, std::string_view kind, const std::function<void(int fd)>& fill) {
  StagedFiles files;
  files.add(path, kind, fill);
  files.commit();
}

void write_bytes_atomically(const fs::path& path, std::string_view kind, std::string_view bytes) {
  StagedFiles files;
  files.add_bytes(path, kind, bytes);
  files.commit();
}

DirectoryLock::DirectoryLock(const fs::path& directory, std::string_view what, const std::string& name) {
  const fs::path path = directory / name;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) throw UsageError("cannot lock " + directory.string() + ": cannot open " + path.string() + " (" + errno_text(errno) + ")");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[128] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string who;  // the holder's note, printable characters only (the file is anyone's to write)
    for (ssize_t k = 0; k < n && holder[k] != '\n'; ++k) who += holder[k] >= 32 && holder[k] < 127 ? holder[k] : '?';
    if (error == EWOULDBLOCK)
      throw UsageError(directory.string() + " is in use by " + (who.empty() ? "another process" : who) +
                       ": one writer at a time");
    throw UsageError("cannot lock " + directory.string() + " (" + errno_text(error) + ")");
  }
  const std::string holder = std::string(what) + " (pid " + std::to_string(::getpid()) + ")\n";
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, holder.data(), holder.size(), 0) < 0) {
    // the lock holds without its note; a second writer is refused all the same
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace qkvlab
