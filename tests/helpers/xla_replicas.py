"""Run TFRecordDataset under torch_xla (PJRT, any device; the tests use PJRT_DEVICE=CPU with CPU_NUM_DEVICES=N),
for tests/test_xla.py. Usage: python xla_replicas.py CONFIG.json OUT_FOLDER

Modes (config["mode"]):
- "inside": torch_xla.launch runs `replica_inside` on every device; each replica builds the dataset itself (rank
  and world size auto-detected), reads config["epochs"] epochs through a DataLoader (persistent workers) and
  torch_xla's MpDeviceLoader, and writes OUT/replica-<ordinal>.json with the ids of every batch.
- "parent": the parent imports torch_xla and builds a dataset *before* torch_xla.launch, and says whether that
  started the XLA runtime or changed the environment; the launch must still work. Each replica writes what
  check_rank_world says about the parent's detection (directly, and from DataLoader workers) and what happens when
  it reads the parent's dataset.
- "probe": no launch: torch_xla imported, rank detection and a dataset built; writes the detected rank, whether
  the runtime was started and whether the environment changed.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import torch

import tfr_torch
from tfr_torch.data.distributed import check_rank_world, rank_world

FEATURES = {"id": tfr_torch.FixedLenFeature([], torch.int64)}


def make_dataset(config: dict) -> tfr_torch.TFRecordDataset:
    return tfr_torch.TFRecordDataset(config["paths"], FEATURES, index=config.get("index"), shuffle=True, seed=7,
                                     batch_size=config["batch_size"], drop_last=config.get("drop_last", False),
                                     pad=config.get("pad", False))


def read_epochs(dataset: tfr_torch.TFRecordDataset, config: dict) -> list[list[list[int]]]:
    import torch_xla
    import torch_xla.distributed.parallel_loader as pl

    workers = config.get("num_workers", 0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers,
                                         persistent_workers=workers > 0)
    device_loader = pl.MpDeviceLoader(loader, torch_xla.device())
    epochs = []
    for epoch in range(config.get("epochs", 1)):
        dataset.set_epoch(epoch)
        epochs.append([batch["id"].cpu().tolist() for batch in device_loader])  # ids after the trip to the device
    return epochs


def write(out: Path, name: str, result: dict) -> None:
    tmp = out / (name + ".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(out / name)


def replica_inside(index: int, config: dict, out: str) -> None:
    import torch_xla.runtime as xr

    dataset = make_dataset(config)
    result = {"index": index, "ordinal": xr.global_ordinal(), "world_size": xr.world_size(),
              "detected": list(rank_world()), "dataset": [dataset.rank, dataset.world_size], "len": len(dataset),
              "epochs": read_epochs(dataset, config)}
    write(Path(out), f"replica-{result['ordinal']}.json", result)


class CheckedStream(torch.utils.data.IterableDataset):
    """What a dataset does when it checks, where it is read, the rank it detected where it was built."""

    def __init__(self, built):
        self.built = built

    def __iter__(self):
        check_rank_world(self.built, "CheckedStream")
        yield from range(3)

    def __getstate__(self):  # pickled for spawned DataLoader workers, in the replica
        check_rank_world(self.built, "CheckedStream")
        return self.__dict__


def _error(fn) -> str | None:
    try:
        fn()
    except Exception as exc:  # the helper reports whatever happened, the test judges it
        return f"{type(exc).__name__}: {exc}"
    return None


def replica_parent(index: int, config: dict, out: str, dataset, built) -> None:
    import torch_xla.runtime as xr

    workers = config.get("num_workers", 0)
    loader = torch.utils.data.DataLoader(CheckedStream(built), batch_size=None, num_workers=workers,
                                         persistent_workers=workers > 0)
    result = {"index": index, "ordinal": xr.global_ordinal(), "world_size": xr.world_size(),
              "here": list(rank_world()), "check": _error(lambda: check_rank_world(built, "TFRecordDataset")),
              "check_in_workers": _error(lambda: list(loader)), "dataset": [dataset.rank, dataset.world_size]}
    epochs: list = []
    result["read_error"] = _error(lambda: epochs.extend(read_epochs(dataset, config)))
    result["epochs"] = epochs
    write(Path(out), f"replica-{result['ordinal']}.json", result)


def main() -> int:
    config = json.loads(Path(sys.argv[1]).read_text())
    out = sys.argv[2]
    import torch_xla  # the user's script imports it to launch; the import itself writes PJRT_DEVICE / XLA_FLAGS

    env = dict(os.environ)
    built = rank_world()
    try:
        dataset = make_dataset(config)
    except Exception:
        dataset = None
        failure = traceback.format_exc()
    else:
        failure = None
    parent = {"built": list(built), "dataset_error": failure,
              "dataset": None if dataset is None else [dataset.rank, dataset.world_size],
              "runtime_started": bool(torch_xla._XLAC._xla_runtime_is_initialized()),
              "env_changes": sorted(k for k in set(env) | set(os.environ) if env.get(k) != os.environ.get(k))}
    write(Path(out), "parent.json", parent)
    if config["mode"] == "inside":
        torch_xla.launch(replica_inside, args=(config, out))
    elif config["mode"] == "parent":
        torch_xla.launch(replica_parent, args=(config, out, dataset, built))
    return 0


if __name__ == "__main__":
    sys.exit(main())
