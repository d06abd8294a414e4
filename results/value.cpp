#include "results/value.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/json_text.hpp"

namespace qkvlab::results {

Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::array;
  v.items_ = std::move(items);
  return v;
}

Value Value::object() {
  Value v;
  v.kind_ = Kind::object;
  return v;
}

Value& Value::set(const std::string& key, Value v) { return set(key, std::move(v), ""); }

Value& Value::set(const std::string& key, Value v, std::string line_break) {
  if (kind_ != Kind::object) throw std::logic_error("Value::set on a non-object");
  for (std::size_t k = 0; k < keys_.size(); ++k)
    if (keys_[k] == key) {
      breaks_[k] = std::move(line_break);
      return items_[k] = std::move(v);
    }
  keys_.push_back(key);
  breaks_.push_back(std::move(line_break));
  items_.push_back(std::move(v));
  return items_.back();
}

Value& Value::break_items(std::string item_break, std::string close_break) {
  if (kind_ != Kind::array) throw std::logic_error("Value::break_items on a non-array");
  item_break_ = std::move(item_break), close_break_ = std::move(close_break), broken_items_ = true;
  return *this;
}

Value& Value::push(Value v) {
  if (kind_ != Kind::array) throw std::logic_error("Value::push on a non-array");
  items_.push_back(std::move(v));
  return items_.back();
}

const Value& Value::operator[](const std::string& key) const {
  const Value* v = find(key);
  if (!v) throw std::out_of_range("no key \"" + key + "\" in the result");
  return *v;
}

const Value* Value::find(const std::string& key) const {
  for (std::size_t k = 0; k < keys_.size(); ++k)
    if (keys_[k] == key) return &items_[k];
  return nullptr;
}

double Value::number() const {
  if (kind_ == Kind::integer) return unsigned_ ? double(u_) : double(i_);
  if (kind_ == Kind::number) return x_;
  throw std::logic_error("Value::number on a non-number");
}

namespace {

bool scalar(const Value& v) { return v.kind() != Value::Kind::array && v.kind() != Value::Kind::object; }

bool flat(const Value& v) {
  for (const auto& item : v.items())
    if (!scalar(item)) return false;
  return true;
}

}  // namespace

std::string short_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

namespace {

// A scalar as the text shows it: a finite number to 6 digits, a string bare, the rest (a non-finite
// number included: null) as in the JSON, so the text never says nan or inf where the JSON says null.
std::string shown_text(const Value& v) {
  if (v.kind() == Value::Kind::number && std::isfinite(v.number())) return short_number(v.number());
  if (v.kind() == Value::Kind::string) return v.string();
  return v.json_compact();
}

}  // namespace

void Value::write_json(std::string& out, int indent, int depth) const {
  const std::string pad = indent ? "\n" + std::string(std::size_t(indent) * (depth + 1), ' ') : "";
  const std::string end = indent ? "\n" + std::string(std::size_t(indent) * depth, ' ') : "";
  switch (kind_) {
    case Kind::null: out += "null"; return;
    case Kind::boolean: out += b_ ? "true" : "false"; return;
    case Kind::integer: out += unsigned_ ? std::to_string(u_) : std::to_string(i_); return;
    case Kind::number: out += json_number(x_); return;
    case Kind::string: out += json_quote(s_); return;
    case Kind::array: {
      if (items_.empty()) { out += "[]"; return; }
      const bool inline_items = flat(*this);  // arrays of numbers stay on one line
      out += "[";
      for (std::size_t k = 0; k < items_.size(); ++k) {
        out += k ? "," : "";
        out += inline_items ? (k ? " " : "") : pad;
        items_[k].write_json(out, indent, depth + 1);
      }
      out += inline_items ? "]" : end + "]";
      return;
    }
    case Kind::object: {
      if (items_.empty()) { out += "{}"; return; }
      out += "{";
      for (std::size_t k = 0; k < items_.size(); ++k) {
        out += (k ? "," : "") + pad + json_quote(keys_[k]) + (indent ? ": " : ":");
        items_[k].write_json(out, indent, depth + 1);
      }
      out += end + "}";
      return;
    }
  }
}

std::string Value::json(int indent) const {
  std::string out;
  write_json(out, indent, 0);
  return out + "\n";
}

std::string Value::json_compact() const {
  std::string out;
  write_json(out, 0, 0);
  return out;
}

void Value::write_line(std::string& out) const {
  if (kind_ == Kind::array) {
    out += "[";
    for (std::size_t k = 0; k < items_.size(); ++k) {
      out += broken_items_ ? (k ? "," : "") + item_break_ : k ? ", " : "";
      items_[k].write_line(out);
    }
    out += (broken_items_ ? close_break_ : "") + "]";
  } else if (kind_ == Kind::object) {
    out += "{";
    for (std::size_t k = 0; k < items_.size(); ++k) {
      out += k ? "," + (breaks_[k].empty() ? std::string(" ") : breaks_[k]) : "";
      out += json_quote(keys_[k]) + ": ";
      items_[k].write_line(out);
    }
    out += "}";
  } else {
    write_json(out, 0, 0);
  }
}

std::string Value::json_line() const {
  std::string out;
  write_line(out);
  return out + "\n";
}

void Value::write_text(std::string& out, const std::string& prefix) const {
  for (std::size_t k = 0; k < items_.size(); ++k) {
    const Value& v = items_[k];
    const std::string name = prefix + (kind_ == Kind::object ? keys_[k] : "[" + std::to_string(k) + "]");
    if (scalar(v) || (v.kind_ == Kind::array && flat(v))) {
      std::string shown;
      if (v.kind_ == Kind::array) {
        for (std::size_t j = 0; j < v.items_.size(); ++j)
          shown += (j ? " " : "") + (v.items_[j].kind_ == Kind::string ? [&] {
            std::string s;
            v.items_[j].write_json(s, 0, 0);
            return s;
          }() : shown_text(v.items_[j]));
      } else {
        shown = shown_text(v);
      }
      out += name + std::string(name.size() < 28 ? 28 - name.size() : 1, ' ') + shown + "\n";
    } else {
      v.write_text(out, name + ".");
    }
  }
}

std::string Value::text() const {
  std::string out;
  if (scalar(*this)) {
    write_json(out, 0, 0);
    return out + "\n";
  }
  write_text(out, "");
  return out;
}

}  // namespace qkvlab::results
