#include "lm/checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <mutex>
#include <optional>
#include <set>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/fnv.hpp"
#include "core/json_text.hpp"
#include "core/text_file.hpp"
#include "engine/adamw_state.hpp"
#include "engine/json.hpp"
#include "engine/safetensors.hpp"
#include "lm/describe.hpp"
#include "lm/model_files.hpp"
#include "lm/parameters.hpp"
#include "results/value.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;
using engine::SafeTensors;

namespace {

constexpr const char* kFormat = "qkvlab-lm";
constexpr const char* kInPlaceMark = "manifest";  // "manifest": "manifest.json", see save_checkpoint

// The optimizer's state in engine/adamw_state.hpp's format, decoded from the mapped file: a file that
// holds anything else, or whose state is not valid, is a UsageError naming it.
OptimizerState read_optimizer(const fs::path& path, const engine::ParameterLayout& layout) {
  std::optional<engine::MappedSafeTensors> mapped;
  try {
    mapped.emplace(path);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  const engine::SafeTensorsView& file = mapped->view();
  for (const auto& [name, entry] : file.tensors)
    if (!engine::is_adamw_tensor(name, layout))
      throw UsageError(path.string() + ": unknown tensor \"" + name + "\" for this configuration");
  try {
    return engine::read_adamw_state(file, layout);
  } catch (const std::runtime_error& e) {
    throw UsageError(path.string() + ": " + e.what());
  }
}

// The manifest.json of a checkpoint: each file's size and checksum, the step, t and the run's identity.
constexpr const char* kManifestFormat = "qkvlab-lm-manifest";
struct Manifest {
  std::map<std::string, FileSum> files;
  std::optional<std::int64_t> step, t;
  std::string run_id;
};

// The mark of a model lm init, convert or eliminate wrote: save_checkpoint puts "manifest" into the metadata
// of a model saved without optimizer state (since 2026-11-27), and lm train always saves its state.
bool written_in_place(const std::map<std::string, std::string>& metadata) { return metadata.count(kInPlaceMark) > 0; }

std::function<void(const std::string&)>& write_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

void written(const std::string& file) {
  if (write_hook()) write_hook()(file);
}

results::Value files_value(const fs::path& dir, const std::vector<std::string>& names) {
  results::Value files = results::Value::object();
  for (const std::string& name : names) {
    const FileSum sum = file_sum(dir / name);
    results::Value f = results::Value::object();
    f.set("bytes", sum.bytes), f.set("fnv1a64", hex64(sum.fnv1a64));
    files.set(name, f);
  }
  return files;
}

std::string manifest_json(const fs::path& dir, const std::vector<std::string>& names, const Manifest& m) {
  results::Value v = results::Value::object();
  v.set("format", kManifestFormat);
  if (m.step) v.set("step", *m.step);
  if (m.t) v.set("t", *m.t);
  if (!m.run_id.empty()) v.set("run_id", m.run_id);
  v.set("files", files_value(dir, names));
  return v.json();
}

const engine::Json* member(const engine::Json& object, const std::string& key) {
  for (std::size_t k = 0; k < object.keys.size(); ++k)
    if (object.keys[k] == key) return &object.items[k];
  return nullptr;
}

Manifest read_manifest(const fs::path& path) {
  const auto bad = [&](const std::string& what) { return UsageError(path.string() + ": " + what); };
  Manifest m;
  try {
    const engine::Json v = engine::parse_json(read_text_file(path));
    const engine::Json* files = v.kind == engine::Json::Kind::object ? member(v, "files") : nullptr;
    if (!files || files->kind != engine::Json::Kind::object) throw bad("no \"files\" object");
    for (std::size_t k = 0; k < files->keys.size(); ++k) {
      const engine::Json* bytes = member(files->items[k], "bytes");
      const engine::Json* sum = member(files->items[k], "fnv1a64");
      if (!bytes || !sum || sum->kind != engine::Json::Kind::string)
        throw bad("entry \"" + files->keys[k] + "\" lacks \"bytes\" or \"fnv1a64\"");
      std::uint64_t checksum = 0;
      const char* end = sum->text.data() + sum->text.size();
      if (sum->text.size() != 16 || std::from_chars(sum->text.data(), end, checksum, 16).ptr != end)
        throw bad("\"fnv1a64\" of " + files->keys[k] + " is not 16 hexadecimal digits: " + json_quote(sum->text));
      m.files[files->keys[k]] = {engine::json_to_u64(*bytes, "\"bytes\" of " + files->keys[k]), checksum};
    }
    for (auto [key, field] : {std::pair{"step", &m.step}, std::pair{"t", &m.t}})
      if (const engine::Json* x = member(v, key)) *field = std::int64_t(engine::json_to_u64(*x, std::string("\"") + key + "\""));
    if (const engine::Json* id = member(v, "run_id")) m.run_id = id->text;
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw bad(e.what());
  }
  return m;
}

// A name a manifest may list: a relative path inside its directory (no "..", no root).
bool is_inside(const std::string& name) {
  const fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == ".." || part == ".") return false;
  return true;
}

// Every file the manifest lists is there with its size and checksum; `what` says what differing files mean.
void verify_files(const fs::path& dir, const Manifest& m, const fs::path& manifest, const std::string& what) {
  for (const auto& [name, expected] : m.files) {
    if (!is_inside(name) || !fs::is_regular_file(dir / name))
      throw UsageError(manifest.string() + ": lists " + json_quote(name) + ", which is not a file in " + dir.string());
    const FileSum got = file_sum(dir / name);
    if (got.bytes != expected.bytes || got.fnv1a64 != expected.fnv1a64)
      throw UsageError((dir / name).string() + ": does not match " + manifest.filename().string() + " (" +
                       std::to_string(got.bytes) + " bytes, checksum " + hex64(got.fnv1a64) + "; listed: " +
                       std::to_string(expected.bytes) + " bytes, " + hex64(expected.fnv1a64) + "): " + what);
  }
}

// The optimizer belongs to the model: the manifest lists both, with the model's step and the optimizer's t,
// and the optimizer's metadata repeats the model's step and run identity.
void tie_optimizer(const fs::path& dir, const Manifest& m, const Checkpoint& ck, const engine::SafeTensorsView& opt) {
  const fs::path manifest = dir / "manifest.json", opt_path = dir / "optimizer.safetensors";
  if (!m.files.count("optimizer.safetensors") || !m.files.count("model.safetensors"))
    throw UsageError(manifest.string() + ": does not list both model.safetensors and optimizer.safetensors");
  if (m.t != ck.optimizer->t)
    throw UsageError(opt_path.string() + ": \"t\" = " + std::to_string(ck.optimizer->t) + ", manifest.json has " +
                     (m.t ? std::to_string(*m.t) : "none"));
  for (const char* key : {"step", "run_id"}) {
    const auto model_it = ck.metadata.find(key);
    const auto opt_it = opt.metadata.find(key);
    const std::string model_value = model_it == ck.metadata.end() ? "(none)" : model_it->second;
    const std::string opt_value = opt_it == opt.metadata.end() ? "(none)" : opt_it->second;
    if (model_value != opt_value)
      throw UsageError(opt_path.string() + ": \"" + key + "\" = " + opt_value + ", but model.safetensors has " +
                       model_value + ": the optimizer state is another run's or another step's");
  }
  if (ck.metadata.count("step") && m.step != metadata_integer(ck.metadata, "step", dir / "model.safetensors"))
    throw UsageError(manifest.string() + ": \"step\" does not match model.safetensors's");
  if (m.run_id != (ck.metadata.count("run_id") ? ck.metadata.at("run_id") : ""))
    throw UsageError(manifest.string() + ": \"run_id\" does not match model.safetensors's");
}

}  // namespace

std::int64_t metadata_integer(const std::map<std::string, std::string>& metadata, const std::string& key,
                              const fs::path& file) {
  try {
    return engine::metadata_integer(metadata, key);
  } catch (const std::runtime_error& e) {
    throw UsageError(file.string() + ": " + e.what());
  }
}

std::optional<std::int64_t> checkpoint_step(const std::map<std::string, std::string>& metadata, const fs::path& file) {
  if (!metadata.count("step")) return std::nullopt;
  const std::int64_t step = metadata_integer(metadata, "step", file);
  if (step < 0)  // read_manifest's words: the manifest holds it as a non-negative 64-bit integer
    throw UsageError(file.string() + ": \"step\" = " + std::to_string(step) + " is not a non-negative 64-bit integer");
  return step;
}

std::string config_json(const Config& c) { return config_value(c).json(); }

void save_checkpoint(const fs::path& dir, const Checkpoint& ck) {
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  if (ck.values.size() != layout.total())
    throw std::invalid_argument("save_checkpoint: the values do not match the configuration's layout");
  fs::create_directories(dir);
  fs::remove(dir / "manifest.json");  // first: a write cut short leaves no manifest
  Manifest manifest;
  manifest.step = checkpoint_step(ck.metadata, dir / "model.safetensors");
  if (ck.metadata.count("run_id")) manifest.run_id = ck.metadata.at("run_id");
  std::vector<std::string> names;
  if (ck.optimizer) {
    SafeTensors opt;
    engine::write_adamw_state(opt, layout, *ck.optimizer);
    opt.metadata["format"] = kFormat;
    for (const char* key : {"step", "run_id"})
      if (ck.metadata.count(key)) opt.metadata[key] = ck.metadata.at(key);
    manifest.t = ck.optimizer->t;
    engine::save_safetensors(dir / "optimizer.safetensors", opt);
    names.push_back("optimizer.safetensors"), written(names.back());
  } else {
    fs::remove(dir / "optimizer.safetensors");  // not another model's state: a resume would load it
  }
  SafeTensors model;
  for (const auto& spec : layout.specs()) model.tensors[spec.name] = engine::tensor_of(spec, ck.values);
  model.metadata = ck.metadata;
  for (const auto& [key, value] : to_metadata(ck.config)) model.metadata[key] = value;
  model.metadata["format"] = kFormat;
  // A model without optimizer state (lm init, convert, eliminate) is written in place, over an earlier
  // one: its manifest, written last, is required, so a write cut short is refused rather than read as
  // a mix; the same entry marks it as theirs (written_in_place). A training checkpoint is swapped in
  // whole (lm train), and a copy of its model without its optimizer state, which its manifest lists,
  // must stay readable.
  if (!ck.optimizer) model.metadata[kInPlaceMark] = "manifest.json";
  engine::save_safetensors(dir / "model.safetensors", model);
  names.push_back("model.safetensors"), written(names.back());
  write_bytes_atomically(dir / "config.json", "JSON", config_json(ck.config));
  names.push_back("config.json"), written(names.back());
  if (!ck.tokenizer_json.empty()) {
    write_bytes_atomically(dir / "tokenizer.json", "JSON", ck.tokenizer_json);
    names.push_back("tokenizer.json"), written(names.back());
  } else {
    fs::remove(dir / "tokenizer.json");  // not another model's
  }
  write_bytes_atomically(dir / "manifest.json", "JSON", manifest_json(dir, names, manifest));
  written("manifest.json");
}

std::string files_manifest_json(const fs::path& dir, const std::vector<std::string>& names, const std::string& format) {
  results::Value v = results::Value::object();
  v.set("format", format);
  v.set("files", files_value(dir, names));
  return v.json();
}

void verify_files_manifest(const fs::path& dir, const fs::path& manifest, const std::string& what) {
  if (!fs::exists(fs::symlink_status(manifest))) throw UsageError(manifest.string() + ": no such file");
  verify_files(dir, read_manifest(manifest), manifest, what);
}

namespace {

// Whether the manifest's "format" is a checkpoint manifest's (another tool's manifest.json in a
// Hugging Face directory is not).
bool is_checkpoint_manifest(const std::string& text) {
  try {
    const engine::Json v = engine::parse_json(text);
    const engine::Json* format = v.kind == engine::Json::Kind::object ? member(v, "format") : nullptr;
    return format && format->kind == engine::Json::Kind::string && format->text == kManifestFormat;
  } catch (const std::exception&) {
    return false;
  }
}

// What a verified directory held: the manifest's bytes and each listed file's size and time of change.
std::string verified_state(const fs::path& dir, const std::string& manifest_text, const Manifest& m) {
  std::string state = fs::weakly_canonical(dir).string() + "\n" + manifest_text;
  for (const auto& [name, sum] : m.files) {
    std::error_code error;
    const auto time = fs::last_write_time(dir / name, error);
    state += "\n" + name + " " + std::to_string(fs::file_size(dir / name, error)) + " " +
             std::to_string(time.time_since_epoch().count());
  }
  return state;
}

}  // namespace

void verify_manifest_if_present(const fs::path& dir, bool own_checkpoint) {
  const fs::path manifest = dir / "manifest.json";
  if (!fs::exists(fs::symlink_status(manifest))) {
    const auto metadata = own_checkpoint ? engine::safetensors_metadata(dir / "model.safetensors") : std::nullopt;
    if (metadata && written_in_place(*metadata))  // written since 2026-11-27 with its manifest, which is missing
      throw UsageError(dir.string() + ": no manifest.json beside a model.safetensors written with one: a write into "
                       "this directory was cut short (its files may come from two models; write the model again), "
                       "or the model was copied without it (copy manifest.json too)");
    return;
  }
  const std::string text = read_text_file(manifest);
  if (!own_checkpoint && !is_checkpoint_manifest(text)) return;
  // A command reads a model more than once (verify --checkpoint: its weights, then its activations):
  // the files are hashed the first time, and again only when the manifest or a file has changed.
  static std::mutex mutex;
  static std::set<std::string> verified;
  const Manifest m = read_manifest(manifest);
  const std::string state = verified_state(dir, text, m);
  const std::lock_guard lock(mutex);
  if (verified.count(state)) return;
  verify_files(dir, m, manifest, "the checkpoint's files come from different writes");
  verified.insert(state);
}

void set_checkpoint_write_hook(std::function<void(const std::string& file)> hook) { write_hook() = std::move(hook); }

namespace {

// The metadata of dir's model.safetensors when it is an own checkpoint's ("format": "qkvlab-lm").
std::optional<std::map<std::string, std::string>> own_model_metadata(const fs::path& dir) {
  auto metadata = engine::safetensors_metadata(dir / "model.safetensors");
  return metadata && metadata->count("format") && metadata->at("format") == kFormat ? metadata : std::nullopt;
}

// What an own model without the mark of lm init, convert and eliminate is: one of theirs from before the
// mark (a conversion or elimination records its source), or lm train's (a step past 0, run.* entries:
// a model copied before run_id existed carries no more).
std::string unmarked_model(const std::map<std::string, std::string>& metadata) {
  const auto has_prefix = [&](const std::string& prefix) {
    return std::any_of(metadata.begin(), metadata.end(), [&](const auto& e) { return e.first.rfind(prefix, 0) == 0; });
  };
  const auto step = metadata.find("step");
  const bool theirs = metadata.count("converted_by") || has_prefix("eliminated_from.");
  const bool trained = has_prefix("run.") || (step != metadata.end() && step->second != "0");
  const std::string who = !theirs && trained ? "lm train's, step " + (step == metadata.end() ? "?" : step->second)
                                             : "one of theirs from before 2026-11-27, or another program's";
  return "holds a qkvlab model that lm init, convert or eliminate did not write (" + who + "; theirs carry \"" +
         std::string(kInPlaceMark) + "\" in their metadata), which saving the model would replace";
}

}  // namespace

bool is_own_checkpoint(const fs::path& dir) { return own_model_metadata(dir).has_value(); }

void require_model_destination(const fs::path& dir, const std::string& option) {
  std::error_code error;
  const auto present = [&](const fs::path& p) { return fs::exists(fs::symlink_status(p, error)); };
  if (!present(dir)) return;
  const auto refuse = [&](const std::string& what) {
    return UsageError(option + " " + dir.string() + " " + what + ": write the model into a new or empty directory");
  };
  if (!fs::is_directory(dir)) throw refuse("is not a directory");
  std::string held;
  for (const char* name : {"model.safetensors", "config.json", "manifest.json", "tokenizer.json", "optimizer.safetensors"})
    if (held.empty() && present(dir / name)) held = name;
  if (held.empty()) return;
  if (present(dir / "optimizer.safetensors"))
    throw refuse("holds a training run's checkpoint (optimizer.safetensors), which saving the model would replace");
  if (present(dir / "manifest.json") && !is_checkpoint_manifest(read_text_file(dir / "manifest.json")))
    throw refuse("holds another tool's manifest.json (a prepared corpus's?), which saving the model would replace");
  const auto metadata = own_model_metadata(dir);
  if (!metadata)
    throw refuse("holds " + held + " and no qkvlab model (a Hugging Face model or another tool's files), which saving "
                 "the model would replace");
  if (metadata->count("run_id"))  // lm train's own model, copied without its optimizer state
    throw refuse("holds a trained model (lm train's run " + metadata->at("run_id") + "), which saving the model would replace");
  if (!written_in_place(*metadata)) throw refuse(unmarked_model(*metadata));
}

Checkpoint load_checkpoint(const fs::path& dir, bool with_optimizer, bool allow_nonfinite) {
  const fs::path path = dir / "model.safetensors";
  if (!fs::exists(fs::symlink_status(path)))  // a FIFO or a directory is opened below: "not a regular file"
    throw UsageError(dir.string() + ": no model.safetensors in this directory");
  if (!is_own_checkpoint(dir)) {
    try {
      engine::MappedSafeTensors{path};  // a malformed file reports its own error first
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
    throw UsageError(path.string() + ": not a qkvlab checkpoint (no \"format\": \"qkvlab-lm\" in its metadata)");
  }
  std::optional<Manifest> manifest;  // its files are checked by read_parameters (verify_manifest_if_present)
  if (fs::exists(fs::symlink_status(dir / "manifest.json"))) manifest = read_manifest(dir / "manifest.json");
  if (with_optimizer && !manifest)
    throw UsageError(dir.string() + ": no manifest.json: a checkpoint write did not finish (or the checkpoint "
                     "predates manifests), so its files may come from different steps; cannot resume from it");
  ModelFiles files = open_model(dir);
  files.allow_nonfinite = allow_nonfinite;
  Checkpoint ck;
  ck.config = files.config;
  ck.metadata = files.metadata;
  if (fs::is_regular_file(dir / "tokenizer.json")) ck.tokenizer_json = read_text_file(dir / "tokenizer.json");
  const auto layout = parameter_layout(ck.config, make_plan(ck.config));
  ck.values.assign(layout.total(), 0.0f);
  read_parameters(files, layout, [&](const engine::ParameterSpec& spec, const float* x) {
    std::copy(x, x + spec.size(), ck.values.begin() + std::ptrdiff_t(spec.offset));
  });
  if (!with_optimizer) return ck;
  const fs::path opt_path = dir / "optimizer.safetensors";
  if (!fs::is_regular_file(opt_path)) throw UsageError(dir.string() + ": no optimizer.safetensors to resume from");
  ck.optimizer = read_optimizer(opt_path, layout);
  tie_optimizer(dir, *manifest, ck, engine::MappedSafeTensors(opt_path).view());
  return ck;
}

}  // namespace qkvlab::lm
