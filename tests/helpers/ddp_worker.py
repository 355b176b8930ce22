"""One rank of a real torch.distributed (gloo) job, launched by tests/test_distributed.py.

Usage: python tests/helpers/ddp_worker.py CONFIG.json OUT.json

The launcher sets RANK, WORLD_SIZE and DDP_STORE_FILE. This script joins the process group through a file store
at DDP_STORE_FILE (no TCP port to agree on: a port picked free by the launcher could be taken by another process
before rank 0 binds it), then removes RANK / WORLD_SIZE from its environment so that TFRecordDataset can only
learn its rank through torch.distributed. It builds the dataset without rank/world_size, iterates a DataLoader
with worker processes for several epochs (set_epoch each epoch), and runs one collective per batch, as a DDP
training step would: if the ranks yielded different numbers of batches the job would hang or fail, never pass. It
writes the ids it saw (per epoch, per batch) to OUT.json.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

import tfr_torch


def main() -> None:
    config_path, out_path = sys.argv[1], sys.argv[2]
    with open(config_path) as f:
        config = json.load(f)

    dist.init_process_group("gloo", init_method="file://" + os.environ["DDP_STORE_FILE"],
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=datetime.timedelta(seconds=config.get("collective_timeout", 60)))
    rank, world = dist.get_rank(), dist.get_world_size()
    env_rank, env_world = os.environ.pop("RANK"), os.environ.pop("WORLD_SIZE")  # detection must use torch.distributed
    os.environ.pop("LOCAL_RANK", None)

    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    dataset = tfr_torch.TFRecordDataset(
        config["paths"], features=spec, index=config["index"], shuffle=True, seed=config["seed"],
        batch_size=config["batch_size"])
    # persistent workers (forked once), as in training: forking new workers every epoch while the last epoch's
    # queue threads exit can deadlock the child in CPython 3.11's after-fork code (seen once in this test)
    loader = DataLoader(dataset, batch_size=None, num_workers=config["num_workers"], persistent_workers=True)

    result = {"rank": rank, "world_size": world, "env": [int(env_rank), int(env_world)],
              "dataset_rank": dataset.rank, "dataset_world_size": dataset.world_size, "len": len(dataset),
              "epochs": []}
    for epoch in range(config["epochs"]):
        dataset.set_epoch(epoch)
        batches = []
        for batch in loader:
            ids = batch["id"]
            step = torch.tensor([1.0, float(ids.numel())])
            dist.all_reduce(step)  # one collective per batch, as a gradient all-reduce
            batches.append({"ids": ids.tolist(), "ranks_in_step": step[0].item()})
        counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
        dist.all_gather(counts, torch.tensor([len(batches)], dtype=torch.int64))
        result["epochs"].append({"epoch": epoch, "batches": batches, "batch_counts": [int(c) for c in counts]})

    dist.barrier()
    dist.destroy_process_group()
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, out_path)


if __name__ == "__main__":
    main()
