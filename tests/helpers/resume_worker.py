"""One process of tests/test_resume.py: runs StatefulDataLoader over TFRecordDataset for a list of jobs.

Usage: python tests/helpers/resume_worker.py JOBS.json OUT.json

JOBS.json is a list of jobs; each names a dataset configuration and what to do in this process:

    {"name": ..., "dataset": {TFRecordDataset kwargs, "paths": ...}, "loader": {StatefulDataLoader kwargs},
     "epoch": E, "set_epoch": true|false, "load": STATE_PATH or null, "take": K or null, "save": STATE_PATH or null}

For each job, a fresh dataset and loader are built; with "set_epoch" the dataset's set_epoch(E) is called; with
"load" the loader's load_state_dict(torch.load(STATE_PATH)) is called; then "take" items are taken from one
iterator over the loader (null: until the epoch ends); with "save" the loader's state_dict() is then written
with torch.save. OUT.json maps each job name to {"ids": [per item, the list of ids it holds], "error": ...}.
A job that raises records its traceback and the next job runs.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import tfr_torch


def item_ids(item) -> list[int]:
    return item["id"].reshape(-1).tolist()


def run(job: dict) -> list[list[int]]:
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    options = dict(job["dataset"])
    paths = options.pop("paths")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # counting files without an index warns; not what is tested here
        dataset = tfr_torch.TFRecordDataset(paths, features=spec, **options)
    loader = StatefulDataLoader(dataset, **job["loader"])
    if job.get("set_epoch"):
        dataset.set_epoch(job["epoch"])
    if job.get("load"):
        loader.load_state_dict(torch.load(job["load"]))
    items: list[list[int]] = []
    iterator = iter(loader)
    take = job.get("take")
    while take is None or len(items) < take:
        try:
            item = next(iterator)
        except StopIteration:
            break
        items.append(item_ids(item))
    if job.get("save"):
        state = loader.state_dict()
        tmp = job["save"] + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, job["save"])
    del iterator  # shut the workers down before the next job
    return items


def main() -> None:
    jobs_path, out_path = sys.argv[1], sys.argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = {}
    for job in jobs:
        try:
            results[job["name"]] = {"ids": run(job), "error": None, "pid": os.getpid()}
        except Exception:  # noqa: BLE001 - reported to the test, which fails that job only
            results[job["name"]] = {"ids": None, "error": traceback.format_exc(), "pid": os.getpid()}
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, out_path)


if __name__ == "__main__":
    main()
