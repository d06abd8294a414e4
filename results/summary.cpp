// Report::summary. "ok" also demands at least one check, so a run that
// checked nothing never reports success.
#include <algorithm>

#include "results/report.hpp"

namespace qkvlab::results {

Summary Report::summary() const {
  Summary s;
  s.checks = checks.size();
  s.passed = static_cast<std::size_t>(std::ranges::count_if(checks, &CheckRecord::pass));
  s.controls = controls.size();
  s.controls_failed_as_expected =
      static_cast<std::size_t>(std::ranges::count_if(controls, &ControlRecord::failed_as_expected));
  s.ok = s.checks > 0 && s.passed == s.checks && s.controls_failed_as_expected == s.controls;
  return s;
}

}  // namespace qkvlab::results
