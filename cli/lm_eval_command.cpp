// `qkvlab lm eval CKPT --tokens FILE`: the mean next-token cross-entropy of a
// model on the sequences of a token file (lm/evaluate.hpp).
#include <cmath>
#include <iostream>

#include "cli/format_option.hpp"
#include "cli/threads_option.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/dtype_option.hpp"
#include "cli/nonfinite_option.hpp"
#include "cli/token_options.hpp"
#include "cli/plot_common.hpp"
#include "cli/validators.hpp"
#include "core/errors.hpp"
#include "corpus/token_file.hpp"
#include "engine/make_backend.hpp"
#include "lm/describe.hpp"
#include "lm/evaluate.hpp"
#include "lm/model_files.hpp"

namespace qkvlab::cli {

namespace {

struct EvalArgs {
  std::string checkpoint, tokens, text, format = "table";
  int seq_len = 1024, batch = 8, threads = 0;
  std::int64_t sequences = 0;
  Device device = Device::cpu;
  std::string dtype = "auto";
  bool quiet = false, allow_nonfinite = false, seq_len_given = false;
};

int run_eval(const EvalArgs& a) {
  require_device(a.device);
  if (a.tokens.empty() == a.text.empty()) throw UsageError("give one of --tokens FILE and --text FILE");
  const corpus::TokenArray tokens = a.text.empty() ? corpus::read_token_file(a.tokens, {a.sequences, a.seq_len})
                                                   : text_token_rows(a.text, a.checkpoint, a.seq_len);  // what is evaluated
  if (a.text.empty()) require_row_length(a.seq_len_given, a.seq_len, tokens.cols, a.tokens);
  const lm::TokenSequences data = lm::token_sequences(tokens.ids, tokens.rows, tokens.cols, a.seq_len, a.sequences);
  const std::string source = a.text.empty() ? a.tokens : a.text;
  apply_threads(a.threads, BlasUse::per_worker);  // the CPU backend runs one product per worker
  const auto backend = engine::make_backend(a.device, a.threads);
  lm::ModelFiles files = lm::open_model(a.checkpoint);  // the tokens are checked against its config before the weights load
  lm::check_sequences(data, files.config, source);
  const auto model = lm::load_model(std::move(files), *backend, a.allow_nonfinite, a.dtype);
  const Progress show{"lm eval", Progress::wanted(a.quiet)};
  const lm::EvalResult r = lm::evaluate(*model, data, a.batch, [&](std::int64_t done, std::int64_t total) {
    show("sequences", std::size_t(done), std::size_t(total));
  });
  if (!std::isfinite(r.loss))
    return report_nonfinite("lm eval", "the mean loss over " + std::to_string(r.sequences) + " sequences of " +
                                           source + " is " + (std::isnan(r.loss) ? "nan" : "inf"));
  results::Value out = results::Value::object();
  out.set("checkpoint", a.checkpoint);
  out.set("loss", r.loss);
  out.set("tokens", r.tokens);
  out.set("sequences", r.sequences);
  out.set("seq_len", data.length);
  out.set("model", lm::config_value(model->config()));
  out.set("device", backend->description());
  set_dtype_fields(out, model->weight_type());
  out.set("seconds", r.seconds);
  out.set("tokens_per_second", double(r.sequences) * data.length / r.seconds);
  std::cout << (a.format == "json" ? out.json() : out.text());
  return 0;
}

}  // namespace

std::vector<Command> add_lm_eval_commands(CLI::App& lm, const std::string&) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = lm.add_subcommand("eval", "Mean next-token cross-entropy (nats) of a model on a token or text file");
  cmd->add_option("CKPT", a->checkpoint, "Checkpoint directory (qkvlab's own or Hugging Face's)")->required();
  cmd->add_option("--tokens", a->tokens, ".npy of integer token ids (2-D: one sequence per row; 1-D: cut into "
                                         "--seq-len pieces) or nanoGPT's uint16 .bin");
  add_text_option(cmd, a->text);
  auto* seq_len = cmd->add_option("--seq-len", a->seq_len, "Tokens per sequence, T - 1 of them predicted, for a 1-D token file or a "
                                                           "text (a 2-D file's rows are its sequences: another length is refused; "
                                                           "lm train --seq-len T predicts T)")
                      ->check(integer_in(2, 1 << 20))
                      ->capture_default_str();
  cmd->add_option("--sequences", a->sequences, "Evaluate the first N sequences (default: all)")
      ->check(integer64_in(1, 1LL << 40));
  cmd->add_option("--batch", a->batch, "Sequences per forward pass")->check(integer_in(1, 4096))->capture_default_str();
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  add_format_option(cmd, a->format);
  add_allow_nonfinite_option(cmd, a->allow_nonfinite);
  add_dtype_option(cmd, a->dtype);
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {{cmd, [a, seq_len] {
             a->seq_len_given = seq_len->count() > 0;
             return run_eval(*a);
           }}};
}

}  // namespace qkvlab::cli
