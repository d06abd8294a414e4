// The registry of `qkvlab reproduce` (reproduce.hpp): each paper's figures (figure_kit.hpp's Entry
// lists) joined in --list order, and run_figure, which makes a figure and stages FIGURE.json, its
// tables, its figures and README.md, all or none.
#include <algorithm>
#include <map>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "reproduce/figure_kit.hpp"

namespace qkvlab::reproduce {

namespace fs = std::filesystem;
using results::Value;

namespace {


// Wall times measured at the default recipe on the 2-core machine (2026-11-23, shared with another
// compilation): each figure's own work with its models cached, and each training (docs/figures.md).
// The icl figures from icl-assumption1 on: with --threads 1, on the 2-core machine shared with
// another engineer's compiler; resformer-fig3 (2026-11-25) at the default threads, the machine
// shared with four other engineers' builds.
const std::map<std::string, double>& measured_seconds() {
  static const std::map<std::string, double> m = {
      {"resformer-fig1-left", 0.55}, {"resformer-fig1-middle", 1.73}, {"resformer-fig10", 1.98},
      {"resformer-fig19", 2.71},     {"resformer-fig12", 3.12},       {"resformer-fig18", 2.11},
      {"resformer-fig20", 2.84},     {"skipv1-fig10", 110},           {"skipv1-table2", 0.36},
      {"skipv1-fig12", 917},         {"skipv1-fig13", 1.93},          {"skipv1-fig14", 1.70},
      {"qwe-table2", 0.40},          {"icl-anchor", 7.54},            {"icl-depth", 23.3},
      {"qwe-exp8.4", 181},           {"icl-assumption1", 20.7},       {"icl-assumption1-w0", 19.6},
      {"icl-learned", 28.2},         {"icl-learned-w0", 27.5},        {"icl-sweep", 55.1},
      {"icl-theory", 43.8},          {"resformer-fig3", 21.8}};
  return m;
}
const std::map<std::string, double>& training_seconds() {
  static const std::map<std::string, double> m = {{"vanilla", 746}, {"resformer-half", 845}, {"skipv1", 718}, {"q-identity-lr", 866}};
  return m;
}

std::string duration_text(const Figure& f) {
  auto text = [](double s) { return s < 10 ? fixed(s, 1) + " s" : s < 120 ? fixed(s, 0) + " s" : fixed(s / 60, 1) + " min"; };
  const auto own = measured_seconds().find(f.name);
  std::string out = own == measured_seconds().end() ? "not measured" : text(own->second);
  if (f.recipes.empty()) return out;
  out += " with its models cached; training ";
  double total = 0;
  bool all = true;
  for (const auto& r : f.recipes) {
    const auto t = training_seconds().find(r);
    if (t == training_seconds().end()) all = false;
    else total += t->second;
  }
  return out + (all ? text(total) : "not all measured") + " first (measured, 2 cores)";
}

// The registry: each paper's list, in --list order, with the measured durations.
const std::vector<Entry>& registered() {
  static const std::vector<Entry> list = [] {
    std::vector<Entry> all;
    for (auto* papers : {resformer_figures, skipv1_figures, qwe_figures, icl_figures})
      for (Entry& e : papers()) all.push_back(std::move(e));
    for (auto& entry : all) entry.figure.duration = duration_text(entry.figure);
    return all;
  }();
  return list;
}

}  // namespace

const std::vector<Figure>& figures() {
  static const std::vector<Figure> list = [] {
    std::vector<Figure> f;
    for (const auto& entry : registered()) f.push_back(entry.figure);
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

Result run_figure(const Context& context, const Figure& figure, const fs::path& dir) {
  const std::string& name = figure.name;
  const auto& all = registered();
  const auto entry = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.figure.name == name; });
  if (entry == all.end()) throw UsageError("unknown figure \"" + name + "\"");
  Session session(context);
  Output out;
  entry->make(session, out);

  Value v = Value::object();
  v.set("figure", name);
  v.set("remakes", figure.remakes);
  v.set("paper", figure.paper);
  v.set("seed", context.options.seed);
  v.set("steps", context.options.steps > 0 ? Value(context.options.steps) : Value("recipe"));
  v.set("sequences", context.options.sequences);
  v.set("device", session.backend().description());
  v.set("runs", session.runs());
  v.set("results", out.value);
  v.set("command_line", context.options.command_line);
  v = with_verdict(name, v);

  std::string readme = "# " + name + "\n\n" + figure.remakes + ".\n\n## The paper's figure\n\n" + figure.paper +
                       "\n\n## Remade here\n\n";
  for (const auto& d : out.drawn) readme += "![" + d.figure.title + "](" + d.stem + ".png)\n\n";
  readme += "Numbers (also in " + name + ".json):\n\n" + out.notes + "\n## Verdict\n\n" + v["claim"].string() + ": **" +
            v["verdict"].string() + "** (" + v["rule"].string() + ").\n\nCommand: `" + context.options.command_line + "`\n";

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
