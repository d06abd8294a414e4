#!/usr/bin/env python3
"""The uptraining table of docs/lm-comparisons.md, from scripts/lm_uptraining.sh's results.

Usage: python3 scripts/uptraining_table.py [OUT]     (OUT: its --out, default outputs/lm/uptraining)

Reads OUT/initial.csv (each conversion's validation loss as converted, per seed) and the final
validation loss of each run OUT/METHOD-STEPS-sSEED/run.json. Cells: mean ± sample standard
deviation over the seeds; Δ: the paired difference over the seeds, mean ± its standard error
(standard deviation / sqrt(n)), bold when |Δ| > 2 se (a guide; the figures' verdicts use Student's
t). Every method needs the same seeds in every column; anything missing is an error, not a blank.
With one seed (a reproduce cache holds one) there is no spread: each cell's and Δ's is "n/a" and
no Δ is bold. OUT not a directory, or another argument, is refused in one line, exit status 2.

The runs and initial.csv must be one generation of lm_uptraining.sh (a failed or stopped run of it
must not leave two mixed): its stamp (initial.csv's generation column, each run's file `generation`;
none in both for results made before the stamp), and in each run.json the step count and seed the
run's name says, --from the conversion of its method and seed (the vanilla run: the same vanilla
checkpoint for both step counts, every seed's in one directory), one training (lr, schedule, batch,
...) for every run of a step count and one corpus for every run. Anything else is refused in one line.
"""
import csv
import json
import math
import os
import re
import sys

# (method, the row's name): the released converter's four first, then qkvlab's other readings.
ROWS = [("released-avg", "mean-v (released-avg)"), ("released-topk", "released-topk"),
        ("released-topk1", "released-topk1"), ("svd", "svd (released-svd)"),
        ("mean-v-adjacent", "mean-v-adjacent"), ("mean-vo", "mean-vo"), ("top-v", "top-v"), ("top-vo", "top-vo")]
BASE, CONTROL = "released-avg", "vanilla"


def spread(values):
    """Mean and sample standard deviation; None for the deviation of one value."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def cell(values):
    mean, std = spread(values)
    return f"{mean:.4f} ± {'n/a' if std is None else f'{std:.4f}'}"


def delta(a, b):
    """a − b paired by seed: mean ± se, bold beyond 2 se (never with one seed: no se)."""
    mean, std = spread([x - y for x, y in zip(a, b)])
    if std is None:
        return f"{mean:+.4f} ± n/a".replace("-", "−")
    se = std / math.sqrt(len(a))
    text = f"{mean:+.4f} ± {se:.4f}".replace("-", "−")
    return f"**{text}**" if abs(mean) > 2 * se else text


def refuse(path, what):
    sys.exit(f"uptraining_table.py: {path}: {what}: not one generation of lm_uptraining.sh's results (rerun it)")


class Generation:
    """What one lm_uptraining.sh run's results share; check() refuses a run that differs."""

    def __init__(self, stamp):
        self.stamp = stamp
        self.shared = {}  # what every run has the same: (what, value) by what

    def same(self, path, what, value):
        first = self.shared.setdefault(what, (value, path))
        if first[0] != value:
            refuse(path, f"{what} {value!r}, {first[1]}'s {first[0]!r}")

    def check(self, run_dir, run, method, steps, seed):
        path = os.path.join(run_dir, "run.json")
        try:
            with open(os.path.join(run_dir, "generation")) as f:
                stamp = f.read().strip()
        except FileNotFoundError:
            stamp = None
        if stamp != self.stamp:
            refuse(run_dir, f"generation {stamp or '(none)'}, initial.csv's {self.stamp or '(none)'}")
        try:
            training = dict(run["training"])
            # the path as given to --from: run.json's "from" record; runs made before it existed have
            # only the command line, then recorded unquoted (what lm_uptraining.sh puts between --from
            # and --preset, spaces and quotes included)
            given = run.get("from", {}).get("path")
            if given is None:
                given = re.search(r" --from (.+?) --preset ", run["command_line"]).group(1)
            source = os.path.normpath(given)
            if training.pop("steps") != steps or run["seed"] != seed + 100:
                refuse(path, f"steps {run['training']['steps']} and seed {run['seed']}, its name says {steps} "
                             f"and {seed + 100}")
            self.same(path, f"training of {steps} steps", training)  # its warmup is a share of the steps
            self.same(path, "data", run["data"])
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            sys.exit(f"uptraining_table.py: {path}: no training, seed, data or --from ({e!r})")
        if method == CONTROL:
            if not re.fullmatch(rf"vanilla-s{seed}(-[0-9a-f]+)?", os.path.basename(os.path.dirname(source))):
                refuse(path, f"--from {source}, not a vanilla-s{seed}[-HASH]/checkpoint")
            self.same(path, "the vanilla checkpoints' directory", os.path.dirname(os.path.dirname(source)))
            self.same(path, f"seed {seed}'s vanilla checkpoint", source)
        else:
            if os.path.basename(source) != f"{method}-s{seed}":
                refuse(path, f"--from {source}, not the conversion {method}-s{seed}")
            self.same(path, "the conversions' directory", os.path.dirname(source))


def read_initial(path):
    """initial.csv: the loss as converted by method and seed, and the generation stamps of its rows."""
    initial, stamps = {}, set()
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                initial.setdefault(row["method"], {})[int(row["seed"])] = float(row["initial_validation_loss"])
                stamps.add(row.get("generation"))
    except (OSError, KeyError, ValueError, TypeError) as e:
        sys.exit(f"uptraining_table.py: {path}: not lm_uptraining.sh's initial.csv ({e!r})")
    missing = [m for m in [CONTROL] + [method for method, _ in ROWS] if m not in initial]
    if missing:
        sys.exit(f"uptraining_table.py: {path}: no rows of {', '.join(missing)}")
    return initial, stamps


def read(out):
    initial, stamps = read_initial(os.path.join(out, "initial.csv"))
    if len(stamps) != 1:
        refuse(os.path.join(out, "initial.csv"), f"rows of generations {sorted(map(str, stamps))}")
    generation = Generation(stamps.pop())
    seeds = sorted(initial[CONTROL])
    losses = {}
    for method, by_seed in initial.items():
        if sorted(by_seed) != seeds:
            sys.exit(f"uptraining_table.py: {method} has seeds {sorted(by_seed)} in initial.csv, the control {seeds}")
        losses[method] = {"initial": [by_seed[s] for s in seeds]}
        for steps in (120, 240):
            column = []
            for s in seeds:
                run_dir = os.path.join(out, f"{method}-{steps}-s{s}")
                path = os.path.join(run_dir, "run.json")
                try:
                    with open(path) as f:
                        run = json.load(f)
                    column.append(float(run["final_validation_loss"]))
                except (OSError, KeyError, ValueError) as e:
                    sys.exit(f"uptraining_table.py: {path}: {e}")
                generation.check(run_dir, run, method, steps, s)
            losses[method][steps] = column
    return losses


def out_directory(args):
    """OUT, the one optional argument (default outputs/lm/uptraining)."""
    usage = "usage: python3 scripts/uptraining_table.py [OUT]"
    if args in (["-h"], ["--help"]):
        print(__doc__.strip())
        sys.exit(0)
    out = args[0] if len(args) == 1 and not args[0].startswith("-") else None
    if len(args) > 1 or (args and out is None):
        print(f"uptraining_table.py: {' '.join(args)}: {usage}", file=sys.stderr)
        sys.exit(2)
    out = out or "outputs/lm/uptraining"
    if not os.path.isdir(out):
        print(f"uptraining_table.py: {out} is not a directory ({usage})", file=sys.stderr)
        sys.exit(2)
    return out


def main():
    losses = read(out_directory(sys.argv[1:]))
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
