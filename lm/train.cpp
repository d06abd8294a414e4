#include "lm/train.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <set>
#include <span>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/fnv.hpp"
#include "core/json_text.hpp"
#include "corpus/batches.hpp"
#include "corpus/manifest.hpp"
#include "corpus/ngram.hpp"
#include "corpus/token_file.hpp"
#include "lm/tokenizer.hpp"
#include "lm/checkpoint.hpp"
#include "lm/describe.hpp"
#include "lm/model.hpp"
#include "lm/run_log.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;

namespace {

// "d 16 there, 8 here; …": each field of the configurations (canonical: a field the model does
// not read at its default) where `there` (a checkpoint's) and `here` (this run's) differ.
std::string configuration_differences(const Config& there, const Config& here) {
  const auto a = to_metadata(canonical(there)), b = to_metadata(canonical(here));
  std::set<std::string> keys;
  for (const auto* m : {&a, &b})
    for (const auto& [key, value] : *m) keys.insert(key);
  std::string text;
  const auto of = [](const std::map<std::string, std::string>& m, const std::string& key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("none") : it->second;
  };
  for (const std::string& key : keys)
    if (of(a, key) != of(b, key)) text += (text.empty() ? "" : "; ") + key + " " + of(a, key) + " there, " + of(b, key) + " here";
  return text;
}

constexpr const char* kTrainLogHeader = "step,loss,lr,grad_norm,seconds";

// Whether `file` is an lm train log (its header), as a run writes before its first checkpoint; a
// corpus's baselines.json or someone else's train.csv is not one.
bool started_log(const fs::path& file) {
  std::ifstream in(file);
  std::string header;
  return std::getline(in, header) && header == kTrainLogHeader;
}

}  // namespace

// ---- presets ------------------------------------------------------------------------------------

namespace {

RunOptions preset_options(Family family, int layers, int d, int heads, int vocab, int seq, int batch,
                          std::int64_t steps, double lr, bool tied) {
  RunOptions o;
  o.model = family_defaults(family, layers, d, heads, vocab, seq);
  o.model.tied = tied, o.model.bias = family == Family::gpt2;
  o.batch = batch, o.seq = seq;
  o.loop.steps = steps, o.loop.lr = lr, o.loop.min_lr = lr / 10, o.loop.warmup = engine::default_warmup(steps);
  o.loop.clip = 1.0, o.loop.adamw = {0.9, 0.95, 1e-8, 0.1};
  return o;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> list = [] {
    std::vector<Preset> p;
    p.push_back({"tiny", "GPT-2 family, L = 6, d = 128, H = 4, T = 128, vocabulary 4096, 16 sequences a step: "
                         "about 5 minutes on two cores",
                 preset_options(Family::gpt2, 6, 128, 4, 4096, 128, 16, 1200, 2e-3, true)});
    p.push_back({"tiny-llama", "Llama family (RMSNorm, SwiGLU, RoPE), otherwise as tiny",
                 preset_options(Family::llama, 6, 128, 4, 4096, 128, 16, 1200, 2e-3, false)});
    p.push_back({"llama-82m", "ResFormer's 82M Llama's shape (L = 8, d = 512, H = 8, FFN 1792, untied) at the corpus's "
                 "V = 4,096: 34.6M parameters (81.9M at the paper's V = 50,277), T = 1024: for a GPU",
                 preset_options(Family::llama, 8, 512, 8, 4096, 1024, 32, 5000, 6e-4, false)});
    p.back().options.model.ffn = 1792;
    p.push_back({"gpt2-125m", "GPT-2 small's shape (L = 12, d = 768, H = 12, tied) at the corpus's V = 4,096: 89.0M "
                 "parameters (124.4M at GPT-2's V = 50,257), T = 1024: for a GPU",
                 preset_options(Family::gpt2, 12, 768, 12, 4096, 1024, 32, 5000, 6e-4, true)});
    return p;
  }();
  return list;
}

const Preset& find_preset(const std::string& name) {
  std::string known;
  for (const auto& p : presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : "|") + p.name;
  }
  throw UsageError("unknown preset \"" + name + "\" (known: " + known + ")");
}

// ---- data ------------------------------------------------------------------------------------------

namespace {

std::vector<std::int32_t> read_stream(const fs::path& path) {
  corpus::TokenArray a = corpus::read_token_file(path);
  return std::move(a.ids);  // a 2-D file is taken row after row as one stream
}

// `source`: the tokens' files (TrainData::source), named with an id outside the vocabulary.
results::Value baselines_value(const std::vector<std::int32_t>& train, const std::vector<std::int32_t>& validation,
                               int vocab, const std::string& source) {
  for (const auto* stream : {&train, &validation})
    for (std::size_t i = 0; i < stream->size(); ++i)
      if ((*stream)[i] < 0 || (*stream)[i] >= vocab)
        throw UsageError(source + ": token id " + std::to_string((*stream)[i]) + " at position " + std::to_string(i) +
                         " of the " + (stream == &train ? "training" : "validation") +
                         " stream is outside the model's vocabulary of " + std::to_string(vocab));
  const corpus::Baselines b = corpus::ngram_baselines(train, validation, vocab);
  results::Value v = results::Value::object();
  v.set("unigram_nats", b.unigram_nats);
  v.set("bigram_nats", b.bigram_nats);
  v.set("bigram_lambda", b.lambda.lambda);
  v.set("train_tokens", b.train_tokens);
  v.set("validation_positions", b.validation_positions);
  v.set("definition", "unigram: add-one; bigram: Jelinek-Mercer interpolation with the unigram, lambda by EM on a "
                      "held-out tenth of the training tokens (corpus/ngram.hpp)");
  return v;
}

}  // namespace

TrainData brown_data(const fs::path& dir) {
  TrainData d;
  d.train = read_stream(corpus::prepared_file(dir, "train_tokens.npy"));
  d.validation = read_stream(corpus::prepared_file(dir, "validation_tokens.npy"));
  d.source = "brown (" + dir.string() + ")";
  if (fs::is_regular_file(dir / "vocab.json") && fs::is_regular_file(dir / "merges.txt"))
    d.tokenizer_json =
        tokenizer_json(corpus::Bpe::load(corpus::prepared_file(dir, "vocab.json"), corpus::prepared_file(dir, "merges.txt")));
  return d;
}

TrainData file_data(const fs::path& tokens, const std::optional<fs::path>& validation) {
  TrainData d;
  d.train = read_stream(tokens);
  if (validation) {
    d.validation = read_stream(*validation);
    d.source = tokens.string() + " (validation " + validation->string() + ")";
  } else {
    const std::size_t cut = d.train.size() - d.train.size() / 10;
    d.validation.assign(d.train.begin() + std::ptrdiff_t(cut), d.train.end());
    d.train.resize(cut);
    d.source = tokens.string() + " (its last tenth for validation)";
  }
  return d;
}

// ---- the run ---------------------------------------------------------------------------------------

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string real(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// The tokens' little-endian bytes through FNV-1a (core/fnv.hpp).
std::uint64_t fnv1a(const std::vector<std::int32_t>& tokens) {
  std::uint64_t h = kFnvOffset;
  for (std::int32_t t : tokens) {
    const char bytes[4] = {char(t), char(std::uint32_t(t) >> 8), char(std::uint32_t(t) >> 16), char(std::uint32_t(t) >> 24)};
    h = fnv1a64(std::string_view(bytes, 4), h);
  }
  return h;
}

// The run's identity (lm/checkpoint.hpp "run_id"): the checksum of everything that changes its numbers,
// the model's configuration and run_identity, so that the same command makes the same bytes.
std::string run_id_of(const RunOptions& o, const TrainData& data) {
  std::string text;
  for (const auto& [key, value] : to_metadata(o.model)) text += key + "=" + value + "\n";
  for (const auto& [key, value] : run_identity(o, data)) text += key + "=" + value + "\n";
  return hex64(fnv1a64(text));
}

}  // namespace

std::map<std::string, std::string> run_identity(const RunOptions& o, const TrainData& data) {
  const auto& l = o.loop;
  // run.products only when not f32, so that the float32 runs keep their identities
  std::map<std::string, std::string> id{
      {"run.seed", std::to_string(o.seed)},          {"run.batch", std::to_string(o.batch)},
      {"run.seq", std::to_string(o.seq)},            {"run.accum", std::to_string(l.accum)},
      {"run.steps", std::to_string(l.steps)},        {"run.lr", real(l.lr)},
      {"run.min_lr", real(l.min_lr)},                {"run.warmup", std::to_string(l.warmup)},
      {"run.clip", real(l.clip)},                    {"run.weight_decay", real(l.adamw.weight_decay)},
      {"run.beta1", real(l.adamw.beta1)},            {"run.beta2", real(l.adamw.beta2)},
      {"run.eps", real(l.adamw.eps)},                {"run.train_tokens", std::to_string(data.train.size())},
      {"run.from", o.init_from ? escape_invalid_utf8(o.init_from->string()) : ""},  // as the metadata holds it
      {"run.train_hash", std::to_string(fnv1a(data.train))}};
  if (o.products != engine::WeightType::f32) id["run.products"] = engine::weight_type_name(o.products);
  return id;
}

namespace {

// Mean validation loss over `windows` windows spread evenly over the stream (all when ≥ the count).
struct Validation {
  double loss = 0;
  std::int64_t windows = 0, tokens = 0;
};

Validation validate(Model<float>& model, const corpus::Windows& all, int B, int T, int windows) {
  const std::int64_t n = windows <= 0 ? all.count : std::min<std::int64_t>(windows, all.count);
  std::vector<std::int32_t> ids(std::size_t(B) * T), targets(ids.size());
  LossSum total;
  for (std::int64_t first = 0; first < n; first += B) {
    for (int b = 0; b < B; ++b) {
      const std::int64_t k = first + b;
      const std::int64_t w = k < n ? k * all.count / n : 0;  // padding rows predict nothing
      std::copy_n(all.ids.begin() + w * T, T, ids.begin() + std::ptrdiff_t(b) * T);
      if (k < n)
        std::copy_n(all.targets.begin() + w * T, T, targets.begin() + std::ptrdiff_t(b) * T);
      else
        std::fill_n(targets.begin() + std::ptrdiff_t(b) * T, T, -1);
    }
    const LossSum l = model.forward(ids.data(), targets.data(), B, T, Pass::eval);
    total.sum += l.sum, total.count += l.count;
  }
  return {total.mean(), n, total.count};
}

// The loss of train.csv's row for `step` (a run whose last step is logged and checkpointed but whose
// final validation was cut): a UsageError when the log lacks it.
double last_logged_loss(const fs::path& path, std::int64_t step) {
  if (const auto loss = logged_value(path, step, 1)) return *loss;
  throw UsageError(path.string() + ": no loss logged for step " + std::to_string(step) + ": cannot finish the run");
}

// What run.json records of the checkpoint a run started from (--from): the FNV-1a checksum of its
// model.safetensors (the one its manifest.json lists), and what its metadata says of where it came
// from: the run_id of the run that saved it, its step, the conversion that made it. The run's own
// checkpoints keep them as "from.KEY", so that a resume records the checkpoint it started from, not
// what the --from path holds by then.
// The fields, in run.json's order: the checksum, then the metadata keys.
constexpr const char* kInitialChecksumKey = "model_fnv1a64";
constexpr std::array<const char*, 3> kInitialMetadataKeys = {"run_id", "step", "converted_by"};

std::map<std::string, std::string> initial_checkpoint_fields(const fs::path& dir, const Checkpoint& ck) {
  std::map<std::string, std::string> fields{{kInitialChecksumKey, hex64(file_sum(dir / "model.safetensors").fnv1a64)}};
  for (const char* key : kInitialMetadataKeys)
    if (const auto it = ck.metadata.find(key); it != ck.metadata.end()) fields[key] = it->second;
  return fields;
}

// run.json's "from": the path as given, then the fields above.
results::Value initial_checkpoint_value(const fs::path& dir, const std::map<std::string, std::string>& fields) {
  results::Value v = results::Value::object();
  v.set("path", dir.string());
  const auto set_if_known = [&](const char* key) {
    if (const auto it = fields.find(key); it != fields.end()) v.set(key, it->second);
  };
  set_if_known(kInitialChecksumKey);
  for (const char* key : kInitialMetadataKeys) set_if_known(key);
  return v;
}

// A CSV log a row at a time: started (or kept, when appending) as a regular file through
// core/atomic_file.hpp, then appended to without following a symlink put in its place.
class Log {
 public:
  Log(const fs::path& path, const std::string& header, bool append) : path_(path) {
    if (!append) write_bytes_atomically(path, "CSV", header + "\n");
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))
      throw UsageError("cannot write CSV file " + path.string() + ": not a regular file (or " + std::strerror(errno) + ")");
  }
  Log(const Log&) = delete;
  Log& operator=(const Log&) = delete;
  ~Log() {
    if (fd_ >= 0) ::close(fd_);
  }
  void row(const std::string& line) {
    try {
      write_all(fd_, line + "\n");
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot write CSV file " + path_.string() + ": " + e.what());
    }
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

struct Session {
  const RunOptions& o;
  const TrainData& data;
  engine::Backend<float>& backend;
  Model<float> model;
  engine::Trainer<float> trainer;
  Session(const RunOptions& options, const TrainData& d, engine::Backend<float>& be)
      : o(options), data(d), backend(be), model(options.model, be), trainer(be, model.parameters(), options.loop) {}

  const std::string run_id = run_id_of(o, data);
  std::map<std::string, std::string> from;  // initial_checkpoint_fields of --from; empty for a fresh start
  std::map<std::string, std::string> resumed_metadata;  // the checkpoint restore() resumed from

  fs::path checkpoint_dir() const { return o.out / "checkpoint"; }
  fs::path previous_dir() const { return o.out / "checkpoint.previous"; }

  void save(std::int64_t step) {
    Checkpoint ck;
    ck.config = o.model;
    ck.values = model.parameter_values();
    ck.metadata = run_identity(o, data);
    ck.metadata["step"] = std::to_string(step);
    ck.metadata["run_id"] = run_id;
    ck.metadata["data.validation_hash"] = validation_hash(data);
    ck.metadata["data.eval_windows"] = std::to_string(o.eval_windows);
    ck.metadata["source"] = data.source;
    for (const auto& [key, value] : from) ck.metadata["from." + key] = value;
    ck.tokenizer_json = data.tokenizer_json;
    auto& adamw = trainer.optimizer();
    ck.optimizer = OptimizerState{adamw.m.to_host(), adamw.v.to_host(), adamw.t};
    // Never without a whole checkpoint: the new one is written beside the last, which is moved aside
    // (checkpoint.previous) only once the new one is complete, and removed after it took its place; a
    // run killed between the two renames resumes from checkpoint.previous.
    const fs::path writing = o.out / "checkpoint.writing";
    fs::remove_all(writing);
    save_checkpoint(writing, ck);
    if (fs::exists(checkpoint_dir())) {
      fs::remove_all(previous_dir());
      fs::rename(checkpoint_dir(), previous_dir());
    }
    fs::rename(writing, checkpoint_dir());
    fs::remove_all(previous_dir());
  }

  // The checkpoint to resume from: checkpoint/, or checkpoint.previous/ where a save was cut between
  // its two renames (checkpoint/ then missing).
  fs::path resume_dir() const {
    return !fs::exists(checkpoint_dir()) && fs::exists(previous_dir() / "manifest.json") ? previous_dir()
                                                                                         : checkpoint_dir();
  }

  // The step to start at: 0, or the checkpoint's after checking it was made by this run's settings.
  // A run stopped before its first checkpoint left only its logs (and perhaps checkpoint.writing/):
  // resuming it starts again at step 0, which gives the bits the uninterrupted run would have.
  std::int64_t restore() {
    if (!o.resume) return 0;
    const fs::path dir = resume_dir();
    if (!fs::exists(dir / "model.safetensors") && !fs::exists(previous_dir()) && !fs::exists(o.out / "run.json") &&
        started_log(o.out / "train.csv")) {
      fs::remove_all(o.out / "checkpoint.writing");
      return 0;
    }
    if (!fs::exists(dir / "model.safetensors"))
      throw UsageError("cannot resume: no checkpoint in " + dir.string());
    const Checkpoint ck = load_checkpoint(dir, true, o.allow_nonfinite);
    if (to_metadata(canonical(ck.config)) != to_metadata(canonical(o.model)))
      throw UsageError("cannot resume: " + dir.string() + " holds a model of another configuration (" +
                       configuration_differences(ck.config, o.model) + ")");
    const auto identity = run_identity(o, data);
    for (const auto& [key, value] : identity) {
      const auto it = ck.metadata.find(key);
      if (it == ck.metadata.end() ? !value.empty() : it->second != value)  // an absent entry was empty
        throw UsageError("cannot resume: " + dir.string() + " was made with " + key.substr(4) + " = " +
                         (it == ck.metadata.end() ? "(none)" : it->second) + ", this run has " + value);
    }
    for (const auto& [key, value] : ck.metadata)  // and an entry this run leaves out (run.products = bf16)
      if (key.rfind("run.", 0) == 0 && !identity.count(key) && !value.empty())
        throw UsageError("cannot resume: " + dir.string() + " was made with " + key.substr(4) + " = " +
                         value + ", this run has none");
    const auto validation = ck.metadata.find("data.validation_hash");
    if (validation != ck.metadata.end() && validation->second != validation_hash(data))
      throw UsageError("cannot resume: " + dir.string() +
                       " was made with other validation tokens (--val-tokens): its validation curve would mix two streams");
    const auto windows = ck.metadata.find("data.eval_windows");  // absent in checkpoints before it was recorded
    if (windows != ck.metadata.end() && windows->second != std::to_string(o.eval_windows))
      throw UsageError("cannot resume: " + dir.string() + " was validated on --eval-windows " + windows->second +
                       ", this run asks " + std::to_string(o.eval_windows) +
                       ": its validation curve would mix two measures");
    const std::int64_t step = checked_step(ck);
    if (dir == checkpoint_dir()) fs::remove_all(previous_dir());  // a save cut after its second rename left it
    resumed_metadata = ck.metadata;
    model.set_parameters(ck.values);
    auto& adamw = trainer.optimizer();
    adamw.m.upload(ck.optimizer->m), adamw.v.upload(ck.optimizer->v), adamw.t = ck.optimizer->t;
    return step;
  }

  // The checkpoint's step, against the schedule: 1 … steps − 1 (the last step is a finished run), and
  // equal to the optimizer's update count t (one update a step).
  std::int64_t checked_step(const Checkpoint& ck) const {
    const fs::path file = resume_dir() / "model.safetensors";
    const std::int64_t step = metadata_integer(ck.metadata, "step", file);
    if (step < 1 || step > o.loop.steps)
      throw UsageError(file.string() + ": \"step\" = " + std::to_string(step) + " is outside this run's schedule of " +
                       std::to_string(o.loop.steps) + " steps");
    if (step != ck.optimizer->t)
      throw UsageError(file.string() + ": \"step\" = " + std::to_string(step) + " but the optimizer has taken " +
                       std::to_string(ck.optimizer->t) + " updates");
    if (!ck.metadata.count("run_id")) throw UsageError(file.string() + ": no \"run_id\" in its metadata");
    if (step == o.loop.steps && fs::exists(o.out / "run.json"))
      throw UsageError("cannot resume: the run in " + o.out.string() + " is finished (step " + std::to_string(step) +
                       " of " + std::to_string(o.loop.steps) + "); its results are kept");
    return step;  // the last step without run.json: cut in its final validation, which the resume does
  }

  engine::MicroLoss micro(std::int64_t step, int m, std::vector<std::int32_t>& ids, std::vector<std::int32_t>& tgt) {
    corpus::sample_windows(data.train, o.batch, o.seq, o.seed, step, m, ids.data(), tgt.data());
    const double scale = 1.0 / (double(o.batch) * o.seq * o.loop.accum);
    const LossSum l = model.forward(ids.data(), tgt.data(), o.batch, o.seq, Pass::train, scale);
    model.backward();
    return {l.sum, l.count};
  }
};

// --from: a fresh run starts from the checkpoint's weights and records it; a resumed one has its
// weights, and takes the record from the checkpoint it resumed (read from --from only where that
// checkpoint predates the record).
void start_from(Session& run, const fs::path& dir) {
  for (const auto& [key, value] : run.resumed_metadata)
    if (key.starts_with("from.")) run.from[key.substr(5)] = value;
  if (!run.from.empty()) return;
  const Checkpoint from = load_checkpoint(dir, false, run.o.allow_nonfinite);
  if (to_metadata(from.config) != to_metadata(run.o.model))
    throw UsageError(dir.string() + " holds a model of another configuration than this run's (" +
                     configuration_differences(from.config, run.o.model) + ")");
  if (run.resumed_metadata.empty()) run.model.set_parameters(from.values);
  run.from = initial_checkpoint_fields(dir, from);
}

// The run directory, created here when it is new (with the parents it needed). A run refused after it
// took the directory's lock and before it wrote anything (no checkpoint to resume, a token outside the
// vocabulary) removes what it created, the lock and the directories, which hold nothing else then: a
// refusal leaves nothing behind. A run that did not get the lock removes only the empty directories it
// made on the way (the lock, and the directory holding it, are another's).
class RunDirectory {
 public:
  explicit RunDirectory(const fs::path& dir)
      : created_(create(dir)), dir_(fs::canonical(dir)), lock_existed_(present(dir_ / ".qkvlab-lock")) {}
  RunDirectory(const RunDirectory&) = delete;
  RunDirectory& operator=(const RunDirectory&) = delete;
  void locked() { locked_ = true; }  // the lock is this run's
  ~RunDirectory() {
    if (std::uncaught_exceptions() == exceptions_) return;  // not refused
    std::error_code error;
    if (locked_ && !lock_existed_ && holds_only_the_lock()) fs::remove(dir_ / ".qkvlab-lock", error);  // its own
    // The directories this run made, deepest first; one that is not empty (a file in it, another run's
    // lock) stays, and the directories that were there before are not among them.
    for (auto d = created_.rbegin(); d != created_.rend(); ++d) fs::remove(*d, error);
  }

 private:
  bool holds_only_the_lock() const {
    std::error_code error;
    for (fs::directory_iterator it(dir_, error), end; !error && it != end; it.increment(error))
      if (it->path().filename() != ".qkvlab-lock") return false;
    return true;
  }
  static bool present(const fs::path& p) { return fs::exists(fs::symlink_status(p)); }  // a dangling link too
  // Makes `dir` a component at a time, as the file system resolves each prefix of the path as given
  // ("n3/../n4" makes n3 and n4; "nx/../link/../q", link -> real/sub, makes nx and real/q), and returns
  // the directories it made, outermost first.
  static std::vector<fs::path> create(const fs::path& dir) {
    std::vector<fs::path> made;
    fs::path prefix;
    try {
      for (const fs::path& part : fs::absolute(dir)) {
        prefix /= part;
        if (!part.empty() && fs::create_directory(prefix)) made.push_back(fs::canonical(prefix));
      }
    } catch (const fs::filesystem_error&) {  // a component that is a file, or not writable: none made stays
      std::error_code ignored;
      for (auto d = made.rbegin(); d != made.rend(); ++d) fs::remove(*d, ignored);
      throw;
    }
    return made;
  }
  std::vector<fs::path> created_;
  fs::path dir_;  // as the file system resolves it
  bool lock_existed_, locked_ = false;
  int exceptions_ = std::uncaught_exceptions();
};

}  // namespace

std::string validation_hash(const TrainData& data) { return std::to_string(fnv1a(data.validation)); }

const std::vector<std::string>& run_file_names() {
  static const std::vector<std::string> names = {"run.json",   "train.csv",           "validation.csv",
                                                 "baselines.json", "checkpoint",      "checkpoint.previous",
                                                 "checkpoint.writing"};
  return names;
}

results::Value train_language_model(const RunOptions& o, const TrainData& data, engine::Backend<float>& backend,
                                    const std::function<void(const Progress&)>& progress) {
  validate(o.model);
  // The checkpoints carry the corpus's tokenizer: a new model's ids must be its ids. A resumed run or
  // a model started --from another keeps the vocabulary it has (generate leaves ids without text).
  if (!data.tokenizer_json.empty() && !o.resume && !o.init_from) {
    const int ids = Tokenizer::from_json(data.tokenizer_json, data.source + "'s tokenizer").vocab_size();
    if (ids != o.model.vocab)
      throw UsageError("--vocab " + std::to_string(o.model.vocab) + ": the corpus's tokenizer has " + std::to_string(ids) +
                       " ids, and the model's must match it (a larger one predicts ids no text decodes to): give --vocab " +
                       std::to_string(ids));
  }
  if (data.train.size() < std::size_t(o.seq) + 1 || data.validation.size() < std::size_t(o.seq) + 1)
    throw UsageError("the training and validation streams need more than the sequence length, " +
                     std::to_string(o.seq) + " tokens, each (" + std::to_string(data.train.size()) + " and " +
                     std::to_string(data.validation.size()) + ")");
  RunDirectory directory(o.out);  // declared before the lock, so released after it
  const DirectoryLock lock(o.out, "lm train");  // one writer per run directory, for the whole run
  directory.locked();
  if (!o.resume)  // a fresh run never writes over another's files (nor a corpus's baselines.json)
    for (const std::string& name : run_file_names())
      if (fs::exists(o.out / name))
        throw UsageError(o.out.string() + " already holds " + name + " (a run, or another directory's file): "
                         "continue that run with --resume, or train into another directory");
  const engine::ProductTypeScope<float> products(backend, o.products);
  Session run(o, data, backend);
  run.model.initialize(o.seed);
  const std::int64_t start = run.restore();
  if (o.init_from) start_from(run, *o.init_from);
  const results::Value baselines = baselines_value(data.train, data.validation, o.model.vocab, data.source);
  write_bytes_atomically(o.out / "baselines.json", "JSON", baselines.json());
  if (start > 0) {
    truncate_logs(start, {{o.out / "train.csv", LogRows::every_step}, {o.out / "validation.csv", LogRows::ascending}});
  }
  Log train_log(o.out / "train.csv", kTrainLogHeader, start > 0);
  Log val_log(o.out / "validation.csv", "step,loss,windows,tokens", start > 0);
  const corpus::Windows windows = corpus::evaluation_windows(data.validation, o.seq);

  std::vector<std::int32_t> ids(std::size_t(o.batch) * o.seq), tgt(ids.size());
  const double t0 = now();
  double train_seconds = 0, last_loss = start == o.loop.steps ? last_logged_loss(o.out / "train.csv", start) : 0;
  std::optional<double> last_val;
  for (std::int64_t s = start; s < o.loop.steps; ++s) {
    const double ts = now();
    const engine::StepStats st = run.trainer.step([&](int m) { return run.micro(s, m, ids, tgt); });
    train_seconds += now() - ts;
    if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm))
      throw NumericalError("training diverged at step " + std::to_string(s + 1) + " (loss " + real(st.loss) +
                           ", gradient norm " + real(st.grad_norm) + "); " +
                           (fs::exists(o.out / "checkpoint" / "manifest.json") ? "the last checkpoint is kept"
                                                                               : "no checkpoint was written"));
    last_loss = st.loss;
    train_log.row(std::to_string(s + 1) + "," + real(st.loss) + "," + real(st.lr) + "," + real(st.grad_norm) + "," +
                  real(now() - t0));
    if ((s + 1) % o.eval_every == 0 || s + 1 == o.loop.steps) {
      const Validation v = validate(run.model, windows, o.batch, o.seq, o.eval_windows);
      last_val = v.loss;
      val_log.row(std::to_string(s + 1) + "," + real(v.loss) + "," + std::to_string(v.windows) + "," +
                  std::to_string(v.tokens));
    }
    if ((s + 1) % o.checkpoint_every == 0 || s + 1 == o.loop.steps) run.save(s + 1);
    const double tps = double(s + 1 - start) * o.batch * o.seq * o.loop.accum / train_seconds;
    const double per_step = (now() - t0) / double(s + 1 - start);
    if (progress)
      progress({s + 1, o.loop.steps, st.loss, st.lr, tps, now() - t0, per_step * double(o.loop.steps - s - 1),
                last_val});
  }
  const Validation full = validate(run.model, windows, o.batch, o.seq, 0);
  results::Value out = results::Value::object();
  out.set("model", config_value(o.model));
  out.set("data", data.source);
  // The tokens' hashes (the checkpoint's run.train_hash and data.validation_hash): what lm compare
  // reads to tell corpora apart, whatever their names or paths.
  results::Value hashes = results::Value::object();
  hashes.set("train", run_identity(o, data).at("run.train_hash"));
  hashes.set("validation", validation_hash(data));
  out.set("data_hashes", hashes);
  out.set("seed", o.seed);
  if (o.init_from) out.set("from", initial_checkpoint_value(*o.init_from, run.from));  // absent: a fresh start
  results::Value loop = results::Value::object();
  loop.set("steps", o.loop.steps), loop.set("batch", o.batch), loop.set("seq_len", o.seq);
  loop.set("accum", o.loop.accum), loop.set("lr", o.loop.lr), loop.set("min_lr", o.loop.min_lr);
  loop.set("warmup", o.loop.warmup), loop.set("clip", o.loop.clip);
  loop.set("weight_decay", o.loop.adamw.weight_decay), loop.set("beta1", o.loop.adamw.beta1);
  loop.set("beta2", o.loop.adamw.beta2);
  if (o.products != engine::WeightType::f32)  // absent: f32 (so lm compare tells the two apart)
    loop.set("products", engine::weight_type_name(o.products));
  out.set("training", loop);
  out.set("resumed_from", start);
  out.set("final_train_loss", last_loss);
  out.set("final_validation_loss", full.loss);
  out.set("validation_tokens", full.tokens);
  out.set("baselines", baselines);
  out.set("tokens_per_second", start < o.loop.steps  // null: a resume that only validated
                                   ? results::Value(double(o.loop.steps - start) * o.batch * o.seq * o.loop.accum /
                                                    train_seconds)
                                   : results::Value());
  out.set("seconds", now() - t0);
  out.set("device", backend.description());
  out.set("qkvlab_version", QKVLAB_VERSION);
  out.set("command_line", o.command_line);
  write_bytes_atomically(o.out / "run.json", "JSON", out.json());
  return out;
}

}  // namespace qkvlab::lm
