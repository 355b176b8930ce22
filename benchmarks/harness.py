"""The harness: one subprocess per (workload, library) that times its variants, and the parent that starts them."""

from __future__ import annotations

import argparse
import gc
import glob
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks.datasets import DATASETS
from benchmarks.registry import IMPORT_NAME, PURE_PYTHON, WORKLOADS, Ctx, Variant
from benchmarks.system import HERE, children_cpu, dist_version, log, proc_status_kb, reset_peak_rss

# --------------------------------------------------------------------------------------------------------------
# Worker: runs one library's variants of one workload, in its own process


def import_library(library: str, one_core: bool = True) -> str:
    """Import the library; return its version. Raises ImportError (or anything else) when it cannot.
    `one_core`: TensorFlow gets inter/intra-op pools of 1 (else its defaults: every core).
    tfr_torch's version names the backend that runs: `PURE_PYTHON` is tfr_torch with TFR_TORCH_NATIVE=0."""
    if library == PURE_PYTHON:
        os.environ["TFR_TORCH_NATIVE"] = "0"  # read when tfr_torch is imported, below
    if library in ("tfr_torch", PURE_PYTHON):
        tfr_torch = importlib.import_module("tfr_torch")
        backend = tfr_torch.backend()
        if library == PURE_PYTHON and backend != "python":
            raise RuntimeError(f"TFR_TORCH_NATIVE=0 left tfr_torch on its {backend} backend")
        return f"{tfr_torch.__version__} ({backend} backend)"
    if library == "tensorflow":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        tf = importlib.import_module("tensorflow")
        if one_core:
            tf.config.threading.set_inter_op_parallelism_threads(1)
            tf.config.threading.set_intra_op_parallelism_threads(1)
        return tf.__version__
    module = importlib.import_module(IMPORT_NAME[library])
    return getattr(module, "__version__", None) or dist_version(library) or "?"


def time_variant(v: Variant, ctx: Ctx, repeat: int, warmup: int, processes: bool = False) -> dict[str, Any]:
    """Set the variant up, run its warm-up and timed passes; the pass times, CPU times and metrics.
    `processes` (the parallel workloads): also the peak RSS of this (main) process during each pass."""
    ctx.metrics = {}
    run = v.setup(ctx)
    times, cpus, mains, metrics = [], [], [], []

    def one_pass() -> tuple[float, float, float]:
        gc.collect()
        ctx.metrics = {}
        if processes:
            reset_peak_rss()
        t0, c0, k0 = time.perf_counter(), time.process_time(), children_cpu()
        n = run()
        wall = time.perf_counter() - t0
        main = time.process_time() - c0
        cpu = main + children_cpu() - k0  # workers: joined, or live and read from /proc
        if processes and (peak_kb := proc_status_kb(os.getpid(), "VmHWM")):
            ctx.metrics["main_peak_rss_mb"] = peak_kb * 1024 / 1e6
        if n != ctx.meta["records"]:
            raise RuntimeError(f"handled {n} records, expected {ctx.meta['records']}")
        return wall, cpu, main

    try:
        for i in range(warmup):
            one_pass()
            if i == 0 and v.same_bytes and not same_file(ctx.out, ctx.path):
                raise RuntimeError(f"its output differs from {ctx.path}")
            remove_outputs(ctx.out)
        for _ in range(repeat):
            wall, cpu, main = one_pass()
            remove_outputs(ctx.out)
            times.append(wall)
            cpus.append(cpu)
            mains.append(main)
            metrics.append(dict(ctx.metrics))
    finally:
        remove_outputs(ctx.out)
    best = min(range(len(times)), key=times.__getitem__)
    # CPU time of other threads is accounted coarsely: below ~50 ms a pass's CPU % means little
    cpu_pct = 100.0 * cpus[best] / times[best] if times[best] >= 0.05 else None
    result = {"times_s": times, "cpu_s": cpus, "best_s": times[best], "cpu_pct": cpu_pct}
    if processes:  # the best pass's CPU split between this process and its workers (for the processes table)
        result["cpu_main_s"] = mains
    if any(metrics):  # extra numbers (e.g. peak memory): the largest over the timed passes
        keys = dict.fromkeys(k for m in metrics for k in m)
        result["metrics"] = {k: max(m[k] for m in metrics if k in m) for k in keys}
        result["metrics_per_pass"] = metrics
    return result


def same_file(a: str, b: str) -> bool:
    import filecmp

    return os.path.exists(a) and filecmp.cmp(a, b, shallow=False)


def remove_outputs(out: str) -> None:
    for p in [out, *glob.glob(os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.*"))]:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def worker(args: argparse.Namespace) -> None:
    library, name = args.worker
    wl = WORKLOADS[name]
    ds = DATASETS[wl.dataset]
    records = args.records or ds.default_records
    path = ds.path(args.data_dir, records)
    with open(path + ".json") as f:
        meta = json.load(f)
    result: dict[str, Any] = {"library": library, "workload": name, "rows": []}
    if not wl.parallel:
        os.environ["OMP_NUM_THREADS"] = "1"  # torch's intra-op pool, when a variant imports it: one core
    try:
        result["version"] = import_library(library, one_core=not wl.parallel)
    except Exception as exc:  # noqa: BLE001 - any failure to import means "not installed" here
        result["status"] = "not installed"
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    else:
        result["status"] = "ok"
        out = os.path.join(args.data_dir, f"_out-{library}-{name}.tfrecord")
        ctx = Ctx(name, library, path, meta, out, records)
        for v in wl.of(library):
            row = {"key": v.key}
            log(f"  {name} / {library} / {v.label} ...")
            try:
                row.update(time_variant(v, ctx, args.repeat, args.warmup, processes=wl.parallel))
                row["status"] = "ok"
            except Exception as exc:  # noqa: BLE001 - reported in the table
                row["status"] = "error"
                row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            result["rows"].append(row)
    with open(args.worker_out, "w") as f:
        json.dump(result, f)


def run_worker(library: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    fd, out = tempfile.mkstemp(prefix="tfr-bench-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.join(HERE, "run.py"), "--worker", library, name, "--worker-out", out,
           "--repeat", str(args.repeat), "--warmup", str(args.warmup), "--data-dir", args.data_dir]
    if args.records:
        cmd += ["--records", str(args.records)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=args.timeout)
        for line in proc.stderr.splitlines():  # progress lines; TF's own chatter is dropped
            if line.startswith("  ") and " / " in line:
                log(line)
        try:
            with open(out) as f:
                return json.load(f)
        except (OSError, ValueError):
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"library": library, "workload": name, "status": "error",
                    "error": f"worker exited with {proc.returncode}: {tail[:200]}", "rows": []}
    except subprocess.TimeoutExpired:
        return {"library": library, "workload": name, "status": "error", "error": f"timed out after {args.timeout} s",
                "rows": []}
    finally:
        os.remove(out)
