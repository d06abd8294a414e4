// Bad input and faults on the language-model surfaces (issue 31):
//   - every output option of every command over special files: a FIFO and a
//     private character device are written into and stay what they are; a
//     symlink is refused and its target untouched; "-" is standard output;
//   - probe --target pos against tags.json (ids out of range, one entry, malformed);
//   - non-finite weights refused where they enter (--allow-nonfinite), a
//     non-finite result reported as such (exit 1, the layer named), entropies
//     that do not drop NaN;
//   - a checkpoint as one unit: cut after each file of a write, then resumed:
//     refused in one line or bit-identical to the uninterrupted run; an optimizer
//     file of another run, tampered step metadata, non-finite or negative
//     optimizer state and a finished run refused; one writer per run directory.
#include "analysis/measures.hpp"
#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/fnv.hpp"
#include "core/rng.hpp"
#include "corpus/token_file.hpp"
#include "engine/cpu_backend.hpp"
#include "engine/safetensors.hpp"
#include "lm/checkpoint.hpp"
#include "lm/parameters.hpp"
#include "lm/plan.hpp"
#include "lm/train.hpp"
#include "run_command.hpp"
#include "corpus_manifest.hpp"
#include "scratch_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

namespace qkvlab {
namespace {

namespace fs = std::filesystem;
using test_support::CommandResult;
using test_support::ScratchDir;
using test_support::shell_quoted;

using test_support::expect_usage_error;
using test_support::lines;
using test_support::run_bounded;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// ---- fixtures: a tiny model, token files and two tiny runs ----------------------------------------

// A 2-layer GPT-2 of width 16 over a vocabulary of 50 in DIR/ckpt, 4 sequences of 8 tokens in
// DIR/t.npy and a 1-D stream of 600 in DIR/stream.npy.
struct Fixture {
  ScratchDir dir;
  fs::path ckpt = dir / "ckpt", tokens = dir / "t.npy", stream = dir / "stream.npy";
  Fixture() {
    const CommandResult init = run_bounded("lm init " + shell_quoted(ckpt) +
                                           " --family gpt2 --layers 2 --d 16 --heads 2 --vocab 50 --positions 16");
    if (init.status != 0) throw std::runtime_error("lm init: " + init.err);
    Rng rng(3, "robust_lm_test/tokens");
    std::vector<std::int32_t> ids(32), longer(600);
    for (auto& id : ids) id = std::int32_t(rng.uniform_int(50));
    for (auto& id : longer) id = std::int32_t(rng.uniform_int(50));
    corpus::write_tokens_npy(tokens, ids, 4, 8);
    corpus::write_tokens_npy(stream, longer, 600, 0);
  }
  std::string model_args() const { return shell_quoted(ckpt) + " --tokens " + shell_quoted(tokens); }
};

// ---- every output option over special files ------------------------------------------------------

// One output option of one command: `args` with TARGET where the path goes, and what its bytes start
// with (or contain) when written.
struct OutputCase {
  std::string name, args, expected;
  bool prefix = true;  // expected is the start of the bytes, else a part of them
};

std::string replaced(std::string args, const std::string& target) {
  const auto at = args.find("TARGET");
  return args.replace(at, 6, shell_quoted(target));
}

const std::string kHdf5 = std::string("\x89HDF\r\n\x1a\n", 8);

std::vector<OutputCase> output_cases(const Fixture& f) {
  const std::string analyze = "analyze entropy " + f.model_args() + " --sequences 2 --quiet";
  const std::string probe = "probe " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) +
                            " --steps 2 --warmup 1 --lr-grid 1e-3 --seq-len 8 --batch 2 --eval-windows 2 --quiet";
  const std::string icl = "icl theory --d 2 --n 4 --prompts 64";
  const std::string transfer = "transfer --d 2 --steps 20 --batch 8";
  return {
      {"analyze --csv", analyze + " --csv TARGET", "layer,mean"},
      {"analyze --out", analyze + " --out TARGET", kHdf5},
      {"probe --csv", probe + " --csv TARGET", "layer,loss"},
      {"probe --out", probe + " --out TARGET", kHdf5},
      {"verify --out", "verify qwe.lemma3.1 --trials 1 --d 4 --heads 2 --seq 4 --quiet --out TARGET", kHdf5},
      {"verify --junit", "verify qwe.lemma3.1 --trials 1 --d 4 --heads 2 --seq 4 --quiet --junit TARGET", "<testsuite", false},
      {"icl theory --csv", icl + " --csv TARGET", "a,", true},
      {"icl theory --out", icl + " --out TARGET", kHdf5},
      {"transfer --csv", transfer + " --csv TARGET", "d,", true},
      {"transfer --out", transfer + " --out TARGET", kHdf5},
      {"lm compare --csv", "lm compare " + shell_quoted(f.dir / "runA") + " " + shell_quoted(f.dir / "runB") +
                               " --baseline vanilla --csv TARGET",
       "step,", true},
  };
}

// Two tiny runs of lm train for lm compare (a vanilla and a resformer).
void train_two_runs(const Fixture& f) {
  for (const auto& [name, variant] : {std::pair{"runA", "vanilla"}, std::pair{"runB", "resformer"}}) {
    const CommandResult r = run_bounded(
        "lm train --tokens " + shell_quoted(f.stream) + " --out " + shell_quoted(f.dir / name) +
        " --family gpt2 --layers 2 --d 16 --heads 2 --vocab 50 --seq-len 8 --batch 2 --steps 6 --eval-every 3"
        " --quiet --variant " +
        variant);
    ASSERT_EQ(r.status, 0) << name << ": " << r.err;
  }
}

// Reads a FIFO to its end on a thread, and never hangs: the FIFO is opened for reading, then for
// writing by the test itself (so a writer always exists and the command's open never blocks), and
// finish() closes the test's end once the command has ended: the reader sees the end of the stream
// whether the command wrote into the FIFO, never opened it, or replaced it.
class FifoReader {
 public:
  explicit FifoReader(const fs::path& fifo)
      : read_(::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)),
        hold_(::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC)),
        thread_([this] {
          if (read_ < 0) return;
          ::fcntl(read_, F_SETFL, ::fcntl(read_, F_GETFL) & ~O_NONBLOCK);
          char buf[65536];
          for (ssize_t n; (n = ::read(read_, buf, sizeof buf)) > 0;) bytes_.append(buf, std::size_t(n));
          ::close(read_);
        }) {}
  std::string finish() {
    if (hold_ >= 0) ::close(hold_);
    thread_.join();
    return bytes_;
  }

 private:
  int read_, hold_;
  std::string bytes_;
  std::thread thread_;
};

bool has_expected(const std::string& bytes, const OutputCase& c) {
  return c.prefix ? bytes.rfind(c.expected, 0) == 0 : bytes.find(c.expected) != std::string::npos;
}

TEST(RobustOutputs, EveryOutputOptionWritesIntoAFifoAndLeavesItAFifo) {
  Fixture f;
  train_two_runs(f);
  for (const OutputCase& c : output_cases(f)) {
    // Control: a regular file holds the bytes expected (and gives the command's status: transfer's
    // verdict is 1 on so short a run).
    const fs::path file = f.dir / "regular";
    const CommandResult control = run_bounded(replaced(c.args, file.string()));
    ASSERT_TRUE(control.status == 0 || control.status == 1) << c.name << ": " << control.err;
    EXPECT_TRUE(has_expected(read_file(file), c)) << c.name;
    const fs::path fifo = f.dir / "fifo";
    fs::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    FifoReader reader(fifo);
    const CommandResult r = run_bounded(replaced(c.args, fifo.string()));
    const std::string bytes = reader.finish();
    EXPECT_EQ(r.status, control.status) << c.name << ": " << r.err;
    EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo))) << c.name << ": the FIFO was replaced";
    EXPECT_TRUE(has_expected(bytes, c)) << c.name << ": read " << bytes.size() << " bytes: " << bytes.substr(0, 40);
  }
}

TEST(RobustOutputs, FiguresAndAnalysisTablesStreamIntoFifosToo) {
  Fixture f;
  // --figure STEM writes STEM.svg and STEM.png: both FIFOs here, with the CSV a third.
  for (const char* suffix : {".svg", ".png"}) ASSERT_EQ(::mkfifo((f.dir / ("fig" + std::string(suffix))).c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((f.dir / "table.csv").c_str(), 0600), 0);
  FifoReader svg(f.dir / "fig.svg"), png(f.dir / "fig.png"), csv(f.dir / "table.csv");
  const CommandResult r = run_bounded("analyze entropy " + f.model_args() + " --sequences 2 --quiet --csv " +
                                      shell_quoted(f.dir / "table.csv") + " --figure " + shell_quoted(f.dir / "fig"));
  const std::string svg_bytes = svg.finish(), png_bytes = png.finish(), csv_bytes = csv.finish();
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(svg_bytes.find("<svg"), std::string::npos) << svg_bytes.substr(0, 80);
  EXPECT_EQ(png_bytes.rfind("\x89PNG", 0), 0u);
  EXPECT_EQ(csv_bytes.rfind("layer,mean", 0), 0u) << csv_bytes;
  for (const char* name : {"fig.svg", "fig.png", "table.csv"}) EXPECT_TRUE(fs::is_fifo(fs::symlink_status(f.dir / name))) << name;
}

TEST(RobustOutputs, EveryOutputOptionWritesIntoACharacterDeviceAndLeavesIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "mknod of a character device needs root; not run as root";
  Fixture f;
  train_two_runs(f);
  const fs::path node = f.dir / "null";  // a private /dev/null: major 1, minor 3
  ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0) << std::strerror(errno);
  for (const OutputCase& c : output_cases(f)) {
    const CommandResult r = run_bounded(replaced(c.args, node.string()));
    EXPECT_TRUE(r.status == 0 || (r.status == 1 && c.name.rfind("transfer", 0) == 0)) << c.name << ": " << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0) << c.name;
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << c.name << ": the device node was replaced";
    EXPECT_EQ(st.st_rdev, ::makedev(1, 3)) << c.name;
  }
}

TEST(RobustOutputs, ASymlinkIsRefusedAndItsTargetUntouched) {
  Fixture f;
  std::ofstream(f.dir / "victim") << "precious\n";
  fs::create_symlink(f.dir / "victim", f.dir / "link");
  for (const OutputCase& c : output_cases(f)) {
    if (c.name.rfind("lm compare", 0) == 0) continue;  // its runs are made by the FIFO test
    CommandResult r = run_bounded(replaced(c.args, (f.dir / "link").string()));
    if (c.name.rfind("verify", 0) == 0) r.out.clear();  // verify prints its report before writing its files
    expect_usage_error(r, c.name, (f.dir / "link").string() + ": it is a symbolic link");
    EXPECT_TRUE(fs::is_symlink(f.dir / "link")) << c.name;
    EXPECT_EQ(read_file(f.dir / "victim"), "precious\n") << c.name;
  }
}

TEST(RobustOutputs, DashAndDevStdoutAreStandardOutput) {
  Fixture f;
  fs::remove(fs::current_path() / "-");  // a file the writer before issue 31 made
  for (const char* target : {"-", "/dev/stdout"}) {
    const CommandResult r = run_bounded("analyze entropy " + f.model_args() + " --sequences 2 --quiet --format json --csv " + target);
    EXPECT_EQ(r.status, 0) << target << ": " << r.err;
    EXPECT_NE(r.out.find("layer,mean"), std::string::npos) << target << ": " << r.out;
  }
  EXPECT_FALSE(fs::exists(fs::current_path() / "-"));
}

// The library's half: a streamed target is written at commit, after the renames before it, and a
// set that fails before commit writes nothing into the FIFO.
TEST(RobustOutputs, StagedFilesStreamAtCommitAndRefuseLinksBeforeWriting) {
  ScratchDir dir;
  const fs::path fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  {
    FifoReader reader(fifo);
    StagedFiles files;
    files.add_bytes(dir / "a.txt", "text", "regular\n");
    files.add_bytes(fifo, "text", "streamed\n");
    EXPECT_TRUE(files.temporaries().size() == 1);
    files.commit();
    EXPECT_EQ(reader.finish(), "streamed\n");
  }
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(fifo)));
  EXPECT_EQ(read_file(dir / "a.txt"), "regular\n");
  // A symlink target is refused when staged (a UsageError), before any byte is written.
  fs::create_symlink(dir / "a.txt", dir / "link");
  StagedFiles refused;
  EXPECT_THROW(refused.add_bytes(dir / "link", "text", "overwritten\n"), UsageError);
  EXPECT_EQ(read_file(dir / "a.txt"), "regular\n");
  // A block device or socket is refused too; a directory still is.
  fs::create_directory(dir / "sub");
  EXPECT_THROW(write_bytes_atomically(dir / "sub", "text", "x"), UsageError);
}

// ---- probe --target pos against tags.json ------------------------------------------------------

// A prepared-corpus directory holding tokens, tags and tags.json of `names` entries.
void write_corpus(const fs::path& dir, int tags, std::int32_t bad_tag = -2, const std::string& tags_json = "") {
  fs::create_directories(dir);
  Rng rng(9, "robust_lm_test/corpus");
  std::vector<std::int32_t> tokens(600), tag_ids(600);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = std::int32_t(rng.uniform_int(50)), tag_ids[i] = std::int32_t(rng.uniform_int(std::max(tags, 1)));
  if (bad_tag != -2) tag_ids[123] = bad_tag;
  for (const char* split : {"train", "validation"}) {
    corpus::write_tokens_npy(dir / (std::string(split) + "_tokens.npy"), tokens, 600, 0);
    corpus::write_tokens_npy(dir / (std::string(split) + "_tags.npy"), tag_ids, 600, 0);
  }
  std::string names = "[";
  for (int t = 0; t < tags; ++t) names += (t ? ", \"T" : "\"T") + std::to_string(t) + "\"";
  std::ofstream(dir / "tags.json") << (tags_json.empty() ? names + "]\n" : tags_json);
  test_support::write_corpus_manifest(dir);
}

// analyze --out records what the tables were measured on in the HDF5 root's "context" attribute,
// the weights' type among it (review r26: a bf16 run's file could not be told from a float32 run's).
// The attribute is a JSON string stored inline, so its bytes are in the file. Control: --dtype f32
// writes "f32", and neither file carries the run's speed or threads (the same bits at any count).
TEST(RobustOutputs, AnalyzesHdf5FileRecordsTheWeightsTypeAndDefinition) {
  Fixture f;
  const auto context_of = [&](const std::string& dtype) {
    const fs::path out = f.dir / ("a-" + dtype + ".h5");
    const CommandResult r = run_bounded("analyze entropy " + f.model_args() + " --sequences 2 --quiet --dtype " + dtype +
                                        " --definition row --out " + shell_quoted(out));
    EXPECT_EQ(r.status, 0) << r.err;
    std::ifstream in(out, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string bf16 = context_of("bf16"), f32 = context_of("f32");
  EXPECT_NE(bf16.find("\"dtype\":\"bf16\""), std::string::npos);
  EXPECT_NE(f32.find("\"dtype\":\"f32\""), std::string::npos);
  EXPECT_EQ(f32.find("\"dtype\":\"bf16\""), std::string::npos);
  for (const std::string* file : {&bf16, &f32}) {
    EXPECT_NE(file->find("\"seq_len\":8"), std::string::npos);
    EXPECT_NE(file->find("row"), std::string::npos);
    EXPECT_EQ(file->find("tokens_per_second"), std::string::npos);
    EXPECT_EQ(file->find("threads"), std::string::npos);
  }
}

// analyze --figure STEM alone writes its numbers to STEM.csv (all: STEM-TABLE.csv per table), as
// --figure means in transfer, probe, the icl commands and lm compare (it was refused: "--figure needs
// --csv"); the bytes are --csv's. Control: with --csv naming another file, no STEM.csv is written.
TEST(RobustOutputs, AnalyzesFigureAloneWritesItsNumbersBesideIt) {
  Fixture f;
  const std::string analyze = "analyze entropy " + f.model_args() + " --sequences 2 --quiet";
  ASSERT_EQ(run_bounded(analyze + " --figure " + shell_quoted(f.dir / "fig")).status, 0);
  ASSERT_EQ(run_bounded(analyze + " --csv " + shell_quoted(f.dir / "given.csv") + " --figure " + shell_quoted(f.dir / "other"))
                .status, 0);
  const auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_FALSE(bytes(f.dir / "fig.csv").empty());
  EXPECT_EQ(bytes(f.dir / "fig.csv"), bytes(f.dir / "given.csv"));
  EXPECT_FALSE(fs::exists(f.dir / "other.csv"));
  ASSERT_EQ(run_bounded("analyze all " + f.model_args() + " --sequences 2 --quiet --figure " + shell_quoted(f.dir / "all"))
                .status, 0);
  for (const char* table : {"entropy", "first_token", "similarity", "spectrum"})
    EXPECT_TRUE(fs::exists(f.dir / ("all-" + std::string(table) + ".csv"))) << table;
  // A clash names the option the user gave (review r28: "--csv" where none was typed); control: --csv's own.
  const std::string clash = shell_quoted(f.dir / "g.csv");
  expect_usage_error(run_bounded(analyze + " --figure " + shell_quoted(f.dir / "g") + " --out " + clash), "figure",
                     "--figure's CSV " + (f.dir / "g.csv").string() + " is also --out's file");
  expect_usage_error(run_bounded(analyze + " --csv " + clash + " --out " + clash), "csv",
                     "--csv " + (f.dir / "g.csv").string() + " is also --out's file");
}

TEST(RobustProbe, TagIdsAreCheckedAgainstTagsJson) {
  Fixture f;
  const auto probe = [&](const fs::path& data) {
    return run_bounded("probe " + shell_quoted(f.ckpt) + " --corpus brown --data " + shell_quoted(data) +
                       " --target pos --init random --steps 2 --warmup 1 --lr-grid 1e-3 --seq-len 8 --batch 2"
                       " --eval-windows 2 --quiet --format json");
  };
  // Control: ids within 12 tags (and -1) run.
  write_corpus(f.dir / "good", 12);
  const CommandResult good = probe(f.dir / "good");
  EXPECT_EQ(good.status, 0) << good.err;
  for (std::int32_t bad : {12, 181, 1000000}) {
    write_corpus(f.dir / "bad", 12, bad);
    expect_usage_error(probe(f.dir / "bad"), "tag " + std::to_string(bad),
                       "train_tags.npy: tag id " + std::to_string(bad) + " at position 123 is outside tags.json's 12 tags");
  }
  write_corpus(f.dir / "one", 1);
  expect_usage_error(probe(f.dir / "one"), "one tag", "tags.json: 1 tag names; a tag probe needs at least 2");
  for (const std::string& json : {std::string("{\"a\": 1}"), std::string("[\"A\", 3]"), std::string("[\"A\", ")}) {
    write_corpus(f.dir / "malformed", 12, -2, json);
    expect_usage_error(probe(f.dir / "malformed"), json, "tags.json: ");
  }
}

// An output whose directory does not exist is a usage error before the work (probe ran its probes, then
// failed to write, exit 3; analyze likewise): a million-step probe is refused at once. Controls: the same
// runs with an existing directory write their files.
TEST(RobustProbe, AMissingOutputDirectoryIsRefusedBeforeTheWork) {
  Fixture f;
  const std::string probe = "probe " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) +
                            " --lr-grid 1e-3 --seq-len 8 --batch 2 --eval-windows 2 --quiet";
  const std::string analyze = "analyze entropy " + f.model_args() + " --sequences 2 --quiet";
  const fs::path missing = f.dir / "missing";
  for (const std::string& option : {" --csv ", " --out "}) {
    expect_usage_error(run_bounded(probe + " --steps 1000000" + option + shell_quoted(missing / "p.x"), 30), "probe" + option,
                       "directory " + missing.string() + " does not exist");
    expect_usage_error(run_bounded(analyze + option + shell_quoted(missing / "a.x"), 30), "analyze" + option,
                       "directory " + missing.string() + " does not exist");
  }
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_EQ(run_bounded(probe + " --steps 2 --warmup 1 --csv " + shell_quoted(f.dir / "p.csv")).status, 0);
  EXPECT_TRUE(fs::is_regular_file(f.dir / "p.csv"));
  EXPECT_EQ(run_bounded(analyze + " --csv " + shell_quoted(f.dir / "a.csv")).status, 0);
}

// probe --eval-windows above the consecutive windows the validation stream holds used fewer, silently
// (review r7); it is refused as --sequences is. The stream's validation tenth is 60 tokens: 7 windows
// of 8. Controls: 7 runs and records 7; the released recipe's random windows take any count.
TEST(RobustProbe, EvalWindowsBeyondTheValidationStreamAreRefused) {
  Fixture f;
  const std::string probe = "probe " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) +
                            " --lr-grid 1e-3 --seq-len 8 --batch 2 --quiet --format json --steps ";
  expect_usage_error(run_bounded(probe + "2 --warmup 1 --eval-windows 8"), "--eval-windows 8",
                     "--eval-windows 8: the validation stream holds 7 windows of 8 tokens");
  const CommandResult seven = run_bounded(probe + "2 --warmup 1 --eval-windows 7");
  EXPECT_EQ(seven.status, 0) << seven.err;
  EXPECT_NE(seven.out.find("\"validation_windows\": 7"), std::string::npos) << seven.out;
  EXPECT_EQ(run_bounded(probe + "20 --warmup 2 --eval-windows 8 --recipe released").status, 0);
}

// ---- non-finite weights and results ------------------------------------------------------------

void reseal(const fs::path& ck, const std::string& file);

// The checkpoint with one weight of model.safetensors set to `value`, edited by hand as the issue's
// reproducer did, its manifest made to match (so the value, not the manifest, is what is refused).
void poison(const fs::path& ckpt, const std::string& tensor, float value, std::size_t element = 0) {
  engine::SafeTensors file = engine::load_safetensors(ckpt / "model.safetensors");
  std::memcpy(file.tensors.at(tensor).data.data() + 4 * element, &value, 4);
  engine::save_safetensors(ckpt / "model.safetensors", file);
  reseal(ckpt, "model.safetensors");
}

std::string first_tensor(const fs::path& ckpt, const std::string& part) {
  const engine::SafeTensors file = engine::load_safetensors(ckpt / "model.safetensors");
  for (const auto& [name, t] : file.tensors)
    if (name.find(part) != std::string::npos) return name;
  throw std::runtime_error("no tensor named *" + part + "*");
}

TEST(RobustNonFinite, WeightsHoldingNanOrInfAreRefusedNamingTheTensor) {
  Fixture f;
  const std::string analyze = "analyze entropy " + f.model_args() + " --sequences 2 --quiet";
  const std::string eval = "lm eval " + f.model_args() + " --quiet";
  ASSERT_EQ(run_bounded(analyze).status, 0);  // control: the intact model
  ASSERT_EQ(run_bounded(eval).status, 0);
  const std::string tensor = first_tensor(f.ckpt, "wte");
  poison(f.ckpt, tensor, std::numeric_limits<float>::quiet_NaN(), 7);
  // probe at a --seq-len within the model's 16 positions: its sizes are checked before the weights are read
  for (const std::string& args : {analyze, eval, "probe " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) + " --quiet --seq-len 8",
                                  "lm export " + shell_quoted(f.ckpt) + " --hf " + shell_quoted(f.dir / "hf")})
    expect_usage_error(run_bounded(args), args, "tensor \"" + tensor + "\" holds a non-finite weight (nan at element 7)");
  EXPECT_FALSE(fs::exists(f.dir / "hf" / "model.safetensors"));
}

// The tokens are checked against the model's config.json or metadata before its weights are read
// (review r26: a missing token file, an id outside the vocabulary, a sequence longer than the
// positions were refused after the whole model loaded, 14.5 GB for Mistral-7B). With a NaN weight
// that loading refuses, the token error is the one reported; control: the intact tokens reach the
// weights, which are refused naming the tensor.
TEST(RobustNonFinite, TheTokensAreCheckedBeforeTheWeightsAreRead) {
  Fixture f;
  const std::string tensor = first_tensor(f.ckpt, "wte");
  poison(f.ckpt, tensor, std::numeric_limits<float>::quiet_NaN(), 7);
  std::vector<std::int32_t> outside(16, 3);
  outside[5] = 50;
  corpus::write_tokens_npy(f.dir / "outside.npy", outside, 2, 8);
  const std::string missing = shell_quoted(f.dir / "missing.npy"), beyond = shell_quoted(f.dir / "outside.npy");
  for (const std::string& command : {"analyze entropy " + shell_quoted(f.ckpt) + " --quiet --sequences 2",
                                     "lm eval " + shell_quoted(f.ckpt) + " --quiet",
                                     "verify --quiet --checkpoint " + shell_quoted(f.ckpt),
                                     "probe " + shell_quoted(f.ckpt) + " --quiet --seq-len 4 --lr-grid 1e-3 --steps 2 --warmup 1"}) {
    expect_usage_error(run_bounded(command + " --tokens " + missing), command, "missing.npy");
    expect_usage_error(run_bounded(command + " --tokens " + beyond), command, "token id 50");
    expect_usage_error(run_bounded(command + " --tokens " + shell_quoted(f.tokens)), command,
                       "tensor \"" + tensor + "\" holds a non-finite weight");
  }
}

TEST(RobustNonFinite, ANonFiniteResultIsTheFindingExitOneWithTheLayer) {
  Fixture f;
  // Every position's embedding NaN: every layer's pattern is NaN from layer 1 on.
  const engine::SafeTensors file = engine::load_safetensors(f.ckpt / "model.safetensors");
  const std::string wpe = first_tensor(f.ckpt, "wpe");
  const fs::path prompt = f.dir / "prompt.npy";
  corpus::write_tokens_npy(prompt, {1, 2, 3}, 3, 0);
  const std::string generate =
      "lm generate " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(prompt) + " --max-new 2 --quiet --allow-nonfinite";
  ASSERT_EQ(run_bounded(generate).status, 0);  // control: the intact model decodes
  poison(f.ckpt, wpe, std::numeric_limits<float>::quiet_NaN(), 0);
  const CommandResult analyzed = run_bounded("analyze entropy " + f.model_args() + " --sequences 2 --quiet --allow-nonfinite --csv " +
                                             shell_quoted(f.dir / "e.csv"));
  EXPECT_EQ(analyzed.status, 1) << analyzed.err;
  EXPECT_EQ(lines(analyzed.err), 1) << analyzed.err;
  EXPECT_NE(analyzed.err.find("qkvlab: analyze: not finite: layer 1's pattern holds nan"), std::string::npos) << analyzed.err;
  EXPECT_TRUE(analyzed.out.empty()) << analyzed.out;
  EXPECT_FALSE(fs::exists(f.dir / "e.csv"));
  // cross-layer measures what it kept of earlier layers: it refused the NaN itself (exit 3).
  const CommandResult crossed = run_bounded("analyze cross-layer " + f.model_args() + " --sequences 2 --quiet --allow-nonfinite");
  EXPECT_EQ(crossed.status, 1) << crossed.err;
  EXPECT_NE(crossed.err.find("qkvlab: analyze: not finite: layer 1's"), std::string::npos) << crossed.err;
  const CommandResult evaluated = run_bounded("lm eval " + f.model_args() + " --quiet --allow-nonfinite");
  EXPECT_EQ(evaluated.status, 1) << evaluated.err;
  EXPECT_EQ(lines(evaluated.err), 1) << evaluated.err;  // it exited 3 with an empty stderr
  EXPECT_NE(evaluated.err.find("qkvlab: lm eval: not finite: the mean loss"), std::string::npos) << evaluated.err;
  // lm generate reports a logit that is not finite as lm eval does (it exited 3 blaming float overflow).
  const CommandResult generated = run_bounded(generate);
  EXPECT_EQ(generated.status, 1) << generated.err;
  EXPECT_EQ(lines(generated.err), 1) << generated.err;
  EXPECT_NE(generated.err.find("qkvlab: lm generate: not finite: new token 1 of sequence 0: the logit of token id 0 is nan"),
            std::string::npos)
      << generated.err;
  EXPECT_TRUE(generated.out.empty()) << generated.out;
  // A broken tokenizer (needed only for the output's text) is refused before the decoding: exit 2, not
  // the decoding's finding (it was read after the work).
  std::ofstream(f.ckpt / "vocab.json") << "{\"a";
  std::ofstream(f.ckpt / "merges.txt") << "#version: 0.2\n";
  expect_usage_error(run_bounded(generate), "generate with a broken tokenizer", "vocab.json");
  // lm train --from the NaN model stops at its first step as diverged (exit 3, as its --allow-nonfinite
  // help says) and says that no checkpoint was written (it said "the last checkpoint is kept").
  const CommandResult trained = run_bounded("lm train --from " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) +
                                            " --batch 2 --seq-len 8 --steps 2 --quiet --allow-nonfinite --out " +
                                            shell_quoted(f.dir / "nan-run"));
  EXPECT_EQ(trained.status, 3) << trained.err;
  EXPECT_NE(trained.err.find("training diverged at step 1"), std::string::npos) << trained.err;
  EXPECT_NE(trained.err.find("no checkpoint was written"), std::string::npos) << trained.err;
  const CommandResult probed = run_bounded("probe " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) +
                                           " --steps 2 --warmup 1 --lr-grid 1e-3,1e-2 --seq-len 8 --batch 2 --eval-windows 2"
                                           " --quiet --allow-nonfinite");
  EXPECT_EQ(probed.status, 1) << probed.err;
  EXPECT_NE(probed.err.find("qkvlab: probe: not finite: layer 0: the validation loss is not finite at every learning rate"),
            std::string::npos)
      << probed.err;
  EXPECT_TRUE(probed.out.empty()) << probed.out;
}

// lm export and lm convert with --allow-nonfinite copy the weights as they are (a NaN goes into the
// written model, exit 0), which their help now says; it promised "a non-finite result is then
// reported as such, exit 1", the computing commands' behaviour. Control: lm eval's help keeps that.
TEST(RobustNonFinite, TheWritersHelpSaysTheyCopyNonFiniteWeights) {
  Fixture f;
  poison(f.ckpt, first_tensor(f.ckpt, "wte"), std::numeric_limits<float>::quiet_NaN(), 7);
  const std::string src = shell_quoted(f.ckpt);
  for (const auto& [command, says] : {std::pair{std::string("lm export ") + src + " --hf " + shell_quoted(f.dir / "hf"),
                                                std::string("they are then written as they are, exit 0")},
                                      {"lm convert " + src + " --out " + shell_quoted(f.dir / "c"),
                                       "the converted model then holds them and what is computed from them, exit 0"}}) {
    const CommandResult help = run_bounded(command.substr(0, command.find(' ', 3)) + " --help");
    EXPECT_NE(help.out.find(says), std::string::npos) << help.out;
    EXPECT_EQ(help.out.find("exit 1"), std::string::npos) << help.out;
    EXPECT_EQ(run_bounded(command + " --allow-nonfinite").status, 0) << command;
  }
  const std::vector<float> converted = lm::load_checkpoint(f.dir / "c", false, true).values;
  EXPECT_TRUE(std::any_of(converted.begin(), converted.end(), [](float x) { return std::isnan(x); }));
  EXPECT_NE(run_bounded("lm eval --help").out.find("a non-finite result is then reported as such, exit 1"), std::string::npos);
}

TEST(RobustNonFinite, EntropiesDoNotDropNan) {
  const int H = 1, T = 3;
  // A causal pattern: row i has i + 1 weights.
  std::vector<float> pattern = {1, 0, 0, 0.5f, 0.5f, 0, 0.2f, 0.3f, 0.5f};
  for (auto d : {analysis::EntropyDefinition::column, analysis::EntropyDefinition::row})
    EXPECT_TRUE(std::isfinite(analysis::attention_entropy(pattern.data(), H, T, d)));  // control
  for (std::size_t k : {3, 7}) {
    std::vector<float> partly = pattern;
    partly[k] = std::numeric_limits<float>::quiet_NaN();
    for (auto d : {analysis::EntropyDefinition::column, analysis::EntropyDefinition::row})
      EXPECT_TRUE(std::isnan(analysis::attention_entropy(partly.data(), H, T, d))) << k;
  }
  std::vector<float> all(pattern.size(), std::numeric_limits<float>::quiet_NaN());
  for (auto d : {analysis::EntropyDefinition::column, analysis::EntropyDefinition::row})
    EXPECT_TRUE(std::isnan(analysis::attention_entropy(all.data(), H, T, d)));  // was 0
}

// ---- the checkpoint as one unit ---------------------------------------------------------------

lm::TrainData toy_data() {
  lm::TrainData d;
  Rng rng(1, "robust_lm_test/data");
  for (auto* s : {&d.train, &d.validation})
    for (int i = 0, x = 0; i < (s == &d.train ? 3000 : 600); ++i) {
      if (i % 17 == 0) x = int(rng.uniform_int(64));
      s->push_back(std::int32_t(x = (x + 3) % 64));
    }
  d.source = "toy";
  return d;
}

lm::RunOptions tiny_run(const fs::path& out, std::uint64_t seed = 5) {
  lm::RunOptions o;
  o.model = lm::family_defaults(lm::Family::gpt2, 2, 16, 2, 64, 16);
  o.loop.steps = 6, o.loop.lr = 3e-3, o.loop.min_lr = 3e-4, o.loop.warmup = 2, o.loop.clip = 1.0;
  o.loop.adamw = {0.9, 0.95, 1e-8, 0.1};
  o.batch = 4, o.seq = 16, o.seed = seed, o.eval_every = 2, o.checkpoint_every = 2, o.eval_windows = 8;
  o.out = out;
  return o;
}

struct Cut : std::runtime_error {
  Cut() : std::runtime_error("cut") {}
};

// Removes the hook when the test ends, however it ends.
struct HookGuard {
  ~HookGuard() { lm::set_checkpoint_write_hook({}); }
};

std::vector<float> final_values(const fs::path& run) { return lm::load_checkpoint(run / "checkpoint").values; }

std::string without_time(const std::string& csv) {
  std::string out, line;
  std::istringstream in(csv);
  while (std::getline(in, line)) out += line.substr(0, line.rfind(',')) + "\n";
  return out;
}

// A checkpoint is written beside the last one (checkpoint.writing) and takes its place only whole: a run
// cut after any file of its second checkpoint's write (step 4) resumes from the first (step 2), bit for
// bit as the uninterrupted run, and the next save clears the partial write. Control: the hook did cut
// the write (the run threw, the partial directory is there).
struct StopAt {
  std::int64_t step;
  void operator()(const lm::Progress& p) const {
    if (p.step == step) throw Cut();
  }
};

// tiny_run trained whole, beside the runs a test cuts: a cut run, resumed, must end as it did.
struct CutRuns {
  ScratchDir dir;
  HookGuard guard;
  const lm::TrainData data = toy_data();
  engine::CpuBackend<float> backend{1};
  CutRuns() { train_language_model(tiny_run(dir / "whole"), data, backend, {}); }

  // `run`, cut, resumed (from step `from`): the uninterrupted run's bits, train.csv and no partial write.
  void expect_resumes_as_whole(const fs::path& run, std::int64_t from, const std::string& label) {
    lm::RunOptions resumed = tiny_run(run);
    resumed.resume = true;
    const results::Value r = train_language_model(resumed, data, backend, {});
    EXPECT_EQ(r["resumed_from"].number(), from) << label;
    EXPECT_EQ(final_values(run), final_values(dir / "whole")) << label << ": not bit-identical";
    EXPECT_EQ(without_time(read_file(run / "train.csv")), without_time(read_file(dir / "whole" / "train.csv"))) << label;
    EXPECT_FALSE(fs::exists(run / "checkpoint.writing")) << label;
  }
};

TEST(RobustCheckpoint, ACutAfterEachFileOfAWriteResumesFromTheLastWholeCheckpoint) {
  CutRuns c;
  const std::vector<std::string> files = {"optimizer.safetensors", "model.safetensors", "config.json", "manifest.json"};
  for (std::size_t k = 0; k < files.size(); ++k) {
    // The run is cut after the k-th file of its second checkpoint (step 4), as a kill there would.
    const fs::path run = c.dir / ("cut" + std::to_string(k));
    int writes = 0;
    lm::set_checkpoint_write_hook([&](const std::string& file) {
      if (file == files[0]) ++writes;
      if (writes == 2 && file == files[k]) throw Cut();
    });
    EXPECT_THROW(train_language_model(tiny_run(run), c.data, c.backend, {}), Cut) << k;
    lm::set_checkpoint_write_hook({});
    EXPECT_TRUE(fs::exists(run / "checkpoint.writing" / files[k])) << "control: the write was cut after " << files[k];
    c.expect_resumes_as_whole(run, 2, "cut after " + files[k]);
  }
}

// A run cut before its first checkpoint was whole (its logs written, checkpoint.writing/ partial)
// could be neither resumed ("no checkpoint") nor started again ("already holds train.csv"): its
// resume now starts at step 0 and ends bit-identical to the uninterrupted run. A kill after a save's
// second rename left checkpoint.previous/ for good: a resume removes it. Control: --resume where
// no run ever started is still refused.
TEST(RobustCheckpoint, ARunCutBeforeItsFirstCheckpointResumesFromStepZero) {
  CutRuns c;
  for (const std::string cut_after : {"optimizer.safetensors", "manifest.json"}) {
    const fs::path run = c.dir / ("first-" + cut_after);
    lm::set_checkpoint_write_hook([&](const std::string& file) {
      if (file == cut_after) throw Cut();
    });
    EXPECT_THROW(train_language_model(tiny_run(run), c.data, c.backend, {}), Cut) << cut_after;
    lm::set_checkpoint_write_hook({});
    ASSERT_FALSE(fs::exists(run / "checkpoint")) << cut_after;
    ASSERT_TRUE(fs::exists(run / "train.csv")) << cut_after;
    c.expect_resumes_as_whole(run, 0, "first checkpoint cut after " + cut_after);
  }
  // A run killed while its last save removed checkpoint.previous/ (before its final validation and run.json).
  const fs::path whole = c.dir / "whole";
  const std::vector<float> values = final_values(whole);
  fs::copy(whole / "checkpoint", whole / "checkpoint.previous");
  fs::remove(whole / "run.json");
  lm::RunOptions finished = tiny_run(whole);
  finished.resume = true;
  train_language_model(finished, c.data, c.backend, {});
  EXPECT_FALSE(fs::exists(whole / "checkpoint.previous"));
  EXPECT_EQ(final_values(whole), values);
  // Control: a trained model copied without its optimizer state (and so without the manifest listing it) loads.
  fs::create_directories(c.dir / "copy");
  for (const char* file : {"model.safetensors", "config.json"}) fs::copy_file(whole / "checkpoint" / file, c.dir / "copy" / file);
  EXPECT_EQ(lm::load_checkpoint(c.dir / "copy").values, values);
  // Controls: --resume where no run started is refused, and so is one into a directory holding
  // another's files (a corpus's baselines.json, a train.csv lm train did not write): untouched.
  lm::RunOptions never = tiny_run(c.dir / "never");
  never.resume = true;
  EXPECT_NE(test_support::usage_error([&] { train_language_model(never, c.data, c.backend, {}); }).find("cannot resume: no checkpoint"),
            std::string::npos);
  fs::create_directories(c.dir / "corpus");
  std::ofstream(c.dir / "corpus" / "baselines.json") << "{\"corpus\": true}";
  std::ofstream(c.dir / "corpus" / "train.csv") << "id,text\n";
  lm::RunOptions corpus = tiny_run(c.dir / "corpus");
  corpus.resume = true;
  EXPECT_NE(test_support::usage_error([&] { train_language_model(corpus, c.data, c.backend, {}); }).find("cannot resume: no checkpoint"),
            std::string::npos);
  EXPECT_EQ(read_file(c.dir / "corpus" / "baselines.json"), "{\"corpus\": true}");
  EXPECT_EQ(read_file(c.dir / "corpus" / "train.csv"), "id,text\n");
}

// A run started before 2026-11-27 with a flag its variant does not read (vanilla with --skip-ratio
// 0.25, recorded in its checkpoint) could not be resumed: the flag is refused now, and without it
// the configurations differed. The fields a model does not read are compared at their defaults
// (lm::canonical); control: a field it reads (the width) still refuses the resume.
TEST(RobustCheckpoint, ARunWithAnUnreadFieldResumesWithoutTheFlag) {
  CutRuns c;
  lm::RunOptions old = tiny_run(c.dir / "old");
  old.model.variant.skip_ratio = 0.25;
  EXPECT_THROW(train_language_model(old, c.data, c.backend, StopAt{3}), Cut);
  c.expect_resumes_as_whole(c.dir / "old", 2, "vanilla recorded with skip_ratio 0.25");
  lm::RunOptions wider = tiny_run(c.dir / "old");
  wider.model.ffn *= 2, wider.resume = true;
  fs::remove(c.dir / "old" / "run.json");
  const std::string refused = test_support::usage_error([&] { train_language_model(wider, c.data, c.backend, {}); });
  EXPECT_NE(refused.find("another configuration"), std::string::npos) << refused;
  // it names the field that differs, with both values (review r29), and no field that does not
  const std::string ffn = "ffn " + std::to_string(wider.model.ffn / 2) + " there, " + std::to_string(wider.model.ffn) + " here";
  EXPECT_NE(refused.find(ffn), std::string::npos) << refused;
  EXPECT_EQ(refused.find("; "), std::string::npos) << refused;
}

// lm init, convert and eliminate write a model into its directory in place: a kill between the
// files (here a hook after model.safetensors) left a new model beside an earlier model's config.json
// and tokenizer.json without a manifest, and readers loaded that mix. model.safetensors now records
// that its manifest comes last, and the mix is refused; control: the write completed loads.
TEST(RobustCheckpoint, AModelWriteCutShortIsRefusedNotLoaded) {
  ScratchDir dir;
  HookGuard guard;
  lm::Checkpoint first;
  first.config = lm::family_defaults(lm::Family::gpt2, 1, 16, 2, 32, 8);
  first.values.assign(lm::parameter_layout(first.config, lm::make_plan(first.config)).total(), 0.01f);
  first.tokenizer_json = "{}";
  lm::save_checkpoint(dir / "m", first);
  lm::Checkpoint second = first;
  second.config = lm::family_defaults(lm::Family::gpt2, 1, 32, 2, 32, 8), second.tokenizer_json.clear();
  second.values.assign(lm::parameter_layout(second.config, lm::make_plan(second.config)).total(), 0.02f);
  lm::set_checkpoint_write_hook([](const std::string& file) {
    if (file == "model.safetensors") throw Cut();
  });
  EXPECT_THROW(lm::save_checkpoint(dir / "m", second), Cut);
  lm::set_checkpoint_write_hook({});
  ASSERT_FALSE(fs::exists(dir / "m" / "manifest.json"));
  EXPECT_NE(test_support::usage_error([&] { lm::load_checkpoint(dir / "m"); }).find("no manifest.json beside a model.safetensors"),
            std::string::npos);
  lm::save_checkpoint(dir / "m", second);  // control
  EXPECT_EQ(lm::load_checkpoint(dir / "m").config.d, 32);
  EXPECT_FALSE(fs::exists(dir / "m" / "tokenizer.json"));
}

// manifest.json with FILE's entry made to match FILE as it is now (a hand edit that covers its tracks).
void reseal(const fs::path& ck, const std::string& file) {
  const FileSum sum = file_sum(ck / file);
  const std::regex entry("(\"" + std::regex_replace(file, std::regex("\\."), "\\.") +
                         "\": \\{\\s*\"bytes\": )\\d+(,\\s*\"fnv1a64\": \")[0-9a-f]+\"");
  const std::string text = read_file(ck / "manifest.json");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, entry)) << file << " in " << text;
  const std::string sealed = m.prefix().str() + m[1].str() + std::to_string(sum.bytes) + m[2].str() +
                             hex64(sum.fnv1a64) + "\"" + m.suffix().str();
  std::ofstream(ck / "manifest.json", std::ios::binary) << sealed;
}

// A resume of `o` refused with a one-line UsageError holding `names` (or else a failure).
void expect_resume_refused(lm::RunOptions o, const lm::TrainData& data, engine::Backend<float>& backend,
                           const std::string& names) {
  o.resume = true;
  try {
    train_language_model(o, data, backend, StopAt{o.loop.steps + 1});
    ADD_FAILURE() << "resumed; expected a refusal naming: " << names;
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

class RobustResume : public ::testing::Test {
 protected:
  void SetUp() override {
    a = tiny_run(dir / "a"), b = tiny_run(dir / "b", 6);
    a.loop.steps = b.loop.steps = 8;
    for (const auto& o : {a, b}) EXPECT_THROW(train_language_model(o, data, backend, StopAt{5}), Cut);  // checkpoints at step 4
    for (const char* f : {"model.safetensors", "optimizer.safetensors", "manifest.json"}) saved[f] = read_file(ck / f);
  }
  void restore() {
    for (const auto& [f, bytes] : saved) std::ofstream(ck / f, std::ios::binary) << bytes;
  }
  // Control: the intact checkpoint resumes.
  void expect_resumes() {
    restore();
    lm::RunOptions o = a;
    o.resume = true;
    EXPECT_THROW(train_language_model(o, data, backend, StopAt{6}), Cut);
  }
  ScratchDir dir;
  lm::TrainData data = toy_data();
  engine::CpuBackend<float> backend{1};
  lm::RunOptions a, b;
  fs::path ck = dir / "a" / "checkpoint";
  std::map<std::string, std::string> saved;
};

TEST_F(RobustResume, AnOptimizerFileOfAnotherRunIsRefused) {
  fs::copy_file(dir / "b" / "checkpoint" / "optimizer.safetensors", ck / "optimizer.safetensors",
                fs::copy_options::overwrite_existing);
  expect_resume_refused(a, data, backend, "optimizer.safetensors: does not match manifest.json");
  reseal(ck, "optimizer.safetensors");  // the manifest made to agree: the run identity still differs
  expect_resume_refused(a, data, backend, "optimizer.safetensors: \"run_id\" = ");
  expect_resumes();
}

TEST_F(RobustResume, TamperedStepMetadataIsRefusedNamingTheField) {
  for (const std::string& step : {std::string("-5"), std::string("3"), std::string("999"), std::string("abc"), std::string()}) {
    restore();
    engine::SafeTensors model = engine::load_safetensors(ck / "model.safetensors");
    if (step.empty()) model.metadata.erase("step");
    else model.metadata["step"] = step;
    engine::save_safetensors(ck / "model.safetensors", model);
    reseal(ck, "model.safetensors");
    expect_resume_refused(a, data, backend,
                          "optimizer.safetensors: \"step\" = 4, but model.safetensors has " + (step.empty() ? "(none)" : step));
  }
  expect_resumes();
}

TEST_F(RobustResume, NonFiniteOrNegativeOptimizerStateIsRefused) {
  const engine::SafeTensors intact = engine::load_safetensors(ck / "optimizer.safetensors");
  const std::string m = intact.tensors.begin()->first;  // "m/…" sorts before "v/…"
  std::string v;
  for (const auto& [name, t] : intact.tensors)
    if (name.rfind("v/", 0) == 0) v = name;
  ASSERT_EQ(m.rfind("m/", 0), 0u);
  for (const auto& [tensor, value, shown] : {std::tuple{m, std::numeric_limits<float>::quiet_NaN(), std::string("nan")},
                                             std::tuple{v, -1.0f, std::string("-1")},
                                             std::tuple{m, std::numeric_limits<float>::infinity(), std::string("inf")}}) {
    restore();
    engine::SafeTensors opt = intact;
    std::memcpy(opt.tensors.at(tensor).data.data() + 4, &value, 4);
    engine::save_safetensors(ck / "optimizer.safetensors", opt);
    reseal(ck, "optimizer.safetensors");
    expect_resume_refused(a, data, backend, "tensor \"" + tensor + "\" holds " + shown + " at element 1");
  }
  restore();
  engine::SafeTensors opt = intact;
  opt.metadata["t"] = "-1";
  engine::save_safetensors(ck / "optimizer.safetensors", opt);
  reseal(ck, "optimizer.safetensors");
  expect_resume_refused(a, data, backend, "the step count \"t\" is negative: -1");
  expect_resumes();
}

TEST_F(RobustResume, AFinishedRunIsRefusedAndItsResultsKept) {
  lm::RunOptions whole = tiny_run(dir / "whole");
  train_language_model(whole, data, backend, {});
  const std::string run_json = read_file(dir / "whole" / "run.json"), log = read_file(dir / "whole" / "train.csv");
  expect_resume_refused(whole, data, backend, "is finished (step 6 of 6); its results are kept");
  EXPECT_EQ(read_file(dir / "whole" / "run.json"), run_json);
  EXPECT_EQ(read_file(dir / "whole" / "train.csv"), log);
  expect_resumes();
}

TEST_F(RobustResume, OtherValidationTokensAreRefused) {
  lm::TrainData other = data;
  other.validation[7] = (other.validation[7] + 1) % 64;  // one token of the validation stream
  expect_resume_refused(a, other, backend, "was made with other validation tokens (--val-tokens)");
  expect_resumes();
}

TEST_F(RobustResume, AMalformedLogIsNamedNotStoll) {
  const std::string log = read_file(dir / "a" / "train.csv");
  std::ofstream(dir / "a" / "train.csv", std::ios::app) << "\x01\xff,garbage\n";
  expect_resume_refused(a, data, backend, "train.csv: line 7: the step is not an integer: \"\\u0001");
  std::ofstream(dir / "a" / "train.csv", std::ios::binary | std::ios::trunc) << log;
  expect_resumes();
}

TEST_F(RobustResume, OneWriterPerRunDirectory) {
  {
    const DirectoryLock held(dir / "a", "a test");
    expect_resume_refused(a, data, backend, "is in use by a test (pid " + std::to_string(::getpid()) + ")");
    // ... and from another process, at once.
    corpus::write_tokens_npy(dir / "toy.npy", data.train, std::int64_t(data.train.size()), 0);
    const CommandResult r = run_bounded("lm train --tokens " + shell_quoted(dir / "toy.npy") + " --out " +
                                        shell_quoted(dir / "a") + " --steps 2 --quiet", 60);
    expect_usage_error(r, "a second lm train", "is in use by a test (pid " + std::to_string(::getpid()) + ")");
  }
  expect_resumes();  // control: with the lock released, the run goes on
}

// lm init, lm convert --out and lm eliminate --out replace only a model one of them wrote: a training
// run's checkpoint (its weights and optimizer state, which a resume needs), its model copied without
// that state, a prepared corpus (its manifest.json) and a Hugging Face model were replaced or deleted,
// exit 0; so was a trained model copied before lm train wrote run_id (the repository's own
// outputs/lm/eliminate/model: step 1000, run.*, no run_id). Only a model with their mark ("manifest"
// in its metadata) is theirs: every other is refused in one line, every file as it was, the
// committed one and one of theirs written before the mark included. Control: a new directory beside
// a note takes a model, then another (init, init again, convert, eliminate), and keeps the note.
TEST_F(RobustResume, ModelWritersReplaceOnlyModelsTheyWrote) {
  const Fixture f;
  const fs::path corpus = dir / "corpus", hf = dir / "hf", trained = dir / "trained", committed = dir / "committed",
                 unmarked = dir / "unmarked";
  fs::create_directories(corpus);
  fs::create_directories(trained);  // the trained model copied without its optimizer state
  for (const char* name : {"model.safetensors", "config.json"}) fs::copy_file(ck / name, trained / name);
  fs::copy(fs::path(QKVLAB_SOURCE_DIR) / "outputs" / "lm" / "eliminate" / "model", committed);
  fs::copy(f.ckpt, unmarked);  // lm init's model as written before 2026-11-27: no mark, no manifest
  engine::SafeTensors old = engine::load_safetensors(unmarked / "model.safetensors");
  old.metadata.erase("manifest");
  engine::save_safetensors(unmarked / "model.safetensors", old);
  fs::remove(unmarked / "manifest.json");
  corpus::write_tokens_npy(corpus / "validation_tokens.npy", data.validation, std::int64_t(data.validation.size()), 0);
  test_support::write_corpus_manifest(corpus);
  ASSERT_EQ(run_bounded("lm export " + shell_quoted(f.ckpt) + " --hf " + shell_quoted(hf), 60).status, 0);
  const auto contents = [](const fs::path& d) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(d)) files[e.path().filename().string()] = read_file(e.path());
    return files;
  };
  const auto writers = [&](const fs::path& out) {
    const std::string o = shell_quoted(out), src = shell_quoted(f.ckpt);
    return std::vector<std::string>{"lm init " + o + " --family gpt2 --layers 1 --d 16 --heads 2 --vocab 50 --positions 16",
                                    "lm convert " + src + " --out " + o,
                                    "lm eliminate " + src + " --out " + o + " --layers 1 --sequences 2 --seq-len 8"};
  };
  for (const auto& [out, says] : std::vector<std::pair<fs::path, std::string>>{
           {ck, "holds a training run's checkpoint (optimizer.safetensors)"},
           {trained, "holds a trained model (lm train's run "},
           {committed, "holds a qkvlab model that lm init, convert or eliminate did not write (lm train's, step 1000;"},
           {unmarked, "did not write (one of theirs from before 2026-11-27, or another program's;"},
           {corpus, "holds another tool's manifest.json"},
           {hf, "holds model.safetensors and no qkvlab model"}}) {
    const auto before = contents(out);
    for (const std::string& command : writers(out)) expect_usage_error(run_bounded(command, 60), command, says);
    EXPECT_EQ(contents(out), before) << out;
  }
  expect_resumes();  // the training run goes on
  const fs::path fresh = dir / "fresh";
  fs::create_directories(fresh);
  std::ofstream(fresh / "notes.txt") << "a note";
  const auto init = writers(fresh);
  for (const std::string& command : {init[0], init[0], init[1], init[2]}) EXPECT_EQ(run_bounded(command, 60).status, 0) << command;
  EXPECT_EQ(read_file(fresh / "notes.txt"), "a note");
  EXPECT_TRUE(lm::is_own_checkpoint(fresh));
  // A trained model eliminated is the command's own output (it records the run as its source's), so
  // the command runs again into it.
  const std::string eliminate = "lm eliminate " + shell_quoted(ck) + " --out " + shell_quoted(dir / "eliminated") +
                                " --layers 1 --sequences 2 --seq-len 8";
  for (int k = 0; k < 2; ++k) EXPECT_EQ(run_bounded(eliminate, 60).status, 0) << k;
}

// lm eliminate copies its source's metadata, "step" included, into the manifest it writes, which
// every reader requires to be a non-negative integer: a source whose step is -3 (its model readers
// load) gave an eliminated model no reader would open, exit 0 after the work. It is refused before
// the work, naming the source, and nothing is written. Control: step 3 is eliminated and read back.
TEST(RobustCheckpoint, LmEliminateRefusesAStepItsManifestCannotHold) {
  const Fixture f;
  for (const std::string step : {"-3", "3"}) {
    const fs::path source = f.dir / ("step" + step), out = f.dir / ("out" + step);
    fs::copy(f.ckpt, source);
    engine::SafeTensors model = engine::load_safetensors(source / "model.safetensors");
    model.metadata["step"] = step;
    model.metadata.erase("manifest");  // a model without a manifest, as lm train's copied ones
    engine::save_safetensors(source / "model.safetensors", model);
    fs::remove(source / "manifest.json");
    const std::string eliminate = "lm eliminate " + shell_quoted(source) + " --out " + shell_quoted(out) +
                                  " --layers 1 --sequences 2 --seq-len 8 --quiet";
    if (step == "-3") {
      expect_usage_error(run_bounded(eliminate, 60), eliminate,
                         (source / "model.safetensors").string() + ": \"step\" = -3 is not a non-negative 64-bit integer");
      EXPECT_FALSE(fs::exists(out));
    } else {
      ASSERT_EQ(run_bounded(eliminate, 60).status, 0) << eliminate;
      EXPECT_EQ(run_bounded("lm eval " + shell_quoted(out) + " --tokens " + shell_quoted(f.tokens)).status, 0);
    }
  }
}

// ---- options the tool cannot honour are refused --------------------------------------------

// Model flags describing a part the model does not have were written into its config and changed
// nothing (a vanilla model "with" --skip-ratio 0.25 was another group than its replicates in lm
// compare; SVFormer "from layer 2" was SVFormer from layer 1): refused as --alpha on vanilla is,
// by every command that builds a model from flags. Controls: each flag where it applies.
TEST(RobustOptions, ModelFlagsOfAnotherVariantAreRefused) {
  Fixture f;
  const std::string small = " --layers 3 --d 16 --heads 4 --vocab 16 --positions 8";
  for (const auto& [flags, names] : std::vector<std::pair<std::string, std::string>>{
           {"--skip-ratio 0.25", "--skip-ratio describes the skipv1 family's injected value heads: the model has none (--variant vanilla)"},
           {"--variant resformer --strategy pooling", "--strategy describes the skipv1 family's"},
           {"--variant svformer --source-layer 2", "--source-layer: the model reads no source layer (--variant svformer)"},
           {"--source-layer 2", "--source-layer: the model reads no source layer (--variant vanilla)"},
           {"--d-c 8", "--d-c is a width of MLA's cache: give --mla"},
           {"--family llama --gelu erf", "--gelu is GPT-2's MLP activation"},
           {"--rope-theta 500", "--rope-theta is RoPE's base"}})
    for (const std::string command : {"lm init " + shell_quoted(f.dir / "m"), std::string("params"), std::string("kv")})
      expect_usage_error(run_bounded(command + small + " " + flags), command + " " + flags, names);
  EXPECT_FALSE(fs::exists(f.dir / "m"));
  for (const char* flags : {"--variant skipv1 --skip-ratio 0.25", "--variant skipv1 --strategy pooling",
                            "--variant resformer --source-layer 2", "--variant skipv1 --source-layer 2",
                            "--mla --d-c 8 --d-r 2", "--gelu erf", "--family llama --rope-theta 500",
                            "--mla --d-c 8 --d-r 2 --rope-theta 500"})  // MLA's rotary key reads RoPE's base
    EXPECT_EQ(run_bounded(std::string("params") + small + " " + flags).status, 0) << flags;
  // Over a preset, as given on lm train's command line.
  expect_usage_error(run_bounded("lm train --tokens " + shell_quoted(f.stream) + " --out " + shell_quoted(f.dir / "t") +
                                 " --layers 1 --d 16 --heads 2 --vocab 50 --batch 2 --steps 2 --quiet --skip-ratio 0.25"),
                     "lm train --skip-ratio", "--skip-ratio describes");
}

// A single step had no warmup that --warmup's check accepts (the default, steps/20 but at least 1,
// equalled --steps 1: "--warmup must be below --steps", an option not given); now its warmup is 0.
// Control: a --warmup given at --steps is still refused. kv's total past 2^63 bytes was printed
// wrapped (negative); now refused.
TEST(RobustOptions, OneTrainingStepAndAHugeCacheAreHandled) {
  Fixture f;
  const std::string train = "lm train --tokens " + shell_quoted(f.stream) +
                            " --layers 1 --d 16 --heads 2 --vocab 50 --batch 2 --seq-len 8 --quiet --format json --steps 1";
  const CommandResult one = run_bounded(train + " --out " + shell_quoted(f.dir / "one"));
  EXPECT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find("\"warmup\": 0"), std::string::npos) << one.out;
  expect_usage_error(run_bounded(train + " --warmup 1 --out " + shell_quoted(f.dir / "w")), "--warmup 1 --steps 1",
                     "--warmup must be below --steps");
  expect_usage_error(run_bounded("kv --family llama --layers 1024 --d 65536 --heads 1024 --head-dim 4096 --vocab 100 "
                                 "--seq-len 300000000"),
                     "kv --seq-len 3e8", "would exceed 2^63 bytes");
  EXPECT_EQ(run_bounded("kv --family llama --layers 1024 --d 65536 --heads 1024 --head-dim 4096 --vocab 100 "
                        "--seq-len 200000000").status,
            0);  // control: 6.9e18 bytes fit
}

TEST(RobustOptions, OptionsThatWouldBeIgnoredOrOverriddenAreRefused) {
  Fixture f;
  const std::string small = " --family gpt2 --layers 1 --d 16 --heads 2 --vocab 50 --batch 2 --steps 2 --quiet";
  // --d 32 --heads 3 used head width 10 silently.
  expect_usage_error(run_bounded("lm init " + shell_quoted(f.dir / "h3") + " --d 32 --heads 3"), "--heads 3",
                     "--d 32 is not a multiple of --heads 3: give the head width with --head-dim");
  EXPECT_EQ(run_bounded("lm init " + shell_quoted(f.dir / "h3") + " --d 32 --heads 3 --head-dim 10").status, 0);  // control
  // skipv1 at one layer named a source-layer range that is empty (1 ... L-1) and a flag not given.
  expect_usage_error(run_bounded("lm init " + shell_quoted(f.dir / "s1") + " --variant skipv1 --layers 1"), "skipv1 --layers 1",
                     "skipv1 reuses a source layer's values in the layers after it: it needs --layers 2 or more");
  EXPECT_EQ(run_bounded("lm init " + shell_quoted(f.dir / "s2") + " --variant skipv1 --layers 2").status, 0);  // control
  // --seq-len 65 overrode --positions 64 (here 33 and 32: the stream's validation tenth is 60 tokens).
  const std::string train = "lm train --tokens " + shell_quoted(f.stream) + small;
  expect_usage_error(run_bounded(train + " --out " + shell_quoted(f.dir / "p") + " --positions 32 --seq-len 33"),
                     "--seq-len 33", "--seq-len 33 is longer than the model's 32 positions (--positions)");
  EXPECT_EQ(run_bounded(train + " --out " + shell_quoted(f.dir / "p") + " --positions 32 --seq-len 32").status, 0);
  // --positions rope carries no length: --seq-len 33 grows the preset's positions as before.
  EXPECT_EQ(run_bounded(train + " --out " + shell_quoted(f.dir / "pr") + " --positions rope --seq-len 33").status, 0);
  expect_usage_error(run_bounded(train + " --out " + shell_quoted(f.dir / "pr2") + " --positions rope,32 --seq-len 33"),
                     "--positions rope,32", "--seq-len 33 is longer than the model's 32 positions (--positions)");
  // --positions: one length and one encoding, a llama model's positions are RoPE.
  for (const char* bad : {"rope,rope", "32,64", "rotary", "0", ""})
    expect_usage_error(run_bounded("lm init " + shell_quoted(f.dir / "pb") + " --positions '" + bad + "'"),
                       std::string("--positions ") + bad, "--positions");
  expect_usage_error(run_bounded("lm init " + shell_quoted(f.dir / "pl") + " --family llama --positions learned"),
                     "--family llama --positions learned", "a llama model has RoPE positions");
  EXPECT_EQ(run_bounded("lm init " + shell_quoted(f.dir / "pl") + " --family llama --positions rope,64").status, 0);
  // --from CKPT --d 64 ignored --d; --seq-len past the checkpoint's positions likewise refused.
  const std::string from = "lm train --tokens " + shell_quoted(f.stream) + " --from " + shell_quoted(f.ckpt) +
                           " --batch 2 --steps 2 --quiet --out " + shell_quoted(f.dir / "fr");
  expect_usage_error(run_bounded(from + " --d 64 --seq-len 8"), "--from --d", "model flags (--d, --heads, …) do not apply");
  expect_usage_error(run_bounded(from + " --seq-len 32"), "--from --seq-len", "--seq-len 32 is longer than the model's 16 positions (--from)");
  EXPECT_EQ(run_bounded(from + " --seq-len 8").status, 0);  // control
  // lm eval --seq-len other than a 2-D token file's rows (they are the sequences) was ignored, exit 0;
  // controls: the rows' length, and none, evaluate the file. A 1-D file shorter than --seq-len names it.
  const std::string eval = "lm eval " + f.model_args() + " --quiet";
  expect_usage_error(run_bounded(eval + " --seq-len 4"), "lm eval 2-D --seq-len",
                     "--seq-len 4: " + f.tokens.string() + " is 2-D, its rows of 8 tokens are the sequences");
  EXPECT_EQ(run_bounded(eval + " --seq-len 8").status, 0);
  EXPECT_EQ(run_bounded(eval).status, 0);
  expect_usage_error(run_bounded("lm eval " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) + " --quiet"),
                     "lm eval short 1-D", "the token file holds 600 tokens: fewer than one sequence of --seq-len 1024");
  // lm compare R R counted one run twice.
  const std::string run = shell_quoted(f.dir / "p");
  expect_usage_error(run_bounded("lm compare " + run + " " + run), "compare R R", "is the same run as");
  expect_usage_error(run_bounded("lm compare " + run + " " + shell_quoted(f.dir / "." / "p")), "compare R ./R", "is the same run as");
  // lm compare R S --csv R/train.csv replaced the run's own log with the relative curves (exit 0).
  const std::string log = read_file(f.dir / "p" / "train.csv");
  expect_usage_error(run_bounded("lm compare " + run + " " + shell_quoted(f.dir / "pr") + " --csv " +
                                 shell_quoted(f.dir / "p" / "train.csv")),
                     "compare --csv R/train.csv", "which the command reads: write elsewhere");
  EXPECT_EQ(read_file(f.dir / "p" / "train.csv"), log);
  // lm export X --hf X overwrote the checkpoint in place.
  const std::string before = read_file(f.ckpt / "model.safetensors");
  expect_usage_error(run_bounded("lm export " + shell_quoted(f.ckpt) + " --hf " + shell_quoted(f.ckpt)), "export X --hf X",
                     "is the checkpoint's own directory");
  EXPECT_EQ(read_file(f.ckpt / "model.safetensors"), before);
  EXPECT_EQ(run_bounded("lm export " + shell_quoted(f.ckpt) + " --hf " + shell_quoted(f.dir / "hf")).status, 0);  // control
  // lm export into a directory holding another model's tokenizer left it beside the new weights.
  fs::create_directories(f.dir / "stale");
  std::ofstream(f.dir / "stale" / "vocab.json") << "{\"junk\": 1}";
  expect_usage_error(run_bounded("lm export " + shell_quoted(f.ckpt) + " --hf " + shell_quoted(f.dir / "stale")),
                     "export beside a stale tokenizer", "is not this model's");
  EXPECT_FALSE(fs::exists(f.dir / "stale" / "model.safetensors"));
  EXPECT_EQ(run_bounded("lm export " + shell_quoted(f.ckpt) + " --hf " + shell_quoted(f.dir / "hf")).status, 0);  // re-export
}

// analyze: an option its kind does not read is refused in one line, exit 2, as --of is (entropy --layer,
// entropy --k, heads --definition, similarity --of keys --states raw, --heads for hidden states,
// spectrum and cross-layer --query-block were run, exit 0, and ignored). Controls: each option with a
// kind that reads it runs, and `all` with its defaults. The token options, as lm eval's: a given
// --seq-len with a 2-D file (its rows are the sequences: --seq-len 4 gave 8) and a given --sequences
// above what the source holds (5 of 4 gave 4) are refused; controls: the file's own rows, all of them,
// and a 1-D stream cut by --seq-len.
TEST(RobustOptions, AnalyzeRefusesOptionsItsKindDoesNotRead) {
  Fixture f;
  const auto analyze = [&](const std::string& kind, const std::string& options) {
    return run_bounded("analyze " + kind + " " + f.model_args() + " --quiet " + options);
  };
  using Case = std::tuple<std::string, std::string, std::string, std::string, std::string>;  // refused, says, a reader
  for (const auto& [kind, options, says, reader, read] : std::vector<Case>{
           {"entropy", "--layer 2", "--layer does not apply to 'entropy' (only to heads, tokens)", "tokens", "--layer 2"},
           {"entropy", "--k 3", "--k does not apply to 'entropy' (only to spectrum, all)", "spectrum", "--k 3"},
           {"heads", "--definition row", "--definition does not apply to 'heads' (only to entropy, all)", "entropy",
            "--definition row"},
           {"similarity", "--of keys --states raw",
            "--states does not apply to 'similarity --of keys' (only to similarity and all of hidden states)", "similarity",
            "--states raw"},
           {"similarity", "--heads mean",
            "--heads does not apply to 'similarity' (only to similarity and all --of keys|values)", "similarity",
            "--of values --heads mean"},
           {"spectrum", "--query-block 1", "--query-block does not apply to 'spectrum' (only to entropy, first-token, all)",
            "first-token", "--query-block 1"},
           {"cross-layer", "--query-block 1", "--query-block does not apply to 'cross-layer'", "all", "--query-block 1"}}) {
    expect_usage_error(analyze(kind, options), kind + " " + options, says);
    EXPECT_EQ(analyze(reader, read).status, 0) << reader << " " << read;
  }
  EXPECT_EQ(analyze("all", "").status, 0);
  expect_usage_error(analyze("entropy", "--seq-len 4"), "2-D --seq-len",
                     "--seq-len 4: " + f.tokens.string() + " is 2-D, its rows of 8 tokens are the sequences");
  EXPECT_EQ(analyze("entropy", "--seq-len 8").status, 0);  // control: the rows' own length, as lm eval takes it
  expect_usage_error(analyze("entropy", "--sequences 5"), "--sequences 5",
                     "--sequences 5: " + f.tokens.string() + " holds 4 sequences of 8 tokens (0: all of them)");
  for (const char* options : {"", "--sequences 4", "--sequences 0"}) EXPECT_EQ(analyze("entropy", options).status, 0) << options;
  const std::string stream = "analyze entropy " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.stream) + " --quiet --seq-len 8";
  EXPECT_EQ(run_bounded(stream + " --sequences 75").status, 0);  // 600 tokens: 75 pieces of 8
  expect_usage_error(run_bounded(stream + " --sequences 76"), "stream --sequences 76", "holds 75 sequences of 8 tokens");
}

// A qkvlab checkpoint without its model.safetensors is named by its manifest (it was read as a Hugging
// Face directory: 'config.json: no "model_type"'), as one without its config.json is. Control: the copy
// with both runs.
TEST(RobustMessages, ACheckpointMissingItsWeightsIsNamedByItsManifest) {
  Fixture f;
  const auto analyze = [&](const fs::path& ck) {
    return run_bounded("analyze entropy " + shell_quoted(ck) + " --tokens " + shell_quoted(f.tokens) + " --quiet");
  };
  for (const char* file : {"model.safetensors", "config.json"}) {
    const fs::path ck = f.dir / (std::string("without-") + file);
    fs::copy(f.ckpt, ck);
    EXPECT_EQ(analyze(ck).status, 0) << file;
    fs::remove(ck / file);
    expect_usage_error(analyze(ck), std::string("without ") + file,
                       (ck / "manifest.json").string() + ": lists \"" + file + "\", which is not a file in " + ck.string());
  }
}

// ---- budgets, and messages that name what is wrong ------------------------------------------------

// An .npy of |u1 ids of the given shape ("5," or "0, 7"), sparse: the header, then a hole of `elements` bytes.
void write_sparse_u1_npy(const fs::path& path, std::uint64_t elements, const std::string& shape = "") {
  std::string header = "{'descr': '|u1', 'fortran_order': False, 'shape': (" +
                       (shape.empty() ? std::to_string(elements) + "," : shape) + "), }";
  header.append(63 - (10 + header.size()) % 64, ' ') += '\n';
  std::ofstream(path, std::ios::binary) << std::string("\x93NUMPY\x01\x00", 8) << char(header.size() & 0xff)
                                        << char(header.size() >> 8) << header;
  fs::resize_file(path, 10 + header.size() + elements);
}

// Issue 31 item 10: a token file is held as int32 ids; a sparse |u1 .npy declaring 3·10^8 ids
// (1.2 GB as int32) under a 1 GB address space ended in "out of memory", exit 3, after allocating
// (a 1 GiB file took 4.2 GB of RSS for `lm eval --sequences 1`). `lm eval --sequences 1` now reads
// the one sequence it evaluates; reading all of it is refused from the header, naming the file, the
// count, its size and the budget. Control: the fixture's tokens evaluate under the same limit.
TEST(RobustTokens, ATokenFileIsReadAsFarAsNeededWithinTheMemoryBudget) {
  Fixture f;
  write_sparse_u1_npy(f.dir / "sparse.npy", 300000000);
  const auto eval = [&](const fs::path& tokens, const std::string& sequences) {
    return test_support::run_command("ulimit -v 1000000; timeout -s KILL 60 " + shell_quoted(QKVLAB_BINARY) +
                                      " lm eval " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(tokens) +
                                      " --seq-len 8 --threads 1 --quiet --format json" + sequences);
  };
  expect_usage_error(eval(f.dir / "sparse.npy", ""), "sparse |u1, all",
                     (f.dir / "sparse.npy").string() + ": declares 300000000 token ids, 1.2 GB as int32, more than the memory budget of ");
  const CommandResult one = eval(f.dir / "sparse.npy", " --sequences 1");
  EXPECT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find("\"sequences\": 1"), std::string::npos) << one.out;
  const CommandResult control = eval(f.tokens, "");
  EXPECT_EQ(control.status, 0) << control.err;
}

// Issue 31 item 13: raw library messages and wrong exit codes.
// A given path on a read-only file system was exit 3 ("Read-only file system"), where a directory
// without write permission is exit 2: both are the user's path, a usage error (docs/robustness.md).
// The file system is a tmpfs mounted read-only in a private mount namespace of the command's own
// (unshare -rm: a user namespace, which needs no root; skipped, saying so, where the kernel forbids
// them). Control: a full tmpfs (4 KiB) stays exit 3, "No space left on device".
TEST(RobustMessages, AReadOnlyFileSystemIsAUsageErrorAndAFullOneIsNot) {
  const Fixture f;
  if (test_support::run_command("unshare -rm true").status != 0) GTEST_SKIP() << "unshare -rm (user namespaces) is not allowed here";
  const fs::path mnt = f.dir / "mnt";
  fs::create_directories(mnt);
  const auto on_tmpfs = [&](const std::string& options, const std::string& command) {
    return test_support::run_command("unshare -rm sh -c " +
                                     shell_quoted("mount -t tmpfs -o " + options + " tmpfs " + shell_quoted(mnt) + " && " +
                                                  shell_quoted(QKVLAB_BINARY) + " " + command));
  };
  const std::string init = "lm init " + shell_quoted(mnt / "new") + " --family gpt2 --layers 2 --d 16 --heads 2 --vocab 50 --positions 16";
  const std::string exported = "lm export " + shell_quoted(f.ckpt) + " --hf " + shell_quoted(mnt / "hf");
  for (const std::string& command : {init, exported})
    expect_usage_error(on_tmpfs("ro", command), command, "Read-only file system");
  const CommandResult full = on_tmpfs("size=4k", init);
  EXPECT_EQ(full.status, 3) << full.err;
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
}

TEST(RobustMessages, UsageErrorsNameTheValueInOneLineWithExitTwo) {
  Fixture f;
  // kv --seq-len 2^63 - 1 was "not a positive integer": it is too large, and the bound is given.
  expect_usage_error(run_bounded("kv " + shell_quoted(f.ckpt) + " --seq-len 9223372036854775807"), "kv --seq-len 2^63-1",
                     "must be a positive integer, got '9223372036854775807' (too large: at most 2147483647)");
  expect_usage_error(run_bounded("kv " + shell_quoted(f.ckpt) + " --seq-len 99999999999999999999999"), "kv --seq-len 10^23",
                     "(too large: at most 2147483647)");
  // control: the bound itself (a model of flags with RoPE, which has no table of positions)
  EXPECT_EQ(run_bounded("kv --family llama --seq-len 2147483647").status, 0);
  // A checkpoint's cache for more tokens than its positions was priced (exit 0); control: its positions.
  expect_usage_error(run_bounded("kv " + shell_quoted(f.ckpt) + " --seq-len 17"), "kv CKPT --seq-len 17",
                     "is longer than " + f.ckpt.string() + "'s 16 positions");
  EXPECT_EQ(run_bounded("kv " + shell_quoted(f.ckpt) + " --seq-len 16").status, 0);
  // So is a model of flags with a learned table of 16 positions (exit 0 with a total); controls: its 16
  // positions, and RoPE's 16 (no table) at 17.
  const std::string flags = "kv --family gpt2 --layers 2 --d 16 --heads 2 --vocab 50 ";
  expect_usage_error(run_bounded(flags + "--positions 16 --seq-len 17"), "kv --positions 16 --seq-len 17",
                     "--seq-len 17 is longer than the model's learned table of 16 positions (--positions)");
  EXPECT_EQ(run_bounded(flags + "--positions 16 --seq-len 16").status, 0);
  EXPECT_EQ(run_bounded(flags + "--positions rope,16 --seq-len 17").status, 0);
  // A skip ratio as given (it was "0.29999999999999999"), and one that differs from 0.5 in the 7th digit as that.
  for (const std::string ratio : {"0.3", "0.5000001"})
    expect_usage_error(run_bounded("lm convert " + shell_quoted(f.ckpt) + " --out " + shell_quoted(f.dir / "c") + " --skip-ratio " + ratio),
                       "lm convert --skip-ratio " + ratio, "the skip ratio " + ratio + " must lie in (0, 1)");
  // A token id outside the vocabulary, a sequence longer than the positions: exit 3 from analyze and verify.
  std::vector<std::int32_t> ids(16, 1);
  ids[5] = 50;
  corpus::write_tokens_npy(f.dir / "big_id.npy", ids, 2, 8);
  for (const std::string& command : {"analyze entropy " + shell_quoted(f.ckpt), "verify qwe.lemma3.1 --checkpoint " + shell_quoted(f.ckpt)}) {
    expect_usage_error(run_bounded(command + " --tokens " + shell_quoted(f.dir / "big_id.npy") + " --quiet"), command + " id 50",
                       "big_id.npy: token id 50 at position 5 is outside the model's vocabulary of 50");
    expect_usage_error(run_bounded(command + " --tokens " + shell_quoted(f.stream) + " --seq-len 17 --quiet"), command + " 17",
                       "stream.npy: sequences of 17 tokens are longer than the model's 16 positions");
  }
  expect_usage_error(run_bounded("verify qwe.lemma3.1 --checkpoint " + shell_quoted(f.ckpt) + " --seq-len 17 --quiet"),
                     "verify random tokens", "--seq-len 17: sequences of 17 tokens are longer than the model's 16 positions");
  // A symbolic link loop (a checkpoint directory, a token file): exit 3 with the library's wording before.
  fs::create_symlink(f.dir / "loop", f.dir / "loop");
  expect_usage_error(run_bounded("analyze entropy " + shell_quoted(f.dir / "loop") + " --tokens " + shell_quoted(f.tokens)),
                     "checkpoint loop", (f.dir / "loop").string() + ": Too many levels of symbolic links");
  fs::create_symlink(f.dir / "loop.npy", f.dir / "loop.npy");
  expect_usage_error(run_bounded("lm eval " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.dir / "loop.npy")),
                     "tokens loop", "loop.npy");
  // A 2-D file of rows of 2^31 ids (none stored) was "sequences need at least 2 tokens …, got -2147483648".
  write_sparse_u1_npy(f.dir / "wide.npy", 0, "0, 2147483648");
  expect_usage_error(run_bounded("lm eval " + shell_quoted(f.ckpt) + " --tokens " + shell_quoted(f.dir / "wide.npy")), "2^31 columns",
                     "wide.npy: rows of 2147483648 token ids (a sequence holds at most 2147483647)");
  // Binary bytes in a message (here a path) are escaped: the line stays one line of text.
  const CommandResult binary = run_bounded("analyze entropy " + shell_quoted(f.dir / "a\x01\x1b[31m\xff") + " --tokens " +
                                           shell_quoted(f.tokens));
  expect_usage_error(binary, "binary path", "a\\x01\\x1b[31m\\xff");
  for (const char c : binary.err) EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20) << int(c);
  // lm compare on a log row that is not a number said "stod".
  train_two_runs(f);
  std::ofstream(f.dir / "runB" / "train.csv", std::ios::app) << "7,\x01oops,0,0,0\n";
  expect_usage_error(run_bounded("lm compare " + shell_quoted(f.dir / "runA") + " " + shell_quoted(f.dir / "runB")),
                     "compare bad row", "train.csv: line 8 (\"7,\\u0001oops,0,0,0\")'s column 2 is not a finite number: \"\\u0001oops\"");
}

}  // namespace
}  // namespace qkvlab
