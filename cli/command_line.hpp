// How qkvlab's command line is read before a subcommand runs, and how its errors are reported:
// one line per message, the exit status of a file system error, the subcommand word and the empty
// values refused, the exit status once standard output is written. main.cpp uses these.
#pragma once

#include <CLI/CLI.hpp>

#include <filesystem>
#include <optional>
#include <string>

namespace qkvlab::cli {

// A command's exit status once its output has reached standard output: 3, with one line, when
// writing it failed (a full disk, a closed pipe), so a redirected report is never lost with exit 0.
int flushed(int status);

// The program's arguments as a shell reads them back: a word with a character outside
// [A-Za-z0-9_./:=,+@%-] (a space, a quote, a glob) single-quoted, one with a control byte or a byte
// that is not UTF-8 $'…\xNN…', so the recorded command reruns as written.
std::string command_line_of(int argc, char** argv);

// The message as one line: newlines become spaces, other control bytes and invalid UTF-8 \xNN.
std::string one_line(const std::string& text);

// Whether a file system error on a path the user gave is a usage error (exit 2) rather than exit 3.
bool is_usage_error(const std::filesystem::filesystem_error& e);

// "PATH: reason", without the library's "filesystem error: cannot …" wording.
std::string describe(const std::filesystem::filesystem_error& e);

// The message for a first word that names no subcommand where one is required; nullopt otherwise.
std::optional<std::string> unknown_subcommand(CLI::App& app, int argc, char** argv);

// The message for an empty value given to an option or argument of the command run (--prompt's
// empty text aside); nullopt when there is none.
std::optional<std::string> empty_value(const CLI::App& app);

// The message for an option the command run does not have, reported before any other parse error:
// `kv --threads 1 DIR` read 1 as DIR and said "Directory does not exist: 1"; nullopt when every option
// given was the command's.
std::optional<std::string> unexpected_option(const CLI::App& app);

}  // namespace qkvlab::cli
