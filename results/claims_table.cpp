// print_claims: the per-claim summary `qkvlab verify` prints by default. Each
// claim's rows of the verbose table (table.cpp) are folded into one line; the
// columns are the same grid of strings, sized before anything is printed.
#include <algorithm>
#include <cstdio>
#include <map>

#include "results/report.hpp"
#include "results/table_grid.hpp"

namespace qkvlab::results {
namespace {

// What one claim's records add up to.
struct ClaimTotals {
  std::size_t checks = 0, passed = 0, controls = 0, failed_as_expected = 0;
  std::map<std::string, std::optional<double>> worst;  // largest normalized error per precision
  std::optional<double> slope_min, slope_max;
};

void extend(std::optional<double>& to, std::optional<double> x, bool larger) {
  if (x && (!to || (larger ? *x > *to : *x < *to))) to = x;
}

// Claim ids and precisions in the order they first appear in the report.
std::vector<std::string> first_seen(const Report& r, std::string CheckRecord::*field) {
  std::vector<std::string> out;
  for (const CheckRecord& c : r.checks)
    if (std::find(out.begin(), out.end(), c.*field) == out.end()) out.push_back(c.*field);
  return out;
}

std::map<std::string, ClaimTotals> totals(const Report& r) {
  std::map<std::string, ClaimTotals> out;
  for (const CheckRecord& c : r.checks) {
    ClaimTotals& t = out[c.id];
    ++t.checks, t.passed += c.pass ? 1 : 0;
    extend(t.worst[c.precision], c.normalized_err, true);
  }
  for (const ControlRecord& c : r.controls) {
    ++out[c.id].controls;
    out[c.id].failed_as_expected += c.failed_as_expected ? 1 : 0;
  }
  for (const LadderRecord& l : r.ladders) {
    extend(out[l.id].slope_min, l.slope, false);
    extend(out[l.id].slope_max, l.slope, true);
  }
  return out;
}

std::string fraction(std::size_t k, std::size_t n) { return std::to_string(k) + "/" + std::to_string(n); }

std::string slope_range(const ClaimTotals& t) {
  if (!t.slope_min) return "-";
  if (format_number(t.slope_min) == format_number(t.slope_max)) return format_number(t.slope_min);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f..%.2f", *t.slope_min, *t.slope_max);
  return buf;
}

std::string verdict(const ClaimTotals& t) {
  return t.passed == t.checks && t.failed_as_expected == t.controls ? "PASS" : "FAIL";
}

}  // namespace

void print_claims(std::ostream& out, const Report& report) {
  const std::vector<std::string> precisions = first_seen(report, &CheckRecord::precision);
  std::vector<GridColumn> columns = {{"id", false, ""}, {"checks", true, "  "}};
  for (const std::string& p : precisions) columns.push_back({p, true, " "});
  for (const char* h : {"slope", "controls", "result"}) columns.push_back({h, std::string(h) != "result", " "});
  const auto claims = totals(report);
  std::vector<GridRow> rows;
  for (const std::string& id : first_seen(report, &CheckRecord::id)) {
    const ClaimTotals& t = claims.at(id);
    GridRow row = {id, fraction(t.passed, t.checks)};
    for (const std::string& p : precisions) {
      const auto it = t.worst.find(p);
      row.push_back(it == t.worst.end() ? "-" : format_number(it->second));
    }
    for (const std::string& cell : {slope_range(t), fraction(t.failed_as_expected, t.controls), verdict(t)})
      row.push_back(cell);
    rows.push_back(std::move(row));
  }
  print_context(out, report);
  print_grid(out, columns, rows);
  out << '\n';
  print_skipped_and_summary(out, report);
}

}  // namespace qkvlab::results
