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
set -euo pipefail
qkvlab=build/qkvlab data=data/brown out=outputs/lm/eliminate train=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --qkvlab) qkvlab=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --skip-training) train=0; shift ;;
    *) echo "lm_eliminate_example.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
measure=(--corpus brown --data "$data" --split validation --sequences 64 --seq-len 128 --seed 1 --threads 2 --format json)

# example DIR STEPS [model flags]: train (unless --skip-training), then eliminate each layer and all.
example() {
  local dir=$1 steps=$2
  shift 2
  mkdir -p "$dir/model"
  if [[ $train == 1 ]]; then
    "$qkvlab" lm train --preset tiny --corpus brown --data "$data" --layers 4 --d 64 --heads 4 --positions 128 "$@" \
      --steps "$steps" --eval-every 250 --threads 2 --out "$work/run" --format json --quiet > "$dir/train.json"
    cp "$work/run/checkpoint/model.safetensors" "$work/run/checkpoint/config.json" "$dir/model/"
    rm -rf "$work/run"
  fi
  local eliminable=() layer status
  for layer in 1 2 3 4; do
    rm -f "$dir/layer-$layer.json" "$dir/layer-$layer.refused.txt"
    if "$qkvlab" lm eliminate "$dir/model" --out "$work/layer-$layer" --layers "$layer" "${measure[@]}" \
         > "$work/layer.json" 2> "$work/layer.err"; then
      mv "$work/layer.json" "$dir/layer-$layer.json"
      eliminable+=("$layer")
    else
      status=$?
      [[ $status == 2 ]] || { cat "$work/layer.err" >&2; exit "$status"; }
      mv "$work/layer.err" "$dir/layer-$layer.refused.txt"
    fi
  done
  "$qkvlab" lm eliminate "$dir/model" --out "$work/all" --layers "$(IFS=,; echo "${eliminable[*]}")" "${measure[@]}" \
    > "$dir/all.json"
}

example "$out" 1000
example "$out/norm-free" 500 --norm none --bias=false
