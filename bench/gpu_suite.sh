#!/usr/bin/env bash
# The GPU part of docs/benchmarks.md (issue 29, item 4), in one run on a machine with a CUDA device,
# the parts in order of priority, each under a time limit taken from one budget, each writing its
# logs and JSON to OUT as it finishes and a line to OUT/summary.txt:
#   tests     the CPU–CUDA agreement tests (lm_gpu_test, gpu_agreement_test, analysis_gpu_test,
#             transfer_test's TransferCuda.*)
#   analyze   `qkvlab analyze all` on GPT-2 124M, T = 1024, 16 sequences, --batch 16, on CUDA (and on the
#             CPU), against transformers' eager path with output_attentions (bench/pytorch/hf_analyze.py,
#             whose --save writes the model and tokens qkvlab reads), transformers with SDPA (no patterns:
#             the forward's floor) and PyTorch eager (gpt2_analyze.py), with the per-layer agreement
#   train     the training step of GPT-2 124M, B = 8, T = 1024: qkvlab (lm_gpu_bench, float32 and bf16
#             products: --dtype bf16) against PyTorch eager and torch.compile, float32 and bf16 autocast
#             (bench/pytorch/gpt2_train.py)
#   entropy   `qkvlab analyze entropy` on a Llama-shaped 1.1B model (`qkvlab lm init`: L = 16, d = 2048,
#             H = 32, 8 key/value heads, r = 8192, V = 32000) at T = 4096, against transformers'
#             LlamaForCausalLM eager with output_attentions and with SDPA (hf_llama_entropy.py)
#   memory    peak GPU memory (nvidia-smi, sampled every 50 ms) and host RSS of `qkvlab analyze entropy`
#             and `similarity` --device cuda at T = 2048, 8192, 32768 on the Llama-shaped 32k-position
#             model of docs/benchmarks.md (L = 4, d = 256, H = 4, 2 key/value heads)
#   sanitize  compute-sanitizer memcheck, racecheck, initcheck, synccheck over analysis_gpu_test and
#             lm_gpu_test, the eight runs at once (SANITIZE_LIMIT seconds each, default 180)
#   bench     cuBLAS rates (gpu_bench) and the Llama training step (lm_gpu_bench --family llama)
#
#   bash bench/gpu_suite.sh [--dry-run] [--budget SECONDS (540)] [BUILD_DIR (build)] [OUT (gpu-suite)]
#                           [SEQUENCES (16)] [PARTS (all of the above, in that order)]
#   bash bench/gpu_suite.sh --stage BUILD_DIR DIR   # packs the binaries the suite runs and their shared
#                                                   # libraries into DIR/staged.tar.xz (about 17 MB)
#
# The device tool carries git-ignored folders of up to 64 MiB: stage into build-gpu (ignored as
# /build-*/), carry it, and run `bash bench/gpu_suite.sh build-gpu "$OUT/suite"` there, so the device's
# minutes go to the measurements, not to a build.
# BUILD_DIR must hold qkvlab, the tests (lm_gpu_test gpu_agreement_test analysis_gpu_test
# transfer_test) and the benchmarks (gpu_bench lm_gpu_bench). The Python parts need python3 with
# torch and transformers (the device machine has them); models are made here (`qkvlab lm init`,
# transformers' save_pretrained), tokens written by this script: nothing is downloaded.
# --budget: seconds for the whole run (the device tool allows 600 a command); a part that would start
# with less than 10 s left is skipped and says so.
# --dry-run (no GPU, no torch needed; what CI-like machines can check): every qkvlab command runs with
# the same options on the CPU at tiny sizes (so each parses and each input it reads exists), every
# test binary lists its tests under its filter, every Python script compiles and defines every
# option the suite passes it; nothing is timed. Exit status: non-zero if a test or command failed, a
# PyTorch measurement failed or timed out, or (outside --dry-run) a GPU test was skipped or a
# benchmark printed "no CUDA device" (gpu_bench and lm_gpu_bench exit 0 then, as bench/README.md says:
# here it means the suite measured nothing); each is named in summary.txt, which the other parts
# still write.
set -uo pipefail
dry=false
budget=540
while [[ ${1:-} == --* ]]; do
  case $1 in
    --dry-run) dry=true; shift ;;
    --budget) budget=$2; shift 2 ;;
    --stage)
      # The binaries and the shared libraries they load, except glibc's and the driver's, which the
      # device machine's image has (it has no OpenBLAS, HDF5, MPFR, ...), packed into one .tar.xz
      # (about 17 MB) that the suite unpacks where it finds it.
      files=(qkvlab tests/{lm_gpu_test,gpu_agreement_test,analysis_gpu_test,transfer_test} bench/{gpu_bench,lm_gpu_bench})
      staging=$(mktemp -d) && mkdir -p "$3" "$staging/lib" &&
        (cd "$2" && ldd "${files[@]}") | awk '/=> \//{print $3}' | sort -u |
        grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libcuda)\.so' | xargs -r cp -L -t "$staging/lib" &&
        (cd "$2" && cp --parents "${files[@]}" "$staging") &&
        tar -C "$staging" -cf - . | xz -T0 -6 > "$3/staged.tar.xz"
      rc=$?
      rm -rf "$staging"
      exit $rc ;;
    *) echo "gpu_suite.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
build=${1:-build}
out=${2:-gpu-suite}
sequences=${3:-16}
parts=" ${4:-tests analyze train entropy memory sanitize bench} "
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[[ -f $build/staged.tar.xz && ! -x $build/qkvlab ]] && tar -C "$build" -xJf "$build/staged.tar.xz"
[[ -d $build/lib ]] && export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$out"
: > "$out/summary.txt"
threads=$(nproc)
status=0
deadline=$(($(date +%s) + budget))
device=cuda seq=1024 seq_llama=4096 lengths="2048 8192 32768"
$dry && device=cpu seq=16 seq_llama=32 lengths="64 128 256" sequences=2

note() { echo "$*" | tee -a "$out/summary.txt"; }
now() { date +%s.%N; }
took() { python3 -c "print(f'{$2 - $1:.2f}')"; }
field() { python3 -c "import json,sys; t=json.load(open('$1')); print(eval(sys.argv[1]))" "$2" 2>/dev/null || echo "?"; }
left() { echo $((deadline - $(date +%s))); }
want() { [[ $parts == *" $1 "* ]] && { (($(left) >= 10)) || { note "$1: skipped, the budget is spent"; false; }; }; }

# run LIMIT LOG CMD...: CMD under `timeout` (at most the budget left), its output to LOG (stderr to
# $errlog when set).
run() {
  local limit=$1 log=$2
  shift 2
  ((limit > $(left))) && limit=$(left)
  ((limit < 1)) && { echo "not run: the budget is spent" > "$log"; return 124; }
  if [[ -n ${errlog:-} ]]; then
    timeout --kill-after=5 "$limit" "$@" > "$log" 2> "$errlog"
  else
    timeout --kill-after=5 "$limit" "$@" > "$log" 2>&1
  fi
}

# py LIMIT LOG SCRIPT ARGS...: a Python benchmark; in a dry run the script must compile and define
# every --option given.
py() {
  local limit=$1 log=$2 script=$here/pytorch/$3
  shift 3
  if $dry; then
    python3 -m py_compile "$script" || { note "dry run: $script does not compile"; status=1; return 1; }
    for a in "$@"; do
      [[ $a == --* ]] && ! grep -qE "\"${a}\"|\(\"${a#--}\"" "$script" && { note "dry run: $script has no option $a"; status=1; }
    done
    echo '{"seconds": 1, "tokens_per_second": 1, "step_seconds_median": 1, "means": {}}' > "$log"
    return 0
  fi
  local rc=0
  rm -f "${log%.json}.err"
  errlog=${log%.json}.err run "$limit" "$log" python3 "$script" "$@" || rc=$?  # stderr (warnings, progress bars) apart from the JSON
  ((rc == 0)) && return 0
  status=1
  local why
  why=$(tail -1 "${log%.json}.err" 2> /dev/null || tail -1 "$log")
  ((rc == 124 || rc == 137)) && [[ $why != "not run"* ]] && why="timed out${why:+; $why}"
  note "$(basename "$log" .json) ($(basename "$script")): failed, exit $rc: $why"
  return $rc
}

# nodevice LOG: a benchmark that found no CUDA device (it exits 0) fails the suite.
nodevice() {
  grep -q '^no CUDA device' "$1" || return 0
  status=1
  note "$(basename "$1" .log): failed: $(grep -m1 '^no CUDA device' "$1")"
}

# tokens FILE N T VOCAB: N random sequences of T token ids (seeded), as int32 .npy (no numpy needed).
tokens() {
  python3 - "$@" <<'EOF'
import random, struct, sys
path, n, T, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(1)
header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }" % (n, T)
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%di" % (n * T), *(rng.randrange(vocab) for _ in range(n * T))))
EOF
}

# gtest LIMIT NAME [FILTER]: one test binary; a dry run lists its tests.
gtest() {
  local limit=$1 name=$2 filter=${3:-*} log=$out/$2.log
  if $dry; then
    "$build/tests/$name" --gtest_list_tests --gtest_filter="$filter" > "$log" 2>&1 && grep -q '^  ' "$log" ||
      { note "dry run: $name lists no test under $filter"; status=1; }
    return
  fi
  local t0
  t0=$(now)
  run "$limit" "$log" "$build/tests/$name" --gtest_filter="$filter" || status=1
  note "$name: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$log" | grep -v '^\[  SKIPPED \] [^0-9]' | sed 's/, listed below://' | tr -s ' ' | tr '\n' ' ')($(took "$t0" "$(now)") s)"
  # The GPU tests skip only without a CUDA device: here that is a failure.
  grep -qE '^\[  SKIPPED \] [0-9]+ test' "$log" && { status=1; note "$name: failed: tests skipped (no CUDA device)"; }
}

# qk LIMIT NAME ARGS...: a qkvlab command, its output to OUT/NAME.json and stderr to OUT/NAME.err, its wall
# time noted.
qk() {
  local limit=$1 name=$2 t0
  shift 2
  t0=$(now)
  errlog=$out/$name.err run "$limit" "$out/$name.json" "$build/qkvlab" "$@" ||
    { status=1; note "$name: failed ($(tail -c 300 "$out/$name.err"))"; return 1; }
  $dry || note "$name: $(took "$t0" "$(now)") s (whole process)$(field "$out/$name.json" "', ' + str(round(t['seconds'], 3)) + ' s analysing (its JSON: loading excluded)' if 'seconds' in t else ''")"
}

# ---- tests ----------------------------------------------------------------------------------------
if want tests; then
  gtest 120 analysis_gpu_test
  gtest 120 lm_gpu_test
  gtest 60 gpu_agreement_test
  gtest 60 transfer_test 'TransferCuda.*'
fi

# ---- analyze all: GPT-2 124M, T = 1024, against transformers (eager, SDPA) and PyTorch ---------------
g124=$out/g124
if want analyze; then
  if $dry; then
    qk 60 g124_init lm init "$g124" --family gpt2 --layers 2 --d 32 --heads 4 --vocab 64 --positions "$seq" --tied --bias
    tokens "$g124/tokens.npy" "$sequences" "$seq" 64
  fi
  measured=()  # the Python measurements that succeeded (py names a failed one)
  py 150 "$out/hf_eager.json" hf_analyze.py --device cuda --sequences "$sequences" --save "$g124" && measured+=(hf_eager)
  py 60 "$out/hf_sdpa.json" hf_analyze.py --device cuda --sequences "$sequences" --attention sdpa && measured+=(hf_sdpa)
  py 60 "$out/pytorch_eager.json" gpt2_analyze.py --device cuda --sequences "$sequences" --threads "$threads" &&
    measured+=(pytorch_eager)
  for f in "${measured[@]}"; do
    $dry || note "$f: $(field "$out/$f.json" "t['implementation'] + ' | ' + str(round(t['seconds'], 3)) + ' s, ' + str(round(t['tokens_per_second'])) + ' tokens/s'")"
  done
  for run_on in "$device 16" "cpu 16"; do
    set -- $run_on
    name=analyze_all_$1_b$2
    qk 120 "$name" analyze all "$g124" --tokens "$g124/tokens.npy" --seq-len "$seq" --sequences 0 --batch "$2" \
      --device "$1" --threads "$threads" --format json --quiet &&
      ! $dry && [[ " ${measured[*]} " == *" hf_eager "* ]] && note "  against transformers (largest relative difference over layers): $(python3 "$here/pytorch/hf_analyze.py" --compare "$out/$name.json" --means "$out/hf_eager.json" 2>&1 | tail -1)"
  done
fi

# ---- the training step: GPT-2 124M, B = 8, T = 1024 ----------------------------------------------------
if want train; then
  if $dry; then
    for dtype in f32 bf16; do
      "$build/bench/lm_gpu_bench" --seq 16 --batch 2 --layers 1 --d 32 --heads 4 --vocab 64 --steps 1 --warmup 0 \
        --dtype $dtype > "$out/train_qkvlab_$dtype.log" 2>&1 || { note "dry run: lm_gpu_bench --dtype $dtype failed"; status=1; }
    done
  else
    for dtype in f32 bf16; do
      run 60 "$out/train_qkvlab_$dtype.log" "$build/bench/lm_gpu_bench" --dtype $dtype || status=1
      note "train qkvlab (lm_gpu_bench --dtype $dtype): $(tail -1 "$out/train_qkvlab_$dtype.log")"
      nodevice "$out/train_qkvlab_$dtype.log"
    done
  fi
  for mode in "eager fp32" "eager bf16" "compile fp32" "compile bf16"; do
    set -- $mode
    flags=(--device cuda --layers 12 --d 768 --heads 12 --seq 1024 --batch 8 --vocab 50257 --steps 5 --warmup 2)
    [[ $1 == compile ]] && flags+=(--compile)
    [[ $2 == bf16 ]] && flags+=(--autocast bf16)
    py 120 "$out/train_pytorch_$1_$2.json" gpt2_train.py "${flags[@]}" &&
      ! $dry && note "train pytorch $1 $2: $(field "$out/train_pytorch_$1_$2.json" "str(round(t['step_seconds_median'], 4)) + ' s a step, ' + str(round(t['tokens_per_second'])) + ' tokens/s'")"
  done
fi

# ---- entropy at T = 4096 on a Llama-shaped 1.1B model ------------------------------------------------------
l1b=$out/llama1b
if want entropy; then
  shape=(--layers 16 --d 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32000)
  $dry && shape=(--layers 2 --d 64 --heads 4 --kv-heads 2 --ffn 96 --vocab 64)
  if qk 90 llama1b_init lm init "$l1b" --family llama "${shape[@]}" --positions "$seq_llama"; then
    tokens "$l1b/tokens.npy" 2 "$seq_llama" "$($dry && echo 64 || echo 32000)"
    qk 90 entropy_llama1b analyze entropy "$l1b" --tokens "$l1b/tokens.npy" --seq-len "$seq_llama" --sequences 0 \
      --batch 1 --device "$device" --threads "$threads" --format json --quiet
  fi
  for attention in eager sdpa; do
    py 120 "$out/entropy_hf_$attention.json" hf_llama_entropy.py --device cuda --seq 4096 --sequences 2 --attention "$attention" &&
      ! $dry && note "entropy transformers $attention: $(field "$out/entropy_hf_$attention.json" "str(round(t['seconds'], 3)) + ' s, peak ' + str(round((t['peak_memory_bytes'] or 0) / 2**30, 2)) + ' GiB'")"
  done
fi

# ---- peak memory at T = 2k, 8k, 32k on the GPU ------------------------------------------------------
l32k=$out/llama32k
if want memory; then
  if qk 60 llama32k_init lm init "$l32k" --family llama --layers 4 --d 256 --heads 4 --kv-heads 2 --vocab 4096 \
    --positions "${lengths##* }"; then
    for T in $lengths; do
      tokens "$l32k/tokens_$T.npy" 1 "$T" 4096
      for kind in entropy similarity; do
        sampler=""
        if ! $dry && command -v nvidia-smi > /dev/null; then
          nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 50 > "$out/memory_${kind}_$T.smi" &
          sampler=$!
        fi
        timer=()
        [[ -x /usr/bin/time ]] && timer=(/usr/bin/time -v)
        run 90 "$out/memory_${kind}_$T.log" "${timer[@]}" "$build/qkvlab" analyze "$kind" "$l32k" --tokens "$l32k/tokens_$T.npy" \
          --seq-len "$T" --sequences 1 --batch 1 --device "$device" --threads "$threads" --format json --quiet || status=1
        [[ -n $sampler ]] && kill "$sampler" 2> /dev/null
        $dry || note "memory $kind T=$T: GPU peak $(sort -n "$out/memory_${kind}_$T.smi" 2> /dev/null | tail -1) MiB used on the card" \
          "(idle $(sort -n "$out/memory_${kind}_$T.smi" 2> /dev/null | head -1) MiB), host $(grep -o 'Maximum resident set size (kbytes): [0-9]*' "$out/memory_${kind}_$T.log" | grep -o '[0-9]*$') kB"
      done
    done
  fi
fi

# ---- compute-sanitizer over the CUDA tests ---------------------------------------------------------------
if want sanitize; then
  if ! command -v compute-sanitizer > /dev/null; then
    note "sanitize: compute-sanitizer not found"
    $dry || status=1
  fi
  # The eight tool x test runs at once (nothing here is timed; the card and 16 host cores hold them),
  # each under the same limit.
  pairs=()
  for tool in memcheck racecheck initcheck synccheck; do
    for t in analysis_gpu_test lm_gpu_test; do
      if $dry; then
        [[ -x $build/tests/$t ]] || { note "dry run: $build/tests/$t missing"; status=1; }
        continue
      fi
      run "${SANITIZE_LIMIT:-180}" "$out/sanitize_${tool}_$t.log" compute-sanitizer --tool "$tool" --error-exitcode 99 "$build/tests/$t" &
      pairs+=("$tool $t $!")
    done
  done
  for pair in "${pairs[@]}"; do
    set -- $pair
    wait "$3"
    rc=$?
    ((rc == 0)) || status=1
    note "sanitize $1 $2: exit $rc, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_$1_$2.log" | tail -1)$( ((rc == 124)) && echo ' (timed out)')"
  done
fi

# ---- cuBLAS rates and the Llama training step ------------------------------------------------------------
if want bench; then
  if $dry; then
    [[ -x $build/bench/gpu_bench ]] || { note "dry run: gpu_bench missing"; status=1; }
  else
    run 60 "$out/gpu_bench.log" "$build/bench/gpu_bench" --benchmark_min_time=0.3 || status=1
    run 60 "$out/lm_gpu_bench_llama.log" "$build/bench/lm_gpu_bench" --family llama || status=1
    note "bench: gpu_bench and lm_gpu_bench --family llama, logs in $out"
    nodevice "$out/gpu_bench.log"
    nodevice "$out/lm_gpu_bench_llama.log"
  fi
fi

$dry && note "dry run: every command above ran or was checked; status $status"
exit $status
