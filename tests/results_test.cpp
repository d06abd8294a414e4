// Tests for results/: summary logic, the table, and the JSON, HDF5 and JUnit
// writers. Files are checked by independent readers: Python's json and
// xml.etree modules, and the HDF5 C API.
#include <gtest/gtest.h>

#if __has_include(<hdf5.h>)
#include <hdf5.h>
#else
#include <hdf5/serial/hdf5.h>  // Debian keeps the serial headers here
#endif

#include <cmath>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "results/figure.hpp"
#include "results/value.hpp"
#include "tests/json_digits.hpp"
#include "results/hdf5_matrix.hpp"
#include "results/replicated_plot.hpp"
#include "results/report.hpp"
#include "tests/run_command.hpp"
#include "tests/scratch_dir.hpp"

namespace fs = std::filesystem;
using namespace qkvlab::results;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const std::string kTrickyNote = "say \"hi\"\nback\\slash\ttab\x01 & <tag> 'q'";

CheckRecord check(std::string id, std::string config, std::string precision, std::optional<double> rel_err,
                  std::optional<double> kappa, bool pass) {
  CheckRecord c;
  c.id = std::move(id);
  c.config = std::move(config);
  c.precision = std::move(precision);
  c.rel_err = rel_err;
  c.kappa = kappa;
  c.pass = pass;
  return c;
}

ControlRecord control(std::string name, std::string config, double rel_err, bool failed_as_expected) {
  ControlRecord c;
  c.id = "qwe.lemma3.1";
  c.name = std::move(name);
  c.config = std::move(config);
  c.precision = "double";
  c.rel_err = rel_err;
  c.failed_as_expected = failed_as_expected;
  return c;
}

LadderRecord ladder(std::string id, std::string config, std::optional<double> slope) {
  LadderRecord l;
  l.id = std::move(id);
  l.config = std::move(config);
  l.slope = slope;
  return l;
}

// Two claims: qwe.lemma3.1 with two passing checks and two controls (one did
// not fail), and a statistical qwe.scale8.2 that failed as singular.
Report sample_report() {
  Report r;
  r.seed = std::numeric_limits<std::uint64_t>::max();  // not representable as a double
  r.command_line = "qkvlab verify --claims \"qwe.*\"";
  r.version = "0.1.0";
  const std::string config = "d=32 H=4 n=8 mask=causal elim=Q trial=0";
  r.checks = {check("qwe.lemma3.1", config, "double", 1.25e-16, 45.0, true),
              check("qwe.lemma3.1", config, "long_double", 3e-19, 45.0, true),
              check("qwe.scale8.2", "d=64 trials=1000", "double", std::nullopt, kNaN, false)};
  r.checks[0].normalized_err = 0.5625;
  r.checks[2].status = "singular";
  r.checks[2].note = kTrickyNote;
  r.checks[2].statistic = 1.5;
  r.checks[2].expected = 1.0;
  r.controls = {control("T^-1 applied to W_Q only", config, 0.75, true), control("no mask", config, 2e-16, false)};
  r.controls[1].note = "identity still held";
  r.ladders = {ladder("qwe.lemma3.1", config, 1.0), ladder("qwe.scale8.2", "d=64 trials=1000", std::nullopt)};
  return r;
}

std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

using Command = qkvlab::test_support::CommandResult;

// stdout and stderr together in out.
Command run(const std::string& command) { return qkvlab::test_support::run_command(command + " 2>&1"); }

class ResultsFiles : public ::testing::Test {
 protected:

  // Runs a Python script on `file`; the script asserts, a failure prints why.
  Command run_python(const std::string& script, const fs::path& file) {
    const fs::path script_path = dir_ / "check.py";
    std::ofstream(script_path) << script;
    return run(python() + " '" + script_path.string() + "' '" + file.string() + "'");
  }

  // The directory holds exactly these names (nothing temporary left behind).
  void expect_only(const std::set<std::string>& names) {
    std::set<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir_)) found.insert(entry.path().filename().string());
    EXPECT_EQ(found, names);
  }

  const qkvlab::test_support::ScratchDir scratch_;
  const fs::path dir_ = scratch_.path();
};

// ---- summary ----

TEST(Summary, CountsAndOk) {
  Report r = sample_report();
  r.checks[2].pass = true;
  r.controls[1].failed_as_expected = true;
  const Summary s = r.summary();
  EXPECT_EQ(s.checks, 3u);
  EXPECT_EQ(s.passed, 3u);
  EXPECT_EQ(s.controls, 2u);
  EXPECT_EQ(s.controls_failed_as_expected, 2u);
  EXPECT_TRUE(s.ok);
}

TEST(Summary, FailingCheckIsNotOk) {
  Report r = sample_report();
  r.controls[1].failed_as_expected = true;
  const Summary s = r.summary();
  EXPECT_EQ(s.passed, 2u);
  EXPECT_FALSE(s.ok);
}

TEST(Summary, ControlThatDidNotFailIsNotOk) {
  Report r = sample_report();
  r.checks[2].pass = true;
  const Summary s = r.summary();
  EXPECT_EQ(s.passed, s.checks);
  EXPECT_EQ(s.controls_failed_as_expected, 1u);
  EXPECT_FALSE(s.ok);
}

TEST(Summary, NoChecksIsNotOk) {
  const Summary s = Report{}.summary();
  EXPECT_EQ(s.checks, 0u);
  EXPECT_FALSE(s.ok);
}

// ---- table ----

std::vector<std::string> table_lines(const Report& r) {
  std::ostringstream out;
  print_table(out, r);
  std::vector<std::string> lines;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(Table, RowsAreAlignedAndFitIn120Columns) {
  const auto lines = table_lines(sample_report());
  ASSERT_EQ(lines.size(), 6u);  // header, 3 rows, blank, summary
  const std::size_t precision_column = lines[0].find("precision");
  ASSERT_NE(precision_column, std::string::npos);
  EXPECT_EQ(lines[1].find("double"), precision_column);
  EXPECT_EQ(lines[2].find("long_double"), precision_column);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_LE(lines[i].size(), 120u) << lines[i];  // header, passing rows
}

TEST(Table, ShowsNumbersSlopeControlsAndResult) {
  const auto lines = table_lines(sample_report());
  EXPECT_NE(lines[1].find("1.25e-16"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("1.00e+00"), std::string::npos) << lines[1];   // ladder slope
  EXPECT_NE(lines[1].find("2.00e-16!"), std::string::npos) << lines[1];  // worst control, one did not fail
  EXPECT_EQ(lines[1].substr(lines[1].size() - 4), "PASS");
  EXPECT_EQ(lines[2].find('!'), std::string::npos) << lines[2];  // no controls at long_double
  EXPECT_NE(lines[3].find("FAIL (singular)"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find(" - "), std::string::npos) << lines[3];  // absent rel_err
}

TEST(Table, SummaryLine) {
  Report r = sample_report();
  EXPECT_EQ(table_lines(r).back(), "qkvlab verify: 2/3 checks passed, 1/2 controls failed as expected \u2014 FAILED");
  r.checks[2].pass = true;
  r.controls[1].failed_as_expected = true;
  EXPECT_EQ(table_lines(r).back(), "qkvlab verify: 3/3 checks passed, 2/2 controls failed as expected \u2014 OK");
}

std::vector<std::string> claim_lines(const Report& r) {
  std::ostringstream out;
  print_claims(out, r);
  std::vector<std::string> lines;
  std::istringstream in(out.str());
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ClaimTable, OneLinePerClaimThenTheSummaryLine) {
  const auto lines = claim_lines(sample_report());
  ASSERT_EQ(lines.size(), 5u);  // header, 2 claims, blank, summary
  EXPECT_EQ(lines[0], "id            checks   double long_double    slope controls result");
  // qwe.lemma3.1: 2/2 checks, largest normalized error 0.5625 at double, none at long
  // double, one ladder, one of its two controls did not fail: FAIL.
  EXPECT_EQ(lines[1], "qwe.lemma3.1     2/2 5.62e-01           - 1.00e+00      1/2 FAIL");
  EXPECT_EQ(lines[2], "qwe.scale8.2     0/1        -           -        -      0/0 FAIL");
  EXPECT_EQ(lines.back(), table_lines(sample_report()).back());
}

TEST(ClaimTable, PassingClaimAndSlopeRange) {
  Report r = sample_report();
  r.checks.resize(2);
  r.controls[1].failed_as_expected = true;
  r.ladders = {ladder("qwe.lemma3.1", "a", 0.98), ladder("qwe.lemma3.1", "b", 1.01)};
  const auto lines = claim_lines(r);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[1].find(" 0.98..1.01 "), std::string::npos) << lines[1];
  EXPECT_TRUE(lines[1].ends_with(" 2/2 PASS")) << lines[1];
  EXPECT_EQ(lines.back(), "qkvlab verify: 2/2 checks passed, 2/2 controls failed as expected \u2014 OK");
}

// ---- JSON ----

const char* const kJsonCheck = R"PY(
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    doc = json.load(f)
assert list(doc) == ["seed", "version", "command_line", "checks", "controls", "ladders", "summary"], list(doc)
assert doc["seed"] == 18446744073709551615, doc["seed"]
assert doc["command_line"] == 'qkvlab verify --claims "qwe.*"'
check_keys = ["id", "config", "precision", "rel_err", "kappa", "normalized_err", "budget", "pass", "status", "note"]
stat_keys = check_keys + ["statistic", "expected", "std_err"]
c = doc["checks"]
assert len(c) == 3
assert list(c[0]) == check_keys, list(c[0])
assert list(c[2]) == stat_keys, list(c[2])
assert c[0]["rel_err"] == 1.25e-16 and c[0]["pass"] is True and c[0]["budget"] == 1000.0
assert c[2]["rel_err"] is None and c[2]["kappa"] is None and c[2]["std_err"] is None
assert c[2]["statistic"] == 1.5 and c[2]["pass"] is False and c[2]["status"] == "singular"
assert c[2]["note"] == "say \"hi\"\nback\\slash\ttab\x01 & <tag> 'q'", repr(c[2]["note"])
ctl = doc["controls"]
assert [list(x) for x in ctl] == [["id", "name", "config", "precision", "rel_err", "failed_as_expected", "note"]] * 2
assert ctl[1]["failed_as_expected"] is False and ctl[1]["rel_err"] == 2e-16
lad = doc["ladders"]
assert [list(x) for x in lad] == [["id", "config", "slope"]] * 2
assert lad[0]["slope"] == 1.0 and lad[1]["slope"] is None
assert doc["summary"] == {"checks": 3, "passed": 2, "controls": 2, "controls_failed_as_expected": 1, "ok": False}
)PY";

TEST_F(ResultsFiles, JsonIsValidWithExactlyTheContractFields) {
  const fs::path file = dir_ / "report.json";
  std::ofstream(file) << [] {
    std::ostringstream out;
    write_json(out, sample_report());
    return out.str();
  }();
  const Command check = run_python(kJsonCheck, file);
  EXPECT_EQ(check.status, 0) << check.out;
}

TEST(Json, DoublesRoundTripAndNonFiniteIsNull) {
  Report r;
  r.checks = {check("a", "c", "double", 0.1, std::numeric_limits<double>::infinity(), true)};
  r.checks[0].budget = kNaN;
  std::ostringstream out;
  write_json(out, r);
  EXPECT_NE(out.str().find("\"rel_err\": 0.10000000000000001"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("\"kappa\": null"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("\"budget\": null"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("\"controls\": []"), std::string::npos) << out.str();
}

// ---- HDF5 ----

// Owns one HDF5 id in the test's reads.
class Id {
 public:
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  operator hid_t() const { return id_; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

std::string read_string_attribute(hid_t file, const char* name) {
  Id attribute(H5Aopen(file, name, H5P_DEFAULT), H5Aclose);
  Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  char* text = nullptr;
  if (H5Aread(attribute, type, &text) < 0 || !text) return "<unreadable>";
  std::string value = text;
  H5free_memory(text);
  return value;
}

hssize_t row_count(hid_t file, const char* dataset) {
  Id set(H5Dopen2(file, dataset, H5P_DEFAULT), H5Dclose);
  Id space(H5Dget_space(set), H5Sclose);
  return H5Sget_simple_extent_npoints(space);
}

std::vector<double> read_double_field(hid_t file, const char* dataset, const char* field) {
  Id set(H5Dopen2(file, dataset, H5P_DEFAULT), H5Dclose);
  Id type(H5Tcreate(H5T_COMPOUND, sizeof(double)), H5Tclose);
  H5Tinsert(type, field, 0, H5T_NATIVE_DOUBLE);
  std::vector<double> values(static_cast<std::size_t>(row_count(file, dataset)));
  if (H5Dread(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) return {};
  return values;
}

std::vector<std::string> read_string_field(hid_t file, const char* dataset, const char* field) {
  Id set(H5Dopen2(file, dataset, H5P_DEFAULT), H5Dclose);
  Id str(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(str, H5T_VARIABLE);
  H5Tset_cset(str, H5T_CSET_UTF8);
  Id type(H5Tcreate(H5T_COMPOUND, sizeof(char*)), H5Tclose);
  H5Tinsert(type, field, 0, str);
  std::vector<char*> raw(static_cast<std::size_t>(row_count(file, dataset)), nullptr);
  if (H5Dread(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0) return {};
  std::vector<std::string> values;
  for (char* text : raw) {
    values.emplace_back(text ? text : "<null>");
    H5free_memory(text);
  }
  return values;
}

TEST_F(ResultsFiles, Hdf5RoundTrip) {
  const fs::path file_path = dir_ / "report.h5";
  write_hdf5(file_path.string(), sample_report());
  expect_only({"report.h5"});

  Id file(H5Fopen(file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_GE(file, 0);
  Id seed_attribute(H5Aopen(file, "seed", H5P_DEFAULT), H5Aclose);
  std::uint64_t seed = 0;
  ASSERT_GE(H5Aread(seed_attribute, H5T_NATIVE_UINT64, &seed), 0);
  EXPECT_EQ(seed, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(read_string_attribute(file, "command_line"), "qkvlab verify --claims \"qwe.*\"");
  EXPECT_EQ(read_string_attribute(file, "version"), "0.1.0");

  EXPECT_EQ(row_count(file, "qwe.lemma3.1/checks"), 2);
  EXPECT_EQ(row_count(file, "qwe.lemma3.1/controls"), 2);
  EXPECT_EQ(row_count(file, "qwe.lemma3.1/ladders"), 1);
  EXPECT_EQ(row_count(file, "qwe.scale8.2/checks"), 1);
  EXPECT_EQ(row_count(file, "qwe.scale8.2/controls"), 0);  // no controls: zero-length dataset

  EXPECT_EQ(read_double_field(file, "qwe.lemma3.1/checks", "rel_err"), (std::vector<double>{1.25e-16, 3e-19}));
  const auto missing = read_double_field(file, "qwe.scale8.2/checks", "rel_err");
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_TRUE(std::isnan(missing[0]));
  EXPECT_EQ(read_double_field(file, "qwe.scale8.2/checks", "statistic"), std::vector<double>{1.5});
  EXPECT_EQ(read_string_field(file, "qwe.scale8.2/checks", "note"), std::vector<std::string>{kTrickyNote});
  EXPECT_EQ(read_string_field(file, "qwe.lemma3.1/controls", "name"),
            (std::vector<std::string>{"T^-1 applied to W_Q only", "no mask"}));
}

// An integer column (Column::integer: seeds) is written exactly, as uint64 in HDF5 and in decimal in CSV:
// 2^53 + 1 survives. Control: the same number in a double column is 2^53 in both.
TEST_F(ResultsFiles, IntegerColumnsAreWrittenExactly) {
  const std::uint64_t seed = (std::uint64_t(1) << 53) + 1;
  const Column exact{"seed", {}, true, {seed, 7}}, rounded{"as_double", {double(seed), 7.0}};
  const Table t{"fits", {exact, rounded}};
  const fs::path h5 = dir_ / "t.h5", csv = dir_ / "t.csv";
  write_tables_hdf5(h5, {t}, 1, "test");
  write_csv(csv, t);
  Id file(H5Fopen(h5.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_GE(file, 0);
  Id set(H5Dopen2(file, "fits/seed", H5P_DEFAULT), H5Dclose);
  Id type(H5Dget_type(set), H5Tclose);
  EXPECT_EQ(H5Tget_class(type), H5T_INTEGER);
  EXPECT_EQ(H5Tget_size(type), 8u);
  EXPECT_EQ(H5Tget_sign(type), H5T_SGN_NONE);
  std::uint64_t read[2] = {};
  ASSERT_GE(H5Dread(set, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, read), 0);
  EXPECT_EQ(read[0], seed);
  EXPECT_EQ(read[1], 7u);
  Id control(H5Dopen2(file, "fits/as_double", H5P_DEFAULT), H5Dclose);
  double as_double[2] = {};
  ASSERT_GE(H5Dread(control, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, as_double), 0);
  EXPECT_NE(std::uint64_t(as_double[0]), seed);
  std::ifstream in(csv);
  std::string header, row;
  std::getline(in, header), std::getline(in, row);
  EXPECT_EQ(header, "seed,as_double");
  EXPECT_EQ(row, "9007199254740993,9007199254740992");
}

// table_files names each table's files after --csv's and --figure's: a CSV's extension stays last, a
// figure's stem keeps its own dots (o/fig.v2 gives o/fig.v2-TABLE, not o/fig-TABLE). One table: as given.
TEST(TableFiles, AFigureStemKeepsItsDots) {
  const auto files = table_files("o/t.csv", "o/fig.v2", {"a", "b"});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].csv, "o/t-a.csv");
  EXPECT_EQ(files[1].figure, "o/fig.v2-b");
  EXPECT_EQ(table_files("o/t.csv", "o/fig.v2", {"a"})[0].figure, "o/fig.v2");
}

TEST_F(ResultsFiles, Hdf5ReplacesAnExistingFile) {
  const fs::path file_path = dir_ / "report.h5";
  std::ofstream(file_path) << "old";
  write_hdf5(file_path.string(), sample_report());
  Id file(H5Fopen(file_path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  EXPECT_GE(file, 0);
}

// HDF5 keeps the clock's time in each dataset's header unless told not to (a 32-bit count of
// seconds): the same results written at another time must be the same bytes. No writer's file holds
// the time it was written; control: a dataset made here with HDF5's default properties does.
TEST_F(ResultsFiles, Hdf5DatasetsRecordNoTimeSoTheSameResultsAreTheSameBytes) {
  const auto holds_the_time = [](const fs::path& path, std::time_t before) {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (std::time_t t = before; t <= std::time(nullptr); ++t) {
      const auto s = std::uint32_t(t);
      const char le[4] = {char(s & 255), char(s >> 8 & 255), char(s >> 16 & 255), char(s >> 24 & 255)};
      if (bytes.find(std::string(le, 4)) != std::string::npos) return true;
    }
    return false;
  };
  const std::time_t before = std::time(nullptr);
  write_hdf5((dir_ / "a.h5").string(), sample_report());
  write_tables_hdf5(dir_ / "t.h5", {Table{"runs", {{"loss", {1.0, 2.0}}}}}, 7, "qkvlab x");
  EXPECT_FALSE(holds_the_time(dir_ / "a.h5", before));
  EXPECT_FALSE(holds_the_time(dir_ / "t.h5", before));
  {
    Id file(H5Fcreate((dir_ / "timed.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    const hsize_t dims[1] = {1};
    Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
    Id set(H5Dcreate2(file, "x", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  }
  EXPECT_TRUE(holds_the_time(dir_ / "timed.h5", before));
}

TEST(Hdf5, UnwritablePathThrowsAndLeavesNoFile) {
  const std::string path = "/nonexistent-dir/x.h5";
  try {
    write_hdf5(path, sample_report());
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot write HDF5 file " + path + ": ", 0), 0u) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(ResultsFiles, Hdf5FailedRenameRemovesTheTemporaryFile) {
  fs::create_directories(dir_ / "taken" / "child");  // a non-empty directory cannot be replaced
  EXPECT_THROW(write_hdf5((dir_ / "taken").string(), sample_report()), std::runtime_error);
  expect_only({"taken"});
}

// ---- JUnit ----

const char* const kJunitCheck = R"PY(
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites" and root.get("tests") == "5" and root.get("failures") == "2", root.attrib
assert root.get("errors") == "0" and root.get("skipped") == "0", root.attrib
suites = root.findall("testsuite")
assert [s.get("name") for s in suites] == ["qwe.lemma3.1", "qwe.scale8.2"]
assert [(s.get("tests"), s.get("failures")) for s in suites] == [("4", "1"), ("1", "1")]
cases = root.findall(".//testcase")
assert len(cases) == 5 and len(root.findall(".//failure")) == 2
assert cases[0].get("classname") == "qwe.lemma3.1"
assert cases[0].get("name") == "d=32 H=4 n=8 mask=causal elim=Q trial=0 [double]"
assert cases[3].get("classname") == "qwe.lemma3.1.controls"
assert cases[3].get("name") == "no mask: d=32 H=4 n=8 mask=causal elim=Q trial=0 [double]"
assert cases[3].find("failure").get("message").startswith("control did not fail: rel_err=2.00e-16")
failure = cases[4].find("failure")
assert "status=singular" in failure.get("message") and "statistic=1.50e+00" in failure.get("message")
assert failure.text == "say \"hi\"\nback\\slash\ttab\ufffd & <tag> 'q'", repr(failure.text)
)PY";

TEST_F(ResultsFiles, JunitParsesWithCountsAndEscaping) {
  const fs::path file = dir_ / "report.xml";
  write_junit(file.string(), sample_report());
  expect_only({"report.xml"});
  const Command check = run_python(kJunitCheck, file);
  EXPECT_EQ(check.status, 0) << check.out;
}

// Every testsuite carries the seed, command line and version as <properties>, so a failure seen
// through JUnit alone can be rerun (they were in JSON and HDF5 only). Control: the no-check and
// skipped suites carry them too, and the command line's quotes are escaped.
const char* const kJunitPropertiesCheck = R"PY(
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = root.findall("testsuite")
assert suites, ET.tostring(root)
for s in suites:
    props = {p.get("name"): p.get("value") for p in s.findall("properties/property")}
    assert props == {"seed": "18446744073709551615", "command_line": 'qkvlab verify --claims "qwe.*"',
                     "version": "0.1.0"}, (s.get("name"), props)
    assert list(s)[0].tag == "properties", s.get("name")
)PY";

TEST_F(ResultsFiles, JunitSuitesRecordTheSeedAndCommandLine) {
  Report skipped_only = sample_report();
  skipped_only.checks.clear(), skipped_only.controls.clear(), skipped_only.ladders.clear();
  skipped_only.skipped = {{"resformer.eq5", "its statement needs L >= 2 layers"}};
  Report with_skip = sample_report();
  with_skip.skipped = skipped_only.skipped;
  for (const auto& [name, report] : {std::pair{"all.xml", with_skip}, {"skipped.xml", skipped_only}}) {
    write_junit((dir_ / name).string(), report);
    const Command check = run_python(kJunitPropertiesCheck, dir_ / name);
    EXPECT_EQ(check.status, 0) << name << ": " << check.out;
  }
}

// The root's counts are the sums of its suites', skipped claims included; a report without checks
// (every selected claim skipped: not ok, exit 1) carries an error case, so the XML says what the
// exit status says. Control: the report with its checks has no such case.
const char* const kJunitCountsCheck = R"PY(
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = root.findall("testsuite")
for key in ("tests", "failures", "errors", "skipped"):
    total = sum(int(s.get(key, "0")) for s in suites)
    assert root.get(key) == str(total), (key, root.attrib, total)
assert int(root.get("tests")) == len(root.findall(".//testcase")), root.attrib
no_check = [c for c in root.findall(".//testcase") if c.get("name") == "no check ran"]
expected = sys.argv[2]
if expected == "none":
    assert not no_check
else:
    assert len(no_check) == 1 and no_check[0].find("error") is not None, ET.tostring(root)
    assert root.get("errors") == "1" and root.get("skipped") == expected, root.attrib
    assert no_check[0].find("error").text.startswith("every claim selected was skipped" if expected != "0" else "no claim"), ET.tostring(root)
)PY";

TEST_F(ResultsFiles, JunitRootCountsTheSkippedAndAReportWithoutChecksIsAnError) {
  Report skipped_only;
  skipped_only.skipped = {{"skipv1.lemma1", "not a SkipV1 model"}, {"resformer.eq5", "not a ResFormer model"}};
  Report with_checks = sample_report();
  with_checks.skipped = skipped_only.skipped;
  const std::vector<std::tuple<std::string, Report, std::string>> cases = {
      {"skipped.xml", skipped_only, "2"}, {"empty.xml", Report{}, "0"}, {"checks.xml", with_checks, "none"}};
  for (const auto& [name, report, expected] : cases) {
    write_junit((dir_ / name).string(), report);
    const fs::path script = dir_ / "counts.py";
    std::ofstream(script) << kJunitCountsCheck;
    const Command check = run(python() + " '" + script.string() + "' '" + (dir_ / name).string() + "' " + expected);
    EXPECT_EQ(check.status, 0) << name << ": " << check.out;
  }
}

// A byte that is not UTF-8 (a file name's, say) is written as the text \xNN in every format, so
// JSON and XML parse and HDF5's UTF-8 strings decode. Control: valid UTF-8 passes unchanged.
// JUnit also writes U+FFFE and U+FFFF, valid UTF-8 but not XML 1.0 characters, as U+FFFD.
TEST_F(ResultsFiles, BytesThatAreNotUtf8AreWrittenAsEscapes) {
  EXPECT_EQ(qkvlab::escape_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(qkvlab::escape_invalid_utf8("r\xff.xml"), "r\\xff.xml");
  EXPECT_EQ(qkvlab::escape_invalid_utf8("\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82"),
            "\\xc0\\xaf \\xed\\xa0\\x80 \\xf4\\x90\\x80\\x80 \\xe2\\x82");  // overlong, surrogate, > U+10FFFF, cut
  EXPECT_EQ(qkvlab::json_quote("a\xff" "b"), "\"a\\\\xffb\"");
  Report r = sample_report();
  r.command_line = "qkvlab verify --junit r\xff.xml";
  r.checks[2].note = "from u/ck\xfex \xef\xbf\xbe\xef\xbf\xbf\xef\xbf\xbd";  // U+FFFE, U+FFFF, U+FFFD
  std::ofstream(dir_ / "r.json") << [&] {
    std::ostringstream out;
    write_json(out, r);
    return out.str();
  }();
  write_junit((dir_ / "r.xml").string(), r);
  write_hdf5((dir_ / "r.h5").string(), r);
  const char* const script = R"PY(
import json, sys, xml.etree.ElementTree as ET
doc = json.load(open(sys.argv[1], encoding="utf-8"))
assert doc["command_line"] == "qkvlab verify --junit r\\xff.xml", doc["command_line"]
assert doc["checks"][2]["note"] == "from u/ck\\xfex \ufffe\uffff\ufffd", doc["checks"][2]["note"]
root = ET.parse(sys.argv[1][:-4] + "xml").getroot()
assert any(f.text == "from u/ck\\xfex \ufffd\ufffd\ufffd" for f in root.iter("failure")), ET.tostring(root)
)PY";
  const Command check = run_python(script, dir_ / "r.json");
  EXPECT_EQ(check.status, 0) << check.out;
  Id file(H5Fopen((dir_ / "r.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_GE(file, 0);
  EXPECT_EQ(read_string_attribute(file, "command_line"), "qkvlab verify --junit r\\xff.xml");
  EXPECT_EQ(read_string_field(file, "qwe.scale8.2/checks", "note"),
            std::vector<std::string>{"from u/ck\\xfex \xef\xbf\xbe\xef\xbf\xbf\xef\xbf\xbd"});
}

TEST(Junit, UnwritablePathThrowsAndLeavesNoFile) {
  const std::string path = "/nonexistent-dir/x.xml";
  try {
    write_junit(path, sample_report());
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot write JUnit file " + path + ": ", 0), 0u) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(ResultsFiles, JunitFailedRenameRemovesTheTemporaryFile) {
  fs::create_directories(dir_ / "taken" / "child");
  EXPECT_THROW(write_junit((dir_ / "taken").string(), sample_report()), std::runtime_error);
  expect_only({"taken"});
}

// --- matrices in HDF5 files -------------------------------------------------------

TEST(Hdf5Matrix, LocationNamesFileAndDataset) {
  const auto a = parse_hdf5_location("dir/w.h5:net/W2");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->file, "dir/w.h5");
  EXPECT_EQ(a->dataset, "/net/W2");
  EXPECT_FALSE(parse_hdf5_location("W1.npy").has_value());
  EXPECT_FALSE(parse_hdf5_location("odd:name.npy").has_value());
  EXPECT_THROW(parse_hdf5_location("w.h5:"), qkvlab::UsageError);
}

TEST(Hdf5Matrix, RoundTripIsExactAndRowMajor) {
  const qkvlab::test_support::ScratchDir scratch;
  const fs::path path = scratch / "matrices.h5";
  qkvlab::MatD A(2, 3), B(3, 1);
  A << 1, 2, 3, 4, 5, 6.000000000000001;
  B << -0.1, 1e-300, 7;
  write_hdf5_matrices(path.string(), {{"A", A}, {"B", B}});
  const auto a = read_hdf5_matrix({path.string(), "/A"});
  EXPECT_EQ(a.data, A);  // bit for bit
  EXPECT_FALSE(a.single_precision);
  EXPECT_EQ(read_hdf5_matrix({path.string(), "/B"}).data, B);
  // Row-major on disk, as h5py reads it: the second stored value is A(0, 1).
  double stored[6];
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t set = H5Dopen2(file, "/A", H5P_DEFAULT);
  H5Dread(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored);
  H5Dclose(set);
  H5Fclose(file);
  EXPECT_EQ(stored[1], 2.0);
}

TEST(Hdf5Matrix, BadInputIsAUsageErrorNamingFileAndDataset) {
  const qkvlab::test_support::ScratchDir scratch;
  const fs::path path = scratch / "bad.h5";
  qkvlab::MatD nan_matrix(1, 2);
  nan_matrix << 1, kNaN;
  write_hdf5_matrices(path.string(), {{"A", qkvlab::MatD::Ones(2, 2)}, {"N", nan_matrix}});
  const auto message = [](const Hdf5Location& where) {
    try {
      read_hdf5_matrix(where);
    } catch (const qkvlab::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({path.string(), "/missing"}).rfind(path.string() + ":/missing: no such dataset", 0), 0u);
  EXPECT_EQ(message({path.string(), "/N"}), path.string() + ":/N: non-finite entry (0, 1)");
  EXPECT_EQ(message({"/nonexistent/w.h5", "/A"}).rfind("/nonexistent/w.h5:/A: cannot open file", 0), 0u);
}

}  // namespace

// results::Value::json_line: the one-line JSON of the experiment commands, with line breaks
// only where the tree marks them, and 17 significant digits for every number.
TEST(ResultValue, JsonLineBreaksOnlyWhereMarked) {
  using qkvlab::results::Value;
  Value o = Value::object();
  o.set("a", 1);
  o.set("x", 0.1);
  Value items = Value::array();
  items.push(Value::array({Value(1), Value(2.5)}));
  items.push("s");
  o.set("items", items);
  EXPECT_EQ(o.json_line(), "{\"a\": 1, \"x\": 0.10000000000000001, \"items\": [[1, 2.5], \"s\"]}\n");
  Value broken = items;
  o.set("later", std::move(broken.break_items("\n  ", "\n")), "\n ");
  EXPECT_EQ(o.json_line(), "{\"a\": 1, \"x\": 0.10000000000000001, \"items\": [[1, 2.5], \"s\"],\n"
                           " \"later\": [\n  [1, 2.5],\n  \"s\"\n]}\n");
  EXPECT_TRUE(qkvlab::test_support::short_json_numbers(o.json_line()).empty());
  // The indented form ignores the marks.
  EXPECT_EQ(o.json(0), "{\"a\":1,\"x\":0.10000000000000001,\"items\":[[1, 2.5],\"s\"],\"later\":[[1, 2.5],\"s\"]}\n");
  EXPECT_EQ(o.json_compact() + "\n", o.json(0));  // the same, to embed: no newline of its own
}

// The text says what the JSON says of a number that is not finite: null (it printed nan and inf, the
// JSON null). Control: finite numbers keep their 6 digits, strings in an array stay quoted.
TEST(ResultValue, TextShowsNullWhereTheJsonDoes) {
  using qkvlab::results::Value;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Value o = Value::object();
  o.set("std", nan);
  o.set("se", -inf);
  o.set("mean", 0.1234567);
  o.set("row", Value::array({Value(nan), Value(2.5), Value(inf), Value("s")}));
  EXPECT_EQ(o.text(), "std                         null\n"
                      "se                          null\n"
                      "mean                        0.123457\n"
                      "row                         null 2.5 null \"s\"\n");
  EXPECT_EQ(o.json(0), "{\"std\":null,\"se\":null,\"mean\":0.1234567,\"row\":[null, 2.5, null, \"s\"]}\n");
}

// A replicate without a value at a point (NaN: a run recorded as diverged, icl-depth) is left out of
// that point's mean, which is the others' mean and se, and the title says a point is short (review r28:
// the NaN was averaged in and the whole depth vanished from the figure). Control: with every value
// there, the mean is over all three and the title says nothing of it.
TEST(ReplicatedPlot, APointLeavesOutAReplicateWithoutAValue) {
  auto replicate = [](double at2) {
    Table t{"depth", {{"L", {1, 2}}, {"loss", {1, at2}}}};
    Figure f{"depth", "L", "loss", false, false, {{"L", "loss", "", "MHA", "linespoints", ""}}, {}};
    return Plot{t, f};
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto p = over_replicates({replicate(2), replicate(nan), replicate(4)}, "seeds");
  ASSERT_TRUE(p.has_value());
  EXPECT_NEAR(p->table.columns[1].values[1], 3.0, 1e-12);
  EXPECT_NEAR(p->table.columns[3].values[1] - p->table.columns[1].values[1], std::sqrt(2.0) / std::sqrt(2.0), 1e-12);
  EXPECT_NE(p->figure.title.find("leaves out the seeds without a value"), std::string::npos) << p->figure.title;
  const auto all = over_replicates({replicate(2), replicate(3), replicate(4)}, "seeds");
  EXPECT_NEAR(all->table.columns[1].values[1], 3.0, 1e-12);
  EXPECT_EQ(all->figure.title.find("leaves out"), std::string::npos) << all->figure.title;
}

// A figure over replicates: each curve's mean over the seeds with ± se, a replicate's own band left
// out, a reference line kept; replicates of different shape or x values give nothing.
TEST(ReplicatedPlot, MeanAndStandardErrorPointByPoint) {
  auto replicate = [](double shift) {
    Table t{"entropy", {{"layer", {1, 2, 3}}, {"mean", {1 + shift, 2 + shift, 4 - shift}},
                                 {"low", {0, 0, 0}}, {"high", {9, 9, 9}}}};
    Figure f{"entropy", "layer", "nats", false, false,
                      {{"layer", "low", "", "± 1 std", "filledcurves fs transparent solid 0.25 noborder", "high"},
                       {"layer", "mean", "", "vanilla", "linespoints", ""},
                       {"", "", "0", "zero", "lines dt 2 lc rgb 'black'", ""}},
                      {}};
    return Plot{t, f};
  };
  const auto p = over_replicates({replicate(0), replicate(0.3), replicate(0.6)}, "seeds");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->table.name, "entropy-seeds");
  ASSERT_EQ(p->table.columns.size(), 4u);  // layer, mean, mean - se, mean + se: the replicates' band is gone
  const double se = 0.3 / std::sqrt(3.0);  // the standard deviation of 0, 0.3, 0.6 is 0.3
  for (std::size_t i = 0; i < 3; ++i) {
    const double mean = std::vector<double>{1.3, 2.3, 3.7}[i];
    EXPECT_NEAR(p->table.columns[1].values[i], mean, 1e-12);
    EXPECT_NEAR(p->table.columns[2].values[i], mean - se, 1e-12);
    EXPECT_NEAR(p->table.columns[3].values[i], mean + se, 1e-12);
  }
  ASSERT_EQ(p->figure.series.size(), 3u);  // the band, the mean, the reference line
  EXPECT_NE(p->figure.series[0].style.find("filledcurves"), std::string::npos);
  EXPECT_EQ(p->figure.series[0].z, "mean + se");
  EXPECT_EQ(p->figure.series[2].expression, "0");
  // A replicate's error bars over sequences are left out, with their words in the key.
  auto bars = replicate(0), bars2 = replicate(0.3);
  for (auto* b : {&bars, &bars2}) b->figure.series[1] = {"layer", "mean", "", "vanilla (± se over sequences)", "yerrorlines", "high"};
  const auto q = over_replicates({bars, bars2}, "seeds");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->figure.series[1].title, "vanilla");
  EXPECT_EQ(q->figure.series[1].z, "");
  EXPECT_EQ(q->figure.series[1].style.rfind("linespoints", 0), 0u);
  // A map: its z averaged, no band.
  auto map = [](double shift) {
    return Plot{Table{"map", {{"position", {0, 1, 0, 1}}, {"layer", {1, 1, 2, 2}}, {"ratio", {shift, 1, 2, 3}}}},
                Figure{"map", "position", "layer", false, false, {{"position", "layer", "", "", "image", "ratio"}}, {}}};
  };
  const auto m = over_replicates({map(0), map(1)}, "seeds");
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(m->table.columns.size(), 3u);
  EXPECT_EQ(m->table.columns[2].values, (std::vector<double>{0.5, 1, 2, 3}));
  EXPECT_EQ(m->figure.series.size(), 1u);
  EXPECT_EQ(m->figure.title, "map (mean over 2 seeds)");
  // Bars: the se as error bars.
  auto bars_of = [](double shift) {
    return Plot{Table{"loss", {{"model", {0, 1}}, {"loss", {5 + shift, 6}}}},
                Figure{"loss", "", "nats", false, false, {{"model", "loss", "", "", "boxes fs solid 0.5", ""}}, {}}};
  };
  const auto b = over_replicates({bars_of(0), bars_of(0.2)}, "seeds");
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->figure.series.size(), 1u);
  EXPECT_EQ(b->figure.series[0].style, "boxerrorbars fs solid 0.5");
  EXPECT_EQ(b->figure.series[0].z, "loss se");
  EXPECT_NEAR(b->table.columns[2].values[0], 0.1, 1e-12);  // the se of 5 and 5.2
  EXPECT_EQ(b->table.columns[2].values[1], 0.0);
  EXPECT_NE(p->figure.title.find("over 3 seeds"), std::string::npos);
  // Controls: other x values, another shape, one replicate.
  auto moved = replicate(0);
  moved.table.columns[0].values[2] = 4;
  EXPECT_FALSE(over_replicates({replicate(0), moved}, "seeds").has_value());
  auto shorter = replicate(0);
  for (auto& c : shorter.table.columns) c.values.pop_back();
  EXPECT_FALSE(over_replicates({replicate(0), shorter}, "seeds").has_value());
  EXPECT_FALSE(over_replicates({replicate(0)}, "seeds").has_value());
}

// Every series of a figure over replicates is what its title says, a mean over them (review r10: the
// fitted slope lines of skipv1-fig12's "mean ± se over 3 seeds" were seed 1's, with seed 1's slope in
// the key): a line fitted to each replicate's own curve is left out, a constant each replicate
// estimates (a Bayes loss) is drawn at its mean. Control: a reference line every replicate draws
// alike is kept as it is.
TEST(ReplicatedPlot, EverySeriesIsAMeanOverTheReplicates) {
  auto replicate = [](double slope, const std::string& bayes) {
    char fit[96];
    std::snprintf(fit, sizeof fit, "(x >= 2 ? 5 + %.3f*(x - 2.5) : 1/0)", slope);
    Table t{"probe_loss", {{"layer", {1, 2, 3}}, {"loss", {6, 5 + slope, 5 + 2 * slope}}}};
    Figure f{"probes", "layer", "nats", false, false,
             {{"layer", "loss", "", "vanilla", "linespoints", ""},
              {"", "", fit, "vanilla deeper-half slope " + std::to_string(slope), "lines dt 2", ""},
              {"", "", bayes, "Bayes loss C", "lines dt 3", ""},
              {"", "", "0", "zero", "lines dt 2 lc rgb 'black'", ""}},
             {}};
    return Plot{t, f};
  };
  const auto p = over_replicates({replicate(-0.044, "1.25"), replicate(-0.06, "1.5"), replicate(-0.062, "1.75")}, "seeds");
  ASSERT_TRUE(p.has_value());
  std::vector<std::string> titles;
  for (const Series& s : p->figure.series) titles.push_back(s.title);
  EXPECT_EQ(titles, (std::vector<std::string>{"", "vanilla", "Bayes loss C", "zero"}));  // band, mean, C, zero: no fit
  for (const Series& s : p->figure.series) EXPECT_EQ(s.title.find("slope"), std::string::npos) << s.title;
  EXPECT_EQ(p->figure.series[2].expression, "1.5");  // the mean of 1.25, 1.5, 1.75, not the first's 1.25
  EXPECT_EQ(p->figure.series[3].expression, "0");
  // Controls: replicates drawing the same lines keep them all, the fit included.
  const auto same = over_replicates({replicate(-0.044, "1.25"), replicate(-0.044, "1.25")}, "seeds");
  ASSERT_TRUE(same.has_value());
  ASSERT_EQ(same->figure.series.size(), 5u);
  EXPECT_EQ(same->figure.series[2].expression, replicate(-0.044, "1.25").figure.series[1].expression);
  EXPECT_EQ(same->figure.series[3].expression, "1.25");
  // Each replicate's own curve under one title (its best restart: column restart_1 in one, restart_0
  // in the other) is averaged, not the first's column in every replicate.
  auto best = [](const std::string& column) {
    Table t{"curves", {{"step", {1, 2}}, {"restart_0", {4, 2}}, {"restart_1", {8, 6}}}};
    return Plot{t, Figure{"curves", "step", "loss", false, false, {{"step", column, "", "mha (best restart)", "lines", ""}}, {}}};
  };
  const auto b = over_replicates({best("restart_1"), best("restart_0")}, "seeds");
  ASSERT_TRUE(b.has_value());
  const Column* mean = b->table.find("mha (best restart)");
  ASSERT_NE(mean, nullptr);
  EXPECT_EQ(mean->values, (std::vector<double>{6, 4}));  // (8 + 4) / 2, (6 + 2) / 2; restart_1's mean would be 8, 6
  EXPECT_EQ(b->figure.series.back().y, "mha (best restart)");
  const auto one = over_replicates({best("restart_1"), best("restart_1")}, "seeds");  // control: one column, its name
  ASSERT_TRUE(one.has_value());
  EXPECT_NE(one->table.find("restart_1"), nullptr);
}
