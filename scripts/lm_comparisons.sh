#!/usr/bin/env bash
# The training comparisons of docs/lm-comparisons.md: every variant of the tiny
# GPT-2 preset and four of the tiny Llama preset on the Brown corpus, with seeds,
# then `qkvlab lm compare` over each family's runs.
#
#   scripts/lm_comparisons.sh [--qkvlab BIN] [--device cpu|cuda] [--out DIR] [--only REGEX] [--data DIR] [--jobs N] [--threads N] [--list]
#
# Each run goes to OUT/<family>/<name>-s<seed>; a run whose run.json exists is
# skipped, so the script can be stopped and started again: a stopped run resumes from its
# last checkpoint (every 200 steps; resuming is bit-identical to an uninterrupted run). Seed 1 of every run
# comes first, then seed 2, then 3, so a partial sweep is balanced. --jobs N runs
# N trainings at once (each is deterministic on its own); --threads N gives each N CPU threads (0,
# the default: all cores). --list prints each run it would
# train (FAMILY/NAME-sSEED: --preset PRESET FLAGS) and exits. Needs `qkvlab data brown`.
# A failed training is named (FAMILY/NAME-sSEED: FAILED); its family's FAMILY-compare.json is then
# left as it was (a comparison missing a recipe is not written), the other families are compared, and
# the exit status is 1. A bad option (a missing value, --device other than cpu|cuda, --jobs outside
# 1–256, --threads outside 0–256, an --only that is not a regular expression) is refused in one line,
# exit status 2, before anything runs.
set -euo pipefail

qkvlab=build/qkvlab device=cpu out=outputs/lm only=. data=data/brown jobs=1 threads=0 list=0
source "$(dirname "${BASH_SOURCE[0]}")/options.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --qkvlab|--device|--out|--only|--data|--jobs|--threads) need "$@" ;;&
    --qkvlab) qkvlab=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --list) list=1; shift ;;
    *) usage_error "unknown argument $1" ;;
  esac
done
one_of --device "$device" cpu cuda
integer_option --jobs "$jobs" 1 256
integer_option --threads "$threads" 0 256
regex_option --only "$only"

# The recipes, a line each: family|preset|name|seeds|flags (on top of the preset). They are defined
# once, in reproduce/recipes.cpp, which the figures of `qkvlab reproduce` train from too.
mapfile -t recipes < <("$qkvlab" reproduce --list-recipes)
((${#recipes[@]})) || { echo "lm_comparisons.sh: '$qkvlab reproduce --list-recipes' listed no recipes" >&2; exit 2; }

failures=$(mktemp -d)  # a file FAMILY/NAME-sSEED per failed training (written by its job, one_run)
trap 'rm -rf "$failures"' EXIT

one_run() {  # family preset name seed flags; a job of its own, which stops its training when stopped
  local family=$1 preset=$2 name=$3 seed=$4 flags=$5 start=$SECONDS
  local dir="$out/$family/$name-s$seed"
  # shellcheck disable=SC2086
  "$qkvlab" lm train --preset "$preset" $flags --corpus brown --data "$data" --seed "$seed" \
    --device "$device" --threads "$threads" --eval-every 100 --checkpoint-every 200 --out "$dir" --quiet --format json >/dev/null &
  local training=$!
  trap 'kill "$training" 2>/dev/null; exit 143' TERM
  local status=0
  wait "$training" || status=$?
  if ((status == 0)); then
    echo "$family/$name-s$seed: $(grep -o '"final_validation_loss": [0-9.e+-]*' "$dir/run.json") ($((SECONDS - start)) s)"
  else
    echo "$family/$name-s$seed: FAILED (exit $status)"
    mkdir -p "$failures/$family" && touch "$failures/$family/$name-s$seed"
  fi
}

trap 'kill $(jobs -p) 2>/dev/null; exit 143' TERM INT  # a stopped sweep stops its trainings too (one_run)

for seed in 1 2 3; do
  for entry in "${recipes[@]}"; do
    IFS='|' read -r family preset name seeds flags <<<"$entry"
    [[ " $seeds " == *" $seed "* ]] || continue
    [[ "$family/$name-s$seed" =~ $only ]] || continue
    if ((list)); then echo "$family/$name-s$seed: --preset $preset $flags"; continue; fi
    [[ -f "$out/$family/$name-s$seed/run.json" ]] && continue
    # An unfinished run of this script's (killed: no run.json) resumes from its checkpoint (or from
    # checkpoint.previous, where it was killed between a save's two renames), or, without one, starts
    # again: lm train refuses to write over a run's directory otherwise.
    resume="" run="$out/$family/$name-s$seed"
    if [[ -f "$run/checkpoint/manifest.json" || -f "$run/checkpoint.previous/manifest.json" ]]; then resume=--resume
    elif [[ -d "$run" ]]; then rm -rf "$run"; fi
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
    one_run "$family" "$preset" "$name" "$seed" "$flags $resume" &
  done
done
((list)) && exit 0
wait

for family in gpt2 llama; do  # each comparison whole or not at all: a temporary file renamed over it
  if [[ -d $failures/$family ]]; then
    echo "lm_comparisons.sh: $family: $(ls "$failures/$family" | wc -l) training(s) failed; $out/$family-compare.json left as it was" >&2
    continue
  fi
  compgen -G "$out/$family/*/run.json" >/dev/null || continue
  tmp=$(mktemp "$out/.$family-compare.json.XXXXXX")
  # The relative curves need a run besides the baseline's (lm compare refuses --csv without any: a
  # partial sweep of vanilla runs only gets its comparison, its earlier curves left as they were).
  curves=()
  if compgen -G "$out/$family/*/run.json" | grep -qv "/vanilla-s[0-9]*/run.json$"; then
    curves=(--csv "$out/$family-relative.csv" --figure "$out/$family-relative")
  fi
  if "$qkvlab" lm compare "$out/$family"/*/ --window 10 --format json "${curves[@]}" >"$tmp"; then
    chmod a+r "$tmp" && mv -f "$tmp" "$out/$family-compare.json"
  else
    rm -f "$tmp"
    exit 1
  fi
done
if [[ -n $(ls "$failures") ]]; then
  echo "lm_comparisons.sh: failed: $(cd "$failures" && echo */*)" >&2
  exit 1
fi
