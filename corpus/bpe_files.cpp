// GPT-2's tokenizer files: vocab.json and merges.txt (corpus/bpe.hpp).
#include "corpus/bpe.hpp"
#include "corpus/byte_unicode.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/text_file.hpp"
#include "core/json_text.hpp"

#include <sstream>

namespace qkvlab::corpus {

namespace {

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
  }
}

// A JSON object whose values are non-negative integers, as vocab.json holds.
class VocabJsonReader {
 public:
  VocabJsonReader(std::string_view text, std::string name) : s_(text), name_(std::move(name)) {}

  std::vector<std::pair<std::string, std::int64_t>> entries() {
    std::vector<std::pair<std::string, std::int64_t>> out;
    expect('{');
    for (bool more = peek() != '}'; more; more = peek() == ',' && ++at_ > 0) {
      std::string key = string();
      expect(':');
      out.emplace_back(std::move(key), integer());
    }
    expect('}');
    if (peek() != '\0') bad("trailing text");
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& why) const {
    throw UsageError(name_ + ": not a vocab.json object of token → id: " + why + " at byte " + std::to_string(at_));
  }
  char peek() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\r' || s_[at_] == '\t')) ++at_;
    return at_ < s_.size() ? s_[at_] : '\0';
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++at_;
  }
  std::int64_t integer() {
    peek();
    std::int64_t v = 0;
    const std::size_t from = at_;
    while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9' && at_ - from < 10) v = v * 10 + (s_[at_++] - '0');
    if (at_ == from || (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9')) bad("expected an id (0 … 9999999999)");
    return v;
  }
  std::uint32_t hex4() {
    if (at_ + 4 > s_.size()) bad("truncated \\u escape");
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[at_++];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) bad("malformed \\u escape");
      v = v * 16 + std::uint32_t(d);
    }
    return v;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= s_.size()) bad("unterminated string");
      const char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) bad("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) bad("unterminated string");
      const char e = s_[at_++];
      const std::string_view simple = "\"\\/bfnrt", meaning = "\"\\/\b\f\n\r\t";
      if (const auto k = simple.find(e); k != std::string_view::npos) {
        out += meaning[k];
      } else if (e == 'u') {
        std::uint32_t c1 = hex4();
        if (c1 >= 0xD800 && c1 < 0xDC00) {  // a surrogate pair
          if (s_.substr(at_, 2) != "\\u") bad("lone surrogate");
          at_ += 2;
          const std::uint32_t c2 = hex4();
          if (c2 < 0xDC00 || c2 >= 0xE000) bad("lone surrogate");
          c1 = 0x10000 + ((c1 - 0xD800) << 10) + (c2 - 0xDC00);
        } else if (c1 >= 0xDC00 && c1 < 0xE000) {
          bad("lone surrogate");
        }
        append_utf8(out, char32_t(c1));
      } else {
        bad("unknown escape");
      }
    }
  }

  std::string_view s_;
  std::string name_;
  std::size_t at_ = 0;
};

}  // namespace

std::string Bpe::vocab_json() const {
  std::string out = "{";
  for (std::int32_t id = 0; id < size(); ++id) {
    const std::string text = id == end_of_text_ ? std::string(kEndOfText) : bytes_to_token_text(bytes_[std::size_t(id)]);
    out += (id ? ",\n" : "\n") + json_quote(text) + ": " + std::to_string(id);
  }
  return out + "\n}\n";
}

std::string Bpe::merges_txt() const {
  std::string out = "#version: 0.2\n";
  for (const Merge& m : merges_)
    out += bytes_to_token_text(bytes_[std::size_t(m.left)]) + " " + bytes_to_token_text(bytes_[std::size_t(m.right)]) + "\n";
  return out;
}

void Bpe::save(const std::filesystem::path& vocab_json_path, const std::filesystem::path& merges_txt_path) const {
  write_bytes_atomically(vocab_json_path, "vocab.json", vocab_json());
  write_bytes_atomically(merges_txt_path, "merges.txt", merges_txt());
}

Bpe Bpe::load(const std::filesystem::path& vocab_json_path, const std::filesystem::path& merges_txt_path) {
  const std::string vocab_name = vocab_json_path.string(), merges_name = merges_txt_path.string();
  auto entries = VocabJsonReader(read_text_file(vocab_json_path), vocab_name).entries();
  std::vector<std::string> bytes(entries.size());
  std::vector<bool> given(entries.size(), false);
  std::unordered_map<std::string, std::int32_t> id_of;
  std::int32_t end_of_text = -1;
  for (auto& [text, id] : entries) {
    if (id >= std::int64_t(entries.size()) || given[std::size_t(id)])
      throw UsageError(vocab_name + ": ids must be 0 … " + std::to_string(entries.size() - 1) + ", each once (entry " +
                       json_quote(text) + ": " + std::to_string(id) + ")");
    given[std::size_t(id)] = true;
    const auto decoded = token_text_to_bytes(text);
    if (text == kEndOfText) end_of_text = std::int32_t(id);
    else if (!decoded) throw UsageError(vocab_name + ": entry " + json_quote(text) + " is not a byte-level token");
    bytes[std::size_t(id)] = text == kEndOfText ? text : *decoded;
    if (!id_of.emplace(bytes[std::size_t(id)], std::int32_t(id)).second)
      throw UsageError(vocab_name + ": two entries for the bytes of " + json_quote(text));
  }
  if (end_of_text < 0) throw UsageError(vocab_name + ": no " + std::string(kEndOfText) + " entry");
  std::vector<bool> explained(bytes.size(), false);
  explained[std::size_t(end_of_text)] = true;
  for (int b = 0; b < 256; ++b) {
    const auto it = id_of.find(std::string(1, char(b)));
    if (it == id_of.end()) throw UsageError(vocab_name + ": no token for byte " + std::to_string(b));
    explained[std::size_t(it->second)] = true;
  }
  std::vector<Merge> merges;
  std::istringstream lines(read_text_file(merges_txt_path));
  std::size_t line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const auto where = merges_name + " line " + std::to_string(line_no) + ": ";
    const auto space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      throw UsageError(where + "not a merge \"LEFT RIGHT\"");
    const auto left = token_text_to_bytes(line.substr(0, space)), right = token_text_to_bytes(line.substr(space + 1));
    if (!left || !right || !id_of.contains(*left) || !id_of.contains(*right) || !id_of.contains(*left + *right))
      throw UsageError(where + "a merge of tokens (or into a token) not in " + vocab_name);
    const std::int32_t result = id_of.at(*left + *right);
    merges.push_back({id_of.at(*left), id_of.at(*right), result});
    explained[std::size_t(result)] = true;
  }
  for (std::size_t id = 0; id < bytes.size(); ++id)
    if (!explained[id])
      throw UsageError(vocab_name + ": entry " + json_quote(bytes_to_token_text(bytes[id])) +
                       " is neither a byte, a merge of " + merges_name + " nor " + std::string(kEndOfText));
  return Bpe(std::move(bytes), std::move(merges), end_of_text);
}

}  // namespace qkvlab::corpus
