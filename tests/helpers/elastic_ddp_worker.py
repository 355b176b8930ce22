"""One rank of a real torch.distributed (gloo) job that saves or resumes a mid-epoch checkpoint, launched by
tests/test_elastic_ddp.py.

Usage: python tests/helpers/elastic_ddp_worker.py CONFIG.json OUT.json

The launcher sets RANK, WORLD_SIZE and DDP_STORE_FILE; the ranks meet at that file store (no TCP port to agree
on). Each rank builds TFRecordDataset (its rank from torch.distributed) and a torchdata StatefulDataLoader with
config["num_workers"] worker processes, and runs one all_reduce per batch, as a training step would (ranks with
different batch counts would hang, caught by the launcher's timeout).

- config["load"]: the merged state; every rank loads it into its dataset before building a fresh loader (the
  documented way to resume under another world size or number of workers).
- config["take"]: steps to take (null: to the end of the epoch).
- config["save"]: after the steps, every rank's loader.state_dict() is gathered (all_gather_object) and rank 0
  writes tfr_torch.elastic_state(gathered) there with torch.save.

OUT.json: {"rank", "world_size", "batches": [ids per batch], "batch_counts": [batches of each rank]}.
"""

from __future__ import annotations

import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader

import tfr_torch


def main() -> None:
    config_path, out_path = sys.argv[1], sys.argv[2]
    with open(config_path) as f:
        config = json.load(f)
    dist.init_process_group("gloo", init_method="file://" + os.environ["DDP_STORE_FILE"],
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=datetime.timedelta(seconds=60))
    os.environ.pop("RANK"), os.environ.pop("WORLD_SIZE")  # the dataset learns its rank from torch.distributed
    rank, world = dist.get_rank(), dist.get_world_size()

    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    dataset = tfr_torch.TFRecordDataset(config["paths"], features=spec, index=config["index"], shuffle=True,
                                        seed=config["seed"], batch_size=config["batch_size"])
    if config.get("load"):
        dataset.load_state_dict(torch.load(config["load"], weights_only=True))
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=config["num_workers"])

    batches = []
    iterator = iter(loader)
    while config["take"] is None or len(batches) < config["take"]:
        try:
            batch = next(iterator)
        except StopIteration:
            break
        step = torch.tensor([1.0])
        dist.all_reduce(step)  # one collective per batch
        batches.append(batch["id"].tolist())
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(counts, torch.tensor([len(batches)], dtype=torch.int64))

    if config.get("save"):
        gathered: list = [None] * world
        dist.all_gather_object(gathered, loader.state_dict())
        if rank == 0:
            tmp = config["save"] + ".tmp"
            torch.save(tfr_torch.elastic_state(gathered), tmp)
            os.replace(tmp, config["save"])
    del iterator
    dist.barrier()
    dist.destroy_process_group()
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"rank": rank, "world_size": world, "batches": batches,
                   "batch_counts": [int(c) for c in counts]}, f)
    os.replace(tmp, out_path)


if __name__ == "__main__":
    main()
