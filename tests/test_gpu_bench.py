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
                           "--height", "48", "--epoch-images", "100", "--cpu-only", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    names = list(report["rows"])
    assert names[:2] == ["tfr_torch, DecodeImages in 1 workers, shuffled", "tfr_torch, DecodeImages in 1 workers, "
                                                                           "in order"]
    assert all(report["rows"][n] > 0 for n in names[:2])
    assert report["gpu"] is None and "the GPU rows are not run" in proc.stdout
    # measured in 3 interleaved rounds, each row the median of its own
    for name in names[:2]:
        rounds = report["rounds"][name]
        assert len(rounds) == 3 and report["rows"][name] == sorted(rounds)[1]
    assert report["ratios"]["tfr_torch shuffled / in order"] == report["rows"][names[0]] / report["rows"][names[1]]
    assert "# an epoch: 120 records, the 2 shards listed 5 time(s)" in proc.stdout
    # each round starts with the next row, so that no row always follows the same one
    firsts = {}
    for line in proc.stdout.splitlines():
        if line.startswith("# round "):
            number, name = line[len("# round "):].split(": ", 1)
            firsts.setdefault(number, name.split("\t")[0])
    assert list(firsts) == ["1/3", "2/3", "3/3"]
    rows = [name for name, rounds in report["rounds"].items() if rounds]  # the tfrecord row where it is installed
    assert list(firsts.values()) == [rows[k % len(rows)] for k in range(3)]


def test_the_shards_are_listed_again_until_an_epoch_is_long(tmp_path):
    """An epoch of --epoch-images records without writing them: the shards and their indexes listed again as
    symbolic links, read as one dataset of that many records, in at most MAX_LISTED files."""
    sys.path.insert(0, ROOT)
    from benchmarks import gpu_pipeline

    import tfr_torch

    paths = gpu_pipeline.make_shards(str(tmp_path), 10, 2, 16, 12)
    listing = gpu_pipeline.listed(paths, 10, 35)
    assert len(listing) == 8 and listing[:2] == paths and len(set(listing)) == 8
    assert all(os.path.realpath(p) == paths[k % 2] for k, p in enumerate(listing))
    assert all(os.path.realpath(p + ".idx") == paths[k % 2] + ".idx" for k, p in enumerate(listing))
    dataset = tfr_torch.TFRecordDataset(listing, gpu_pipeline.SPEC, index="auto")
    labels = sorted(int(r["image/class/label"]) for r in dataset)
    assert len(dataset) == 40 and labels == sorted(list(range(10)) * 4)
    (tmp_path / "many").mkdir()
    many = gpu_pipeline.listed(gpu_pipeline.make_shards(str(tmp_path / "many"), 2, 2, 16, 12), 2, 10**6)
    assert len(many) == gpu_pipeline.MAX_LISTED


def test_the_device_script_parses():
    proc = subprocess.run(["bash", "-n", os.path.join(ROOT, "benchmarks", "gpu_check.sh")], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_only_measures_the_rows_named_and_refuses_unknown_keys(tmp_path):
    """About 9 s: two runs of the script (a row forks its DataLoader worker and runs at least 0.3 s)."""
    out = tmp_path / "rows.json"
    script = os.path.join(ROOT, "benchmarks", "gpu_pipeline.py")
    small = ["--images", "24", "--shards", "2", "--batch", "4", "--workers", "1", "--seconds", "0.3", "--width", "64",
             "--height", "48", "--epoch-images", "48", "--cpu-only"]
    proc = subprocess.run([sys.executable, script, *small, "--only", "cpu-in-order", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(json.loads(out.read_text())["rows"]) == ["tfr_torch, DecodeImages in 1 workers, in order"]
    proc = subprocess.run([sys.executable, script, *small, "--only", "cpu-in-order,fed-gpu"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "unknown --only keys ['fed-gpu']" in proc.stderr
