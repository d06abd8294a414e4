// Bpe::learn: merges over the distinct pre-tokens' frequency table. Each pair's
// count and the words that hold it are kept up to date as merges rewrite words;
// a max-heap gives the next pair, its stale entries (count changed since they
// were pushed) skipped when popped.
#include "corpus/bpe.hpp"
#include "corpus/byte_unicode.hpp"

#include "core/errors.hpp"

#include <algorithm>
#include <queue>

namespace qkvlab::corpus {

namespace {

using PairKey = std::uint64_t;

std::int32_t left_of(PairKey k) { return std::int32_t(k >> 32); }
std::int32_t right_of(PairKey k) { return std::int32_t(k & 0xffffffffu); }

struct Word {
  std::vector<std::int32_t> symbols;
  std::int64_t count = 0;
  std::int64_t seen_at = -1;  // the last merge that visited it
};

struct Entry {
  std::int64_t count;
  PairKey pair;
};

class Learner {
 public:
  Learner(const std::unordered_map<std::string, std::int64_t>& counts) : bytes_(256), heap_(Order{&bytes_}) {
    for (int b = 0; b < 256; ++b) bytes_[std::size_t(gpt2_byte_rank(static_cast<unsigned char>(b)))] = std::string(1, char(b));
    for (std::int32_t id = 0; id < 256; ++id) id_of_.emplace(bytes_[std::size_t(id)], id);
    std::vector<std::pair<std::string, std::int64_t>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [text, count] : sorted) {
      Word w{{}, count};
      for (unsigned char b : text) w.symbols.push_back(std::int32_t(gpt2_byte_rank(b)));
      words_.push_back(std::move(w));
      add_pairs(std::int32_t(words_.size() - 1), +1);
    }
    push_changed();
  }

  // Learns until the vocabulary (with <|endoftext|>) holds vocab_size tokens.
  void run(int vocab_size) {
    while (int(bytes_.size()) < vocab_size - 1 && !heap_.empty()) {
      const Entry top = heap_.top();
      heap_.pop();
      const auto it = count_.find(top.pair);
      if (it == count_.end() || it->second != top.count) continue;  // stale
      merge(top.pair);
    }
  }

  std::vector<std::string> bytes_;  // each id's bytes
  std::vector<Merge> merges_;

 private:
  // Higher count first; on a tie the smaller (left bytes, right bytes).
  struct Order {
    const std::vector<std::string>* bytes;
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.count != b.count) return a.count < b.count;
      const auto& s = *bytes;
      const int left = s[std::size_t(left_of(a.pair))].compare(s[std::size_t(left_of(b.pair))]);
      if (left != 0) return left > 0;
      return s[std::size_t(right_of(a.pair))] > s[std::size_t(right_of(b.pair))];
    }
  };

  // Counts word w's pairs (sign −1: uncounts them). Adding, it is listed under
  // the pairs that hold `listed` (any pair when −1): the others list it already.
  void add_pairs(std::int32_t w, int sign, std::int32_t listed = -1) {
    const Word& word = words_[std::size_t(w)];
    for (std::size_t i = 0; i + 1 < word.symbols.size(); ++i) {
      const PairKey k = pair_key(word.symbols[i], word.symbols[i + 1]);
      change_[k] += sign * word.count;
      if (sign > 0 && (listed < 0 || word.symbols[i] == listed || word.symbols[i + 1] == listed)) where_[k].push_back(w);
    }
  }

  // Applies the pending count changes; pushes the new counts.
  void push_changed() {
    for (const auto& [k, delta] : change_) {
      if (delta == 0) continue;
      const std::int64_t now = count_[k] += delta;
      if (now > 0) heap_.push({now, k});
      else count_.erase(k), where_.erase(k);
    }
    change_.clear();
  }

  void merge(PairKey pair) {
    const std::string joined = bytes_[std::size_t(left_of(pair))] + bytes_[std::size_t(right_of(pair))];
    auto [it, fresh] = id_of_.emplace(joined, std::int32_t(bytes_.size()));
    if (fresh) bytes_.push_back(joined);
    const Merge m{left_of(pair), right_of(pair), it->second};
    merges_.push_back(m);
    const std::vector<std::int32_t> holders = std::move(where_[pair]);
    for (std::int32_t w : holders) {
      Word& word = words_[std::size_t(w)];
      if (word.seen_at == std::int64_t(merges_.size())) continue;
      word.seen_at = std::int64_t(merges_.size());
      std::vector<std::int32_t> after = word.symbols;
      if (!apply_merge(after, m)) continue;
      add_pairs(w, -1);
      word.symbols = std::move(after);
      add_pairs(w, +1, m.result);
    }
    push_changed();
  }

  std::vector<Word> words_;
  std::unordered_map<std::string, std::int32_t> id_of_;
  std::unordered_map<PairKey, std::int64_t> count_;
  std::unordered_map<PairKey, std::vector<std::int32_t>> where_;  // may hold stale or repeated words
  std::unordered_map<PairKey, std::int64_t> change_;  // pending, per pair
  std::priority_queue<Entry, std::vector<Entry>, Order> heap_;
};

}  // namespace

Bpe Bpe::learn(const std::unordered_map<std::string, std::int64_t>& pretoken_counts, int vocab_size) {
  if (vocab_size < 257)
    throw UsageError("a vocabulary of " + std::to_string(vocab_size) + " tokens: at least 257 (256 bytes and " +
                     std::string(kEndOfText) + ") are needed");
  for (const auto& [text, count] : pretoken_counts)  // else a merge could learn the special token's bytes
    if (text.find(kEndOfText) != std::string::npos)
      throw UsageError("the pre-token '" + text + "' holds " + std::string(kEndOfText) + ", the special token");
  Learner learner(pretoken_counts);
  learner.run(vocab_size);
  std::vector<std::string> bytes = std::move(learner.bytes_);
  const auto end_of_text = std::int32_t(bytes.size());
  bytes.emplace_back(kEndOfText);
  return Bpe(std::move(bytes), std::move(learner.merges_), end_of_text);
}

}  // namespace qkvlab::corpus
