// The terminal tables of `qkvlab verify` (table.cpp: a row per check;
// claims_table.cpp: a row per claim) as grids of strings: every column's width
// is known before anything is printed. Private to results/.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "results/report.hpp"

namespace qkvlab::results {

struct GridColumn {
  std::string header;
  bool number;      // right-aligned
  std::string gap;  // printed before the column
};
using GridRow = std::vector<std::string>;

// The header, then each row, columns padded to their widest cell (the last
// left-aligned column unpadded).
void print_grid(std::ostream& out, const std::vector<GridColumn>& columns, const std::vector<GridRow>& rows);

// "%.2e", or "-" when absent.
std::string format_number(std::optional<double> x);

// "qkvlab verify: P/N checks passed, K/M controls failed as expected — OK|FAILED"
void print_summary(std::ostream& out, const Summary& s);

// Around either table: the report's context (what the checks ran on) before it, when it has one;
// after it, a line per skipped claim with its reason, then the summary line.
void print_context(std::ostream& out, const Report& report);
void print_skipped_and_summary(std::ostream& out, const Report& report);

}  // namespace qkvlab::results
