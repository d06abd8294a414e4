// qkvlab: one program, one subcommand per job. Exit status: 0 success, 1 a
// check failed, 2 a usage error (one-line message on stderr).
#include "cli/commands.hpp"
#include "core/errors.hpp"

#include <iostream>

int main(int argc, char** argv) {
  std::string command_line = argv[0];
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];

  CLI::App app{"qkvlab: numerical checks of the theory of modern attention architectures"};
  app.set_version_flag("--version", std::string("qkvlab ") + QKVLAB_VERSION);
  app.require_subcommand(1);
  const std::vector<qkvlab::cli::Command> commands{
      qkvlab::cli::add_verify_command(app, command_line),
      qkvlab::cli::add_absorb_command(app, command_line),
      qkvlab::cli::add_rmt_command(app, command_line),
      qkvlab::cli::add_lnorm_command(app, command_line),
      qkvlab::cli::add_transfer_command(app, command_line),
      qkvlab::cli::add_parent_command(
          app, "icl", "In-context linear regression of the SkipV1 theorem (icl-skipv1.md)",
          "Tokens are columns: E = (x_1, y_1, ..., x_n, y_n, x_{n+1}), W* ~ N(W_0, I), y = W* x + eps.\n"
          "Exit status: that of the subcommand (0 success, 1 a check failed, 2 usage error).",
          command_line, {qkvlab::cli::add_icl_theory_commands, qkvlab::cli::add_icl_train_commands}),
      qkvlab::cli::add_parent_command(
          app, "lm", "Transformer language models: GPT-2 and Llama families, every variant (docs/lm.md)",
          "Exit status: 0 success, 2 usage error (one line on stderr), 3 an unexpected error.", command_line,
          {qkvlab::cli::add_lm_init_commands, qkvlab::cli::add_lm_export_commands, qkvlab::cli::add_lm_eval_commands,
           qkvlab::cli::add_lm_train_commands, qkvlab::cli::add_lm_compare_commands}),
      qkvlab::cli::add_params_command(app, command_line),
      qkvlab::cli::add_kv_command(app, command_line),
      qkvlab::cli::add_data_command(app, command_line),
      qkvlab::cli::add_analyze_command(app, command_line),
      qkvlab::cli::add_probe_command(app, command_line),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "qkvlab: error: " << e.what() << " (see 'qkvlab --help')\n";
    return 2;
  }
  try {
    for (const auto& command : commands)
      if (command.app->parsed()) return command.run();
    return 2;  // unreachable: require_subcommand(1)
  } catch (const qkvlab::UsageError& e) {
    std::cerr << "qkvlab: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "qkvlab: error: " << e.what() << "\n";
    return 3;
  }
}
