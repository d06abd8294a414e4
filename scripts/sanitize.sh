#!/usr/bin/env bash
# The sanitizer stage (issue 16): builds the libraries that read and write files and run the
# thread pool (qkvlab_core, qkvlab_results, qkvlab_engine) and the tests of those paths
# (robust_test: readers, absorb's decision, thread pool, staged files; npy_test: the .npy reader
# and writer; engine_safetensors_test: the safetensors reader) with AddressSanitizer and
# UndefinedBehaviorSanitizer (any report fatal), in a CMake tree of its own, and runs them
# through ctest, one process per test case. ctest runs this as sanitize.robust
# (tests/CMakeLists.txt), so CI's test command runs it; about 10 minutes of one core from
# scratch, most of it compiling core under the instrumentation (docs/robustness.md), less with ccache.
#
#   scripts/sanitize.sh [--build-dir DIR] [--jobs N]     DIR default build/sanitize; N default 2
#
# Exit status 0 when every test passes with no sanitizer report; 2, in one line and before any build,
# on a bad option (a missing value, --jobs outside 1–256).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build/sanitize"
jobs=2
source "$root/scripts/options.sh"
while (($#)); do
  case $1 in
    --build-dir|--jobs) need "$@" ;;&
    --build-dir) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) usage_error "unknown argument $1" ;;
  esac
done
integer_option --jobs "$jobs" 1 256

launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
targets=(robust_test npy_test engine_safetensors_test)

# -O1: Eigen at -O0 runs the tests several times slower; -O1 keeps ASan's reports exact. -g1: line
# tables only, enough for the reports' file:line stacks; full -g costs core/absorb.cpp 38% more compile
# time under the instrumentation (140 s against 102 s of CPU, measured 2026-11-25).
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Sanitize -DQKVLAB_CUDA=OFF -DQKVLAB_SANITIZE_STAGE=OFF -DCMAKE_UNITY_BUILD=ON \
  -DQKVLAB_CORE_INSTANCES=OFF \
  -DCMAKE_CXX_FLAGS_SANITIZE="-O1 -g1 $flags" -DCMAKE_C_FLAGS_SANITIZE="-O1 -g1 $flags" \
  -DCMAKE_EXE_LINKER_FLAGS_SANITIZE="$flags" "${launcher[@]}" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j"$jobs" --target "${targets[@]}" >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 1; }

# detect_leaks: LeakSanitizer too. halt_on_error: the first UBSan report fails the test.
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
pattern="^($(IFS='|'; echo "${targets[*]}"))\."
ctest --test-dir "$build" -R "$pattern" -j"$jobs" --output-on-failure --timeout 300
