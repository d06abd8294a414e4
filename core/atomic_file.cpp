#include "core/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

}  // namespace

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
  if (committed_) return;
  for (const Staged& s : staged_) ::unlink(s.temporary.c_str());
}

void StagedFiles::add(const fs::path& path, std::string_view kind, const std::function<void(int fd)>& fill) {
  if (committed_) throw std::logic_error("StagedFiles: add after commit");
  if (path.filename().empty()) fail(kind, path, "no file name");
  const fs::path directory = directory_of(path);
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

void StagedFiles::add_bytes(const fs::path& path, std::string_view kind, std::string_view bytes) {
  add(path, kind, [bytes](int fd) { write_all(fd, bytes); });
}

void StagedFiles::commit() {
  if (committed_) return;
  for (const Staged& s : staged_) {
    struct stat st {};
    if (::lstat(s.target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail(s.kind, s.target, "it is a directory");
  }
  for (std::size_t k = 0; k < staged_.size(); ++k) {
    const Staged& s = staged_[k];
    if (::rename(s.temporary.c_str(), s.target.c_str()) != 0) {
      const int error = errno;
      std::string done;
      for (std::size_t j = 0; j < k; ++j) done += (j ? ", " : "") + staged_[j].target.string();
      for (std::size_t j = k; j < staged_.size(); ++j) ::unlink(staged_[j].temporary.c_str());
      committed_ = true;
      fail(s.kind, s.target,
           "cannot rename the temporary file (" + errno_text(error) + ")" +
               (done.empty() ? "" : "; already written: " + done));
    }
  }
  committed_ = true;
}

std::vector<fs::path> StagedFiles::temporaries() const {
  std::vector<fs::path> out;
  for (const Staged& s : staged_) out.push_back(s.temporary);
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

}  // namespace qkvlab
