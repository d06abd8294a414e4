// print_table: a row per check (`qkvlab verify --verbose`), built as a grid of
// strings (table_grid.hpp). Columns are separated by one space, except two
// around the configuration (which contains spaces); that keeps a typical
// passing row within 120 columns.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <tuple>

#include "results/report.hpp"
#include "results/table_grid.hpp"

namespace qkvlab::results {
namespace {

using Row = GridRow;

const std::vector<GridColumn> kColumns = {
    {"id", false, ""},      {"config", false, "  "}, {"precision", false, "  "},
    {"rel_err", true, " "}, {"kappa", true, " "},    {"norm_err", true, " "},
    {"slope", true, " "},   {"ctrl_min", true, " "}, {"result", false, " "},
};

// The controls of one (id, config, precision): the smallest error, and whether
// any of them failed to fail.
struct ControlSummary {
  std::optional<double> min_rel_err;
  bool any_unexpected = false;
};

using ControlKey = std::tuple<std::string, std::string, std::string>;
using LadderKey = std::pair<std::string, std::string>;

std::map<ControlKey, ControlSummary> summarize_controls(const std::vector<ControlRecord>& controls) {
  std::map<ControlKey, ControlSummary> out;
  for (const ControlRecord& c : controls) {
    ControlSummary& s = out[{c.id, c.config, c.precision}];
    if (c.rel_err && (!s.min_rel_err || *c.rel_err < *s.min_rel_err)) s.min_rel_err = c.rel_err;
    s.any_unexpected = s.any_unexpected || !c.failed_as_expected;
  }
  return out;
}

std::map<LadderKey, std::optional<double>> index_ladders(const std::vector<LadderRecord>& ladders) {
  std::map<LadderKey, std::optional<double>> out;
  for (const LadderRecord& l : ladders) out[{l.id, l.config}] = l.slope;
  return out;
}

std::string format_controls(const std::map<ControlKey, ControlSummary>& controls, const CheckRecord& c) {
  const auto it = controls.find({c.id, c.config, c.precision});
  if (it == controls.end()) return "-";
  return format_number(it->second.min_rel_err) + (it->second.any_unexpected ? "!" : "");
}

std::string format_slope(const std::map<LadderKey, std::optional<double>>& ladders, const CheckRecord& c) {
  const auto it = ladders.find({c.id, c.config});
  return it == ladders.end() ? "-" : format_number(it->second);
}

std::string format_result(const CheckRecord& c) {
  if (c.pass) return "PASS";
  if (c.status == "error") return "ERROR (" + (c.note.rfind("error: ", 0) == 0 ? c.note.substr(7) : c.note) + ")";
  return c.status == "ok" ? "FAIL" : "FAIL (" + c.status + ")";
}

std::vector<Row> build_rows(const Report& report) {
  const auto controls = summarize_controls(report.controls);
  const auto ladders = index_ladders(report.ladders);
  std::vector<Row> rows;
  for (const CheckRecord& c : report.checks) {
    rows.push_back({c.id, c.config, c.precision, format_number(c.rel_err), format_number(c.kappa),
                    format_number(c.normalized_err), format_slope(ladders, c), format_controls(controls, c),
                    format_result(c)});
  }
  return rows;
}

}  // namespace

void print_table(std::ostream& out, const Report& report) {
  print_context(out, report);
  print_grid(out, kColumns, build_rows(report));
  out << '\n';
  print_skipped_and_summary(out, report);
}

}  // namespace qkvlab::results
