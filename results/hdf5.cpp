// write_hdf5. Every HDF5 handle is owned by a small RAII wrapper and every
// failing HDF5 call throws, so a single catch in stage_hdf5 closes everything
// and reports one line. The file is built in memory and staged (core/atomic_file.hpp). Absent numbers are NaN,
// HDF5's conventional missing value; every claim group holds all three
// datasets, zero-length when it has no such records.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>
#include <stdexcept>
#include <utility>

#include "core/atomic_file.hpp"
#include "results/hdf5_handle.hpp"
#include "results/report.hpp"

namespace qkvlab::results {
namespace {

using namespace hdf5;


// In-memory rows; strings point into Utf8Copies, which outlives the write.
struct CheckRow {
  const char* config;
  const char* precision;
  double rel_err, kappa, normalized_err, budget;
  std::uint8_t pass;
  const char* status;
  const char* note;
  double statistic, expected, std_err;
};

struct ControlRow {
  const char* name;
  const char* config;
  const char* precision;
  double rel_err;
  std::uint8_t failed_as_expected;
  const char* note;
};

struct LadderRow {
  const char* config;
  double slope;
};

struct ClaimRows {
  std::vector<CheckRow> checks;
  std::vector<ControlRow> controls;
  std::vector<LadderRow> ladders;
};

double or_nan(std::optional<double> x) { return x.value_or(std::numeric_limits<double>::quiet_NaN()); }

// The report's strings as the file declares them, UTF-8 (escape_invalid_utf8), kept for the write.
class Utf8Copies {
 public:
  const char* operator()(const std::string& s) { return copies_.emplace_back(escape_invalid_utf8(s)).c_str(); }

 private:
  std::deque<std::string> copies_;  // stable addresses
};

std::map<std::string, ClaimRows> rows_by_claim(const Report& report, Utf8Copies& text) {
  std::map<std::string, ClaimRows> claims;
  for (const CheckRecord& c : report.checks) {
    claims[c.id].checks.push_back({text(c.config), text(c.precision), or_nan(c.rel_err), or_nan(c.kappa),
                                   or_nan(c.normalized_err), c.budget, c.pass, text(c.status), text(c.note),
                                   or_nan(c.statistic), or_nan(c.expected), or_nan(c.std_err)});
  }
  for (const ControlRecord& c : report.controls) {
    claims[c.id].controls.push_back({text(c.name), text(c.config), text(c.precision), or_nan(c.rel_err),
                                     c.failed_as_expected, text(c.note)});
  }
  for (const LadderRecord& l : report.ladders) claims[l.id].ladders.push_back({text(l.config), or_nan(l.slope)});
  return claims;
}

struct Field {
  const char* name;
  std::size_t offset;
  hid_t type;
};

Handle compound_type(std::size_t size, std::initializer_list<Field> fields) {
  Handle type(H5Tcreate(H5T_COMPOUND, size), H5Tclose, "cannot create compound type");
  for (const Field& f : fields) check(H5Tinsert(type.get(), f.name, f.offset, f.type), "cannot create compound type");
  return type;
}

Handle check_type(hid_t str) {
  const hid_t dbl = H5T_NATIVE_DOUBLE;
  return compound_type(sizeof(CheckRow), {{"config", offsetof(CheckRow, config), str},
                                          {"precision", offsetof(CheckRow, precision), str},
                                          {"rel_err", offsetof(CheckRow, rel_err), dbl},
                                          {"kappa", offsetof(CheckRow, kappa), dbl},
                                          {"normalized_err", offsetof(CheckRow, normalized_err), dbl},
                                          {"budget", offsetof(CheckRow, budget), dbl},
                                          {"pass", offsetof(CheckRow, pass), H5T_NATIVE_UINT8},
                                          {"status", offsetof(CheckRow, status), str},
                                          {"note", offsetof(CheckRow, note), str},
                                          {"statistic", offsetof(CheckRow, statistic), dbl},
                                          {"expected", offsetof(CheckRow, expected), dbl},
                                          {"std_err", offsetof(CheckRow, std_err), dbl}});
}

Handle control_type(hid_t str) {
  return compound_type(sizeof(ControlRow),
                       {{"name", offsetof(ControlRow, name), str},
                        {"config", offsetof(ControlRow, config), str},
                        {"precision", offsetof(ControlRow, precision), str},
                        {"rel_err", offsetof(ControlRow, rel_err), H5T_NATIVE_DOUBLE},
                        {"failed_as_expected", offsetof(ControlRow, failed_as_expected), H5T_NATIVE_UINT8},
                        {"note", offsetof(ControlRow, note), str}});
}

Handle ladder_type(hid_t str) {
  return compound_type(sizeof(LadderRow), {{"config", offsetof(LadderRow, config), str},
                                           {"slope", offsetof(LadderRow, slope), H5T_NATIVE_DOUBLE}});
}

// The memory type without its padding, for the file.
Handle packed(hid_t memory_type) {
  Handle type(H5Tcopy(memory_type), H5Tclose, "cannot create file type");
  check(H5Tpack(type.get()), "cannot create file type");
  return type;
}

// Writes dataset `name` into the group of claim `id` (the id only labels errors).
template <class Row>
void write_dataset(hid_t group, const std::string& id, const char* name, hid_t memory_type,
                   const std::vector<Row>& rows) {
  const std::string label = id + "/" + name;
  const hsize_t dims[1] = {rows.size()};
  Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose, "cannot create dataspace for " + label);
  Handle file_type = packed(memory_type);
  const Handle set = create_dataset(group, name, file_type.get(), space.get(), "cannot create dataset " + label);
  if (!rows.empty()) {
    check(H5Dwrite(set.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()),
          "cannot write dataset " + label);
  }
}

std::string file_image(const Report& report) {
  MemoryFile file;
  {
    const Handle str = string_type();
    write_attribute(file.get(), "seed", H5T_NATIVE_UINT64, &report.seed);
    write_string_attribute(file.get(), "command_line", str.get(), report.command_line);
    write_string_attribute(file.get(), "version", str.get(), report.version);
    if (!report.context.keys().empty() || !report.skipped.empty()) {  // what the checks ran on, and the claims skipped, as JSON
      results::Value context = report.context;
      results::Value skipped = results::Value::array();
      for (const SkippedClaim& s : report.skipped) {
        results::Value item = results::Value::object();
        item.set("id", s.id);
        item.set("reason", s.reason);
        skipped.push(item);
      }
      context.set("skipped", skipped);
      write_string_attribute(file.get(), "context", str.get(), context.json_compact());
    }
    const Handle checks = check_type(str.get()), controls = control_type(str.get()), ladders = ladder_type(str.get());
    Utf8Copies text;
    for (const auto& [id, rows] : rows_by_claim(report, text)) {
      Handle group(H5Gcreate2(file.get(), id.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                   "cannot create group " + id);
      write_dataset(group.get(), id, "checks", checks.get(), rows.checks);
      write_dataset(group.get(), id, "controls", controls.get(), rows.controls);
      write_dataset(group.get(), id, "ladders", ladders.get(), rows.ladders);
    }
  }
  return file.image();
}

}  // namespace

void stage_hdf5(StagedFiles& files, const std::string& path, const Report& report) {
  std::string image;
  try {
    const QuietErrors quiet;
    image = file_image(report);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write HDF5 file " + path + ": " + e.what());
  }
  files.add_bytes(path, "HDF5", image);
}

void write_hdf5(const std::string& path, const Report& report) {
  StagedFiles files;
  stage_hdf5(files, path, report);
  files.commit();
}

}  // namespace qkvlab::results
