#!/usr/bin/env python3
"""The uptraining table of docs/lm-comparisons.md, from scripts/lm_uptraining.sh's results.

Usage: python3 scripts/uptraining_table.py [OUT]     (OUT: its --out, default outputs/lm/uptraining)

Reads OUT/initial.csv (each conversion's validation loss as converted, per seed) and the final
validation loss of each run OUT/METHOD-STEPS-sSEED/run.json. Cells: mean ± sample standard
deviation over the seeds; Δ: the paired difference over the seeds, mean ± its standard error
(standard deviation / sqrt(n)), bold when |Δ| > 2 se (a guide; the figures' verdicts use Student's
t). Every method needs the same seeds in every column; anything missing is an error, not a blank.
"""
import csv
import json
import math
import os
import sys

# (method, the row's name): the released converter's four first, then qkvlab's other readings.
ROWS = [("released-avg", "mean-v (released-avg)"), ("released-topk", "released-topk"),
        ("released-topk1", "released-topk1"), ("svd", "svd (released-svd)"),
        ("mean-v-adjacent", "mean-v-adjacent"), ("mean-vo", "mean-vo"), ("top-v", "top-v"), ("top-vo", "top-vo")]
BASE, CONTROL = "released-avg", "vanilla"


def spread(values):
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return mean, std


def cell(values):
    mean, std = spread(values)
    return f"{mean:.4f} ± {std:.4f}"


def delta(a, b):
    """a − b paired by seed: mean ± se, bold beyond 2 se."""
    mean, std = spread([x - y for x, y in zip(a, b)])
    se = std / math.sqrt(len(a))
    text = f"{mean:+.4f} ± {se:.4f}".replace("-", "−")
    return f"**{text}**" if abs(mean) > 2 * se else text


def read(out):
    initial = {}
    with open(os.path.join(out, "initial.csv"), newline="") as f:
        for row in csv.DictReader(f):
            initial.setdefault(row["method"], {})[int(row["seed"])] = float(row["initial_validation_loss"])
    seeds = sorted(initial[CONTROL])
    losses = {}
    for method, by_seed in initial.items():
        if sorted(by_seed) != seeds:
            sys.exit(f"uptraining_table.py: {method} has seeds {sorted(by_seed)} in initial.csv, the control {seeds}")
        losses[method] = {"initial": [by_seed[s] for s in seeds]}
        for steps in (120, 240):
            column = []
            for s in seeds:
                path = os.path.join(out, f"{method}-{steps}-s{s}", "run.json")
                try:
                    with open(path) as f:
                        column.append(float(json.load(f)["final_validation_loss"]))
                except (OSError, KeyError, ValueError) as e:
                    sys.exit(f"uptraining_table.py: {path}: {e}")
            losses[method][steps] = column
    return losses


def main():
    losses = read(sys.argv[1] if len(sys.argv) > 1 else "outputs/lm/uptraining")
    print("| start | as converted | Δ vs mean-v | after 120 steps | after 240 steps | Δ vs mean-v, 240 | Δ vs control, 240 |")
    print("|---|---|---|---|---|---|---|")
    base, control = losses[BASE], losses[CONTROL]
    for method, name in ROWS:
        m = losses[method]
        first = "—" if method == BASE else delta(m["initial"], base["initial"])
        last = "—" if method == BASE else delta(m[240], base[240])
        print(f"| {name} | {cell(m['initial'])} | {first} | {cell(m[120])} | {cell(m[240])} | {last} | "
              f"{delta(m[240], control[240])} |")
    print(f"| **control:** vanilla, not converted, trained on the same way | {cell(control['initial'])} | | "
          f"{cell(control[120])} | {cell(control[240])} | | — |")


if __name__ == "__main__":
    main()
