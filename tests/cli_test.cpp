// The qkvlab program, run as a user runs it: its exit status, stdout and
// stderr, and the files it writes. JSON and JUnit are parsed by Python's
// standard library, independently of the C++ writers.
#include "core/absorb.hpp"
#include "core/npy.hpp"
#include "theory/claim.hpp"
#include "tests/json_digits.hpp"
#include "tests/run_command.hpp"
#include "tests/scratch_dir.hpp"

#include <gtest/gtest.h>


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

using RunResult = qkvlab::test_support::CommandResult;
using qkvlab::test_support::run_qkvlab;
std::string quoted(const fs::path& p) { return qkvlab::test_support::shell_quoted(p); }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::size_t count_lines(const std::string& text) { return std::size_t(std::count(text.begin(), text.end(), '\n')); }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The integer after "name=" in a line of "name=value" pairs.
long field(const std::string& line, const std::string& name) {
  const auto at = line.find(name + "=");
  if (at == std::string::npos) throw std::invalid_argument("no field " + name + " in: " + line);
  return std::stol(line.substr(at + name.size() + 1));
}

std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

// Checks the JSON contract of `qkvlab verify --format json` and prints one
// line of counts; on a violation prints what is wrong and exits 1.
constexpr const char* kContractScript = R"py(
import json, sys
doc = json.load(open(sys.argv[1]))

def fail(message):
    print("CONTRACT VIOLATION: " + message)
    sys.exit(1)

def number(x): return isinstance(x, (int, float)) and not isinstance(x, bool)
def maybe_number(x): return x is None or number(x)
def text(x): return isinstance(x, str)
def flag(x): return isinstance(x, bool)
def count(x): return isinstance(x, int) and not isinstance(x, bool) and x >= 0
def array(x): return isinstance(x, list)
def obj(x): return isinstance(x, dict)

def need(record, where, fields):
    if not obj(record): fail(where + " is not an object")
    for name, ok in fields.items():
        if name not in record: fail(where + " lacks " + name)
        if not ok(record[name]): fail(where + "." + name + " has the wrong type: " + repr(record[name]))

need(doc, "document", {"seed": count, "checks": array, "controls": array, "ladders": array, "summary": obj})
checks, controls, ladders, summary = doc["checks"], doc["controls"], doc["ladders"], doc["summary"]
for i, c in enumerate(checks):
    need(c, "checks[%d]" % i, {"id": text, "config": text, "precision": text, "rel_err": maybe_number,
                               "kappa": maybe_number, "normalized_err": maybe_number, "budget": number, "pass": flag})
for i, c in enumerate(controls):
    need(c, "controls[%d]" % i, {"id": text, "name": text, "config": text, "precision": text,
                                 "rel_err": maybe_number, "failed_as_expected": flag})
for i, l in enumerate(ladders):
    need(l, "ladders[%d]" % i, {"id": text, "config": text, "slope": maybe_number})
need(summary, "summary", {"checks": count, "passed": count, "controls": count,
                          "controls_failed_as_expected": count, "ok": flag})
if summary["checks"] != len(checks): fail("summary.checks != number of checks")
if summary["passed"] != sum(c["pass"] for c in checks): fail("summary.passed != passing checks")
if summary["controls"] != len(controls): fail("summary.controls != number of controls")
if summary["controls_failed_as_expected"] != sum(c["failed_as_expected"] for c in controls):
    fail("summary.controls_failed_as_expected != controls that failed")
if summary["ok"] != (len(checks) > 0 and summary["passed"] == len(checks)
                     and summary["controls_failed_as_expected"] == len(controls)):
    fail("summary.ok inconsistent with the counts")
controlled = set((c["id"], c["config"], c["precision"]) for c in controls)
uncontrolled = sum((c["id"], c["config"], c["precision"]) not in controlled for c in checks)
with_statistic = sum(all(f in c for f in ("statistic", "expected", "std_err")) for c in checks)
ids = ",".join(sorted(set(c["id"] for c in checks)))
print("seed=%d checks=%d controls=%d ladders=%d uncontrolled=%d with_statistic=%d ok=%s ids=%s"
      % (doc["seed"], len(checks), len(controls), len(ladders), uncontrolled, with_statistic, summary["ok"], ids))
)py";

// Prints "id precision statistic expected std_err" for each statistical record.
constexpr const char* kStatisticScript = R"py(
import json, sys
for c in json.load(open(sys.argv[1]))["checks"]:
    if "statistic" in c:
        print(c["id"], c["precision"], repr(float(c["statistic"])), repr(float(c["expected"])), repr(float(c["std_err"])))
)py";

// Parses a JUnit file and prints its testcase and failure counts and suite names.
constexpr const char* kJunitScript = R"py(
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
cases = list(root.iter("testcase"))
failures = sum(1 for c in cases if c.find("failure") is not None)
suites = ",".join(sorted(s.get("name") for s in root.iter("testsuite")))
print("root=%s testcases=%d failures=%d suites=%s" % (root.tag, len(cases), failures, suites))
)py";

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directory(outputs_); }

  RunResult qkvlab(const std::string& args) const { return run_qkvlab(args); }

  RunResult run_python(const char* script, const fs::path& input) const {
    const fs::path script_file = dir_ / "script.py";
    write_file(script_file, script);
    return qkvlab::test_support::run_command(python() + " " + quoted(script_file) + " " + quoted(input));
  }

  // Saves text under the work directory (not under outputs_) and returns its path.
  fs::path save(const std::string& name, const std::string& text) const {
    write_file(dir_ / name, text);
    return dir_ / name;
  }

  // The one line the contract script prints for a JSON document.
  std::string contract_line(const std::string& json) const {
    const RunResult r = run_python(kContractScript, save("report.json", json));
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    return r.out;
  }

  const qkvlab::test_support::ScratchDir scratch_;
  const fs::path dir_ = scratch_.path(), outputs_ = dir_ / "outputs";
};

constexpr const char* kProp4 = "verify --format json qwe.prop4 --d 8 --heads 2 --seq 4 --layers 1";

// --- --list ---------------------------------------------------------------------------

TEST_F(Cli, ListPrintsEveryClaimId) {
  const RunResult r = qkvlab("verify --list");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = lines_of(r.out);
  const auto& claims = qkvlab::theory::all_claims();
  ASSERT_EQ(lines.size(), claims.size()) << r.out;
  for (std::size_t i = 0; i < claims.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(claims[i].id + " ", 0), 0u) << lines[i];
    EXPECT_NE(lines[i].find(claims[i].statement), std::string::npos) << lines[i];
  }
}

// --- JSON -----------------------------------------------------------------------------

TEST_F(Cli, JsonOutputHasTheContractFields) {
  const RunResult r = qkvlab(kProp4);
  ASSERT_EQ(r.status, 0) << r.err;
  // qwe.prop4 selects prop4.1 and prop4.2: 2 claims × 2 masks × 4 precisions.
  EXPECT_EQ(contract_line(r.out),
            "seed=1 checks=16 controls=24 ladders=4 uncontrolled=0 with_statistic=0 ok=True "
            "ids=qwe.prop4.1,qwe.prop4.2\n");
}

TEST_F(Cli, ContractCheckerRejectsAMissingField) {
  // Control for the test above: the checker notices one field gone.
  const RunResult r = qkvlab(kProp4);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string broken = r.out;
  const auto at = broken.find("\"kappa\": ");
  ASSERT_NE(at, std::string::npos);
  broken.erase(at, broken.find(", ", at) + 2 - at);
  const RunResult check = run_python(kContractScript, save("broken.json", broken));
  EXPECT_EQ(check.status, 1);
  EXPECT_EQ(check.out, "CONTRACT VIOLATION: checks[0] lacks kappa\n");
}

// scripts/ledger.py (docs/claims.md's table) has a row for every claim in the report: one with
// controls but no checks, and one `verify --checkpoint` skipped, with its reason. Control: the
// report's own claim keeps its row as before.
TEST_F(Cli, TheLedgerHasARowForEveryClaimOfTheReport) {
  const RunResult r = qkvlab(kProp4);
  ASSERT_EQ(r.status, 0) << r.err;
  std::string report = r.out;
  report.insert(report.find("\"controls\": [") + 14,
                R"({"id": "qwe.only.controls", "name": "x", "config": "d=4", "rel_err": 0.5, "failed_as_expected": false}, )");
  report.insert(report.rfind('}'), R"(, "skipped": [{"id": "qwe.thm4.1", "reason": "needs blocks without norms"}])");
  const RunResult ledger = qkvlab::test_support::run_command(
      python() + " " + quoted(fs::path(QKVLAB_SOURCE_DIR) / "scripts" / "ledger.py") + " < " + quoted(save("r.json", report)));
  ASSERT_EQ(ledger.status, 0) << ledger.err;
  EXPECT_NE(ledger.out.find("| qwe.only.controls | 0/0 | - / - / - / - | - | 0/1 | 0.5 |"), std::string::npos) << ledger.out;
  EXPECT_NE(ledger.out.find("| qwe.thm4.1 | skipped: needs blocks without norms |"), std::string::npos) << ledger.out;
  EXPECT_NE(ledger.out.find("| qwe.prop4.1 | 8/8 |"), std::string::npos) << ledger.out;
}

TEST_F(Cli, StatisticalRecordCarriesStatisticExpectedAndStdErr) {
  const RunResult r = qkvlab("verify --format json qwe.scale8.2 --d 64 --heads 4");
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string counts = contract_line(r.out);
  EXPECT_EQ(field(counts, "checks"), 1) << counts;
  EXPECT_EQ(field(counts, "with_statistic"), 1) << counts;
  const RunResult stats = run_python(kStatisticScript, save("scale.json", r.out));
  ASSERT_EQ(stats.status, 0) << stats.err;
  std::istringstream in(stats.out);
  std::string id, precision;
  double statistic = 0, expected = 0, std_err = 0;
  ASSERT_TRUE(in >> id >> precision >> statistic >> expected >> std_err) << stats.out;
  EXPECT_EQ(id, "qwe.scale8.2");
  EXPECT_EQ(precision, "double");
  EXPECT_DOUBLE_EQ(expected, 6.25);  // 1 / (0.02 · sqrt(64))
  EXPECT_GT(std_err, 0.0);
  EXPECT_LE(std::abs(statistic - expected), 4 * std_err);
}

TEST_F(Cli, SameCommandTwiceGivesByteIdenticalJson) {
  const std::string args = "verify --format json qwe.lemma3.1 qwe.thm4 --d 8 --heads 2 --seq 4 --layers 2";
  const RunResult first = qkvlab(args), second = qkvlab(args);
  ASSERT_EQ(first.status, 0) << first.err;
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_GT(first.out.size(), 1000u);
  EXPECT_EQ(first.out, second.out);
  EXPECT_EQ(qkvlab::test_support::short_json_numbers(first.out), std::vector<std::string>{});  // 17 digits
}

TEST_F(Cli, ThreadCountDoesNotChangeTheJson) {
  const std::string args = "verify --format json qwe.lemma3.1 qwe.thm4 --d 8 --heads 2 --seq 4 --layers 2";
  const RunResult one = qkvlab(args + " --threads 1"), two = qkvlab(args + " --threads 2");
  ASSERT_EQ(one.status, 0) << one.err;
  ASSERT_EQ(two.status, 0) << two.err;
  // The documents may differ only in "command_line", which echoes the arguments.
  const auto a = lines_of(one.out), b = lines_of(two.out);
  ASSERT_EQ(a.size(), b.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    ++differing;
    EXPECT_EQ(a[i].rfind("  \"command_line\": ", 0), 0u) << a[i];
  }
  EXPECT_EQ(differing, 1u);
}

// --- table ---------------------------------------------------------------------------------

TEST_F(Cli, DefaultTableHasOneLinePerClaimAndTheSummaryLine) {
  // n = 8: the controls run on the check's own positions (below 8 a line per claim says they did not,
  // VerifyRecords.AControlOnFreshPositionsSaysSoInJsonTableAndJunit).
  const RunResult r = qkvlab("verify qwe.prop4 --d 8 --seq 8");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;  // header, qwe.prop4.1, qwe.prop4.2, blank, summary
  EXPECT_EQ(lines[0].rfind("id ", 0), 0u) << lines[0];
  for (const char* precision : {" float ", " double ", " long_double ", " mp50 "})
    EXPECT_NE(lines[0].find(precision), std::string::npos) << lines[0];
  EXPECT_EQ(lines[1].rfind("qwe.prop4.1 ", 0), 0u) << lines[1];
  EXPECT_NE(lines[1].find(" 8/8 "), std::string::npos) << lines[1];  // 2 masks × 4 precisions
  EXPECT_TRUE(lines[1].ends_with(" PASS")) << lines[1];
  EXPECT_EQ(lines[2].rfind("qwe.prop4.2 ", 0), 0u) << lines[2];
  EXPECT_TRUE(lines[2].ends_with(" PASS")) << lines[2];
  EXPECT_EQ(lines.back().rfind("qkvlab verify: ", 0), 0u) << lines.back();
  EXPECT_TRUE(lines.back().ends_with(" OK")) << lines.back();
}

TEST_F(Cli, VerboseTableHasPassRowsAndTheSummaryLine) {
  const RunResult r = qkvlab("verify qwe.prop4.1 --d 8 --seq 4 --verbose");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines.front().rfind("id ", 0), 0u) << lines.front();
  std::size_t pass_rows = 0;
  for (const auto& line : lines)
    if (line.rfind("qwe.prop4.1 ", 0) == 0 && line.ends_with(" PASS")) ++pass_rows;
  EXPECT_EQ(pass_rows, 8u) << r.out;  // 2 masks × 4 precisions
  EXPECT_EQ(lines.back(), "qkvlab verify: 8/8 checks passed, 8/8 controls failed as expected \u2014 OK");
}

// --- report files -----------------------------------------------------------------------------

TEST_F(Cli, WritesHdf5AndJunitFiles) {
  const fs::path h5 = outputs_ / "report.h5", xml = outputs_ / "report.xml";
  const RunResult r = qkvlab(std::string(kProp4) + " --out " + quoted(h5) + " --junit " + quoted(xml));
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string counts = contract_line(r.out);

  ASSERT_TRUE(fs::exists(h5));
  EXPECT_EQ(read_file(h5).substr(0, 8), std::string("\x89HDF\r\n\x1a\n", 8));

  ASSERT_TRUE(fs::exists(xml));
  const RunResult junit = run_python(kJunitScript, xml);
  ASSERT_EQ(junit.status, 0) << junit.out << junit.err;
  const long cases = field(counts, "checks") + field(counts, "controls");
  EXPECT_EQ(junit.out, "root=testsuites testcases=" + std::to_string(cases) +
                           " failures=0 suites=qwe.prop4.1,qwe.prop4.2\n");

  // Written by rename: no temporary file is left beside them.
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(outputs_)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"report.h5", "report.xml"}));
}

// --- bad input ---------------------------------------------------------------------------------

struct BadInput {
  const char* name;
  const char* args;                    // {out} and {junit} stand for report paths
  std::vector<std::string> mentions;   // what the message must name
};

class CliBadInput : public Cli, public ::testing::WithParamInterface<BadInput> {};

std::string substitute(std::string text, const std::string& key, const std::string& value) {
  for (std::size_t at; (at = text.find(key)) != std::string::npos;) text.replace(at, key.size(), value);
  return text;
}

TEST_P(CliBadInput, ExitsWithStatus2AndOneLineAndWritesNothing) {
  const BadInput& c = GetParam();
  std::string args = substitute(c.args, "{out}", quoted(outputs_ / "report.h5"));
  args = substitute(args, "{junit}", quoted(outputs_ / "report.xml"));
  args = substitute(args, "{missing}", quoted(outputs_ / "missing" / "report.h5"));
  const RunResult r = qkvlab("verify " + args);
  EXPECT_EQ(r.status, 2) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_EQ(r.err.rfind("qkvlab: error: ", 0), 0u) << r.err;
  for (const auto& m : c.mentions) EXPECT_NE(r.err.find(m), std::string::npos) << "'" << m << "' in: " << r.err;
  EXPECT_TRUE(fs::is_empty(outputs_)) << "a file was written";
}

const BadInput kBadInputs[] = {
    {"unknown_id", "qwe.nope --d 8 --seq 4 --out {out} --junit {junit}", {"qwe.nope"}},
    {"heads_do_not_divide_d", "qwe.prop4.2 --d 10 --heads 4 --seq 4 --out {out} --junit {junit}",
     {"d=10", "heads=4", "divisible"}},
    {"zero_d", "qwe.prop4.1 --d 0 --seq 4 --out {out} --junit {junit}", {"--d", "at least 2, got '0'"}},
    {"d_of_one", "qwe.prop4.1 --d 8,1 --seq 4 --out {out} --junit {junit}", {"--d", "at least 2, got '1'"}},
    {"zero_seq", "qwe.prop4.1 --d 8 --seq 0 --out {out} --junit {junit}", {"--seq", "positive integer, got '0'"}},
    {"zero_trials", "qwe.prop4.1 --d 8 --seq 4 --trials 0 --out {out} --junit {junit}", {"--trials", "positive integer, got '0'"}},
    {"unknown_precision", "qwe.prop4.1 --d 8 --seq 4 --precision quad --out {out} --junit {junit}",
     {"precision", "quad"}},
    {"unknown_format", "qwe.prop4.1 --d 8 --seq 4 --format yaml --out {out} --junit {junit}", {"--format", "yaml"}},
    {"out_in_missing_directory", "qwe.prop4.1 --d 8 --seq 4 --out {missing} --junit {junit}",
     {"--out", "does not exist"}},
};

INSTANTIATE_TEST_SUITE_P(Cases, CliBadInput, ::testing::ValuesIn(kBadInputs),
                         [](const auto& info) { return std::string(info.param.name); });

// --- absorb (qwe.thm8.4) -------------------------------------------------------------------

// W1 (m×d) and a W2 (d×m) that is representable through J when asked.
std::pair<qkvlab::MatD, qkvlab::MatD> absorb_pair(int d, int m, const std::vector<int>& J, bool representable) {
  qkvlab::Rng rng(3, "cli absorb");
  const qkvlab::MatD W_1 = rng.gaussian(m, d, 1 / std::sqrt(double(d)));
  const qkvlab::MatD W_2 = rng.gaussian(d, m, 1 / std::sqrt(double(m)));
  return {W_1, representable ? qkvlab::representable_w2<double>(W_1, W_2, J) : W_2};
}

TEST_F(Cli, AbsorbYesPrintsJAndWritesTheAbsorbedWeights) {
  const std::vector<int> J{1, 2, 5, 6};
  const auto [W_1, W_2] = absorb_pair(4, 8, J, true);
  const fs::path w1 = save("W1.npy", qkvlab::npy_bytes(W_1, qkvlab::NpyDtype::f8, true));  // Fortran order
  const fs::path w2 = save("W2.npy", qkvlab::npy_bytes(W_2));
  const RunResult r = qkvlab("absorb " + quoted(w1) + " " + quoted(w2) + " --out-dir " + quoted(outputs_));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(lines_of(r.out).at(0), "yes") << r.out;
  EXPECT_NE(r.out.find("J = {1, 2, 5, 6}"), std::string::npos) << r.out;
  const auto a1 = qkvlab::read_npy(outputs_ / "W1_absorbed.npy"), a2 = qkvlab::read_npy(outputs_ / "W2_absorbed.npy");
  qkvlab::MatD expected = W_1;
  for (int i : J) expected.row(i) = -W_1.row(i);
  EXPECT_TRUE(a1.data == expected);  // sign flips are exact
  EXPECT_TRUE(a2.data == W_2);
  // The absorbed network is the skip network.
  qkvlab::Rng rng(4, "x");
  const qkvlab::MatD X = rng.gaussian(4, 16);
  EXPECT_LE(qkvlab::rel_err<double>(qkvlab::skip_relu_mlp<double>(W_1, W_2, X),
                                    qkvlab::relu_mlp<double>(a1.data, a2.data, X)),
            1e-12);
  const RunResult j = qkvlab("absorb --format json " + quoted(w1) + " " + quoted(w2) + " --out-dir " + quoted(dir_));
  ASSERT_EQ(j.status, 0) << j.err;
  const RunResult parsed = run_python(
      "import json, sys\nd = json.load(open(sys.argv[1]))\nprint(d['verdict'], d['J'], len(d['written']))\n",
      save("absorb.json", j.out));
  EXPECT_EQ(parsed.out, "yes [1, 2, 5, 6] 2\n") << j.out << parsed.err;
}

TEST_F(Cli, AbsorbNoPrintsTheReasonAndWritesNothing) {
  const auto [W_1, W_2] = absorb_pair(4, 8, {}, false);
  const fs::path w1 = save("W1.npy", qkvlab::npy_bytes(W_1, qkvlab::NpyDtype::f4));
  const fs::path w2 = save("W2.npy", qkvlab::npy_bytes(W_2, qkvlab::NpyDtype::f4));
  const RunResult r = qkvlab("absorb " + quoted(w1) + " " + quoted(w2) + " --out-dir " + quoted(outputs_));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(lines_of(r.out).at(0), "no") << r.out;
  EXPECT_NE(r.out.find("reason: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("relaxation residual: "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::is_empty(outputs_));
}

TEST_F(Cli, AbsorbUndecidedBeyondTheExactLimitExitsOne) {
  const auto [W_1, W_2] = absorb_pair(2, 22, {}, false);  // m > d²: dependent, relaxation feasible
  const fs::path w1 = save("W1.npy", qkvlab::npy_bytes(W_1)), w2 = save("W2.npy", qkvlab::npy_bytes(W_2));
  const RunResult r = qkvlab("absorb " + quoted(w1) + " " + quoted(w2) + " --out-dir " + quoted(outputs_));
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_EQ(lines_of(r.out).at(0), "undecided") << r.out;
  EXPECT_TRUE(fs::is_empty(outputs_));
}

TEST_F(Cli, AbsorbMalformedInputIsAUsageErrorAndWritesNothing) {
  const std::vector<int> J{0, 1, 2, 3};
  const auto [W_1, W_2] = absorb_pair(4, 8, J, true);
  const std::string good1 = qkvlab::npy_bytes(W_1), good2 = qkvlab::npy_bytes(W_2);
  struct Case {
    const char* what;
    std::string w1, w2, mention;
  };
  const Case cases[] = {
      {"truncated W1", good1.substr(0, good1.size() - 8), good2, "W1.npy: "},
      {"bad magic W2", good1, "PK" + good2.substr(2), "W2.npy: "},
      {"W2 not d x m", good1, qkvlab::npy_bytes(W_1), "W2.npy: "},
      {"int dtype", good1, good2.substr(0, 10) + std::string(good2.substr(10)).replace(good2.find("<f8") - 10, 3, "<i8"), "W2.npy: "},
  };
  for (const Case& c : cases) {
    const fs::path w1 = save("W1.npy", c.w1), w2 = save("W2.npy", c.w2);
    const RunResult r = qkvlab("absorb " + quoted(w1) + " " + quoted(w2) + " --out-dir " + quoted(outputs_));
    EXPECT_EQ(r.status, 2) << c.what << ": " << r.out << r.err;
    EXPECT_EQ(r.out, "") << c.what;
    EXPECT_EQ(count_lines(r.err), 1u) << c.what << ": " << r.err;
    EXPECT_NE(r.err.find(c.mention), std::string::npos) << c.what << ": " << r.err;
    EXPECT_TRUE(fs::is_empty(outputs_)) << c.what << ": a file was written";
  }
  const RunResult missing = qkvlab("absorb " + quoted(dir_ / "nope.npy") + " " + quoted(dir_ / "W2.npy"));
  EXPECT_EQ(missing.status, 2) << missing.err;
  EXPECT_NE(missing.err.find("nope.npy"), std::string::npos) << missing.err;
}

// --- rmt and lnorm: numbers and figures --------------------------------------------------

bool have_gnuplot() { return std::system("command -v gnuplot >/dev/null 2>&1") == 0; }

// A CSV with a header and at least one row, every row as wide as the header and
// every field a number (NaN and inf allowed); returns the number of data rows.
std::size_t check_csv(const fs::path& p) {
  const auto lines = lines_of(read_file(p));
  EXPECT_GE(lines.size(), 2u) << p;
  if (lines.empty()) return 0;
  const auto width = std::count(lines[0].begin(), lines[0].end(), ',');
  for (std::size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(std::count(lines[i].begin(), lines[i].end(), ','), width) << p << " line " << i + 1;
    std::istringstream fields(lines[i]);
    for (std::string f; std::getline(fields, f, ',');) {
      std::size_t used = 0;
      EXPECT_NO_THROW(std::stod(f, &used)) << p << ": " << f;
      EXPECT_EQ(used, f.size()) << p << ": " << f;
    }
  }
  return lines.size() - 1;
}

void expect_hdf5(const fs::path& p) {
  EXPECT_EQ(read_file(p).substr(0, 8), std::string("\x89HDF\r\n\x1a\n", 8)) << p;
}

TEST_F(Cli, RmtWritesNumbersAndFigures) {
  const RunResult r = qkvlab("rmt --quiet --d-max 128 --seed 3 --out-dir " + quoted(outputs_));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  expect_hdf5(outputs_ / "rmt.h5");
  EXPECT_EQ(check_csv(outputs_ / "edge_excess.csv"), 2u);  // d = 64, 128
  EXPECT_EQ(check_csv(outputs_ / "m2_spread.csv"), 2u);
  EXPECT_GT(check_csv(outputs_ / "defect_scale.csv"), 10u);
  EXPECT_GT(check_csv(outputs_ / "mp_histogram.csv"), 10u);
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed: figures not checked";
  for (const char* name : {"defect_scale", "mp_histogram", "edge_excess", "m2_spread"})
    for (const char* suffix : {".svg", ".png"}) {
      const fs::path figure = outputs_ / (std::string(name) + suffix);
      ASSERT_TRUE(fs::exists(figure)) << figure;
      EXPECT_GT(fs::file_size(figure), 1000u) << figure;
    }
  for (const auto& entry : fs::directory_iterator(outputs_))
    EXPECT_EQ(entry.path().string().find(".qkvlab-tmp."), std::string::npos) << entry.path();
}

TEST_F(Cli, LnormWritesNumbersAndFigureAndIsNearLinearAtSmallScale) {
  const RunResult r = qkvlab("lnorm --quiet --d 8 --out-dir " + quoted(outputs_));
  ASSERT_EQ(r.status, 0) << r.err;
  expect_hdf5(outputs_ / "lnorm.h5");
  EXPECT_GT(check_csv(outputs_ / "lnorm.csv"), 10u);
  const auto lines = lines_of(read_file(outputs_ / "lnorm.csv"));
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("r,s,rel_err_held_out,", 0), 0u) << lines[0];
  auto held_out = [](const std::string& line) {
    std::istringstream in(line);
    std::string f;
    for (int i = 0; i < 3; ++i) std::getline(in, f, ',');
    return std::stod(f);
  };
  EXPECT_LT(held_out(lines[1]), 1e-3) << "small inputs: f is near linear";
  EXPECT_GT(held_out(lines.back()), 1e-2) << "large inputs: f is not linear";
  if (!have_gnuplot()) GTEST_SKIP() << "gnuplot not installed: figures not checked";
  EXPECT_GT(fs::file_size(outputs_ / "lnorm.svg"), 1000u);
  EXPECT_GT(fs::file_size(outputs_ / "lnorm.png"), 1000u);
}

// Every file rmt and lnorm write in --out-dir is checked before the work: a directory or a symbolic
// link at one of the fixed names is refused at once (rmt's default run takes seconds: under a 3 s
// bound it is not reached), the directory left as it was. A file given as --out-dir is called one.
// Control: without the obstacle the same directory is written.
TEST_F(Cli, RmtAndLnormCheckTheirFilesBeforeTheWork) {
  fs::create_directory(outputs_ / "m2_spread.png");
  const RunResult rmt = qkvlab::test_support::run_bounded("rmt --quiet --d-max 4096 --out-dir " + quoted(outputs_), 3);
  qkvlab::test_support::expect_usage_error(rmt, "rmt", "m2_spread.png");
  fs::create_directory(dir_ / "l");
  fs::create_symlink(dir_ / "nowhere", dir_ / "l" / "lnorm.csv");
  const RunResult lnorm = qkvlab::test_support::run_bounded("lnorm --quiet --d 2048 --out-dir " + quoted(dir_ / "l"), 3);
  qkvlab::test_support::expect_usage_error(lnorm, "lnorm", "lnorm.csv");
  EXPECT_EQ(std::distance(fs::directory_iterator(outputs_), fs::directory_iterator{}), 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_ / "l"), fs::directory_iterator{}), 1);
  write_file(dir_ / "file", "x");
  for (const char* command : {"rmt", "lnorm"})
    qkvlab::test_support::expect_usage_error(qkvlab(std::string(command) + " --out-dir " + quoted(dir_ / "file")), command,
                                             "--out-dir: " + (dir_ / "file").string() + " is not a directory");
  fs::remove(dir_ / "l" / "lnorm.csv");
  EXPECT_EQ(qkvlab("lnorm --quiet --d 4 --out-dir " + quoted(dir_ / "l")).status, 0);
  EXPECT_TRUE(fs::exists(dir_ / "l" / "lnorm.csv"));
}

// Without gnuplot a figure set appears whole or not at all: the numbers are written, and the figures
// an earlier run left under the same names are removed with them (review r23: they stayed beside the
// new numbers), with one warning saying so. rmt (four panels), lnorm and transfer --figure, run with
// a PATH that has no gnuplot. Control: with a gnuplot on the PATH (a stand-in that writes a fixed
// figure) the same runs replace the old figures.
TEST_F(Cli, WithoutGnuplotNoEarlierFigureOutlivesTheNewNumbers) {
  const fs::path bin = dir_ / "bin";
  fs::create_directory(bin);
  write_file(bin / "gnuplot", "#!/bin/sh\n/bin/cat > /dev/null\necho new-figure\n");
  fs::permissions(bin / "gnuplot", fs::perms::owner_all);
  const std::vector<std::string> rmt_stems = {"defect_scale", "mp_histogram", "edge_excess", "m2_spread"};
  const struct {
    std::string args;
    std::vector<fs::path> stems;
    int status;
  } runs[] = {{"lnorm --quiet --d 4 --out-dir " + quoted(outputs_), {outputs_ / "lnorm"}, 0},
              {"rmt --quiet --d-max 64 --out-dir " + quoted(outputs_), {}, 0},
              {"transfer --quiet --d 3 --steps 5 --batch 4 --figure " + quoted(outputs_ / "f"), {outputs_ / "f"}, -1}};
  for (bool gnuplot : {false, true}) {
    for (auto run : runs) {
      if (run.stems.empty())
        for (const std::string& stem : rmt_stems) run.stems.push_back(outputs_ / stem);
      for (const fs::path& stem : run.stems)
        for (const char* extension : {".svg", ".png"}) write_file(stem.string() + extension, "old-figure\n");
      const std::string path = gnuplot ? bin.string() : (dir_ / "nowhere").string();
      const RunResult r = qkvlab::test_support::run_command("env PATH=" + quoted(fs::path(path)) + " " +
                                                            qkvlab::test_support::shell_quoted(QKVLAB_BINARY) + " " + run.args);
      SCOPED_TRACE(run.args + (gnuplot ? " (with gnuplot)" : " (without gnuplot)"));
      if (run.status >= 0) EXPECT_EQ(r.status, run.status) << r.err;
      else EXPECT_TRUE(r.status == 0 || r.status == 1) << r.err;  // transfer's verdict
      EXPECT_EQ(qkvlab::test_support::lines(r.err), gnuplot ? 0 : 1) << r.err;
      if (!gnuplot) {
        EXPECT_NE(r.err.find("gnuplot not found; wrote the numbers"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("the older figures there are removed"), std::string::npos) << r.err;
      }
      for (const fs::path& stem : run.stems)
        for (const char* extension : {".svg", ".png"}) {
          const fs::path figure = stem.string() + extension;
          if (gnuplot) EXPECT_EQ(read_file(figure), "new-figure\n") << figure;
          else EXPECT_FALSE(fs::exists(figure)) << figure;
        }
    }
    EXPECT_TRUE(fs::exists(outputs_ / "lnorm.csv") && fs::exists(outputs_ / "m2_spread.csv") && fs::exists(outputs_ / "f.csv"));
  }
  for (const auto& entry : fs::directory_iterator(outputs_))
    EXPECT_EQ(entry.path().string().find(".qkvlab-tmp."), std::string::npos) << entry.path();
}

// rmt's and lnorm's default --out-dir is created; where it cannot be (a file named outputs in the
// working directory) that is a usage error naming --out-dir, one line, as a bad --out-dir is (review
// r23: a raw "outputs/lnorm: Not a directory"). Control: without the file the default is created.
TEST_F(Cli, ADefaultOutDirThatCannotBeCreatedNamesTheOption) {
  write_file(dir_ / "outputs-file", "x");
  fs::create_directory(dir_ / "w");
  fs::copy_file(dir_ / "outputs-file", dir_ / "w" / "outputs");
  for (const char* command : {"lnorm --quiet --d 4", "rmt --quiet --d-max 64"}) {
    const RunResult r = qkvlab::test_support::run_command("cd " + quoted(dir_ / "w") + " && " +
                                                          qkvlab::test_support::shell_quoted(QKVLAB_BINARY) + " " + command);
    qkvlab::test_support::expect_usage_error(r, command, "--out-dir: cannot create the default directory outputs/");
  }
  fs::remove(dir_ / "w" / "outputs");
  const RunResult ok = qkvlab::test_support::run_command("cd " + quoted(dir_ / "w") + " && " +
                                                         qkvlab::test_support::shell_quoted(QKVLAB_BINARY) + " lnorm --quiet --d 4");
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_TRUE(fs::exists(dir_ / "w" / "outputs" / "lnorm" / "lnorm.csv"));
}

// absorb fit's help lists every exit status it has: 3 when a fit diverges (review r23: only 0, 1, 2
// were listed). Control: a fit at lr 1e300 does exit 3, with one line and no output file.
TEST_F(Cli, AbsorbFitHelpListsTheDivergedFitsExitStatus) {
  const RunResult help = qkvlab("absorb fit --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("3 a fit diverged"), std::string::npos) << help.out;
  const RunResult r = qkvlab("absorb fit --d 2 --restarts 1 --steps 20 --seeds 1 --lr 1e300 --out " + quoted(outputs_ / "fit.h5"));
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_EQ(qkvlab::test_support::lines(r.err), 1) << r.err;
  EXPECT_FALSE(fs::exists(outputs_ / "fit.h5"));
}

// The help states the ranges that are accepted (rmt --d-max >= 64, lnorm --d >= 2, absorb fit
// --min-sine in [0, 1], icl depth --layers in [1, 16]); a value outside is refused with that range.
TEST_F(Cli, HelpRangesAreTheAcceptedOnes) {
  const std::pair<const char*, const char*> shown[] = {{"rmt --help", "--d-max INT:64..1048576"},
                                                      {"lnorm --help", "--d INT:2..1048576"},
                                                      {"absorb fit --help", "--min-sine FLOAT:0..1"},
                                                      {"icl depth --help", "--layers INT:1..16,..."}};
  for (const auto& [args, text] : shown) {
    const RunResult r = qkvlab(args);
    EXPECT_EQ(r.status, 0) << args;
    EXPECT_NE(r.out.find(text), std::string::npos) << args << ": " << r.out;
  }
  qkvlab::test_support::expect_usage_error(qkvlab("rmt --d-max 63"), "rmt --d-max 63", "from 64 to");
  qkvlab::test_support::expect_usage_error(qkvlab("lnorm --d 1"), "lnorm --d 1", "from 2 to");
  qkvlab::test_support::expect_usage_error(qkvlab("icl depth --layers 17"), "--layers 17", "--layers: must be an integer from 1 to 16");
}

// Every list option takes its list one way (cli/validators.hpp add_list_option): an empty list, an
// empty element and a value given twice are usage errors naming the option, before any work.
// Control: the same options with distinct values are taken (a cheap icl theory sweep runs; the
// others reach their next check, a missing file or directory, past the list).
TEST_F(Cli, ListOptionsRefuseEmptyElementsAndRepeatedValues) {
  const std::pair<std::string, std::string> cases[] = {
      {"icl theory --d-list 2,2", "--d-list: 2 is given twice"},
      {"icl theory --d-list 2,,4", "--d-list: the list '2,,4' has an empty element"},
      {"icl theory --d-list ''", "--d-list: the list is empty"},
      {"icl theory --n-list 4,", "--n-list: the list '4,' has an empty element"},
      {"icl theory --sigma-list 0.5,5e-1", "--sigma-list: 0.5 is given twice"},
      {"icl theory --w0-scale-list ,1", "--w0-scale-list: the list ',1' has an empty element"},
      {"icl sweep --d-list 2,2", "--d-list: 2 is given twice"},
      {"icl sweep --sigma-list ''", "--sigma-list: the list is empty"},
      {"icl depth --layers 2,2", "--layers: 2 is given twice"},
      {"icl depth --layers 1,,2", "--layers: the list '1,,2' has an empty element"},
      {"icl depth --layers ''", "--layers: the list is empty"},
      {"icl train --models mha,mha", "--models: mha is given twice"},
      {"icl train --models mha,", "--models: the list 'mha,' has an empty element"},
      {"icl train --models mlp", "--models: "},
      {"verify --d 8,8", "--d: 8 is given twice"},
      {"verify --precision double,,float", "--precision: the list 'double,,float' has an empty element"},
      {"verify --heads 2 --heads 2", "--heads: 2 is given twice"},
      {"lm eliminate ckpt --out o --layers 1,1", "--layers: 1 is given twice"},
      {"fdim --query-layers 1,1", "--query-layers: 1 is given twice"},
      {"probe ckpt --lr-grid 0.1,0.1", "--lr-grid: 0.1 is given twice"},
  };
  for (const auto& [args, names] : cases) qkvlab::test_support::expect_usage_error(qkvlab(args), args, names);
  const RunResult sweep = qkvlab("icl theory --d-list 1,2 --n-list 4 --prompts 200 --threads 1 --quiet --format json");
  EXPECT_EQ(sweep.status, 0) << sweep.err;
  for (const std::string args : {"icl depth --layers 1,2 --d 0", "icl train --models mha,skipv1 --d 0", "verify --d 8,16 --heads 3,5 --seed -1"}) {
    const RunResult r = qkvlab(args);
    EXPECT_EQ(r.status, 2) << args;
    EXPECT_EQ(r.err.find("given twice"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.err.find("empty"), std::string::npos) << args << ": " << r.err;
  }
}

// --figure's rule (cli/plot_common.hpp figure_stem) in icl theory as in transfer: STEM.svg is the stem
// STEM (its table STEM.csv, not STEM.svg.csv), a stem's own dots stay, a directory is refused.
TEST_F(Cli, IclTheoryFigureStemFollowsTheRule) {
  const std::string run = "icl theory --prompts 200 --threads 1 --quiet --figure ";
  EXPECT_EQ(qkvlab(run + quoted(outputs_ / "it.svg")).status, 0);
  EXPECT_TRUE(fs::exists(outputs_ / "it.csv"));
  EXPECT_FALSE(fs::exists(outputs_ / "it.svg.csv"));
  EXPECT_EQ(qkvlab(run + quoted(outputs_ / "it.v2")).status, 0);
  EXPECT_TRUE(fs::exists(outputs_ / "it.v2.csv"));
  qkvlab::test_support::expect_usage_error(qkvlab(run + quoted(outputs_) + "/"), "--figure DIR/", "--figure: ");
  qkvlab::test_support::expect_usage_error(qkvlab(run + quoted(outputs_)), "--figure DIR", "names a directory");
}

// absorb on README's absorbable pair with unit 0 rescaled by 1e200 and 1e-200 (the same network):
// yes with J = {0, 1} and a finite tolerance, no "nan" anywhere (text or JSON). Control: unscaled, the same.
TEST_F(Cli, AbsorbDecidesAnExtremelyRescaledPairAsTheUnscaledOne) {
  qkvlab::MatD W_1(4, 2), W_2(2, 4);
  W_1 << 1, 0, 0, 1, 1, 1, 1, -1;
  W_2 << -1, 0, 0.5, -0.3, 0, -1, 0.25, 0.7;
  for (double c : {1.0, 1e200}) {
    qkvlab::MatD V_1 = W_1, V_2 = W_2;
    V_1.row(0) *= c, V_2.col(0) /= c;
    const fs::path w1 = save("W1.npy", qkvlab::npy_bytes(V_1)), w2 = save("W2.npy", qkvlab::npy_bytes(V_2));
    for (const char* format : {"text", "json"}) {
      const RunResult r = qkvlab("absorb --format " + std::string(format) + " " + quoted(w1) + " " + quoted(w2) +
                                 " --out-dir " + quoted(outputs_));
      EXPECT_EQ(r.status, 0) << c << r.err;
      EXPECT_NE(r.out.find(std::string(format) == "json" ? "\"J\": [0, 1]" : "J = {0, 1}"), std::string::npos) << c << r.out;
      EXPECT_EQ(r.out.find("nan"), std::string::npos) << c << r.out;
    }
  }
}

TEST_F(Cli, RmtAndLnormBadInputExit2AndWriteNothing) {
  const fs::path missing = dir_ / "no_such_dir";
  const std::string cases[] = {
      "rmt --d-max 0 --out-dir " + quoted(outputs_),
      "rmt --d-max 32 --out-dir " + quoted(outputs_),
      "rmt --d-max 64 --out-dir " + quoted(missing),
      "lnorm --d 0 --out-dir " + quoted(outputs_),
      "lnorm --d 4 --out-dir " + quoted(missing),
  };
  for (const auto& args : cases) {
    const RunResult r = qkvlab(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << args << ": " << r.err;
    EXPECT_TRUE(fs::is_empty(outputs_)) << args << ": a file was written";
    EXPECT_FALSE(fs::exists(missing)) << args << ": the missing directory was created";
  }
}

}  // namespace
