// A verification report: what `qkvlab verify` measured, in a form every writer
// (table, JSON, HDF5, JUnit) renders the same way. Optional numbers are absent
// when they could not be measured (a singular basis, an undefined slope): a
// writer prints them as null, never as NaN.
#pragma once

#include "core/atomic_file.hpp"
#include "results/value.hpp"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace qkvlab::results {

// One claim at one configuration and one precision.
struct CheckRecord {
  std::string id;         // claim id, e.g. "qwe.lemma3.1"
  std::string config;     // e.g. "d=32 H=4 n=8 mask=causal elim=Q trial=0"
  std::string precision;  // float | double | long_double | mp50
  std::optional<double> rel_err;
  std::optional<double> kappa;
  std::optional<double> normalized_err;
  double budget = 1e3;
  bool pass = false;
  std::string status = "ok";  // ok | singular | identity_failed | non_finite | error (the check threw; note: "error: message")
  std::string note;           // one line, empty when nothing to add
  // Statistical checks only (e.g. qwe.scale8.2).
  std::optional<double> statistic, expected, std_err;
};

// A negative control: a broken hypothesis that must make the identity fail.
struct ControlRecord {
  std::string id;
  std::string name;  // e.g. "T^-1 applied to W_Q only"
  std::string config;
  std::string precision;
  std::optional<double> rel_err;
  bool failed_as_expected = false;
  std::string note;
  // The positions it ran on when not its check's (a fresh draw of 8 below n = 8: the note says so,
  // with its n); 0: the check's input.
  int positions = 0;
};

// Slope of log(rel_err) against log(u) over the precisions run for one
// (claim, configuration): about 1 for an exact identity, about 0 for an
// approximation. Absent when fewer than two precisions gave a non-zero error.
struct LadderRecord {
  std::string id;
  std::string config;
  std::optional<double> slope;
};

// A claim that was selected but not run, and why (verify --checkpoint: the claim does
// not apply to the model's architecture, or holds for random weights only).
struct SkippedClaim {
  std::string id;
  std::string reason;
};

struct Summary {
  std::size_t checks = 0, passed = 0, controls = 0, controls_failed_as_expected = 0;
  bool ok = false;  // every check passed and every control failed as expected
};

struct Report {
  std::uint64_t seed = 0;
  std::string command_line;
  std::string version;
  std::vector<CheckRecord> checks;
  std::vector<ControlRecord> controls;
  std::vector<LadderRecord> ladders;
  // What the checks ran on, when not random draws (verify --checkpoint: "checkpoint",
  // "tokens", ...): written by every writer when it has keys, with `skipped` (written too when
  // claims were skipped without a context: a random-weight sweep that gives a claim no configuration).
  Value context = Value::object();
  std::vector<SkippedClaim> skipped;

  Summary summary() const;
};

// One row per check: id, configuration, precision, rel_err, kappa, normalized
// error, ladder slope, worst control error, PASS/FAIL; then a summary line.
void print_table(std::ostream& out, const Report& report);

// One row per claim id, in the report's order: checks passed/total, the largest
// normalized error at each precision run, the range of its ladder slopes,
// controls failed as expected/total and PASS/FAIL; then the same summary line.
void print_claims(std::ostream& out, const Report& report);

// {"seed", "checks": [...], "controls": [...], "ladders": [...], "summary": {...}}
// plus "version" and "command_line"; with a context, its keys after "command_line";
// with a context or a claim skipped, "skipped": [{"id", "reason"}] after "ladders".
void write_json(std::ostream& out, const Report& report);

// HDF5 file: attributes seed, command_line, version at the root; a group per
// claim id holding its checks, controls and ladders. Written to a temporary
// file and renamed, so a failure never leaves a half-written file. Throws
// std::runtime_error with a one-line message on failure.
void write_hdf5(const std::string& path, const Report& report);
// The same staged into a set of files committed together (core/atomic_file.hpp).
void stage_hdf5(StagedFiles& files, const std::string& path, const Report& report);

// JUnit XML: one testsuite per claim id, one testcase per check and per
// control; failures carry the measured numbers. Same atomic write.
void write_junit(const std::string& path, const Report& report);
void stage_junit(StagedFiles& files, const std::string& path, const Report& report);

// The one rendering of a claims report on `out`: JSON, or a line per claim (print_claims), or a
// row per check when `verbose` (print_table).
void render_report(std::ostream& out, const Report& report, bool json, bool verbose);
// Its files: HDF5 at `hdf5` and JUnit XML at `junit` (an empty path writes none), staged and
// committed together, so both are written or neither.
void write_report_files(const Report& report, const std::string& hdf5, const std::string& junit);

}  // namespace qkvlab::results
