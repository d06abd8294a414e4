// tokenizer.json (lm/tokenizer_impl.hpp): read, every part checked to be implemented
// (Tokenizer::from_json), and the toolkit's own written (tokenizer_json).
#include <cstdlib>

#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "engine/json.hpp"
#include "lm/tokenizer_impl.hpp"

namespace qkvlab::lm {

using engine::Json;

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

// A number that is 0 as tokenizers reads it (an f32): "dropout": 0.0 is no dropout there.
bool is_zero(const Json& v) { return v.kind == Json::Kind::number && std::strtof(v.text.c_str(), nullptr) == 0.0f; }

[[noreturn]] void unsupported(const std::string& where, const std::string& what) {
  throw UsageError(where + ": " + what + " is not implemented (implemented: BPE with ByteLevel; docs/lm.md, \"Tokenizers\")");
}

void read_model(Tokenizer::Impl& t, const Json& model, const std::string& where) {
  if (model.kind != Json::Kind::object) throw UsageError(where + ": not an object");
  const std::string type = member(model, "type") ? string_field(model, "type", where) : "BPE";  // old files: no type
  if (type != "BPE") unsupported(where, "the model type " + json_quote(type));
  if (const Json* p = member(model, "dropout"); !is_null(p) && !is_zero(*p)) unsupported(where, "BPE dropout");
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
      t.add_merge(m.text.substr(0, space), m.text.substr(space + 1), std::int32_t(k), at);
    } else if (m.kind == Json::Kind::array && m.items.size() == 2 && m.items[0].kind == Json::Kind::string &&
               m.items[1].kind == Json::Kind::string) {
      t.add_merge(m.items[0].text, m.items[1].text, std::int32_t(k), at);
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
    const std::string field = where + ".special_tokens[" + json_quote(name) + "].ids";
    for (const Json& id : ids->items) (sequences ? t.suffix : t.prefix).push_back(t.assigned_id(id_field(id, field), field));
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
  if (t.steps.empty() || !t.steps.back().byte_level)  // empty: a Sequence of none
    unsupported(name + ": pre_tokenizer", "a pre-tokenizer that does not end with ByteLevel");
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

}  // namespace qkvlab::lm
