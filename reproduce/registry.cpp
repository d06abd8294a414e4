// The registry of `qkvlab reproduce` (reproduce.hpp): each paper's figures (figure_kit.hpp's Entry
// lists) joined in --list order, and run_figure, which makes a figure and stages FIGURE.json, its
// tables, its figures and README.md, all or none.
#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "reproduce/figure_kit.hpp"
#include "results/replicated_plot.hpp"

namespace qkvlab::reproduce {

namespace {

// Each drawing of a replicated figure once more over its seeds: every curve's mean with a band of ±
// one standard error (results/replicated_plot.hpp), STEM-seeds; a drawing whose seeds' tables
// differ in shape, or that the figure marks as having no mean over seeds, has none.
void draw_over_seeds(const std::vector<std::vector<results::Plot>>& runs, Output& all) {
  for (std::size_t i = 0; i < runs.front().size(); ++i) {
    if (!all.drawn[i].over_seeds) continue;
    std::vector<results::Plot> replicates;
    for (const auto& run : runs)
      if (i < run.size()) replicates.push_back(run[i]);
    if (replicates.size() != runs.size()) continue;
    auto plot = results::over_replicates(replicates, "seeds");
    if (!plot) continue;
    const std::string stem = all.drawn[i].stem + "-seeds";  // seed 1's drawings come first; a stem names one drawing
    plot->table.name = stem;
    all.draw(std::move(plot->figure), all.add(std::move(plot->table)), stem);
  }
}

// The entry's output: made once, or once per seed (Entry::seeds), each run's results under
// "seed S", its tables and drawings after the first run's suffixed "-sS", its notes under a heading,
// and each drawing over the seeds (draw_over_seeds).
Output made(const Entry& e, Session& s) {
  Output all;
  if (e.seeds == 1) {
    e.make(s, all);
    return all;
  }
  const std::uint64_t first = s.seed();
  Value seeds = Value::array();
  for (int k = 0; k < e.seeds; ++k) seeds.push(std::int64_t(first + std::uint64_t(k)));
  all.value.set("seeds", seeds);
  std::vector<std::vector<results::Plot>> plots;  // each seed's drawings with their tables
  for (int k = 0; k < e.seeds; ++k) {
    const std::string seed = std::to_string(first + std::uint64_t(k)), suffix = k == 0 ? "" : "-s" + seed;
    s.set_seed(first + std::uint64_t(k));
    Output one;
    e.make(s, one);
    plots.emplace_back();
    for (const Output::Drawn& d : one.drawn) plots.back().push_back({one.tables[d.table], d.figure});
    const std::size_t offset = all.tables.size();
    for (results::Table& t : one.tables) t.name += suffix, all.add(std::move(t));
    for (Output::Drawn& d : one.drawn) {
      d.figure.title += " (seed " + seed + ")";
      all.draw(std::move(d.figure), d.table + offset, d.stem + suffix, d.over_seeds);
    }
    all.notes += "Seed " + seed + ":\n\n" + one.notes + "\n";
    all.value.set("seed " + seed, one.value);
  }
  s.set_seed(first);
  draw_over_seeds(plots, all);
  return all;
}

std::string duration_text(const Figure& f) {
  auto text = [](double s) { return s < 10 ? fixed(s, 1) + " s" : s < 120 ? fixed(s, 0) + " s" : fixed(s / 60, 1) + " min"; };
  const double own = figure_docs().figures.at(f.name).seconds;
  std::string out = own < 0 ? "not measured" : text(own);
  if (f.recipes.empty()) return out;
  out += " with its models cached; training ";
  double total = 0;
  bool all = true;
  for (const auto& r : f.recipes) {
    const auto t = figure_docs().trainings.find(r);
    if (t == figure_docs().trainings.end()) all = false;
    else total += t->second;
  }
  return out + (all ? text(total) : "not all measured") + " first (measured, 2 cores)";
}

// The registry: each paper's list, in --list order, with what docs/reproduce-figures.md says of each.
const std::vector<std::pair<Figure, const Entry*>>& registered() {
  static const std::vector<Entry> entries = [] {
    std::vector<Entry> all;
    for (auto* papers : {resformer_figures, skipv1_figures, qwe_figures, icl_figures})
      for (Entry& e : papers()) all.push_back(std::move(e));
    return all;
  }();
  static const std::vector<std::pair<Figure, const Entry*>> list = [] {
    const FigureDocs& docs = figure_docs();
    std::vector<std::pair<Figure, const Entry*>> all;
    for (const Entry& e : entries) {
      const auto doc = docs.figures.find(e.name);
      if (doc == docs.figures.end()) throw std::logic_error("figure " + e.name + " has no section in docs/reproduce-figures.md");
      std::vector<std::string> recipes;  // each trained at the entry's seeds
      for (const std::string& r : e.recipes) recipes.insert(recipes.end(), std::size_t(e.seeds), r);
      all.push_back({Figure{e.name, doc->second.remakes, doc->second.paper, "", recipes}, &e});
      all.back().first.duration = duration_text(all.back().first);
    }
    if (docs.figures.size() != all.size())
      throw std::logic_error("docs/reproduce-figures.md has a section for a figure that is not registered");
    return all;
  }();
  return list;
}

}  // namespace

const std::vector<Figure>& figures() {
  static const std::vector<Figure> list = [] {
    std::vector<Figure> f;
    for (const auto& entry : registered()) f.push_back(entry.first);
    return f;
  }();
  return list;
}

const Figure& find_figure(const std::string& name) {
  std::string known;
  for (const auto& f : figures()) {
    if (f.name == name) return f;
    known += (known.empty() ? "" : ", ") + f.name;
  }
  throw UsageError("unknown figure \"" + name + "\" (known: " + known + ")");
}

namespace {

// Whether `path` is `dir` or inside it (both as absolute paths with links resolved where they exist).
bool is_within(const fs::path& path, const fs::path& dir) {
  std::error_code error;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), error).lexically_normal();
  const fs::path d = fs::weakly_canonical(fs::absolute(dir), error).lexically_normal();
  auto pi = p.begin(), di = d.begin();
  for (; di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // a trailing separator
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

// The README.md in `dir`, or "" where it has none: its first line, "# FIGURE" for a figure's own.
std::string readme_heading(const fs::path& dir) {
  std::ifstream in(dir / "README.md");
  std::string line;
  std::getline(in, line);
  return line;
}

// The output directory may hold only this figure's files: not the corpus's or the cache's directory,
// a directory inside them, or one that contains the corpus where it exists (a new directory's default
// data/brown is not there to harm; the cache, which reproduce itself makes, may lie inside it:
// `cd new && reproduce F --out .` puts it at ./outputs/reproduce/work and runs again); not another
// figure's outputs (its FIGURE.json) nor a directory holding a figure's folder (FIGURE/FIGURE.json: the --outputs of --verdicts and
// --docs, outputs/, the repository), nor one whose README.md is not this figure's (its first line
// "# FIGURE"): this figure's README.md and tables would replace theirs. Its own earlier outputs may
// be replaced. A UsageError before any work.
void refuse_output_directory(const Context& c, const std::string& name, const fs::path& out) {
  const auto refuse = [&](const std::string& why) {
    throw UsageError("--out " + out.string() + " " + why + ": give " + name + " a directory of its own");
  };
  for (const auto& [dir, what] : {std::pair{c.options.data, "the corpus (--data)"}, std::pair{c.options.work, "the checkpoint cache (--work)"}})
    if (is_within(out, dir)) refuse("is inside " + std::string(what) + " " + dir.string());
  if (fs::exists(c.options.data) && is_within(c.options.data, out))
    refuse("contains the corpus (--data) " + c.options.data.string());
  for (const Figure& f : figures()) {
    if (f.name != name && fs::exists(out / (f.name + ".json")))
      refuse("holds " + f.name + "'s outputs (" + f.name + ".json), which " + name + "'s README.md and tables would replace");
    if (fs::exists(out / f.name / (f.name + ".json")))
      refuse("contains the figure folder " + (out / f.name).string() + ", whose README.md and tables sit beside it");
  }
  const std::string heading = readme_heading(out);
  if (fs::exists(out / "README.md") && heading != "# " + name)
    refuse("holds a README.md that is not " + name + "'s (\"" + heading.substr(0, 60) + "\"), which " + name + "'s would replace");
}

}  // namespace

Result run_figure(const Context& context, const Figure& figure, const fs::path& dir) {
  const std::string& name = figure.name;
  const auto& all = registered();
  const auto entry = std::find_if(all.begin(), all.end(), [&](const auto& e) { return e.first.name == name; });
  if (entry == all.end()) throw UsageError("unknown figure \"" + name + "\"");
  refuse_output_directory(context, name, dir);
  Session session(context);
  const Output out = made(*entry->second, session);

  Value v = Value::object();
  v.set("figure", name);
  v.set("remakes", figure.remakes);
  v.set("paper", figure.paper);
  v.set("seed", context.options.seed);
  v.set("steps", context.options.steps > 0 ? Value(context.options.steps) : Value("recipe"));
  v.set("sequences", context.options.sequences);  // asked for (--sequences)
  v.set("sequences_analysed", session.sequences_analysed());
  v.set("device", session.backend().description());
  v.set("runs", session.runs());
  v.set("results", out.value);
  v.set("command_line", context.options.command_line);
  v = with_verdict(name, v);

  std::string readme = "# " + name + "\n\n" + figure.remakes + ".\n\n## The paper's figure\n\n" + figure.paper +
                       "\n\n## Remade here\n\n";
  for (const auto& d : out.drawn) readme += "![" + d.figure.title + "](" + d.stem + ".png)\n\n";
  readme += "Numbers (also in " + name + ".json):\n\n" + out.notes + "\n";
  for (const Value& a : v["sequences_analysed"].items())
    if (a["sequences"].number() < double(context.options.sequences))
      readme += "Analysed " + std::to_string(std::int64_t(a["sequences"].number())) + " validation sequences of " +
                std::to_string(std::int64_t(a["length"].number())) + " tokens: all the split holds (--sequences asked for " +
                std::to_string(context.options.sequences) + ").\n\n";
  readme += verdict_section(v) + "\n\nCommand: `" + context.options.command_line + "`\n";

  fs::create_directories(dir);
  StagedFiles files;  // every file of the figure: all or none
  Result result;
  auto staged = [&](const fs::path& p) { result.written.push_back(p); };
  files.add_bytes(dir / (name + ".json"), "JSON", v.json());
  staged(dir / (name + ".json"));
  for (const auto& t : out.tables) results::stage_csv(files, dir / (t.name + ".csv"), t), staged(dir / (t.name + ".csv"));
  for (const auto& d : out.drawn)
    if (results::stage_figure(files, d.figure, out.tables[d.table], dir / d.stem))
      staged(dir / (d.stem + ".svg")), staged(dir / (d.stem + ".png"));
  files.add_bytes(dir / "README.md", "Markdown", readme);
  staged(dir / "README.md");
  files.commit();
  result.value = v;
  return result;
}

}  // namespace qkvlab::reproduce
