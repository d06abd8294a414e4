#!/usr/bin/env bash
# Uptraining SkipV1Former from trained vanilla models (SkipV1Former §5.1, Fig. 8, 10), as in
# docs/lm-comparisons.md: each vanilla checkpoint converted by every method of `qkvlab lm convert`
# (svd is released-svd; mean-v, the same as released-avg, is not run twice),
# its validation loss as converted, then `qkvlab lm train --from` for a tenth and a fifth of the
# preset's 1,200 steps (peak lr 3e-4 = 1.5x the preset's floor, as SkipV1Former App. B.1 found best relative
# to its pretraining's final rate; fresh windows: seed + 100). The control, `vanilla`, is the
# vanilla checkpoint itself, not converted, trained on the same way.
#
# DIR holds vanilla-sSEED/checkpoint (scripts/lm_comparisons.sh's runs: DIR = OUT/gpt2) or
# vanilla-sSEED-HASH/checkpoint (the same recipe in `qkvlab reproduce`'s cache: DIR = outputs/reproduce/work).
#
#   scripts/lm_uptraining.sh --vanilla DIR [--qkvlab BIN] [--device D]
#                            [--data DIR] [--out DIR] [--jobs N] [--threads N]
# --threads N: each training's and evaluation's CPU threads (0, the default: all cores; with
# --jobs J on C cores, C/J keeps the cores from being oversubscribed).
# One invocation's results are one generation: a stamp (UTC time and PID) in initial.csv's
# generation column and in each run's file `generation`, which uptraining_table.py checks.
# A bad option (a missing value, --device other than cpu|cuda, --jobs outside 1–256, --threads
# outside 0–256, a --qkvlab that is not an executable) is refused in one line, exit status 2,
# before anything runs.
set -euo pipefail
qkvlab=build/qkvlab device=cpu data=data/brown out=outputs/lm/uptraining jobs=1 threads=0 vanilla=outputs/lm/gpt2
source "$(dirname "${BASH_SOURCE[0]}")/options.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --qkvlab|--device|--data|--out|--jobs|--threads|--vanilla) need "$@" ;;&
    --qkvlab) qkvlab=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --vanilla) vanilla=$2; shift 2 ;;
    *) usage_error "unknown argument $1" ;;
  esac
done
one_of --device "$device" cpu cuda
integer_option --jobs "$jobs" 1 256
integer_option --threads "$threads" 0 256
command -v "$qkvlab" >/dev/null || usage_error "$qkvlab is not an executable (--qkvlab BIN)"
trap 'kill $(jobs -p) 2>/dev/null; exit 143' TERM INT
checkpoints=("$vanilla"/vanilla-s*/checkpoint)
[[ -d ${checkpoints[0]} ]] || { echo "lm_uptraining.sh: no $vanilla/vanilla-sSEED[-HASH]/checkpoint: nothing to convert" >&2; exit 2; }
mkdir -p "$out"
# The results are written all or none: initial.csv as a temporary file and each run in a directory
# RUN.training, all renamed over the old ones at the end only when every training finished; a failed
# training is named, the earlier generation is kept whole (this one's finished runs stay in
# RUN.training, to examine; a rerun replaces them), and the exit status is 1.
generation=$(date -u +%Y%m%dT%H%M%SZ)-$$
summary=$(mktemp "$out/.initial.csv.XXXXXX")
trap 'rm -f "$summary"' EXIT  # a stopped or failed run leaves initial.csv as it was
echo "seed,method,initial_validation_loss,generation" > "$summary"
trainings=()  # their PIDs: each one's status is read at the end (bash keeps it after wait -n)
runs=()       # every run trained, renamed from RUN.training at the end
train_run() {  # conv run seed steps: trains into run.training, stamped with this generation
  local conv=$1 run=$2 seed=$3 steps=$4
  rm -rf "$run.training"
  if "$qkvlab" lm train --from "$conv" --preset tiny --steps "$steps" --lr 3e-4 --min-lr 3e-5 --corpus brown \
      --data "$data" --seed $((seed + 100)) --device "$device" --threads "$threads" --eval-every 60 \
      --checkpoint-every 100000 --out "$run.training" --quiet --format json >/dev/null; then
    echo "$generation" > "$run.training/generation"
  else
    echo "lm_uptraining.sh: $run: training failed" >&2
    return 1
  fi
}
for ck in "${checkpoints[@]}"; do
  seed=$(basename "$(dirname "$ck")"); seed=${seed#vanilla-s}; seed=${seed%%-*}  # vanilla-sSEED[-HASH]
  for method in vanilla released-avg released-topk released-topk1 svd mean-v-adjacent mean-vo top-v top-vo; do
    conv="$out/converted/$method-s$seed"
    if [[ $method == vanilla ]]; then conv=$ck; else
      "$qkvlab" lm convert "$ck" --to skipv1 --method "$method" --out "$conv" >/dev/null
    fi
    loss=$("$qkvlab" lm eval "$conv" --tokens "$data/validation_tokens.npy" --seq-len 128 --device "$device" \
           --threads "$threads" --quiet --format json | grep -o '"loss": [0-9.e+-]*' | cut -d' ' -f2)
    echo "$seed,$method,$loss,$generation" >> "$summary"
    for steps in 120 240; do
      while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
      train_run "$conv" "$out/$method-$steps-s$seed" "$seed" "$steps" &
      trainings+=($!) runs+=("$out/$method-$steps-s$seed")
    done
  done
done
failed=0
for pid in "${trainings[@]}"; do wait "$pid" || failed=$((failed + 1)); done
if ((failed > 0)); then
  echo "lm_uptraining.sh: $failed trainings failed; the earlier runs and initial.csv are kept (this generation's finished runs are in RUN.training)" >&2
  exit 1
fi
for run in "${runs[@]}"; do rm -rf "$run" && mv "$run.training" "$run"; done
chmod a+r "$summary" && mv -f "$summary" "$out/initial.csv"
