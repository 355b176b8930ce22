"""ElasticDistributedSampler: torch's DistributedSampler for map-style datasets (IndexedTFRecordDataset), with a
state that resumes mid-epoch under another world size. Which indices a rank takes is sampler_state.py's (pure)."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Mapping, Sized
from typing import Any

import numpy as np
import torch
from torch.utils.data import Sampler

from tfr_torch.data.distributed import rank_world
from tfr_torch.data.resumable import later_epoch_set
from tfr_torch.data.sampler_state import (
    SAMPLER_KIND,
    SAMPLER_VERSION,
    check_sampler_state,
    even_out,
    merge_sampler_parts,
    rank_indices,
    resume_point,
)

__all__ = ["ElasticDistributedSampler", "epoch_order"]


def epoch_order(size: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """The epoch's base order of indices: DistributedSampler's (`torch.randperm` seeded with seed + epoch), or
    0..size-1 without shuffling."""
    if not shuffle:
        return np.arange(size, dtype=np.int64)
    generator = torch.Generator()
    generator.manual_seed(seed + epoch)
    return torch.randperm(size, generator=generator).numpy().astype(np.int64)


class ElasticDistributedSampler(Sampler[int]):
    """`torch.utils.data.DistributedSampler`, resumable mid-epoch under another world size: the same indices in
    the same order (from `seed + epoch`; every rank the same count, padded by repeating the epoch's first indices
    or cut with `drop_last`), and a `state_dict()` that says how many indices this rank has taken. Gather every
    rank's state and merge them with `tfr_torch.elastic_state`: a job of any world size loads the merged state and
    takes each index the epoch has not yet yielded exactly once (evened between its ranks the same way), in an order
    fixed by (seed, epoch, the resume point, the new world size). torchdata's StatefulDataLoader saves and restores
    it (given as `sampler=`, batched by `batch_size=`); it lives in the main process, so `num_workers` is free.

    `rank` and `num_replicas` default to the detected ones (torch.distributed, RANK / WORLD_SIZE, ...).

    >>> sampler = tfr_torch.ElasticDistributedSampler(dataset, seed=0)      # doctest: +SKIP
    >>> loader = StatefulDataLoader(dataset, batch_size=32, sampler=sampler)  # doctest: +SKIP
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            found = rank_world()
            num_replicas = found.world_size if num_replicas is None else num_replicas
            rank = found.rank if rank is None else rank
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be a positive int, got {num_replicas!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be an int in [0, {num_replicas}), got {rank!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self.size = len(dataset)
        total = len(even_out(np.arange(self.size), num_replicas, self.drop_last))
        self.num_samples = total // num_replicas
        self.total_size = total
        paths = getattr(dataset, "paths", None)
        self._fingerprint = (f"{zlib.crc32(chr(10).join(os.path.basename(str(p)) for p in paths).encode()):08x}"
                             if isinstance(paths, (list, tuple)) else None)
        self._resume: dict[str, Any] | None = None
        # where the current iteration stands: its epoch, the segments before it, where it started, indices taken
        self._epoch_run: int | None = None
        self._history: list[dict[str, Any]] = []
        self._start = 0
        self._taken = 0

    def __len__(self) -> int:
        """Indices each rank takes in a fresh epoch (a resumed one takes what is left of it)."""
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """As DistributedSampler's: a new order each epoch. A loaded state resumes only the epoch it was saved in."""
        self.epoch = int(epoch)

    def __iter__(self) -> Iterator[int]:
        # A generator: nothing runs until the first index is asked for. DataLoaders call iter() more than once
        # before they draw (and StatefulDataLoader before it loads a state): a loaded state waits for the draw.
        history, start = self._pending()
        self._resume = None
        indices = rank_indices(epoch_order(self.size, self.shuffle, self.seed, self.epoch), self.drop_last, history,
                               self.rank, self.num_replicas, start)
        self._epoch_run, self._history, self._start, self._taken = self.epoch, history, start, 0
        for index in indices.tolist():
            self._taken += 1  # before the index is handed out: a state saved as it arrives counts it
            yield index

    def _pending(self) -> tuple[list[dict[str, Any]], int]:
        """(segments before this rank's, indices already taken) that the next iteration starts from."""
        if self._resume is not None and self._resume["epoch"] == self.epoch:
            return resume_point(self._resume, self.num_replicas)
        return [], 0

    def _order_info(self) -> dict[str, Any]:
        return {"size": self.size, "fingerprint": self._fingerprint, "seed": self.seed, "shuffle": self.shuffle,
                "drop_last": self.drop_last}

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        """This rank's part of the epoch's state: the epoch, what fixes its order, the world size, this rank and how
        many indices it has taken. `consumed`: how many indices the training loop has received since this
        iteration began (a plain DataLoader with workers draws indices ahead of the batches it has handed out:
        pass batches x batch_size); StatefulDataLoader needs none (it saves the state as of each batch). A state
        loaded but not yet iterated is returned as this rank's part of it."""
        pending = self._resume is not None and self._resume["epoch"] == self.epoch
        if pending:
            history, yielded = self._pending()
        elif self._epoch_run == self.epoch:
            history, yielded = self._history, self._start + self._taken
        else:
            history, yielded = [], 0
        if consumed is not None:
            if isinstance(consumed, bool) or not isinstance(consumed, int) or consumed < 0:
                raise ValueError(f"consumed must be an int >= 0, got {consumed!r}")
            if pending or self._epoch_run != self.epoch:
                # no iteration of this epoch has begun (since the state was loaded): nothing can have been received
                if consumed:
                    since = " since its state was loaded" if pending else ""
                    raise ValueError(f"consumed={consumed} but this sampler has not begun epoch {self.epoch}{since}")
            else:
                if consumed > self._taken:
                    raise ValueError(f"consumed={consumed} is more than the {self._taken} indices this sampler has "
                                     f"handed out in epoch {self.epoch}")
                yielded = self._start + consumed
        return {"kind": SAMPLER_KIND, "version": SAMPLER_VERSION, "epoch": self.epoch, **self._order_info(),
                "segments": [dict(s, yielded=list(s["yielded"])) for s in history],
                "world_size": self.num_replicas, "rank": self.rank, "yielded": int(yielded)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration of `state["epoch"]` takes what the state says is left. `state` is this rank's
        own part (what StatefulDataLoader restores: the same world size), or the merged state of every rank
        (`tfr_torch.elastic_state`), which resumes under any world size. Sets the epoch to the state's;
        StatefulDataLoader's own load (after the loop's set_epoch) of a state of an earlier epoch than the one the
        sampler is set to resumes nothing (see `tfr_torch.data.resumable.later_epoch_set`)."""
        check_sampler_state(state, self._order_info())
        if "rank" in state and state["world_size"] == 1:
            state = merge_sampler_parts([state])  # one rank's part is the whole epoch's state
        elif "rank" in state and (state["rank"], state["world_size"]) != (self.rank, self.num_replicas):
            key = "rank" if state["world_size"] == self.num_replicas else "world_size"
            mine = self.rank if key == "rank" else self.num_replicas
            raise ValueError(f"cannot resume: the saved state has {key}={state[key]!r}, this sampler has {mine!r}: "
                             f"it is one rank's part (rank {state['rank']} of {state['world_size']}); to resume "
                             "under another world size, merge every rank's part with tfr_torch.elastic_state(...) "
                             "and load that")
        if later_epoch_set(state, self.epoch):
            self._resume = None
            return
        self._resume = {**state, "segments": [dict(s, yielded=list(s["yielded"])) for s in state["segments"]]}
        self.epoch = int(state["epoch"])
