#!/usr/bin/env python3
"""Benchmark harness: tfr_torch beside the `tfrecord` package and TensorFlow, on synthetic data it makes itself.

    python benchmarks/run.py                          # every workload, best of 3 after a warm-up
    python benchmarks/run.py --workloads read-16k write-16k --repeat 5
    python benchmarks/run.py --records 2000 --json out.json   # a quick smoke run
    python benchmarks/run.py --list

The code is the `benchmarks` package beside this script: see benchmarks/__init__.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:  # use tfr_torch (and this package) from this checkout, installed or not
    sys.path.insert(0, REPO)

from benchmarks import variants  # noqa: E402,F401 - registers every workload and its variants
from benchmarks.datasets import DATASETS, ensure_dataset  # noqa: E402
from benchmarks.harness import run_worker, worker  # noqa: E402
from benchmarks.registry import IMPORT_NAME, LIBRARIES, WORKLOADS  # noqa: E402
from benchmarks.report import build_rows, print_table  # noqa: E402
from benchmarks.system import log, machine_facts  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workloads", nargs="+", metavar="NAME",
                   help="workloads to run (space or comma separated; default: all): " + ", ".join(WORKLOADS))
    p.add_argument("--libraries", nargs="+", metavar="LIB", help="libraries (default: all): " + ", ".join(LIBRARIES))
    p.add_argument("--repeat", type=int, default=3, help="timed passes per variant; the best is reported (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed passes first (default 1)")
    p.add_argument("--records", type=int, help="records per data set (default: 20,000 for the 16k sets, "
                                               "200,000 for small and tabular)")
    p.add_argument("--data-dir", default=os.path.join(HERE, "data"), help="cache of generated data "
                                                                          "(default benchmarks/data/)")
    p.add_argument("--regenerate", action="store_true", help="rebuild the data even when cached")
    p.add_argument("--json", metavar="PATH", help="also write every result (all pass times) as JSON")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per (workload, library) subprocess")
    p.add_argument("--list", action="store_true", help="list workloads and variants, then exit")
    p.add_argument("--worker", nargs=2, metavar=("LIB", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = [n for item in (args.workloads or WORKLOADS) for n in item.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    args.workloads = list(dict.fromkeys(names))
    libs = [n for item in (args.libraries or LIBRARIES) for n in item.split(",") if n]
    if [x for x in libs if x not in LIBRARIES]:
        p.error(f"libraries are {', '.join(LIBRARIES)}")
    args.libraries = [x for x in LIBRARIES if x in libs]
    if args.repeat < 1 or args.warmup < 0 or (args.records is not None and args.records < 1):
        p.error("--repeat must be >= 1, --warmup >= 0, --records >= 1")
    args.data_dir = os.path.abspath(args.data_dir)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.list:
        for wl in WORKLOADS.values():
            print(f"{wl.name}: {wl.description} (data: {wl.dataset})")
            for v in sorted(wl.variants, key=lambda v: LIBRARIES.index(v.library)):  # as in the report
                print(f"    {v.library:16} {v.key:8} [{v.kind}] {v.label}")
        return 0
    command = shlex.join([sys.executable, *sys.argv])
    facts = machine_facts()
    metas: dict[str, dict[str, Any]] = {}
    made: dict[str, dict[str, Any]] = {}
    for name in args.workloads:
        ds = DATASETS[WORKLOADS[name].dataset]
        if ds.name not in made:
            made[ds.name] = ensure_dataset(ds, args.data_dir, args.records or ds.default_records, args.regenerate)
        metas[name] = made[ds.name]
    results = []
    for name in args.workloads:
        for lib in args.libraries:
            if not WORKLOADS[name].of(lib):
                continue
            if importlib.util.find_spec(IMPORT_NAME[lib]) is None:
                results.append({"library": lib, "workload": name, "status": "not installed", "rows": []})
                log(f"  {name} / {lib}: not installed")
                continue
            results.append(run_worker(lib, name, args))
            if results[-1]["status"] != "ok":
                log(f"  {name} / {lib}: {results[-1]['status']} {results[-1].get('error', '')}")
    rows = build_rows(results, metas)
    print_table(rows, {WORKLOADS[n].dataset: m for n, m in metas.items()}, facts, command, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, "machine": facts, "repeat": args.repeat, "warmup": args.warmup,
                       "data": metas, "rows": [r.to_json() for r in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
