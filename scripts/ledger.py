#!/usr/bin/env python3
"""Summarizes `qkvlab verify --format json` per claim id, as the verdict table of docs/claims.md.

Usage: build/qkvlab verify --format json --quiet | python3 scripts/ledger.py

It takes no arguments (--help prints this); an argument, or standard input that is not such a
report, is refused in one line, exit status 2.
"""
import json
import sys
from collections import defaultdict

USAGE = "usage: build/qkvlab verify --format json --quiet | python3 scripts/ledger.py"


def refuse(message):
    print(f"ledger.py: {message}", file=sys.stderr)
    sys.exit(2)


def fmt(x):
    return "-" if x is None else f"{x:.2g}"


def read_report(args):
    """The verify report on stdin, its lists and summary checked for shape."""
    if args in (["-h"], ["--help"]):
        print(__doc__.strip())
        sys.exit(0)
    if args:
        refuse(f"{' '.join(args)}: {USAGE}")
    try:
        report = json.load(sys.stdin)
        ok = isinstance(report, dict) and all(isinstance(report.get(k), list) for k in ("checks", "controls", "ladders"))
        ok = ok and isinstance(report.get("summary"), dict) and "seed" in report
    except ValueError as e:
        refuse(f"standard input is not JSON ({e}): {USAGE}")
    if not ok:
        refuse(f"standard input is not a report of qkvlab verify --format json (needs seed, checks, controls, ladders, summary)")
    return report


def main():
    report = read_report(sys.argv[1:])
    checks, controls, slopes = defaultdict(list), defaultdict(list), defaultdict(list)
    for c in report["checks"]:
        checks[c["id"]].append(c)
    for c in report["controls"]:
        controls[c["id"]].append(c)
    for l in report["ladders"]:
        if l["slope"] is not None:
            slopes[l["id"]].append(l["slope"])
    print(f"Seed {report['seed']}, qkvlab {report.get('version', '?')}.\n")
    print("| id | checks passed | max e (float / double / long double / mp50) | ladder slope | controls failed | smallest control rel_err |")
    print("|---|---|---|---|---|---|")
    ids = list(checks) + [cid for cid in controls if cid not in checks]  # a claim with controls only too
    for cid in ids:
        rows = checks[cid]
        passed = sum(r["pass"] for r in rows)
        worst = {}
        for r in rows:
            e = r["normalized_err"]
            if e is not None:
                worst[r["precision"]] = max(worst.get(r["precision"], 0.0), e)
        e_text = " / ".join(fmt(worst.get(p)) for p in ("float", "double", "long_double", "mp50"))
        s = slopes[cid]
        slope = f"{min(s):.3f} – {max(s):.3f}" if s else "- (bitwise equal)" if rows and all(r["rel_err"] == 0 for r in rows) else "-"
        ctl = controls[cid]
        failed = sum(c["failed_as_expected"] for c in ctl)
        errs = [c["rel_err"] for c in ctl if c["rel_err"] is not None]
        print(f"| {cid} | {passed}/{len(rows)} | {e_text} | {slope} | {failed}/{len(ctl)} | {fmt(min(errs)) if errs else '-'} |")
    for skipped in report.get("skipped", []):  # verify --checkpoint: claims that do not apply to the model
        print(f"| {skipped['id']} | skipped: {skipped['reason']} | - | - | - | - |")
    s = report["summary"]
    print(f"\nSummary: {s['passed']}/{s['checks']} checks passed, "
          f"{s['controls_failed_as_expected']}/{s['controls']} controls failed as expected, ok = {str(s['ok']).lower()}.")


if __name__ == "__main__":
    main()
