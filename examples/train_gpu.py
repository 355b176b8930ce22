"""Train a small model from TFRecord files on one GPU, on many GPUs under DDP, or on the CPU.

    python examples/train_gpu.py                       # one process (GPU if there is one, else CPU)
    torchrun --nproc_per_node=8 examples/train_gpu.py  # DDP: one process per GPU

It writes a synthetic dataset first (examples/out/train-*.tfrecord, with indexes) unless --data is given.
TFRecordDataset reads the rank and world size from torch.distributed, gives every rank the same number of
batches (so collectives never wait for a rank that ran out of data), shuffles per epoch with set_epoch, and
decodes whole batches in the workers; pin_memory and non_blocking copies overlap the host-to-device transfer
with compute. Public API only.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import tfr_torch

FEATURES = {
    "x": tfr_torch.FixedLenFeature([16], torch.float32),
    "label": tfr_torch.FixedLenFeature([], torch.int64),
    "tokens": tfr_torch.VarLenFeature(torch.int64),
}


def write_dataset(out: Path, shards: int = 4, per_shard: int = 2_000) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for s in range(shards):
        path = out / f"train-{s:05d}-of-{shards:05d}.tfrecord"
        if path.exists():
            continue
        with tfr_torch.TFRecordWriter(path) as writer:
            for _ in range(per_shard):
                x = rng.normal(size=16).astype(np.float32)
                writer.write_example({"x": x, "label": int(x.sum() > 0),
                                      "tokens": rng.integers(0, 100, size=int(rng.integers(1, 8)))})
        tfr_torch.build_index(path)
    return str(out / "train-*.tfrecord")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="glob of TFRecord files (default: write a synthetic set)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    device = (torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available()
              else torch.device("cpu"))
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    rank = dist.get_rank() if distributed else 0

    pattern = args.data or write_dataset(Path(__file__).resolve().parent / "out")
    if distributed:
        dist.barrier()  # rank 0 may have written the data
    dataset = tfr_torch.TFRecordDataset(pattern, FEATURES, index="auto", shuffle=True, seed=0,
                                        batch_size=args.batch_size, drop_last=True)
    loader = DataLoader(dataset, batch_size=None, num_workers=args.workers, pin_memory=device.type == "cuda",
                        persistent_workers=args.workers > 0)

    model = torch.nn.Sequential(torch.nn.Linear(16 + 1, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)).to(device)
    if distributed:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)  # reaches the persistent workers too
        total, correct, steps = 0.0, 0, 0
        for batch in loader:
            tokens, lengths = tfr_torch.to_padded(batch["tokens"])
            x = batch["x"].to(device, non_blocking=True)
            mean_token = (tokens.sum(1) / lengths.clamp(min=1)).float().unsqueeze(1).to(device, non_blocking=True) / 100
            y = batch["label"].to(device, non_blocking=True)
            logits = model(torch.cat([x, mean_token], dim=1))
            loss = torch.nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()  # under DDP: an all-reduce per step; equal batch counts per rank keep them in step
            optimizer.step()
            total += loss.item()
            correct += int((logits.argmax(1) == y).sum())
            steps += 1
        if rank == 0:
            print(f"epoch {epoch}: {steps} steps of {args.batch_size} per rank, loss {total / max(steps, 1):.3f}, "
                  f"accuracy {correct / max(steps * args.batch_size, 1):.3f}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
