#!/usr/bin/env bash
# Builds qkvlab's gpu/ code against the CUDA CPU emulation and runs a GPU test
# binary on the CPU (README.md in this directory).
#
# usage: build.sh [--root DIR] [--build-dir DIR] [--test FILE]... [--gpu-src DIR]
#                 [--libs-from DIR] [--no-run] [--] [test arguments, e.g. --gtest_filter=GpuOps*]
#   --root DIR       the qkvlab checkout (default: this script's ../..)
#   --build-dir DIR  where everything is built (default /tmp/cuda-emulation-build)
#   --test FILE      a test source to build and run instead of tests/gpu_agreement_test.cpp
#                    (repeatable; relative to the root; one with kernels of its own, __global__,
#                    is converted by convert_cu.py first, as gpu/*.cu are). Linked with qkvlab_core and
#                    qkvlab_engine, lm_gpu_test also with what qkvlab_lm links (qkvlab_corpus,
#                    qkvlab_results), analysis_gpu_test with qkvlab_analysis and those, the
#                    others with qkvlab_synthetic and qkvlab_results.
#   --gpu-src DIR    take gpu/*.cu, gpu/*.cuh, gpu/kernels/*.cuh and gpu/*.cpp from DIR instead
#                    of ROOT/gpu (headers .hpp still come from ROOT): for trying modified kernels
#   --libs-from DIR  link the non-GPU libraries of this built CMake tree of the same checkout
#                    (ctest passes the project's own build directory, which has them all built)
#                    instead of configuring and building a second tree; nothing there is rebuilt
#   --no-run         build only
# Arguments the script does not know (--gtest_*) go to the test binaries.
# The non-GPU libraries come from --libs-from DIR, or else from a CMake build of the project with
# QKVLAB_CUDA=OFF in $CUDA_EMULATION_CMAKE_DIR (default /tmp/cuda-emulation-cmake), configured and
# built here when needed; the project's own build/ is never built here. No code outside gpu/
# depends on QKVLAB_HAVE_CUDA, so the libraries are the same with and without CUDA.
# Exit status: the tests' (non-zero if any test binary fails).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=/tmp/cuda-emulation-build
cmake_dir=${CUDA_EMULATION_CMAKE_DIR:-/tmp/cuda-emulation-cmake}
gpu_src=""
tests=()
test_args=()
run=1
libs_from=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --root) root=$(cd "$2" && pwd); shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --test) tests+=("$2"); shift 2 ;;
    --gpu-src) gpu_src=$(cd "$2" && pwd); shift 2 ;;
    --libs-from) libs_from=$(cd "$2" && pwd); shift 2 ;;
    --no-run) run=0; shift ;;
    --) shift; test_args+=("$@"); break ;;
    *) test_args+=("$1"); shift ;;
  esac
done
[[ ${#tests[@]} -gt 0 ]] || tests=(tests/gpu_agreement_test.cpp)
gpu_src=${gpu_src:-$root/gpu}
mkdir -p "$build/src/gpu/kernels" "$build/obj" "$build/bin"
build=$(cd "$build" && pwd)

cxx="g++"
launcher=()
if command -v ccache > /dev/null; then
  cxx="ccache g++"
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# QKVLAB_NO_CORE_INSTANCES: the libraries below are configured without core's instance files
# (-DQKVLAB_CORE_INSTANCES=OFF), so these files instantiate what they use (which also links
# against a tree configured before, with them).
flags=(-std=c++20 -O1 -g1 -pthread -Wall -Wextra -Wno-unused-parameter -DBOOST_ALL_NO_LIB -DQKVLAB_NO_CORE_INSTANCES)
# Include order: the emulator's CUDA headers, then the converted gpu/*.cuh, then the project.
includes=(-I"$here" -I"$build/src" -I"$root" -isystem /usr/include/eigen3)

# ---- 1. The project's non-GPU libraries (CMake, QKVLAB_CUDA=OFF) -----------------------------
libs=(qkvlab_core qkvlab_engine)
for t in "${tests[@]}"; do
  case $(basename "$t") in
    gpu_agreement_test.cpp | emulator_test.cpp) ;;
    lm_gpu_test.cpp) libs+=(qkvlab_lm qkvlab_corpus qkvlab_results) ;;
    analysis_gpu_test.cpp) libs+=(qkvlab_analysis qkvlab_lm qkvlab_corpus qkvlab_results) ;;
    *) libs+=(qkvlab_results qkvlab_synthetic) ;;
  esac
done
mapfile -t libs < <(printf '%s\n' "${libs[@]}" | awk '!seen[$0]++')
# The gpu library CMake builds there (device_none.cpp, or the real CUDA one) is not used:
# the emulated gpu/ objects replace it.
if [[ -n $libs_from ]]; then
  cmake_dir=$libs_from
  for lib in "${libs[@]}"; do
    [[ -f $cmake_dir/${lib#qkvlab_}/lib$lib.a ]] || { echo "build.sh: --libs-from $cmake_dir has no ${lib#qkvlab_}/lib$lib.a (build it first)" >&2; exit 2; }
  done
  echo "== linking ${libs[*]} from $cmake_dir"
else
  if [[ ! -f $cmake_dir/CMakeCache.txt ]]; then
    echo "== configuring the non-GPU libraries in $cmake_dir"
    cmake -S "$root" -B "$cmake_dir" -DQKVLAB_CUDA=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON -DQKVLAB_CORE_INSTANCES=OFF \
      "${launcher[@]}" > "$cmake_dir.configure.log" 2>&1 ||
      { cat "$cmake_dir.configure.log"; exit 1; }
  fi
  echo "== building ${libs[*]} in $cmake_dir"
  cmake --build "$cmake_dir" -j"$(nproc)" --target "${libs[@]}" > "$build/libraries.log" 2>&1 ||
    { tail -40 "$build/libraries.log"; exit 1; }
fi
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$cmake_dir/CMakeCache.txt"; }
system_libs=()
blas=$(cache_value BLAS_openblas_LIBRARY)
[[ -n $blas && $blas != *NOTFOUND ]] && system_libs+=("$blas")
hdf5=$(cache_value HDF5_C_LIBRARY_hdf5)
[[ -n $hdf5 && $hdf5 != *NOTFOUND ]] && system_libs+=("$hdf5")
system_libs+=(-lpcre2-8 -lmpfr -lgmp -lgtest_main -lgtest -lboost_context -ldl)  # libpcre2-8: lm/tokenizer_pattern.cpp; boost_context: the emulator's fibers
project_libs=()
for lib in qkvlab_synthetic qkvlab_analysis qkvlab_lm qkvlab_corpus qkvlab_results qkvlab_engine qkvlab_core; do  # dependents first
  [[ " ${libs[*]} " == *" $lib "* ]] && project_libs+=("$cmake_dir/${lib#qkvlab_}/lib$lib.a")
done

# ---- 2. The emulator and the fake cuBLAS -------------------------------------------------------
echo "== building the emulator"
$cxx "${flags[@]}" -I"$here" -c "$here/cuda_runtime.cpp" -o "$build/obj/cuda_runtime.o"
$cxx "${flags[@]}" -fPIC -shared -I"$here" "$here/fake_cublas.cpp" -o "$build/libfake_cublas.so"

# ---- 3. gpu/: .cu and .cuh rewritten for g++ (convert_cu.py), .cpp as they are ----------------
echo "== building gpu/ from $gpu_src"
rm -f "$build"/src/gpu/*.* "$build"/src/gpu/kernels/* "$build"/obj/gpu_*.o
gpu_flags=(-DQKVLAB_HAVE_CUDA=1 -DQKVLAB_CUBLAS_LIBRARY="\"$build/libfake_cublas.so\""
           -DQKVLAB_CUBLAS_SONAME="\"libfake_cublas.so\"")
shopt -s nullglob
for header in "$gpu_src"/*.cuh "$gpu_src"/kernels/*.cuh; do
  python3 "$here/convert_cu.py" "$header" "$build/src/gpu/${header#"$gpu_src"/}"
done
gpu_objects=()
for source in "$gpu_src"/*.cu "$gpu_src"/*.cpp; do
  name=$(basename "$source")
  [[ $name == device_none.cpp ]] && continue  # the stand-in for builds without CUDA
  input=$source
  if [[ $name == *.cu ]]; then
    input="$build/src/gpu/$name.cpp"
    python3 "$here/convert_cu.py" "$source" "$input"
  fi
  object="$build/obj/gpu_$name.o"
  echo "   $name"
  while (( $(jobs -rp | wc -l) >= $(nproc) )); do wait -n; done  # at most one compile per core
  $cxx "${flags[@]}" "${gpu_flags[@]}" "${includes[@]}" -c "$input" -o "$object" &
  gpu_objects+=("$object")
done
for job in $(jobs -p); do wait "$job"; done

# ---- 4. The tests ------------------------------------------------------------------------------------
status=0
for t in "${tests[@]}"; do
  source=$t
  [[ $source == /* ]] || source="$root/$t"
  name=$(basename "$source" .cpp)
  echo "== building $name"
  if grep -q '__global__' "$source"; then  # kernels of its own (emulator_test.cpp): CUDA code, converted
    python3 "$here/convert_cu.py" "$source" "$build/src/test_$name.cpp"
    source="$build/src/test_$name.cpp"
  fi
  $cxx "${flags[@]}" -DQKVLAB_HAVE_CUDA=1 -DQKVLAB_SOURCE_DIR="\"$root\"" -DQKVLAB_BINARY="\"$cmake_dir/qkvlab\"" \
    "${includes[@]}" -c "$source" -o "$build/obj/test_$name.o"
  $cxx -pthread "$build/obj/test_$name.o" "${gpu_objects[@]}" "$build/obj/cuda_runtime.o" "${project_libs[@]}" \
    "${system_libs[@]}" -o "$build/bin/$name"
  if [[ $run == 1 ]]; then
    echo "== running $name ${test_args[*]:-}"
    start=$(date +%s.%N)
    "$build/bin/$name" "${test_args[@]}" || status=$?
    echo "== $name: exit status $status, $(echo "$(date +%s.%N) - $start" | bc) s"
  fi
done
exit $status
