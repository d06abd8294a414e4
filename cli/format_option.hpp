// The one `--format` option of every subcommand that prints a result: how stdout renders it,
// `table` (or `text`, where the result is prose or generated text) for a reader and `json`
// (results/value.hpp) for a program.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace qkvlab::cli {

enum class Readable { table, text };  // what the reader's rendering is called

inline CLI::Option* add_format_option(CLI::App* cmd, std::string& format, Readable readable = Readable::table) {
  const std::string reader = readable == Readable::table ? "table" : "text";
  return cmd->add_option("--format", format, "Output on stdout: " + reader + " or json")
      ->check(CLI::IsMember({reader, std::string("json")}))
      ->capture_default_str();
}

}  // namespace qkvlab::cli
