// The committed training recipes and the checkpoint cache they are trained into (reproduce.hpp).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/fnv.hpp"
#include "core/text_file.hpp"
#include "engine/json.hpp"
#include "lm/checkpoint.hpp"
#include "reproduce/reproduce.hpp"

namespace qkvlab::reproduce {

namespace fs = std::filesystem;

std::string device_kind(engine::Device device) { return device == engine::Device::cuda ? "cuda" : "cpu"; }

std::string device_kind(const std::string& description) { return description.substr(0, description.find(' ')); }

std::string recipe_text(const lm::RunOptions& run, const lm::TrainData& data, engine::Device device) {
  std::map<std::string, std::string> all = lm::to_metadata(run.model);
  for (const auto& [key, value] : lm::run_identity(run, data))
    if (!value.empty()) all[key] = value;  // an empty entry (no --from) is the same as an absent one
  // The kind of device only when not the CPU, so that the CPU's entries keep their names (as
  // run.products only when not float32); its threads are not in it (bit-identical at any count).
  if (device != engine::Device::cpu) all["run.device"] = device_kind(device);
  std::string text;
  for (const auto& [key, value] : all) text += key + "=" + value + "\n";
  return text;
}

std::string recipe_hash(const std::string& text) { return hex64(fnv1a64(text)); }

namespace {

// What a cache entry's checkpoint records, read once: the recipe it was trained with (empty when the
// entry is not a finished run: no run.json, no checkpoint, or stopped before the last step), with the
// kind of device run.json names when not the CPU (as recipe_text), and the checkpoint's metadata
// (empty without a checkpoint).
struct Recorded {
  std::string recipe;
  std::map<std::string, std::string> metadata;
};

Recorded recorded_entry(const fs::path& dir) {
  if (!fs::is_regular_file(dir / "run.json") || !lm::is_own_checkpoint(dir / "checkpoint")) return {};
  const lm::Checkpoint ck = lm::load_checkpoint(dir / "checkpoint");
  Recorded r{"", ck.metadata};
  std::map<std::string, std::string> all = lm::to_metadata(ck.config);
  for (const auto& [key, value] : ck.metadata)
    if (key.rfind("run.", 0) == 0 && !value.empty()) all[key] = value;
  const auto step = ck.metadata.find("step"), steps = ck.metadata.find("run.steps");
  if (step == ck.metadata.end() || steps == ck.metadata.end() || step->second != steps->second) return r;
  const results::Value run = read_json_file(dir / "run.json");
  const results::Value* device = run.find("device");
  if (!device || device->kind() != results::Value::Kind::string) return r;  // no device named: not what a recipe made
  if (const std::string kind = device_kind(device->string()); kind != "cpu") all["run.device"] = kind;
  for (const auto& [key, value] : all) r.recipe += key + "=" + value + "\n";
  return r;
}

results::Value from_json(const engine::Json& j) {
  using K = engine::Json::Kind;
  switch (j.kind) {
    case K::number: {
      std::int64_t n = 0;  // an integer that fits is kept exact; any other number is a double
      const char* end = j.text.data() + j.text.size();
      if (const auto r = std::from_chars(j.text.data(), end, n); r.ec == std::errc() && r.ptr == end) return results::Value(n);
      return results::Value(std::strtod(j.text.c_str(), nullptr));
    }
    case K::string: return results::Value(j.text);
    case K::literal: return j.text == "null" ? results::Value() : results::Value(j.text == "true");
    case K::array: {
      results::Value a = results::Value::array();
      for (const auto& x : j.items) a.push(from_json(x));
      return a;
    }
    case K::object: {
      results::Value o = results::Value::object();
      for (std::size_t i = 0; i < j.items.size(); ++i) o.set(j.keys[i], from_json(j.items[i]));
      return o;
    }
  }
  return {};
}

}  // namespace

results::Value read_json_file(const fs::path& path) {
  const std::string text = read_text_file(path);
  try {
    return from_json(engine::parse_json(text));
  } catch (const std::exception& e) {
    throw UsageError(path.string() + ": " + e.what());
  }
}

namespace {

// The files of a cache entry that figures read, recorded (size and checksum) in ENTRY/cache.json
// when the entry is trained: the checkpoint through its own manifest.json.
const std::vector<std::string> kRecorded = {"run.json", "train.csv", "validation.csv", "checkpoint/manifest.json"};

// Why the entry at dir cannot be reused for the recipe `text` on `data`; empty when it can: its
// record lists its files as they are, its checkpoint matches its manifest and was made by the recipe,
// and its validation losses are of data's validation tokens (they are not in the recipe's hash).
std::string stale_reason(const fs::path& dir, const std::string& text, const lm::TrainData& data) {
  try {
    lm::verify_files_manifest(dir, dir / "cache.json", "the entry was changed after its training");
    const Recorded recorded = recorded_entry(dir);
    if (recorded.recipe != text) return "unfinished, or made by another recipe (or on another kind of device)";
    const auto validation = recorded.metadata.find("data.validation_hash");
    if (validation == recorded.metadata.end() || validation->second != lm::validation_hash(data))
      return "validated on other tokens than this corpus's validation split";
  } catch (const UsageError& e) {  // the entry is not what a recipe made; an I/O failure (EACCES,
    return e.what();                 // EIO) propagates, so an entry that cannot be read is never deleted
  }
  return "";
}

// A stale entry is deleted whole: only when it holds nothing but what reproduce's training writes
// there (a user's file put beside it, or a directory that is not an entry, is not deleted).
void refuse_foreign_files(const fs::path& dir) {
  static const std::set<std::string> owned = [] {  // the run's files, and the cache's record and the run's lock
    std::set<std::string> names(lm::run_file_names().begin(), lm::run_file_names().end());
    names.insert({"cache.json", ".qkvlab-lock"});
    return names;
  }();
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!owned.count(name) && name.rfind(".qkvlab-tmp", 0) != 0)
      throw UsageError(dir.string() + " is stale for this recipe but holds " + name +
                       ", which reproduce did not write: move it away (or the entry) and rerun");
  }
}

}  // namespace

Trained train_or_reuse(const Context& c, const Recipe& r, const lm::TrainData& data) {
  const std::string text = recipe_text(r.run, data, c.options.device);
  const std::string label = r.name + "-s" + std::to_string(r.run.seed);
  const fs::path dir = c.options.work / (label + "-" + recipe_hash(text));
  fs::create_directories(c.options.work);
  // One process per cache entry, from the check to the end of its training: a second fails at once.
  const DirectoryLock entry(c.options.work, "reproduce's training of " + dir.filename().string(),
                            "." + dir.filename().string() + ".lock");
  if (fs::exists(dir)) {
    const std::string stale = stale_reason(dir, text, data);
    if (stale.empty()) {
      if (c.note) c.note("reusing " + dir.string() + " (" + label + ", same recipe)");
      return {dir, read_json_file(dir / "run.json"), true};
    }
    refuse_foreign_files(dir);
    if (c.note) c.note("discarding " + dir.string() + ": " + stale);
    fs::remove_all(dir);
  }
  if (c.note)
    c.note("training " + label + " (tiny " + r.flags + ", " + std::to_string(r.run.loop.steps) + " steps) into " +
           dir.string());
  lm::RunOptions run = r.run;
  run.out = dir;
  run.command_line = c.options.command_line + "  [recipe: qkvlab lm train --preset tiny " + r.flags + " --seed " +
                     std::to_string(r.run.seed) + " --steps " + std::to_string(r.run.loop.steps) + "]";
  const auto backend = c.backend();
  results::Value out = lm::train_language_model(run, data, *backend, [&](const lm::Progress& p) {
    if (!c.progress) return;
    char extra[96];
    std::snprintf(extra, sizeof extra, "loss %.4f", p.loss);
    c.progress("train " + label, "step", p.step, p.steps, extra);
  });
  record_entry(dir);
  return {dir, out, false};
}

void record_entry(const fs::path& dir) {
  write_bytes_atomically(dir / "cache.json", "JSON", lm::files_manifest_json(dir, kRecorded, "qkvlab-reproduce-cache"));
}

}  // namespace qkvlab::reproduce
