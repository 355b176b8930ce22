"""Run every fuzz target (or those named) for a bounded time and report executions and coverage per target.

    python fuzz/run.py --seconds 480            # make fuzz: about 8 minutes per target
    python fuzz/run.py --seconds 30 --seed 1    # make fuzz-ci: a short pass, reproducible start
    python fuzz/run.py tensor framing --seconds 60

Each target runs in its own process (fuzz/fuzz.py under libFuzzer) from the committed seeds in fuzz/corpus/<target>
plus a growing working corpus in build/fuzz/corpus/<target>. A crashing input is written to
build/fuzz/crashes/<target>-crash-<sha1>; keep it as a regression test by copying it to
tests/data/regressions/<target>-<name> (tests/test_hostile.py replays every file there). Exit status 1 when any
target found a crash, a hang (more than --timeout seconds on one input) or ran out of memory (--rss-limit-mb).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(ROOT, "build", "fuzz")

sys.path.insert(0, HERE)


def _targets() -> list[str]:
    from make_corpus import SEEDS

    return list(SEEDS)


def run_target(name: str, seconds: int, timeout: int, rss_limit_mb: int, seed: int | None) -> dict:
    corpus = os.path.join(WORK, "corpus", name)
    crashes = os.path.join(WORK, "crashes")
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(crashes, exist_ok=True)
    os.makedirs(os.path.join(WORK, "logs"), exist_ok=True)
    command = [sys.executable, os.path.join(HERE, "fuzz.py"), name, f"-max_total_time={seconds}",
               f"-timeout={timeout}", f"-rss_limit_mb={rss_limit_mb}", "-print_final_stats=1",
               f"-artifact_prefix={crashes}/{name}-", corpus, os.path.join(HERE, "corpus", name)]
    if seed is not None:
        command.insert(3, f"-seed={seed}")
    log_path = os.path.join(WORK, "logs", f"{name}.log")
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=seconds + 600)
    with open(log_path, errors="replace") as f:
        text = f.read()
    coverage = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)/", text)
    execs = re.search(r"stat::number_of_executed_units: (\d+)", text)
    artifacts = re.findall(r"Test unit written to (\S+)", text)
    return {
        "target": name,
        "returncode": proc.returncode,
        "seconds": round(time.monotonic() - started),
        "execs": int(execs.group(1)) if execs else None,
        "cov": int(coverage[-1][0]) if coverage else None,
        "ft": int(coverage[-1][1]) if coverage else None,
        "corpus": int(coverage[-1][2]) if coverage else None,
        "artifacts": artifacts,
        "log": log_path,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="targets to run (default: all)")
    parser.add_argument("--seconds", type=int, default=480, help="time per target (default 480)")
    parser.add_argument("--timeout", type=int, default=20, help="seconds one input may take before it is a hang")
    parser.add_argument("--rss-limit-mb", type=int, default=3072, help="memory a target may use before it is a bomb")
    parser.add_argument("--seed", type=int, default=None, help="libFuzzer's random seed (default: random)")
    args = parser.parse_args(argv)
    names = args.targets or _targets()
    unknown = sorted(set(names) - set(_targets()))
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}: expected {', '.join(_targets())}")
    results = []
    for name in names:
        result = run_target(name, args.seconds, args.timeout, args.rss_limit_mb, args.seed)
        results.append(result)
        status = "ok" if result["returncode"] == 0 else f"FAILED (exit {result['returncode']}, log {result['log']})"
        print(f"{name:<17} {result['seconds']:>5} s  execs {result['execs']!s:>9}  cov {result['cov']!s:>6}  "
              f"ft {result['ft']!s:>6}  corpus {result['corpus']!s:>5}  {status}", flush=True)
        for artifact in result["artifacts"]:
            if "slow-unit-" in os.path.basename(artifact):  # libFuzzer's note, not a failure: within --timeout
                print(f"  slow input (over 10 s under instrumentation): {artifact}", flush=True)
            else:
                print(f"  crashing input: {artifact} (keep it as tests/data/regressions/{name}-<name>)", flush=True)
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
