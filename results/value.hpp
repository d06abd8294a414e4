// A result as a tree of values — numbers, integers, strings, booleans, null,
// arrays and objects with ordered keys — that renders itself one way for
// every command: JSON (17 significant digits, non-finite numbers as null,
// through core/json_text.hpp) and an aligned text table for the terminal.
// The language-model commands (lm, params, kv, analyze, probe) build one and
// hand it here; none of them formats output itself.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace qkvlab::results {

class Value {
 public:
  enum class Kind { null, boolean, integer, number, string, array, object };

  Value() = default;
  Value(bool b) : kind_(Kind::boolean), b_(b) {}
  Value(int i) : kind_(Kind::integer), i_(i) {}
  Value(std::int64_t i) : kind_(Kind::integer), i_(i) {}
  Value(std::uint64_t i) : kind_(Kind::integer), i_(std::int64_t(i)), unsigned_(true), u_(i) {}
  Value(double x) : kind_(Kind::number), x_(x) {}
  Value(const char* s) : kind_(Kind::string), s_(s) {}
  Value(std::string s) : kind_(Kind::string), s_(std::move(s)) {}

  static Value array(std::vector<Value> items = {});
  static Value object();
  template <class Number>
  static Value array_of(const std::vector<Number>& xs) {
    Value a = array();
    for (const auto& x : xs) a.push(Value(x));
    return a;
  }

  // Objects: set appends a key (or replaces its value); arrays: push appends.
  Value& set(const std::string& key, Value v);
  Value& push(Value v);
  const Value* find(const std::string& key) const;
  const Value& operator[](const std::string& key) const;  // std::out_of_range naming a missing key

  Kind kind() const { return kind_; }
  double number() const;  // integer or number
  const std::string& string() const { return s_; }
  const std::vector<Value>& items() const { return items_; }
  const std::vector<std::string>& keys() const { return keys_; }

  std::string json(int indent = 2) const;  // indent 0: one line; a document: ends in a newline
  std::string json_compact() const;        // json(0) without the newline, to embed in another document

  // The one-line JSON of the experiment commands (icl, transfer, absorb fit):
  // ", " between items and ": " after keys, nested values inline, and line
  // breaks only where the tree asks for them: `line_break` before a key (in
  // place of the space after the comma), `break_items` around an array's items.
  std::string json_line() const;
  Value& set(const std::string& key, Value v, std::string line_break);
  // Each item starts after `item_break` (e.g. "\n  "); the closing bracket after `close_break`.
  Value& break_items(std::string item_break, std::string close_break = "");
  std::string text() const;                // "key  value" lines; nested objects indented

 private:
  void write_json(std::string& out, int indent, int depth) const;
  void write_text(std::string& out, const std::string& prefix) const;
  void write_line(std::string& out) const;

  Kind kind_ = Kind::null;
  bool b_ = false;
  std::int64_t i_ = 0;
  bool unsigned_ = false;
  std::uint64_t u_ = 0;
  double x_ = 0;
  std::string s_;
  std::vector<std::string> keys_;
  std::vector<Value> items_;
  std::vector<std::string> breaks_;      // json_line: per key, "" for the usual space
  std::string item_break_, close_break_;  // json_line: around an array's items
  bool broken_items_ = false;
};

// A number as text and tables show it: printf's %.6g (0.4, not 0.40000000000000002).
std::string short_number(double x);

}  // namespace qkvlab::results
