"""Smoke test of benchmarks/gpu_pipeline.py: its CPU rows run here with tiny sizes (no timing asserted); the GPU rows
are skipped without CUDA. benchmarks/gpu_check.sh is checked for shell syntax."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cpu_rows_run_without_a_gpu(tmp_path):
    """About 10 s: three rows, each forking its DataLoader worker and running at least half a second."""
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "gpu_pipeline.py"), "--images", "24",
                           "--shards", "2", "--batch", "4", "--workers", "1", "--seconds", "0.5", "--width", "64",
                           "--height", "48", "--cpu-only", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    names = list(report["rows"])
    assert names[:2] == ["tfr_torch, DecodeImages in 1 workers, shuffled", "tfr_torch, DecodeImages in 1 workers, "
                                                                           "in order"]
    assert all(report["rows"][n] > 0 for n in names[:2])
    assert report["gpu"] is None and "the GPU rows are not run" in proc.stdout


def test_the_device_script_parses():
    proc = subprocess.run(["bash", "-n", os.path.join(ROOT, "benchmarks", "gpu_check.sh")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_only_measures_the_rows_named_and_refuses_unknown_keys(tmp_path):
    """About 9 s: two runs of the script (a row forks its DataLoader worker and runs at least 0.3 s)."""
    out = tmp_path / "rows.json"
    script = os.path.join(ROOT, "benchmarks", "gpu_pipeline.py")
    small = ["--images", "24", "--shards", "2", "--batch", "4", "--workers", "1", "--seconds", "0.3", "--width", "64",
             "--height", "48", "--cpu-only"]
    proc = subprocess.run([sys.executable, script, *small, "--only", "cpu-in-order", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(json.loads(out.read_text())["rows"]) == ["tfr_torch, DecodeImages in 1 workers, in order"]
    proc = subprocess.run([sys.executable, script, *small, "--only", "cpu-in-order,fed-gpu"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "unknown --only keys ['fed-gpu']" in proc.stderr
