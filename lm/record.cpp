#include "lm/record.hpp"

#include "core/errors.hpp"

namespace qkvlab::lm {

namespace {
constexpr const char* kNames[kSites] = {"resid_pre", "q", "k", "v", "pattern",
                                        "z", "attn_out", "mlp_out", "resid_post", "final"};
}

std::string to_string(Site site) { return kNames[int(site)]; }

Site parse_site(const std::string& name) {
  std::string known;
  for (int i = 0; i < kSites; ++i) {
    if (name == kNames[i]) return Site(i);
    known += (i ? "|" : "") + std::string(kNames[i]);
  }
  throw UsageError("unknown activation \"" + name + "\" (known: " + known + ")");
}

}  // namespace qkvlab::lm
