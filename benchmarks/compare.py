#!/usr/bin/env python3
"""tfr_torch at another git revision beside this checkout, variant by variant: what a change did to its speed.

    python benchmarks/compare.py BASE [--workloads read-16k read-small ...] [--rounds 3] [--repeat 3]
                                      [--records N] [--json out.json]

BASE is any revision git knows (a commit, a tag, HEAD~20). It is checked out in a temporary git worktree and its
compiled core built there; then the two trees take turns running `benchmarks/run.py --libraries tfr_torch` on the
workloads both know, `--rounds` times, the order alternating from round to round (a machine that slows down or
speeds up during the comparison weighs on both sides alike). Each tree makes its own data from the same seeds.

Printed per variant: the median rate of each side over the rounds, their ratio (> 1: this checkout is faster) and
each round's ratio. Rates on a shared machine move by 10-30% from run to run: a change is "slower" or "faster" only
where every round's ratio is past 10% the same way, "mixed" where the rounds disagree. Only `run.py`'s workloads are
compared; scripts such as compressed_random.py are run in each tree by hand (`PYTHONPATH=<tree> python ...`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MARGIN = 0.10  # a round's ratio past 1 +- this counts as faster / slower


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def known_workloads(tree: str) -> list[str]:
    """The workload names `benchmarks/run.py --list` of `tree` prints (its lines without indentation)."""
    out = subprocess.run([sys.executable, os.path.join(tree, "benchmarks", "run.py"), "--list"], check=True,
                         capture_output=True, text=True).stdout
    return [line.split(":", 1)[0] for line in out.splitlines() if line and not line[0].isspace()]


def rates(report: dict[str, Any]) -> dict[tuple[str, str], tuple[str, float]]:
    """(workload, variant key) -> (label, records/s) of the tfr_torch rows that ran, from run.py's --json."""
    return {(row["workload"], row["key"]): (row["label"], float(row["records_per_s"]))
            for row in report["rows"]
            if row.get("status") == "ok" and row.get("library") == "tfr_torch" and row.get("records_per_s")}


def verdict(ratios: list[float], margin: float = MARGIN) -> str:
    """"faster" / "slower" where every round's ratio (this checkout over BASE) is past 1 +- margin that way,
    "mixed" where some are past it on both sides, else "same"."""
    if all(r > 1 + margin for r in ratios):
        return "faster"
    if all(r < 1 - margin for r in ratios):
        return "slower"
    if any(r > 1 + margin for r in ratios) and any(r < 1 - margin for r in ratios):
        return "mixed"
    return "same"


def summarize(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One line per variant that ran in every round on both sides: medians, ratio, per-round ratios, verdict."""
    base_rates, head_rates = [rates(r) for r in base], [rates(r) for r in head]
    keys = [k for k in head_rates[0] if all(k in r for r in base_rates + head_rates)]
    lines = []
    for key in keys:
        b = [r[key][1] for r in base_rates]
        h = [r[key][1] for r in head_rates]
        per_round = [hr / br for hr, br in zip(h, b)]
        lines.append({"workload": key[0], "variant": key[1], "label": head_rates[0][key][0],
                      "base": statistics.median(b), "head": statistics.median(h),
                      "ratio": statistics.median(h) / statistics.median(b), "rounds": per_round,
                      "verdict": verdict(per_round)})
    return lines


def run_tree(tree: str, workloads: list[str], data_dir: str, out: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, os.path.join(tree, "benchmarks", "run.py"), "--libraries", "tfr_torch",
               "--workloads", *workloads, "--repeat", str(args.repeat), "--data-dir", data_dir, "--json", out]
    if args.records:
        command += ["--records", str(args.records)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # run.py puts its own tree first
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        report: dict[str, Any] = json.load(f)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the git revision to compare this checkout with")
    parser.add_argument("--workloads", nargs="+", metavar="NAME", help="default: every workload both trees know")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each tree, taking turns (default 3)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes per variant and run (default 3)")
    parser.add_argument("--records", type=int, help="records per data set (default: run.py's)")
    parser.add_argument("--json", metavar="PATH", help="also write the lines as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeat < 1:
        parser.error("--rounds and --repeat must be >= 1")
    commit = _git("rev-parse", "--verify", f"{args.base}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="tfr-compare-") as scratch:
        tree = os.path.join(scratch, "base")
        _git("worktree", "add", "--detach", tree, commit)
        try:
            subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, check=True,
                           capture_output=True)
            both = [w for w in known_workloads(REPO) if w in set(known_workloads(tree))]
            workloads = [w for w in (args.workloads or both) if w in both]
            if not workloads:
                parser.error(f"no workload to compare: {commit[:10]} knows {', '.join(known_workloads(tree))}")
            print(f"# this checkout ({_git('rev-parse', '--short', 'HEAD')}) against {commit[:10]}: "
                  f"{', '.join(workloads)}; {args.rounds} rounds, best of {args.repeat} passes each", flush=True)
            sides: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
            for k in range(args.rounds):
                order = [("base", tree), ("head", REPO)]
                for side, where in order if k % 2 == 0 else order[::-1]:
                    data = os.path.join(scratch, f"data-{side}")
                    sides[side].append(run_tree(where, workloads, data, os.path.join(scratch, f"{side}{k}.json"),
                                                args))
                print(f"# round {k + 1} of {args.rounds} done", flush=True)
        finally:
            _git("worktree", "remove", "--force", tree)
    lines = summarize(sides["base"], sides["head"])
    print(f"| workload | variant | {commit[:10]} (records/s) | this checkout | ratio | rounds | verdict |")
    print("|---|---|---:|---:|---:|---|---|")
    for line in lines:
        rounds = " ".join(f"{r:.2f}" for r in line["rounds"])
        print(f"| {line['workload']} | {line['label']} | {line['base']:,.0f} | {line['head']:,.0f} | "
              f"{line['ratio']:.2f}x | {rounds} | {line['verdict']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"base": commit, "lines": lines}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
