// `qkvlab reproduce FIGURE`: the papers' figures the toolkit can remake at small scale, one
// call each. A figure trains what it needs with the committed recipes (the tiny GPT-2 preset of
// scripts/lm_comparisons.sh, the same seeds), runs the analyses, probes or conversions on the
// trained models, and writes into its output directory, all or none (core/atomic_file.hpp):
//   FIGURE.json        the numbers (results/value.hpp: 17 significant digits), the recipes, the runs
//   TABLE.csv          each table the figures are drawn from
//   STEM.svg, .png     the figures (results/figure.hpp; gnuplot)
//   README.md          the paper's figure in one paragraph, beside what was drawn here
//
// Trained checkpoints live in a cache directory (`work`), one entry per recipe:
// work/LABEL-sSEED-HASH/ is an `lm train` run directory, HASH the FNV-1a hash of the recipe —
// the model configuration (lm::to_metadata) and every setting that changes the numbers
// (lm::run_identity: seed, batch, schedule, the training tokens' hash), and the kind of device
// when it is not the CPU (CPU and GPU runs are not bit-identical; threads are). An entry is reused only
// when its checkpoint's recorded metadata equals the recipe, its run finished (run.json), and its
// files are those its training wrote: ENTRY/cache.json, written when the training ends, records
// the size and checksum of run.json, train.csv, validation.csv and checkpoint/manifest.json (which
// records the checkpoint's files); otherwise it is trained again from scratch, the note naming
// the file that differs. So figures share trainings, and a changed recipe
// (other steps, data or seed) is never served a checkpoint made by another.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/backend.hpp"
#include "engine/kernel_types.hpp"
#include "lm/train.hpp"
#include "results/value.hpp"
#include "results/verdict.hpp"

namespace qkvlab::reproduce {

struct Options {
  std::filesystem::path data = "data/brown";  // `qkvlab data brown`'s directory
  std::filesystem::path work = "outputs/reproduce/work";
  std::uint64_t seed = 1;       // of the trainings (as the committed runs) and of the choices of sequences
  std::int64_t steps = 0;       // 0: each recipe's own; N: every training, probe and synthetic run takes N steps
  std::int64_t sequences = 64;  // validation sequences per analysis
  int threads = 0;              // CPU threads (0: all cores)
  engine::Device device = engine::Device::cpu;  // the backends' (Context::backend): its kind keys the cache
  std::string command_line;
};

// Progress of the current stage: "train vanilla-s1", "step", done, total, an extra note.
using ProgressFn = std::function<void(const std::string& stage, const std::string& unit, std::int64_t done,
                                      std::int64_t total, const std::string& extra)>;
// One line of news ("reusing work/vanilla-s1-…", "training …"), for stderr.
using NoteFn = std::function<void(const std::string& line)>;

// Where the backends come from: the command makes them (engine/make_backend.hpp), this library uses them.
using BackendFactory = std::function<std::unique_ptr<engine::Backend<float>>()>;

struct Context {
  Options options;
  BackendFactory backend;
  ProgressFn progress;
  NoteFn note;
};

// ---- the recipes and the checkpoint cache ---------------------------------------------------------

// A training of the committed sweep (docs/lm-comparisons.md), defined once (recipes.cpp): its
// family (gpt2, llama), preset, name, the seeds it is trained at and its flags on top of the preset.
// scripts/lm_comparisons.sh reads them from `qkvlab reproduce --list-recipes` (sweep_recipes_text).
struct SweepRecipe {
  std::string family, preset, name;
  std::vector<int> seeds;
  std::string flags;
};
const std::vector<SweepRecipe>& sweep_recipes();
std::string sweep_recipes_text();  // a line each: FAMILY|PRESET|NAME|SEEDS|FLAGS (seeds space-separated)

// A training the figures use: a gpt2 recipe of the sweep, its flags and their settings.
struct Recipe {
  std::string name, flags;  // "vanilla", "--variant vanilla"
  lm::RunOptions run;       // the tiny preset with the flags applied, seed and steps set
};
// The figures' recipe `name` (vanilla, resformer-half, skipv1, q-identity-lr)
// with the seed and, when steps > 0, that many steps (warmup steps/20, as `lm train --steps`).
Recipe recipe(const std::string& name, std::uint64_t seed, std::int64_t steps);
const std::vector<std::string>& recipe_names();

// A JSON file (a run's run.json, a figure's FIGURE.json) as a Value; UsageError naming the file.
results::Value read_json_file(const std::filesystem::path& path);

// The recipe's key: "key=value" lines of its configuration and run identity (sorted), with
// "run.device=cuda" for a training on the GPU (none on the CPU, whatever its threads), and its hash.
std::string recipe_text(const lm::RunOptions& run, const lm::TrainData& data, engine::Device device = engine::Device::cpu);
std::string recipe_hash(const std::string& text);  // 16 hex digits

struct Trained {
  std::filesystem::path dir;  // the run directory (checkpoint/, train.csv, validation.csv, run.json)
  results::Value run;         // its run.json
  bool reused = false;
};
// The cache entry for `r`, trained now unless a finished entry with the same recipe exists.
Trained train_or_reuse(const Context& context, const Recipe& r, const lm::TrainData& data);
// Writes dir/cache.json, the record of the sizes and checksums of the entry's files that figures
// read, which train_or_reuse checks before it reuses the entry: train_or_reuse calls it when a
// training ends (an `lm train` run moved into an entry is reused once recorded).
void record_entry(const std::filesystem::path& dir);

// ---- the figures ------------------------------------------------------------------------------------

// A registered figure: what it remakes (its paper's *_figures.cpp holds the function that makes it).
struct Figure {
  std::string name;      // "resformer-fig1-middle"
  std::string remakes;   // one line: what it remakes (docs/reproduce-figures.md)
  std::string paper;     // one paragraph: the paper's figure (docs/reproduce-figures.md)
  std::string duration;  // measured time at the default recipe on two CPU cores (docs/reproduce-figures.md)
  std::vector<std::string> recipes;  // the trainings it needs; a recipe named k times is trained at
                                     // k seeds, the options' seed … seed + k − 1 (replicates)
};
const std::vector<Figure>& figures();  // the registry, in --list order

// docs/reproduce-figures.md, which the build embeds: each figure's section (what it remakes, its
// measured seconds, the paper's paragraph) and the trainings' measured seconds. figures() takes
// remakes, paper and duration from it, and refuses (std::logic_error) a registered figure without a
// section or a section without a figure.
struct FigureDoc {
  std::string remakes, paper;
  double seconds = -1;  // wall seconds with its models cached; < 0: not measured
};
struct FigureDocs {
  std::map<std::string, FigureDoc> figures;
  std::map<std::string, double> trainings;  // recipe → wall seconds of its training
};
// The file's text parsed; UsageError naming a section that lacks a part or has one twice.
FigureDocs parse_figure_docs(const std::string& text);
const FigureDocs& figure_docs();  // the embedded file's
// The registered entry named `name`; UsageError naming the known figures.
const Figure& find_figure(const std::string& name);

struct Result {
  results::Value value;                        // FIGURE.json
  std::vector<std::filesystem::path> written;  // every file written, in order
};

// Runs `figure` (an entry of figures(), e.g. from find_figure; UsageError for another name) and
// writes its files into `out` (created), all or none. An `out` that is, or is inside, the corpus
// (options.data) or the cache (options.work), or that holds another figure's outputs (OTHER.json),
// is a UsageError before any work. FIGURE.json records the sequences asked for (`sequences`) and
// those each analysis length got (`sequences_analysed`: fewer when the validation split holds fewer).
Result run_figure(const Context& context, const Figure& figure, const std::filesystem::path& out);

// ---- the verdicts (verdicts.cpp) ---------------------------------------------------------------------

// The figure's claim (a direction or inequality on a named quantity), judged by its stated rule
// (results/verdict.hpp) on the quantity measured from its FIGURE.json value `json`.
results::Verdict judge_figure(const std::string& figure, const results::Value& json);
// `json` with the verdict's fields (claim, quantity, uncertainty, rule, verdict) before its
// command_line, replacing any it had; and a "caveat" when its steps are a number (--steps) rather than
// "recipe": a smoke run, whose verdict does not judge the recipe.
results::Value with_verdict(const std::string& figure, const results::Value& json);
// The README's verdict section of a judged FIGURE.json value: "## Verdict", then the claim, the
// verdict and the rule in one paragraph (ending with the caveat of a smoke run).
std::string verdict_section(const results::Value& judged);
// Recomputes the verdict of OUTPUTS/FIGURE/FIGURE.json from its own results and rewrites the file
// with it, and the verdict section of its README.md (both or neither; a README made before verdicts
// existed gets the section before its command line); returns the new value. A README with neither, or
// none at all, is a UsageError before anything is written (its verdict would be left unstated).
results::Value rejudge(const Figure& figure, const std::filesystem::path& outputs);
// Several figures rejudged together: every file is checked before any is written (all or none).
std::vector<results::Value> rejudge(const std::vector<const Figure*>& figures, const std::filesystem::path& outputs);
// The verdict table of docs/figures.md, generated from OUTPUTS/*/FIGURE.json in --list order.
std::string verdicts_markdown(const std::filesystem::path& outputs);

}  // namespace qkvlab::reproduce
