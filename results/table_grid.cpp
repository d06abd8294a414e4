#include "results/table_grid.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qkvlab::results {
namespace {

std::vector<std::size_t> column_widths(const std::vector<GridColumn>& columns, const std::vector<GridRow>& rows) {
  std::vector<std::size_t> widths(columns.size(), 0);
  for (std::size_t i = 0; i < columns.size(); ++i) widths[i] = columns[i].header.size();
  for (const GridRow& row : rows)
    for (std::size_t i = 0; i < columns.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  return widths;
}

void print_row(std::ostream& out, const std::vector<GridColumn>& columns, const GridRow& row,
               const std::vector<std::size_t>& widths) {
  std::string line;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    line += columns[i].gap;
    const std::string padding(widths[i] - row[i].size(), ' ');
    const bool last = i + 1 == columns.size();
    line += columns[i].number ? padding + row[i] : (last ? row[i] : row[i] + padding);
  }
  out << line << '\n';
}

}  // namespace

void print_grid(std::ostream& out, const std::vector<GridColumn>& columns, const std::vector<GridRow>& rows) {
  const std::vector<std::size_t> widths = column_widths(columns, rows);
  GridRow header;
  for (const GridColumn& c : columns) header.push_back(c.header);
  print_row(out, columns, header, widths);
  for (const GridRow& row : rows) print_row(out, columns, row, widths);
}

std::string format_number(std::optional<double> x) {
  if (!x) return "-";
  if (std::isnan(*x)) return "nan";  // its sign bit means nothing ("-nan" from printf)
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", *x);
  return buf;
}

void print_summary(std::ostream& out, const Summary& s) {
  out << "qkvlab verify: " << s.passed << '/' << s.checks << " checks passed, " << s.controls_failed_as_expected << '/'
      << s.controls << " controls failed as expected \u2014 " << (s.ok ? "OK" : "FAILED") << '\n';
}

void print_context(std::ostream& out, const Report& report) {
  if (!report.context.keys().empty()) out << report.context.text() << '\n';
}

// The claims whose controls ran on fresh positions (below n = 8 those acting through the scores run on 8):
// each record's note gives its n.
static void print_fresh_positions(std::ostream& out, const Report& report) {
  std::vector<std::pair<std::string, int>> seen;
  for (const ControlRecord& c : report.controls)
    if (c.positions && std::find(seen.begin(), seen.end(), std::pair(c.id, c.positions)) == seen.end())
      seen.emplace_back(c.id, c.positions);
  for (const auto& [id, n] : seen)
    out << "controls of " << id << " ran on " << n << " fresh positions (n=" << n << ") where the check's n is below "
        << n << " (each record's note says which)\n";
}

void print_skipped_and_summary(std::ostream& out, const Report& report) {
  print_fresh_positions(out, report);
  for (const SkippedClaim& s : report.skipped) out << "skipped " << s.id << ": " << s.reason << '\n';
  print_summary(out, report.summary());
}

}  // namespace qkvlab::results
