// Hugging Face BPE tokenizers (lm/tokenizer.hpp): loading, encoding, decoding. The parts live by
// concern in tokenizer_pattern.cpp, tokenizer_bpe.cpp and tokenizer_json.cpp (lm/tokenizer_impl.hpp).
#include "lm/tokenizer.hpp"

#include <algorithm>

#include "core/errors.hpp"
#include "core/text_file.hpp"
#include "lm/checkpoint.hpp"
#include "lm/tokenizer_impl.hpp"

namespace qkvlab::lm {

namespace fs = std::filesystem;

Tokenizer Tokenizer::from_bpe(const corpus::Bpe& bpe, const std::string& name) {
  auto t = std::make_unique<Impl>();
  t->source = name;
  t->id_limit = std::size_t(bpe.size());
  for (std::int32_t id = 0; id < bpe.size(); ++id) t->add_token(tokenizer_detail::token_text(bpe, id), id, name);
  for (std::size_t k = 0; k < bpe.merges().size(); ++k) {  // a pair listed again takes the later rank (add_merge)
    const corpus::Merge& m = bpe.merges()[k];
    t->merges.insert_or_assign(corpus::pair_key(m.left, m.right), tokenizer_detail::MergeRank{std::int32_t(k), m.result});
  }
  t->steps.push_back(tokenizer_detail::byte_level(false, true, name));
  t->set_added({std::string(corpus::kEndOfText)});
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::load(const fs::path& dir) {
  verify_manifest_if_present(dir, is_own_checkpoint(dir));  // a checkpoint's tokenizer.json is one of its files
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

std::vector<std::int32_t> Tokenizer::encode_pieces(std::string_view text, int length) const {
  const std::vector<std::int32_t>&prefix = impl_->prefix, &suffix = impl_->suffix;
  const std::size_t special = prefix.size() + suffix.size();
  if (length <= 0 || std::size_t(length) <= special)
    throw UsageError(impl_->source + ": pieces of " + std::to_string(length) + " tokens leave no room for text beside the " +
                     std::to_string(special) + " special tokens its post-processor adds to each");
  const std::vector<std::int32_t> ids = encode(text);
  const auto first = ids.begin() + std::ptrdiff_t(prefix.size()), last = ids.end() - std::ptrdiff_t(suffix.size());
  const std::size_t each = std::size_t(length) - special, pieces = std::size_t(last - first) / each;
  std::vector<std::int32_t> out;
  out.reserve(pieces * std::size_t(length));
  for (std::size_t k = 0; k < pieces; ++k) {
    out.insert(out.end(), prefix.begin(), prefix.end());
    out.insert(out.end(), first + std::ptrdiff_t(k * each), first + std::ptrdiff_t((k + 1) * each));
    out.insert(out.end(), suffix.begin(), suffix.end());
  }
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
