"""`TFRecordNode`: a `torchdata.nodes` source over a rank's share of TFRecord records, resumable mid-epoch.

It reads through a `TFRecordDataset` in the calling thread, so everything the dataset does holds here: the records
split across ranks exactly once (rank and world size given, or detected from torch.distributed, torch_xla or
RANK/WORLD_SIZE), equal counts per rank, shuffling from `(seed, epoch)`, indexes, sidecars, TFDS folders and
splits. The node's state is the epoch and the dataset's position in it; restoring it skips what was yielded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional

from torchdata.nodes import BaseNode

from tfr_torch.data.dataset import TFRecordDataset
from tfr_torch.format.paths import PathLike

__all__ = ["TFRecordNode"]

_EPOCH = "epoch"
_DATASET = "dataset"


class TFRecordNode(BaseNode[Any]):  # type: ignore[misc]  # torchdata has no py.typed: BaseNode is Any to mypy
    """Yields the records (bytes; or decoded dicts / batches when given `features` / `batch_size`) of `paths` that
    this rank reads, one epoch per `reset()`: `Loader` resets at each `iter()`, and every new epoch after the first
    advances the epoch that seeds shuffling. `paths` and the keyword arguments are `TFRecordDataset`'s (`rank`,
    `world_size`, `pad`, `shuffle`, `seed`, `index`, `split`, ...), or pass a `TFRecordDataset` itself. `epoch` is
    the first epoch: 0, or for a `TFRecordDataset` given, its own (`set_epoch`, or that of a state it loaded).

    `Loader.state_dict()` holds the epoch and how many items this node yielded; a new pipeline given it by
    `load_state_dict` yields exactly the rest (records skipped by reading, never decoded).

    >>> node = TFRecordNode("train-*.tfrecord", shuffle=True, seed=1, rank=0, world_size=2)   # doctest: +SKIP
    >>> loader = torchdata.nodes.Loader(torchdata.nodes.Batcher(node, 32))                     # doctest: +SKIP
    """

    def __init__(self, paths: PathLike | Sequence[PathLike] | TFRecordDataset,
                 features: Mapping[str, Any] | str | None = None, *, epoch: int | None = None,
                 **dataset_options: Any) -> None:
        super().__init__()
        if isinstance(paths, TFRecordDataset):
            if features is not None or dataset_options:
                raise TypeError("TFRecordNode(dataset) takes no features or dataset options: they are the dataset's")
            self.dataset = paths
            if epoch is None:  # the dataset's own (set_epoch, or a state it loaded): not silently epoch 0
                epoch = self.dataset.epoch
        else:
            self.dataset = TFRecordDataset(paths, features, **dataset_options)  # type: ignore[arg-type]
        if epoch is None:
            epoch = 0
        if not _is_epoch(epoch):
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = epoch
        self._started = False  # an epoch began (reset was called): the next plain reset starts the next epoch
        self._it: Optional[Iterator[Any]] = None

    @property
    def rank(self) -> int:
        return self.dataset.rank

    @property
    def world_size(self) -> int:
        return self.dataset.world_size

    def __len__(self) -> int:
        """Items this rank yields per epoch (as `len(TFRecordDataset)`: needs known record counts)."""
        return len(self.dataset)

    def reset(self, initial_state: Optional[dict[str, Any]] = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            epoch = initial_state.get(_EPOCH)
            dataset_state = initial_state.get(_DATASET)
            if not _is_epoch(epoch) or not isinstance(dataset_state, Mapping):
                raise ValueError(f"not a TFRecordNode state: {initial_state!r}")
            if dataset_state.get(_EPOCH, epoch) != epoch:  # the dataset resumes its epoch: the next would skip some
                raise ValueError(f"not a TFRecordNode state: its epoch is {epoch!r} but its dataset state's epoch is "
                                 f"{dataset_state.get(_EPOCH)!r}")
            self.epoch = epoch
            self.dataset.load_state_dict(initial_state[_DATASET])  # checks seed, rank, world size and files
        else:
            if self._started:
                self.epoch += 1
            self.dataset.set_epoch(self.epoch)
        self._started = True
        self._it = iter(self.dataset)

    def next(self) -> Any:
        if self._it is None:  # pragma: no cover - BaseNode resets before the first next()
            raise RuntimeError("TFRecordNode.next() before reset()")
        return next(self._it)

    def get_state(self) -> dict[str, Any]:
        return {_EPOCH: self.epoch, _DATASET: self.dataset.state_dict()}


def _is_epoch(epoch: Any) -> bool:
    return isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0
