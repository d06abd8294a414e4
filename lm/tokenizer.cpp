// Hugging Face BPE tokenizers (lm/tokenizer.hpp): reading the files, encoding, decoding.
#include "lm/tokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>
#include <queue>
#include <unordered_map>

#include "core/errors.hpp"
#include "core/text_file.hpp"
#include "corpus/byte_unicode.hpp"
#include "engine/json.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;
using engine::Json;

// Named (not anonymous): Tokenizer::Impl holds these types, and the unity build puts this file in one
// translation unit with others.
namespace tokenizer_detail {

// GPT-2's pre-tokenizer pattern (ByteLevel's use_regex), as tokenizers writes it.
constexpr std::string_view kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A PCRE2 pattern in UTF mode with Unicode properties; bytes that are not UTF-8 match nothing.
class Regex {
 public:
  Regex(std::string_view pattern, bool literal, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const std::uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0u);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw UsageError(where + ": the pattern " + json_quote(pattern) + " does not compile (PCRE2: " +
                       reinterpret_cast<const char*>(message) + " at offset " + std::to_string(offset) + ")");
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // when JIT is unavailable the interpreter runs it
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

  // The [begin, end) byte ranges of the non-empty matches in s, left to right.
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view s) const {
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

 private:
  pcre2_code* code_ = nullptr;
};

enum class Behavior { isolated, removed };

// One pre-tokenizer step: a Split (pattern and behavior), or ByteLevel (prefix space; GPT-2's pattern).
struct PreStep {
  std::shared_ptr<const Regex> regex;  // null: ByteLevel without use_regex
  Behavior behavior = Behavior::isolated;
  bool byte_level = false, add_prefix_space = false;
};

// ByteLevel: a space put before a piece that does not start with one; GPT-2's pattern when use_regex.
PreStep byte_level(bool add_prefix_space, bool use_regex, const std::string& where) {
  PreStep step;
  step.byte_level = true, step.add_prefix_space = add_prefix_space;
  if (use_regex) step.regex = std::make_shared<Regex>(kGpt2Pattern, false, where);
  return step;
}

struct MergeRank {
  std::int32_t rank, result;
};

// The bytes of a token string under GPT-2's map, or its own UTF-8 bytes when a character is outside it.
std::string token_bytes(const std::string& token) {
  auto bytes = corpus::token_text_to_bytes(token);
  return bytes ? *bytes : token;
}

// The string of a corpus::Bpe token in GPT-2's files.
std::string token_text(const corpus::Bpe& bpe, std::int32_t id) {
  return id == bpe.end_of_text() ? std::string(corpus::kEndOfText) : corpus::bytes_to_token_text(bpe.token_bytes(id));
}

std::string byte_fallback_token(unsigned char b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  return name;
}

// The length of the UTF-8 character that starts with `lead` (1 for a byte that starts none).
std::size_t char_length(unsigned char lead) {
  return lead >= 0xF0 && lead < 0xF8 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, std::int32_t> vocab;  // model vocabulary and added tokens
  std::vector<std::string> bytes;                        // each id's decoded bytes
  std::vector<bool> assigned;                            // ids that name a token
  std::unordered_map<std::uint64_t, tokenizer_detail::MergeRank> merges;   // (left, right) → rank, result
  std::vector<tokenizer_detail::PreStep> steps;
  std::unique_ptr<tokenizer_detail::Regex> added;  // the added tokens' contents, longest first; null when none
  std::vector<std::int32_t> prefix, suffix;  // the post-processor's special tokens
  std::optional<std::int32_t> unk;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  std::size_t id_limit = 0;  // the entries of the files: ids beyond are refused before anything is sized by them

  void add_token(const std::string& text, std::int32_t id, const std::string& where) {
    if (id < 0 || std::size_t(id) >= id_limit)
      throw UsageError(where + ": id " + std::to_string(id) + " is not below the " + std::to_string(id_limit) +
                       " entries of the vocabulary and added tokens");
    if (std::size_t(id) >= bytes.size()) bytes.resize(std::size_t(id) + 1), assigned.resize(std::size_t(id) + 1, false);
    if (assigned[std::size_t(id)] && vocab.count(text) && vocab.at(text) == id) return;  // listed twice, same
    if (assigned[std::size_t(id)]) throw UsageError(where + ": id " + std::to_string(id) + " is given to two tokens");
    if (!vocab.emplace(text, id).second) throw UsageError(where + ": two ids for the token " + json_quote(text));
    bytes[std::size_t(id)] = tokenizer_detail::token_bytes(text), assigned[std::size_t(id)] = true;
  }

  void add_merge(const std::string& left, const std::string& right, const std::string& where) {
    const auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
    if (l == vocab.end() || r == vocab.end() || m == vocab.end())
      throw UsageError(where + ": the merge " + json_quote(left + " " + right) +
                       " joins tokens (or makes one) not in the vocabulary");
    merges.emplace(corpus::pair_key(l->second, r->second), tokenizer_detail::MergeRank{std::int32_t(merges.size()), m->second});
  }

  void set_added(const std::vector<std::string>& contents) {
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
    added = std::make_unique<tokenizer_detail::Regex>(pattern, false, source + ": added_tokens");
  }

  // The pieces of one segment (no added token in it), through every pre-tokenizer step.
  std::vector<std::string> pieces(std::string_view segment) const {
    if (segment.empty()) return {};
    std::vector<std::string> now{std::string(segment)};
    for (const tokenizer_detail::PreStep& step : steps) {
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
          if (step.behavior == tokenizer_detail::Behavior::isolated) next.push_back(piece.substr(b, e - b));
          at = e;
        }
        if (at < piece.size()) next.push_back(piece.substr(at));
      }
      now = std::move(next);
    }
    return now;
  }

  // The initial symbols of a piece (already in GPT-2's characters): one per character.
  std::vector<std::int32_t> symbols(const std::string& piece) const {
    std::vector<std::int32_t> out;
    for (std::size_t at = 0; at < piece.size();) {
      const std::size_t n = std::min(tokenizer_detail::char_length(static_cast<unsigned char>(piece[at])), piece.size() - at);
      const std::string c = piece.substr(at, n);
      at += n;
      if (const auto it = vocab.find(c); it != vocab.end()) {
        out.push_back(it->second);
        continue;
      }
      if (byte_fallback) {  // the character's own UTF-8 bytes, as tokenizers does
        std::vector<std::int32_t> fallback;
        for (unsigned char b : c)
          if (const auto f = vocab.find(tokenizer_detail::byte_fallback_token(b)); f != vocab.end())
            fallback.push_back(f->second);
        if (fallback.size() == c.size()) {
          out.insert(out.end(), fallback.begin(), fallback.end());
          continue;
        }
      }
      if (!unk) throw UsageError(source + ": the character " + json_quote(c) + " has no token, and the tokenizer has no "
                                 "unk_token" + (byte_fallback ? " and no byte tokens for it" : " and no byte_fallback"));
      if (!(fuse_unk && !out.empty() && out.back() == *unk)) out.push_back(*unk);
    }
    return out;
  }

  // Hugging Face's BPE merge of one word: the lowest-ranked adjacent pair, leftmost first.
  std::vector<std::int32_t> merge(std::vector<std::int32_t> ids) const {
    struct Candidate {
      std::int32_t rank;
      std::size_t pos;
      std::int32_t result;
      bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const std::size_t n = ids.size();
    std::vector<std::ptrdiff_t> prev(n), next(n);
    std::vector<bool> alive(n, true);
    for (std::size_t i = 0; i < n; ++i) prev[i] = std::ptrdiff_t(i) - 1, next[i] = i + 1 < n ? std::ptrdiff_t(i + 1) : -1;
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    const auto consider = [&](std::size_t left) {
      if (next[left] < 0) return;
      const auto it = merges.find(corpus::pair_key(ids[left], ids[std::size_t(next[left])]));
      if (it != merges.end()) heap.push({it->second.rank, left, it->second.result});
    };
    for (std::size_t i = 0; i + 1 < n; ++i) consider(i);
    while (!heap.empty()) {
      const Candidate top = heap.top();
      heap.pop();
      if (!alive[top.pos] || next[top.pos] < 0) continue;
      const auto right = std::size_t(next[top.pos]);
      const auto it = merges.find(corpus::pair_key(ids[top.pos], ids[right]));
      if (it == merges.end() || it->second.result != top.result) continue;  // stale
      ids[top.pos] = top.result, alive[right] = false, next[top.pos] = next[right];
      if (next[right] >= 0) prev[std::size_t(next[right])] = std::ptrdiff_t(top.pos);
      if (prev[top.pos] >= 0) consider(std::size_t(prev[top.pos]));
      consider(top.pos);
    }
    std::vector<std::int32_t> out;
    for (std::size_t i = 0; i < n; ++i)
      if (alive[i]) out.push_back(ids[i]);
    return out;
  }

  void encode_segment(std::string_view segment, std::vector<std::int32_t>& out,
                      std::unordered_map<std::string, std::vector<std::int32_t>>& cache) const {
    for (const std::string& piece : pieces(segment)) {
      const std::string mapped = corpus::bytes_to_token_text(piece);
      auto it = cache.find(mapped);
      if (it == cache.end()) {
        const auto whole = ignore_merges ? vocab.find(mapped) : vocab.end();
        const auto ids = whole != vocab.end() ? std::vector<std::int32_t>{whole->second} : merge(symbols(mapped));
        it = cache.emplace(mapped, ids).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }
};

// ---- tokenizer.json --------------------------------------------------------------------------------

namespace tokenizer_detail {

const Json* member(const Json& object, const std::string& key) {
  if (object.kind != Json::Kind::object) return nullptr;
  for (std::size_t k = 0; k < object.keys.size(); ++k)
    if (object.keys[k] == key) return &object.items[k];
  return nullptr;
}

bool is_null(const Json* v) { return !v || (v->kind == Json::Kind::literal && v->text == "null"); }

// A field that must be a string (a UsageError naming it otherwise).
std::string string_field(const Json& object, const std::string& key, const std::string& where) {
  const Json* v = member(object, key);
  if (!v || v->kind != Json::Kind::string) throw UsageError(where + ": \"" + key + "\" is missing or not a string");
  return v->text;
}

// An optional boolean field (absent or null: `otherwise`).
bool bool_field(const Json& object, const std::string& key, bool otherwise, const std::string& where) {
  const Json* v = member(object, key);
  if (is_null(v)) return otherwise;
  if (v->kind != Json::Kind::literal || (v->text != "true" && v->text != "false"))
    throw UsageError(where + ": \"" + key + "\" is not true or false");
  return v->text == "true";
}

std::int32_t id_field(const Json& value, const std::string& where) {
  try {
    const std::uint64_t id = engine::json_to_u64(value, where);
    if (id > std::uint64_t(1) << 30) throw std::runtime_error(where + ": id " + std::to_string(id) + " is above 2^30");
    return std::int32_t(id);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
}

[[noreturn]] void unsupported(const std::string& where, const std::string& what) {
  throw UsageError(where + ": " + what + " is not implemented (implemented: BPE with ByteLevel; docs/lm.md, \"Tokenizers\")");
}

void read_model(Tokenizer::Impl& t, const Json& model, const std::string& where) {
  if (model.kind != Json::Kind::object) throw UsageError(where + ": not an object");
  const std::string type = member(model, "type") ? string_field(model, "type", where) : "BPE";  // old files: no type
  if (type != "BPE") unsupported(where, "the model type " + json_quote(type));
  if (!is_null(member(model, "dropout"))) unsupported(where, "BPE dropout");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const Json* v = member(model, key); !is_null(v) && !(v->kind == Json::Kind::string && v->text.empty()))
      unsupported(where, std::string("\"") + key + "\"");
  t.byte_fallback = bool_field(model, "byte_fallback", false, where);
  t.fuse_unk = bool_field(model, "fuse_unk", false, where);
  t.ignore_merges = bool_field(model, "ignore_merges", false, where);
  const Json* vocab = member(model, "vocab");
  if (!vocab || vocab->kind != Json::Kind::object) throw UsageError(where + ": \"vocab\" is missing or not an object");
  for (std::size_t k = 0; k < vocab->keys.size(); ++k)
    t.add_token(vocab->keys[k], id_field(vocab->items[k], where + ".vocab[" + json_quote(vocab->keys[k]) + "]"),
                where + ".vocab");
  const Json* merges = member(model, "merges");
  if (!merges || merges->kind != Json::Kind::array) throw UsageError(where + ": \"merges\" is missing or not an array");
  for (std::size_t k = 0; k < merges->items.size(); ++k) {
    const Json& m = merges->items[k];
    const std::string at = where + ".merges[" + std::to_string(k) + "]";
    if (m.kind == Json::Kind::string) {
      const auto space = m.text.find(' ');
      if (space == std::string::npos || m.text.find(' ', space + 1) != std::string::npos)
        throw UsageError(at + ": not a merge \"LEFT RIGHT\": " + json_quote(m.text));
      t.add_merge(m.text.substr(0, space), m.text.substr(space + 1), at);
    } else if (m.kind == Json::Kind::array && m.items.size() == 2 && m.items[0].kind == Json::Kind::string &&
               m.items[1].kind == Json::Kind::string) {
      t.add_merge(m.items[0].text, m.items[1].text, at);
    } else {
      throw UsageError(at + ": not a merge (\"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"])");
    }
  }
  if (const Json* unk = member(model, "unk_token"); !is_null(unk)) {
    if (unk->kind != Json::Kind::string || !t.vocab.count(unk->text))
      throw UsageError(where + ": \"unk_token\" is not a token of the vocabulary");
    t.unk = t.vocab.at(unk->text);
  }
}

void read_pre_tokenizer(Tokenizer::Impl& t, const Json& pre, const std::string& where) {
  const std::string type = string_field(pre, "type", where);
  if (type == "Sequence") {
    const Json* list = member(pre, "pretokenizers");
    if (!list || list->kind != Json::Kind::array) throw UsageError(where + ": \"pretokenizers\" is missing or not an array");
    for (std::size_t k = 0; k < list->items.size(); ++k)
      read_pre_tokenizer(t, list->items[k], where + ".pretokenizers[" + std::to_string(k) + "]");
    return;
  }
  if (!t.steps.empty() && t.steps.back().byte_level) unsupported(where, "a pre-tokenizer after ByteLevel");
  PreStep step;
  if (type == "ByteLevel") {
    step = byte_level(bool_field(pre, "add_prefix_space", true, where), bool_field(pre, "use_regex", true, where), where);
  } else if (type == "WhitespaceSplit") {
    step.regex = std::make_shared<Regex>(R"(\p{White_Space}+)", false, where), step.behavior = Behavior::removed;
  } else if (type == "Split") {
    const Json* pattern = member(pre, "pattern");
    const Json* regex = pattern ? member(*pattern, "Regex") : nullptr;
    const Json* literal = pattern ? member(*pattern, "String") : nullptr;
    if (!(regex && regex->kind == Json::Kind::string) && !(literal && literal->kind == Json::Kind::string))
      throw UsageError(where + ": \"pattern\" is not {\"Regex\": ...} or {\"String\": ...}");
    step.regex = std::make_shared<Regex>(regex ? regex->text : literal->text, !regex, where);
    const std::string behavior = string_field(pre, "behavior", where);
    if (behavior != "Isolated" && behavior != "Removed") unsupported(where, "the Split behavior " + json_quote(behavior));
    step.behavior = behavior == "Isolated" ? Behavior::isolated : Behavior::removed;
    if (bool_field(pre, "invert", false, where)) unsupported(where, "an inverted Split");
  } else {
    unsupported(where, "the pre-tokenizer " + json_quote(type));
  }
  t.steps.push_back(std::move(step));
}

// The special token ids a TemplateProcessing's "single" template puts before and after the sequence.
void read_template(Tokenizer::Impl& t, const Json& post, const std::string& where) {
  const Json* single = member(post, "single");
  const Json* specials = member(post, "special_tokens");
  if (!single || single->kind != Json::Kind::array) throw UsageError(where + ": \"single\" is missing or not an array");
  int sequences = 0;
  for (std::size_t k = 0; k < single->items.size(); ++k) {
    const std::string at = where + ".single[" + std::to_string(k) + "]";
    if (member(single->items[k], "Sequence")) {
      ++sequences;
      continue;
    }
    const Json* special = member(single->items[k], "SpecialToken");
    if (!special) throw UsageError(at + ": neither a Sequence nor a SpecialToken");
    const std::string name = string_field(*special, "id", at);
    const Json* entry = specials ? member(*specials, name) : nullptr;
    const Json* ids = entry ? member(*entry, "ids") : nullptr;
    if (!ids || ids->kind != Json::Kind::array)
      throw UsageError(at + ": the special token " + json_quote(name) + " has no \"ids\" in \"special_tokens\"");
    for (const Json& id : ids->items) (sequences ? t.suffix : t.prefix).push_back(id_field(id, at));
  }
  if (sequences != 1) throw UsageError(where + ": \"single\" must hold the sequence once");
}

void read_post_processor(Tokenizer::Impl& t, const Json* post, const std::string& where) {
  if (is_null(post)) return;
  const std::string type = string_field(*post, "type", where);
  if (type == "Sequence") {
    const Json* list = member(*post, "processors");
    if (!list || list->kind != Json::Kind::array) throw UsageError(where + ": \"processors\" is missing or not an array");
    for (std::size_t k = 0; k < list->items.size(); ++k)
      read_post_processor(t, &list->items[k], where + ".processors[" + std::to_string(k) + "]");
  } else if (type == "TemplateProcessing") {
    read_template(t, *post, where);
  } else if (type != "ByteLevel") {  // ByteLevel's post-processing only trims offsets
    unsupported(where, "the post-processor " + json_quote(type));
  }
}

void read_added_tokens(Tokenizer::Impl& t, const Json* added, const std::string& where) {
  if (is_null(added)) return;
  if (added->kind != Json::Kind::array) throw UsageError(where + ": not an array");
  std::vector<std::string> contents;
  for (std::size_t k = 0; k < added->items.size(); ++k) {
    const Json& a = added->items[k];
    const std::string at = where + "[" + std::to_string(k) + "]";
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (bool_field(a, key, false, at)) unsupported(at, std::string("an added token with \"") + key + "\": true");
    const Json* id = member(a, "id");
    if (!id) throw UsageError(at + ": no \"id\"");
    const std::string content = string_field(a, "content", at);
    if (content.empty()) throw UsageError(at + ": an empty \"content\"");
    t.add_token(content, id_field(*id, at + ".id"), at);
    contents.push_back(content);
  }
  t.set_added(contents);
}

// Every part of a tokenizer.json, each checked to be implemented.
void read_root(Tokenizer::Impl& t, const Json& root, const std::string& name) {
  const Json* model = member(root, "model");
  if (!model) throw UsageError(name + ": no \"model\"");
  const Json* vocab = member(*model, "vocab");
  const Json* added = member(root, "added_tokens");
  t.id_limit = (vocab ? vocab->items.size() : 0) + (added ? added->items.size() : 0);
  read_model(t, *model, name + ": model");
  read_added_tokens(t, member(root, "added_tokens"), name + ": added_tokens");
  if (!is_null(member(root, "normalizer"))) unsupported(name + ": normalizer", "a normalizer");
  const Json* pre = member(root, "pre_tokenizer");
  if (is_null(pre)) unsupported(name + ": pre_tokenizer", "a tokenizer without a ByteLevel pre-tokenizer");
  read_pre_tokenizer(t, *pre, name + ": pre_tokenizer");
  if (!t.steps.back().byte_level) unsupported(name + ": pre_tokenizer", "a pre-tokenizer that does not end with ByteLevel");
  const Json* decoder = member(root, "decoder");
  if (is_null(decoder) || string_field(*decoder, "type", name + ": decoder") != "ByteLevel")
    unsupported(name + ": decoder", "a decoder other than ByteLevel");
  read_post_processor(t, member(root, "post_processor"), name + ": post_processor");
}

}  // namespace tokenizer_detail

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& name) {
  Json root;
  try {
    root = engine::parse_json(text);
  } catch (const std::runtime_error& e) {
    throw UsageError(name + ": " + e.what());
  }
  if (root.kind != Json::Kind::object) throw UsageError(name + ": not a JSON object");
  auto t = std::make_unique<Impl>();
  t->source = name;
  tokenizer_detail::read_root(*t, root, name);
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::from_bpe(const corpus::Bpe& bpe, const std::string& name) {
  auto t = std::make_unique<Impl>();
  t->source = name;
  t->id_limit = std::size_t(bpe.size());
  for (std::int32_t id = 0; id < bpe.size(); ++id) t->add_token(tokenizer_detail::token_text(bpe, id), id, name);
  for (const corpus::Merge& m : bpe.merges())
    t->merges.emplace(corpus::pair_key(m.left, m.right), tokenizer_detail::MergeRank{std::int32_t(t->merges.size()), m.result});
  t->steps.push_back(tokenizer_detail::byte_level(false, true, name));
  t->set_added({std::string(corpus::kEndOfText)});
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::load(const fs::path& dir) {
  if (fs::exists(dir / "tokenizer.json"))
    return from_json(read_text_file(dir / "tokenizer.json"), (dir / "tokenizer.json").string());
  if (fs::exists(dir / "vocab.json")) {
    if (!fs::exists(dir / "merges.txt")) throw UsageError((dir / "vocab.json").string() + ": no merges.txt beside it");
    return from_bpe(corpus::Bpe::load(dir / "vocab.json", dir / "merges.txt"),
                    (dir / "vocab.json").string() + " + merges.txt");
  }
  throw UsageError(dir.string() + ": no tokenizer (tokenizer.json, or vocab.json + merges.txt) in this directory");
}

bool has_tokenizer(const fs::path& dir) { return fs::exists(dir / "tokenizer.json") || fs::exists(dir / "vocab.json"); }

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

int Tokenizer::vocab_size() const { return int(impl_->bytes.size()); }
const std::string& Tokenizer::source() const { return impl_->source; }

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out = impl_->prefix;
  std::unordered_map<std::string, std::vector<std::int32_t>> cache;
  std::size_t at = 0;
  if (impl_->added)
    for (const auto& [b, e] : impl_->added->matches(text)) {
      if (b > at) impl_->encode_segment(text.substr(at, b - at), out, cache);
      out.push_back(impl_->vocab.at(std::string(text.substr(b, e - b))));
      at = e;
    }
  if (at < text.size()) impl_->encode_segment(text.substr(at), out, cache);
  out.insert(out.end(), impl_->suffix.begin(), impl_->suffix.end());
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || !impl_->assigned[std::size_t(id)])
      throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary of " + impl_->source + " (" +
                       std::to_string(vocab_size()) + " ids)");
    out += impl_->bytes[std::size_t(id)];
  }
  return out;
}

// ---- the toolkit's own tokenizer.json ------------------------------------------------------------------

std::string tokenizer_json(const corpus::Bpe& bpe) {
  std::string merges;
  for (const corpus::Merge& m : bpe.merges())
    merges += (merges.empty() ? "\n" : ",\n") +
              json_quote(tokenizer_detail::token_text(bpe, m.left) + " " + tokenizer_detail::token_text(bpe, m.right));
  const std::string byte_level = R"({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": false})";
  return R"({"version": "1.0", "truncation": null, "padding": null,
"added_tokens": [{"id": )" + std::to_string(bpe.end_of_text()) + R"(, "content": )" + json_quote(corpus::kEndOfText) +
         R"(, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
"normalizer": null,
"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, )" + byte_level + R"(]},
"post_processor": null,
"decoder": )" + byte_level + R"(,
"model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "", "end_of_word_suffix": "",
"fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
"vocab": )" + bpe.vocab_json() + R"(, "merges": [)" + merges + "\n]}}\n";
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  for (std::size_t at = 0; at < bytes.size();) {
    const auto lead = static_cast<unsigned char>(bytes[at]);
    // The length of the sequence and the range of its second byte (the others: 0x80 … 0xBF).
    const std::size_t n = lead < 0x80                   ? 1
                          : lead >= 0xC2 && lead <= 0xDF ? 2
                          : lead >= 0xE0 && lead <= 0xEF ? 3
                          : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                         : 0;
    const unsigned char low = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
    const unsigned char high = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
    std::size_t good = n ? 1 : 0;  // the bytes of the sequence that are valid so far
    while (good && good < n && at + good < bytes.size()) {
      const auto c = static_cast<unsigned char>(bytes[at + good]);
      if (c < (good == 1 ? low : 0x80) || c > (good == 1 ? high : 0xBF)) break;
      ++good;
    }
    if (n && good == n) out.append(bytes.substr(at, n)), at += n;
    else out += "\xEF\xBF\xBD", at += std::max<std::size_t>(good, 1);  // one U+FFFD per maximal invalid part
  }
  return out;
}

}  // namespace qkvlab::lm
