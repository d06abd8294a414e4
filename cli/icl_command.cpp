// `qkvlab icl`: the in-context linear-regression experiments behind the SkipV1
// theorem (icl-skipv1.md). The parent only groups subcommands: each group lives
// in its own file (icl_theory_command.cpp: theory and lemmas; the training
// experiments in theirs), is declared in commands.hpp and is passed to
// add_icl_command in main.cpp.
#include "cli/commands.hpp"

#include <memory>

namespace qkvlab::cli {

Command add_icl_command(CLI::App& app, const std::string& command_line, const std::vector<IclGroup>& groups) {
  auto* icl = app.add_subcommand("icl", "In-context linear regression of the SkipV1 theorem (icl-skipv1.md)");
  icl->footer("Tokens are columns: E = (x_1, y_1, ..., x_n, y_n, x_{n+1}), W* ~ N(W_0, I), y = W* x + eps.\n"
              "Exit status: that of the subcommand (0 success, 1 a check failed, 2 usage error).");
  icl->require_subcommand(1);
  auto subcommands = std::make_shared<std::vector<Command>>();
  for (const auto& group : groups)
    for (auto& c : group(*icl, command_line)) subcommands->push_back(std::move(c));
  return {icl, [subcommands] {
            for (const auto& c : *subcommands)
              if (c.app->parsed()) return c.run();
            return 2;  // unreachable: require_subcommand(1)
          }};
}

}  // namespace qkvlab::cli
