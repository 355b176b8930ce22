"""Mid-epoch resumption of TFRecordDataset with torchdata's StatefulDataLoader, across processes.

"Stopped mid-epoch with shuffle on and 2 workers, then restored in a fresh process, the records yielded before
and after together are exactly one epoch."

Process A (tests/helpers/resume_worker.py) builds TFRecordDataset(shuffle=True) and StatefulDataLoader, takes k
items, saves loader.state_dict() with torch.save and reports the ids it got; process B, a fresh interpreter,
builds the same dataset and loader, calls load_state_dict and iterates to the end of the epoch. The ids of A and
B together must be the epoch: every id exactly once; and they must come in the order an uninterrupted epoch
gives them (a reference run in another process). Chained resumption (A stops, B resumes and stops again, C
finishes) must also give exactly one epoch.

Configurations: per-record items (DataLoader batch_size=None), dataset batches (dataset batch_size, DataLoader
batch_size=None), DataLoader-collated batches (per-record dataset, DataLoader batch_size=3); with indexes (global
shuffle read by offset), without (shuffled files, interleave, shuffle buffer) and with indexes of GZIP files
(records split by index, buffered shuffle); 2 worker processes and none (num_workers=0); k = 0, 1, the middle,
one before the end, the end. The jobs of every configuration share a few processes (one per stage) to keep the
file fast; each job builds its own dataset and loader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "helpers" / "resume_worker.py"
COUNTS = [23, 0, 17, 31, 9]  # records per file (one empty): 80 in all
PROCESS_TIMEOUT_S = 150

pytestmark = pytest.mark.slow  # a few processes, about 20 s in all

MODES = {
    "record": ({}, {"batch_size": None}),
    "batch": ({"batch_size": 4}, {"batch_size": None}),
    "collate": ({}, {"batch_size": 3}),
}
SOURCES = {"index": ("plain", "auto"), "noindex": ("plain", None), "gzindex": ("gzip", "auto")}

CONFIGS = {}
for _mode, _source, _workers in [
    ("record", "index", 2), ("record", "noindex", 2), ("record", "index", 0), ("record", "noindex", 0),
    ("batch", "index", 2), ("batch", "noindex", 2), ("batch", "index", 0), ("batch", "noindex", 0),
    ("collate", "index", 2), ("collate", "noindex", 2),
    ("record", "gzindex", 2), ("batch", "gzindex", 2),
]:
    CONFIGS[f"{_mode}-{_source}-w{_workers}"] = (_mode, _source, _workers)

CUTS = ["0", "1", "mid", "end-1", "end"]  # where process A stops
EPOCH_CASES = [("record-index-w2", True), ("record-index-w2", False), ("batch-noindex-w2", True),
               ("batch-noindex-w0", False)]  # epoch 1: process B calls set_epoch(1) first, or relies on the state
CHAINS = [(config, k2) for config in ["record-index-w2", "batch-noindex-w2", "record-noindex-w0", "collate-index-w2",
                                      "batch-gzindex-w2"]
          for k2 in [0, 1, 6]]  # A takes 7, B takes k2 and saves again, C finishes


def write_both_corpora(write_corpus, folder: Path) -> tuple[dict[str, str], list[int]]:
    """Plain files with indexes and GZIP files with indexes, holding the same records; return the patterns."""
    for kind, name, compression in [("plain", "train-{:02d}.tfrecord", None),
                                    ("gzip", "train-{:02d}.tfrecord.gz", "gzip")]:
        _, ids = write_corpus(folder / kind, COUNTS, lambda i: {"id": i, "blob": b"r" * (i % 17)}, name=name,
                              first=500, step=3, compression=compression, index=True)
    patterns = {"plain": str(folder / "plain" / "train-*.tfrecord"),
                "gzip": str(folder / "gzip" / "train-*.tfrecord.gz")}
    return patterns, ids


def job(name: str, config: str, patterns: dict[str, str], epoch: int = 0, **stage) -> dict:
    mode, source, workers = CONFIGS[config]
    dataset_extra, loader_kwargs = MODES[mode]
    kind, index = SOURCES[source]
    dataset = {"paths": patterns[kind], "index": index, "shuffle": True, "seed": 99, "shuffle_buffer": 16,
               "interleave": 2, **dataset_extra}
    return {"name": name, "dataset": dataset, "loader": {"num_workers": workers, **loader_kwargs}, "epoch": epoch,
            "set_epoch": True, **stage}


def run_stage(folder: Path, label: str, jobs: list[dict]) -> dict:
    """Run the jobs in one fresh Python process; return its results by job name."""
    jobs_path = folder / f"{label}-jobs.json"
    out_path = folder / f"{label}-out.json"
    jobs_path.write_text(json.dumps(jobs))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    try:
        proc = subprocess.run([sys.executable, str(WORKER), str(jobs_path), str(out_path)], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"stage {label} did not finish in {PROCESS_TIMEOUT_S} s\n{exc.stdout}\n{exc.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"stage {label} failed (exit {proc.returncode})\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return json.loads(out_path.read_text())


def cut(label: str, n: int) -> int:
    return {"0": 0, "1": 1, "mid": n // 2, "end-1": n - 1, "end": n}[label]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, write_corpus):
    """Every process of every scenario, run once for the module: reference epochs, then stages A, B and C."""
    folder = tmp_path_factory.mktemp("resume")
    patterns, ids = write_both_corpora(write_corpus, folder)

    reference_jobs = [job(f"ref-{c}-e0", c, patterns) for c in CONFIGS]
    reference_jobs += [job(f"ref-{c}-e1", c, patterns, epoch=1) for c in {c for c, _ in EPOCH_CASES}]
    reference = run_stage(folder, "reference", reference_jobs)
    for name, result in reference.items():
        assert result["error"] is None, f"{name}:\n{result['error']}"

    def state(name: str, stage: str) -> str:
        return str(folder / f"{name}.{stage}.pt")

    scenarios = {}  # name -> (config, epoch, [jobs of stage A, B, C...])
    for config in CONFIGS:
        n = len(reference[f"ref-{config}-e0"]["ids"])
        for label in CUTS:
            name = f"{config}-k{label}"
            scenarios[name] = (config, 0, [
                job(name, config, patterns, take=cut(label, n), save=state(name, "A")),
                job(name, config, patterns, load=state(name, "A"), take=None)])
    for config, set_epoch in EPOCH_CASES:
        n = len(reference[f"ref-{config}-e1"]["ids"])
        name = f"{config}-epoch1-{'set_epoch' if set_epoch else 'from_state'}"
        scenarios[name] = (config, 1, [
            job(name, config, patterns, epoch=1, take=n // 2, save=state(name, "A")),
            job(name, config, patterns, epoch=1, set_epoch=set_epoch, load=state(name, "A"), take=None)])
    for config, k2 in CHAINS:
        name = f"{config}-chain-7-{k2}"
        scenarios[name] = (config, 0, [
            job(name, config, patterns, take=7, save=state(name, "A")),
            job(name, config, patterns, load=state(name, "A"), take=k2, save=state(name, "B")),
            job(name, config, patterns, load=state(name, "B"), take=None)])

    stages = []
    for i in range(max(len(s[2]) for s in scenarios.values())):
        jobs = [s[2][i] for s in scenarios.values() if len(s[2]) > i]
        stages.append(run_stage(folder, f"stage{i}", jobs))
    return {"ids": ids, "reference": reference, "scenarios": scenarios, "stages": stages}


def outcome(runs, name: str) -> tuple[list[list[list[int]]], list[list[int]], list[dict]]:
    config, epoch, jobs = runs["scenarios"][name]
    parts, pids = [], []
    for i, stage_job in enumerate(jobs):
        result = runs["stages"][i][name]
        assert result["error"] is None, f"{name}, process {'ABC'[i]}:\n{result['error']}"
        parts.append(result["ids"])
        pids.append(result["pid"])
    assert len(set(pids)) == len(pids)  # each part ran in its own process
    reference = runs["reference"][f"ref-{config}-e{epoch}"]["ids"]
    return parts, reference, jobs


def check_one_epoch(runs, name: str) -> None:
    parts, reference, jobs = outcome(runs, name)
    for part, stage_job in zip(parts, jobs):
        if stage_job["take"] is not None:
            assert len(part) == stage_job["take"], "a process stopped early: its epoch ended before k items"
    counts = Counter(i for part in parts for item in part for i in item)
    duplicated = sorted(i for i, c in counts.items() if c > 1)
    missing = sorted(set(runs["ids"]) - set(counts))
    assert not duplicated and not missing, (
        f"the processes together did not yield one epoch: {len(duplicated)} ids twice {duplicated[:10]}, "
        f"{len(missing)} missing {missing[:10]} (items per process: {[len(p) for p in parts]})")
    assert sorted(counts) == sorted(runs["ids"])
    # and in the order of an uninterrupted epoch
    assert [item for part in parts for item in part] == reference


@pytest.mark.parametrize("config", list(CONFIGS))
def test_reference_epoch_is_every_record_once(runs, config):
    for epoch in (0, 1):
        name = f"ref-{config}-e{epoch}"
        if name not in runs["reference"]:
            continue
        items = runs["reference"][name]["ids"]
        assert sorted(i for item in items for i in item) == sorted(runs["ids"])
        mode = CONFIGS[config][0]
        if mode == "record":
            assert all(len(item) == 1 for item in items)
        else:
            size = 4 if mode == "batch" else 3
            assert all(1 <= len(item) <= size for item in items)
    flat = [i for item in runs["reference"][f"ref-{config}-e0"]["ids"] for i in item]
    assert flat != sorted(flat)  # shuffled


@pytest.mark.parametrize("cut_label", CUTS)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_resume_in_fresh_process_gives_exactly_one_epoch(runs, config, cut_label):
    check_one_epoch(runs, f"{config}-k{cut_label}")


@pytest.mark.parametrize("config,set_epoch", EPOCH_CASES)
def test_resume_in_second_epoch(runs, config, set_epoch):
    name = f"{config}-epoch1-{'set_epoch' if set_epoch else 'from_state'}"
    check_one_epoch(runs, name)
    assert runs["reference"][f"ref-{config}-e1"]["ids"] != runs["reference"][f"ref-{config}-e0"]["ids"]


@pytest.mark.parametrize("config,k2", CHAINS)
def test_chained_resume_gives_exactly_one_epoch(runs, config, k2):
    check_one_epoch(runs, f"{config}-chain-7-{k2}")


def test_state_is_plain_data(runs):
    """The saved state loads with torch.load(weights_only=True) (done by the helper) and names the dataset."""
    import torch

    name = "record-index-w2-kmid"
    state = torch.load(runs["scenarios"][name][2][0]["save"], weights_only=True)
    text = repr(state)
    assert "yielded" in text and "num_workers" in text
