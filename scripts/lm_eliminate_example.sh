#!/usr/bin/env bash
# What W_Q = I costs a trained tiny GPT-2 without retraining (docs/lm.md, "Example"): trains the
# model (the tiny preset at L = 4, d = 64 on Brown; about 10 minutes on two shared cores), keeps its
# model.safetensors and config.json (1.9 MB) in DIR/model, and runs `qkvlab lm eliminate` on 64
# validation sequences of 128 tokens for each layer alone (DIR/layer-N.json, or the one-line
# refusal in DIR/layer-N.refused.txt) and for all the layers not refused at once (DIR/all.json).
# Two models: $out with LayerNorm (1,000 steps, the preset's biases) and $out/norm-free (--norm
# none --bias=false, 500 steps: Theorem 4.1's setting).
#
#   scripts/lm_eliminate_example.sh [--qkvlab BIN] [--data DIR] [--out DIR] [--skip-training]
#
# Relative paths, the defaults (build/qkvlab, data/brown, outputs/lm/eliminate) included, are taken
# from the current directory: run it from the repository root. --skip-training measures DIR/model as
# it is. A layer counts as refused only on lm eliminate's one-line per-layer refusal (W_Q numerically
# singular, or keys shared with another layer); any other failure stops the script. Each model's
# results are made in a staging directory and moved over DIR's only when every step succeeded, so a
# failed step is named, the exit status is non-zero, and DIR keeps its earlier results.
set -euo pipefail
qkvlab=build/qkvlab data=data/brown out=outputs/lm/eliminate train=1
source "$(dirname "${BASH_SOURCE[0]}")/options.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --qkvlab|--data|--out) need "$@" ;;&
    --qkvlab) qkvlab=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-training) train=0; shift ;;
    -h|--help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) usage_error "unknown argument $1" ;;
  esac
done
command -v "$qkvlab" >/dev/null || usage_error "$qkvlab is not an executable (--qkvlab BIN)"
work=$(mktemp -d)
stage=""
trap 'rm -rf "$work" ${stage:+"$stage"}' EXIT
measure=(--corpus brown --data "$data" --split validation --sequences 64 --seq-len 128 --seed 1 --threads 2 --format json)

fail() {  # STEP STATUS: names the failed step, shows its error output and stops; DIR is left as it was
  echo "lm_eliminate_example.sh: $1 failed (exit $2); the earlier results are kept" >&2
  cat "$work/err" >&2
  exit "$2"
}

# example DIR STEPS [model flags]: train (unless --skip-training), then eliminate each layer and all,
# each output into $stage, moved into DIR at the end.
example() {
  local dir=$1 steps=$2 model=$1/model status
  shift 2
  mkdir -p "$dir"
  stage=$(mktemp -d "$dir/.staging.XXXXXX")  # beside DIR's files, so the moves at the end are renames
  if [[ $train == 1 ]]; then
    model=$stage/model
    "$qkvlab" lm train --preset tiny --corpus brown --data "$data" --layers 4 --d 64 --heads 4 --positions 128 "$@" \
      --steps "$steps" --eval-every 250 --threads 2 --out "$work/run" --format json --quiet \
      > "$stage/train.json" 2> "$work/err" || fail "$dir: lm train" $?
    mkdir "$model"
    cp "$work/run/checkpoint/model.safetensors" "$work/run/checkpoint/config.json" "$model/"
    rm -rf "$work/run"
  fi
  local eliminable=() layer
  for layer in 1 2 3 4; do
    if "$qkvlab" lm eliminate "$model" --out "$work/layer-$layer" --layers "$layer" "${measure[@]}" \
         > "$stage/layer-$layer.json" 2> "$work/err"; then
      eliminable+=("$layer")
    else
      status=$?
      rm -f "$stage/layer-$layer.json"
      # lm eliminate's per-layer refusals (lm/eliminate.cpp), a single line; every other error is a failure
      if [[ $status == 2 && $(wc -l < "$work/err") == 1 ]] &&
         grep -Eq "^qkvlab: error: layer $layer(: W_Q is numerically singular| shares its key or query heads)" "$work/err"; then
        mv "$work/err" "$stage/layer-$layer.refused.txt"
      else
        fail "$dir: lm eliminate --layers $layer" "$status"
      fi
    fi
  done
  if ((${#eliminable[@]} == 0)); then
    echo "lm_eliminate_example.sh: $dir: every layer was refused, nothing to eliminate at once; the earlier results are kept" >&2
    exit 1
  fi
  local all
  all=$(IFS=,; echo "${eliminable[*]}")
  "$qkvlab" lm eliminate "$model" --out "$work/all" --layers "$all" "${measure[@]}" \
    > "$stage/all.json" 2> "$work/err" || fail "$dir: lm eliminate --layers $all" $?

  # Every step succeeded: the new results replace the old, a layer's .json and .refused.txt exclusive.
  if [[ $train == 1 ]]; then
    mkdir -p "$dir/model"
    mv -f "$model/model.safetensors" "$model/config.json" "$dir/model/"
    mv -f "$stage/train.json" "$dir/"
  fi
  for layer in 1 2 3 4; do
    if [[ -f $stage/layer-$layer.json ]]; then
      mv -f "$stage/layer-$layer.json" "$dir/" && rm -f "$dir/layer-$layer.refused.txt"
    else
      mv -f "$stage/layer-$layer.refused.txt" "$dir/" && rm -f "$dir/layer-$layer.json"
    fi
  done
  mv -f "$stage/all.json" "$dir/"
  rm -rf "$stage"
  stage=""
}

example "$out" 1000
example "$out/norm-free" 500 --norm none --bias=false
