#include "results/report.hpp"

#include "core/atomic_file.hpp"

namespace qkvlab::results {

void render_report(std::ostream& out, const Report& report, bool json, bool verbose) {
  if (json) write_json(out, report);
  else if (verbose) print_table(out, report);
  else print_claims(out, report);
}

void write_report_files(const Report& report, const std::string& hdf5, const std::string& junit) {
  StagedFiles files;
  if (!hdf5.empty()) stage_hdf5(files, hdf5, report);
  if (!junit.empty()) stage_junit(files, junit, report);
  files.commit();
}

}  // namespace qkvlab::results
