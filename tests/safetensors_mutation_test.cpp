// Seeded mutations of checkpoint files against every reader of them: the
// toolkit's safetensors reader (engine::parse_safetensors), the in-place one
// under Hugging Face directories (engine::view_safetensors, MappedSafeTensors),
// the config.json and model.safetensors.index.json readers (lm/hf_config.hpp),
// and the whole loader (lm::open_model + read_parameters) on a mutated
// directory. Mutations: truncation at every length, header lengths beyond the
// file, offsets out of range, reversed, overlapping or leaving gaps, shapes
// whose product overflows, invalid JSON (flips, insertions, deletions, deep
// nesting), wrong dtypes, random byte flips anywhere.
//
// Each input must be accepted or rejected with std::runtime_error (UsageError
// is one) — never a crash, another exception, a hang (each read is timed), or
// an allocation the input's size does not justify. This binary counts every
// operator new: the peak of live heap during a read may not exceed
//   256 bytes per input byte + 4 MiB,
// the JSON tree's worst case (an 88-byte node per 2 bytes of header, vectors
// grown by doubling: up to ~130 bytes per byte while one grows) plus the
// tensor data copied once; the largest single allocation (the JSON tree's
// longest vector of nodes, ≤ 88 bytes per byte) may not exceed 128 bytes per
// input byte + 1 MiB. A control plants an allocation sized from a header
// field (a shape trusted before it is checked against the file), which both
// bounds must catch.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "engine/json.hpp"
#include "engine/rng.hpp"
#include "engine/safetensors.hpp"
#include "lm/checkpoint.hpp"
#include "lm/hf.hpp"
#include "lm/hf_config.hpp"
#include "lm/model_files.hpp"
#include "lm/parameters.hpp"
#include "scratch_dir.hpp"

// ---- a counting allocator for this binary -----------------------------------------------------
namespace {
std::atomic<std::int64_t> g_live{0}, g_peak{0}, g_largest{0};

void* counted(std::size_t n, std::size_t align = 0) {
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                               : std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  const std::int64_t size = std::int64_t(malloc_usable_size(p));
  const std::int64_t live = g_live.fetch_add(size) + size;
  for (std::int64_t peak = g_peak.load(); live > peak && !g_peak.compare_exchange_weak(peak, live);) {
  }
  for (std::int64_t big = g_largest.load(); std::int64_t(n) > big && !g_largest.compare_exchange_weak(big, std::int64_t(n));) {
  }
  return p;
}

void uncounted(void* p) noexcept {
  if (!p) return;
  g_live.fetch_sub(std::int64_t(malloc_usable_size(p)));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void* operator new(std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted(n, std::size_t(a)); }
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t) noexcept { uncounted(p); }
void operator delete(void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::align_val_t) noexcept { uncounted(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { uncounted(p); }

namespace {

namespace fs = std::filesystem;
using namespace qkvlab;
using Bytes = std::vector<std::uint8_t>;
using Reader = std::function<void(const Bytes&)>;

struct Tally {
  int accepted = 0, rejected = 0;
  std::int64_t worst_peak = 0, worst_largest = 0;  // bytes above the baseline
  double slowest = 0;                               // seconds
};

std::int64_t peak_bound(std::size_t size) { return 256 * std::int64_t(size) + (4 << 20); }
std::int64_t largest_bound(std::size_t size) { return 128 * std::int64_t(size) + (1 << 20); }

// Runs one reader on one input under the rules above; `what` names the mutation in failures.
void check(const Reader& read, const Bytes& input, const std::string& what, Tally& t,
           std::size_t justified_size = 0) {
  const std::size_t size = justified_size ? justified_size : input.size();
  const std::int64_t base = g_live.load();
  g_peak = base, g_largest = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    read(input);
    ++t.accepted;
  } catch (const std::runtime_error&) {
    ++t.rejected;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << typeid(e).name() << ": " << e.what();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::int64_t peak = g_peak.load() - base, largest = g_largest.load();
  t.worst_peak = std::max(t.worst_peak, peak), t.worst_largest = std::max(t.worst_largest, largest);
  t.slowest = std::max(t.slowest, seconds);
  EXPECT_LE(peak, peak_bound(size)) << what << " (" << size << " bytes)";
  EXPECT_LE(largest, largest_bound(size)) << what << " (" << size << " bytes)";
  EXPECT_LT(seconds, 2.0) << what;
}

std::string text_of(const Bytes& b) { return std::string(b.begin(), b.end()); }
Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

Bytes file_bytes(const std::string& header, const Bytes& data) {
  Bytes out;
  for (int k = 0; k < 8; ++k) out.push_back(std::uint8_t(std::uint64_t(header.size()) >> (8 * k)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The toolkit's own kind of file: F64, F32 and BF16 tensors and metadata.
Bytes own_seed() {
  engine::SafeTensors f;
  engine::Rng rng(1);
  f.tensors["h.0.attn.q.weight"] = engine::to_tensor(engine::normal_matrix<float>(4, 6, 1.0, rng));
  f.tensors["wte"] = engine::to_tensor(engine::normal_matrix<double>(3, 2, 1.0, rng));
  f.tensors["half"] = engine::Tensor{engine::DType::BF16, {5}, Bytes(10, 0x3f)};
  f.metadata = {{"format", "qkvlab-lm"}, {"layers", "2"}};
  return engine::serialize_safetensors(f);
}

// A file as other writers make it: spaces, metadata last, scalar and mask-like tensors, mixed dtypes.
Bytes hf_seed() {
  const std::string header =
      "{\"transformer.wte.weight\": {\"dtype\": \"F16\", \"shape\": [3, 2], \"data_offsets\": [0, 12]}, "
      "\"transformer.h.0.attn.masked_bias\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [12, 16]}, "
      "\"transformer.h.0.attn.bias\": {\"dtype\": \"BOOL\", \"shape\": [1, 1, 2, 2], \"data_offsets\": [16, 20]}, "
      "\"ids\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [20, 28]}, "
      "\"__metadata__\": {\"format\": \"pt\"}}";
  Bytes data(28);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::uint8_t(i * 37 + 1);
  return file_bytes(header, data);
}

std::vector<Reader> safetensors_readers() {
  return {[](const Bytes& b) { engine::parse_safetensors(b, "mutant"); },
          [](const Bytes& b) {
            const auto view = engine::view_safetensors(b, "mutant");
            std::vector<float> out;  // decode every float tensor, as the loader does
            for (const auto& [name, e] : view.tensors)
              if (engine::is_float(e.dtype)) {
                out.resize(e.elements());
                engine::decode_floats(e.dtype, view.bytes(e).data(), out.size(), out.data());
              }
          }};
}

// Every mutation of the list on every reader.
void mutate_all(const Bytes& seed, const std::vector<Reader>& readers, Tally& t) {
  auto each = [&](const Bytes& b, const std::string& what) {
    for (const auto& read : readers) check(read, b, what, t);
  };
  each(seed, "seed");
  for (std::size_t n = 0; n < seed.size(); ++n) each(Bytes(seed.begin(), seed.begin() + std::ptrdiff_t(n)), "truncated to " + std::to_string(n));
  // Header lengths beyond the file, and around it.
  const std::uint64_t header = [&] { std::uint64_t h = 0; for (int k = 0; k < 8; ++k) h |= std::uint64_t(seed[k]) << (8 * k); return h; }();
  for (std::uint64_t h : std::initializer_list<std::uint64_t>{header - 1, header + 1, seed.size(), seed.size() - 7,
                                                                100'000'001, std::uint64_t(1) << 32,
                                                                std::uint64_t(1) << 63, ~std::uint64_t(0)}) {
    Bytes b = seed;
    for (int k = 0; k < 8; ++k) b[std::size_t(k)] = std::uint8_t(h >> (8 * k));
    each(b, "header length " + std::to_string(h));
  }
  // Random flips anywhere, and in the header; insertions and deletions in the header.
  engine::Rng rng(2024);
  const std::size_t end = std::min<std::size_t>(seed.size(), 8 + header);
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes b = seed;
    const bool in_header = trial % 2;
    for (int flips = 1 + int(rng.next_u64() % 4); flips > 0; --flips) {
      const std::size_t at = in_header ? 8 + rng.next_u64() % (end - 8) : rng.next_u64() % b.size();
      b[at] = trial % 3 == 0 ? std::uint8_t(b[at] ^ (1u << (rng.next_u64() % 8))) : std::uint8_t(rng.next_u64());
    }
    each(b, "flips, trial " + std::to_string(trial));
  }
  for (int trial = 0; trial < 500; ++trial) {
    Bytes b = seed;
    const std::size_t at = 8 + rng.next_u64() % (end - 8);
    if (trial % 2)
      b.erase(b.begin() + std::ptrdiff_t(at));
    else
      b.insert(b.begin() + std::ptrdiff_t(at), "{}[],:\"0e-"[rng.next_u64() % 10]);
    each(b, "insertion/deletion, trial " + std::to_string(trial));
  }
}

TEST(SafetensorsMutation, OwnAndHfFilesUnderEveryMutation) {
  for (const Bytes& seed : {own_seed(), hf_seed()}) {
    Tally t;
    mutate_all(seed, safetensors_readers(), t);
    EXPECT_GT(t.accepted, 0);
    EXPECT_GT(t.rejected, int(seed.size()));  // every truncation at least
    std::cout << "safetensors seed of " << seed.size() << " bytes: accepted " << t.accepted << ", rejected " << t.rejected
              << ", worst peak heap " << t.worst_peak << " B, largest allocation " << t.worst_largest << " B, slowest "
              << t.slowest * 1e3 << " ms\n";
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
}

std::string long_shape(int ones) {
  std::string shape = "[";
  for (int i = 0; i < ones; ++i) shape += "1,";
  return shape + "16]";
}

TEST(SafetensorsMutation, OffsetsShapesAndDtypesThatLie) {
  const Bytes data(16, 0x41);
  const std::vector<std::pair<std::string, Bytes>> cases = {
      {"offsets past the data", file_bytes("{" + entry("a", "F32", "[4]", "[4,20]") + "}", data)},
      {"offsets at 2^64-1", file_bytes("{" + entry("a", "F32", "[4]", "[18446744073709551599,18446744073709551615]") + "}", data)},
      {"offsets beyond 2^64", file_bytes("{" + entry("a", "F32", "[4]", "[0,18446744073709551616]") + "}", data)},
      {"offsets reversed", file_bytes("{" + entry("a", "F32", "[0]", "[16,0]") + "}", data)},
      {"offsets negative", file_bytes("{" + entry("a", "F32", "[4]", "[-16,0]") + "}", data)},
      {"offsets fractional", file_bytes("{" + entry("a", "F32", "[4]", "[0.0,16]") + "}", data)},
      {"offsets overlapping", file_bytes("{" + entry("a", "F32", "[3]", "[0,12]") + "," + entry("b", "F32", "[2]", "[8,16]") + "}", data)},
      {"offsets identical", file_bytes("{" + entry("a", "F32", "[4]", "[0,16]") + "," + entry("b", "F32", "[4]", "[0,16]") + "}", data)},
      {"gap", file_bytes("{" + entry("a", "F32", "[2]", "[8,16]") + "}", data)},
      {"three offsets", file_bytes("{" + entry("a", "F32", "[4]", "[0,8,16]") + "}", data)},
      {"product overflows", file_bytes("{" + entry("a", "F32", "[4294967296,4294967296,4294967296]", "[0,16]") + "}", data)},
      {"product overflows by the dtype", file_bytes("{" + entry("a", "F64", "[2305843009213693952]", "[0,16]") + "}", data)},
      {"product wraps to the span", file_bytes("{" + entry("a", "U8", "[4294967296,4294967296,16]", "[0,16]") + "}", data)},
      {"a zero extent hides a huge one", file_bytes("{" + entry("a", "F32", "[0,18446744073709551615]", "[0,0]") + "," + entry("b", "F32", "[4]", "[0,16]") + "}", data)},
      {"a long shape", file_bytes("{" + entry("a", "U8", long_shape(10000), "[0,16]") + "}", data)},
      {"dtype unknown", file_bytes("{" + entry("a", "F33", "[4]", "[0,16]") + "}", data)},
      {"dtype lower case", file_bytes("{" + entry("a", "f32", "[4]", "[0,16]") + "}", data)},
      {"dtype a number", file_bytes("{\"a\":{\"dtype\":32,\"shape\":[4],\"data_offsets\":[0,16]}}", data)},
      {"dtype of the wrong size", file_bytes("{" + entry("a", "BF16", "[4]", "[0,16]") + "}", data)},
      {"deep nesting", file_bytes(std::string(200000, '['), data)},
      {"unterminated string", file_bytes("{\"a", data)},
      {"duplicate key", file_bytes("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("a", "F32", "[2]", "[8,16]") + "}", data)},
      {"metadata not strings", file_bytes("{\"__metadata__\":{\"k\":[1]}," + entry("a", "F32", "[4]", "[0,16]") + "}", data)},
  };
  Tally t;
  for (const auto& [what, bytes] : cases)
    for (const auto& read : safetensors_readers()) check(read, bytes, what, t);
  EXPECT_EQ(t.accepted, 2 * 2) << "only the zero-extent and the long-shape cases are valid files";
  // The same through a file on disk and its memory mapping.
  test_support::ScratchDir dir;
  for (const auto& [what, bytes] : cases) {
    std::ofstream(dir / "m.safetensors", std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    check([&](const Bytes&) { engine::MappedSafeTensors(dir / "m.safetensors"); }, bytes, what + " (mapped)", t);
  }
  check([&](const Bytes&) { engine::MappedSafeTensors(dir / "absent.safetensors"); }, {}, "absent file", t);
  std::ofstream(dir / "empty.safetensors").close();
  check([&](const Bytes&) { engine::MappedSafeTensors(dir / "empty.safetensors"); }, {}, "empty file", t);
  check([&](const Bytes&) { engine::MappedSafeTensors(dir.path()); }, {}, "a directory", t);
}

TEST(SafetensorsMutation, TheAllocationBoundCatchesAPlantedBug) {
  // Control: a reader that trusts a shape before checking it against the file allocates what no file justifies.
  const std::string header_text = "{" + entry("a", "F32", "[10000000]", "[0,16]") + "}";
  const Bytes bytes = file_bytes(header_text, Bytes(16));
  const std::int64_t base = g_live.load();
  g_peak = base, g_largest = 0;
  try {
    const engine::Json header = engine::parse_json(header_text);
    std::vector<float> trusted(engine::json_to_u64(header.items[0].items[1].items[0], "shape"));
    EXPECT_EQ(trusted.size(), 10000000u);
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  EXPECT_GT(g_largest.load(), largest_bound(bytes.size()));
  EXPECT_GT(g_peak.load() - base, peak_bound(bytes.size()));
}

TEST(SafetensorsMutation, ConfigAndIndexReaders) {
  const std::string config =
      R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "vocab_size": 50,
          "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null, "tie_word_embeddings": false,
          "architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16"})";
  const std::string gpt2 = R"({"model_type": "gpt2", "n_embd": 32, "n_head": 4, "n_layer": 2, "n_positions": 16,
                               "vocab_size": 61, "activation_function": "gelu_new", "n_inner": null})";
  const std::string index =
      R"({"metadata": {"total_size": 1234}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
          "model.norm.weight": "model-00002-of-00002.safetensors", "lm_head.weight": "model-00002-of-00002.safetensors"}})";
  const std::vector<Reader> config_readers = {[](const Bytes& b) { lm::parse_hf_config(text_of(b), "config.json"); }};
  const std::vector<Reader> index_readers = {[](const Bytes& b) { lm::parse_safetensors_index(text_of(b), "index"); }};
  for (const auto& [seed, readers] : {std::pair{config, config_readers}, std::pair{gpt2, config_readers}, std::pair{index, index_readers}}) {
    Tally t;
    const Bytes s = bytes_of(seed);
    for (std::size_t n = 0; n <= s.size(); ++n) check(readers[0], Bytes(s.begin(), s.begin() + std::ptrdiff_t(n)), "truncated to " + std::to_string(n), t);
    engine::Rng rng(7);
    for (int trial = 0; trial < 3000; ++trial) {
      Bytes b = s;
      for (int flips = 1 + int(rng.next_u64() % 3); flips > 0; --flips) b[rng.next_u64() % b.size()] = std::uint8_t(" {}[]:,\"0123456789-.eEtrufalsn\\"[rng.next_u64() % 32]);
      check(readers[0], b, "flips, trial " + std::to_string(trial), t);
    }
    EXPECT_EQ(t.accepted > 0, true);
    std::cout << "JSON seed: accepted " << t.accepted << ", rejected " << t.rejected << ", worst peak " << t.worst_peak
              << " B, slowest " << t.slowest * 1e3 << " ms\n";
  }
  // Values that lie: sizes out of range, wrong types, nesting, a shard name that leaves the directory.
  Tally t;
  for (const std::string bad :
       {R"({"model_type": "gpt2", "n_layer": 99999999999})", R"({"model_type": "gpt2", "n_embd": -1})",
        R"({"model_type": "gpt2", "n_head": 0})", R"({"model_type": "gpt2", "n_embd": 1e400})",
        R"({"model_type": "llama", "hidden_size": 65536, "num_hidden_layers": 1024, "vocab_size": 16777217})",
        R"({"model_type": "llama", "rms_norm_eps": "1e-6"})", R"({"model_type": ["llama"]})", R"([])", R"("gpt2")",
        R"({"weight_map": {"a": "../x.safetensors"}})", R"({"weight_map": {"a": "/etc/passwd"}})",
        R"({"weight_map": {"a": 3}})", R"({"weight_map": {}})", R"({"weight_map": []})"}) {
    check(config_readers[0], bytes_of(bad), bad, t);
    check(index_readers[0], bytes_of(bad), bad, t);
  }
  EXPECT_EQ(t.accepted, 0);
  check(config_readers[0], bytes_of(std::string(100000, '[')), "deep nesting", t);
  check(index_readers[0], bytes_of(std::string(100000, '{')), "deep nesting", t);
}

// The loader on a mutated Hugging Face directory: every truncation of
// model.safetensors and config.json, flips in both.
TEST(SafetensorsMutation, TheLoaderOnMutatedDirectories) {
  test_support::ScratchDir dir;
  for (const lm::Family family : {lm::Family::gpt2, lm::Family::llama}) {
    lm::Config c = lm::family_defaults(family, 1, 8, 2, 11, 4);
    if (family == lm::Family::llama) c.kv_heads = 1;
    lm::Checkpoint ck;
    ck.config = c;
    ck.values = lm::initial_values<float>(c, lm::parameter_layout(c, lm::make_plan(c)), 1);
    const fs::path hf = dir / "hf";
    lm::export_hf(ck, hf);
    const auto slurp = [](const fs::path& p) {
      std::ifstream in(p, std::ios::binary);
      return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    const Bytes model = slurp(hf / "model.safetensors"), config = slurp(hf / "config.json");
    const auto write = [](const fs::path& p, const Bytes& b) {
      std::ofstream(p, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    };
    const Reader load = [&](const Bytes&) {
      const lm::ModelFiles files = lm::open_model(hf);
      const auto layout = lm::parameter_layout(files.config, lm::make_plan(files.config));
      double sum = 0;
      lm::read_parameters(files, layout, [&](const engine::ParameterSpec& s, const float* x) { sum += x[s.size() - 1]; });
    };
    Tally t;
    const std::size_t justified = model.size() + config.size();
    for (const auto& [name, original] : {std::pair{"model.safetensors", model}, std::pair{"config.json", config}}) {
      for (std::size_t n = 0; n < original.size(); ++n) {
        write(hf / name, Bytes(original.begin(), original.begin() + std::ptrdiff_t(n)));
        check(load, {}, std::string(name) + " truncated to " + std::to_string(n), t, justified);
      }
      engine::Rng rng(11);
      for (int trial = 0; trial < 400; ++trial) {
        Bytes b = original;
        b[rng.next_u64() % b.size()] = std::uint8_t(rng.next_u64());
        write(hf / name, b);
        check(load, {}, std::string(name) + " flip, trial " + std::to_string(trial), t, justified);
      }
      write(hf / name, original);
    }
    check(load, {}, "restored", t, justified);
    EXPECT_GT(t.rejected, int(model.size()));
    std::cout << lm::to_string(family) << " directory (" << justified << " bytes): accepted " << t.accepted << ", rejected "
              << t.rejected << ", worst peak " << t.worst_peak << " B, slowest " << t.slowest * 1e3 << " ms\n";
    fs::remove_all(hf);
  }
}

}  // namespace
