// qkvlab: one program, one subcommand per job. Exit status: 0 success; 1 the
// subcommand's verdict is negative (verify: a check failed or a control did not
// fail; absorb: undecided; absorb fit, transfer: the expected separation not
// seen); 2 a usage error (one-line message on stderr); 3 any other error, a
// numerical failure (NumericalError) or out of memory included (one line too).
#include "cli/command_line.hpp"
#include "cli/commands.hpp"
#include "cli/fdim_command.hpp"
#include "core/errors.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <new>

namespace {

int run(int argc, char** argv) {
  using qkvlab::cli::describe, qkvlab::cli::empty_value, qkvlab::cli::flushed, qkvlab::cli::is_usage_error,
      qkvlab::cli::one_line, qkvlab::cli::unexpected_option, qkvlab::cli::unknown_subcommand;
  const std::string command_line = qkvlab::cli::command_line_of(argc, argv);

  CLI::App app{"qkvlab: numerical checks of the theory of modern attention architectures"};
  app.set_version_flag("--version", std::string("qkvlab ") + QKVLAB_VERSION);
  app.require_subcommand(1);
  const std::vector<qkvlab::cli::Command> commands{
      qkvlab::cli::add_verify_command(app, command_line),
      qkvlab::cli::add_absorb_command(app, command_line),
      qkvlab::cli::add_fdim_command(app, command_line),
      qkvlab::cli::add_rmt_command(app, command_line),
      qkvlab::cli::add_lnorm_command(app, command_line),
      qkvlab::cli::add_transfer_command(app, command_line),
      qkvlab::cli::add_parent_command(
          app, "icl", "In-context linear regression of the SkipV1 theorem (docs/math/icl.md)",
          "Tokens are columns: E = (x_1, y_1, ..., x_n, y_n, x_{n+1}), W* ~ N(W_0, I), y = W* x + eps.\n"
          "--w0-scale c means one thing in every icl subcommand: the prior mean W_0 = c I (icl theory: c times\n"
          "the --w0 matrix; icl lemmas: its second prior, run beside W_0 = 0).\n"
          "Exit status: that of the subcommand (0 success, 2 usage error, 3 a numerical failure or another error).",
          command_line, {qkvlab::cli::add_icl_theory_commands, qkvlab::cli::add_icl_lemmas_commands,
                          qkvlab::cli::add_icl_train_commands, qkvlab::cli::add_icl_anchor_commands}),
      qkvlab::cli::add_parent_command(
          app, "lm", "Transformer language models: GPT-2 and Llama families, every variant (docs/lm.md)",
          "Exit status: 0 success, 2 usage error (one line on stderr), 3 an unexpected error.", command_line,
          {qkvlab::cli::add_lm_init_commands, qkvlab::cli::add_lm_export_commands, qkvlab::cli::add_lm_eval_commands,
           qkvlab::cli::add_lm_generate_commands, qkvlab::cli::add_lm_train_commands, qkvlab::cli::add_lm_compare_commands,
           qkvlab::cli::add_lm_eliminate_commands, qkvlab::cli::add_lm_tokenize_commands}),
      qkvlab::cli::add_params_command(app, command_line),
      qkvlab::cli::add_kv_command(app, command_line),
      qkvlab::cli::add_data_command(app, command_line),
      qkvlab::cli::add_analyze_command(app, command_line),
      qkvlab::cli::add_probe_command(app, command_line),
      qkvlab::cli::add_reproduce_command(app, command_line),
  };
  if (const auto unknown = unknown_subcommand(app, argc, argv)) {
    std::cerr << "qkvlab: error: " << one_line(*unknown) << " (see 'qkvlab --help')\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return flushed(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return flushed(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return flushed(app.exit(e));
  } catch (const CLI::ParseError& e) {
    if (const auto unexpected = unexpected_option(app)) {
      std::cerr << "qkvlab: error: " << one_line(*unexpected) << "\n";
      return 2;
    }
    std::cerr << "qkvlab: error: " << one_line(e.what()) << " (see 'qkvlab --help')\n";
    return 2;
  }
  if (const auto empty = empty_value(app)) {
    std::cerr << "qkvlab: error: " << *empty << " (see 'qkvlab --help')\n";
    return 2;
  }
  try {
    for (const auto& command : commands)
      if (command.app->parsed()) return flushed(command.run());
    return 2;  // unreachable: require_subcommand(1)
  } catch (const qkvlab::UsageError& e) {
    std::cerr << "qkvlab: error: " << one_line(e.what()) << "\n";
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "qkvlab: error: " << one_line(describe(e)) << "\n";
    return is_usage_error(e) ? 2 : 3;
  } catch (const std::bad_alloc&) {
    std::cerr << "qkvlab: error: out of memory\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "qkvlab: error: " << one_line(e.what()) << "\n";
    return 3;
  }
}

}  // namespace

// The process ends through std::_Exit once stdout and stderr are flushed, not through exit's handlers:
// those include OpenBLAS's, which joins its server threads, and under an address-space limit too small
// for a thread's BLAS buffer (ulimit -v 200000) that thread retries its allocation forever, so every
// exit, "out of memory" (exit 3) and a refusal (exit 2) included, hung in the join. By now every file
// was committed or removed (StagedFiles) and closed; the pool's threads need no join.
int main(int argc, char** argv) {
  const int status = run(argc, argv);
  std::cout.flush(), std::cerr.flush();
  std::fflush(nullptr);  // every C stream too
  std::_Exit(status);
}
