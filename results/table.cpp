// print_table. The table is built as a grid of strings first, so every
// column's width is known before anything is printed. Columns are separated
// by one space, except two around the configuration (which contains spaces);
// that keeps a typical passing row within 120 columns.
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <tuple>

#include "results/report.hpp"

namespace qkvlab::results {
namespace {

using Row = std::vector<std::string>;

struct Column {
  const char* header;
  bool number;      // right-aligned
  const char* gap;  // printed before the column
};

constexpr Column kColumns[] = {
    {"id", false, ""},      {"config", false, "  "}, {"precision", false, "  "},
    {"rel_err", true, " "}, {"kappa", true, " "},    {"norm_err", true, " "},
    {"slope", true, " "},   {"ctrl_min", true, " "}, {"result", false, " "},
};
constexpr std::size_t kColumnCount = std::size(kColumns);

// The controls of one (id, config, precision): the smallest error, and whether
// any of them failed to fail.
struct ControlSummary {
  std::optional<double> min_rel_err;
  bool any_unexpected = false;
};

using ControlKey = std::tuple<std::string, std::string, std::string>;
using LadderKey = std::pair<std::string, std::string>;

std::string format_number(std::optional<double> x) {
  if (!x) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", *x);
  return buf;
}

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
  Row header;
  for (const Column& col : kColumns) header.emplace_back(col.header);
  rows.push_back(std::move(header));
  for (const CheckRecord& c : report.checks) {
    rows.push_back({c.id, c.config, c.precision, format_number(c.rel_err), format_number(c.kappa),
                    format_number(c.normalized_err), format_slope(ladders, c), format_controls(controls, c),
                    format_result(c)});
  }
  return rows;
}

std::vector<std::size_t> column_widths(const std::vector<Row>& rows) {
  std::vector<std::size_t> widths(kColumnCount, 0);
  for (const Row& row : rows) {
    for (std::size_t i = 0; i < kColumnCount; ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  return widths;
}

void print_row(std::ostream& out, const Row& row, const std::vector<std::size_t>& widths) {
  std::string line;
  for (std::size_t i = 0; i < kColumnCount; ++i) {
    line += kColumns[i].gap;
    const std::string padding(widths[i] - row[i].size(), ' ');
    const bool last = i + 1 == kColumnCount;
    line += kColumns[i].number ? padding + row[i] : (last ? row[i] : row[i] + padding);
  }
  out << line << '\n';
}

void print_summary(std::ostream& out, const Summary& s) {
  out << "qkvlab verify: " << s.passed << '/' << s.checks << " checks passed, " << s.controls_failed_as_expected << '/'
      << s.controls << " controls failed as expected \u2014 " << (s.ok ? "OK" : "FAILED") << '\n';
}

}  // namespace

void print_table(std::ostream& out, const Report& report) {
  const std::vector<Row> rows = build_rows(report);
  const std::vector<std::size_t> widths = column_widths(rows);
  for (const Row& row : rows) print_row(out, row, widths);
  out << '\n';
  print_summary(out, report.summary());
}

}  // namespace qkvlab::results
