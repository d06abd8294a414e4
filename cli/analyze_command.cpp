// `qkvlab analyze KIND CKPT`: the per-layer analyses of a trained model on
// token sequences (analysis/analyze.hpp; definitions in docs/analysis.md).
#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <iostream>

#include "analysis/analyze.hpp"
#include "cli/output_paths.hpp"
#include "cli/format_option.hpp"
#include "cli/threads_option.hpp"
#include "cli/token_options.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/dtype_option.hpp"
#include "cli/nonfinite_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/validators.hpp"
#include "core/atomic_file.hpp"
#include "corpus/token_file.hpp"
#include "engine/make_backend.hpp"
#include "lm/model_files.hpp"

namespace qkvlab::cli {

namespace {

struct AnalyzeArgs {
  std::string kind, checkpoint;
  TokenOptions input;
  std::string definition = "column", states = "hf", of, heads = "concat", format = "table", out, csv, figure;
  int batch = 4, threads = 0, layer = 0, k = 0, query_block = 64;
  std::uint64_t seed = 1;
  Device device = Device::cpu;
  std::string dtype = "auto";
  bool quiet = false, allow_nonfinite = false;
  std::string csv_option = "--csv";  // the CSV's name in messages (default_csv_beside_figure)
  // The options only some kinds read (refuse_unread_options), set by add_analyze_command.
  const CLI::Option *definition_option = nullptr, *states_option = nullptr, *heads_option = nullptr,
                    *layer_option = nullptr, *k_option = nullptr, *query_block_option = nullptr;
};

// An option given to a kind that does not read it is refused (one line, exit 2), never ignored: --of
// by its value, the others by the kinds that read them (`all` reads what its four parts read).
void refuse_unread_options(const AnalyzeArgs& a) {
  const bool similarity = a.kind == "similarity" || a.kind == "all";
  const bool hidden = a.of.empty() || a.of == "hidden";
  if (!a.of.empty() && !(similarity && (a.of == "hidden" || a.of == "keys" || a.of == "values")) &&
      !(a.kind == "heads" && (a.of == "outputs" || a.of == "patterns")))
    throw UsageError("--of " + a.of + " does not apply to '" + a.kind +
                     "' (similarity: hidden|keys|values; heads: outputs|patterns)");
  const auto is = [&](std::initializer_list<const char*> kinds) {
    return std::any_of(kinds.begin(), kinds.end(), [&](const char* k) { return a.kind == k; });
  };
  const struct {
    const CLI::Option* option;
    bool read;
    const char* readers;
  } rules[] = {
      {a.definition_option, is({"entropy", "all"}), "entropy, all"},
      {a.states_option, similarity && hidden, "similarity and all of hidden states"},
      {a.heads_option, similarity && !hidden, "similarity and all --of keys|values"},
      {a.layer_option, is({"heads", "tokens"}), "heads, tokens"},
      {a.k_option, is({"spectrum", "all"}), "spectrum, all"},
      {a.query_block_option, is({"entropy", "first-token", "all"}), "entropy, first-token, all"},
  };
  for (const auto& r : rules)
    if (!r.read && r.option && r.option->count() > 0)
      throw UsageError(r.option->get_name() + " does not apply to '" + a.kind + (a.of.empty() ? "" : " --of " + a.of) +
                       "' (only to " + r.readers + ")");
}

analysis::Options analysis_options(const AnalyzeArgs& a) {
  using namespace analysis;
  Options o;
  o.entropy = a.definition == "row" ? EntropyDefinition::row : a.definition == "printed" ? EntropyDefinition::printed
                                                                                           : EntropyDefinition::column;
  o.states = a.states == "raw" ? States::raw : States::hf;
  o.heads = a.heads == "mean" ? HeadCombination::mean : HeadCombination::concat;
  refuse_unread_options(a);
  o.of = a.of == "keys" ? Of::keys : a.of == "values" ? Of::values : Of::hidden;
  o.head_matrix = a.of == "patterns" ? HeadMatrixOf::patterns : HeadMatrixOf::outputs;
  o.layer = a.layer - 1, o.top_k = a.k, o.batch = a.batch, o.threads = a.threads, o.query_block = a.query_block;
  return o;
}

// Every file the run writes (--out, each table's CSV and figure: results::table_files) and every file
// it reads, compared before the work (output_paths.hpp).
void refuse_overlapping_outputs(const AnalyzeArgs& a, analysis::Kind kind) {
  FileList outputs{{"--out", a.out}};
  for (const auto& t : results::table_files(a.csv, a.figure, analysis::table_names(kind))) {
    outputs.emplace_back(a.csv_option, t.csv);
    if (!t.figure.empty())
      for (const auto& f : results::figure_files(t.figure)) outputs.emplace_back("--figure", f.string());
  }
  require_output_directories(outputs);
  refuse_overlapping_files(outputs, input_files(a.input));
}

// The HDF5 file's "context": what the tables were measured on, the fields of the JSON output that do not
// depend on the run's threads or speed (the weights' type among them: a bf16 run's file says so).
std::string hdf5_context(const results::Value& v) {
  results::Value context = results::Value::object();
  for (const char* key : {"analysis", "definition", "sequences", "seq_len", "checkpoint", "tokens", "dtype", "error_model"})
    if (const results::Value* field = v.find(key)) context.set(key, *field);
  return context.json_compact();
}

void write_files(const AnalyzeArgs& a, const analysis::Report& r, const results::Value& v, const std::string& command_line) {
  StagedFiles files;  // every output of the run: all or none
  protect_inputs(files, a.input);
  if (!a.out.empty()) results::stage_tables_hdf5(files, a.out, r.tables, a.seed, command_line, hdf5_context(v));
  results::stage_tables(files, results::table_files(a.csv, a.figure, analysis::table_names(r.kind)), r.tables, r.figures);
  files.commit();
}

int run_analyze(const AnalyzeArgs& a, const std::string& command_line) {
  require_device(a.device);
  refuse_files_in(a.checkpoint, {{"--out", &a.out}, {a.csv_option.c_str(), &a.csv}, {"--figure", &a.figure}});
  refuse_files_in(a.input.corpus_directory(), {{"--out", &a.out}, {a.csv_option.c_str(), &a.csv}, {"--figure", &a.figure}});
  const analysis::Kind kind = analysis::parse_kind(a.kind);
  refuse_overlapping_outputs(a, kind);
  const analysis::Options options = analysis_options(a);
  apply_threads(a.threads, BlasUse::per_worker);  // the CPU backend runs one product per worker
  const auto backend = engine::make_backend(a.device, a.threads);
  lm::ModelFiles files = lm::open_model(a.checkpoint);  // the tokens are checked against its config before the weights load
  const lm::TokenSequences data = read_token_sequences(a.input, a.checkpoint, a.seed, files.config, false);
  const auto model = lm::load_model(std::move(files), *backend, a.allow_nonfinite, a.dtype);
  const Progress show{"analyze", Progress::wanted(a.quiet)};
  const auto start = std::chrono::steady_clock::now();  // the analysis alone: the model and tokens are loaded
  const analysis::Report r = analysis::analyze(*model, kind, data, options, [&](std::int64_t done, std::int64_t total) {
    show("sequences", std::size_t(done), std::size_t(total));
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!r.nonfinite.empty()) return report_nonfinite("analyze", r.nonfinite);
  results::Value v = r.to_value();
  v.set("checkpoint", a.checkpoint);
  v.set("tokens", !a.input.text.empty() ? token_source(a.input)  // "text FILE"
                  : a.input.tokens.empty() ? "corpus " + a.input.corpus + " (" + a.input.data + ", " + a.input.split + ")"
                                           : a.input.tokens);
  v.set("seed", a.seed);
  v.set("device", backend->description());
  set_dtype_fields(v, model->weight_type());
  v.set("seconds", seconds);  // as lm eval's: the forward passes and measures, not the loading
  v.set("tokens_per_second", double(r.sequences) * double(r.seq_len) / seconds);
  v.set("command_line", command_line);
  write_files(a, r, v, command_line);
  std::cout << (a.format == "json" ? v.json() : v.text());
  return 0;
}

}  // namespace

Command add_analyze_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<AnalyzeArgs>();
  auto* cmd = app.add_subcommand("analyze", "Per-layer analyses of a trained model: attention entropy, token "
                                            "similarity, value spectra, first-token ratios, head and token cosines, "
                                            "cross-layer attention's approximations");
  cmd->footer("Definitions: docs/analysis.md. Each sequence is measured on its own; the output gives the mean,\n"
              "standard deviation and standard error over sequences, the definition used, the checkpoint,\n"
              "the sequences, T and the seed.\n"
              "entropy, first-token and all reduce the attention patterns inside the attention, --query-block\n"
              "queries at a time, so no layer's T x T patterns are formed (memory O(T d) plus one block per head);\n"
              "similarity, spectrum and first-token's norms reduce the states where the model runs (with --device\n"
              "cuda only per-sequence sums and Gram matrices reach the host);\n"
              "heads --of patterns, tokens and cross-layer need whole patterns and form them layer by layer.\n"
              "An option a kind does not read (the kinds named in its help) is refused, as are a --seq-len other than\n"
              "a 2-D token file's rows and a --sequences above the sequences the source holds.");
  cmd->add_option("KIND", a->kind, "entropy|similarity|spectrum|first-token|heads|tokens|cross-layer|all")
      ->required()
      ->check(CLI::IsMember({"entropy", "similarity", "spectrum", "first-token", "heads", "tokens", "cross-layer", "all"}));
  cmd->add_option("CKPT", a->checkpoint, "Checkpoint directory (qkvlab's own or Hugging Face's)")->required();
  add_token_options(cmd, a->input);
  cmd->add_option("--seed", a->seed, "Seed of the choice of sequences (recorded in the output)")->check(seed_value)->capture_default_str();
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->threads);
  cmd->add_option("--batch", a->batch, "Sequences per forward pass")->check(integer_in(1, 4096))->capture_default_str();
  a->definition_option = cmd->add_option("--definition", a->definition, "entropy, all: column (the released script's), row, or printed (Eq. 11)")
      ->check(CLI::IsMember({"column", "row", "printed"}))
      ->capture_default_str();
  a->states_option = cmd->add_option("--states", a->states, "similarity, all of hidden states: hf (L + 1, as output_hidden_states) or raw")
      ->check(CLI::IsMember({"hf", "raw"}))
      ->capture_default_str();
  cmd->add_option("--of", a->of, "similarity: hidden|keys|values (default hidden); heads: outputs|patterns (default outputs)")
      ->check(CLI::IsMember({"hidden", "keys", "values", "outputs", "patterns"}));
  a->heads_option = cmd->add_option("--heads", a->heads, "similarity, all --of keys|values: heads concatenated or averaged")
      ->check(CLI::IsMember({"concat", "mean"}))
      ->capture_default_str();
  a->layer_option = cmd->add_option("--layer", a->layer, "heads, tokens: the layer, 1 … L (default: the last)")->check(integer_in(1, 1 << 16));
  a->k_option = cmd->add_option("--k", a->k, "spectrum, all: only the k largest eigenvalues, by Lanczos (0: all; at most min(T, H_kv*d_h))")
      ->check(integer_in(0, 1 << 20))
      ->capture_default_str();
  a->query_block_option = cmd->add_option("--query-block", a->query_block,
                  "entropy, first-token, all: queries per block of the patterns reduced inside the attention "
                  "(0: form each layer's whole patterns and reduce them after; the same numbers as a block of at least "
                  "T, and to float rounding as a smaller one: docs/analysis.md)")
      ->check(integer_in(0, 1 << 20))
      ->capture_default_str();
  add_format_option(cmd, a->format);
  cmd->add_option("--out", a->out, "Write the tables to an HDF5 file");
  cmd->add_option("--csv", a->csv, "Write the tables as CSV (several: FILE's stem + -TABLE)");
  cmd->add_option("--figure", a->figure, "Draw STEM.svg and STEM.png from the CSV, which is STEM.csv unless --csv names a file (all: STEM-TABLE.svg, .png and .csv per table)");
  add_allow_nonfinite_option(cmd, a->allow_nonfinite);
  add_dtype_option(cmd, a->dtype);
  cmd->add_flag("--quiet", a->quiet, "No progress on stderr");
  return {cmd, [a, command_line] {
            a->figure = figure_stem(a->figure);
            a->csv_option = default_csv_beside_figure(a->csv, a->figure);
            return run_analyze(*a, command_line);
          }};
}

}  // namespace qkvlab::cli
