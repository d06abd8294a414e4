#include "engine/json.hpp"

#include <charconv>
#include <set>
#include <stdexcept>

namespace qkvlab::engine {
namespace {

constexpr int max_depth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Json document() {
    Json value = parse_value(0);
    skip_whitespace();
    if (at_ < text_.size()) fail("unexpected text after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(at_));
  }

  void skip_whitespace() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r'))
      ++at_;
  }

  char peek() {
    if (at_ >= text_.size()) fail("unexpected end of text");
    return text_[at_];
  }

  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }

  bool consume(std::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  Json parse_value(int depth) {
    if (depth > max_depth) fail("nesting deeper than " + std::to_string(max_depth));
    skip_whitespace();
    Json value;
    const std::size_t start = at_;
    const char c = peek();
    if (c == '{') {
      value.kind = Json::Kind::object;
      parse_members(depth, value);
    } else if (c == '[') {
      value.kind = Json::Kind::array;
      parse_items(depth, value);
    } else if (c == '"') {
      value.kind = Json::Kind::string;
      value.text = parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      value.kind = Json::Kind::number;
      value.text = parse_number();
    } else if (consume("true") || consume("false") || consume("null")) {
      value.text = std::string(text_.substr(start, at_ - start));
    } else {
      fail("expected a value");
    }
    return value;
  }

  void parse_members(int depth, Json& object) {
    expect('{');
    skip_whitespace();
    if (consume("}")) return;
    std::set<std::string> seen;
    while (true) {
      skip_whitespace();
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      if (!seen.insert(key).second) fail("duplicate key " + json_quote(key));
      skip_whitespace();
      expect(':');
      object.keys.push_back(std::move(key));
      object.items.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (consume("}")) return;
      expect(',');
    }
  }

  void parse_items(int depth, Json& array) {
    expect('[');
    skip_whitespace();
    if (consume("]")) return;
    while (true) {
      array.items.push_back(parse_value(depth + 1));
      skip_whitespace();
      if (consume("]")) return;
      expect(',');
    }
  }

  // JSON number grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
  std::string parse_number() {
    const std::size_t begin = at_;
    auto digits = [&] {
      const std::size_t first = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') ++at_;
      if (at_ == first) fail("expected a digit");
    };
    if (text_[at_] == '-') ++at_;
    if (peek() == '0')
      ++at_;
    else
      digits();
    if (consume(".")) digits();
    if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
      ++at_;
      if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
      digits();
    }
    return std::string(text_.substr(begin, at_ - begin));
  }

  unsigned hex4() {
    if (text_.size() - at_ < 4) fail("truncated \\u escape");
    unsigned code = 0;
    const auto [end, error] = std::from_chars(text_.data() + at_, text_.data() + at_ + 4, code, 16);
    if (error != std::errc() || end != text_.data() + at_ + 4) fail("bad \\u escape");
    at_ += 4;
    return code;
  }

  // A \u escape (after the "\u"), a surrogate pair taken as one code point.
  unsigned code_point() {
    const unsigned high = hex4();
    if (high >= 0xDC00 && high <= 0xDFFF) fail("unpaired low surrogate");
    if (high < 0xD800 || high > 0xDBFF) return high;
    if (!consume("\\u")) fail("unpaired high surrogate");
    const unsigned low = hex4();
    if (low < 0xDC00 || low > 0xDFFF) fail("unpaired high surrogate");
    return 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      const char c = peek();
      ++at_;
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      const char escape = peek();
      ++at_;
      switch (escape) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          append_utf8(out, code_point());
          break;
        default:
          fail(std::string("bad escape \\") + escape);
      }
    }
  }

  std::string_view text_;
  std::size_t at_ = 0;
};

}  // namespace

Json parse_json(std::string_view text) { return Parser(text).document(); }

std::uint64_t json_to_u64(const Json& value, const std::string& what) {
  std::uint64_t n = 0;
  const std::string& t = value.text;
  const bool is_number = value.kind == Json::Kind::number;
  const auto [end, error] = std::from_chars(t.data(), t.data() + t.size(), n);
  if (!is_number || error != std::errc() || end != t.data() + t.size())
    throw std::runtime_error(what + " is not a non-negative 64-bit integer");
  return n;
}

}  // namespace qkvlab::engine
