#include "lm/run_log.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/json_text.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;

namespace {

// The whole of `text` as a finite number.
std::optional<double> parse_finite(std::string_view text) {
  double x = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, x);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(x)) return std::nullopt;
  return x;
}

}  // namespace

std::optional<LogLines> read_log_lines(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  LogLines log;
  std::getline(in, log.header);
  log.cut = in.eof();
  std::string line;
  for (int number = 2; std::getline(in, line); ++number) {
    log.cut = in.eof();  // getline stopped at the end of the file, not at a newline
    LogRow row{number, line, {}};
    std::stringstream ss(line);
    for (std::string f; std::getline(ss, f, ',');) row.fields.push_back(f);
    log.rows.push_back(std::move(row));
  }
  return log;
}

std::optional<std::int64_t> row_step(const LogRow& row) {
  if (row.fields.empty()) return std::nullopt;
  const std::string& field = row.fields.front();
  std::int64_t step = 0;
  const char* end = field.data() + field.size();
  if (const auto r = std::from_chars(field.data(), end, step); field.empty() || r.ec != std::errc() || r.ptr != end)
    return std::nullopt;
  return step;
}

double finite_number(const std::string& text, const fs::path& file, const std::string& what) {
  if (const auto x = parse_finite(text)) return *x;
  throw UsageError(file.string() + ": " + what + " is not a finite number: " + json_quote(text));
}

Curve read_log(const fs::path& file, int column) {
  const auto log = read_log_lines(file);
  if (!log) throw UsageError(file.string() + ": cannot read");
  Curve c;
  c.cut = log->cut;
  for (const LogRow& r : log->rows) {
    const std::string row = "line " + std::to_string(r.number) + " (" + json_quote(r.text.substr(0, 40)) + ")";
    if (int(r.fields.size()) <= column)
      throw UsageError(file.string() + ": " + row + " has no column " + std::to_string(column + 1));
    const auto step = row_step(r);
    if (!step) throw UsageError(file.string() + ": " + row + ": the step is not an integer");
    c.steps.push_back(*step);
    c.values.push_back(finite_number(r.fields[std::size_t(column)], file, row + "'s column " + std::to_string(column + 1)));
  }
  return c;
}

namespace {

// A row a reader of the log accepts (read_log: lm compare, reproduce): the header's number of fields,
// each after the step a finite number; otherwise a UsageError starting with `where`.
void require_whole_row(const LogRow& r, std::size_t columns, const std::string& where) {
  if (r.fields.size() != columns)
    throw UsageError(where + " has " + std::to_string(r.fields.size()) + " fields where the header has " +
                     std::to_string(columns) + ": " + json_quote(r.text.substr(0, 40)));
  for (std::size_t k = 1; k < columns; ++k)
    if (!parse_finite(r.fields[k]))
      throw UsageError(where + "'s column " + std::to_string(k + 1) + " is not a finite number: " +
                       json_quote(r.fields[k].substr(0, 40)) + " (an edited log: the resume would write one no reader accepts)");
}


// The bytes truncate_logs writes for one log (nullopt: it cannot be opened); refusals as documented there.
std::optional<std::string> kept_rows(const fs::path& file, std::int64_t step, LogRows rows) {
  auto log = read_log_lines(file);
  if (!log) return std::nullopt;
  const std::string cannot = file.string() + ": cannot resume: ";
  if (log->cut && log->rows.empty())
    throw UsageError(cannot + "no whole header line (the log was cut as it was started)");
  if (log->cut) log->rows.pop_back();  // the row being appended when the run stopped
  std::string kept = log->header + "\n";
  const std::size_t columns = std::size_t(std::count(log->header.begin(), log->header.end(), ',')) + 1;
  std::int64_t count = 0, last = 0;
  for (const LogRow& r : log->rows) {
    if (r.text.empty()) continue;
    const std::string line = "line " + std::to_string(r.number);
    const auto row = row_step(r);
    if (!row)
      throw UsageError(file.string() + ": " + line + ": the step is not an integer: " + json_quote(r.text.substr(0, 40)));
    if (*row > step) continue;
    ++count;
    const bool in_place = rows == LogRows::every_step ? *row == count : *row > last;
    if (!in_place)
      throw UsageError(cannot + line + " is step " + std::to_string(*row) + " after step " + std::to_string(last) +
                       ": the log lost or repeated rows that the checkpoint (step " + std::to_string(step) + ") has");
    last = *row;
    require_whole_row(r, columns, cannot + line);
    kept += r.text + "\n";
  }
  if (rows == LogRows::every_step && count != step)
    throw UsageError(cannot + "its rows end at step " + std::to_string(last) + " where the checkpoint is at step " +
                     std::to_string(step) + ": the log lost rows");
  return kept;
}

}  // namespace

void truncate_logs(std::int64_t step, const std::vector<std::pair<fs::path, LogRows>>& logs) {
  std::vector<std::optional<std::string>> kept;
  for (const auto& [file, rows] : logs) kept.push_back(kept_rows(file, step, rows));  // every log checked first
  for (std::size_t i = 0; i < logs.size(); ++i)
    if (kept[i]) write_bytes_atomically(logs[i].first, "CSV", *kept[i]);
}

std::optional<double> logged_value(const fs::path& file, std::int64_t step, int column) {
  const auto log = read_log_lines(file);
  if (!log) return std::nullopt;
  for (const LogRow& r : log->rows)
    if (row_step(r) == step && int(r.fields.size()) > column)
      if (const auto x = parse_finite(r.fields[std::size_t(column)])) return x;
  return std::nullopt;
}

}  // namespace qkvlab::lm
