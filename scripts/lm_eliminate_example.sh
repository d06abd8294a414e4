#!/usr/bin/env bash
# What W_Q = I costs a trained tiny GPT-2 (LayerNorm) without retraining (docs/lm.md, "Example"):
# trains the model (the tiny preset at L = 4, d = 64, 1,000 steps on Brown; about 14 minutes on two
# shared cores), keeps its model.safetensors and config.json (1.9 MB) in $out/model, and runs
# `qkvlab lm eliminate` on 64 validation sequences of 128 tokens for each layer alone
# ($out/layer-N.json, or the one-line refusal in $out/layer-N.refused.txt) and for all the layers
# that are not refused at once ($out/all.json).
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
mkdir -p "$out/model"
if [[ $train == 1 ]]; then
  "$qkvlab" lm train --preset tiny --corpus brown --data "$data" --layers 4 --d 64 --heads 4 --positions 128 \
    --steps 1000 --eval-every 250 --threads 2 --out "$work/run" --format json --quiet > "$out/train.json"
  cp "$work/run/checkpoint/model.safetensors" "$work/run/checkpoint/config.json" "$out/model/"
fi
measure=(--corpus brown --data "$data" --split validation --sequences 64 --seq-len 128 --seed 1 --threads 2 --format json)
eliminable=()  # a layer refused (exit 2: e.g. W_Q numerically singular in float) keeps its one line
for layer in 1 2 3 4; do
  rm -f "$out/layer-$layer.json" "$out/layer-$layer.refused.txt"
  if "$qkvlab" lm eliminate "$out/model" --out "$work/layer-$layer" --layers "$layer" "${measure[@]}" \
       > "$work/layer.json" 2> "$work/layer.err"; then
    mv "$work/layer.json" "$out/layer-$layer.json"
    eliminable+=("$layer")
  else
    status=$?
    [[ $status == 2 ]] || { cat "$work/layer.err" >&2; exit "$status"; }
    mv "$work/layer.err" "$out/layer-$layer.refused.txt"
  fi
done
layers=$(IFS=,; echo "${eliminable[*]}")
"$qkvlab" lm eliminate "$out/model" --out "$work/all" --layers "$layers" "${measure[@]}" > "$out/all.json"
