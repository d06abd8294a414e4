// `qkvlab reproduce FIGURE`, `qkvlab reproduce --list` and `--list-recipes`: the papers' figures remade at small
// scale (reproduce/reproduce.hpp; docs/figures.md).
#include <algorithm>
#include <iostream>
#include <vector>

#include "cli/format_option.hpp"
#include "cli/commands.hpp"
#include "cli/device_option.hpp"
#include "cli/plot_common.hpp"
#include "cli/threads_option.hpp"
#include "cli/usage_hint.hpp"
#include "cli/validators.hpp"
#include "engine/make_backend.hpp"
#include "reproduce/reproduce.hpp"

namespace qkvlab::cli {

namespace {

struct ReproduceArgs {
  std::string figure, out, work = "outputs/reproduce/work", data = "data/brown", format = "table";
  std::string outputs = "outputs/reproduce";
  bool list = false, list_recipes = false, quiet = false, verdicts = false, docs = false;
  reproduce::Options options;
  Device device = Device::cpu;
};

int list_figures(const ReproduceArgs& a) {
  results::Value list = results::Value::array();
  for (const auto& f : reproduce::figures()) {
    results::Value v = results::Value::object();
    v.set("figure", f.name), v.set("remakes", f.remakes), v.set("time", f.duration);
    std::string trains;  // a recipe named k times: "vanilla (3 seeds)"
    for (std::size_t i = 0; i < f.recipes.size(); ++i) {
      const auto& r = f.recipes[i];
      if (std::find(f.recipes.begin(), f.recipes.begin() + std::ptrdiff_t(i), r) != f.recipes.begin() + std::ptrdiff_t(i)) continue;
      const auto k = std::count(f.recipes.begin(), f.recipes.end(), r);
      trains += (trains.empty() ? "" : ", ") + r + (k > 1 ? " (" + std::to_string(k) + " seeds)" : "");
    }
    v.set("trains", trains.empty() ? "nothing" : trains);
    list.push(v);
  }
  if (a.format == "json") {
    std::cout << list.json();
    return 0;
  }
  for (const auto& f : list.items())
    std::cout << f["figure"].string() << "\n    " << f["remakes"].string() << "\n    trains: " << f["trains"].string()
              << "; time: " << f["time"].string() << "\n";
  return 0;
}

// --verdicts: each figure's verdict recomputed from its committed FIGURE.json and written into it and its README.
// Every figure's files are checked before any is written (a missing README refuses them all).
int rejudge_figures(const ReproduceArgs& a) {
  std::vector<const reproduce::Figure*> chosen;
  for (const auto& f : reproduce::figures())
    if (a.figure.empty() || f.name == a.figure) chosen.push_back(&f);
  const std::vector<results::Value> judged = reproduce::rejudge(chosen, a.outputs);
  for (std::size_t i = 0; i < chosen.size(); ++i) std::cout << chosen[i]->name << ": " << judged[i]["verdict"].string() << "\n";
  return 0;
}

int run_reproduce(const ReproduceArgs& a, const std::string& command_line) {
  if (a.list) return list_figures(a);
  if (a.list_recipes) return std::cout << reproduce::sweep_recipes_text(), 0;
  if (a.docs) return std::cout << reproduce::verdicts_markdown(a.outputs), 0;
  if (a.verdicts && !a.figure.empty())  // an unknown FIGURE before any file is touched
    with_hint([&]() -> const reproduce::Figure& { return reproduce::find_figure(a.figure); }, "see 'qkvlab reproduce --list'");
  if (a.verdicts) return rejudge_figures(a);
  if (a.figure.empty()) throw UsageError("give a FIGURE or --list (see 'qkvlab reproduce --list')");
  const reproduce::Figure& figure =  // before any work
      with_hint([&]() -> const reproduce::Figure& { return reproduce::find_figure(a.figure); }, "see 'qkvlab reproduce --list'");
  require_device(a.device);
  apply_threads(a.options.threads, BlasUse::shared);  // CPU backends run one product per worker themselves
  reproduce::Context c;
  c.options = a.options;
  c.options.work = a.work, c.options.data = a.data, c.options.device = a.device, c.options.command_line = command_line;
  c.backend = [device = a.device, threads = a.options.threads] { return engine::make_backend(device, threads); };
  const bool show = Progress::wanted(a.quiet);
  auto bar = std::make_shared<std::optional<Progress>>();
  auto stage = std::make_shared<std::string>();
  c.progress = [show, bar, stage](const std::string& s, const std::string& unit, std::int64_t done, std::int64_t total,
                                  const std::string& extra) {
    if (!show) return;
    if (!*bar || *stage != s) bar->emplace(Progress{"reproduce " + s, true}), *stage = s;
    (**bar)(unit, std::size_t(done), std::size_t(total), extra);
  };
  c.note = [quiet = a.quiet](const std::string& line) {
    if (!quiet) std::cerr << "qkvlab reproduce: " << line << "\n";
  };
  const std::filesystem::path out = a.out.empty() ? std::filesystem::path("outputs/reproduce") / a.figure : std::filesystem::path(a.out);
  const reproduce::Result r = reproduce::run_figure(c, figure, out);
  if (a.format == "json") {
    std::cout << r.value.json();
  } else {
    std::cout << a.figure << ": " << r.value["remakes"].string() << "\n";
    for (const auto& p : r.written) std::cout << "wrote " << p.string() << "\n";
  }
  return 0;
}

}  // namespace

Command add_reproduce_command(CLI::App& app, const std::string& command_line) {
  auto a = std::make_shared<ReproduceArgs>();
  auto* cmd = app.add_subcommand("reproduce", "Remake a figure of the papers at small scale: train what it needs "
                                              "(cached), analyse, draw (docs/figures.md)");
  cmd->footer("Trainings follow the committed recipes (scripts/lm_comparisons.sh: the tiny GPT-2 preset) and are\n"
              "cached in --work by their full recipe: a figure reuses another's checkpoint only when every setting\n"
              "that changes the numbers is the same. Exit status: 0 success, 2 usage error, 3 an unexpected error.");
  auto* figure = cmd->add_option("FIGURE", a->figure, "A figure of 'qkvlab reproduce --list'");
  auto* list = cmd->add_flag("--list", a->list, "List the figures: name, what it remakes, what it trains, how long it takes");
  auto* recipes = cmd->add_flag("--list-recipes", a->list_recipes,
                                "Print the committed training recipes, a line each: FAMILY|PRESET|NAME|SEEDS|FLAGS (what "
                                "scripts/lm_comparisons.sh trains; the figures train the gpt2 family's)");
  auto* verdicts = cmd->add_flag("--verdicts", a->verdicts, "Recompute each figure's verdict (or FIGURE's) from its FIGURE.json in "
                                                           "--outputs by its registered claim and rule, and write it into that file and its README.md's "
                                                           "verdict section (both must exist)");
  auto* docs = cmd->add_flag("--docs", a->docs, "Print docs/figures.md's verdict table, generated from the FIGURE.json files in --outputs");
  // One mode a run: two of --list, --list-recipes, --docs, --verdicts, or a FIGURE with any but --verdicts,
  // is refused (CLI11: "A excludes B"), never resolved by an order of precedence.
  const std::vector<CLI::Option*> modes{list, recipes, docs, verdicts};
  for (std::size_t i = 0; i < modes.size(); ++i)
    for (std::size_t j = i + 1; j < modes.size(); ++j) modes[i]->excludes(modes[j]);
  for (auto* mode : {list, recipes, docs}) figure->excludes(mode);
  cmd->add_option("--outputs", a->outputs, "The figures' directories, for --verdicts and --docs")->capture_default_str();
  cmd->add_option("--out", a->out, "Output directory, the figure's own: new or its earlier outputs; one inside the "
                                   "cache or the corpus, one holding the corpus, a figure's folder or another README.md is refused "
                                   "[default: outputs/reproduce/FIGURE]");
  cmd->add_option("--work", a->work, "Checkpoint cache, shared by the figures")->capture_default_str();
  cmd->add_option("--data", a->data, "Where 'qkvlab data brown' prepared the corpus")->capture_default_str();
  cmd->add_option("--seed", a->options.seed, "Seed of the trainings (the committed runs': 1) and of the choice of sequences")
      ->check(seed_value)
      ->capture_default_str();
  cmd->add_option("--steps", a->options.steps, "Steps of every training, probe and synthetic run (0: the recipe's; "
                                               "a few make a quick end-to-end check)")
      ->check(integer64_in(0, 1LL << 40))
      ->capture_default_str();
  cmd->add_option("--sequences", a->options.sequences, "Validation sequences per analysis")
      ->check(integer64_in(1, 1LL << 40))
      ->capture_default_str();
  add_device_option(cmd, a->device);
  add_threads_option(cmd, a->options.threads);
  add_format_option(cmd, a->format);
  cmd->add_flag("--quiet", a->quiet, "No progress or notes on stderr");
  return {cmd, [a, command_line] { return run_reproduce(*a, command_line); }};
}

}  // namespace qkvlab::cli
