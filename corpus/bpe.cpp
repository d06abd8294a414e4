#include "corpus/bpe.hpp"

#include "core/errors.hpp"

#include <limits>

namespace qkvlab::corpus {

Bpe::Bpe(std::vector<std::string> bytes, std::vector<Merge> merges, std::int32_t end_of_text)
    : bytes_(std::move(bytes)), merges_(std::move(merges)), end_of_text_(end_of_text) {
  for (std::int32_t id = 0; id < size(); ++id)
    if (bytes_[std::size_t(id)].size() == 1 && id != end_of_text_)
      byte_token_[static_cast<unsigned char>(bytes_[std::size_t(id)][0])] = id;
  rank_.reserve(merges_.size());
  for (std::size_t k = 0; k < merges_.size(); ++k)
    rank_.emplace(pair_key(merges_[k].left, merges_[k].right), Rank{std::int32_t(k), merges_[k].result});
}

std::vector<std::int32_t> Bpe::encode_pretoken(std::string_view bytes) const {
  std::vector<std::int32_t> symbols;
  symbols.reserve(bytes.size());
  for (unsigned char b : bytes) symbols.push_back(byte_token_[b]);
  while (symbols.size() > 1) {
    Merge best{};
    std::int32_t best_rank = std::numeric_limits<std::int32_t>::max();
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = rank_.find(pair_key(symbols[i], symbols[i + 1]));
      if (it != rank_.end() && it->second.rank < best_rank)
        best_rank = it->second.rank, best = {symbols[i], symbols[i + 1], it->second.result};
    }
    if (best_rank == std::numeric_limits<std::int32_t>::max()) break;
    apply_merge(symbols, best);
  }
  return symbols;
}

std::string Bpe::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (std::int32_t id : ids) {
    if (id < 0 || id >= size())
      throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(size()));
    out += bytes_[std::size_t(id)];
  }
  return out;
}

std::string pretoken(std::string_view word) {
  std::string p = " ";
  p += word;
  return p;
}

bool apply_merge(std::vector<std::int32_t>& symbols, const Merge& m) {
  std::size_t out = 0;
  bool merged = false;
  for (std::size_t i = 0; i < symbols.size(); ++out) {
    if (i + 1 < symbols.size() && symbols[i] == m.left && symbols[i + 1] == m.right) {
      symbols[out] = m.result, i += 2, merged = true;
    } else {
      symbols[out] = symbols[i], ++i;
    }
  }
  symbols.resize(out);
  return merged;
}

const std::vector<std::int32_t>& WordEncoder::operator()(const std::string& word) {
  auto it = cache_.find(word);
  if (it == cache_.end()) it = cache_.emplace(word, bpe_.encode_pretoken(pretoken(word))).first;
  return it->second;
}

Encoded encode_words(const Bpe& bpe, const std::vector<std::string>& words) {
  WordEncoder encoder(bpe);
  Encoded out;
  for (std::size_t w = 0; w < words.size(); ++w)
    for (std::int32_t id : encoder(words[w])) out.ids.push_back(id), out.word.push_back(std::int64_t(w));
  return out;
}

}  // namespace qkvlab::corpus
