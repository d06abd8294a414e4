// Byte-level BPE (lm/tokenizer_impl.hpp): the vocabulary and merges, a piece's initial symbols
// (byte_fallback, unk_token), Hugging Face's merge of a word, and a segment's encoding.
#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "corpus/byte_unicode.hpp"
#include "lm/tokenizer_impl.hpp"

namespace qkvlab::lm {

namespace tokenizer_detail {

// The bytes of a token string under GPT-2's map, or its own UTF-8 bytes when a character is outside it.
std::string token_bytes(const std::string& token) {
  auto bytes = corpus::token_text_to_bytes(token);
  return bytes ? *bytes : token;
}

// The string of a corpus::Bpe token in GPT-2's files.
std::string token_text(const corpus::Bpe& bpe, std::int32_t id) {
  return id == bpe.end_of_text() ? std::string(corpus::kEndOfText) : corpus::bytes_to_token_text(bpe.token_bytes(id));
}

}  // namespace tokenizer_detail

namespace {

std::string byte_fallback_token(unsigned char b) {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  return name;
}

// The length of the UTF-8 character that starts with `lead` (1 for a byte that starts none).
std::size_t char_length(unsigned char lead) {
  return lead >= 0xF0 && lead < 0xF8 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
}

}  // namespace

using namespace tokenizer_detail;

void Tokenizer::Impl::add_token(const std::string& text, std::int32_t id, const std::string& where) {
  if (id < 0 || std::size_t(id) >= id_limit)
    throw UsageError(where + ": id " + std::to_string(id) + " is not below the " + std::to_string(id_limit) +
                     " entries of the vocabulary and added tokens");
  if (std::size_t(id) >= bytes.size()) bytes.resize(std::size_t(id) + 1), assigned.resize(std::size_t(id) + 1, false);
  if (assigned[std::size_t(id)] && vocab.count(text) && vocab.at(text) == id) return;  // listed twice, same
  if (assigned[std::size_t(id)]) throw UsageError(where + ": id " + std::to_string(id) + " is given to two tokens");
  if (!vocab.emplace(text, id).second) throw UsageError(where + ": two ids for the token " + json_quote(text));
  bytes[std::size_t(id)] = token_bytes(text), assigned[std::size_t(id)] = true;
}

std::int32_t Tokenizer::Impl::assigned_id(std::int32_t id, const std::string& where) const {
  if (id < 0 || std::size_t(id) >= assigned.size() || !assigned[std::size_t(id)])
    throw UsageError(where + ": id " + std::to_string(id) + " is not a token of the tokenizer (its vocabulary and added "
                     "tokens assign no such id)");
  return id;
}

void Tokenizer::Impl::add_merge(const std::string& left, const std::string& right, std::int32_t rank,
                                const std::string& where) {
  const auto l = vocab.find(left), r = vocab.find(right), m = vocab.find(left + right);
  if (l == vocab.end() || r == vocab.end() || m == vocab.end())
    throw UsageError(where + ": the merge " + json_quote(left + " " + right) +
                     " joins tokens (or makes one) not in the vocabulary");
  merges.insert_or_assign(corpus::pair_key(l->second, r->second), MergeRank{rank, m->second});
}

// The initial symbols of a piece (already in GPT-2's characters): one per character.
std::vector<std::int32_t> Tokenizer::Impl::symbols(const std::string& piece) const {
  std::vector<std::int32_t> out;
  for (std::size_t at = 0; at < piece.size();) {
    const std::size_t n = std::min(char_length(static_cast<unsigned char>(piece[at])), piece.size() - at);
    const std::string c = piece.substr(at, n);
    at += n;
    if (const auto it = vocab.find(c); it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    if (byte_fallback) {  // the character's own UTF-8 bytes, as tokenizers does
      std::vector<std::int32_t> fallback;
      for (unsigned char b : c)
        if (const auto f = vocab.find(byte_fallback_token(b)); f != vocab.end())
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
std::vector<std::int32_t> Tokenizer::Impl::merge(std::vector<std::int32_t> ids) const {
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

void Tokenizer::Impl::encode_segment(std::string_view segment, std::vector<std::int32_t>& out, std::unordered_map<std::string, std::vector<std::int32_t>>& cache) const {
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

}  // namespace qkvlab::lm
