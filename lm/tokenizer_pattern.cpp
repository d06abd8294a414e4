// PCRE2 patterns and the pre-tokenizer (lm/tokenizer_impl.hpp): a pattern's matches, ByteLevel's
// step, the added tokens' pattern, a segment cut into pieces by every step.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "lm/tokenizer_impl.hpp"

namespace qkvlab::lm {

namespace tokenizer_detail {

Regex::Regex(std::string_view pattern, bool literal, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // A literal (Split's {"String": ...}, tokenizers' regex::escape of it) takes no UCP: PCRE2 refuses it with
  // LITERAL, and a literal has no \p{...} or \w for it to change.
  const std::uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw UsageError(where + ": the pattern " + json_quote(pattern) + " does not compile (PCRE2: " +
                     reinterpret_cast<const char*>(message) + " at offset " + std::to_string(offset) + ")");
  }
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter runs it
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::matches(std::string_view s) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(pcre2_match_data_create_from_pattern(code_, nullptr),
                                                                       pcre2_match_data_free);
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t at = 0; at < s.size();) {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), at, 0, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw UsageError(std::string("the tokenizer's pattern failed on the text (PCRE2: ") +
                       reinterpret_cast<const char*>(message) + ")");
    }
    const PCRE2_SIZE* v = pcre2_get_ovector_pointer(data.get());
    if (v[1] > v[0]) {
      out.emplace_back(v[0], v[1]), at = v[1];
      continue;
    }
    at = v[0] + 1;  // an empty match: move on, past the continuation bytes of a character
    while (at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) ++at;
  }
  return out;
}

// ByteLevel: a space put before a piece that does not start with one; GPT-2's pattern when use_regex.
PreStep byte_level(bool add_prefix_space, bool use_regex, const std::string& where) {
  PreStep step;
  step.byte_level = true, step.add_prefix_space = add_prefix_space;
  if (use_regex) step.regex = std::make_shared<Regex>(kGpt2Pattern, false, where);
  return step;
}

}  // namespace tokenizer_detail

using namespace tokenizer_detail;

void Tokenizer::Impl::set_added(const std::vector<std::string>& contents) {
  if (contents.empty()) return;
  std::vector<std::string> sorted = contents;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::string pattern;
  for (const auto& c : sorted) {
    if (!pattern.empty()) pattern += '|';
    for (char ch : c) {  // every ASCII punctuation character escaped: the contents match literally
      if (std::ispunct(static_cast<unsigned char>(ch)) || ch == ' ') pattern += '\\';
      pattern += ch;
    }
  }
  added = std::make_unique<Regex>(pattern, false, source + ": added_tokens");
}

// The pieces of one segment (no added token in it), through every pre-tokenizer step.
std::vector<std::string> Tokenizer::Impl::pieces(std::string_view segment) const {
  if (segment.empty()) return {};
  std::vector<std::string> now{std::string(segment)};
  for (const PreStep& step : steps) {
    std::vector<std::string> next;
    for (std::string& piece : now) {
      if (step.add_prefix_space && !piece.starts_with(' ')) piece.insert(0, 1, ' ');
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      std::size_t at = 0;
      for (const auto& [b, e] : step.regex->matches(piece)) {
        if (b > at) next.push_back(piece.substr(at, b - at));
        if (step.behavior == Behavior::isolated) next.push_back(piece.substr(b, e - b));
        at = e;
      }
      if (at < piece.size()) next.push_back(piece.substr(at));
    }
    now = std::move(next);
  }
  return now;
}

}  // namespace qkvlab::lm
