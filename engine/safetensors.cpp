#include "engine/safetensors.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "core/atomic_file.hpp"
#include "engine/json.hpp"
#include "engine/weight_type.hpp"

namespace qkvlab::engine {
namespace {

constexpr std::uint64_t max_header_bytes = 100'000'000;  // the reference implementation's limit

struct DTypeInfo {
  DType dtype;
  const char* name;
  std::size_t size;
};
constexpr DTypeInfo kDTypes[] = {{DType::F64, "F64", 8},     {DType::F32, "F32", 4},    {DType::F16, "F16", 2},
                                 {DType::BF16, "BF16", 2},   {DType::I64, "I64", 8},    {DType::I32, "I32", 4},
                                 {DType::I16, "I16", 2},     {DType::I8, "I8", 1},      {DType::U64, "U64", 8},
                                 {DType::U32, "U32", 4},     {DType::U16, "U16", 2},    {DType::U8, "U8", 1},
                                 {DType::BOOL, "BOOL", 1},   {DType::F8_E4M3, "F8_E4M3", 1},
                                 {DType::F8_E5M2, "F8_E5M2", 1}};

const DTypeInfo& info(DType dtype) {
  for (const DTypeInfo& i : kDTypes)
    if (i.dtype == dtype) return i;
  throw std::invalid_argument("safetensors: unknown dtype value");
}

// Little-endian integers of `bytes` width, whatever the host's byte order.
void put_le(std::vector<std::uint8_t>& out, std::uint64_t value, int bytes) {
  for (int k = 0; k < bytes; ++k) out.push_back(std::uint8_t(value >> (8 * k)));
}

std::uint64_t get_le(const std::uint8_t* in, int bytes) {
  std::uint64_t value = 0;
  for (int k = 0; k < bytes; ++k) value |= std::uint64_t(in[k]) << (8 * k);
  return value;
}

// The order of the tensors' data: by decreasing element size, then by name, so
// that every tensor starts at a multiple of its element size (the data itself
// starts at a multiple of 8) and can be read in place.
std::vector<std::pair<const std::string*, const Tensor*>> data_order(const SafeTensors& file) {
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, tensor] : file.tensors) order.emplace_back(&name, &tensor);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second->dtype) > dtype_size(b.second->dtype);
  });
  return order;
}

std::string header_json(const SafeTensors& file) {
  std::string json = "{";
  if (!file.metadata.empty()) {
    json += "\"__metadata__\":{";
    for (const auto& [key, value] : file.metadata) json += json_quote(key) + ":" + json_quote(value) + ",";
    json.back() = '}';
    json += ",";
  }
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : data_order(file)) {
    std::string shape;
    for (std::size_t k = 0; k < tensor->shape.size(); ++k) {
      if (k > 0) shape += ',';
      shape += std::to_string(tensor->shape[k]);
    }
    const std::uint64_t end = offset + tensor->data.size();
    json += json_quote(*name) + ":{\"dtype\":\"" + dtype_name(tensor->dtype) + "\",\"shape\":[" + shape +
            "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]},";
    offset = end;
  }
  if (json.size() > 1) json.pop_back();
  return json + "}";
}

// Everything below throws std::runtime_error(reason); parse_safetensors
// prefixes the source.
[[noreturn]] void fail(const std::string& reason) { throw std::runtime_error(reason); }

const Json& member(const Json& object, const std::string& key, const std::string& where) {
  for (std::size_t k = 0; k < object.keys.size(); ++k)
    if (object.keys[k] == key) return object.items[k];
  fail(where + " has no " + json_quote(key));
}

// Number of bytes shape × dtype occupies, or a failure if it overflows.
std::uint64_t byte_count(const std::vector<std::uint64_t>& shape, DType dtype, const std::string& name) {
  std::uint64_t count = dtype_size(dtype);
  for (std::uint64_t extent : shape) {
    if (extent != 0 && count > UINT64_MAX / extent)
      fail("tensor " + json_quote(name) + ": shape size overflows");
    count *= extent;
  }
  return count;
}

struct Entry {
  std::string name;
  TensorEntry tensor;
};

Entry parse_entry(const std::string& name, const Json& json) {
  const std::string where = "tensor " + json_quote(name);
  if (json.kind != Json::Kind::object) fail(where + " is not a JSON object");
  for (const std::string& key : json.keys)
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(where + " has unknown key " + json_quote(key));
  Entry entry{name, {}};
  const Json& dtype = member(json, "dtype", where);
  if (dtype.kind != Json::Kind::string) fail(where + ": dtype is not a string");
  const DTypeInfo* known = nullptr;
  for (const DTypeInfo& i : kDTypes)
    if (dtype.text == i.name) known = &i;
  if (!known) fail(where + ": unsupported dtype " + json_quote(dtype.text) + " (not a safetensors dtype)");
  entry.tensor.dtype = known->dtype;
  const Json& shape = member(json, "shape", where);
  if (shape.kind != Json::Kind::array) fail(where + ": shape is not an array");
  for (const Json& extent : shape.items)
    entry.tensor.shape.push_back(json_to_u64(extent, where + ": a shape entry"));
  const Json& offsets = member(json, "data_offsets", where);
  if (offsets.kind != Json::Kind::array || offsets.items.size() != 2)
    fail(where + ": data_offsets is not [begin, end]");
  TensorEntry& t = entry.tensor;
  t.begin = json_to_u64(offsets.items[0], where + ": data_offsets begin");
  t.end = json_to_u64(offsets.items[1], where + ": data_offsets end");
  if (t.begin > t.end)
    fail(where + ": data_offsets begin " + std::to_string(t.begin) + " > end " + std::to_string(t.end));
  const std::uint64_t bytes = byte_count(t.shape, t.dtype, name);
  if (t.end - t.begin != bytes)
    fail(where + ": dtype and shape need " + std::to_string(bytes) + " bytes but data_offsets span " +
         std::to_string(t.end - t.begin));
  return entry;
}

std::map<std::string, std::string> parse_metadata(const Json& json) {
  if (json.kind != Json::Kind::object) fail("__metadata__ is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (std::size_t k = 0; k < json.keys.size(); ++k) {
    if (json.items[k].kind != Json::Kind::string)
      fail("__metadata__ value for " + json_quote(json.keys[k]) + " is not a string");
    metadata[json.keys[k]] = json.items[k].text;
  }
  return metadata;
}

// The entries sorted by offset must tile [0, data_size) exactly.
void check_layout(std::vector<Entry>& entries, std::uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.tensor.begin != b.tensor.begin ? a.tensor.begin < b.tensor.begin : a.tensor.end < b.tensor.end;
  });
  std::uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.tensor.end > data_size)
      fail("file shorter than declared: tensor " + json_quote(e.name) + " ends at data byte " +
           std::to_string(e.tensor.end) + " but only " + std::to_string(data_size) +
           " data bytes follow the header");
    if (e.tensor.begin < covered)
      fail("data_offsets of tensors " + json_quote(previous->name) + " and " + json_quote(e.name) +
           " overlap");
    if (e.tensor.begin > covered) fail("gap in the data before tensor " + json_quote(e.name));
    covered = e.tensor.end;
    previous = &e;
  }
  if (covered != data_size)
    fail(std::to_string(data_size - covered) + " trailing bytes after the last tensor's data");
}

SafeTensorsView view(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < 8)
    fail("file has " + std::to_string(bytes.size()) + " bytes, fewer than the 8-byte header length");
  const std::uint64_t header_size = get_le(bytes.data(), 8);
  if (header_size > bytes.size() - 8)
    fail("bad header length " + std::to_string(header_size) + ": only " + std::to_string(bytes.size() - 8) +
         " bytes follow it (corrupt or truncated file)");
  if (header_size > max_header_bytes)
    fail("bad header length " + std::to_string(header_size) + ": above the 100 MB limit");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_size);
  Json header;
  try {
    header = parse_json(text);
  } catch (const std::runtime_error& e) {
    fail(std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (header.kind != Json::Kind::object) fail("header is not a JSON object");
  SafeTensorsView file;
  std::vector<Entry> entries;
  for (std::size_t k = 0; k < header.keys.size(); ++k) {
    if (header.keys[k] == "__metadata__")
      file.metadata = parse_metadata(header.items[k]);
    else
      entries.push_back(parse_entry(header.keys[k], header.items[k]));
  }
  file.data = bytes.subspan(8 + header_size);
  check_layout(entries, file.data.size());
  for (Entry& e : entries) file.tensors[e.name] = std::move(e.tensor);
  return file;
}

}  // namespace

std::vector<std::uint8_t> serialize_safetensors(const SafeTensors& file) {
  for (const auto& [name, tensor] : file.tensors) {
    if (name == "__metadata__") throw std::invalid_argument("safetensors: a tensor cannot be named __metadata__");
    if (byte_count(tensor.shape, tensor.dtype, name) != tensor.data.size())
      throw std::invalid_argument("safetensors: tensor " + json_quote(name) + " has " +
                                  std::to_string(tensor.data.size()) + " bytes, its dtype and shape need another number");
  }
  std::string header = header_json(file);
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::uint8_t> bytes;
  put_le(bytes, header.size(), 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  for (const auto& [name, tensor] : data_order(file))
    bytes.insert(bytes.end(), tensor->data.begin(), tensor->data.end());
  return bytes;
}

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
const char* dtype_name(DType dtype) { return info(dtype).name; }
bool is_float(DType d) { return d == DType::F64 || d == DType::F32 || d == DType::F16 || d == DType::BF16; }

std::uint64_t TensorEntry::elements() const {
  std::uint64_t n = 1;
  for (std::uint64_t extent : shape) n *= extent;
  return n;
}

void decode_floats(DType dtype, const std::uint8_t* in, std::size_t n, float* out, std::size_t stride) {
  switch (dtype) {
    case DType::F32:
      for (std::size_t i = 0; i < n; ++i) out[i * stride] = std::bit_cast<float>(std::uint32_t(get_le(in + 4 * i, 4)));
      return;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i) out[i * stride] = widen_bits(std::uint16_t(get_le(in + 2 * i, 2)), WeightType::bf16);
      return;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) out[i * stride] = widen_bits(std::uint16_t(get_le(in + 2 * i, 2)), WeightType::f16);
      return;
    case DType::F64:
      for (std::size_t i = 0; i < n; ++i) out[i * stride] = float(std::bit_cast<double>(get_le(in + 8 * i, 8)));
      return;
    default:
      throw std::invalid_argument(std::string("decode_floats: ") + dtype_name(dtype) + " is not a float dtype");
  }
}

SafeTensorsView view_safetensors(std::span<const std::uint8_t> bytes, const std::string& source) {
  try {
    return view(bytes);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("safetensors: " + source + ": " + e.what());
  }
}

static SafeTensors copy_tensors(const SafeTensorsView& v) {
  SafeTensors file;
  file.metadata = v.metadata;
  for (const auto& [name, entry] : v.tensors) {
    const auto data = v.bytes(entry);
    file.tensors[name] = Tensor{entry.dtype, entry.shape, std::vector<std::uint8_t>(data.begin(), data.end())};
  }
  return file;
}

SafeTensors parse_safetensors(std::span<const std::uint8_t> bytes, const std::string& source) {
  return copy_tensors(view_safetensors(bytes, source));
}

namespace {

// The files mapped now, for the SIGBUS handler: a file truncated while it is mapped (by another
// process) makes a read past its new end fault with SIGBUS. The handler finds the mapping the
// faulting address lies in, writes one line naming its file and ends the process with exit 3
// (an unexpected error), instead of a death by signal; a SIGBUS outside every mapping gets the
// action that was installed before (the default: death by the signal). The slots are fixed and
// their messages composed when the file is mapped: the handler only reads atomics and calls
// write and _exit, which are async-signal-safe.
struct MappingSlot {
  std::atomic<std::uintptr_t> begin{0}, end{0};
  char message[768] = {};
  std::size_t length = 0;
};
constexpr int kMappingSlots = 256;  // more mappings at once than this go unguarded (a shard set is far smaller)
MappingSlot g_mappings[kMappingSlots];
std::mutex g_mappings_mutex;
struct sigaction g_previous_sigbus {};

void on_sigbus(int, siginfo_t* info, void*) {
  const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const MappingSlot& slot : g_mappings) {
    const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire), end = slot.end.load(std::memory_order_acquire);
    if (begin != 0 && at >= begin && at < end) {
      [[maybe_unused]] const auto written = ::write(STDERR_FILENO, slot.message, slot.length);
      ::_exit(3);
    }
  }
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);  // returning repeats the faulting access under it
}

void guard_mapping(const void* data, std::size_t size, const std::filesystem::path& path) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
  const std::string line = "qkvlab: error: " + path.string() +
                           ": the file shrank while it was being read (another process truncated or rewrote it); "
                           "nothing read from it was used\n";
  const std::lock_guard lock(g_mappings_mutex);
  for (MappingSlot& slot : g_mappings)
    if (slot.begin.load() == 0) {
      slot.length = std::min(line.size(), sizeof slot.message - 1);
      std::memcpy(slot.message, line.data(), slot.length);
      if (slot.length < line.size()) slot.message[slot.length - 1] = '\n';
      slot.end.store(reinterpret_cast<std::uintptr_t>(data) + size, std::memory_order_release);
      slot.begin.store(reinterpret_cast<std::uintptr_t>(data), std::memory_order_release);
      return;
    }
}

void unguard_mapping(const void* data) {
  const std::lock_guard lock(g_mappings_mutex);
  for (MappingSlot& slot : g_mappings)
    if (slot.begin.load() == reinterpret_cast<std::uintptr_t>(data)) {
      slot.begin.store(0, std::memory_order_release);
      slot.end.store(0, std::memory_order_release);
      return;
    }
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below (issue 16).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error("cannot map " + path.string() + ": not a regular file");
  }
  size_ = std::size_t(st.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      const int error = errno;
      data_ = nullptr;
      ::close(fd);
      throw std::runtime_error("cannot map " + path.string() + ": " + std::strerror(error));
    }
    guard_mapping(data_, size_, path);
  }
  ::close(fd);  // the mapping stays valid
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) unguard_mapping(data_), ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr), size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) unguard_mapping(data_), ::munmap(data_, size_);
}

void MappedFile::release(std::span<const std::uint8_t> range) const {
  const auto page = std::uintptr_t(::sysconf(_SC_PAGESIZE));
  const auto begin = (std::uintptr_t(range.data()) + page - 1) / page * page;
  const auto end = (std::uintptr_t(range.data()) + range.size()) / page * page;
  const auto first = std::uintptr_t(data_), last = first + size_;
  if (begin < end && begin >= first && end <= last) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

std::optional<std::map<std::string, std::string>> safetensors_metadata(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return std::nullopt;
  try {
    return MappedSafeTensors(path).view().metadata;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

MappedSafeTensors::MappedSafeTensors(const std::filesystem::path& path)
    : path_(path), file_([&] {
        try {
          return MappedFile(path);
        } catch (const std::runtime_error& e) {
          throw std::runtime_error(std::string("safetensors: ") + e.what());
        }
      }()),
      view_(view_safetensors(file_.bytes(), path.string())) {}

void save_safetensors(const std::filesystem::path& path, const SafeTensors& file) {
  const std::vector<std::uint8_t> bytes = serialize_safetensors(file);
  write_bytes_atomically(path, "safetensors",
                         std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

SafeTensors load_safetensors(const std::filesystem::path& path) {
  return copy_tensors(MappedSafeTensors(path).view());  // copied once, from the mapping
}

template <class S>
Tensor to_tensor(const Mat<S>& M) {
  using Bits = std::conditional_t<std::is_same_v<S, float>, std::uint32_t, std::uint64_t>;
  Tensor tensor{std::is_same_v<S, float> ? DType::F32 : DType::F64,
                {std::uint64_t(M.rows()), std::uint64_t(M.cols())},
                {}};
  tensor.data.reserve(M.size() * sizeof(S));
  for (Eigen::Index i = 0; i < M.rows(); ++i)
    for (Eigen::Index j = 0; j < M.cols(); ++j) put_le(tensor.data, std::bit_cast<Bits>(M(i, j)), sizeof(S));
  return tensor;
}

template <class S>
Mat<S> to_matrix(const Tensor& tensor, const std::string& name) {
  using Bits = std::conditional_t<std::is_same_v<S, float>, std::uint32_t, std::uint64_t>;
  const DType expected = std::is_same_v<S, float> ? DType::F32 : DType::F64;
  if (tensor.dtype != expected)
    throw std::runtime_error("tensor " + json_quote(name) + " is " + dtype_name(tensor.dtype) +
                             ", expected " + dtype_name(expected));
  if (tensor.shape.size() != 2)
    throw std::runtime_error("tensor " + json_quote(name) + " has " + std::to_string(tensor.shape.size()) +
                             " dimensions, expected 2");
  if (byte_count(tensor.shape, tensor.dtype, name) != tensor.data.size())
    throw std::runtime_error("tensor " + json_quote(name) + " has the wrong number of bytes for its shape");
  const auto rows = Eigen::Index(tensor.shape[0]), cols = Eigen::Index(tensor.shape[1]);
  Mat<S> M(rows, cols);
  const std::uint8_t* in = tensor.data.data();
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < cols; ++j, in += sizeof(S))
      M(i, j) = std::bit_cast<S>(Bits(get_le(in, sizeof(S))));
  return M;
}

template Tensor to_tensor<float>(const Mat<float>&);
template Tensor to_tensor<double>(const Mat<double>&);
template Mat<float> to_matrix<float>(const Tensor&, const std::string&);
template Mat<double> to_matrix<double>(const Tensor&, const std::string&);

}  // namespace qkvlab::engine
