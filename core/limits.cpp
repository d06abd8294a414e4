#include "core/limits.hpp"

#include "core/errors.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace qkvlab {
namespace {

std::uint64_t cgroup_limit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (in >> text && text != "max") {
      try {
        return std::stoull(text);
      } catch (const std::exception&) {
      }
    }
  }
  return UINT64_MAX;
}

std::uint64_t rlimit_of(int resource) {
  rlimit r{};
  if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return std::uint64_t(r.rlim_cur);
}

std::uint64_t compute_budget() {
  std::uint64_t limit = UINT64_MAX;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = std::uint64_t(pages) * std::uint64_t(page);
  limit = std::min({limit, rlimit_of(RLIMIT_AS), rlimit_of(RLIMIT_DATA), cgroup_limit()});
  return limit == UINT64_MAX ? limit : limit / 4 * 3;
}

}  // namespace

std::uint64_t memory_budget() {
  static const std::uint64_t budget = compute_budget();
  return budget;
}

std::string format_bytes(double bytes) {
  static const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 999.5 && u < 6) bytes /= 1000, ++u;
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  else std::snprintf(buf, sizeof buf, "%.3g %s", bytes, units[u]);
  return buf;
}

void require_memory(const std::string& what, double bytes) {
  const double budget = double(memory_budget());
  if (!(bytes <= budget))
    throw UsageError(what + " needs about " + format_bytes(bytes) + " of memory, more than the budget of " +
                     format_bytes(budget));
}

}  // namespace qkvlab
