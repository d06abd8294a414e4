#!/usr/bin/env bash
# Fuzzes the checkpoint readers (docs/fuzzing-checkpoints.md): builds the libFuzzer targets
# fuzz/ckpt_*_fuzzer.cpp with Debian's clang (-fsanitize=fuzzer,address,undefined) into
# build-fuzz/, makes seeds with tests/hf_fixtures.py (tiny GPT-2 and Llama directories: F32, F16,
# BF16, sharded with an index) and, when build/qkvlab exists, an own checkpoint, then runs each
# target for a fixed number of executions and prints one summary line per target.
#
#   scripts/fuzz_checkpoints.sh [RUNS] [TARGET ...]     RUNS default 1000000; TARGET e.g. ckpt_hf_config_fuzzer
#
# Exit status 0 when every target ran its executions without a finding; crash inputs are kept in
# build-fuzz/artifacts/. The corpus grows in build-fuzz/corpus/<target>/ across runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/options.sh
runs=${1:-1000000}
shift || true
targets=("$@")
integer_option RUNS "$runs" 1 999999999
for t in "${targets[@]}"; do  # RUNS first: a target name there is refused by the line above
  [[ $t == ckpt_*_fuzzer && -f fuzz/$t.cpp ]] || usage_error "TARGET '$t' is not one of fuzz/ckpt_*_fuzzer.cpp (named without .cpp)"
done
((${#targets[@]})) || targets=(ckpt_safetensors_fuzzer ckpt_safetensors_view_fuzzer ckpt_mapped_safetensors_fuzzer
                               ckpt_hf_index_fuzzer ckpt_hf_config_fuzzer)
out=build-fuzz
cxx=${FUZZ_CXX:-clang++}
python=$([ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
common=(-std=c++20 -O1 -g -fno-omit-frame-pointer -I. -isystem /usr/include/eigen3)
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=undefined)
sources=(engine/safetensors.cpp engine/json.cpp engine/parameters.cpp core/json_text.cpp core/atomic_file.cpp
         core/rng.cpp lm/hf_config.cpp lm/hf.cpp lm/config.cpp core/qkv_plan.cpp lm/parameters.cpp results/value.cpp)

mkdir -p "$out/obj" "$out/artifacts" "$out/seeds"
objects=()
for s in "${sources[@]}"; do
  o="$out/obj/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ]; then
    "$cxx" "${common[@]}" "${sanitize[@]}" -fsanitize=fuzzer-no-link -c "$s" -o "$o"
  fi
  objects+=("$o")
done
for t in "${targets[@]}"; do
  "$cxx" "${common[@]}" "${sanitize[@]}" -fsanitize=fuzzer "fuzz/$t.cpp" "${objects[@]}" -lmpfr -lgmp -o "$out/$t"
done

# Seeds: safetensors files, config.json and index files of tiny models.
seeds="$out/seeds"
rm -rf "$seeds" && mkdir -p "$seeds/safetensors" "$seeds/config" "$seeds/index"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
k=0
for args in "gpt2 --tiny" "gpt2 --tiny --dtype F16 --untied --prefix ''" "llama --tiny --shards 2" \
            "llama --tiny --dtype F32 --tied --prefix ''" "llama --tiny --mistral"; do
  eval "$python tests/hf_fixtures.py ${args%% *} $tmp/m$k ${args#* }"
  for f in "$tmp/m$k"/*.safetensors; do cp "$f" "$seeds/safetensors/m$k-$(basename "$f")"; done
  cp "$tmp/m$k/config.json" "$seeds/config/m$k.json"
  [ -f "$tmp/m$k/model.safetensors.index.json" ] && cp "$tmp/m$k/model.safetensors.index.json" "$seeds/index/m$k.json"
  k=$((k + 1))
done
if [ -x build/qkvlab ]; then
  build/qkvlab lm init "$tmp/own" --family llama --layers 1 --d 8 --heads 2 --vocab 11 --positions 4 >/dev/null
  cp "$tmp/own/model.safetensors" "$seeds/safetensors/own.safetensors"
  cp "$tmp/own/config.json" "$seeds/config/own.json"
fi

status=0
printf "%-32s %10s %9s %9s %8s %8s  %s\n" target runs seconds exec/s cov corpus result
for t in "${targets[@]}"; do
  case $t in
    *config*) kind=config ;;
    *index*) kind=index ;;
    *) kind=safetensors ;;
  esac
  mkdir -p "$out/corpus/$t"
  start=$(date +%s.%N)
  if "$out/$t" -runs="$runs" -seed=1 -max_len=8192 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -dict=fuzz/ckpt.dict -artifact_prefix="$out/artifacts/$t-" "$out/corpus/$t" "$seeds/$kind" \
       >"$out/$t.log" 2>&1; then
    result="no finding"
  else
    result="FINDING (see $out/$t.log, $out/artifacts/)"
    status=1
  fi
  end=$(date +%s.%N)
  executed=$({ grep -o 'stat::number_of_executed_units: [0-9]*' "$out/$t.log" || true; } | awk '{n += $2} END {print n + 0}')
  cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -1 | grep -o '[0-9]*$' || echo ?)
  corpus=$(ls "$out/corpus/$t" | wc -l)
  awk -v t="$t" -v n="$executed" -v a="$start" -v b="$end" -v cov="$cov" -v corpus="$corpus" -v result="$result" \
    'BEGIN {printf "%-32s %10s %9.1f %9.0f %8s %8s  %s\n", t, n, b - a, n / (b - a), cov, corpus, result}'
done
exit $status
