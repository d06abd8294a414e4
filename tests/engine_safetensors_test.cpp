// Safetensors checkpoints: bit-exact round trips, the byte layout the format
// prescribes, and rejection (std::runtime_error with a one-line message, never
// a crash) of every kind of malformed or truncated file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/json.hpp"
#include "engine/rng.hpp"
#include "engine/safetensors.hpp"

namespace {

using namespace qkvlab::engine;
using Bytes = std::vector<std::uint8_t>;
namespace fs = std::filesystem;

// Bitwise equality, so NaN payloads and the sign of zero count too.
template <class S>
bool same_bits(const Mat<S>& a, const Mat<S>& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(S) * std::size_t(a.size())) == 0;
}

template <class S>
Mat<S> awkward_values() {
  using limits = std::numeric_limits<S>;
  Mat<S> M(3, 4);
  M << S(1) / S(3), -S(0), S(0), limits::quiet_NaN(),                                //
      limits::infinity(), -limits::infinity(), limits::denorm_min(), limits::max(),  //
      limits::lowest(), limits::epsilon(), S(-2.5), limits::min();
  return M;
}

fs::path temp_path(const std::string& name) { return fs::temp_directory_path() / ("engine_st_" + name); }

TEST(EngineSafetensors, RoundTripIsBitExactWithMetadata) {
  Rng rng(1);
  SafeTensors file;
  file.tensors["blocks.0.W_Q"] = to_tensor(normal_matrix<double>(4, 6, 1.0, rng));
  file.tensors["awkward_f64"] = to_tensor(awkward_values<double>());
  file.tensors["awkward_f32"] = to_tensor(awkward_values<float>());
  file.tensors["empty"] = to_tensor(Mat<float>(0, 3));
  file.metadata = {{"d", "64"},
                   {"variant", "skipv1"},
                   {"quote\"back\\slash", "line\nbreak\x01 tab\t"},
                   {"σ²", "ünïcode"},
                   {"", ""}};
  const fs::path path = temp_path("roundtrip.safetensors");
  save_safetensors(path, file);
  const SafeTensors loaded = load_safetensors(path);
  fs::remove(path);

  EXPECT_EQ(loaded.metadata, file.metadata);
  ASSERT_EQ(loaded.tensors.size(), file.tensors.size());
  for (const auto& [name, tensor] : file.tensors) {
    const Tensor& back = loaded.tensors.at(name);
    EXPECT_EQ(back.dtype, tensor.dtype) << name;
    EXPECT_EQ(back.shape, tensor.shape) << name;
    EXPECT_EQ(back.data, tensor.data) << name;
  }
  EXPECT_TRUE(same_bits(to_matrix<double>(loaded.tensors.at("awkward_f64"), "awkward_f64"),
                        awkward_values<double>()));
  EXPECT_TRUE(
      same_bits(to_matrix<float>(loaded.tensors.at("awkward_f32"), "awkward_f32"), awkward_values<float>()));
}

TEST(EngineSafetensors, LayoutFollowsTheFormat) {
  // M = [[1, 2], [3, 4]] as F64: row-major little-endian data after an 8-byte header length.
  SafeTensors file;
  Mat<double> M(2, 2);
  M << 1, 2, 3, 4;
  file.tensors["M"] = to_tensor(M);
  file.metadata["k"] = "v";
  const Bytes bytes = serialize_safetensors(file);
  std::uint64_t n = 0;
  for (int k = 0; k < 8; ++k) n |= std::uint64_t(bytes[k]) << (8 * k);
  ASSERT_EQ(bytes.size(), 8 + n + 32);
  EXPECT_EQ((8 + n) % 8, 0u);  // data aligned to 8 bytes
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + std::ptrdiff_t(n));
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"__metadata__":{"k":"v"},"M":{"dtype":"F64","shape":[2,2],"data_offsets":[0,32]}})");
  for (int i = 0; i < 4; ++i) {
    double x;
    std::memcpy(&x, bytes.data() + 8 + n + 8 * i, 8);  // the host is little-endian (x86-64, aarch64)
    EXPECT_EQ(x, i + 1.0);
  }
}

TEST(EngineSafetensors, EveryTensorIsAlignedToItsElementSize) {
  // F64 data first: "b" (F64) at offset 0, then "a" and "c" (F32) after it.
  SafeTensors file;
  file.tensors["a"] = to_tensor<float>(Mat<float>::Ones(1, 1));
  file.tensors["b"] = to_tensor<double>(Mat<double>::Ones(1, 1));
  file.tensors["c"] = to_tensor<float>(Mat<float>::Ones(1, 1));
  const Bytes bytes = serialize_safetensors(file);
  const std::string header(bytes.begin() + 8, bytes.end() - 16);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"b":{"dtype":"F64","shape":[1,1],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"F32","shape":[1,1],"data_offsets":[8,12]},)"
            R"("c":{"dtype":"F32","shape":[1,1],"data_offsets":[12,16]}})");
}

// [8-byte length][header][data], the way another writer might produce it.
Bytes file_bytes(const std::string& header, const Bytes& data) {
  Bytes bytes;
  for (int k = 0; k < 8; ++k) bytes.push_back(std::uint8_t(std::uint64_t(header.size()) >> (8 * k)));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

Bytes floats(std::initializer_list<float> values) {
  Bytes out(values.size() * 4);
  std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

TEST(EngineSafetensors, ReadsAFileFromAnotherWriter) {
  // Whitespace, unpadded header, metadata last, tensors out of name order, a 1-D tensor, an escaped key.
  const std::string header =
      "{ \"b\" : {\"shape\": [2], \"dtype\": \"F32\", \"data_offsets\": [0, 8]},\n"
      "  \"\\u03c3\": {\"dtype\": \"F32\", \"shape\": [1, 1], \"data_offsets\": [8, 12]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"} }";
  const SafeTensors file = parse_safetensors(file_bytes(header, floats({1.5f, -2.0f, 7.0f})));
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.tensors.at("b").shape, (std::vector<std::uint64_t>{2}));
  EXPECT_EQ(to_matrix<float>(file.tensors.at("σ"), "σ")(0, 0), 7.0f);
  EXPECT_EQ(file.tensors.at("b").data, floats({1.5f, -2.0f}));
}

TEST(EngineSafetensors, JsonParserCoversTheGrammar) {
  const Json j =
      parse_json(R"( {"s": "\u00e9\ud83d\ude00\n", "n": -1.5e3, "l": [true, false, null], "o": {}} )");
  ASSERT_EQ(j.keys, (std::vector<std::string>{"s", "n", "l", "o"}));
  EXPECT_EQ(j.items[0].text, "é😀\n");
  EXPECT_EQ(j.items[1].text, "-1.5e3");
  EXPECT_EQ(j.items[2].items[2].text, "null");
  EXPECT_EQ(j.items[3].kind, Json::Kind::object);
  for (const char* bad : {"truenull", "tru", "[1,]", "{\"a\" 1}", "01", "-", "1.", "\"\x01\"", "\"open"})
    EXPECT_THROW(parse_json(bad), std::runtime_error) << bad;
  // The writer's half (core/json_text.hpp) and the parser agree.
  const std::string raw = "a\"b\\c\n\x01";
  EXPECT_EQ(qkvlab::json_quote(raw), R"("a\"b\\c\u000a\u0001")");
  EXPECT_EQ(parse_json(qkvlab::json_quote(raw)).text, raw);
}

// Parsing must throw std::runtime_error whose one-line message contains `fragment`.
void expect_rejected(const Bytes& bytes, const std::string& fragment) {
  try {
    parse_safetensors(bytes, "case");
    ADD_FAILURE() << "accepted; expected an error containing \"" << fragment << "\"";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("safetensors: case: ", 0), 0u) << message;
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":" + offsets +
         "}";
}

TEST(EngineSafetensors, RejectsBadHeaderLength) {
  expect_rejected(Bytes{1, 2, 3}, "fewer than the 8-byte header length");
  Bytes too_long = file_bytes("{}", {});
  too_long[0] = 200;
  expect_rejected(too_long, "bad header length 200");
  Bytes huge = file_bytes("{}", {});
  huge[7] = 0x80;  // 2^63 + 2
  expect_rejected(huge, "bad header length");
  expect_rejected(file_bytes("", {}), "not valid JSON");
}

TEST(EngineSafetensors, RejectsHeaderThatIsNotJson) {
  expect_rejected(file_bytes("{\"a\": ", {}), "not valid JSON");
  expect_rejected(file_bytes("not json at all", {}), "not valid JSON");
  expect_rejected(file_bytes("{\"a\":{}} trailing", {}), "not valid JSON");
  expect_rejected(file_bytes("{\"a\":\"\\x\"}", {}), "not valid JSON");
  expect_rejected(file_bytes("{\"a\":\"\\ud800\"}", {}), "not valid JSON");
  expect_rejected(file_bytes("{\"a\":1,\"a\":2}", {}), "duplicate key");
  expect_rejected(file_bytes(std::string(100000, '['), {}), "nesting deeper");
  expect_rejected(file_bytes("[1, 2]", {}), "not a JSON object");
}

TEST(EngineSafetensors, RejectsMalformedEntries) {
  expect_rejected(file_bytes("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", floats({1})), "no \"dtype\"");
  expect_rejected(file_bytes("{" + entry("a", "Q4", "[2]", "[0,4]") + "}", floats({1})),
                  "unsupported dtype \"Q4\"");
  expect_rejected(file_bytes("{" + entry("a", "bf16", "[2]", "[0,4]") + "}", floats({1})),
                  "unsupported dtype \"bf16\"");
  expect_rejected(file_bytes("{" + entry("a", "F32", "[-1]", "[0,4]") + "}", floats({1})), "shape entry");
  expect_rejected(file_bytes("{" + entry("a", "F32", "[1.0]", "[0,4]") + "}", floats({1})), "shape entry");
  expect_rejected(file_bytes("{" + entry("a", "F32", "3", "[0,4]") + "}", floats({1})),
                  "shape is not an array");
  expect_rejected(file_bytes("{" + entry("a", "F32", "[1]", "[0]") + "}", floats({1})), "not [begin, end]");
  expect_rejected(file_bytes("{" + entry("a", "F32", "[0]", "[4,0]") + "}", floats({1})), "begin 4 > end 0");
  expect_rejected(
      file_bytes("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", floats({1})),
      "unknown key");
  expect_rejected(file_bytes("{\"__metadata__\":{\"k\":3}}", {}), "not a string");
  expect_rejected(
      file_bytes("{" + entry("a", "F32", "[4294967296,4294967296,4294967296]", "[0,4]") + "}", floats({1})),
      "overflows");
}

TEST(EngineSafetensors, RejectsDtypeShapeSizeMismatch) {
  // F64 of shape [2] needs 16 bytes; the offsets span 8.
  expect_rejected(file_bytes("{" + entry("a", "F64", "[2]", "[0,8]") + "}", floats({1, 2})),
                  "need 16 bytes but data_offsets span 8");
}

TEST(EngineSafetensors, RejectsOffsetsOutOfRangeOverlappingOrWithGaps) {
  expect_rejected(file_bytes("{" + entry("a", "F32", "[2]", "[4,12]") + "}", floats({1, 2})),
                  "ends at data byte 12");
  expect_rejected(
      file_bytes("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}",
                 floats({1, 2, 3})),
      "\"a\" and \"b\" overlap");
  expect_rejected(file_bytes("{" + entry("a", "F32", "[1]", "[4,8]") + "}", floats({1, 2})),
                  "gap in the data");
  expect_rejected(file_bytes("{" + entry("a", "F32", "[1]", "[0,4]") + "}", floats({1, 2})),
                  "4 trailing bytes");
}

Bytes valid_file() {
  Rng rng(2);
  SafeTensors file;
  file.tensors["W"] = to_tensor(normal_matrix<float>(3, 2, 1.0, rng));
  file.tensors["b"] = to_tensor(normal_matrix<double>(1, 2, 1.0, rng));
  file.metadata["heads"] = "2";
  return serialize_safetensors(file);
}

TEST(EngineSafetensors, EveryTruncationIsRejected) {
  const Bytes bytes = valid_file();
  EXPECT_NO_THROW(parse_safetensors(bytes));
  for (std::size_t size = 0; size < bytes.size(); ++size)
    EXPECT_THROW(parse_safetensors(Bytes(bytes.begin(), bytes.begin() + std::ptrdiff_t(size))),
                 std::runtime_error)
        << "prefix of " << size << " bytes";
}

TEST(EngineSafetensors, TruncatedFileOnDiskIsRejectedWithItsPath) {
  const Bytes bytes = valid_file();
  const fs::path path = temp_path("truncated.safetensors");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size() - 3));
  try {
    load_safetensors(path);
    ADD_FAILURE() << "truncated file accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("file shorter than declared"), std::string::npos) << e.what();
  }
  fs::remove(path);
  EXPECT_THROW(load_safetensors(temp_path("does_not_exist.safetensors")), std::runtime_error);
}

TEST(EngineSafetensors, CorruptedBytesAreParsedOrRejectedNeverCrash) {
  const Bytes original = valid_file();
  Rng rng(3);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    Bytes bytes = original;
    for (int flips = 1 + int(rng.next_u64() % 3); flips > 0; --flips)
      bytes[rng.next_u64() % bytes.size()] = std::uint8_t(rng.next_u64());
    try {
      parse_safetensors(bytes);
    } catch (const std::runtime_error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(EngineSafetensors, SaveReplacesAtomicallyAndLeavesNoTemporary) {
  const fs::path dir = temp_path("atomic_dir");
  fs::remove_all(dir);
  fs::create_directory(dir);
  SafeTensors first, second;
  first.metadata["version"] = "1";
  second.metadata["version"] = "2";
  save_safetensors(dir / "model.safetensors", first);
  save_safetensors(dir / "model.safetensors", second);
  EXPECT_EQ(load_safetensors(dir / "model.safetensors").metadata.at("version"), "2");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  EXPECT_THROW(save_safetensors(dir / "missing" / "model.safetensors", first), std::runtime_error);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(EngineSafetensors, MatrixConversionChecksDtypeAndShape) {
  const Tensor t = to_tensor<double>(Mat<double>::Ones(2, 3));
  EXPECT_EQ(t.shape, (std::vector<std::uint64_t>{2, 3}));
  EXPECT_THROW(to_matrix<float>(t, "t"), std::runtime_error);  // F64, no silent rounding
  Tensor flat = t;
  flat.shape = {6};
  EXPECT_THROW(to_matrix<double>(flat, "flat"), std::runtime_error);
  SafeTensors bad;
  bad.tensors["x"] = Tensor{DType::F32, {3}, Bytes(8)};
  EXPECT_THROW(serialize_safetensors(bad), std::invalid_argument);
  SafeTensors reserved;
  reserved.tensors["__metadata__"] = to_tensor<float>(Mat<float>::Ones(1, 1));
  EXPECT_THROW(serialize_safetensors(reserved), std::invalid_argument);
}

// Every dtype of the format is recognized (sizes checked); F64, F32, F16 and BF16 decode to float.
TEST(EngineSafetensors, HalfPrecisionDecodesExactly) {
  // F16: normal, negative, largest, smallest subnormal, largest subnormal, smallest normal, ±inf, NaN, −0.
  const std::vector<std::uint16_t> f16 = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00, 0xFC00, 0x7E00, 0x8000};
  const std::vector<float> f16_values = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 1023 * 0x1p-24f, 0x1p-14f,
                                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                         NAN, -0.0f};
  // BF16: the upper half of a float32 (π truncated, a float32 subnormal, inf).
  const std::vector<std::uint16_t> bf16 = {0x3F80, 0xC049, 0x0001, 0x7F80, 0x8000};
  const std::vector<float> bf16_values = {1.0f, -3.140625f, 0x1p-133f, std::numeric_limits<float>::infinity(), -0.0f};
  for (const auto& [dtype, bits, expected] : {std::tuple{DType::F16, f16, f16_values}, std::tuple{DType::BF16, bf16, bf16_values}}) {
    Bytes raw;
    for (std::uint16_t b : bits) raw.push_back(std::uint8_t(b)), raw.push_back(std::uint8_t(b >> 8));
    std::vector<float> out(bits.size() * 2, 7.0f);
    decode_floats(dtype, raw.data(), bits.size(), out.data(), 2);  // strided: every other entry
    for (std::size_t i = 0; i < bits.size(); ++i) {
      if (std::isnan(expected[i])) {
        EXPECT_TRUE(std::isnan(out[2 * i])) << dtype_name(dtype) << " " << i;
      } else {
        EXPECT_EQ(out[2 * i], expected[i]) << dtype_name(dtype) << " " << i;
        EXPECT_EQ(std::signbit(out[2 * i]), std::signbit(expected[i])) << dtype_name(dtype) << " " << i;
      }
      EXPECT_EQ(out[2 * i + 1], 7.0f);
    }
  }
  const Bytes f64 = {0, 0, 0, 0, 0, 0, 0xF0, 0x3F};  // 1.0, unaligned below
  Bytes shifted(1, 0);
  shifted.insert(shifted.end(), f64.begin(), f64.end());
  float x = 0;
  decode_floats(DType::F64, shifted.data() + 1, 1, &x);
  EXPECT_EQ(x, 1.0f);
  EXPECT_THROW(decode_floats(DType::I64, shifted.data(), 1, &x), std::invalid_argument);
  // Control: BF16 bits read as F16 are other numbers.
  decode_floats(DType::F16, Bytes{0x80, 0x3F}.data(), 1, &x);
  EXPECT_NE(x, 1.0f);
}

TEST(EngineSafetensors, ViewAndMappingReadInPlace) {
  const std::string header = "{" + entry("ids", "I64", "[1]", "[0,8]") + "," + entry("mask", "BOOL", "[2,2]", "[8,12]") +
                             "," + entry("h", "BF16", "[2]", "[12,16]") + "," + entry("s", "F32", "[]", "[16,20]") + "}";
  Bytes data(20);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::uint8_t(i + 1);
  const Bytes bytes = file_bytes(header, data);
  const SafeTensorsView view = view_safetensors(bytes);
  ASSERT_EQ(view.tensors.size(), 4u);
  EXPECT_EQ(view.tensors.at("s").elements(), 1u);  // a scalar
  EXPECT_EQ(view.bytes(view.tensors.at("h")).data(), bytes.data() + 8 + header.size() + 12);  // no copy
  const fs::path path = temp_path("mapped.safetensors");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  {
    const MappedSafeTensors mapped(path);
    const auto span = mapped.view().bytes(mapped.view().tensors.at("mask"));
    EXPECT_EQ(Bytes(span.begin(), span.end()), (Bytes{9, 10, 11, 12}));
    EXPECT_EQ(parse_safetensors(bytes).tensors.at("ids").data, Bytes(data.begin(), data.begin() + 8));
  }
  fs::remove(path);
  EXPECT_THROW(MappedSafeTensors(temp_path("absent.safetensors")), std::runtime_error);
}

// The resident KiB of the mapping that holds `address` (/proc/self/smaps), or -1.
long resident_kib(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = std::uintptr_t(address);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(':') > line.find(' '))
      inside = lo <= at && at < hi;
    else if (inside && line.rfind("Rss:", 0) == 0)
      return std::stol(line.substr(4));
  }
  return -1;
}

// release hands a tensor's whole pages back (the loader of large models reads each tensor once):
// reading them again gives the file's bytes, from the page cache.
TEST(EngineSafetensors, ReleasedPagesReadBackTheFile) {
  const std::size_t n = 5000;  // 20,000 bytes: several pages, starting inside one
  const std::string header = "{" + entry("w", "F32", "[" + std::to_string(n) + "]", "[0," + std::to_string(4 * n) + "]") + "}";
  Bytes data(4 * n);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = std::uint8_t(i * 7 + 3);
  const fs::path path = temp_path("released.safetensors");
  const Bytes bytes = file_bytes(header, data);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  {
    const MappedSafeTensors mapped(path);
    const auto& w = mapped.view().tensors.at("w");
    const auto span = mapped.view().bytes(w);
    EXPECT_EQ(Bytes(span.begin(), span.end()), data);
    const long before = resident_kib(span.data());  // every page was just read: resident
    mapped.release(w);
    const long after = resident_kib(span.data());
    EXPECT_GE(before, 16) << "the measure sees the mapping's pages";
    EXPECT_LE(after, before - 12) << "the pages inside the tensor (at least 3 of 4 KiB) left";
    EXPECT_EQ(Bytes(span.begin(), span.end()), data);
    EXPECT_GE(resident_kib(span.data()), 16) << "read again, they are back";
  }
  fs::remove(path);
}

// Issue 31 item 11: a file truncated while it is mapped (by another process) made the reader die of
// SIGBUS. A read past the new end now ends the process with one line naming the file and exit 3.
// Control: the same read through a mapping MappedFile did not make is not that clean exit (the
// default action kills with SIGBUS; under AddressSanitizer its report ends the process).
TEST(EngineSafetensorsDeathTest, AFileTruncatedWhileMappedEndsWithOneLineAndExitThree) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path path = temp_path("shrinking.bin");
  const std::size_t size = 3 * 4096;
  std::ofstream(path, std::ios::binary) << std::string(size, 'x');
  const auto truncate_and_read = [&](const std::uint8_t* bytes) {
    fs::resize_file(path, 0);
    volatile std::uint8_t last = bytes[size - 1];  // beyond the new end: SIGBUS
    std::exit(last == 'x' ? 0 : 1);
  };
  EXPECT_EXIT(
      {
        const MappedFile mapped(path);
        truncate_and_read(mapped.bytes().data());
      },
      ::testing::ExitedWithCode(3), "^qkvlab: error: " + path.string() + ": the file shrank while it was being read");
  std::ofstream(path, std::ios::binary) << std::string(size, 'x');
  EXPECT_EXIT(
      {
        const MappedFile guarded(path);  // the handler is installed, but this mapping is not its
        const int fd = ::open(path.c_str(), O_RDONLY);
        void* raw = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
        truncate_and_read(static_cast<const std::uint8_t*>(raw));
      },
      [](int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 3) && !(WIFEXITED(status) && WEXITSTATUS(status) == 0); },
      "");
  fs::remove(path);
}

}  // namespace
