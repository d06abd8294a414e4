#!/usr/bin/env bash
# The papers' ablation claims as paired comparisons of the committed sweep's runs
# (scripts/lm_comparisons.sh): for each claim, `qkvlab lm compare --baseline REFERENCE --claim SENSE`
# over the two recipes' runs judges the difference "compared − reference" in final validation loss,
# paired by seed, by the rule of docs/figures.md (results/verdict.hpp: its mean beyond Student's t
# quantile 0.975 at n − 1 degrees of freedom standard errors on the claimed side agrees, on the
# other disagrees, else or with one seed inconclusive).
#
#   scripts/lm_ablations.sh [--paper resformer|skipv1] [--qkvlab BIN] [--runs DIR (outputs/lm)] [--json FILE]
#
# resformer: ResFormer's §4.2–4.3 on the H100 sweep (outputs/lm); skipv1: SkipV1Former's source
# layers (Fig. 9b), injection strategies (App. C.4), SkipKV1 and SkipV1-YOCO (Fig. 15), GQA and MLA
# (Table 2), run on the CPU (--runs outputs/lm/cpu, with the reproduce cache's CPU vanilla and SkipV1
# runs beside them, so that every pair is of one device). Prints a Markdown table
# (docs/lm-comparisons.md has them); --json also writes every comparison's `qkvlab lm compare`
# output, keyed by claim. The runs of a recipe are its directories NAME-sSEED (or the reproduce
# cache's NAME-sSEED-HASH) holding run.json; others (a run still training, a directory named
# otherwise) are named on stderr and left out. Two runs of one seed (NAME-sSEED beside a copy
# NAME-sSEED-HASH) are not: lm compare refuses them, naming both, and the row is "lm compare failed",
# not run (remove one). Each recipe's runs must form one group of lm compare (one model, training,
# device and starting point), every row's numbers and verdict are that group's, and a row is
# written to --json only when it is in the table. A claim whose runs are missing, share no seed or
# do not form two groups is a row "not run", and the exit status 2; --json is then left as it was.
# A bad option (a missing value, another --paper) is refused in one line, exit status 2, first.
set -euo pipefail
here=$(dirname "${BASH_SOURCE[0]}")

paper=resformer qkvlab=build/qkvlab runs=outputs/lm json=""
source "$here/options.sh"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --paper|--qkvlab|--runs|--json) need "$@" ;;&
    --paper) paper=$2; shift 2 ;;
    --qkvlab) qkvlab=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) usage_error "unknown argument $1" ;;
  esac
done
one_of --paper "$paper" resformer skipv1

# figure|claim|reference run|compared run|sense (less: compared below reference); runs as FAMILY/NAME
resformer=(
  "Fig. 1 left|ResFormer + NeuTRENO trains lower than ResFormer|gpt2/resformer-half|gpt2/resformer-neutreno|less"
  "Fig. 4|sharing values (CLA-V) hurts less than sharing keys (CLA-K)|gpt2/cla-v|gpt2/cla-k|greater"
  "Fig. 4|sharing values hurts less than sharing both (CLA-KV)|gpt2/cla-v|gpt2/cla-kv|greater"
  "Fig. 6|λ = 1 trains lower than λ = ½|gpt2/resformer-l05|gpt2/resformer-l1|less"
  "Fig. 6|λ = 2 trains lower than λ = 1|gpt2/resformer-l1|gpt2/resformer-l2|less"
  "Fig. 6|every λ trains lower than vanilla: λ = ½|gpt2/vanilla|gpt2/resformer-l05|less"
  "Fig. 6|every λ trains lower than vanilla: λ = 1|gpt2/vanilla|gpt2/resformer-l1|less"
  "Fig. 6|every λ trains lower than vanilla: λ = 2|gpt2/vanilla|gpt2/resformer-l2|less"
  "Fig. 7|a query residual does not help: above the value residual|gpt2/resformer-half|gpt2/resformer-q|greater"
  "Fig. 7|a key residual does not help: above the value residual|gpt2/resformer-half|gpt2/resformer-k|greater"
  "Fig. 8|identity mapping (Eq. 6) trains worse than the current attention (Eq. 4)|gpt2/resformer-half|gpt2/resformer-identity|greater"
  "Fig. 8|the current attention trains lower than cross-layer attention (Eq. 2)|gpt2/resformer-half|gpt2/resformer-cross|greater"
  "Fig. 9|the first layer's values beat layer 2's|gpt2/resformer-half|gpt2/resformer-source2|greater"
  "Fig. 9|the first layer's values beat the previous layer's|gpt2/resformer-half|gpt2/resformer-previous|greater"
  "Fig. 9|the first layer's values beat all previous layers'|gpt2/resformer-half|gpt2/resformer-all|greater"
)
skipv1=(
  "Fig. 9b|layer 3's values are weaker than layer 1's (SkipV3)|gpt2/skipv1|gpt2/skipv3|greater"
  "Fig. 9b|layer 4's values are weaker than layer 1's (SkipV4)|gpt2/skipv1|gpt2/skipv4|greater"
  "Fig. 15|SkipKV1 trains worse than SkipV1|gpt2/skipv1|gpt2/skipkv1|greater"
  "Fig. 15|SkipKV1 trains worse than vanilla|gpt2/vanilla|gpt2/skipkv1|greater"
  "Fig. 15|SkipV1-YOCO trains a little worse than SkipV1|gpt2/skipv1|gpt2/skipv1-yoco|greater"
  "Fig. 15|SkipV1-YOCO trains better than vanilla|gpt2/vanilla|gpt2/skipv1-yoco|less"
  "Fig. 4|SkipV1 trains lower than vanilla in the released GPT-2 (RoPE, no position table)|gpt2/vanilla-rope|gpt2/skipv1-rope|less"
  "Table 2|GQA + SkipV1 trains lower than GQA|llama/gqa|llama/gqa-skipv1|less"
  "Table 2|MLA + SkipV1 trains lower than MLA|llama/mla|llama/mla-skipv1|less"
)
# App. C.4 (Table 13): the strategies differ little from SkipV1's second half; measured, not judged
# (its claim is "no substantial improvement", a tolerance the paper does not state).
skipv1_measured=(
  "App. C.4|pooling against the second half|gpt2/skipv1|gpt2/skipv1-pooling|"
  "App. C.4|dynamic against the second half|gpt2/skipv1|gpt2/skipv1-dynamic|"
  "App. C.4|odd/even against the second half|gpt2/skipv1|gpt2/skipv1-odd-even|"
  "App. C.4|SkipV1 + ResFormer against the second half|gpt2/skipv1|gpt2/skipv1-plus-resformer|"
)
case $paper in
  resformer) claims=("${resformer[@]}"); label=ResFormer ;;
  skipv1) claims=("${skipv1[@]}" "${skipv1_measured[@]}"); label=SkipV1Former ;;
esac

# The finished runs of FAMILY/NAME: NAME-sSEED[-HASH]/ with run.json; the rest named on stderr.
runs_of() {
  local dir base
  for dir in "$runs/$1"-s[0-9]*/; do
    [[ -d $dir ]] || continue
    base=$(basename "$dir")
    if [[ ! $base =~ ^${1#*/}-s[0-9]+(-[0-9a-f]{16})?$ ]]; then
      echo "lm_ablations.sh: $dir is not a run of ${1#*/} (NAME-sSEED): left out" >&2
    elif [[ ! -f $dir/run.json ]]; then
      echo "lm_ablations.sh: $dir has no run.json (unfinished): left out" >&2
    else
      printf '%s\n' "$dir"
    fi
  done
}

echo "| $label | claim | compared − reference (nats) | seeds | verdict |"
echo "|---|---|---|---|---|"
all="{" missing=0
for c in "${claims[@]}"; do
  IFS='|' read -r figure claim reference compared sense <<<"$c"
  mapfile -t reference_dirs < <(runs_of "$reference")
  mapfile -t compared_dirs < <(runs_of "$compared")
  absent=""
  ((${#reference_dirs[@]})) || absent+=" $reference"
  ((${#compared_dirs[@]})) || absent+=" $compared"
  if [[ -n $absent ]]; then  # the row says so; the exit status too, after the table
    echo "lm_ablations.sh: no finished runs $runs/NAME-sSEED for${absent}" >&2
    missing=1
    printf '| %s | %s | not trained | 0 | not run |\n' "$figure" "$claim"
    continue
  fi
  judged=()
  [[ -n $sense ]] && judged=(--claim "$sense")
  if ! result=$("$qkvlab" lm compare "${reference_dirs[@]}" "${compared_dirs[@]}" --baseline "${reference#*/}" \
                  "${judged[@]}" --format json); then
    missing=1
    printf '| %s | %s | lm compare failed | 0 | not run |\n' "$figure" "$claim"
    continue
  fi
  # One row's numbers, all of one group: refused (exit 1, a reason on stdout) unless the runs form
  # exactly the reference group and the compared group, holding every run.
  if ! row=$(python3 "$here/ablation_row.py" "${#reference_dirs[@]}" "${#compared_dirs[@]}" <<<"$result"); then
    echo "lm_ablations.sh: $reference and $compared: $row" >&2  # the row says so; the exit status too
    missing=1
    printf '| %s | %s | %s | 0 | not run |\n' "$figure" "$claim" "$row"
    continue
  fi
  read -r mean se n verdict <<<"$row"
  [[ -z $sense ]] && verdict="measured"
  all+="$([[ $all == "{" ]] || echo ,)\"$figure: $claim\": $result"
  spread=$([[ $se == null ]] && echo "(one seed)" || printf '± %.4f' "$se")
  printf '| %s | %s | %+.4f %s | %s | **%s** |\n' "$figure" "$claim" "$mean" "$spread" "$n" "$verdict"
done
if [[ -n $json ]] && ((missing)); then
  echo "lm_ablations.sh: rows not run: $json left as it was" >&2
elif [[ -n $json ]]; then  # whole or not at all: a temporary file beside it, renamed over it
  tmp=$(mktemp "$(dirname "$json")/.$(basename "$json").XXXXXX")
  printf '%s}\n' "$all" > "$tmp" && chmod a+r "$tmp" && mv -f "$tmp" "$json" || { rm -f "$tmp"; exit 1; }
fi
exit $((missing ? 2 : 0))
