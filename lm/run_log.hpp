// The training logs of `qkvlab lm train` (lm/train.hpp: train.csv, validation.csv), read in one
// place: by lm compare and reproduce's figures (`read_log`, the whole curve), and by a resumed run
// (`truncate_logs`, cutting the rows past its checkpoint; `logged_value`, the loss of a step whose
// final validation was cut). A log is a header line, then one row per logged step, its fields
// separated by commas, the first the step (a decimal integer, the whole field), the others numbers.
// No stoll/stod: errors name the file, the line and the row's start (control bytes escaped).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace qkvlab::lm {

// One row of a log after its header.
struct LogRow {
  int number = 0;                   // its line number in the file (the header is line 1)
  std::string text;                 // the line as written
  std::vector<std::string> fields;  // text split at its commas (a trailing empty field dropped)
};

// A log as written: its header line and every line after it (empty ones too).
struct LogLines {
  std::string header;
  std::vector<LogRow> rows;
  bool cut = false;  // the file's last line (the header's, without rows) has no newline: cut while written
};
// `file`'s lines; nullopt when it cannot be opened.
std::optional<LogLines> read_log_lines(const std::filesystem::path& file);

// The row's step: its first field when that is a decimal integer, the whole of it; nullopt otherwise.
std::optional<std::int64_t> row_step(const LogRow& row);

// A whole log as a curve: the first column the step (an integer), column `column` (0-based) a finite
// number, for every row. Anything else is a UsageError naming the file, the line and the row's start.
struct Curve {
  std::vector<std::int64_t> steps;
  std::vector<double> values;
  bool cut = false;  // the file's last line has no newline (LogLines::cut)
};
Curve read_log(const std::filesystem::path& file, int column);

// `text` as a finite number (the whole of it); otherwise a UsageError naming the file and `what`.
double finite_number(const std::string& text, const std::filesystem::path& file, const std::string& what);

// Keeps the rows of the log at `file` up to `step` (empty lines dropped), rewritten atomically, so
// that a resumed run appends where it left off; nothing when the file cannot be opened. A last line
// without its newline (the row being appended when the run stopped, after every whole row) is
// dropped. The kept rows must be the ones the checkpoint at `step` had: train.csv's a row for every
// step 1 … step (LogRows::every_step), validation.csv's at ascending steps. A log without a whole
// header, a row whose step is not an integer, a kept row without the header's count of fields or with
// a value that is not a finite number, or rows missing or out of order are a UsageError
// naming the file and the line: the resume would write a log that no reader accepts.
// Every log is checked before any is rewritten: a refused resume leaves them all as they were.
enum class LogRows { every_step, ascending };
void truncate_logs(std::int64_t step, const std::vector<std::pair<std::filesystem::path, LogRows>>& logs);

// Column `column` (0-based) of the row for `step`, the first such row where that column is a finite
// number; nullopt when the log (or the file) has none.
std::optional<double> logged_value(const std::filesystem::path& file, std::int64_t step, int column);

}  // namespace qkvlab::lm
