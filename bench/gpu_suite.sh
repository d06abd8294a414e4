#!/usr/bin/env bash
# The GPU part of docs/benchmarks.md, in one run on a machine with a CUDA device: the CPU–CUDA
# agreement tests, cuBLAS rates and the language model's training step, and `qkvlab analyze all` against the papers' path on the same card (PyTorch
# eager, bench/pytorch/gpt2_analyze.py, and Hugging Face transformers, bench/pytorch/hf_analyze.py:
# python3 with torch and transformers), with the per-layer numbers of qkvlab on CUDA and on the
# CPU compared with transformers'. Logs and JSON go to OUT; a summary is printed last.
#
#   bash bench/gpu_suite.sh [BUILD_DIR (build)] [OUT (gpu-suite)] [SEQUENCES (16)] [PARTS]
# PARTS: some of "tests bench analyze" (default all three), in quotes.
# BUILD_DIR must hold qkvlab, the tests (lm_gpu_test gpu_agreement_test analysis_gpu_test
# transfer_test) and the benchmarks (gpu_bench lm_gpu_bench): cmake --build BUILD_DIR
# --target qkvlab <those>. Exit status: non-zero if a test failed.
set -uo pipefail
build=${1:-build}
out=${2:-gpu-suite}
sequences=${3:-16}
parts=" ${4:-tests bench analyze} "
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
threads=$(nproc)
summary=()
status=0
now() { date +%s.%N; }
took() { python3 -c "print(f'{$2 - $1:.2f}')"; }

# ---- agreement tests ------------------------------------------------------------------------
[[ $parts == *" tests "* ]] && for t in lm_gpu_test gpu_agreement_test analysis_gpu_test "transfer_test --gtest_filter=TransferCuda.*"; do
  name=${t%% *}
  t0=$(now)
  "$build/tests/"$t > "$out/$name.log" 2>&1 || status=1
  summary+=("$name: $(grep -E '^\[  (PASSED|FAILED|  SKIPPED)' "$out/$name.log" | tr -s ' ' | tr '\n' ' ')($(took "$t0" "$(now)") s)")
done

# ---- cuBLAS and the training step -----------------------------------------------------------
if [[ $parts == *" bench "* ]]; then
  "$build/bench/gpu_bench" --benchmark_min_time=0.3 > "$out/gpu_bench.log" 2>&1 || status=1
  "$build/bench/lm_gpu_bench" > "$out/lm_gpu_bench.log" 2>&1 || status=1
  "$build/bench/lm_gpu_bench" --family llama > "$out/lm_gpu_bench_llama.log" 2>&1 || status=1
fi

# ---- analyze against the papers' path (GPT-2 124M, T = 1024) ----------------------------------
model="$out/g124"
[[ $parts == *" analyze "* ]] || { printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"; exit $status; }
python3 "$here/pytorch/hf_analyze.py" --device cuda --sequences "$sequences" --save "$model" > "$out/hf_cuda.json" 2> "$out/hf.log" || status=1
python3 "$here/pytorch/gpt2_analyze.py" --device cuda --sequences "$sequences" --threads "$threads" > "$out/pytorch_cuda.json" 2>> "$out/hf.log" || status=1
for f in hf_cuda pytorch_cuda; do
  summary+=("$f: $(python3 -c "import json; t=json.load(open('$out/$f.json')); print(t['implementation'], '|', round(t['seconds'], 3), 's', round(t['tokens_per_second']), 'tokens/s')")")
done
for run in "cuda 1" "cuda 16" "cpu 16"; do
  set -- $run
  t0=$(now)
  "$build/qkvlab" analyze all "$model" --tokens "$model/tokens.npy" --seq-len 1024 --sequences 0 --batch "$2" \
    --device "$1" --threads "$threads" --format json --quiet > "$out/qkvlab_$1_b$2.json" 2>> "$out/analyze.log" || status=1
  seconds=$(took "$t0" "$(now)")
  summary+=("qkvlab analyze all --device $1 --batch $2: $seconds s (whole process), $(python3 -c "print(round($sequences * 1024 / $seconds))") tokens/s;" \
            "  against transformers: $(python3 "$here/pytorch/hf_analyze.py" --compare "$out/qkvlab_$1_b$2.json" --means "$out/hf_cuda.json")")
done

printf '%s\n' "${summary[@]}" | tee "$out/summary.txt"
exit $status
