"""Train from TFRecord files on TPU with torch_xla: one replica per TPU device (or per CPU device, to try it).

    python examples/train_tpu.py --data "gs://bucket/train-*.tfrecord"     # on a TPU VM with torch_xla[tpu]
    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python examples/train_tpu.py          # anywhere torch_xla installs: 4 replicas

It writes a synthetic dataset first (examples/out/tpu/train-*.tfrecord, with indexes) unless --data is given.
Each replica builds its TFRecordDataset inside the function torch_xla.launch runs, so the dataset reads the
replica's ordinal and the world size from torch_xla's running runtime (a dataset built before the launch and handed
to the replicas would not know them). Every replica gets the same number of batches, drop_last=True keeps every
batch the same shape (XLA compiles the step once), persistent DataLoader workers are forked once, not every epoch,
and torch_xla's MpDeviceLoader moves batches to the device in the background.

--sync: gradients are all-reduced across replicas (xm.optimizer_step) on TPU; on CPU devices ("auto") each replica
steps alone, because with several CPU devices torch-xla 2.9's all-reduce does not complete (the replicas wait in
XLA's rendezvous, "Expected 4 threads to join", until XLA aborts the process). "always" forces it.
Without torch_xla this script says so and exits. Public API only.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
import torch

import tfr_torch

FEATURES = {
    "x": tfr_torch.FixedLenFeature([16], torch.float32),
    "label": tfr_torch.FixedLenFeature([], torch.int64),
}


def write_dataset(out: Path, shards: int = 4, per_shard: int = 1_000) -> str:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for s in range(shards):
        path = out / f"train-{s:05d}-of-{shards:05d}.tfrecord"
        if path.exists():
            continue
        with tfr_torch.TFRecordWriter(path) as writer:
            for _ in range(per_shard):
                x = rng.normal(size=16).astype(np.float32)
                writer.write_example({"x": x, "label": int(x.sum() > 0)})
        tfr_torch.build_index(path)
    return str(out / "train-*.tfrecord")


def train(index: int, args: argparse.Namespace) -> None:
    """One replica; torch_xla.launch passes the replica's index first."""
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.runtime as xr

    device = torch_xla.device()
    replicas = xr.world_size()
    sync = args.sync == "always" or (args.sync == "auto" and (xr.device_type() != "CPU" or replicas == 1))
    dataset = tfr_torch.TFRecordDataset(args.data, FEATURES, index="auto", shuffle=True, batch_size=args.batch_size,
                                        drop_last=True)  # built here: rank and world size from torch_xla
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=args.workers,
                                         persistent_workers=args.workers > 0)
    device_loader = pl.MpDeviceLoader(loader, device)
    model = torch.nn.Linear(16, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    xm.master_print(f"{replicas} replica(s) on {xr.device_type()}, {len(dataset)} batches of {args.batch_size} "
                    f"per replica per epoch, gradients {'all-reduced' if sync else 'not all-reduced (--sync)'}")
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        steps, loss = 0, None
        for batch in device_loader:
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            if sync:
                xm.optimizer_step(optimizer)  # all-reduces gradients across replicas, then steps
            else:
                optimizer.step()
            steps += 1
        last = "no batch (fewer records than replicas x batch size)" if loss is None else f"loss {loss.item():.4f}"
        xm.master_print(f"epoch {epoch}: {steps} steps per replica, {last}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="glob or URL pattern of TFRecord files (default: write a synthetic set)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sync", choices=["auto", "always", "never"], default="auto",
                        help="all-reduce gradients across replicas (auto: not on several CPU devices, where it fails)")
    args = parser.parse_args()
    if importlib.util.find_spec("torch_xla") is None:
        print("torch_xla is not installed: run this on a TPU VM (pip install torch_xla[tpu]), or try it on CPU "
              "with pip install torch==2.9.0 torch-xla==2.9.0 and PJRT_DEVICE=CPU", file=sys.stderr)
        return 1
    if args.data is None:
        args.data = write_dataset(Path(__file__).resolve().parent / "out" / "tpu")
    import torch_xla

    torch_xla.launch(train, args=(args,))
    return 0


if __name__ == "__main__":
    sys.exit(main())
