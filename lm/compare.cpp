#include "lm/compare.hpp"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/statistics.hpp"
#include "engine/json.hpp"
#include "engine/safetensors.hpp"
#include "results/figure.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;
using engine::Json;

namespace {

struct Run {
  fs::path dir;
  std::string family, variant, key, label, name;  // name: the directory's, less a trailing -sSEED
  std::string trained;                            // the training object, as text
  // model.*, training.*, run.device (cpu or cuda) and run.data (the corpus: corpus_key), to tell
  // groups with one label apart and to find each group's baseline
  std::map<std::string, std::string> fields;
  // What says which corpus the run was trained and validated on: its tokens' hashes (run.json's
  // data_hashes, or its checkpoint's run.train_hash and data.validation_hash), and the corpus's
  // n-gram baselines run.json records (for runs made before data_hashes, their checkpoint gone).
  // Empty where the run records none.
  std::string hashes, baselines;
  std::uint64_t seed = 0;
  double final_validation = 0;
  Curve train;
};

const Json* optional_member(const Json& object, const std::string& key) {
  for (std::size_t i = 0; i < object.keys.size(); ++i)
    if (object.keys[i] == key) return &object.items[i];
  return nullptr;
}

const Json& member(const Json& object, const std::string& key, const fs::path& file) {
  if (const Json* m = optional_member(object, key)) return *m;
  throw UsageError(file.string() + ": no \"" + key + "\"");
}

std::string text_of(const Json& j) {
  if (j.kind == Json::Kind::string || j.kind != Json::Kind::object) return j.text;
  std::string s;
  for (std::size_t i = 0; i < j.keys.size(); ++i) s += j.keys[i] + "=" + text_of(j.items[i]) + ";";
  return s;
}

// A JSON number as a label shows it (%.6g: 0.4, not 0.40000000000000002); other text as it is.
std::string shown(const std::string& text) {
  char* end = nullptr;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || text.find_first_of(".eE") == std::string::npos) return text;
  return results::short_number(x);
}

// The variant's options that distinguish it, e.g. "resformer alpha=1 beta=2".
std::string label_of(const Json& model, const fs::path& file) {
  auto field = [&](const char* k) { return shown(member(model, k, file).text); };
  const std::string v = field("variant");
  std::string label = v;
  if (v == "resformer" || v == "resformer-k" || v == "resformer-q" || v == "resformer-previous" ||
      v == "resformer-neutreno")
    label += " alpha=" + field("alpha") + " beta=" + field("beta");
  if (v == "neutreno" || v == "resformer-neutreno") label += " lambda=" + field("lambda");
  if ((v == "resformer" || v == "resformer-k" || v == "resformer-q" || v == "resformer-neutreno" ||
       v == "resformer-cross") &&
      field("source_layer") != "1")
    label += " source=" + field("source_layer");
  if (v == "skipv1" || v == "skipkv1" || v == "skipv1-yoco")
    label += " ratio=" + field("skip_ratio") + " source=" + field("source_layer") +
             (field("strategy") == "second-half" ? "" : " " + field("strategy"));
  if (field("mla") == "true") label += " mla d_c=" + field("d_c") + " d_r=" + field("d_r");
  if (field("kv_heads") != field("heads")) label += " kv_heads=" + field("kv_heads");
  return label;
}

// A name less the seed suffix that scripts/lm_comparisons.sh gives a run's directory
// ("resformer-l05-s2" → "resformer-l05") and the reproduce cache's, with its recipe's hash
// ("gqa-s1-0123456789abcdef" → "gqa").
std::string without_seed(std::string name) {
  auto all = [](std::string_view text, int (*is)(int)) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [is](unsigned char c) { return is(c) != 0; });
  };
  if (const std::size_t dash = name.rfind('-'); dash != std::string::npos && name.size() - dash == 17 &&
                                                 all(std::string_view(name).substr(dash + 1), isxdigit)) {
    const std::size_t cut = name.rfind("-s", dash);
    if (cut != std::string::npos && all(std::string_view(name).substr(cut + 2, dash - cut - 2), isdigit))
      return name.substr(0, cut);
  }
  const std::size_t cut = name.rfind("-s");
  if (cut != std::string::npos && all(std::string_view(name).substr(cut + 2), isdigit)) name.resize(cut);
  return name;
}

// A run's name: its directory's, less the seed suffix.
std::string run_name(const fs::path& dir) {
  return without_seed((dir.has_filename() ? dir : dir.parent_path()).filename().string());
}

// The checkpoint a run started from (lm train --from), as run.json records it: "from"'s path and
// step; for a run made before run.json recorded it, the --from of its command line. Empty for a
// fresh start.
struct Origin {
  std::string path, step;
};
Origin recorded_origin(const Json& run, const fs::path& file) {
  if (const Json* from = optional_member(run, "from")) {
    const Json* step = optional_member(*from, "step");
    return {member(*from, "path", file).text, step ? step->text : ""};
  }
  const Json* command_line = optional_member(run, "command_line");
  std::istringstream words(command_line ? command_line->text : "");
  for (std::string word, previous; words >> word; previous = word) {
    if (previous == "--from") return {word, ""};
    if (word.starts_with("--from=")) return {word.substr(7), ""};
  }
  return {};
}

// The starting point's place in a group's key and label: the path with the seed suffix taken from
// the component that names the checkpoint (the last, or the one before a last "checkpoint"), so
// that the seeds of one starting point are replicates (converted/released-avg-s1 … -s3, or the
// reproduce cache's vanilla-sSEED-HASH/checkpoint) and runs from different starting points are not
// (pre-s1/ctx/checkpoint and pre-s2/ctx/checkpoint are two), then "@step" where the step is
// recorded (one run's checkpoints at two steps are two). As for run directories, a directory named
// NAME-sSEED is seed SEED of NAME.
std::string origin_of(const Json& run, const fs::path& file) {
  const Origin o = recorded_origin(run, file);
  if (o.path.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& part : fs::path(o.path).lexically_normal())
    if (!part.empty()) parts.push_back(part.string());
  if (!parts.empty() && parts.back() == ".") parts.pop_back();
  const std::size_t names = parts.size() >= 2 && parts.back() == "checkpoint" ? parts.size() - 2 : parts.size() - 1;
  if (!parts.empty()) parts[names] = without_seed(parts[names]);
  fs::path origin;
  for (const auto& part : parts) origin /= part;
  return origin.string() + (o.step.empty() ? "" : "@" + o.step);
}

// The run's corpus as its tokens' hashes, "train=H validation=H": run.json's data_hashes (written
// since lm train records them), else its checkpoint's metadata; empty when neither has them.
std::string corpus_hashes(const Json& run, const fs::path& dir, const fs::path& file) {
  if (const Json* h = optional_member(run, "data_hashes"))
    return "train=" + member(*h, "train", file).text + " validation=" + member(*h, "validation", file).text;
  const auto m = engine::safetensors_metadata(dir / "checkpoint" / "model.safetensors").value_or(std::map<std::string, std::string>{});
  const auto train = m.find("run.train_hash"), validation = m.find("data.validation_hash");
  if (train == m.end() || validation == m.end()) return "";
  return "train=" + train->second + " validation=" + validation->second;
}

// The corpus's n-gram baselines as run.json records them (lm train copies the corpus's baselines.json):
// numbers computed from the training and validation tokens, so two corpora with other tokens differ
// in them whatever their names. Empty without them.
std::string corpus_baselines(const Json& run) {
  const Json* b = optional_member(run, "baselines");
  if (!b || b->kind != Json::Kind::object) return "";
  std::string text;
  for (const char* key : {"train_tokens", "validation_positions", "unigram_nats", "bigram_nats", "bigram_lambda"}) {
    const Json* x = optional_member(*b, key);
    if (!x) return "";
    text += std::string(text.empty() ? "" : " ") + key + "=" + x->text;
  }
  return text;
}

// A finished run's train.csv has a row for every step 1 … training.steps, in order, the last ended by
// its newline: a log cut by a kill, or spliced from two runs, is refused (its curve would be another's).
void require_whole_log(const fs::path& file, const Curve& log, const std::string& steps_text) {
  std::int64_t steps = 0;
  const char* end = steps_text.data() + steps_text.size();
  if (std::from_chars(steps_text.data(), end, steps).ptr != end) throw UsageError(file.string() + ": training.steps is not an integer");
  for (std::size_t i = 0; i < log.steps.size(); ++i)
    if (log.steps[i] != std::int64_t(i) + 1)
      throw UsageError(file.string() + ": row " + std::to_string(i + 1) + " is step " + std::to_string(log.steps[i]) +
                       " where step " + std::to_string(i + 1) + " belongs: a log spliced from two runs");
  if (std::int64_t(log.steps.size()) != steps || log.cut) {  // a last row without its newline is not a whole one
    const bool cut_row = log.cut && !log.steps.empty();
    throw UsageError(file.string() + ": " + std::to_string(log.steps.size() - (cut_row ? 1 : 0)) + " whole rows" +
                     (cut_row ? " and a last row cut before its newline" : "") + " where the run's " +
                     std::to_string(steps) + " steps belong: a log cut short");
  }
}

Run read_run(const fs::path& dir) {
  const fs::path file = dir / "run.json";
  std::ifstream in(file);
  if (!in) throw UsageError(dir.string() + ": no run.json (not a finished 'qkvlab lm train' run)");
  std::stringstream ss;
  ss << in.rdbuf();
  Json json;
  try {
    json = engine::parse_json(ss.str());
  } catch (const std::exception& e) {
    throw UsageError(file.string() + ": " + e.what());
  }
  Run r;
  r.dir = dir;
  r.name = run_name(dir);
  const Json& model = member(json, "model", file);
  const Json& training = member(json, "training", file);
  r.family = member(model, "family", file).text;
  r.variant = member(model, "variant", file).text;
  r.trained = text_of(training);
  for (const auto& [prefix, object] : {std::pair{"model.", &model}, std::pair{"training.", &training}})
    for (std::size_t i = 0; i < object->keys.size(); ++i) r.fields[prefix + object->keys[i]] = text_of(object->items[i]);
  // The device's kind ("cpu (2 threads, OpenBLAS)" → "cpu"): runs are replicates of one another only on
  // one kind of device, and of one corpus (compare_runs sets run.data from hashes or baselines).
  const std::string device = member(json, "device", file).text;
  r.fields["run.device"] = device.substr(0, device.find(' '));
  r.hashes = corpus_hashes(json, dir, file);
  r.baselines = corpus_baselines(json);
  r.label = r.family + " " + label_of(model, file);
  if (const std::string origin = origin_of(json, file); !origin.empty())  // absent: a fresh start, as before
    r.fields["run.from"] = origin, r.label += " from=" + origin;
  r.seed = engine::json_to_u64(member(json, "seed", file), "seed");
  r.final_validation = finite_number(member(json, "final_validation_loss", file).text, file, "\"final_validation_loss\"");
  r.train = read_log(dir / "train.csv", 1);
  read_log(dir / "validation.csv", 1);  // read to refuse a malformed log; only the final loss is compared
  require_whole_log(dir / "train.csv", r.train, r.fields.at("training.steps"));
  return r;
}

// Each run's corpus (run.data) and group key. Runs are of one corpus when their tokens' hashes are
// equal; where some run records no hashes (a run.json from before data_hashes, its checkpoint gone),
// every run's corpus is its recorded n-gram baselines instead (numbers of the tokens, not of a name
// or path). A run with neither cannot be placed: a UsageError naming it.
void set_corpora(std::vector<Run>& runs) {
  const bool hashes = std::all_of(runs.begin(), runs.end(), [](const Run& r) { return !r.hashes.empty(); });
  for (Run& r : runs) {
    const std::string& corpus = hashes ? r.hashes : r.baselines;
    if (corpus.empty())
      throw UsageError(r.dir.string() + ": its run.json records neither its tokens' hashes (data_hashes; nor has it a "
                       "checkpoint that does) nor the corpus's baselines, so its corpus cannot be told apart from another");
    r.fields["run.data"] = (hashes ? "tokens " : "baselines ") + corpus;
    r.key = r.trained + "|" + r.fields["run.device"] + "|" + r.fields["run.data"];
    for (const auto& [name, value] : r.fields)
      if (name.starts_with("model.")) r.key += "|" + name + "=" + value;
    if (const auto from = r.fields.find("run.from"); from != r.fields.end()) r.key += "|from=" + from->second;
  }
}

struct Group {
  std::string key, label, family, variant, name, display;
  std::vector<const Run*> runs;
  // A field the group's runs share ("" where run.json has none: training.products is written only
  // for bf16 runs).
  std::string field(const std::string& name) const {
    const auto& f = runs.front()->fields;
    const auto it = f.find(name);
    return it == f.end() ? "" : it->second;
  }
};

// The model's fields that say which variant a model is (the variant and its options) and its
// parameter count, which the variant changes: a baseline may differ from its group in these only.
const std::set<std::string> kVariantFields = {"model.variant",    "model.alpha",        "model.beta",
                                              "model.lambda",     "model.skip_ratio",   "model.source_layer",
                                              "model.strategy",   "model.parameters"};

// The fields of `names` (all of the model's but the variant's own, when empty) in which a and b differ;
// a field one of them lacks differs.
std::vector<std::string> differing_fields(const Group& a, const Group& b, const std::vector<std::string>& names = {}) {
  const auto& fa = a.runs.front()->fields;
  const auto& fb = b.runs.front()->fields;
  std::set<std::string> candidates(names.begin(), names.end());
  if (names.empty())
    for (const auto* f : {&fa, &fb})
      for (const auto& [name, value] : *f)
        if (name.starts_with("model.") && !kVariantFields.count(name)) candidates.insert(name);
  std::vector<std::string> differ;
  for (const std::string& name : candidates)
    if (fa.count(name) != fb.count(name) || a.field(name) != b.field(name)) differ.push_back(name);
  return differ;
}

// How many of the model's fields differ between a and b, leaving out the variant's own.
int model_distance(const Group& a, const Group& b) { return int(differing_fields(a, b).size()); }

// "ffn 512 (here 576), d 8 (here 32)": each field as b has it, then as g has it (absent: none;
// products absent: float32).
std::string described(const Group& g, const Group& b, const std::vector<std::string>& fields) {
  auto value = [](const Group& x, const std::string& field) {
    if (!x.runs.front()->fields.count(field)) return std::string(field == "training.products" ? "float32" : "none");
    return shown(x.field(field));
  };
  std::string text;
  for (const std::string& field : fields) {
    const std::string name = field == "run.data" ? "corpus" : field.substr(field.find('.') + 1);
    text += (text.empty() ? "" : ", ") + name + " " + value(b, field) + " (here " + value(g, field) + ")";
  }
  return text;
}

// Where g's baseline b is another model, not only another variant (another width, depth, head
// count, ffn, vocabulary, positions, ...: a field outside kVariantFields differs): the note naming
// those fields, and the parameter counts. Empty when b is g's model but for the variant.
std::string other_model_note(const Group& g, const Group& b) {
  std::vector<std::string> fields = differing_fields(g, b);
  if (fields.empty()) return "";
  if (!differing_fields(g, b, {"model.parameters"}).empty()) fields.push_back("model.parameters");
  return "the baseline " + b.label + " is another model, not only another variant: " + described(g, b, fields) +
         "; the difference is of the two models, not of the variant alone, so it gets no verdict";
}

// What sets a training's budget and the shape of its data (run.json's training object): the steps,
// the sequences of a step (batch × accumulation) and their length, so the tokens it saw. A baseline
// must share them: a loss after 3 steps is no measure of a variant against a loss after 30. Its
// optimizer's settings (learning rate, schedule, weight decay, clipping) may differ: a variant's own
// learning rate (Q-identity at 2× or 3×) is part of what it is.
const std::vector<std::string> kBudget = {"training.steps", "training.batch", "training.seq_len", "training.accum"};

// g's baseline: of the groups named `baseline` (their runs' directories less -sSEED) or of that
// variant, in g's family, with g's products (float32 runs are never measured against bf16 runs, nor
// the reverse), kind of device, corpus and budget (kBudget), the one whose model is nearest g's (gqa
// for gqa-skipv1, mla for mla-skipv1, vanilla-rope for skipv1-rope), then one started from a
// checkpoint if g was (uptrained runs against the runs trained on from the unconverted checkpoint, not
// against fresh starts), then one from g's own starting point, then one of that name (skipv1 for
// skipv1-pooling, though both are of the variant skipv1), then one trained as g was in every setting.
// Null when there is none, `why` then naming each run of that name or variant with what it differs in
// (or saying there is none); a UsageError when two are equally near. The nearest may still be another
// model (other_model_note).
const Group* baseline_of(const Group& g, const std::vector<Group>& groups, const std::string& baseline, std::string& why) {
  auto named = [&](const Group& b) { return b.name == baseline || b.variant == baseline; };
  std::vector<std::string> setting = {"model.family", "training.products", "run.device", "run.data"};
  setting.insert(setting.end(), kBudget.begin(), kBudget.end());
  auto fits = [&](const Group& b) { return named(b) && differing_fields(g, b, setting).empty(); };
  auto rank = [&](const Group& b) {
    const std::string from = b.field("run.from");
    return std::tuple{model_distance(g, b), from.empty() != g.field("run.from").empty(), from != g.field("run.from"),
                      b.name != baseline, b.runs.front()->trained != g.runs.front()->trained};
  };
  const Group* base = nullptr;
  for (const Group& b : groups)
    if (fits(b) && (!base || rank(b) < rank(*base))) base = &b;
  for (const Group& b : groups)
    if (base && &b != base && fits(b) && rank(b) == rank(*base))
      throw UsageError("two baselines fit " + g.label + " equally: " + base->label + " and " + b.label +
                       "; name one by its runs' directories (--baseline NAME for NAME-sSEED)");
  why.clear();
  if (base) return base;
  for (const Group& b : groups)  // the named runs, each with what it differs in
    if (named(b)) why += (why.empty() ? "" : "; ") + b.label + " has " + described(g, b, differing_fields(g, b, setting));
  why = why.empty() ? "no run is named or of the variant '" + baseline + "', so no difference is measured"
                    : "no '" + baseline + "' run has this group's family, products, kind of device, corpus and budget "
                      "(steps, batch, seq_len, accum): " + why + ", so no difference is measured";
  return base;
}

double mean(const std::vector<double>& v) { return summarize(v).value; }
double stddev(const std::vector<double>& v) { return summarize(v).std; }

// Groups that share a label (Q-identity at two learning rates, say) get the fields that tell them apart.
void disambiguate(std::vector<Group>& groups) {
  for (Group& g : groups) {
    std::string extra;
    for (const auto& [name, value] : g.runs.front()->fields)
      for (const Group& h : groups)
        if (const auto& other = h.runs.front()->fields;
            &h != &g && h.label == g.label && (!other.count(name) || other.at(name) != value)) {  // absent: differs
          extra += " " + name.substr(name.find('.') + 1) + "=" + shown(value);
          break;
        }
    g.display = g.label + extra;
  }
  for (Group& g : groups) g.label = g.display;
}

// The baseline's smoothed training curve for a seed: its own run of that seed (the caller pairs only
// seeds the baseline has, as the final losses are).
std::vector<double> baseline_curve(const Run& base, std::size_t length, int window, Smoothing smoothing) {
  auto s = moving_average(base.train.values, window, smoothing);
  if (s.size() < length) throw UsageError(base.dir.string() + ": the baseline run is shorter than the runs compared with it");
  s.resize(length);
  return s;
}

// A group's relative training-loss curve: the mean and standard deviation over its paired seeds at each step.
struct RelativeCurve {
  std::string label;
  std::vector<double> mean, std;
};

// The curves as one table: steps 1 … the longest curve's end (each run's log has a row for every step,
// require_whole_log), each curve's mean and std to its own end and NaN past it (groups of other budgets
// have curves of other lengths; the figure leaves the NaN points out, so each curve is drawn whole).
results::Table curves_table(const std::vector<RelativeCurve>& curves) {
  std::size_t longest = 0;
  for (const RelativeCurve& c : curves) longest = std::max(longest, c.mean.size());
  results::Table t{"relative_train_loss", {}};
  std::vector<double> steps(longest);
  for (std::size_t i = 0; i < longest; ++i) steps[i] = double(i + 1);
  t.columns.push_back({"step", steps});
  const auto padded = [&](std::vector<double> v) {
    v.resize(longest, std::numeric_limits<double>::quiet_NaN());
    return v;
  };
  for (const RelativeCurve& c : curves) {
    t.columns.push_back({c.label + " mean", padded(c.mean)});
    t.columns.push_back({c.label + " std", padded(c.std)});
  }
  return t;
}

// The table as CSV in results' form (a header line, each number %.17g), but with an empty cell where
// it holds no number: past a curve's end, and the spread of a single paired seed.
std::string curves_csv(const results::Table& t) {
  std::string text;
  for (std::size_t j = 0; j < t.columns.size(); ++j) text += (j ? "," : "") + t.columns[j].name;
  text += "\n";
  for (std::size_t i = 0; i < t.columns.front().values.size(); ++i) {
    for (std::size_t j = 0; j < t.columns.size(); ++j) {
      const double x = t.columns[j].values[i];
      char cell[32] = "";
      if (!std::isnan(x)) std::snprintf(cell, sizeof cell, "%.17g", x);
      text += (j ? "," : "") + std::string(cell);
    }
    text += "\n";
  }
  return text;
}

// --csv and --figure: the curves, all or none.
void write_curves(const std::vector<RelativeCurve>& curves, const CompareOptions& o) {
  const results::Table table = curves_table(curves);
  StagedFiles files;
  files.add_bytes(*o.csv, "CSV", curves_csv(table));
  if (o.figure) {
    results::Figure fig{"Training loss relative to " + o.baseline + " (" + (o.smoothing == Smoothing::forward ? "forward " : "") +
                            "moving average of " + std::to_string(o.window) + " steps)",
                        "step", "loss - baseline loss (nats)", false, false, {}, {}};
    for (std::size_t c = 1; c < table.columns.size(); c += 2)
      fig.series.push_back({"step", table.columns[c].name, "", table.columns[c].name, "lines", ""});
    fig.extra.push_back("set key bottom left");
    results::stage_figure(files, fig, table, *o.figure);
  }
  files.commit();
}

// The runs of g paired with the baseline's run of their seed: the final losses' differences and the
// relative curves are of these only (a seed the baseline lacks is measured against nothing).
std::vector<std::pair<const Run*, const Run*>> paired_runs(const Group& g, const Group* base) {
  std::vector<std::pair<const Run*, const Run*>> paired;
  if (!base || base == &g) return paired;
  for (const Run* r : g.runs)
    for (const Run* b : base->runs)
      if (b->seed == r->seed) paired.push_back({r, b});
  return paired;
}

// g's relative curve against its paired baseline runs (none when nothing is paired).
std::optional<RelativeCurve> relative_curve(const Group& g, const std::vector<std::pair<const Run*, const Run*>>& paired,
                                            const CompareOptions& o) {
  if (paired.empty()) return std::nullopt;
  std::size_t length = SIZE_MAX;
  for (const auto& [r, b] : paired) length = std::min(length, r->train.values.size());
  std::vector<std::vector<double>> relative;
  for (const auto& [r, b] : paired) {
    const auto mine = moving_average(r->train.values, o.window, o.smoothing);
    const auto ref = baseline_curve(*b, length, o.window, o.smoothing);
    std::vector<double> rel(length);
    for (std::size_t i = 0; i < length; ++i) rel[i] = mine[i] - ref[i];
    relative.push_back(std::move(rel));
  }
  RelativeCurve c{g.label, std::vector<double>(length), std::vector<double>(length)};
  for (std::size_t i = 0; i < length; ++i) {
    std::vector<double> at;
    for (const auto& rel : relative) at.push_back(rel[i]);
    c.mean[i] = mean(at), c.std[i] = stddev(at);
  }
  return c;
}

// One group's entry of the comparison; its relative curve, if any, appended to `curves`.
results::Value group_value(const Group& g, const std::vector<Group>& groups, const CompareOptions& o,
                           std::vector<RelativeCurve>& curves) {
  std::string note;
  const Group* base = baseline_of(g, groups, o.baseline, note);
  if (base && base != &g) note = other_model_note(g, *base);
  const auto paired = paired_runs(g, base);
  std::vector<double> finals, deltas;
  results::Value seeds = results::Value::array();
  for (const Run* r : g.runs) finals.push_back(r->final_validation), seeds.push(r->seed);
  for (const auto& [r, b] : paired) deltas.push_back(r->final_validation - b->final_validation);
  results::Value v = results::Value::object();
  v.set("label", g.label);
  v.set("family", g.family);
  v.set("variant", g.variant);
  v.set("runs", std::int64_t(g.runs.size()));
  v.set("seeds", seeds);
  // A spread of one run and a difference without a paired baseline run are not measured: null, not nan.
  const auto measured = [](bool defined, double x) { return defined ? results::Value(x) : results::Value(); };
  v.set("final_validation_loss_mean", mean(finals));
  v.set("final_validation_loss_std", measured(finals.size() > 1, stddev(finals)));
  v.set("baseline", base ? results::Value(base->label) : results::Value());
  v.set("delta_vs_baseline_mean", measured(!deltas.empty(), mean(deltas)));
  v.set("delta_vs_baseline_se", measured(deltas.size() > 1, stddev(deltas) / std::sqrt(double(deltas.size()))));
  v.set("paired_seeds", std::int64_t(deltas.size()));
  if (!note.empty()) v.set("baseline_note", note);
  if (o.claim && base && base != &g && note.empty()) {  // a verdict on the variant: against its own model only
    const results::Claim claim{g.label + " trains " + (*o.claim == results::Sense::less ? "lower" : "higher") + " than " +
                                   base->label,
                               "final validation loss, " + g.label + " − " + base->label + ", paired by seed (nats)", *o.claim};
    v.set("verdict", results::judge(claim, results::Rule{}, {results::over_replicates(g.label, deltas)}).to_value());
  }
  if (auto curve = relative_curve(g, paired, o)) {
    v.set("final_relative_train_loss", curve->mean.back());
    v.set("relative_curve_seeds", std::int64_t(paired.size()));  // the paired seeds, as for the deltas
    curves.push_back(std::move(*curve));
  }
  return v;
}

}  // namespace

std::vector<double> moving_average(const std::vector<double>& values, int window, Smoothing smoothing) {
  if (smoothing == Smoothing::forward) {  // the trailing average of the reversed sequence, reversed
    std::vector<double> out = moving_average(std::vector<double>(values.rbegin(), values.rend()), window);
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::vector<double> out(values.size());
  double sum = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    sum += values[i];
    if (i >= std::size_t(window)) sum -= values[i - std::size_t(window)];
    out[i] = sum / double(std::min<std::size_t>(i + 1, std::size_t(window)));
  }
  return out;
}

Smoothing parse_smoothing(const std::string& name) {
  if (name == "trailing") return Smoothing::trailing;
  if (name == "forward") return Smoothing::forward;
  throw UsageError("unknown smoothing \"" + name + "\" (trailing|forward)");
}

std::string to_string(Smoothing smoothing) { return smoothing == Smoothing::forward ? "forward" : "trailing"; }

results::Value compare_runs(const std::vector<fs::path>& dirs, const CompareOptions& o) {
  if (dirs.empty()) throw UsageError("no run directories given");
  if (o.window < 1) throw UsageError("the smoothing window must be at least 1 step");
  std::vector<Run> runs;
  for (const auto& d : dirs) runs.push_back(read_run(d));
  set_corpora(runs);
  std::vector<Group> groups;
  for (const Run& r : runs) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.key == r.key; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{r.key, r.label, r.family, r.variant, r.name, "", {}});
    for (const Run* other : it->runs)
      if (other->seed == r.seed)
        throw UsageError(other->dir.string() + " and " + r.dir.string() + " are one model, training, device" +
                         (r.fields.count("run.from") ? ", starting point (" + r.fields.at("run.from") + ")" : "") +
                         " and seed (" + std::to_string(r.seed) + ") twice: give one of them");
    it->runs.push_back(&r);
  }
  disambiguate(groups);
  const bool named = std::any_of(groups.begin(), groups.end(),
                                 [&](const Group& g) { return g.name == o.baseline || g.variant == o.baseline; });
  if (!named && (o.claim || o.baseline != CompareOptions{}.baseline))
    throw UsageError("no run is named or of the variant '" + o.baseline + "' (--baseline): nothing to measure against");
  results::Value out = results::Value::object();
  out.set("window", o.window);
  out.set("smoothing", to_string(o.smoothing));
  out.set("baseline", o.baseline);
  results::Value list = results::Value::array();
  std::vector<RelativeCurve> curves;
  for (const Group& g : groups) list.push(group_value(g, groups, o, curves));
  out.set("groups", list);
  if (o.csv && curves.empty())
    throw UsageError(std::string(o.figure ? "--figure" : "--csv") +
                     ": no group has a run paired by seed with a baseline run, so there are no relative curves to write");
  if (o.csv) write_curves(curves, o);
  return out;
}

}  // namespace qkvlab::lm
