// qkvlab: one program, one subcommand per job. Exit status: 0 success; 1 the
// subcommand's verdict is negative (verify: a check failed or a control did not
// fail; absorb: undecided; absorb fit, transfer: the expected separation not
// seen); 2 a usage error (one-line message on stderr); 3 any other error, a
// numerical failure (NumericalError) or out of memory included (one line too).
#include "cli/commands.hpp"
#include "cli/fdim_command.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <optional>

namespace {

// Messages are one line of text: a newline or carriage return inside one (from a library) becomes
// a space, and any other control byte, or a byte that is not part of valid UTF-8 (a binary file's
// bytes quoted in a message), is written as \xNN.
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

}  // namespace

int main(int argc, char** argv) {
  std::string command_line = argv[0];
  for (int i = 1; i < argc; ++i) command_line += std::string(" ") + argv[i];

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
