"""Train from TFRecord files on TPU with torch_xla (one process per TPU core/chip).

    python examples/train_tpu.py --data "gs://bucket/train-*.tfrecord"     # on a TPU VM with torch_xla

TFRecordDataset reads the replica's ordinal and the world size from torch_xla.runtime, gives every replica the
same number of batches, and drop_last=True keeps every batch the same shape, so XLA compiles the step once.
torch_xla's MpDeviceLoader moves batches to the device in the background. Without torch_xla this script says so
and exits. Public API only.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

import torch

import tfr_torch

FEATURES = {
    "x": tfr_torch.FixedLenFeature([16], torch.float32),
    "label": tfr_torch.FixedLenFeature([], torch.int64),
}


def train(args: argparse.Namespace) -> None:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl

    device = torch_xla.device()
    dataset = tfr_torch.TFRecordDataset(args.data, FEATURES, index="auto", shuffle=True,
                                        batch_size=args.batch_size, drop_last=True)  # fixed shapes for XLA
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=args.workers)
    device_loader = pl.MpDeviceLoader(loader, device)
    model = torch.nn.Linear(16, 2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        for step, batch in enumerate(device_loader):
            loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            xm.optimizer_step(optimizer)  # all-reduces gradients across replicas
        xm.master_print(f"epoch {epoch}: {step + 1} steps per replica ({len(dataset)} expected)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="glob or URL pattern of TFRecord files")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    if importlib.util.find_spec("torch_xla") is None:
        print("torch_xla is not installed: run this on a TPU VM (pip install torch_xla[tpu])", file=sys.stderr)
        return 1
    import torch_xla

    torch_xla.launch(train, args=(args,))
    return 0


if __name__ == "__main__":
    sys.exit(main())
