// Runs a shell command for the CLI tests: its exit status, stdout and stderr.
// stderr goes through a temporary file of its own (ctest runs test cases as
// parallel processes), removed afterwards. Redirections inside the command
// apply first: run_command("x 2>&1") returns stderr in out. run_bounded and expect_usage_error:
// the CLI tests' bounded run and their check of a usage error; usage_error: a library call's.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "core/errors.hpp"

namespace qkvlab::test_support {

struct CommandResult {
  int status = -1;  // exit status; -1 when the process did not exit normally
  std::string out, err;
};

// Single-quoted for the shell (the paths used in the tests contain no quote).
// (Built with += : "'" + string trips GCC 12's false -Wrestrict warning.)
inline std::string shell_quoted(const std::filesystem::path& p) {
  std::string q = "'";
  for (char c : p.string()) q += c == '\'' ? std::string("'\\''") : std::string(1, c);  // ' closes, \' is one, ' reopens
  q += '\'';
  return q;
}

inline CommandResult run_command(const std::string& command) {
  std::string err_file = (std::filesystem::temp_directory_path() / "qkvlab_test_stderr_XXXXXX").string();
  const int fd = mkstemp(err_file.data());
  if (fd < 0) return {};
  close(fd);
  CommandResult r;
  if (FILE* pipe = popen(("{ " + command + "; } 2>" + shell_quoted(err_file)).c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.out.append(buf, n);
    const int raw = pclose(pipe);
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  }
  std::ostringstream text;
  text << std::ifstream(err_file).rdbuf();
  r.err = text.str();
  std::filesystem::remove(err_file);
  return r;
}

// The qkvlab program under test with these arguments.
inline CommandResult run_qkvlab(const std::string& args) { return run_command(shell_quoted(QKVLAB_BINARY) + " " + args); }

// qkvlab ARGS under `timeout`: a run past `seconds` is killed and reported as status 124.
inline CommandResult run_bounded(const std::string& args, int seconds = 120) {
  return run_command("timeout -s KILL " + std::to_string(seconds) + " " + shell_quoted(QKVLAB_BINARY) + " " + args);
}

inline int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

// A usage error: exit 2, one line on stderr starting "qkvlab: error: " and holding `names`, nothing on stdout.
inline void expect_usage_error(const CommandResult& r, const std::string& args, const std::string& names) {
  EXPECT_EQ(r.status, 2) << args << ": " << r.err;
  EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
  EXPECT_EQ(r.err.rfind("qkvlab: error: ", 0), 0u) << args << ": " << r.err;
  EXPECT_NE(r.err.find(names), std::string::npos) << args << ": " << r.err;
  EXPECT_TRUE(r.out.empty()) << args << ": " << r.out;
}

// The message of the UsageError f throws ("" when it throws none).
template <class F> std::string usage_error(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace qkvlab::test_support
