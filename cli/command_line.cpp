// How qkvlab's command line is read and how its errors are reported (cli/command_line.hpp).
#include "cli/command_line.hpp"

#include "core/json_text.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

namespace qkvlab::cli {

// A command's exit status once its output has reached standard output: 3, with one line, when
// writing it failed (a full disk, a closed pipe), so a redirected report is never lost with exit 0.
int flushed(int status) {
  errno = 0;
  std::cout.flush();
  if (std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
  const int error = errno;
  std::cerr << "qkvlab: error: cannot write standard output" << (error ? std::string(": ") + std::strerror(error) : "")
            << "\n";
  return 3;
}

// Messages are one line of text: a newline or carriage return inside one (from a library) becomes
// a space, and any other control byte, or a byte that is not part of valid UTF-8 (a binary file's
// bytes quoted in a message), is written as \xNN.
std::string one_line(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = qkvlab::utf8_sequence_length(text, i);
    if (n > 1 || (n == 1 && c >= 0x20 && c != 0x7f)) {
      out.append(text, i, n), i += n;
      continue;
    }
    char hex[5];
    std::snprintf(hex, sizeof hex, "\\x%02x", c);
    out += c == '\n' || c == '\r' ? std::string(" ") : std::string(hex);
    ++i;
  }
  return out;
}

// A file system error on a path the user gave (a symbolic link loop, a missing or unreadable
// file, a path through a non-directory, one on a read-only file system) is a usage error; others
// (a full disk) are not.
bool is_usage_error(const std::filesystem::filesystem_error& e) {
  const int code = e.code().value();
  return code == ELOOP || code == ENOENT || code == ENOTDIR || code == EACCES || code == ENAMETOOLONG ||
         code == EISDIR || code == EEXIST || code == EPERM || code == EROFS;
}

// "PATH: reason", without the library's "filesystem error: cannot …" wording.
std::string describe(const std::filesystem::filesystem_error& e) {
  const std::string path = e.path1().empty() ? "" : e.path1().string() + ": ";
  return path + e.code().message() + (e.path2().empty() ? "" : " (and " + e.path2().string() + ")");
}

// Where a subcommand is required, the first word that is not an option must name
// one; CLI11 would report "A subcommand is required" for a misspelt one.
std::optional<std::string> unknown_subcommand(CLI::App& app, int argc, char** argv) {
  CLI::App* current = &app;
  std::string path = "qkvlab";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return std::nullopt;  // options: CLI11 reports what follows
    const auto subs = current->get_subcommands([](const CLI::App*) { return true; });
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* s : subs) {
      if (s->check_name(word)) next = s;
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (next) {
      current = next;
      path += " " + word;
      continue;
    }
    if (current->get_require_subcommand_min() == 0 || subs.empty()) return std::nullopt;
    return "unknown command '" + word + "' after '" + path + "' (one of: " + names + ")";
  }
  return std::nullopt;
}

// An empty value names nothing: refused for every option and argument of the command run but the text of
// --prompt (no path, name or number is "": `verify --checkpoint ""` ran the random-weight claims, exit 0,
// and `lm init ""` failed with "Invalid argument", exit 3).
std::optional<std::string> empty_value(const CLI::App& app) {
  for (const CLI::App* command = &app; command;) {
    for (const CLI::Option* o : command->get_options())
      if (o->count() > 0 && o->get_name() != "--prompt")
        for (const std::string& value : o->results())
          if (value.empty()) return o->get_name() + ": an empty value (\"\") names nothing";
    const std::vector<CLI::App*> parsed = command->get_subcommands();
    command = parsed.empty() ? nullptr : parsed.front();
  }
  return std::nullopt;
}

std::optional<std::string> unexpected_option(const CLI::App& app) {
  const CLI::App* command = &app;
  std::string path = "qkvlab";
  for (auto parsed = command->get_subcommands(); !parsed.empty(); parsed = command->get_subcommands()) {
    command = parsed.front();
    path += " " + command->get_name();
  }
  for (const std::string& word : command->remaining()) {
    if (word == "--") break;  // what follows is positional
    if (word.size() > 1 && word[0] == '-' && !std::isdigit(static_cast<unsigned char>(word[1])) && word[1] != '.')
      return "'" + word.substr(0, word.find('=')) + "' is not an option of '" + path + "' (see '" + path + " --help')";
  }
  return std::nullopt;
}

namespace {

// One argument as the shell reads it back. A control byte or a byte that starts no well-formed UTF-8
// sequence would be written by the text outputs as the four characters \xNN, which single quotes keep
// literally: such a word is ANSI-C quoted, $'…\xNN…', where the shell reads \xNN as the byte.
std::string shell_word(const std::string& word) {
  auto plain = [](unsigned char c) { return std::isalnum(c) || std::strchr("_./:=,+@%-", c) != nullptr; };
  if (!word.empty() && std::all_of(word.begin(), word.end(), plain)) return word;
  // The word's pieces: a well-formed UTF-8 sequence or one byte; `raw` marks a control or stray byte.
  struct Piece { std::string text; bool raw; };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < word.size();) {
    const auto c = static_cast<unsigned char>(word[i]);
    const std::size_t n = c < 0x80 ? 1 : qkvlab::utf8_sequence_length(word, i);
    const bool raw = n == 0 || c < 0x20 || c == 0x7f;
    pieces.push_back({word.substr(i, n == 0 ? 1 : n), raw});
    i += n == 0 ? 1 : n;
  }
  const bool ansi = std::any_of(pieces.begin(), pieces.end(), [](const Piece& p) { return p.raw; });
  std::string quoted = ansi ? "$'" : "'";
  for (const Piece& p : pieces) {
    if (p.raw) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(p.text[0]));
      quoted += hex;
    } else if (p.text == "'") {
      quoted += ansi ? "\\'" : "'\\''";  // $'…': \' is a quote; '…': ' closes, \' is one, ' reopens
    } else if (p.text == "\\" && ansi) {
      quoted += "\\\\";
    } else {
      quoted += p.text;
    }
  }
  return quoted + "'";
}

}  // namespace

std::string command_line_of(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) line += (i == 0 ? "" : " ") + shell_word(argv[i]);
  return line;
}

}  // namespace qkvlab::cli
