// write_json. A minimal writer: every value is turned into JSON text by a
// small function, and an Object collects "name": value pairs into one line,
// so each record sits on its own line. Non-finite or absent numbers are null.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/json_text.hpp"
#include "results/report.hpp"

namespace qkvlab::results {
namespace {

std::string number(double x) { return json_number(x); }
std::string number(std::optional<double> x) { return x ? number(*x) : "null"; }

std::string boolean(bool b) { return b ? "true" : "false"; }

class Object {
 public:
  Object& add(std::string_view name, const std::string& json) {
    text_ += text_.empty() ? "{" : ", ";
    text_ += json_quote(name) + ": " + json;
    return *this;
  }
  std::string str() const { return text_.empty() ? "{}" : text_ + "}"; }

 private:
  std::string text_;
};

std::string to_json(const CheckRecord& c) {
  Object o;
  o.add("id", json_quote(c.id))
      .add("config", json_quote(c.config))
      .add("precision", json_quote(c.precision))
      .add("rel_err", number(c.rel_err))
      .add("kappa", number(c.kappa))
      .add("normalized_err", number(c.normalized_err))
      .add("budget", number(c.budget))
      .add("pass", boolean(c.pass))
      .add("status", json_quote(c.status))
      .add("note", json_quote(c.note));
  if (c.statistic) {
    o.add("statistic", number(c.statistic)).add("expected", number(c.expected)).add("std_err", number(c.std_err));
  }
  return o.str();
}

std::string to_json(const ControlRecord& c) {
  return Object()
      .add("id", json_quote(c.id))
      .add("name", json_quote(c.name))
      .add("config", json_quote(c.config))
      .add("precision", json_quote(c.precision))
      .add("rel_err", number(c.rel_err))
      .add("failed_as_expected", boolean(c.failed_as_expected))
      .add("note", json_quote(c.note))
      .str();
}

std::string to_json(const LadderRecord& l) {
  return Object().add("id", json_quote(l.id)).add("config", json_quote(l.config)).add("slope", number(l.slope)).str();
}

std::string to_json(const SkippedClaim& s) {
  return Object().add("id", json_quote(s.id)).add("reason", json_quote(s.reason)).str();
}

std::string to_json(const Summary& s) {
  return Object()
      .add("checks", std::to_string(s.checks))
      .add("passed", std::to_string(s.passed))
      .add("controls", std::to_string(s.controls))
      .add("controls_failed_as_expected", std::to_string(s.controls_failed_as_expected))
      .add("ok", boolean(s.ok))
      .str();
}

// "name": [ one record per line ]
template <class Record>
void write_array(std::ostream& out, std::string_view name, const std::vector<Record>& records) {
  out << "  " << json_quote(name) << ": [";
  for (std::size_t i = 0; i < records.size(); ++i) out << (i == 0 ? "\n    " : ",\n    ") << to_json(records[i]);
  out << (records.empty() ? "],\n" : "\n  ],\n");
}

}  // namespace

void write_json(std::ostream& out, const Report& report) {
  out << "{\n";
  out << "  \"seed\": " << std::to_string(report.seed) << ",\n";
  out << "  \"version\": " << json_quote(report.version) << ",\n";
  out << "  \"command_line\": " << json_quote(report.command_line) << ",\n";
  for (const auto& key : report.context.keys()) out << "  " << json_quote(key) << ": " << report.context[key].json_compact() << ",\n";
  write_array(out, "checks", report.checks);
  write_array(out, "controls", report.controls);
  write_array(out, "ladders", report.ladders);
  if (!report.context.keys().empty() || !report.skipped.empty()) write_array(out, "skipped", report.skipped);
  out << "  \"summary\": " << to_json(report.summary()) << "\n";
  out << "}\n";
}

}  // namespace qkvlab::results
