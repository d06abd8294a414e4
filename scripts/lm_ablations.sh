#!/usr/bin/env bash
# The ablations of ResFormer's §4.2–4.3 as paired comparisons of the committed sweep's runs
# (scripts/lm_comparisons.sh): for each claim, `qkvlab lm compare --baseline REFERENCE --claim SENSE`
# over the two recipes' runs judges the difference "compared − reference" in final validation loss,
# paired by seed, by the rule of docs/figures.md (results/verdict.hpp: its mean beyond 2 standard
# errors on the claimed side agrees, on the other disagrees, else or with one seed inconclusive).
#
#   scripts/lm_ablations.sh [--qkvlab BIN] [--runs DIR (outputs/lm/gpt2)] [--json FILE]
#
# Prints a Markdown table (docs/lm-comparisons.md has it); --json also writes every comparison's
# `qkvlab lm compare` output, keyed by claim. Exit status 2 if a run a claim needs is missing.
set -euo pipefail

qkvlab=build/qkvlab runs=outputs/lm/gpt2 json=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --qkvlab) qkvlab=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "lm_ablations.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# figure|claim|reference run|compared run|sense (less: compared below reference)
claims=(
  "Fig. 1 left|ResFormer + NeuTRENO trains lower than ResFormer|resformer-half|resformer-neutreno|less"
  "Fig. 4|sharing values (CLA-V) hurts less than sharing keys (CLA-K)|cla-v|cla-k|greater"
  "Fig. 4|sharing values hurts less than sharing both (CLA-KV)|cla-v|cla-kv|greater"
  "Fig. 6|λ = 1 trains lower than λ = ½|resformer-l05|resformer-l1|less"
  "Fig. 6|λ = 2 trains lower than λ = 1|resformer-l1|resformer-l2|less"
  "Fig. 6|every λ trains lower than vanilla: λ = ½|vanilla|resformer-l05|less"
  "Fig. 6|every λ trains lower than vanilla: λ = 1|vanilla|resformer-l1|less"
  "Fig. 6|every λ trains lower than vanilla: λ = 2|vanilla|resformer-l2|less"
  "Fig. 7|a query residual does not help: above the value residual|resformer-half|resformer-q|greater"
  "Fig. 7|a key residual does not help: above the value residual|resformer-half|resformer-k|greater"
  "Fig. 8|identity mapping (Eq. 6) trains worse than the current attention (Eq. 4)|resformer-half|resformer-identity|greater"
  "Fig. 8|the current attention trains lower than cross-layer attention (Eq. 2)|resformer-half|resformer-cross|greater"
  "Fig. 9|the first layer's values beat layer 2's|resformer-half|resformer-source2|greater"
  "Fig. 9|the first layer's values beat the previous layer's|resformer-half|resformer-previous|greater"
  "Fig. 9|the first layer's values beat all previous layers'|resformer-half|resformer-all|greater"
)

echo "| ResFormer | claim | compared − reference (nats) | seeds | verdict |"
echo "|---|---|---|---|---|"
all="{"
for c in "${claims[@]}"; do
  IFS='|' read -r figure claim reference compared sense <<<"$c"
  dirs=()
  for name in "$reference" "$compared"; do
    found=("$runs/$name"-s[0-9]*/)
    [[ -d ${found[0]} ]] || { echo "lm_ablations.sh: no run $runs/$name-sSEED" >&2; exit 2; }
    dirs+=("${found[@]}")
  done
  result=$("$qkvlab" lm compare "${dirs[@]}" --baseline "$reference" --claim "$sense" --format json)
  all+="$([[ $all == "{" ]] || echo ,)\"$figure: $claim\": $result"
  # The compared group's paired difference and verdict (the reference group has neither).
  flat=$(printf '%s' "$result" | tr -d '\n' | tr -s ' ')
  read -r mean se n < <(grep -o '"delta_vs_baseline_mean": [^,]*, "delta_vs_baseline_se": [^,]*, "paired_seeds": [0-9]*' <<<"$flat" |
    grep -v 'null' | head -1 | sed -E 's/.*mean": ([^,]*), .*se": ([^,]*), .*seeds": ([0-9]*)/\1 \2 \3/')
  verdict=$(grep -o '"verdict": "[a-z]*"' <<<"$flat" | head -1 | cut -d'"' -f4)
  printf '| %s | %s | %+.4f ± %.4f | %s | **%s** |\n' "$figure" "$claim" "$mean" "$se" "$n" "$verdict"
done
[[ -n $json ]] && printf '%s}\n' "$all" > "$json"
exit 0
