// write_junit. The whole document is built in memory, then written to a
// temporary file that is renamed over the target, so a reader never sees a
// half-written report. Suites are ordered by claim id.

#include <map>
#include <sstream>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/json_text.hpp"
#include "results/report.hpp"
#include "results/table_grid.hpp"

namespace qkvlab::results {
namespace {

// Escapes for text and attributes alike. Characters that XML 1.0 cannot carry
// (control characters, U+FFFE, U+FFFF) become U+FFFD; bytes that are not UTF-8
// are written \xNN.
std::string xml(std::string_view s) {
  std::string out;
  const std::string valid = escape_invalid_utf8(s);
  for (std::size_t i = 0; i < valid.size(); ++i) {
    const char ch = valid[i];
    if (valid.compare(i, 2, "\xEF\xBF") == 0 && i + 2 < valid.size() && (valid[i + 2] == '\xBE' || valid[i + 2] == '\xBF')) {
      out += "\uFFFD", i += 2;
      continue;
    }
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\t': out += "&#9;"; break;
      case '\n': out += "&#10;"; break;
      case '\r': out += "&#13;"; break;
      default: out += static_cast<unsigned char>(ch) < 0x20 ? "\uFFFD" : std::string(1, ch);
    }
  }
  return out;
}

struct Suite {
  std::vector<const CheckRecord*> checks;
  std::vector<const ControlRecord*> controls;
  std::size_t errors() const {
    std::size_t n = 0;
    for (const CheckRecord* c : checks) n += c->status == "error" ? 1 : 0;
    return n;
  }
  std::size_t failures() const {
    std::size_t n = 0;
    for (const CheckRecord* c : checks) n += c->pass || c->status == "error" ? 0 : 1;
    for (const ControlRecord* c : controls) n += c->failed_as_expected ? 0 : 1;
    return n;
  }
};

std::map<std::string, Suite> suites_by_claim(const Report& report) {
  std::map<std::string, Suite> suites;
  for (const CheckRecord& c : report.checks) suites[c.id].checks.push_back(&c);
  for (const ControlRecord& c : report.controls) suites[c.id].controls.push_back(&c);
  return suites;
}

std::string check_failure(const CheckRecord& c) {
  std::string message = "rel_err=" + format_number(c.rel_err) + " kappa=" + format_number(c.kappa) +
                        " normalized_err=" + format_number(c.normalized_err) + " budget=" + format_number(c.budget) +
                        " status=" + c.status;
  if (c.statistic) {
    message +=
        " statistic=" + format_number(c.statistic) + " expected=" + format_number(c.expected) + " std_err=" + format_number(c.std_err);
  }
  return message;
}

// A testcase element; `failure` is empty when the case passed. An error (the
// check threw) is JUnit's <error>, distinct from a <failure> (a measurement). A passing case
// with `system_out` (a control on fresh positions: its note) carries it as <system-out>.
void write_case(std::ostream& out, const std::string& classname, const std::string& name, const std::string& failure,
                const std::string& note, bool error = false, const std::string& system_out = "") {
  out << "    <testcase classname=\"" << xml(classname) << "\" name=\"" << xml(name) << "\"";
  if (failure.empty() && system_out.empty()) {
    out << "/>\n";
    return;
  }
  out << ">\n";
  const char* element = error ? "error" : "failure";
  if (!failure.empty())
    out << "      <" << element << " message=\"" << xml(failure) << "\">" << xml(note) << "</" << element << ">\n";
  else out << "      <system-out>" << xml(system_out) << "</system-out>\n";
  out << "    </testcase>\n";
}

// Every suite's <properties>: the seed, command line and version that reproduce the run.
void write_properties(std::ostream& out, const Report& report) {
  out << "    <properties>\n";
  for (const auto& [name, value] : {std::pair<const char*, std::string>{"seed", std::to_string(report.seed)},
                                    {"command_line", report.command_line},
                                    {"version", report.version}})
    out << "      <property name=\"" << name << "\" value=\"" << xml(value) << "\"/>\n";
  out << "    </properties>\n";
}

void write_suite(std::ostream& out, const std::string& id, const Suite& suite, const Report& report) {
  out << "  <testsuite name=\"" << xml(id) << "\" tests=\"" << suite.checks.size() + suite.controls.size()
      << "\" failures=\"" << suite.failures() << "\" errors=\"" << suite.errors() << "\">\n";
  write_properties(out, report);
  for (const CheckRecord* c : suite.checks) {
    const bool error = c->status == "error";
    const std::string message = c->pass ? "" : !error ? check_failure(*c) : c->note.empty() ? "error" : c->note;
    write_case(out, id, c->config + " [" + c->precision + "]", message, c->note, error);
  }
  for (const ControlRecord* c : suite.controls) {
    const std::string failure = c->failed_as_expected ? "" : "control did not fail: rel_err=" + format_number(c->rel_err);
    write_case(out, id + ".controls", c->name + ": " + c->config + " [" + c->precision + "]", failure, c->note, false,
               c->positions ? c->note : "");
  }
  out << "  </testsuite>\n";
}

// The root's counts are its suites' sums. A report without checks is not ok (Report::summary),
// so it has one error case saying so, and a reader of the XML sees what the exit status says.
std::string junit_document(const Report& report) {
  const Summary s = report.summary();
  const bool no_checks = s.checks == 0;
  std::size_t errors = no_checks ? 1 : 0;
  for (const CheckRecord& c : report.checks) errors += c.status == "error" ? 1 : 0;
  const std::size_t failures =
      (s.checks - s.passed) + (s.controls - s.controls_failed_as_expected) - (errors - (no_checks ? 1 : 0));
  const std::size_t tests = s.checks + s.controls + report.skipped.size() + (no_checks ? 1 : 0);
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << "<testsuites name=\"qkvlab verify\" tests=\"" << tests << "\" failures=\"" << failures << "\" errors=\""
      << errors << "\" skipped=\"" << report.skipped.size() << "\">\n";
  if (no_checks) {
    out << "  <testsuite name=\"qkvlab verify\" tests=\"1\" failures=\"0\" errors=\"1\">\n";
    write_properties(out, report);
    write_case(out, "qkvlab verify", "no check ran", "no check ran: the report is not ok",
               report.skipped.empty() ? "no claim was selected" : "every claim selected was skipped (suite skipped)",
               true);
    out << "  </testsuite>\n";
  }
  for (const auto& [id, suite] : suites_by_claim(report)) write_suite(out, id, suite, report);
  if (!report.skipped.empty()) {
    out << "  <testsuite name=\"skipped\" tests=\"" << report.skipped.size() << "\" skipped=\"" << report.skipped.size()
        << "\">\n";
    write_properties(out, report);
    for (const SkippedClaim& s : report.skipped)
      out << "    <testcase classname=\"skipped\" name=\"" << xml(s.id) << "\">\n      <skipped message=\"" << xml(s.reason)
          << "\"/>\n    </testcase>\n";
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
  return out.str();
}

}  // namespace

void stage_junit(StagedFiles& files, const std::string& path, const Report& report) {
  files.add_bytes(path, "JUnit", junit_document(report));
}

void write_junit(const std::string& path, const Report& report) {
  StagedFiles files;
  stage_junit(files, path, report);
  files.commit();
}

}  // namespace qkvlab::results
