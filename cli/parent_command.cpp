// A parent subcommand that only groups others (`qkvlab icl`, `qkvlab lm`):
// each group lives in its own file, is declared in commands.hpp and is passed
// to add_parent_command in main.cpp.
#include "cli/commands.hpp"

#include <memory>

namespace qkvlab::cli {

Command add_parent_command(CLI::App& app, const std::string& name, const std::string& help,
                           const std::string& footer, const std::string& command_line,
                           const std::vector<CommandGroup>& groups) {
  auto* parent = app.add_subcommand(name, help);
  parent->footer(footer);
  parent->require_subcommand(1);
  auto subcommands = std::make_shared<std::vector<Command>>();
  for (const auto& group : groups)
    for (auto& c : group(*parent, command_line)) subcommands->push_back(std::move(c));
  return {parent, [subcommands] {
            for (const auto& c : *subcommands)
              if (c.app->parsed()) return c.run();
            return 2;  // unreachable: require_subcommand(1)
          }};
}

}  // namespace qkvlab::cli
