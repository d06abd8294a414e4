// The scripts of scripts/ refuse bad arguments the way the program does: one line on stderr naming the
// script and the option, exit status 2, before any work (scripts/options.sh for the bash scripts), and
// never spin or hang (every run under `timeout`, so a hang fails the test instead of stalling ctest).
// The bash scripts that train run against a stub qkvlab that logs its calls, so "before any work"
// is checked by the log's absence. Controls: valid values are still accepted and the work is done.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using namespace qkvlab::test_support;

namespace {

const fs::path kSource(QKVLAB_SOURCE_DIR);

std::string read_file(const fs::path& p) {
  std::ostringstream text;
  text << std::ifstream(p).rdbuf();
  return text.str();
}

// bash SCRIPT ARGS under a 20 s limit (status 124 or 137 when it ran past it).
CommandResult script(const std::string& name, const std::string& args) {
  return run_command("timeout -s KILL 20 bash " + shell_quoted(kSource / "scripts" / name) + " " + args + " </dev/null");
}

// A refusal: exit 2, nothing on stdout, stderr exactly `line`.
void expect_refused(const CommandResult& r, const std::string& line, const std::string& what) {
  EXPECT_EQ(r.status, 2) << what << ": " << r.err;
  EXPECT_EQ(r.err, line + "\n") << what;
  EXPECT_EQ(r.out, "") << what;
}

// A qkvlab stand-in for the training scripts, logging each call to LOG: two recipes of two seeds,
// trainings that write run.json, comparisons and evaluations that print JSON.
fs::path write_stub(const fs::path& dir) {
  const fs::path stub = dir / "qkvlab";
  std::ofstream(stub) << "#!/usr/bin/env bash\n"
                      << "echo \"$*\" >> " << shell_quoted(dir / "log") << "\n"
                      << "out=; for ((i = 1; i <= $#; ++i)); do [[ ${!i} == --out ]] && { j=$((i + 1)); out=${!j}; }; done\n"
                      << "case \"$1 $2\" in\n"
                      << "  'reproduce --list-recipes') printf 'gpt2|tiny|a|1 2|--variant vanilla\\ngpt2|tiny|b|1 2|--variant vanilla\\n' ;;\n"
                      << "  'lm train') mkdir -p \"$out\" && sleep 0.2 && echo '{\"final_validation_loss\": 3.0}' > \"$out/run.json\" ;;\n"
                      << "  'lm convert') mkdir -p \"$out\" ;;\n"
                      << "  'lm eval') echo '{\"loss\": 5.25}' ;;\n"
                      << "  'lm compare') echo '{}' ;;\n"
                      << "esac\n";
  fs::permissions(stub, fs::perms::owner_all);
  return stub;
}

}  // namespace

// --jobs below 1 made lm_comparisons.sh and lm_uptraining.sh spin forever (`wait -n` with no job
// running returns at once); 'abc' was "unbound variable", exit 1; a 20-digit value wrapped in bash's
// arithmetic. Each is now refused before the stub is called. Control: --jobs 2 trains every run.
TEST(ScriptOptions, JobsOutsideOneTo256IsRefusedNotSpun) {
  ScratchDir dir;
  const fs::path stub = write_stub(dir.path()), out = dir / "out", vanilla = dir / "vanilla";
  fs::create_directories(vanilla / "vanilla-s1" / "checkpoint");
  const std::string comparisons = "--qkvlab " + shell_quoted(stub) + " --out " + shell_quoted(out) + " --jobs ";
  const std::string uptraining = "--qkvlab " + shell_quoted(stub) + " --vanilla " + shell_quoted(vanilla) + " --out " +
                                 shell_quoted(out) + " --jobs ";
  for (const std::string jobs : {"0", "-1", "abc", "99999999999999999999", "257", "1.5"}) {
    expect_refused(script("lm_comparisons.sh", comparisons + shell_quoted(jobs)),
                   "lm_comparisons.sh: --jobs must be an integer from 1 to 256, got '" + jobs + "'", "comparisons " + jobs);
    expect_refused(script("lm_uptraining.sh", uptraining + shell_quoted(jobs)),
                   "lm_uptraining.sh: --jobs must be an integer from 1 to 256, got '" + jobs + "'", "uptraining " + jobs);
  }
  expect_refused(script("lm_comparisons.sh", comparisons + "2 --threads 257"),
                 "lm_comparisons.sh: --threads must be an integer from 0 to 256, got '257'", "threads");
  expect_refused(script("lm_uptraining.sh", uptraining + "2 --device gpu"),
                 "lm_uptraining.sh: --device must be one of cpu cuda, got 'gpu'", "device");
  expect_refused(script("sanitize.sh", "--build-dir " + shell_quoted(dir / "sanitize") + " --jobs 0"),
                 "sanitize.sh: --jobs must be an integer from 1 to 256, got '0'", "sanitize");
  EXPECT_FALSE(fs::exists(dir / "log"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(dir / "sanitize.configure.log"));

  const CommandResult r = script("lm_comparisons.sh", comparisons + "2");
  EXPECT_EQ(r.status, 0) << r.err;
  for (const std::string run : {"a-s1", "a-s2", "b-s1", "b-s2"}) EXPECT_TRUE(fs::exists(out / "gpt2" / run / "run.json")) << run;
  const CommandResult up = script("lm_uptraining.sh", uptraining + "3 --threads 1");
  EXPECT_EQ(up.status, 0) << up.err;
  EXPECT_TRUE(fs::exists(out / "top-vo-240-s1" / "run.json"));
}

// An option given last, without its value, was "line N: $2: unbound variable", exit 1; it is now
// "SCRIPT: OPTION needs a value", exit 2 (an empty value too). Control: an unknown option keeps its message.
TEST(ScriptOptions, AMissingValueIsOneLine) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> options = {
      {"lm_comparisons.sh", {"--qkvlab", "--device", "--out", "--only", "--data", "--jobs", "--threads"}},
      {"lm_uptraining.sh", {"--qkvlab", "--device", "--data", "--out", "--jobs", "--threads", "--vanilla"}},
      {"lm_ablations.sh", {"--paper", "--qkvlab", "--runs", "--json"}},
      {"lm_eliminate_example.sh", {"--qkvlab", "--data", "--out"}},
      {"sanitize.sh", {"--build-dir", "--jobs"}}};
  for (const auto& [name, flags] : options) {
    for (const std::string& flag : flags) {
      expect_refused(script(name, flag), name + ": " + flag + " needs a value", name + " " + flag);
      expect_refused(script(name, flag + " ''"), name + ": " + flag + " needs a value", name + " " + flag + " ''");
    }
    expect_refused(script(name, "--bogus"), name + ": unknown argument --bogus", name + " --bogus");
  }
}

// lm_comparisons.sh --only '(' matched nothing ([[ =~ ]] returned 2, swallowed) and exited 0; it is
// refused before the recipes are listed. Control: a valid regex selects its runs.
TEST(ScriptOptions, OnlyMustBeARegularExpression) {
  ScratchDir dir;
  const fs::path stub = write_stub(dir.path()), out = dir / "out";
  const std::string args = "--qkvlab " + shell_quoted(stub) + " --out " + shell_quoted(out) + " --only ";
  expect_refused(script("lm_comparisons.sh", args + "'('"),
                 "lm_comparisons.sh: --only '(' is not a regular expression (POSIX extended, as bash's =~ reads it)", "(");
  EXPECT_FALSE(fs::exists(dir / "log"));
  const CommandResult r = script("lm_comparisons.sh", args + "'^gpt2/(a|b)-s1$'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::exists(out / "gpt2" / "b-s1" / "run.json"));
  EXPECT_FALSE(fs::exists(out / "gpt2" / "a-s2"));
}

// The fuzz scripts took RUNS unchecked (a target name there became -runs=NAME after the build) and
// any TARGET; both are refused before anything is compiled (a run needs clang's libFuzzer: not here).
// Their summary line's arithmetic is awk's: bc, which neither setup.sh nor a fresh Debian installs,
// ended them with exit 127 after the first target (read here; the run is in the commit message).
TEST(ScriptOptions, FuzzScriptsCheckRunsAndTargetsAndNeedNoBc) {
  for (const auto& [name, other] : {std::pair{std::string("fuzz_readers.sh"), std::string("ckpt_hf_config_fuzzer")},
                                    std::pair{std::string("fuzz_checkpoints.sh"), std::string("reader_npy_fuzzer")}}) {
    const std::string prefix = name == "fuzz_readers.sh" ? "reader" : "ckpt";
    expect_refused(script(name, "reader_npy_fuzzer"),
                   name + ": RUNS must be an integer from 1 to 999999999, got 'reader_npy_fuzzer'", name);
    expect_refused(script(name, "0"), name + ": RUNS must be an integer from 1 to 999999999, got '0'", name);
    expect_refused(script(name, "10 " + other),
                   name + ": TARGET '" + other + "' is not one of fuzz/" + prefix + "_*_fuzzer.cpp (named without .cpp)", name);
    const std::string text = read_file(kSource / "scripts" / name);
    EXPECT_EQ(text.find("| bc"), std::string::npos) << name;
    EXPECT_NE(text.find("awk -v"), std::string::npos) << name;
  }
}

// accounting_table.py took --help for the binary's path (FileNotFoundError traceback); ledger.py on
// empty input was a JSONDecodeError traceback. Each is a usage line now (exit 2; --help exit 0).
// Control: a verify report of one claim gives its table.
TEST(ScriptOptions, PythonScriptsRefuseBadArgumentsInOneLine) {
  ScratchDir dir;
  const std::string accounting = "python3 " + shell_quoted(kSource / "scripts" / "accounting_table.py") + " ";
  const std::string ledger = "python3 " + shell_quoted(kSource / "scripts" / "ledger.py") + " ";
  CommandResult r = run_command(accounting + "--help");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("scripts/accounting_table.py [path/to/qkvlab]"), std::string::npos);
  expect_refused(run_command(accounting + shell_quoted(dir / "none")),
                 "accounting_table.py: " + (dir / "none").string() +
                     " is not an executable (usage: scripts/accounting_table.py [path/to/qkvlab])", "accounting");
  expect_refused(run_command(accounting + "a b"), "accounting_table.py: a b: usage: scripts/accounting_table.py [path/to/qkvlab]",
                 "accounting a b");
  const std::string usage = "usage: build/qkvlab verify --format json --quiet | python3 scripts/ledger.py";
  r = run_command(ledger + "</dev/null");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("ledger.py: standard input is not JSON", 0), 0u) << r.err;
  expect_refused(run_command("echo '[]' | " + ledger),
                 "ledger.py: standard input is not a report of qkvlab verify --format json (needs seed, checks, "
                 "controls, ladders, summary)", "ledger []");
  expect_refused(run_command(ledger + "x </dev/null"), "ledger.py: x: " + usage, "ledger x");
  std::ofstream(dir / "report.json")
      << R"({"seed": 1, "checks": [{"id": "c", "pass": true, "normalized_err": 1.5, "precision": "double", "rel_err": 1e-16}],
            "controls": [{"id": "c", "failed_as_expected": true, "rel_err": 0.5}], "ladders": [],
            "summary": {"passed": 1, "checks": 1, "controls_failed_as_expected": 1, "controls": 1, "ok": true}})";
  r = run_command(ledger + "< " + shell_quoted(dir / "report.json"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| c | 1/1 | - / 1.5 / - / - | - | 1/1 | 0.5 |"), std::string::npos) << r.out;
}

// uptraining_table.py on one seed (a reproduce cache holds one) was a ZeroDivisionError traceback; its
// spreads are now "n/a" and no Δ is bold (no standard error to judge by). Controls: the committed
// three seeds still give numbers for every spread; an OUT that is not a directory is a usage line.
TEST(ScriptOptions, UptrainingTableOfOneSeedSaysNa) {
  ScratchDir dir;
  const fs::path committed = kSource / "outputs" / "lm" / "uptraining", one = dir / "one";
  fs::create_directories(one);
  std::ifstream initial(committed / "initial.csv");
  std::ofstream seed1(one / "initial.csv");
  for (std::string line; std::getline(initial, line);)
    if (line.rfind("seed,", 0) == 0 || line.rfind("1,", 0) == 0) seed1 << line << "\n";
  seed1.close();
  for (const auto& run : fs::directory_iterator(committed)) {
    const std::string name = run.path().filename().string();
    if (run.is_directory() && name.size() > 3 && name.substr(name.size() - 3) == "-s1")
      fs::copy(run.path(), one / name, fs::copy_options::recursive);
  }
  const std::string table = "python3 " + shell_quoted(kSource / "scripts" / "uptraining_table.py") + " ";
  CommandResult r = run_command(table + shell_quoted(one));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("| mean-v (released-avg) | 5.2670 ± n/a | — | 5.2072 ± n/a |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| released-topk | 5.2529 ± n/a | −0.0141 ± n/a |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("**−"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("**+"), std::string::npos) << r.out;
  r = run_command(table + shell_quoted(committed));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find("n/a"), std::string::npos) << r.out;
  expect_refused(run_command(table + shell_quoted(dir / "none")),
                 "uptraining_table.py: " + (dir / "none").string() +
                     " is not a directory (usage: python3 scripts/uptraining_table.py [OUT])", "none");
}
