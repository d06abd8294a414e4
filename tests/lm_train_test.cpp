// lm/train and lm/compare: a resumed run is bit-identical to an uninterrupted one
// (and a resume with other settings is refused); compare's numbers against
// run.json's, with the baseline's relative curve identically zero.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "corpus/token_file.hpp"
#include "engine/cpu_backend.hpp"
#include "lm/checkpoint.hpp"
#include "lm/compare.hpp"
#include "lm/run_log.hpp"
#include "lm/train.hpp"
#include "results/figure.hpp"
#include "run_command.hpp"

namespace qkvlab::lm {
namespace {

namespace fs = std::filesystem;

// A compared group's number, NaN where lm compare reports it unmeasured (null).
double number_or_nan(const results::Value& v) { return v.kind() == results::Value::Kind::null ? std::nan("") : v.number(); }

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::string t = (fs::temp_directory_path() / "qkvlab_train_XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~ScratchDir() { fs::remove_all(path); }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// A token stream with structure to learn: runs of a rising sequence mod V.
TrainData toy_data() {
  TrainData d;
  Rng rng(1, "lm_train_test/data");
  for (auto* s : {&d.train, &d.validation})
    for (int i = 0, x = 0; i < (s == &d.train ? 4000 : 800); ++i) {
      if (i % 17 == 0) x = rng.uniform_int(64);
      s->push_back(std::int32_t(x = (x + 3) % 64));
    }
  d.source = "toy";
  return d;
}

RunOptions tiny_run(const fs::path& out, std::uint64_t seed, VariantKind variant = VariantKind::vanilla) {
  RunOptions o;
  o.model = family_defaults(Family::gpt2, 2, 16, 2, 64, 16);
  o.model.variant.kind = variant;
  o.loop.steps = 6, o.loop.lr = 3e-3, o.loop.min_lr = 3e-4, o.loop.warmup = 2, o.loop.clip = 1.0;
  o.loop.adamw = {0.9, 0.95, 1e-8, 0.1};
  o.batch = 4, o.seq = 16, o.seed = seed, o.eval_every = 2, o.checkpoint_every = 3, o.eval_windows = 8;
  o.out = out;
  return o;
}

// train.csv without its time column.
std::string losses(const fs::path& run) {
  std::istringstream in(read_file(run / "train.csv"));
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

struct Interrupt : std::runtime_error {
  Interrupt() : std::runtime_error("interrupted") {}
};

// The run stopped after step 4, as a kill would stop it (its last checkpoint is step 3's).
void stop_after_step_4(const RunOptions& o, const TrainData& data, engine::CpuBackend<float>& backend) {
  EXPECT_THROW(train_language_model(o, data, backend,
                                    [](const Progress& p) {
                                      if (p.step == 4) throw Interrupt();
                                    }),
               Interrupt);
}

TEST(LmTrain, ResumeIsBitIdenticalToAnUninterruptedRun) {
  ScratchDir dir;
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(2);
  train_language_model(tiny_run(dir.path / "whole", 5), data, backend, {});
  // The same run stopped after step 4 (its last checkpoint is step 3's), then resumed.
  stop_after_step_4(tiny_run(dir.path / "cut", 5), data, backend);
  RunOptions resumed = tiny_run(dir.path / "cut", 5);
  resumed.resume = true;
  const results::Value r = train_language_model(resumed, data, backend, {});
  EXPECT_EQ(r["resumed_from"].number(), 3);
  EXPECT_EQ(losses(dir.path / "cut"), losses(dir.path / "whole"));
  EXPECT_EQ(read_file(dir.path / "cut" / "validation.csv"), read_file(dir.path / "whole" / "validation.csv"));
  EXPECT_EQ(read_file(dir.path / "cut" / "checkpoint" / "model.safetensors"),
            read_file(dir.path / "whole" / "checkpoint" / "model.safetensors"));
  // Controls: another seed gives other losses; a resume with another learning rate is refused.
  train_language_model(tiny_run(dir.path / "other", 6), data, backend, {});
  EXPECT_NE(losses(dir.path / "other"), losses(dir.path / "whole"));
  RunOptions changed = tiny_run(dir.path / "cut", 5);
  changed.resume = true, changed.loop.lr = 1e-3;
  EXPECT_THROW(train_language_model(changed, data, backend, {}), UsageError);
}

// A run is never left without a whole checkpoint, nor its directory overwritten:
//  - a fresh run into a directory holding a run is refused, its files untouched (control: the same
//    run into a new directory trains);
//  - a save cut between its two renames (checkpoint/ moved to checkpoint.previous/, the new one not
//    yet in place) resumes from checkpoint.previous/, bit-identical to an uninterrupted run (control:
//    with neither directory the resume is refused);
//  - a run cut in its final validation (checkpoint at the last step, no run.json) is finished by a
//    resume, with the uninterrupted run's losses (control: with run.json it is refused as finished);
//  - a resume with another --eval-windows is refused (its validation curve would mix two measures).
TEST(LmTrain, RunsSurviveInterruptionsAndAreNotOverwritten) {
  ScratchDir dir;
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(2);
  const fs::path whole = dir.path / "whole", cut = dir.path / "cut", unfinished = dir.path / "unfinished";
  const results::Value reference = train_language_model(tiny_run(whole, 5), data, backend, {});
  const std::string log = read_file(whole / "train.csv"), run_json = read_file(whole / "run.json");
  try {
    train_language_model(tiny_run(whole, 6), data, backend, {});
    ADD_FAILURE() << "a fresh run overwrote a run's directory";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("already holds"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(whole / "train.csv"), log);
  EXPECT_EQ(read_file(whole / "run.json"), run_json);

  stop_after_step_4(tiny_run(cut, 5), data, backend);
  fs::rename(cut / "checkpoint", cut / "checkpoint.previous");  // killed between the save's two renames
  RunOptions resumed = tiny_run(cut, 5), other_windows = tiny_run(cut, 5);
  resumed.resume = true, other_windows.resume = true, other_windows.eval_windows = 3;
  try {  // a validation curve of two measures
    train_language_model(other_windows, data, backend, {});
    ADD_FAILURE() << "a resume with other --eval-windows was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--eval-windows 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(train_language_model(resumed, data, backend, {})["resumed_from"].number(), 3);
  EXPECT_EQ(losses(cut), losses(whole));
  EXPECT_EQ(read_file(cut / "checkpoint" / "model.safetensors"), read_file(whole / "checkpoint" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(cut / "checkpoint.previous"));
  fs::remove_all(cut / "checkpoint");
  for (const char* log : {"train.csv", "validation.csv", "baselines.json"}) fs::remove(cut / log);
  EXPECT_THROW(train_language_model(resumed, data, backend, {}), UsageError);  // control: nothing to resume

  fs::create_directories(unfinished);
  for (const char* f : {"train.csv", "validation.csv", "baselines.json"}) fs::copy_file(whole / f, unfinished / f);
  fs::copy(whole / "checkpoint", unfinished / "checkpoint");  // the last step's checkpoint, no run.json
  RunOptions finish = tiny_run(unfinished, 5);
  finish.resume = true;
  const results::Value finished = train_language_model(finish, data, backend, {});
  EXPECT_EQ(finished["resumed_from"].number(), 6);
  EXPECT_EQ(finished["final_validation_loss"].number(), reference["final_validation_loss"].number());
  EXPECT_EQ(finished["final_train_loss"].number(), reference["final_train_loss"].number());
  EXPECT_EQ(finished["tokens_per_second"].kind(), results::Value::Kind::null);
  EXPECT_EQ(losses(unfinished), losses(whole));
  EXPECT_THROW(train_language_model(finish, data, backend, {}), UsageError);  // control: finished now
}

// A run refused before it writes anything leaves nothing behind: a resume with no checkpoint into a
// new directory leaves no directory, nor the parents it created (it left one holding .qkvlab-lock), nor
// any other directory its path made.
// Control: an existing empty directory is the user's and stays, empty.
TEST(LmTrain, ARefusedRunLeavesNoDirectoryItCreated) {
  ScratchDir dir;
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(1);
  RunOptions nothing_to_resume = tiny_run(dir.path / "new" / "nested" / "run", 1);
  nothing_to_resume.resume = true;
  EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
  EXPECT_FALSE(fs::exists(dir.path / "new")) << "the parents it created stayed";
  EXPECT_TRUE(fs::is_directory(dir.path));  // control: what existed before stays, though empty
  fs::create_directories(dir.path / "mine");
  nothing_to_resume.out = dir.path / "mine";
  EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
  EXPECT_TRUE(fs::is_directory(dir.path / "mine"));
  EXPECT_TRUE(fs::is_empty(dir.path / "mine")) << "the refused run's lock stayed";
  // A path through a symbolic link and '..' is the directory the file system made (real/zz, not ./zz).
  fs::create_directories(dir.path / "real" / "sub");
  fs::create_directory_symlink(dir.path / "real" / "sub", dir.path / "link");
  nothing_to_resume.out = dir.path / "link" / ".." / "zz";
  EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
  EXPECT_FALSE(fs::exists(dir.path / "real" / "zz")) << "the refused run's directory stayed beside the link's target";
  // Every directory the path as given makes is removed: "n3/../n4" makes n3 too (n3 stayed).
  nothing_to_resume.out = dir.path / "n3" / ".." / "n4";
  EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
  EXPECT_FALSE(fs::exists(dir.path / "n3")) << "a directory the refused run made on its way stayed";
  EXPECT_FALSE(fs::exists(dir.path / "n4"));
  // ... as the file system resolves it: through nx/.. then link/.. the run's directory is real/q.
  nothing_to_resume.out = dir.path / "nx" / ".." / "link" / ".." / "q";
  EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
  EXPECT_FALSE(fs::exists(dir.path / "real" / "q")) << "the refused run's directory (and lock) stayed";
  EXPECT_FALSE(fs::exists(dir.path / "nx"));
  EXPECT_TRUE(fs::is_directory(dir.path / "real" / "sub"));  // control: what existed before stays
  EXPECT_TRUE(fs::is_symlink(dir.path / "link"));
  // A lock this run did not take is not its to remove: a dangling link named .qkvlab-lock stays.
  fs::create_directories(dir.path / "dangling");
  fs::create_symlink(dir.path / "nowhere", dir.path / "dangling" / ".qkvlab-lock");
  nothing_to_resume.out = dir.path / "dangling";
  EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
  EXPECT_TRUE(fs::is_symlink(dir.path / "dangling" / ".qkvlab-lock"));
  // A run that did not get the lock still removes the empty directories it made on the way to it
  // (ny and nz stayed); the lock and the directory holding it are another's and stay.
  nothing_to_resume.out = dir.path / "ny" / ".." / "dangling";
  EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
  EXPECT_FALSE(fs::exists(dir.path / "ny"));
  EXPECT_TRUE(fs::is_symlink(dir.path / "dangling" / ".qkvlab-lock"));
  fs::create_directories(dir.path / "held");
  {
    const DirectoryLock other(dir.path / "held", "another run");
    nothing_to_resume.out = dir.path / "nz" / ".." / "held";
    EXPECT_NE(test_support::usage_error([&] { train_language_model(nothing_to_resume, data, backend, {}); }).find("in use"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(dir.path / "nz"));
    EXPECT_TRUE(fs::exists(dir.path / "held" / ".qkvlab-lock"));  // control: the other run's lock stays
    std::ofstream(dir.path / "held" / "run.json") << "{}";  // a running run has files there: nz still goes
    nothing_to_resume.out = dir.path / "nw" / ".." / "held";
    EXPECT_THROW(train_language_model(nothing_to_resume, data, backend, {}), UsageError);
    EXPECT_FALSE(fs::exists(dir.path / "nw"));
    EXPECT_TRUE(fs::exists(dir.path / "held" / "run.json"));
  }
}

// A run started from a checkpoint (--from) records it in run.json: the path as given, the checksum of its
// model.safetensors (its manifest's) and the run that saved it; a fresh run records none.
// A --from path with a byte that is not UTF-8 is kept in the checkpoint's metadata as \xNN (the
// metadata is JSON); a resume compares its own path in that form, so it resumes (it was refused as
// "made with from = ck\xff, this run has ck\xff"). Control: another --from is still refused.
TEST(LmTrain, AResumeFromAPathThatIsNotUtf8) {
  ScratchDir dir;
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(2);
  train_language_model(tiny_run(dir.path / "first", 1), data, backend, {});
  const fs::path odd = dir.path / "ck\xff";
  fs::copy(dir.path / "first" / "checkpoint", odd);
  RunOptions cut = tiny_run(dir.path / "cut", 2);
  cut.init_from = odd;
  stop_after_step_4(cut, data, backend);
  RunOptions other = cut;
  other.resume = true, other.init_from = dir.path / "first" / "checkpoint";
  EXPECT_THROW(train_language_model(other, data, backend, {}), UsageError);
  cut.resume = true;
  EXPECT_EQ(train_language_model(cut, data, backend, {})["resumed_from"].number(), 3);
}

TEST(LmTrain, RecordsTheCheckpointItStartedFrom) {
  ScratchDir dir;
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(2);
  const results::Value first = train_language_model(tiny_run(dir.path / "first", 1), data, backend, {});
  EXPECT_EQ(first.find("from"), nullptr) << "a fresh start recorded a checkpoint";
  RunOptions on = tiny_run(dir.path / "on", 2);
  on.init_from = dir.path / "first" / "checkpoint";
  const results::Value second = train_language_model(on, data, backend, {});
  ASSERT_NE(second.find("from"), nullptr);
  const results::Value& from = second["from"];
  EXPECT_EQ(from["path"].string(), on.init_from->string());
  const std::string checksum = from["model_fnv1a64"].string();
  EXPECT_EQ(checksum.size(), 16u) << checksum;
  EXPECT_NE(read_file(dir.path / "first" / "checkpoint" / "manifest.json").find(checksum), std::string::npos);
  EXPECT_EQ(from["run_id"].string(), load_checkpoint(*on.init_from).metadata.at("run_id"));
  EXPECT_EQ(from["step"].string(), "6");
  EXPECT_NE(read_file(dir.path / "on" / "run.json").find("\"from\""), std::string::npos);
  // A resume records the checkpoint the run started from, though the --from path holds another by
  // then (control: a fresh run from it records the other's checksum), and needs none there at all.
  const fs::path origin = dir.path / "origin";
  fs::copy(dir.path / "first" / "checkpoint", origin);
  RunOptions cut = tiny_run(dir.path / "cut", 2);
  cut.init_from = origin;
  stop_after_step_4(cut, data, backend);
  train_language_model(tiny_run(dir.path / "other", 3), data, backend, {});
  fs::remove_all(origin);
  fs::copy(dir.path / "other" / "checkpoint", origin);
  RunOptions other_from = tiny_run(dir.path / "from-other", 2);
  other_from.init_from = origin;
  const std::string other_checksum = train_language_model(other_from, data, backend, {})["from"]["model_fnv1a64"].string();
  EXPECT_NE(other_checksum, checksum);
  cut.resume = true;
  const results::Value resumed = train_language_model(cut, data, backend, {});
  EXPECT_EQ(resumed["resumed_from"].number(), 3);
  EXPECT_EQ(resumed["from"]["model_fnv1a64"].string(), checksum);
  EXPECT_EQ(resumed["from"]["run_id"].string(), from["run_id"].string());
  EXPECT_EQ(losses(dir.path / "cut"), losses(dir.path / "on"));
  fs::remove_all(dir.path / "cut" / "run.json");
  fs::remove_all(origin);
  EXPECT_NO_THROW(train_language_model(cut, data, backend, {}));
}

// A resumed run's logs keep the rows its checkpoint (step 3) has: a last line without its newline (the
// row being appended when the run stopped) is dropped; rows lost, repeated or out of order, or a
// log without a whole header, are refused, where a resume would write a log no reader accepts.
// Control: whole logs are cut at the checkpoint's step.
TEST(RunLog, AResumeKeepsTheCheckpointsRowsAndRefusesALogThatLostSome) {
  ScratchDir dir;
  const fs::path f = dir.path / "train.csv";
  auto truncated = [&](const std::string& text, LogRows rows) {
    std::ofstream(f, std::ios::binary) << text;
    truncate_logs(3, {{f, rows}});
    return read_file(f);
  };
  const std::string whole = "step,loss\n1,1\n2,1\n3,1\n";
  EXPECT_EQ(truncated(whole + "4,1\n5,1\n", LogRows::every_step), whole);
  EXPECT_EQ(truncated(whole + "4,1\n2", LogRows::every_step), whole);  // "2" is the start of "2386,…"
  EXPECT_EQ(truncated(whole + "\n4,1\n", LogRows::every_step), whole);
  EXPECT_EQ(truncated("step,loss\n2,1\n3,1\n4,1\n", LogRows::ascending), "step,loss\n2,1\n3,1\n");
  for (const std::string& lost : {std::string(""), std::string("step,lo"), std::string("step,loss\n"),
                                  std::string("step,loss\n1,1\n2,1\n3"), std::string("step,loss\n1,1\n3,1\n4,1\n"),
                                  std::string("step,loss\n1,1\n2,1\n2,1\n3,1\n")})
    EXPECT_THROW(truncated(lost, LogRows::every_step), UsageError) << lost;
  EXPECT_THROW(truncated("step,loss\n2,1\n2,1\n", LogRows::ascending), UsageError);
  // An edited row a reader refuses (review r29: the resume kept it, and lm compare then refused the
  // run): a value not a finite number, or another count of fields than the header's.
  for (const std::string& edited : {std::string("2,nan"), std::string("2,abc"), std::string("2,inf"), std::string("2"),
                                    std::string("2,"), std::string("2,1,5")})
    EXPECT_THROW(truncated("step,loss\n1,1\n" + edited + "\n3,1\n", LogRows::every_step), UsageError) << edited;
  EXPECT_EQ(truncated("step,loss\n1,1\n2,-0.5e-3\n3,1\n", LogRows::every_step), "step,loss\n1,1\n2,-0.5e-3\n3,1\n");
  // Both logs are checked before either is rewritten (review r30: a refused validation.csv left train.csv
  // cut at the checkpoint); control: with both whole, both are cut.
  const fs::path v = dir.path / "validation.csv";
  std::ofstream(f, std::ios::binary) << whole << "4,1\n";
  std::ofstream(v, std::ios::binary) << "step,loss\n2,nan\n";
  EXPECT_THROW(truncate_logs(3, {{f, LogRows::every_step}, {v, LogRows::ascending}}), UsageError);
  EXPECT_EQ(read_file(f), whole + "4,1\n");
  std::ofstream(v, std::ios::binary) << "step,loss\n2,1\n4,1\n";
  truncate_logs(3, {{f, LogRows::every_step}, {v, LogRows::ascending}});
  EXPECT_EQ(read_file(f), whole);
  EXPECT_EQ(read_file(v), "step,loss\n2,1\n");
  try {
    truncated("step,loss\n1,1\n3,1\n", LogRows::every_step);
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("line 3 is step 3"), std::string::npos) << e.what();
  }
}

TEST(LmTrain, WritesBaselinesAndLearnsBelowTheUnigramModel) {
  ScratchDir dir;
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(2);
  RunOptions o = tiny_run(dir.path / "run", 1);
  o.loop.steps = 60, o.loop.warmup = 5, o.checkpoint_every = 60, o.eval_every = 30;
  const results::Value r = train_language_model(o, data, backend, {});
  const double unigram = r["baselines"]["unigram_nats"].number();
  EXPECT_NEAR(unigram, std::log(64.0), 0.05);  // the toy stream's tokens are nearly uniform
  EXPECT_LT(r["final_validation_loss"].number(), unigram - 0.3);
  for (const char* f : {"train.csv", "validation.csv", "baselines.json", "run.json", "checkpoint/model.safetensors"})
    EXPECT_TRUE(fs::exists(dir.path / "run" / f)) << f;
}

// The first column after the step of train.csv's row `step` (its loss).
double logged_loss(const fs::path& run, int step) {
  std::istringstream in(read_file(run / "train.csv"));
  std::string line;
  std::getline(in, line);  // header
  for (int s = 1; std::getline(in, line); ++s)
    if (s == step) return std::stod(line.substr(line.find(',') + 1));
  throw std::runtime_error("no step " + std::to_string(step) + " in " + run.string());
}

// Training with bf16 products (RunOptions::products; lm train --dtype bf16): the first step's loss,
// at the same initial weights, within 2 u (u = 2⁻⁸) relative of the float32 run's, and not equal to
// it (control: the operands were rounded); the run learns as the float32 one does; run.json and the
// checkpoint record the type, a float32 run's identity is unchanged, a resume across the two types
// is refused both ways, and a bf16 run resumed is bit-identical to an uninterrupted one.
TEST(LmTrain, Bf16ProductsStayWithinTheirBudgetAndAreRecorded) {
  ScratchDir dir;
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(2);
  auto run = [&](const std::string& name, engine::WeightType type, std::int64_t steps) {
    RunOptions o = tiny_run(dir.path / name, 5);
    o.products = type, o.loop.steps = steps, o.loop.warmup = 5, o.checkpoint_every = 30, o.eval_every = 30;
    return o;
  };
  const RunOptions f32 = run("f32", engine::WeightType::f32, 60), bf16 = run("bf16", engine::WeightType::bf16, 60);
  EXPECT_EQ(run_identity(f32, data).count("run.products"), 0u);  // float32 runs keep their identities
  const results::Value rf = train_language_model(f32, data, backend, {});
  const results::Value rb = train_language_model(bf16, data, backend, {});
  EXPECT_EQ(backend.product_type(), engine::WeightType::f32) << "the run's product type outlived it";
  const double l32 = logged_loss(f32.out, 1), l16 = logged_loss(bf16.out, 1);
  EXPECT_LE(std::abs(l16 - l32), 2 * engine::unit_roundoff(engine::WeightType::bf16) * l32);
  EXPECT_NE(l16, l32) << "control: bf16 products gave the float32 loss";
  std::printf(
      "bf16 products: step 1 loss %.9g against float32 %.9g (relative %.2e); final validation %.4f "
      "against %.4f\n",
      l16, l32, std::abs(l16 - l32) / l32, rb["final_validation_loss"].number(), rf["final_validation_loss"].number());
  EXPECT_LT(rb["final_validation_loss"].number(), rb["baselines"]["unigram_nats"].number() - 0.3);
  EXPECT_EQ(rb["training"]["products"].string(), "bf16");
  EXPECT_EQ(rf["training"].find("products"), nullptr);
  EXPECT_EQ(load_checkpoint(bf16.out / "checkpoint", false).metadata.at("run.products"), "bf16");
  // lm compare keeps the two apart (run.json's training.products).
  const results::Value compared = compare_runs({f32.out, bf16.out}, {});
  const auto& groups = compared["groups"].items();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_NE(groups[0]["label"].string(), groups[1]["label"].string());
  // Runs cut at step 40 (checkpoint 30): resumed with the other type, refused for that reason; the
  // bf16 one resumed as bf16, bit-identical to the uninterrupted run.
  auto cut_at_40 = [&](const std::string& name, engine::WeightType type) {
    RunOptions o = run(name, type, 60);
    EXPECT_THROW(train_language_model(o, data, backend,
                                      [](const Progress& p) {
                                        if (p.step == 40) throw Interrupt();
                                      }),
                 Interrupt);
    o.resume = true;
    return o;
  };
  RunOptions cut = cut_at_40("cut", engine::WeightType::bf16), cut32 = cut_at_40("cut32", engine::WeightType::f32);
  for (RunOptions other : {cut, cut32}) {
    other.products = other.products == engine::WeightType::bf16 ? engine::WeightType::f32 : engine::WeightType::bf16;
    try {
      train_language_model(other, data, backend, {});
      ADD_FAILURE() << "a resume with the other product type was not refused";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("products"), std::string::npos) << e.what();
    }
  }
  train_language_model(cut, data, backend, {});
  EXPECT_EQ(losses(cut.out), losses(bf16.out));
  EXPECT_EQ(read_file(cut.out / "checkpoint" / "model.safetensors"),
            read_file(bf16.out / "checkpoint" / "model.safetensors"));
}

// Toy runs, seeds 1 and 2 of each named setting, in DIR/NAME-sSEED: their directories and each
// name's final validation losses.
struct ToyRuns {
  std::vector<fs::path> runs;
  std::map<std::string, std::vector<double>> finals;
};
ToyRuns train_toy_runs(const fs::path& dir, const std::vector<std::pair<std::string, std::function<void(RunOptions&)>>>& settings) {
  const TrainData data = toy_data();
  engine::CpuBackend<float> backend(2);
  ToyRuns t;
  for (const auto& [name, set] : settings)
    for (std::uint64_t seed : {1, 2}) {
      t.runs.push_back(dir / (name + "-s" + std::to_string(seed)));
      RunOptions o = tiny_run(t.runs.back(), seed);
      set(o);
      t.finals[name].push_back(train_language_model(o, data, backend, {})["final_validation_loss"].number());
    }
  return t;
}

TEST(LmCompare, GroupsBySeedAndMeasuresAgainstTheBaseline) {
  ScratchDir dir;
  auto [runs, finals] = train_toy_runs(dir.path, {{"vanilla", [](RunOptions& o) { o.model.variant.kind = VariantKind::vanilla; }},
                                                   {"resformer", [](RunOptions& o) { o.model.variant.kind = VariantKind::resformer; }}});
  CompareOptions o;
  o.window = 2;
  const results::Value c = compare_runs(runs, o);
  const auto& groups = c["groups"].items();
  ASSERT_EQ(groups.size(), 2u);
  for (const auto& g : groups) {
    const auto& f = finals.at(g["variant"].string());
    EXPECT_EQ(g["runs"].number(), 2);
    EXPECT_NEAR(g["final_validation_loss_mean"].number(), (f[0] + f[1]) / 2, 1e-12);
    if (g["variant"].string() == "vanilla") {  // the baseline is not measured against itself
      EXPECT_TRUE(std::isnan(number_or_nan(g["delta_vs_baseline_mean"])));
      EXPECT_EQ(g.find("final_relative_train_loss"), nullptr);
      continue;
    }
    const double delta = (f[0] + f[1]) / 2 - (finals["vanilla"][0] + finals["vanilla"][1]) / 2;
    EXPECT_NEAR(number_or_nan(g["delta_vs_baseline_mean"]), delta, 1e-12);  // paired by seed: the mean difference
    EXPECT_EQ(g["paired_seeds"].number(), 2);
    EXPECT_NE(g["final_relative_train_loss"].number(), 0.0);  // control: the variants' curves differ
  }
  EXPECT_EQ(moving_average({1, 2, 3, 4}, 2), (std::vector<double>{1, 1.5, 2.5, 3.5}));
  EXPECT_EQ(moving_average({1, 2, 3, 4}, 2, Smoothing::forward), (std::vector<double>{1.5, 2.5, 3.5, 4}));
  EXPECT_EQ(moving_average({1, 2, 4, 8}, 3, Smoothing::forward), (std::vector<double>{7.0 / 3, 14.0 / 3, 6, 8}));
  EXPECT_EQ(c["smoothing"].string(), "trailing");
  // Forward smoothing gives other relative curves from the same runs (control: the trailing ones).
  CompareOptions forward = o;
  forward.smoothing = Smoothing::forward;
  const results::Value cf = compare_runs(runs, forward);
  EXPECT_EQ(cf["smoothing"].string(), "forward");
  for (std::size_t i = 0; i < c["groups"].items().size(); ++i) {
    const results::Value& g = c["groups"].items()[i];
    if (g.find("final_relative_train_loss") == nullptr) continue;
    EXPECT_EQ(number_or_nan(cf["groups"].items()[i]["delta_vs_baseline_mean"]), number_or_nan(g["delta_vs_baseline_mean"]));
    EXPECT_GT(std::abs(cf["groups"].items()[i]["final_relative_train_loss"].number() - g["final_relative_train_loss"].number()), 1e-9);
  }
}

// --baseline names runs by their directories (NAME-sSEED), to measure against one of several groups of
// the same variant: ResFormer's λ = ½ against λ = 2, paired by seed.
TEST(LmCompare, BaselineByRunName) {
  ScratchDir dir;
  const auto lambda = [](double beta) {
    return [beta](RunOptions& o) { o.model.variant.kind = VariantKind::resformer, o.model.variant.alpha = 1, o.model.variant.beta = beta; };
  };
  auto [runs, finals] = train_toy_runs(dir.path, {{"resformer-l05", lambda(0.5)}, {"resformer-l2", lambda(2.0)}});
  const auto delta_of = [&](const std::string& baseline) {
    CompareOptions o;
    o.baseline = baseline;
    const results::Value c = compare_runs(runs, o);
    std::map<std::string, double> delta;
    for (const auto& g : c["groups"].items()) delta[g["label"].string()] = number_or_nan(g["delta_vs_baseline_mean"]);
    return delta;
  };
  const double l2_minus_l05 = (finals["resformer-l2"][0] - finals["resformer-l05"][0] +
                               finals["resformer-l2"][1] - finals["resformer-l05"][1]) / 2;
  const auto against_l05 = delta_of("resformer-l05");
  EXPECT_TRUE(std::isnan(against_l05.at("gpt2 resformer alpha=1 beta=0.5")));
  EXPECT_NEAR(against_l05.at("gpt2 resformer alpha=1 beta=2"), l2_minus_l05, 1e-12);
  // Control: naming the other runs turns the difference around.
  const auto against_l2 = delta_of("resformer-l2");
  EXPECT_NEAR(against_l2.at("gpt2 resformer alpha=1 beta=0.5"), -l2_minus_l05, 1e-12);
  EXPECT_TRUE(std::isnan(against_l2.at("gpt2 resformer alpha=1 beta=2")));
  EXPECT_NE(l2_minus_l05, 0.0);
  // --claim: the compared group's verdict is the rule's on its paired differences; the reference has none.
  const std::vector<double> paired = {finals["resformer-l2"][0] - finals["resformer-l05"][0],
                                      finals["resformer-l2"][1] - finals["resformer-l05"][1]};
  for (results::Sense sense : {results::Sense::less, results::Sense::greater}) {
    CompareOptions o;
    o.baseline = "resformer-l05", o.claim = sense;
    const results::Value c = compare_runs(runs, o);
    const std::string expected = results::judge({"", "", sense}, results::Rule{}, {results::over_replicates("", paired)}).verdict;
    for (const auto& g : c["groups"].items()) {
      if (g["label"].string() == "gpt2 resformer alpha=1 beta=0.5") {
        EXPECT_EQ(g.find("verdict"), nullptr);
        continue;
      }
      EXPECT_EQ(g["verdict"]["verdict"].string(), expected);
      EXPECT_EQ(g["verdict"]["uncertainty"]["replicates"].items().at(0).number(), 2);
    }
  }
}

// A run directory as lm train writes it, with only what lm compare reads: a gpt2 model of `variant`
// with `kv_heads` of 4 heads and SkipV1's `strategy`, the training object `training` (JSON members),
// the device, `seed`, the final validation loss and a logged row for each of the training's steps.
void write_run(const fs::path& dir, const std::string& variant, const std::string& training, int seed, double final,
               int kv_heads = 4, const std::string& device = "cpu (1 thread, OpenBLAS)",
               const std::string& strategy = "second-half", const std::string& from = "",
               const std::string& from_step = "", const std::string& data = R"x("brown (data/brown)")x",
               const std::string& data_hashes = R"({"train": "11", "validation": "22"})") {
  fs::create_directories(dir);
  const std::string step_member = from_step.empty() ? "" : R"(, "step": ")" + from_step + "\"";
  const std::string from_member =
      from.empty() ? "" : R"(, "from": {"path": ")" + from + R"(", "model_fnv1a64": "0123456789abcdef")" + step_member + "}";
  std::ofstream(dir / "run.json") << R"({"model": {"family": "gpt2", "variant": ")" << variant
                                  << R"(", "alpha": 0.5, "beta": 0.5, "lambda": 0.4, "skip_ratio": 0.5, )"
                                  << R"("source_layer": 1, "strategy": ")" << strategy
                                  << R"(", "mla": false, "heads": 4, "kv_heads": )" << kv_heads << R"(}, "training": {)"
                                  << training << R"(}, "data": )" << data
                                  << (data_hashes.empty() ? "" : R"(, "data_hashes": )" + data_hashes) << R"(, "device": ")" << device
                                  << R"(", "seed": )" << seed << from_member << R"(, "final_validation_loss": )" << final << "}\n";
  const std::size_t at = training.find("\"steps\": ") + 9;
  const int steps = std::stoi(training.substr(at));
  std::ofstream log(dir / "train.csv");
  log << "step,loss\n";
  for (int step = 1; step <= steps; ++step) log << step << "," << final + double(steps - step) / steps << "\n";
  std::ofstream(dir / "validation.csv") << "step,loss\n" << steps << "," << final << "\n";
}

// A group's baseline has its products: a float32 variant is measured against float32 vanilla runs,
// though bf16 vanilla runs are listed first and are more; among those, the vanilla runs trained as the
// variant was, though another float32 group has more runs. Without that group the float32 variant has
// none: the other float32 vanilla runs were trained longer (another budget). Control: without any
// float32 vanilla it has none either.
TEST(LmCompare, TheBaselineHasTheGroupsProducts) {
  ScratchDir dir;
  const std::string f32 = R"("steps": 2)", f32_longer = R"("steps": 3)", bf16 = R"("steps": 2, "products": "bf16")";
  std::vector<fs::path> bf16_vanilla, longer_vanilla, f32_vanilla, variants;
  for (int seed : {1, 2, 3}) {
    write_run(bf16_vanilla.emplace_back(dir.path / ("vb-s" + std::to_string(seed))), "vanilla", bf16, seed, 5.0);
    write_run(longer_vanilla.emplace_back(dir.path / ("vl-s" + std::to_string(seed))), "vanilla", f32_longer, seed, 4.0);
  }
  for (int seed : {1, 2}) {
    write_run(f32_vanilla.emplace_back(dir.path / ("vf-s" + std::to_string(seed))), "vanilla", f32, seed, 3.0);
    write_run(variants.emplace_back(dir.path / ("rf-s" + std::to_string(seed))), "resformer", f32, seed, 2.75);
    write_run(variants.emplace_back(dir.path / ("rb-s" + std::to_string(seed))), "resformer", bf16, seed, 4.5);
  }
  // Each resformer group's paired difference, keyed by whether its label names bf16.
  const auto deltas = [&](std::vector<std::vector<fs::path>> sets) {
    std::vector<fs::path> runs;
    for (const auto& set : sets) runs.insert(runs.end(), set.begin(), set.end());
    std::map<bool, double> delta;
    const results::Value compared = compare_runs(runs, {});
    for (const auto& g : compared["groups"].items())
      if (g["variant"].string() == "resformer")
        delta[g["label"].string().find("bf16") != std::string::npos] = number_or_nan(g["delta_vs_baseline_mean"]);
    return delta;
  };
  const auto all = deltas({bf16_vanilla, longer_vanilla, f32_vanilla, variants});
  EXPECT_DOUBLE_EQ(all.at(false), -0.25);  // 2.75 − 3.0, not 2.75 − 5.0 (bf16) nor 2.75 − 4.0 (trained longer)
  EXPECT_DOUBLE_EQ(all.at(true), -0.5);    // 4.5 − 5.0
  EXPECT_TRUE(std::isnan(deltas({bf16_vanilla, longer_vanilla, variants}).at(false)))
      << "a 2-step variant was measured against 3-step vanilla runs";
  const auto no_f32 = deltas({bf16_vanilla, variants});
  EXPECT_TRUE(std::isnan(no_f32.at(false))) << "a float32 variant was measured against bf16 runs";
  EXPECT_DOUBLE_EQ(no_f32.at(true), -0.5);
}

// What is not measured is null, never a nan passed off as a number: the baseline group's own difference,
// a one-run spread, a one-seed standard error (in the text table too); --csv with no group paired to a
// baseline run has no curves and is refused (it wrote nothing, exit 0). Control: a variant paired
// with the baseline gets its numbers and the CSV is written.
TEST(LmCompare, WhatIsNotMeasuredIsNullAndACsvWithoutCurvesIsRefused) {
  ScratchDir dir;
  const std::string training = R"("steps": 3)";
  write_run(dir.path / "vanilla-s1", "vanilla", training, 1, 3.0);
  write_run(dir.path / "resformer-s1", "resformer", training, 1, 2.5);
  CompareOptions with_csv;
  with_csv.csv = dir.path / "curves.csv";
  const results::Value alone = compare_runs({dir.path / "vanilla-s1"}, {});
  const results::Value& g = alone["groups"].items().at(0);
  for (const char* field : {"final_validation_loss_std", "delta_vs_baseline_mean", "delta_vs_baseline_se"})
    EXPECT_EQ(g[field].kind(), results::Value::Kind::null) << field;
  EXPECT_EQ(alone.text().find("nan"), std::string::npos) << alone.text();
  EXPECT_THROW(compare_runs({dir.path / "vanilla-s1"}, with_csv), UsageError);
  EXPECT_FALSE(fs::exists(*with_csv.csv));
  const results::Value paired = compare_runs({dir.path / "vanilla-s1", dir.path / "resformer-s1"}, with_csv);
  EXPECT_DOUBLE_EQ(paired["groups"].items().at(1)["delta_vs_baseline_mean"].number(), -0.5);
  EXPECT_TRUE(fs::exists(*with_csv.csv));
}

// A baseline was trained with the group's budget and data shape (steps, batch, seq_len, accum): a
// 3-step variant is not measured against 30-step vanilla runs (its loss would be "worse" by the
// training it missed) and gets no difference, no verdict, and a note naming what differs. Controls:
// vanilla runs of 3 steps are its baseline, and so are vanilla runs at another learning rate (a
// variant's own learning rate, Q-identity's, is part of what it is); each budget field alone refuses.
TEST(LmCompare, ABaselineWasTrainedWithTheGroupsBudget) {
  ScratchDir dir;
  const std::string three = R"("steps": 3, "batch": 16, "seq_len": 128, "accum": 1, "lr": 0.002)";
  auto compared = [&](const std::string& name, const std::string& vanilla_training) {
    std::vector<fs::path> runs;
    for (int seed : {1, 2}) {
      const std::string s = std::to_string(seed);
      write_run(runs.emplace_back(dir.path / name / ("vanilla-s" + s)), "vanilla", vanilla_training, seed, 3.0 + 0.01 * seed);
      write_run(runs.emplace_back(dir.path / name / ("resformer-s" + s)), "resformer", three, seed, 4.0);
    }
    CompareOptions o;
    o.claim = results::Sense::greater;
    const results::Value c = compare_runs(runs, o);
    for (const auto& g : c["groups"].items())
      if (g["variant"].string() == "resformer") return g;
    ADD_FAILURE() << "no resformer group";
    return results::Value();
  };
  const results::Value longer = compared("longer", R"("steps": 30, "batch": 16, "seq_len": 128, "accum": 1, "lr": 0.002)");
  EXPECT_EQ(longer["baseline"].kind(), results::Value::Kind::null);
  EXPECT_TRUE(std::isnan(number_or_nan(longer["delta_vs_baseline_mean"])));
  EXPECT_EQ(longer["paired_seeds"].number(), 0);
  EXPECT_EQ(longer.find("verdict"), nullptr);
  EXPECT_EQ(longer.find("final_relative_train_loss"), nullptr);
  ASSERT_NE(longer.find("baseline_note"), nullptr);
  EXPECT_NE(longer["baseline_note"].string().find("steps 30 (here 3)"), std::string::npos) << longer["baseline_note"].string();
  for (const auto& [name, training] : {std::pair{"batch", R"("steps": 3, "batch": 8, "seq_len": 128, "accum": 1, "lr": 0.002)"},
                                       std::pair{"seq", R"("steps": 3, "batch": 16, "seq_len": 64, "accum": 1, "lr": 0.002)"},
                                       std::pair{"accum", R"("steps": 3, "batch": 16, "seq_len": 128, "accum": 2, "lr": 0.002)"}}) {
    const results::Value g = compared(name, training);
    EXPECT_EQ(g["baseline"].kind(), results::Value::Kind::null) << name;
    EXPECT_NE(g.find("baseline_note"), nullptr) << name;
  }
  for (const auto& [name, training] : {std::pair<std::string, std::string>{"same", three},
                                       std::pair<std::string, std::string>{"lr", R"("steps": 3, "batch": 16, "seq_len": 128, "accum": 1, "lr": 0.004)"}}) {
    const results::Value g = compared(name, training);
    EXPECT_EQ(g["baseline"].string(), "gpt2 vanilla") << name;
    EXPECT_NEAR(number_or_nan(g["delta_vs_baseline_mean"]), 4.0 - 3.015, 1e-12) << name;
    EXPECT_EQ(g["paired_seeds"].number(), 2) << name;
    EXPECT_NE(g.find("verdict"), nullptr) << name;
    EXPECT_EQ(g.find("baseline_note"), nullptr) << name;
  }
}

// The relative curves pair seeds as the final losses do: a seed the baseline lacks is left out of
// both (it was measured against the baseline's other seeds' curves before), and the count is recorded.
// Control: with the baseline's seed 2 present, both seeds are in the curve.
TEST(LmCompare, TheRelativeCurveIsOfThePairedSeedsOnly) {
  ScratchDir dir;
  const std::string trained = R"("steps": 4)";
  // train.csv's loss at step s is final + (steps − s)/steps: the relative curve's last point is final − final.
  write_run(dir.path / "vanilla-s1", "vanilla", trained, 1, 3.0);
  write_run(dir.path / "resformer-s1", "resformer", trained, 1, 2.5);
  write_run(dir.path / "resformer-s2", "resformer", trained, 2, 2.0);
  const auto group = [&](const std::vector<fs::path>& runs) {
    CompareOptions o;
    o.window = 1;
    const fs::path csv = dir.path / "rel.csv";
    o.csv = csv;
    const results::Value c = compare_runs(runs, o);
    for (const auto& g : c["groups"].items())
      if (g["variant"].string() == "resformer") return std::pair{g, read_file(csv)};
    ADD_FAILURE() << "no resformer group";
    return std::pair{results::Value(), std::string()};
  };
  const auto [one, one_csv] = group({dir.path / "vanilla-s1", dir.path / "resformer-s1", dir.path / "resformer-s2"});
  EXPECT_EQ(one["paired_seeds"].number(), 1);
  EXPECT_EQ(one["relative_curve_seeds"].number(), 1);
  EXPECT_DOUBLE_EQ(number_or_nan(one["delta_vs_baseline_mean"]), -0.5);
  EXPECT_DOUBLE_EQ(one["final_relative_train_loss"].number(), -0.5);  // seed 1's alone, not (−0.5 − 1.0)/2
  EXPECT_NE(one_csv.find("\n4,-0.5,"), std::string::npos) << one_csv;
  write_run(dir.path / "vanilla-s2", "vanilla", trained, 2, 2.25);
  const auto [two, two_csv] = group({dir.path / "vanilla-s1", dir.path / "vanilla-s2", dir.path / "resformer-s1", dir.path / "resformer-s2"});
  EXPECT_EQ(two["relative_curve_seeds"].number(), 2);
  EXPECT_DOUBLE_EQ(two["final_relative_train_loss"].number(), -0.375);  // (−0.5 − 0.25)/2
  EXPECT_NE(two_csv.find("\n4,-0.375,"), std::string::npos) << two_csv;
}

// Runs are of one corpus when their tokens' hashes are (run.json's data_hashes, else the checkpoint's
// run.train_hash and data.validation_hash), whatever run.json's "data" name says: two corpora both
// named "brown" are not replicates of one another, and one corpus under a path with a space is one.
// Runs that record no hashes (older run.json, no checkpoint) are told apart by the corpus's recorded
// n-gram baselines; a run with neither is refused. Controls: the same hashes under other paths group.
TEST(LmCompare, ACorpusIsItsTokensNotItsName) {
  ScratchDir dir;
  const std::string trained = R"("steps": 2)", a = R"({"train": "11", "validation": "22"})",
                    b = R"({"train": "33", "validation": "22"})";
  auto groups = [&](const std::vector<fs::path>& runs) {
    std::map<std::string, std::pair<std::int64_t, double>> out;  // label → runs, delta
    const results::Value c = compare_runs(runs, {});
    for (const auto& g : c["groups"].items())
      out[g["label"].string()] = {std::int64_t(g["runs"].number()), number_or_nan(g["delta_vs_baseline_mean"])};
    return out;
  };
  std::vector<fs::path> runs;
  write_run(runs.emplace_back(dir.path / "v" / "vanilla-s1"), "vanilla", trained, 1, 3.0, 4, "cpu (1 thread, OpenBLAS)",
            "second-half", "", "", R"x("brown (data/brown)")x", a);
  write_run(runs.emplace_back(dir.path / "v" / "vanilla-s2"), "vanilla", trained, 2, 3.0, 4, "cpu (2 threads, OpenBLAS)",
            "second-half", "", "", R"x("brown (my data/brown)")x", a);  // a path with a space: the same corpus
  write_run(runs.emplace_back(dir.path / "r" / "resformer-s1"), "resformer", trained, 1, 2.0, 4, "cpu (1 thread, OpenBLAS)",
            "second-half", "", "", R"x("brown (other/brown)")x", b);  // other training tokens, also "brown"
  const auto split = groups(runs);
  ASSERT_EQ(split.size(), 2u);
  EXPECT_EQ(split.at("gpt2 vanilla").first, 2);
  EXPECT_TRUE(std::isnan(split.at("gpt2 resformer alpha=0.5 beta=0.5").second)) << "measured against another corpus";
  // Control: the resformer run on the vanilla runs' tokens is measured against them.
  write_run(dir.path / "r2" / "resformer-s1", "resformer", trained, 1, 2.0, 4, "cpu (1 thread, OpenBLAS)", "second-half", "",
            "", R"x("brown (other/brown)")x", a);
  EXPECT_DOUBLE_EQ(groups({runs[0], runs[1], dir.path / "r2" / "resformer-s1"}).at("gpt2 resformer alpha=0.5 beta=0.5").second, -1.0);
  // Without hashes: the corpus's baselines (as run.json records them) tell the corpora apart.
  auto without_hashes = [&](const fs::path& run, const std::string& unigram) {
    std::string json = read_file(run / "run.json");
    const std::size_t at = json.find(R"("data_hashes")"), end = json.find('}', at);
    json.replace(at, end + 3 - at, R"("baselines": {"train_tokens": 100, "validation_positions": 10, "unigram_nats": )" + unigram +
                                      R"(, "bigram_nats": 5, "bigram_lambda": 0.5}, )");
    std::ofstream(run / "run.json", std::ios::trunc) << json;
  };
  without_hashes(runs[0], "6.5"), without_hashes(runs[1], "6.5"), without_hashes(runs[2], "6.25");
  EXPECT_EQ(groups(runs).size(), 2u);
  EXPECT_EQ(groups(runs).at("gpt2 vanilla").first, 2);
  {  // control: the same baselines, the same corpus
    std::string json = read_file(runs[2] / "run.json");
    json.replace(json.find("6.25"), 4, "6.5");
    std::ofstream(runs[2] / "run.json", std::ios::trunc) << json;
  }
  EXPECT_DOUBLE_EQ(groups(runs).at("gpt2 resformer alpha=0.5 beta=0.5").second, -1.0);
  write_run(dir.path / "bare" / "vanilla-s3", "vanilla", trained, 3, 3.0, 4, "cpu (1 thread, OpenBLAS)", "second-half", "", "",
            R"x("brown (data/brown)")x", "");
  EXPECT_THROW(compare_runs({runs[0], dir.path / "bare" / "vanilla-s3"}, {}), UsageError);
}

// Of several baselines, each group gets the one whose model is nearest its own, on its kind of device:
// GQA + SkipV1 is measured against GQA, not against the vanilla model of 4 key/value heads, nor against
// GQA runs on CUDA (another group, its label saying so). Control: without the CPU's GQA runs, against
// the vanilla ones. A seed twice in a group, and a --baseline that no run's name or variant matches,
// are refused; the reproduce cache's directories (NAME-sSEED-HASH) are named NAME.
TEST(LmCompare, TheBaselineIsTheNearestModelOnTheSameDevice) {
  ScratchDir dir;
  const std::string trained = R"("steps": 2)", cuda = "cuda (NVIDIA H100 80GB HBM3, cuBLAS)";
  std::vector<fs::path> vanilla, gqa, gqa_cuda, skip;
  for (int seed : {1, 2}) {
    const std::string s = std::to_string(seed);
    write_run(vanilla.emplace_back(dir.path / ("vanilla-s" + s)), "vanilla", trained, seed, 3.0);
    write_run(gqa.emplace_back(dir.path / ("gqa-s" + s + "-0123456789abcdef")), "vanilla", trained, seed, 2.5, 2);
    write_run(gqa_cuda.emplace_back(dir.path / ("gqa-cuda-s" + s)), "vanilla", trained, seed, 1.0, 2, cuda);
    write_run(skip.emplace_back(dir.path / ("gqa-skipv1-s" + s)), "skipv1", trained, seed, 2.25, 2);
  }
  auto runs = [](std::vector<std::vector<fs::path>> sets) {
    std::vector<fs::path> all;
    for (const auto& set : sets) all.insert(all.end(), set.begin(), set.end());
    return all;
  };
  auto skip_delta = [&](const std::vector<fs::path>& dirs, const std::string& baseline) {
    CompareOptions o;
    o.baseline = baseline;
    std::size_t groups = 0;
    double delta = std::nan("");
    const results::Value compared = compare_runs(dirs, o);
    for (const auto& g : compared["groups"].items()) {
      ++groups;
      if (g["variant"].string() == "skipv1") delta = number_or_nan(g["delta_vs_baseline_mean"]);
    }
    EXPECT_EQ(groups, (dirs.size() + 1) / 2) << "two runs a group";
    return delta;
  };
  EXPECT_DOUBLE_EQ(skip_delta(runs({vanilla, gqa_cuda, gqa, skip}), "vanilla"), -0.25);
  EXPECT_DOUBLE_EQ(skip_delta(runs({vanilla, gqa_cuda, skip}), "vanilla"), -0.75);  // control
  EXPECT_DOUBLE_EQ(skip_delta(runs({vanilla, gqa, skip}), "gqa"), -0.25);           // the cache's names
  // A name that is also a variant: --baseline skipv1 is the runs named skipv1, though another strategy's
  // runs (SkipV1Former App. C.4) are of the variant skipv1 too.
  std::vector<fs::path> skipv1, pooling;
  for (int seed : {1, 2}) {
    write_run(skipv1.emplace_back(dir.path / ("skipv1-s" + std::to_string(seed))), "skipv1", trained, seed, 2.875);
    write_run(pooling.emplace_back(dir.path / ("pooling-s" + std::to_string(seed))), "skipv1", trained, seed, 2.75, 4,
              "cpu (1 thread, OpenBLAS)", "pooling");
  }
  CompareOptions by_name;
  by_name.baseline = "skipv1";
  const results::Value c4 = compare_runs(runs({pooling, skipv1}), by_name);
  for (const auto& g : c4["groups"].items()) {
    const double delta = number_or_nan(g["delta_vs_baseline_mean"]);
    if (g["label"].string().find("pooling") != std::string::npos)
      EXPECT_DOUBLE_EQ(delta, -0.125);
    else
      EXPECT_TRUE(std::isnan(delta)) << g["label"].string() << ": the baseline measured against another";
  }
  EXPECT_THROW(compare_runs(runs({vanilla, skip, {gqa[0]}}), [] {
                 CompareOptions o;
                 o.baseline = "gqa-s1";
                 return o;
               }()),
               UsageError);
  fs::copy(skip[0], dir.path / "copy-s1", fs::copy_options::recursive);
  try {
    compare_runs(runs({vanilla, skip, {dir.path / "copy-s1"}}), {});
    ADD_FAILURE() << "a seed twice in a group was not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  }
}

// Runs started from different checkpoints (lm train --from, run.json's "from") are different groups,
// though alike in everything else: two conversions uptrained with one seed are not "a seed twice". The
// seeds of one starting point are replicates (its directories differ only by -sSEED, as
// scripts/lm_uptraining.sh names them). Control: without "from" the same runs are refused as a seed
// twice in a group, as before "from" was recorded.
TEST(LmCompare, RunsFromDifferentCheckpointsAreDifferentGroups) {
  ScratchDir dir;
  const std::string trained = R"("steps": 2)";
  std::vector<fs::path> runs, fresh;
  for (const char* method : {"released-avg", "released-topk"})
    for (int seed : {1, 2}) {
      const std::string name = std::string(method) + "-240-s" + std::to_string(seed);
      const double final = method == std::string("released-avg") ? 3.0 : 2.5;
      write_run(runs.emplace_back(dir.path / "from" / name), "skipv1", trained, seed, final, 4,
                "cpu (1 thread, OpenBLAS)", "second-half", "up/converted/" + std::string(method) + "-s" + std::to_string(seed));
      write_run(fresh.emplace_back(dir.path / "fresh" / name), "skipv1", trained, seed, final);
    }
  const results::Value compared = compare_runs(runs, {});
  std::map<std::string, double> means;
  for (const auto& g : compared["groups"].items()) {
    EXPECT_EQ(g["runs"].number(), 2) << g["label"].string();
    means[g["label"].string()] = g["final_validation_loss_mean"].number();
  }
  ASSERT_EQ(means.size(), 2u) << "one group for each starting point";
  EXPECT_DOUBLE_EQ(means.begin()->second, 3.0);  // the labels name the starting points: released-avg first
  EXPECT_NE(means.begin()->first.find("from=up/converted/released-avg"), std::string::npos) << means.begin()->first;
  EXPECT_DOUBLE_EQ(means.rbegin()->second, 2.5);
  try {
    compare_runs(fresh, {});
    ADD_FAILURE() << "runs without \"from\" alike but for their directories were not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  }
}

// A group's starting point is its path with the seed taken from the checkpoint's directory only, and
// its step: checkpoints in pre-s1/ctx and pre-s2/ctx, or of one run at steps 1200 and 600, are two
// starting points, where converted/released-avg-s1 and -s2 are one (a directory NAME-sSEED is seed
// SEED of NAME, as lm compare reads run directories). A run.json from before "from" was recorded names its
// --from in its command line. An uptrained group's baseline is the one started from a checkpoint too,
// though a fresh-start group of the baseline's variant fits as well. Controls: without that group, the
// fresh start is the baseline and the uptrained group's label says where it started.
TEST(LmCompare, AStartingPointIsItsCheckpointsDirectoryAndStep) {
  ScratchDir dir;
  const std::string trained = R"("steps": 2)";
  auto groups = [&](const std::vector<fs::path>& runs) {
    std::map<std::string, std::string> baseline_of;
    const results::Value compared = compare_runs(runs, {});
    for (const auto& g : compared["groups"].items())
      baseline_of[g["label"].string()] = g["baseline"].kind() == results::Value::Kind::null ? "" : g["baseline"].string();
    return baseline_of;
  };
  std::vector<fs::path> contexts, steps, converted, old;
  for (int seed : {1, 2}) {
    const std::string s = "-s" + std::to_string(seed);
    write_run(contexts.emplace_back(dir.path / "ctx" / ("a" + s)), "vanilla", trained, 1, 3.0 + seed, 4,
              "cpu (1 thread, OpenBLAS)", "second-half", "pre" + s + "/ctx/checkpoint");
    write_run(steps.emplace_back(dir.path / "steps" / ("a" + s)), "vanilla", trained, 1, 3.0, 4, "cpu (1 thread, OpenBLAS)",
              "second-half", "work/vanilla" + s + "-0123456789abcdef/checkpoint", seed == 1 ? "1200" : "600");
    write_run(converted.emplace_back(dir.path / "conv" / ("skip" + s)), "skipv1", trained, seed, 3.0, 4,
              "cpu (1 thread, OpenBLAS)", "second-half", "up/converted/released-avg" + s);
    const fs::path run = old.emplace_back(dir.path / "old" / ("skip" + s));
    write_run(run, "skipv1", trained, seed, 3.0);
    std::string json = read_file(run / "run.json");
    json.insert(json.find("\"seed\""), "\"command_line\": \"qkvlab lm train --from up/converted/released-avg" + s +
                                         " --seed " + std::to_string(seed) + "\", ");
    std::ofstream(run / "run.json") << json;
  }
  EXPECT_EQ(groups(contexts).size(), 2u);
  EXPECT_EQ(groups(steps).size(), 2u);
  EXPECT_EQ(groups(converted).size(), 1u);
  ASSERT_EQ(groups(old).size(), 1u);
  EXPECT_EQ(groups(old).begin()->first, groups(converted).begin()->first);
  std::vector<fs::path> controls, fresh;
  for (int seed : {1, 2}) {
    const std::string s = "-s" + std::to_string(seed);
    write_run(controls.emplace_back(dir.path / "control" / ("vanilla" + s)), "vanilla", trained, seed, 3.5, 4,
              "cpu (1 thread, OpenBLAS)", "second-half", "gpt2/vanilla" + s + "/checkpoint");
    write_run(fresh.emplace_back(dir.path / "fresh" / ("vanilla" + s)), "vanilla", trained, seed, 4.0);
  }
  std::vector<fs::path> all = converted;
  all.insert(all.end(), controls.begin(), controls.end());
  all.insert(all.end(), fresh.begin(), fresh.end());
  const auto chosen = groups(all);
  const std::string uptrained = "gpt2 skipv1 ratio=0.5 source=1 from=up/converted/released-avg";
  ASSERT_TRUE(chosen.count(uptrained)) << chosen.begin()->first;
  EXPECT_EQ(chosen.at(uptrained), "gpt2 vanilla from=gpt2/vanilla/checkpoint");
  all.resize(converted.size());
  all.insert(all.end(), fresh.begin(), fresh.end());
  EXPECT_EQ(groups(all).at(uptrained), "gpt2 vanilla");
}

// scripts/lm_ablations.sh publishes a row from one group of lm compare, holding every finished run of
// the two recipes: a run still training (no run.json) or a copy (NAME-s2.bak) is named and left out,
// and the row is SkipKV1's paired difference from SkipV1 over seeds 1–2. Runs of one recipe in two
// groups (seed 9 trained on a GPU) are a row "not run", exit 2, and --json is left as it was;
// it was before, too, where rows were missing. Control: the two recipes' runs alone give the row.
TEST(LmAblations, ARowIsOneGroupsNumbersOverEveryFinishedRun) {
  using test_support::CommandResult, test_support::run_command, test_support::shell_quoted;
  ScratchDir dir;
  const fs::path runs = dir.path / "runs", json = dir.path / "published.json";
  for (int seed : {1, 2}) {
    write_run(runs / "gpt2" / ("skipv1-s" + std::to_string(seed)), "skipv1", R"("steps": 2)", seed, 3.0 + 0.1 * (seed - 1));
    write_run(runs / "gpt2" / ("skipkv1-s" + std::to_string(seed)), "skipkv1", R"("steps": 2)", seed, 3.2 + 0.05 * (seed - 1));
  }
  fs::create_directories(runs / "gpt2" / "skipkv1-s3");
  fs::copy(runs / "gpt2" / "skipkv1-s2", runs / "gpt2" / "skipkv1-s2.bak");
  std::ofstream(json) << "published\n";
  const std::string script = shell_quoted(fs::path(QKVLAB_SOURCE_DIR) / "scripts" / "lm_ablations.sh") +
                             " --paper skipv1 --qkvlab " + shell_quoted(QKVLAB_BINARY) + " --runs " + shell_quoted(runs) +
                             " --json " + shell_quoted(json);
  CommandResult r = run_command(script);
  EXPECT_EQ(r.status, 2) << r.err;  // the other claims' runs are missing
  EXPECT_NE(r.out.find("| Fig. 15 | SkipKV1 trains worse than SkipV1 | +0.1750 ± 0.0250 | 2 | **inconclusive** |"),
            std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("skipkv1-s3/ has no run.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("skipkv1-s2.bak/ is not a run of skipkv1"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(json), "published\n");
  write_run(runs / "gpt2" / "skipkv1-s9", "skipkv1", R"("steps": 2)", 9, 3.1, 4, "cuda (NVIDIA H100)");
  r = run_command(script);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("| Fig. 15 | SkipKV1 trains worse than SkipV1 | 3 groups"), std::string::npos) << r.out;
  EXPECT_EQ(read_file(json), "published\n");
}

// scripts/lm_comparisons.sh compares what a partial sweep holds: vanilla runs only get their comparison
// and no relative curves (lm compare refuses --csv without a run to measure; the script passed it
// always and failed, writing nothing). Control: with a variant's run the curves are written.
TEST(LmComparisons, APartialSweepOfBaselineRunsGetsItsComparison) {
  using test_support::CommandResult, test_support::run_command, test_support::shell_quoted;
  ScratchDir dir;
  const fs::path out = dir.path / "out";
  for (int seed : {1, 2})
    write_run(out / "gpt2" / ("vanilla-s" + std::to_string(seed)), "vanilla", R"("steps": 4)", seed, 3.0 + 0.1 * seed);
  const std::string script = shell_quoted(fs::path(QKVLAB_SOURCE_DIR) / "scripts" / "lm_comparisons.sh") + " --qkvlab " +
                             shell_quoted(QKVLAB_BINARY) + " --out " + shell_quoted(out) + " --only '^nomatch$'";
  CommandResult r = run_command(script);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(out / "gpt2-compare.json"));
  EXPECT_FALSE(fs::exists(out / "gpt2-relative.csv"));
  write_run(out / "gpt2" / "resformer-s1", "resformer", R"("steps": 4)", 1, 2.9);
  r = run_command(script);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(out / "gpt2-relative.csv"));
}

// scripts/ablation_row.py reads one row from lm compare's JSON: the compared group's numbers and
// verdict, never another group's, and "measured" without a verdict. Controls: three groups, a
// compared group not measured against the reference or measured against another model (its
// baseline_note), and runs left out of the groups are refused with the reason.
TEST(LmAblations, TheRowIsTheComparedGroupsOrARefusal) {
  using test_support::CommandResult, test_support::run_command, test_support::shell_quoted;
  ScratchDir dir;
  const fs::path input = dir.path / "compare.json";
  const std::string reference = R"({"label": "gpt2 skipv1", "baseline": "gpt2 skipv1", "runs": 2,
      "delta_vs_baseline_mean": 0, "delta_vs_baseline_se": 0, "paired_seeds": 2, "verdict": {"verdict": "agrees"}})";
  auto compared = [](const std::string& baseline, const std::string& verdict) {
    return R"({"label": "gpt2 skipkv1", "baseline": ")" + baseline + R"(", "runs": 3, "delta_vs_baseline_mean": 0.175,
      "delta_vs_baseline_se": 0.025, "paired_seeds": 2)" + verdict + "}";
  };
  auto row = [&](const std::string& groups, int n_ref, int n_cmp) {
    std::ofstream(input) << R"({"groups": [)" << groups << "]}";
    return run_command("python3 " + shell_quoted(fs::path(QKVLAB_SOURCE_DIR) / "scripts" / "ablation_row.py") + " " +
                       std::to_string(n_ref) + " " + std::to_string(n_cmp) + " < " + shell_quoted(input));
  };
  CommandResult r = row(reference + "," + compared("gpt2 skipv1", R"(, "verdict": {"verdict": "inconclusive"})"), 2, 3);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "0.175 0.025 2 inconclusive\n");
  r = row(compared("gpt2 skipv1", "") + "," + reference, 2, 3);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "0.175 0.025 2 measured\n");
  r = row(reference + "," + compared("gpt2 skipv1", "") + "," + compared("gpt2 skipv1", ""), 2, 3);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "3 groups (one model, training, device and starting point each), not 2\n");
  r = row(reference + "," + compared("gpt2 vanilla", ""), 2, 3);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "the compared runs are not measured against the reference runs\n");
  r = row(reference + "," + compared("gpt2 skipv1", ""), 2, 4);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "the groups hold 2 and 3 runs of 2 and 4\n");
  // lm compare's note on a baseline of another model (review r25): the row is refused with it, not
  // printed as "measured"
  r = row(reference + "," + compared("gpt2 skipv1", R"x(, "baseline_note": "the baseline gpt2 skipv1 is another model: d 8 (here 32)")x"), 2, 3);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "the baseline gpt2 skipv1 is another model: d 8 (here 32)\n");
}

// scripts/lm_uptraining.sh writes each result whole or not at all, with a stub qkvlab: when training
// fails, the exit status is 1 and the earlier run and initial.csv are kept; without a vanilla
// checkpoint it exits 2 touching nothing. Control: when training succeeds, both are replaced.
TEST(LmUptraining, AFailedTrainingKeepsTheEarlierResults) {
  using test_support::CommandResult, test_support::run_command, test_support::shell_quoted;
  ScratchDir dir;
  const fs::path out = dir.path / "out", stub = dir.path / "qkvlab", run = out / "vanilla-120-s1";
  fs::create_directories(dir.path / "vanilla" / "vanilla-s1" / "checkpoint");
  fs::create_directories(run);
  auto write_stub = [&](bool trains) {
    std::ofstream(stub) << "#!/usr/bin/env bash\n"
                        << "out=; for ((i = 1; i <= $#; ++i)); do [[ ${!i} == --out ]] && { j=$((i + 1)); out=${!j}; }; done\n"
                        << "case \"$1 $2\" in\n"
                        << "  'lm convert') mkdir -p \"$out\" ;;\n"
                        << "  'lm eval') echo '{\"loss\": 5.25}' ;;\n"
                        << "  'lm train') " << (trains ? "mkdir -p \"$out\" && echo new > \"$out/run.json\"" : "exit 1") << " ;;\n"
                        << "esac\n";
    fs::permissions(stub, fs::perms::owner_all);
  };
  auto uptrain = [&](const fs::path& vanilla) {
    return run_command("bash " + shell_quoted(fs::path(QKVLAB_SOURCE_DIR) / "scripts" / "lm_uptraining.sh") +
                       " --qkvlab " + shell_quoted(stub) + " --vanilla " + shell_quoted(vanilla) + " --out " +
                       shell_quoted(out) + " --jobs 4");
  };
  std::ofstream(run / "run.json") << "old\n";
  std::ofstream(out / "initial.csv") << "published\n";
  write_stub(false);
  CommandResult r = uptrain(dir.path / "vanilla");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("18 trainings failed"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(run / "run.json"), "old\n");
  EXPECT_EQ(read_file(out / "initial.csv"), "published\n");
  fs::create_directories(dir.path / "empty");
  EXPECT_EQ(uptrain(dir.path / "empty").status, 2);
  EXPECT_EQ(read_file(out / "initial.csv"), "published\n");
  write_stub(true);
  r = uptrain(dir.path / "vanilla");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(run / "run.json"), "new\n");
  EXPECT_NE(read_file(out / "initial.csv").find("1,released-avg,5.25"), std::string::npos);
}

// docs/lm-comparisons.md's uptraining table is what scripts/uptraining_table.py makes of the committed
// runs (outputs/lm/uptraining). Controls: one run's loss moved by 0.01 changes the table; a run
// missing is an error naming it, not a blank cell.
TEST(LmUptraining, TheDocsTableIsTheCommittedRuns) {
  using test_support::run_command, test_support::shell_quoted;
  const fs::path source(QKVLAB_SOURCE_DIR), committed = source / "outputs" / "lm" / "uptraining";
  const std::string table = "python3 " + shell_quoted(source / "scripts" / "uptraining_table.py") + " ";
  const auto made = run_command(table + shell_quoted(committed));
  ASSERT_EQ(made.status, 0) << made.err;
  EXPECT_EQ(made.out.rfind("| start | as converted", 0), 0u) << made.out;
  EXPECT_NE(read_file(source / "docs" / "lm-comparisons.md").find(made.out), std::string::npos) << made.out;
  ScratchDir dir;
  fs::copy_file(committed / "initial.csv", dir.path / "initial.csv");
  for (const auto& run : fs::directory_iterator(committed))
    if (fs::exists(run.path() / "run.json")) {
      fs::create_directories(dir.path / run.path().filename());
      fs::copy_file(run.path() / "run.json", dir.path / run.path().filename() / "run.json");
    }
  EXPECT_EQ(run_command(table + shell_quoted(dir.path)).out, made.out);
  {  // made under a directory whose name holds a space and a quote: qkvlab records argv unquoted
    ScratchDir spaced;
    const fs::path odd = spaced.path / "my runs'";
    fs::create_directories(odd);
    fs::copy_file(committed / "initial.csv", odd / "initial.csv");
    for (const auto& run : fs::directory_iterator(dir.path)) {
      if (!run.is_directory()) continue;
      std::string json = read_file(run.path() / "run.json");
      for (const std::string from : {"outputs/lm/uptraining/", "outputs/reproduce/work/"})
        for (std::size_t at; (at = json.find(from)) != std::string::npos;) json.replace(at, from.size(), "my runs'/x/");
      fs::create_directories(odd / run.path().filename());
      std::ofstream(odd / run.path().filename() / "run.json") << json;
    }
    const auto spaced_table = run_command(table + shell_quoted(odd));
    EXPECT_EQ(spaced_table.out, made.out) << spaced_table.err;
  }
  const fs::path moved = dir.path / "top-v-240-s2" / "run.json";
  std::string json = read_file(moved);
  const std::size_t at = json.find("\"final_validation_loss\": ") + 25;
  json.replace(at, json.find_first_of(",\n}", at) - at, std::to_string(std::stod(json.substr(at)) + 0.01));
  std::ofstream(moved) << json;
  EXPECT_NE(run_command(table + shell_quoted(dir.path)).out, made.out);
  fs::remove_all(moved.parent_path());
  const auto missing = run_command(table + shell_quoted(dir.path));
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.err.find("top-v-240-s2"), std::string::npos) << missing.err;
}

// lm compare reads a finished run's whole log: train.csv cut short (a kill), spliced (a row missing
// between two runs' rows) or without its last newline (a row cut mid-write) is refused, naming the
// file. Control: the whole logs compare.
TEST(LmCompare, ALogCutOrSplicedIsRefused) {
  ScratchDir dir;
  std::vector<fs::path> runs;
  for (const char* name : {"vanilla", "resformer"})
    for (int seed : {1, 2})
      write_run(runs.emplace_back(dir.path / (std::string(name) + "-s" + std::to_string(seed))), name,
                R"("steps": 5)", seed, 3.0);
  EXPECT_NO_THROW(compare_runs(runs, {}));
  const fs::path log = runs.back() / "train.csv";
  const std::string whole = read_file(log);
  auto refused = [&](const std::string& text, const std::string& why) {
    std::ofstream(log, std::ios::binary | std::ios::trunc) << text;
    try {
      compare_runs(runs, {});
      ADD_FAILURE() << "accepted: " << why;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(log.string()), std::string::npos) << e.what();
    }
  };
  refused(whole.substr(0, whole.rfind('\n', whole.size() - 2) + 1), "a log cut short");             // the last row gone
  refused(whole.substr(0, whole.size() - 1), "a log cut short");                                      // its newline gone
  // The count is of whole rows: a last row without its newline is not one (it was counted: "5 whole rows
  // where the run's 5 steps belong"). Control: with the row gone, 4 whole rows and nothing cut.
  refused(whole.substr(0, whole.size() - 1), ": 4 whole rows and a last row cut before its newline where the run's 5 steps");
  refused(whole.substr(0, whole.rfind('\n', whole.size() - 2) + 1), ": 4 whole rows where the run's 5 steps belong");
  const std::size_t row3 = whole.find("\n3,") + 1;
  refused(whole.substr(0, row3) + whole.substr(whole.find('\n', row3) + 1), "spliced");              // step 3 gone
}

// A run directory of write_run with the model's field `name` set to `value` (a JSON number), as lm
// train records d, ffn, head_dim, parameters, ...
void set_model_field(const fs::path& run, const std::string& name, const std::string& value) {
  std::string json = read_file(run / "run.json");
  json.replace(json.find(R"("model": {)"), 10, R"("model": {")" + name + R"(": )" + value + ", ");
  std::ofstream(run / "run.json", std::ios::trunc) << json;
}

// The nearest baseline may be another model: SkipV1 of width 32 against vanilla of width 8 (the only
// vanilla given) was judged "agrees" with "SkipV1 trains lower than vanilla", nothing saying the
// models differ. Now its difference stays, with a baseline_note naming each field that differs (as the
// baseline has it, then as the group has it) and the parameter counts, and there is no verdict.
// Control: like for like (SkipV1 of width 8, the variant's own parameter count) gets its verdict and
// no note. The labels are the same in both (the label names the variant, not the width).
TEST(LmCompare, ABaselineOfAnotherModelIsNamedAndGetsNoVerdict) {
  ScratchDir dir;
  const std::string trained = R"("steps": 3)";
  const auto compared = [&](const std::string& name, int d, int parameters) {
    std::vector<fs::path> runs;
    for (int seed : {1, 2, 3}) {
      const std::string s = std::to_string(seed);
      write_run(runs.emplace_back(dir.path / name / ("vanilla-s" + s)), "vanilla", trained, seed, 3.0 + 0.01 * seed);
      set_model_field(runs.back(), "d", "8"), set_model_field(runs.back(), "parameters", "1000");
      write_run(runs.emplace_back(dir.path / name / ("skipv1-s" + s)), "skipv1", trained, seed, 2.0 + 0.02 * seed);
      set_model_field(runs.back(), "d", std::to_string(d));
      set_model_field(runs.back(), "parameters", std::to_string(parameters));
    }
    CompareOptions o;
    o.claim = results::Sense::less;
    const results::Value c = compare_runs(runs, o);
    for (const auto& g : c["groups"].items())
      if (g["variant"].string() == "skipv1") return std::pair{g, c.text()};
    ADD_FAILURE() << "no skipv1 group";
    return std::pair{results::Value(), std::string()};
  };
  const auto [wide, wide_text] = compared("wide", 32, 16000);
  EXPECT_EQ(wide["baseline"].string(), "gpt2 vanilla");
  EXPECT_NEAR(number_or_nan(wide["delta_vs_baseline_mean"]), -0.98, 1e-12);  // measured, as before
  EXPECT_EQ(wide.find("verdict"), nullptr) << "a verdict on the variant from another model's runs";
  ASSERT_NE(wide.find("baseline_note"), nullptr);
  const std::string note = wide["baseline_note"].string();
  for (const char* says : {"gpt2 vanilla is another model", "d 8 (here 32)", "parameters 1000 (here 16000)", "no verdict"})
    EXPECT_NE(note.find(says), std::string::npos) << says << ": " << note;
  for (const char* own : {"skip_ratio", "source_layer", "strategy", "alpha"})  // the variant's own fields differ by design
    EXPECT_EQ(note.find(own), std::string::npos) << own << ": " << note;
  EXPECT_NE(wide_text.find("d 8 (here 32)"), std::string::npos) << "the table too";
  const auto [same, same_text] = compared("same", 8, 900);
  EXPECT_EQ(same["label"].string(), wide["label"].string());
  EXPECT_EQ(same.find("baseline_note"), nullptr) << same["baseline_note"].string();
  ASSERT_NE(same.find("verdict"), nullptr);
  EXPECT_EQ(same["verdict"]["verdict"].string(), "agrees");
}

// A group left without a baseline by another corpus, kind of device or products had no baseline_note
// (only another budget got one), so under --claim it had no verdict and no word why. Now the note names
// each run of the baseline's name or variant and what it differs in (as it has it, then as the group
// has it); with no such run at all it says so. Control: the same corpus, device and products: a
// baseline, a verdict, no note.
TEST(LmCompare, AGroupWithoutABaselineSaysWhatDiffers) {
  ScratchDir dir;
  const std::string trained = R"("steps": 2)", cpu = "cpu (1 thread, OpenBLAS)", cuda = "cuda (NVIDIA H100 80GB HBM3, cuBLAS)";
  const std::string a = R"({"train": "11", "validation": "22"})", b = R"({"train": "33", "validation": "22"})";
  struct Setting {
    std::string name, training, device, hashes, says;
  };
  const std::vector<Setting> settings = {
      {"corpus", trained, cpu, b, "gpt2 vanilla has corpus tokens train=11 validation=22 (here tokens train=33 validation=22)"},
      {"device", trained, cuda, a, "gpt2 vanilla has device cpu (here cuda)"},
      {"products", R"("steps": 2, "products": "bf16")", cpu, a, "gpt2 vanilla has products float32 (here bf16)"},
      {"same", trained, cpu, a, ""}};
  for (const Setting& s : settings) {
    std::vector<fs::path> runs;
    for (int seed : {1, 2}) {
      const std::string n = std::to_string(seed);
      write_run(runs.emplace_back(dir.path / s.name / ("vanilla-s" + n)), "vanilla", trained, seed, 3.0 + 0.01 * seed, 4, cpu,
                "second-half", "", "", R"x("brown (data/brown)")x", a);
      write_run(runs.emplace_back(dir.path / s.name / ("resformer-s" + n)), "resformer", s.training, seed, 2.0, 4, s.device,
                "second-half", "", "", R"x("brown (data/brown)")x", s.hashes);
    }
    CompareOptions o;
    o.claim = results::Sense::less;
    const results::Value c = compare_runs(runs, o);
    const results::Value& g = c["groups"].items().at(1);
    ASSERT_EQ(g["variant"].string(), "resformer");
    if (s.says.empty()) {  // control
      EXPECT_EQ(g["baseline"].string(), "gpt2 vanilla");
      EXPECT_EQ(g.find("baseline_note"), nullptr);
      EXPECT_NE(g.find("verdict"), nullptr);
      continue;
    }
    EXPECT_EQ(g["baseline"].kind(), results::Value::Kind::null) << s.name;
    EXPECT_EQ(g.find("verdict"), nullptr) << s.name;
    ASSERT_NE(g.find("baseline_note"), nullptr) << s.name << " has no note";
    EXPECT_NE(g["baseline_note"].string().find(s.says), std::string::npos) << g["baseline_note"].string();
    EXPECT_NE(g["baseline_note"].string().find("so no difference is measured"), std::string::npos);
  }
  // No run of the baseline's name or variant at all: each group says so.
  const results::Value alone = compare_runs({dir.path / "same" / "resformer-s1"}, {});
  EXPECT_EQ(alone["groups"].items().at(0)["baseline_note"].string(),
            "no run is named or of the variant 'vanilla', so no difference is measured");
}

// Groups of other budgets, each against a baseline of its own budget, have relative curves of other
// lengths: --csv cut every curve to the first paired group's length (a 6-step group's curve ended at step
// 3, where the JSON's final_relative_train_loss is its step 6's). Now each curve runs to its own end, an
// empty cell past a shorter one's, and the figure is drawn from the whole table.
// lm compare --figure STEM alone writes its numbers to STEM.csv, as --figure means in transfer, probe
// and the icl commands (it was refused: "--figure needs --csv"); the bytes are --csv's. Control: with
// --csv naming another file, the numbers go there and no STEM.csv is written.
TEST(LmCompare, FigureAloneWritesItsNumbersBesideIt) {
  using test_support::run_command, test_support::shell_quoted;
  ScratchDir dir;
  std::string runs;
  for (int seed : {1, 2}) {
    write_run(dir.path / ("vanilla-s" + std::to_string(seed)), "vanilla", R"("steps": 3)", seed, 3.0);
    write_run(dir.path / ("resformer-s" + std::to_string(seed)), "resformer", R"("steps": 3)", seed, 2.5);
    runs += " " + shell_quoted(dir.path / ("vanilla-s" + std::to_string(seed))) + " " +
            shell_quoted(dir.path / ("resformer-s" + std::to_string(seed)));
  }
  const std::string compare = shell_quoted(QKVLAB_BINARY) + " lm compare" + runs + " --window 1 --format json";
  ASSERT_EQ(run_command(compare + " --figure " + shell_quoted(dir.path / "fig.svg")).status, 0);
  ASSERT_EQ(run_command(compare + " --csv " + shell_quoted(dir.path / "given.csv") + " --figure " +
                        shell_quoted(dir.path / "other")).status, 0);
  EXPECT_EQ(read_file(dir.path / "fig.csv"), read_file(dir.path / "given.csv"));
  EXPECT_FALSE(fs::exists(dir.path / "other.csv"));
  // No curve to write: the refusal names the option given (review r30), --figure here, --csv there.
  const std::string vanilla = shell_quoted(QKVLAB_BINARY) + " lm compare " + shell_quoted(dir.path / "vanilla-s1") + " " +
                              shell_quoted(dir.path / "vanilla-s2") + " --window 1";
  const auto by_figure = run_command(vanilla + " --figure " + shell_quoted(dir.path / "none"));
  EXPECT_EQ(by_figure.status, 2);
  EXPECT_EQ(by_figure.err.find("qkvlab: error: --figure: no group has a run paired"), 0u) << by_figure.err;
  const auto by_csv = run_command(vanilla + " --csv " + shell_quoted(dir.path / "none.csv"));
  EXPECT_EQ(by_csv.err.find("qkvlab: error: --csv: no group has a run paired"), 0u) << by_csv.err;
}

TEST(LmCompare, TheCsvHoldsEachCurveToItsOwnEnd) {
  ScratchDir dir;
  std::vector<fs::path> runs;
  for (const auto& [steps, variant_final] : {std::pair{3, 2.5}, std::pair{6, 2.0}})
    for (int seed : {1, 2}) {
      const std::string training = R"("steps": )" + std::to_string(steps), tag = std::to_string(steps) + "-s" + std::to_string(seed);
      write_run(runs.emplace_back(dir.path / ("vanilla" + tag)), "vanilla", training, seed, 3.0);
      write_run(runs.emplace_back(dir.path / ("resformer" + tag)), "resformer", training, seed, variant_final);
    }
  CompareOptions o;
  o.window = 1;
  o.csv = dir.path / "rel.csv";
  const results::Value c = compare_runs(runs, o);
  std::map<std::string, double> last;  // the label's final relative loss
  for (const auto& g : c["groups"].items())
    if (g["variant"].string() == "resformer") last[g["label"].string()] = g["final_relative_train_loss"].number();
  ASSERT_EQ(last.size(), 2u);
  EXPECT_DOUBLE_EQ(last.at("gpt2 resformer alpha=0.5 beta=0.5 steps=6"), -1.0);
  // Each curve is the resformer − vanilla difference, final minus final at every step (the logs' slopes
  // cancel, up to the logs' 6 digits), its two seeds alike (std 0).
  const std::string csv = read_file(*o.csv);
  const std::string three = "gpt2 resformer alpha=0.5 beta=0.5 steps=3", six = "gpt2 resformer alpha=0.5 beta=0.5 steps=6";
  std::istringstream lines(csv);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "step," + three + " mean," + three + " std," + six + " mean," + six + " std");
  int rows = 0;
  for (; std::getline(lines, line); ++rows) {
    std::vector<std::string> cells;
    std::stringstream fields(line + ",");  // the trailing comma keeps a last empty cell
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    ASSERT_EQ(cells.size(), 5u) << line;
    EXPECT_EQ(cells[0], std::to_string(rows + 1));
    if (rows < 3) {
      EXPECT_NEAR(std::stod(cells[1]), -0.5, 1e-9) << line;
      EXPECT_EQ(cells[2], "0") << line;
    } else {
      EXPECT_EQ(cells[1] + cells[2], "") << "past the 3-step curve's end: " << line;
    }
    EXPECT_NEAR(std::stod(cells[3]), -1.0, 1e-9) << line;
    EXPECT_EQ(cells[4], "0") << line;
  }
  EXPECT_EQ(rows, 6) << "the 6-step curve was cut to the 3-step one's length:\n" << csv;
  if (!results::gnuplot_available()) GTEST_SKIP() << "gnuplot is not installed: the figure is not drawn";
  o.figure = dir.path / "rel";
  compare_runs(runs, o);
  EXPECT_TRUE(fs::exists(dir.path / "rel.svg"));
  EXPECT_EQ(read_file(*o.csv), csv);
}

// A token id outside the model's vocabulary is refused naming the file, the id, its position and the
// stream (review r29: "token id 64 is outside the vocabulary of 64" named none of them). Control: the
// same stream with that id replaced trains.
TEST(LmTrainCommand, AnIdOutsideTheVocabularyIsNamedWithItsFileAndPosition) {
  using test_support::run_qkvlab, test_support::shell_quoted;
  ScratchDir dir;
  std::vector<std::int32_t> ids = toy_data().train;
  ids[5] = 64;
  corpus::write_tokens_npy(dir.path / "oov.npy", ids, 1, std::int64_t(ids.size()));
  ids[5] = 63;
  corpus::write_tokens_npy(dir.path / "ok.npy", ids, 1, std::int64_t(ids.size()));
  const auto train = [&](const char* file) {
    return run_qkvlab("lm train --layers 1 --d 16 --heads 2 --vocab 64 --seq-len 8 --batch 2 --steps 1 --quiet --tokens " +
                      shell_quoted(dir.path / file) + " --out " + shell_quoted(dir.path / (std::string(file) + ".run")));
  };
  const auto refused = train("oov.npy");
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("oov.npy"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("token id 64 at position 5 of the training stream is outside the model's vocabulary of 64"),
            std::string::npos) << refused.err;
  EXPECT_EQ(train("ok.npy").status, 0);
}

// A run started --from CKPT resumes with nothing at CKPT any more (docs/lm.md): its model is its own
// checkpoint's (review r29: the command read --from's configuration first and refused "no
// model.safetensors" once the path was moved). Control: a fresh run --from a path with no model is
// refused.
TEST(LmTrainCommand, AResumeFromNeedsNothingAtTheFromPath) {
  using test_support::run_qkvlab, test_support::shell_quoted;
  ScratchDir dir;
  std::vector<std::int32_t> ids = toy_data().train;
  corpus::write_tokens_npy(dir.path / "t.npy", ids, 1, std::int64_t(ids.size()));
  const auto init = run_qkvlab("lm init " + shell_quoted(dir.path / "init0") +
                               " --layers 1 --d 16 --heads 2 --vocab 64 --positions 8");
  ASSERT_EQ(init.status, 0) << init.err;
  const std::string train = "lm train --seq-len 8 --batch 2 --steps 4 --checkpoint-every 2 --quiet --tokens " +
                            shell_quoted(dir.path / "t.npy") + " --from " + shell_quoted(dir.path / "init0") + " --out ";
  const auto first = run_qkvlab(train + shell_quoted(dir.path / "run"));
  ASSERT_EQ(first.status, 0) << first.err;
  fs::remove(dir.path / "run" / "run.json");  // as a run stopped after its last checkpoint
  fs::rename(dir.path / "init0", dir.path / "moved");
  const auto resumed = run_qkvlab(train + shell_quoted(dir.path / "run") + " --resume");
  EXPECT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_TRUE(fs::exists(dir.path / "run" / "run.json"));
  const auto fresh = run_qkvlab(train + shell_quoted(dir.path / "fresh"));
  EXPECT_EQ(fresh.status, 2);
  EXPECT_NE(fresh.err.find("init0"), std::string::npos) << fresh.err;
}

// `lm train --preset P --family F` takes family F's tying and biases, as the preset of that family
// has them (tiny + --family llama is tiny-llama's model); --tied and --bias still override.
TEST(LmTrainCommand, FamilyOverAPresetTakesThatFamilysTyingAndBiases) {
  using test_support::run_qkvlab, test_support::shell_quoted;
  ScratchDir dir;
  std::vector<std::int32_t> ids = toy_data().train;
  corpus::write_tokens_npy(dir.path / "t.npy", ids, 1, std::int64_t(ids.size()));
  auto config = [&](const std::string& name, const std::string& flags) {
    const auto r = run_qkvlab("lm train " + flags + " --layers 1 --d 16 --heads 2 --vocab 64 --seq-len 8 --batch 2 " +
                              "--steps 2 --quiet --tokens " + shell_quoted(dir.path / "t.npy") +
                              " --out " + shell_quoted(dir.path / name));
    EXPECT_EQ(r.status, 0) << r.err;
    return load_checkpoint(dir.path / name / "checkpoint").config;
  };
  const Config llama = config("llama", "--preset tiny --family llama");
  const Config tiny_llama = config("tiny-llama", "--preset tiny-llama");
  EXPECT_EQ(to_metadata(llama), to_metadata(tiny_llama));
  EXPECT_FALSE(llama.tied);
  EXPECT_FALSE(llama.bias);
  const Config gpt2 = config("gpt2", "--preset tiny-llama --family gpt2");
  EXPECT_TRUE(gpt2.tied);
  EXPECT_TRUE(gpt2.bias);
  const Config forced = config("forced", "--preset tiny --family llama --tied --bias");  // control: the flags win
  EXPECT_TRUE(forced.tied);
  EXPECT_TRUE(forced.bias);
  EXPECT_NE(to_metadata(forced), to_metadata(tiny_llama));
}

}  // namespace
}  // namespace qkvlab::lm
