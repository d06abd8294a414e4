// Bad input, faults and hostile files (issue 16), through the qkvlab program:
// sampling loops that used to run for ever now end with a usage error (every run
// bounded by `timeout`, so a hang fails the test instead of stalling ctest); real
// options refuse NaN and ±Inf; seeds out of range; --threads capped, and a thread
// start that fails under a memory limit is one line and a non-zero exit; size
// options refused with the memory they imply; absorb on a rescaled pair; a
// resumed checkpoint whose loss history holds NaN; a multi-file output whose
// second target cannot be written; verify's report of a check that throws.
#include "cli/plot_common.hpp"
#include "cli/validators.hpp"
#include "core/absorb.hpp"
#include "core/npy.hpp"
#include "core/rng.hpp"
#include "engine/safetensors.hpp"
#include "results/hdf5_matrix.hpp"
#include "run_command.hpp"
#include "scratch_dir.hpp"
#include "theory/verify.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace qkvlab {
namespace {

namespace fs = std::filesystem;
using namespace cli;
using test_support::CommandResult;
using test_support::ScratchDir;
using test_support::shell_quoted;

using test_support::expect_usage_error;
using test_support::lines;
using test_support::run_bounded;

// ---- loops that sampled until a condition held ------------------------------------

TEST(RobustCli, InfeasibleSamplingConditionsEndWithAUsageError) {
  // Each of these ran for ever: rows of an m x 1 W_1 are all collinear; 16 rows in R^2 cannot be
  // pairwise 0.2 apart (sine); 0.99 apart is infeasible for 6 rows in R^3.
  for (const std::string args : {"absorb fit --d 1", "absorb fit --d 2 --m 16", "absorb fit --min-sine 0.99",
                                 "absorb fit --pair generic --d 2 --m 16"}) {
    const CommandResult r = run_bounded(args + " --quiet");
    ASSERT_NE(r.status, 124) << args << ": still running after 120 s";
    expect_usage_error(r, args, "--min-sine");
    EXPECT_NE(r.err.find("no draw satisfied rows of a"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("in 10000 attempts"), std::string::npos) << r.err;
  }
  // Control: a feasible condition samples and fits (exit 0: the prediction holds, or 1).
  const CommandResult ok =
      run_bounded("absorb fit --d 2 --m 4 --seeds 1 --restarts 1 --steps 10 --batch 8 --quiet --min-sine 0.2");
  EXPECT_TRUE(ok.status == 0 || ok.status == 1) << ok.status << " " << ok.err;
}

// ---- real-valued options, seeds, threads ----------------------------------------------

TEST(RobustCli, RealOptionsRefuseNanAndInfinity) {
  const std::vector<std::pair<std::string, std::string>> options{
      {"absorb fit", "--min-sine"}, {"absorb fit", "--lr"},  {"icl theory", "--sigma"}, {"icl lemmas", "--w0-scale"},
      {"icl lemmas", "--sigma"},    {"icl train", "--lr"},   {"icl train", "--w0-scale"}, {"icl anchor", "--sigma"},
      {"transfer", "--lr"},         {"lm init ckpt", "--mlp-ratio"}, {"lm init ckpt", "--rope-theta"},
      {"lm init ckpt", "--skip-ratio"}, {"lm train --out run", "--lr"}, {"lm train --out run", "--min-lr"},
      {"lm train --out run", "--weight-decay"}, {"lm train --out run", "--clip"}, {"probe ckpt", "--lr-grid"}};
  for (const auto& [command, option] : options)
    for (const char* value : {"nan", "NaN", "inf", "-inf", "1e400"}) {
      const std::string args = command + " " + option + " " + value;
      expect_usage_error(run_bounded(args, 60), args, option);
    }
  // icl lemmas --w0-scale: a negative scale ran the default silently; it is W_0 = cI at c = -1 now, as in
  // every icl subcommand (--w0-scale c means one thing in all of them).
  const auto negative = run_bounded("icl lemmas --w0-scale -1 --prompts 200 --threads 1", 60);
  EXPECT_EQ(negative.status, 0) << negative.err;
  EXPECT_NE(negative.out.find("with c = -1:"), std::string::npos) << negative.out;
}

TEST(RobustCli, RealValidatorsAcceptFiniteNumbersOnly) {
  auto ok = [](const CLI::Validator& v, std::string value) { return v(value).empty(); };
  // Controls: ordinary numbers pass.
  EXPECT_TRUE(ok(positive_real, "1e-3"));
  EXPECT_TRUE(ok(non_negative_real, "0"));
  EXPECT_TRUE(ok(finite_real, "-2.5"));
  EXPECT_TRUE(ok(real_in(0, 1), "1"));
  for (const char* bad : {"nan", "-nan", "inf", "-inf", "infinity", "1e309", "", "1x", " 1"}) {
    EXPECT_FALSE(ok(finite_real, bad)) << bad;
    EXPECT_FALSE(ok(positive_real, bad)) << bad;
    EXPECT_FALSE(ok(real_in(0, 1), bad)) << bad;
  }
  EXPECT_FALSE(ok(positive_real, "0"));
  EXPECT_FALSE(ok(non_negative_real, "-1e-300"));
  EXPECT_FALSE(ok(real_in(0, 1), "1.0000001"));
  // Negative control: CLI11's own range check lets NaN through (why these validators exist).
  EXPECT_TRUE(ok(CLI::Range(0.0, 1.0), "nan"));
  // A range message is short (CLI11's PositiveNumber prints a 309-digit bound).
  std::string huge = "-1";
  const std::string message = positive_real(huge);
  EXPECT_LT(message.size(), 80u) << message;
  // A number beyond a double's range says so (1e-400 read as "not a non-negative number"); control: the
  // smallest subnormal is a number.
  for (std::string beyond : {"1e-400", "1e400", "-1e400"})
    EXPECT_NE(non_negative_real(beyond).find("beyond a double's range"), std::string::npos) << beyond;
  EXPECT_TRUE(ok(non_negative_real, "4.9e-324"));
  std::string negative = "-1";
  EXPECT_EQ(non_negative_real(negative).find("beyond"), std::string::npos);
}

// A progress line's rate and time left count this process's units only: a run resumed at step 600 of
// 1000 printed 601 steps over its own seconds (38748/s, 0s left). Control: without `already` the rate
// is of every step.
TEST(RobustCli, ProgressOfAResumedRunCountsItsOwnSteps) {
  const auto line = [](std::size_t already) {
    Progress show{"lm train", true};
    show.start = std::chrono::steady_clock::now() - std::chrono::seconds(10);
    show.already = already;
    std::ostringstream captured;
    std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
    show("step", 610, 1000);
    std::cerr.rdbuf(old);
    return captured.str();
  };
  const std::string resumed = line(600), whole = line(0);
  EXPECT_NE(resumed.find("610/1000  1/s  6m30s left"), std::string::npos) << resumed;  // 10 steps in 10 s
  EXPECT_NE(whole.find("610/1000  61/s  6s left"), std::string::npos) << whole;
}

// An empty value names nothing: `verify --checkpoint ""` ran the random-weight claims (exit 0),
// `reproduce F --out ""` wrote into the default directory, `lm init ""` failed with "Invalid argument"
// (exit 3). Each is one line naming the option, exit 2. Control: --prompt "" is the empty text.
TEST(RobustCli, AnEmptyValueIsRefusedNamingTheOption) {
  for (const auto& [args, option] : std::vector<std::pair<std::string, std::string>>{
           {"verify --checkpoint ''", "--checkpoint"}, {"reproduce skipv1-table2 --out ''", "--out"},
           {"lm init ''", "CKPT"}, {"lm train --tokens x --out ''", "--out"}, {"analyze entropy x --csv ''", "--csv"}})
    expect_usage_error(run_bounded(args, 60), args, option + ": an empty value (\"\") names nothing");
  const CommandResult prompt = run_bounded("lm tokenize /nonexistent-qkvlab-dir --prompt ''", 60);
  EXPECT_NE(prompt.err.find("no such directory"), std::string::npos) << prompt.err;  // past the option check
}

TEST(RobustCli, SeedsOutOfRangeAreUsageErrors) {
  // --seed -1 and --seed 2^64 both ran as 2^64 - 1.
  for (const char* seed : {"-1", "18446744073709551616", "1e3", "0x10", "+5"}) {
    const std::string args = std::string("verify --seed ") + seed;
    expect_usage_error(run_bounded(args, 60), args, "--seed");
  }
  for (const std::string command : {"absorb fit", "rmt", "lnorm", "transfer", "icl theory", "icl train", "lm init ckpt",
                                    "lm train --out run", "analyze all ckpt", "probe ckpt"})
    expect_usage_error(run_bounded(command + " --seed -1", 60), command, "--seed");
  // The last seed of a run must not wrap either.
  expect_usage_error(run_bounded("absorb fit --seed 18446744073709551615 --seeds 2", 60), "--seeds 2",
                     "would pass 2^64 - 1");
  // Control: the largest seed is accepted.
  std::string max = "18446744073709551615";
  EXPECT_TRUE(seed_value(max).empty());
  const CommandResult ok = run_bounded("icl theory --d 1 --n 2 --prompts 64 --seed 18446744073709551615 --format json");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_NE(ok.out.find("18446744073709551615"), std::string::npos) << ok.out;
}

TEST(RobustCli, ThreadCountsAreCapped) {
  for (const std::string command : {"verify", "transfer", "icl theory", "icl lemmas", "icl train", "lm train --out run",
                                    "lm eval ckpt", "analyze all ckpt", "probe ckpt"}) {
    const std::string args = command + " --threads 1000";
    expect_usage_error(run_bounded(args, 60), args, "--threads: must be an integer from");
    EXPECT_NE(run_bounded(args, 60).err.find("to 256"), std::string::npos);
  }
  // Control: the cap itself is accepted and runs.
  const CommandResult ok = run_bounded("icl theory --threads 256 --d 1 --n 2 --prompts 64 --format json");
  EXPECT_EQ(ok.status, 0) << ok.err;
}

TEST(RobustCli, ThreadsZeroIsTheDefaultEverywhere) {
  for (const std::string command : {"verify", "transfer", "icl theory", "icl lemmas", "icl train", "icl sweep",
                                    "icl anchor", "icl depth", "lm train", "lm eval", "analyze all", "probe",
                                    "reproduce"}) {
    const CommandResult help = run_bounded(command + " --help", 60);
    EXPECT_EQ(help.status, 0) << command << ": " << help.err;
    EXPECT_NE(help.out.find("--threads INT:0..256=0"), std::string::npos) << command << ": " << help.out;
    EXPECT_NE(help.out.find("0: one per hardware thread"), std::string::npos) << command;
  }
  // icl train refused 0 before; it runs with every core now.
  const CommandResult ok = run_bounded(
      "icl anchor --threads 0 --steps 5 --restarts 1 --eval-samples 50 --quiet --format json", 120);
  EXPECT_EQ(ok.status, 0) << ok.err;
}

TEST(RobustCli, OptionsASubcommandDoesNotUseAreRefused) {
  for (const std::string args : {"icl sweep --d 3", "icl sweep --n 8", "icl sweep --sigma 1", "icl depth --restarts 2"}) {
    const CommandResult r = run_bounded(args, 60);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
  }
}

TEST(RobustCli, AThreadThatCannotStartIsOneLineAndANonZeroExit) {
  // 256 threads' stacks (8 MiB each) do not fit 1 GB of address space: thread creation fails.
  const std::string args = "icl theory --threads 256 --d 2 --n 4 --prompts 100000 --format json";
  const CommandResult r = test_support::run_command("ulimit -v 1000000; timeout -s KILL 120 " +
                                                    shell_quoted(QKVLAB_BINARY) + " " + args);
  EXPECT_EQ(r.status, 3) << r.err;  // not 134 (abort) or 137 (a hang killed)
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("qkvlab: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  // Control: the same run with the threads the machine has succeeds.
  const CommandResult ok = run_bounded("icl theory --threads 2 --d 2 --n 4 --prompts 2000 --format json");
  EXPECT_EQ(ok.status, 0) << ok.err;
}

// ---- sizes -------------------------------------------------------------------------------

TEST(RobustCli, SizeOptionsPastTheMemoryBudgetAreRefusedWithTheEstimate) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"lnorm --d 1000000", "--d 1000000 needs about"},
      {"rmt --d-max 1000000", "--d-max 1000000 needs about"},
      {"icl theory --d 4096 --n 1048576", "--d 4096 --n 1048576 --prompts 200000 needs about"},
      {"icl theory --prompts 1000000000000", "--prompts 1000000000000 needs about"},
      {"icl lemmas --d 4096 --prompts 100000000", "needs about"},
      {"transfer --d 4096 --batch 100000000", "--d 4096 --batch 100000000 --steps 2000 needs about"},
      {"verify --d 100000 --seq 100000", "--d 100000 --seq 100000 needs about"},
      // Refused before a task is listed: a billion trials are never expanded.
      {"verify qwe.prop4.1 --trials 1000000000", "--trials 1000000000 needs about"}};
  for (const auto& [args, names] : cases) {
    const CommandResult r = run_bounded(args, 60);
    expect_usage_error(r, args, names);
    EXPECT_NE(r.err.find("of memory, more than the budget of"), std::string::npos) << r.err;
  }
}

TEST(RobustCli, TheMemoryBudgetFollowsTheAddressSpaceLimit) {
  // ulimit -v 1000000 (KiB): 1.024 GB of address space, of which the budget is 3/4.
  const std::string args = "lnorm --d 1000000 --quiet";
  const CommandResult limited =
      test_support::run_command("ulimit -v 1000000; timeout -s KILL 60 " + shell_quoted(QKVLAB_BINARY) + " " + args);
  expect_usage_error(limited, args, "more than the budget of 768 MB");
  // Control: without the limit the budget is another (the machine's memory).
  const CommandResult free = run_bounded(args, 60);
  expect_usage_error(free, args, "more than the budget of");
  EXPECT_EQ(free.err.find("budget of 768 MB"), std::string::npos) << free.err;
}

// ---- messages ----------------------------------------------------------------------------

TEST(RobustCli, UnknownSubcommandsAreNamed) {
  expect_usage_error(run_bounded("frobnicate", 60), "frobnicate", "unknown command 'frobnicate' after 'qkvlab'");
  expect_usage_error(run_bounded("icl frob", 60), "icl frob", "unknown command 'frob' after 'qkvlab icl'");
  // Control: a missing subcommand is still reported as such.
  const CommandResult none = run_bounded("icl", 60);
  EXPECT_EQ(none.status, 2);
  EXPECT_EQ(none.err.find("unknown command"), std::string::npos) << none.err;
}

// An option the command does not have is named before any other parse error: `kv --threads 1 DIR`
// took 1 for DIR and said "Directory does not exist: 1".
TEST(RobustCli, AnOptionTheCommandLacksIsNamedFirst) {
  expect_usage_error(run_bounded("kv --threads 1 .", 60), "kv --threads 1 .",
                     "'--threads' is not an option of 'qkvlab kv'");
  expect_usage_error(run_bounded("lm eval --bogus=3", 60), "lm eval --bogus=3",
                     "'--bogus' is not an option of 'qkvlab lm eval'");
  // Controls: a negative number given as a value is the option's range error, not an unknown option;
  // a known option's error is still its own.
  expect_usage_error(run_bounded("kv --layers -3", 60), "kv --layers -3", "--layers");
  EXPECT_EQ(run_bounded("kv --layers -3", 60).err.find("not an option"), std::string::npos);
  expect_usage_error(run_bounded("kv --threads", 60), "kv --threads", "'--threads' is not an option");
  // Control: '--' ends the options; what follows it is positional, and a known option's error stays its own.
  expect_usage_error(run_bounded("kv --layers abc -- .", 60), "kv --layers abc -- .", "--layers");
  EXPECT_EQ(run_bounded("kv --layers abc -- .", 60).err.find("not an option"), std::string::npos);
}

// The recorded command line reruns as written: a word with a space or a quote is single-quoted
// (`--junit "a b.xml"` was recorded as `--junit a b.xml`); plain words are recorded as they are.
TEST(RobustCli, TheRecordedCommandLineIsShellQuoted) {
  ScratchDir dir;
  const std::string junit = (dir.path() / "a b'c.xml").string();
  const CommandResult r =
      run_bounded("verify qwe.lemma3.1 --d 8 --trials 1 --format json --junit " + shell_quoted(junit), 120);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string recorded = "--junit '" + (dir.path() / "a b'\\\\''c.xml").string() + "'";  // JSON escapes the backslash
  EXPECT_NE(r.out.find(recorded), std::string::npos) << r.out.substr(0, 400);
  EXPECT_NE(r.out.find("verify qwe.lemma3.1 --d 8 --trials 1 --format json"), std::string::npos);  // control: plain
  // A byte that is not UTF-8 is written \xNN by the outputs, which '…' would keep literally: $'…\xNN…'.
  const std::string odd = (dir.path() / "x\xffy.xml").string();
  const CommandResult o = run_bounded("verify qwe.lemma3.1 --d 8 --trials 1 --format json --junit " + shell_quoted(odd), 120);
  ASSERT_EQ(o.status, 0) << o.err;
  const std::string ansi = "--junit $'" + (dir.path() / "x\\\\xffy.xml").string() + "'";  // JSON escapes the backslash
  EXPECT_NE(o.out.find(ansi), std::string::npos) << o.out.substr(0, 400);
}

// ---- absorb on a rescaled pair -------------------------------------------------------------

TEST(RobustCli, AbsorbSaysNoForARescaledNoPairAndWritesNothing) {
  ScratchDir dir;
  Rng rng(5, "robust_cli absorb");
  const int d = 4, m = 8;
  MatD W_1 = rng.gaussian(m, d, 0.5), W_2 = rng.gaussian(d, m, 1 / std::sqrt(double(m)));
  W_2 = representable_w2<double>(W_1, W_2, {0, 1, 2, 3});
  auto run_absorb = [&](const MatD& a, const MatD& b, const std::string& tag) {
    write_npy(dir / (tag + "1.npy"), a);
    write_npy(dir / (tag + "2.npy"), b);
    fs::create_directory(dir / tag);
    return run_bounded("absorb " + shell_quoted(dir / (tag + "1.npy")) + " " + shell_quoted(dir / (tag + "2.npy")) +
                       " --out-dir " + shell_quoted(dir / tag));
  };
  // Control: the representable pair, and it rescaled, are absorbed.
  MatD S_1 = W_1, S_2 = W_2;
  S_1.row(6) *= 1e6;
  S_2.col(6) /= 1e6;
  for (const auto& [a, b, tag] : {std::tuple{W_1, W_2, std::string("yes")}, std::tuple{S_1, S_2, std::string("yes_s")}}) {
    const CommandResult r = run_absorb(a, b, tag);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.rfind("yes", 0), 0u) << r.out;
    EXPECT_TRUE(fs::exists(dir / tag / "W1_absorbed.npy") && fs::exists(dir / tag / "W2_absorbed.npy"));
  }
  // Perturbed by 1e-9: no; the same rescaled by 1e6 was a "yes" under the old tolerance.
  W_2(0, 0) += 1e-9;
  S_2(0, 0) += 1e-9;
  for (const auto& [a, b, tag] : {std::tuple{W_1, W_2, std::string("no")}, std::tuple{S_1, S_2, std::string("no_s")}}) {
    const CommandResult r = run_absorb(a, b, tag);
    EXPECT_EQ(r.status, 0) << r.err;  // "no" is an answer (exit 1 is "undecided")
    EXPECT_EQ(r.out.rfind("no\n", 0), 0u) << r.out;
    EXPECT_TRUE(fs::is_empty(dir / tag)) << tag;
  }
}

// A representable pair (m = 6, d = 3, J = {0, 2, 4}) written to w1 and w2, the same in each test.
std::pair<MatD, MatD> write_absorbable_pair(const fs::path& w1, const fs::path& w2) {
  Rng rng(6, "robust_cli absorb pair");
  const MatD W_1 = rng.gaussian(6, 3, 0.5), W_2 = representable_w2<double>(W_1, rng.gaussian(3, 6, 0.4), {0, 2, 4});
  write_npy(w1, W_1);
  write_npy(w2, W_2);
  return {W_1, W_2};
}

TEST(RobustCli, AbsorbWritesBothWeightsOrNeither) {
  ScratchDir dir;
  write_absorbable_pair(dir / "W1.npy", dir / "W2.npy");
  fs::create_directory(dir / "out");
  fs::create_directory(dir / "out" / "W2_absorbed.npy");  // the second target cannot be replaced
  const std::string args = "absorb " + shell_quoted(dir / "W1.npy") + " " + shell_quoted(dir / "W2.npy") +
                           " --out-dir " + shell_quoted(dir / "out");
  const CommandResult r = run_bounded(args);
  EXPECT_EQ(r.status, 2) << r.err;  // a usage error since issue 31: refused when staged, before any rename
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("W2_absorbed.npy: it is a directory"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "out" / "W1_absorbed.npy"));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir / "out")) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"W2_absorbed.npy"});  // no temporary left behind
  // Control: with the directory gone, both are written.
  fs::remove(dir / "out" / "W2_absorbed.npy");
  EXPECT_EQ(run_bounded(args).status, 0);
  EXPECT_TRUE(fs::is_regular_file(dir / "out" / "W1_absorbed.npy") && fs::is_regular_file(dir / "out" / "W2_absorbed.npy"));
}

// An input is never an output: W1 given as out/W1_absorbed.npy, or an HDF5 file absorbed.h5 in
// --out-dir holding W1, W2 and other datasets, was replaced (exit 0). Refused when the "yes" would be
// written, the inputs left as they were. Control: the same inputs under other names are absorbed.
TEST(RobustCli, AbsorbNeverWritesOverItsInputs) {
  ScratchDir dir;
  const auto [W_1, W_2] = write_absorbable_pair(dir / "W1_absorbed.npy", dir / "W2.npy");
  qkvlab::results::write_hdf5_matrices((dir / "absorbed.h5").string(), {{"W1", W_1}, {"W2", W_2}, {"keep", MatD::Identity(3, 3)}});
  const auto bytes = [&](const char* name) {
    std::ifstream in(dir / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string npy = bytes("W1_absorbed.npy"), h5 = bytes("absorbed.h5");
  for (const std::string& inputs : {shell_quoted(dir / "W1_absorbed.npy") + " " + shell_quoted(dir / "W2.npy"),
                                    shell_quoted(dir.path().string() + "/absorbed.h5:W1") + " " +
                                        shell_quoted(dir.path().string() + "/absorbed.h5:W2")}) {
    const CommandResult r = run_bounded("absorb " + inputs + " --out-dir " + shell_quoted(dir.path()));
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("is the file W1 reads"), std::string::npos) << r.err;
  }
  EXPECT_EQ(bytes("W1_absorbed.npy"), npy);
  EXPECT_EQ(bytes("absorbed.h5"), h5);
  // Only a "yes" writes: a pair that is not absorbable is decided under those names (control).
  write_npy(dir / "W2.npy", Rng(7, "robust_cli generic W2").gaussian(3, 6, 0.4));
  const CommandResult no = run_bounded("absorb " + shell_quoted(dir / "W1_absorbed.npy") + " " + shell_quoted(dir / "W2.npy") +
                                       " --out-dir " + shell_quoted(dir.path()));
  EXPECT_EQ(no.status, 0) << no.err;
  EXPECT_EQ(no.out.rfind("no\n", 0), 0u) << no.out;
  write_npy(dir / "W2.npy", W_2);
  // The same for absorb fit's --out and icl theory's --out against a dataset of the file they read.
  const std::string h5_w1 = shell_quoted(dir.path().string() + "/absorbed.h5:W1");
  for (const std::string& args : {"absorb fit --w1 " + h5_w1 + " --w2 " + shell_quoted(dir.path().string() + "/absorbed.h5:W2") +
                                      " --seeds 1 --restarts 1 --steps 10 --out " + shell_quoted(dir / "absorbed.h5"),
                                  "icl theory --d 3 --n 4 --prompts 64 --w0 " + shell_quoted(dir.path().string() + "/absorbed.h5:keep") +
                                      " --out " + shell_quoted(dir / "absorbed.h5")}) {
    const CommandResult refused = run_bounded(args);
    EXPECT_EQ(refused.status, 2) << args << "\n" << refused.err;
    EXPECT_NE(refused.err.find("reads"), std::string::npos) << refused.err;
  }
  EXPECT_EQ(bytes("absorbed.h5"), h5);
  fs::create_directory(dir / "out");
  const CommandResult r = run_bounded("absorb " + shell_quoted(dir / "W1_absorbed.npy") + " " + shell_quoted(dir / "W2.npy") +
                                      " --out-dir " + shell_quoted(dir / "out"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(dir / "out" / "W1_absorbed.npy"));
}

// transfer's outputs never replace its training state (--out in --checkpoint's directory replaced
// the checkpoint, exit 0), and --figure STEM's numbers, STEM.csv, are an output like --csv's: checked
// against --out before training (it ran to the end first). Control: distinct files are written.
TEST(RobustCli, TransferOutputsStayOutOfTheCheckpointAndApart) {
  ScratchDir dir;
  fs::create_directory(dir / "ck");
  const std::string base = "transfer --d 2 --steps 20 --batch 16 --quiet --format json";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {" --checkpoint " + shell_quoted(dir / "ck") + " --out " + shell_quoted(dir / "ck" / "state.safetensors"),
            "which the command reads"},
           {" --out " + shell_quoted(dir / "fig.csv") + " --figure " + shell_quoted(dir / "fig"), "is also --out's file"}}) {
    const CommandResult r = run_bounded(base + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;  // refused before training
  }
  EXPECT_TRUE(fs::is_empty(dir / "ck"));
  const CommandResult r = run_bounded(base + " --checkpoint " + shell_quoted(dir / "ck") + " --out " + shell_quoted(dir / "t.h5"));
  EXPECT_NE(r.status, 2) << r.err;
  EXPECT_TRUE(fs::exists(dir / "t.h5"));
}

// ---- a resumed checkpoint holding NaN -----------------------------------------------------

TEST(RobustCli, AResumedCheckpointWithANonFiniteLossIsRefused) {
  ScratchDir dir;
  const std::string args = "transfer --d 2 --steps 500 --batch 16 --format json --checkpoint " + shell_quoted(dir.path());
  const CommandResult first = run_bounded(args);
  ASSERT_TRUE(first.status == 0 || first.status == 1) << first.err;
  const fs::path file = dir / "transfer_d2.safetensors";
  ASSERT_TRUE(fs::exists(file));
  // Control: the intact checkpoint resumes at its last step; the JSON holds only numbers.
  const CommandResult resumed = run_bounded(args);
  EXPECT_EQ(resumed.status, first.status) << resumed.err;
  EXPECT_NE(resumed.out.find("\"resumed_from\": 500"), std::string::npos) << resumed.out;
  engine::SafeTensors ck = engine::load_safetensors(file);
  for (const auto& [step, value] : {std::pair<int, double>{500, NAN}, {11, INFINITY}}) {
    engine::SafeTensors bad = ck;
    std::memcpy(bad.tensors.at("loss").data.data() + 8 * (step - 1), &value, 8);
    engine::save_safetensors(file, bad);
    const CommandResult r = run_bounded(args);
    expect_usage_error(r, "resume", "--checkpoint: " + file.string() + ": the loss history holds a non-finite value at step " +
                                        std::to_string(step));
    for (const char* word : {"nan", "inf"}) EXPECT_EQ(r.out.find(word), std::string::npos) << r.out;
  }
}

// ---- verify: a check that throws -------------------------------------------------------------

TEST(RobustVerify, ACheckThatThrowsIsAnErrorNotANumericalFailure) {
  theory::Claim claim;
  claim.id = "test.throws";
  claim.kind = theory::Kind::identity;
  claim.run = [](const theory::SweepPoint&, Precision, Rng&) -> theory::Outcome {
    throw std::runtime_error("the basis has no inverse here");
  };
  theory::Claim non_finite = claim;
  non_finite.id = "test.nan";
  non_finite.run = [](const theory::SweepPoint&, Precision, Rng&) {
    theory::Outcome o;
    o.rel_err = NAN;
    return o;
  };
  theory::VerifyOptions o;
  o.precisions = {Precision::f64};
  const theory::SweepPoint config{};
  const results::Report thrown = theory::verify_configuration(claim, config, o);
  ASSERT_EQ(thrown.checks.size(), 1u);
  EXPECT_EQ(thrown.checks[0].status, "error");
  EXPECT_FALSE(thrown.checks[0].pass);
  EXPECT_EQ(thrown.checks[0].note, "error: the basis has no inverse here");
  // Control: a non-finite measurement is still a numerical failure, not an error.
  const results::Report nan = theory::verify_configuration(non_finite, config, o);
  ASSERT_EQ(nan.checks.size(), 1u);
  EXPECT_EQ(nan.checks[0].status, "non_finite");
}

// A statistical check whose exact part failed (skipv1.lemma2's identity) fails whatever its
// statistic; control: the same statistic with the identity held passes.
TEST(RobustVerify, AStatisticalCheckWhoseIdentityFailedFails) {
  auto claim_with = [](bool identity_failed) {
    theory::Claim claim;
    claim.id = "test.identity";
    claim.kind = theory::Kind::statistical;
    claim.budget = 4;
    claim.run = [identity_failed](const theory::SweepPoint&, Precision, Rng&) {
      theory::Outcome o;
      o.statistic = theory::Statistic{0.1, 0.0, 1.0};
      o.rel_err = 0.1;
      o.identity_failed = identity_failed;
      return o;
    };
    return claim;
  };
  theory::VerifyOptions o;
  o.precisions = {Precision::f64};
  const results::Report failed = theory::verify_configuration(claim_with(true), theory::SweepPoint{}, o);
  ASSERT_EQ(failed.checks.size(), 1u);
  EXPECT_EQ(failed.checks[0].status, "identity_failed");
  EXPECT_FALSE(failed.checks[0].pass);
  const results::Report held = theory::verify_configuration(claim_with(false), theory::SweepPoint{}, o);
  ASSERT_EQ(held.checks.size(), 1u);
  EXPECT_EQ(held.checks[0].status, "ok");
  EXPECT_TRUE(held.checks[0].pass);
}

// A report lost on the way to standard output (a full disk: /dev/full) was exit 0: now exit 3 with
// one line; control: the same command into a file exits 0 with the report there.
TEST(RobustCli, AStandardOutputThatCannotBeWrittenIsExitThree) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this machine";
  const std::string verify = "verify qwe.lemma3.1 --d 4 --heads 1 --layers 1 --seq 2 --quiet --format json";
  for (const std::string args : {verify, std::string("params --format json"), std::string("kv"), std::string("params --help"),
                                 std::string("--version")}) {
    const CommandResult r = run_bounded(args + " > /dev/full", 60);
    EXPECT_EQ(r.status, 3) << args << ": " << r.err;
    EXPECT_NE(r.err.find("cannot write standard output"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
  }
  ScratchDir dir;
  const CommandResult control = run_bounded(verify + " > " + shell_quoted(dir.path() / "report.json"), 60);
  EXPECT_EQ(control.status, 0) << control.err;
  EXPECT_GT(fs::file_size(dir.path() / "report.json"), 100u);
}

// verify's options that apply in one mode only were ignored in the others (a tightened --tolerance
// without --against, --tokens naming a missing file without --checkpoint, --trials with --against),
// and a value given twice ran every check twice under one JUnit name: each is refused before the work.
TEST(RobustVerify, OptionsOfAnotherModeAndRepeatedValuesAreRefused) {
  const std::string sweep = "verify qwe.lemma3.1 --d 4 --heads 1 --layers 1 --seq 2 --quiet";
  for (const auto& [extra, names] : std::vector<std::pair<std::string, std::string>>{
           {" --tolerance 1e-30", "--tolerance applies only with --checkpoint DIR --against REF"},
           {" --compare gauge", "--compare applies only with --checkpoint DIR --against REF"},
           {" --tokens /nonexistent.npy", "--tokens applies only with --checkpoint DIR"},
           {" --seq-len 999", "--seq-len applies only with --checkpoint DIR"},
           {" --corpus brown", "--corpus applies only with --checkpoint DIR"},
           {" --precision double,double", "--precision: double is given twice"},
           {" --precision double,f64", "--precision: double is given twice"},
           {" --d 4,4", "--d: 4 is given twice"}})
    expect_usage_error(run_bounded(sweep + extra, 60), extra, names);
  EXPECT_EQ(run_bounded(sweep + " --precision double,float", 60).status, 0);  // control
  ScratchDir dir;
  const std::string model = shell_quoted(dir.path() / "m");
  ASSERT_EQ(run_bounded("lm init " + model + " --layers 1 --d 8 --heads 2 --vocab 16 --positions 8").status, 0);
  const std::string checkpoint = "verify --checkpoint " + model + " --quiet --seq-len 4";
  expect_usage_error(run_bounded(checkpoint + " --tolerance 1e-3", 60), "--checkpoint --tolerance",
                     "--tolerance applies only with --against REF");
  const std::string against = checkpoint + " --against " + model;
  for (const char* extra : {" --trials 2", " --precision float", " --verbose"})
    expect_usage_error(run_bounded(against + extra, 60), extra, "not to --against's comparison");
  EXPECT_EQ(run_bounded(against + " --tolerance 1e-3", 60).status, 0);  // control: the same model
}

// A report file that staging refuses (a directory, a symbolic link) was refused only after the
// checks had run (14.6 s on a small model); now before them, with nothing on stdout. Control: a new name.
TEST(RobustVerify, AReportPathOfTheWrongKindIsRefusedBeforeTheChecks) {
  ScratchDir dir;
  fs::create_directory(dir.path() / "adir");
  fs::create_symlink(dir.path() / "target.xml", dir.path() / "link.xml");
  const std::string sweep = "verify qwe.lemma3.1 --d 4 --heads 1 --layers 1 --seq 2 --quiet";
  expect_usage_error(run_bounded(sweep + " --out " + shell_quoted(dir.path() / "adir"), 60), "--out DIR",
                     "cannot write --out file");
  expect_usage_error(run_bounded(sweep + " --junit " + shell_quoted(dir.path() / "link.xml"), 60), "--junit LINK",
                     "it is a symbolic link");
  EXPECT_FALSE(fs::exists(dir.path() / "target.xml"));
  EXPECT_EQ(run_bounded(sweep + " --junit " + shell_quoted(dir.path() / "new.xml"), 60).status, 0);
  EXPECT_TRUE(fs::exists(dir.path() / "new.xml"));
}

// resformer.eq5 combines L >= 2 layers: --layers 1,3 made its L = 1 configurations "error" checks and
// the run exit 1; now they are not its configurations (L = 3 runs and passes), and --layers 1 alone
// skips the claim, saying why (exit 1: no check ran). Control: a claim without layers still runs.
TEST(RobustVerify, AClaimRunsOnlyTheDepthsItsStatementHas) {
  const std::string eq5 = "verify resformer.eq5 --d 8 --seq 4 --quiet --format json";
  const CommandResult both = run_bounded(eq5 + " --layers 1,3", 60);
  EXPECT_EQ(both.status, 0) << both.err;
  EXPECT_EQ(both.out.find("L=1"), std::string::npos);
  EXPECT_NE(both.out.find("L=3"), std::string::npos);
  const CommandResult one = run_bounded(eq5 + " --layers 1", 60);
  EXPECT_EQ(one.status, 1) << one.err;
  EXPECT_NE(one.out.find("\"skipped\""), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("its statement needs L >= 2 layers"), std::string::npos) << one.out;
  EXPECT_EQ(run_bounded("verify resformer.eq4 --d 8 --seq 4 --quiet --layers 1", 60).status, 0);
}

// A size at which a claim's control cannot fail is not one of the claim's configurations (review r16):
// qwe.obs3.1 at d = 2 (its common null vector leaves rank-1 products, Q K^T symmetric: swapping them
// changed nothing, 8/16 controls passed, exit 1 on a true claim; at d = 3 the change is one random
// number, 0.2% of draws), qwe.thm4.3 at L = 1 (no layer to
// unshare: 0/0 controls and exit 0). Both are now skipped with the reason (exit 1: no check ran).
// Controls: d = 8 and L = 2 of the same sweeps run, every control failing, exit 0.
TEST(RobustVerify, ASizeAtWhichAControlCannotFailSkipsTheClaim) {
  const std::string obs = "verify qwe.obs3.1 --heads 1 --seq 2 --quiet --format json --d ";
  const CommandResult two = run_bounded(obs + "2", 60);
  EXPECT_EQ(two.status, 1) << two.err;
  EXPECT_NE(two.out.find("\"skipped\""), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("it needs d >= 4: the common null vector"), std::string::npos) << two.out;
  EXPECT_EQ(two.out.find("\"failed_as_expected\": false"), std::string::npos) << two.out;
  const CommandResult wider = run_bounded(obs + "2,8", 60);
  EXPECT_EQ(wider.status, 0) << wider.out;
  EXPECT_EQ(wider.out.find("d=2 "), std::string::npos);
  EXPECT_NE(wider.out.find("d=8 "), std::string::npos);

  const std::string thm = "verify qwe.thm4.3 --d 8 --heads 2 --seq 4 --quiet --format json --layers ";
  const CommandResult one = run_bounded(thm + "1", 60);
  EXPECT_EQ(one.status, 1) << one.out;
  EXPECT_NE(one.out.find("it needs L >= 2 layers: its control unshares"), std::string::npos) << one.out;
  const CommandResult deeper = run_bounded(thm + "1,2", 60);
  EXPECT_EQ(deeper.status, 0) << deeper.out;
  EXPECT_EQ(deeper.out.find("L=1"), std::string::npos);
  EXPECT_NE(deeper.out.find("unshared layers with one T"), std::string::npos) << deeper.out;
}

// --precision's message names the option like every other option's (it said "unknown precision 'quad'");
// the help footer gives exit 3 as the README does, and --heads/--layers say a claim without them ignores
// them (as verify does). Control: a known precision runs.
TEST(RobustVerify, PrecisionErrorsNameTheOptionAndTheHelpGivesEveryExitStatus) {
  expect_usage_error(run_bounded("verify qwe.prop4.1 --precision quad", 60), "--precision quad",
                     "--precision: unknown precision 'quad'");
  EXPECT_EQ(run_bounded("verify qwe.prop4.1 --d 4 --seq 2 --precision double --quiet", 60).status, 0);
  const CommandResult help = run_bounded("verify --help", 60);
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("3 on any other error, a report file that cannot be written included"), std::string::npos)
      << help.out;
  EXPECT_NE(help.out.find("a claim without heads, e.g. qwe.prop4.1, qwe.lemma8.2, ignores the list"), std::string::npos)
      << help.out;
}

}  // namespace
}  // namespace qkvlab
