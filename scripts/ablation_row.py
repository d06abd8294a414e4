#!/usr/bin/env python3
"""One row of scripts/lm_ablations.sh's table, from `qkvlab lm compare --format json` on stdin.

Usage: qkvlab lm compare REF... CMP... --baseline REF --format json | python3 scripts/ablation_row.py N_REF N_CMP

The runs must form exactly two groups of lm compare (one model, training, device and starting point
each): the reference group, its own baseline, holding N_REF runs, and the compared group, measured
against it, holding N_CMP. Prints the compared group's paired difference, its standard error
("null" with one seed), its paired seeds and its verdict ("measured" without --claim), all of that
one group; otherwise (lm compare's baseline_note included: the reference is another model) prints the
reason and exits 1.
"""
import json
import sys


def row(comparison, n_ref, n_cmp):
    """The row's four fields, or raises ValueError with the reason."""
    groups = comparison["groups"]
    if len(groups) != 2:
        raise ValueError("%d groups (one model, training, device and starting point each), not 2" % len(groups))
    ref = [g for g in groups if g["baseline"] == g["label"]]
    cmp = [g for g in groups if g["baseline"] != g["label"]]
    if len(ref) != 1 or len(cmp) != 1 or cmp[0]["baseline"] != ref[0]["label"]:
        raise ValueError("the compared runs are not measured against the reference runs")
    if ref[0]["runs"] != n_ref or cmp[0]["runs"] != n_cmp:
        raise ValueError("the groups hold %d and %d runs of %d and %d" % (ref[0]["runs"], cmp[0]["runs"], n_ref, n_cmp))
    g = cmp[0]
    if g.get("baseline_note"):  # lm compare measured it against another model, or could not measure it
        raise ValueError(g["baseline_note"])
    if g["delta_vs_baseline_mean"] is None:
        raise ValueError("no common seed")
    se = g["delta_vs_baseline_se"]
    return (repr(g["delta_vs_baseline_mean"]), "null" if se is None else repr(se), str(g["paired_seeds"]),
            g.get("verdict", {}).get("verdict", "measured"))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ablation_row.py N_REF N_CMP < lm-compare.json")
    try:
        print(*row(json.load(sys.stdin), int(sys.argv[1]), int(sys.argv[2])))
    except ValueError as reason:
        print(reason)
        sys.exit(1)


if __name__ == "__main__":
    main()
