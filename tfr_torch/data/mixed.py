"""MixedDataset: several IterableDatasets drawn from by weight, as tf.data's `sample_from_datasets`, the `tfrecord`
package's MultiTFRecordDataset and Hugging Face's `interleave_datasets` do, reproducible and resumable.

Each dataset splits itself across ranks and DataLoader workers as it does alone (a TFRecordDataset gives each
reader its share); the mixture draws, in each reader, which dataset the next item comes from, with a random stream
seeded by (seed, epoch, worker): the same on every rank, so ranks whose shares are equal end their epochs at the
same step. The draws are counted, so `state_dict` says where the mixture stands beside each dataset's own state,
and a resumed run draws the same sequence from there.
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any, cast

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from tfr_torch.data.distributed import detect_rank_world
from tfr_torch.data.mixed_state import MIXED_STATE_VERSION, STATE_SETS, MixtureState
from tfr_torch.data.shared_cells import shared_int64

__all__ = ["MixedDataset", "MIXED_STATE_VERSION", "STOPS"]

STOPS = ("all", "first", "cycle")  # when a mixed epoch ends (see MixedDataset)
_MASK = 0xFFFF_FFFF_FFFF_FFFF
_CHUNK = 1024  # uniforms drawn at a time


class MixedDataset(MixtureState, IterableDataset[Any]):
    """Items of several IterableDatasets, each next item from a dataset drawn by weight.

    - `datasets`: a dict of name -> dataset (TFRecordDatasets, or any IterableDatasets), or a list (named "0",
      "1", ...). Each splits itself across ranks and DataLoader workers as it does alone.
    - `weights`: how often each dataset is drawn, relative to the others (a dict by name or a list; positive
      finite numbers); None: equally. Use per-record datasets to mix records within a batch (the DataLoader
      batches the mixture), batched ones (`batch_size=`) to mix whole batches.
    - `stop`: when an epoch ends.
      `"all"` (the default, as `tf.data.Dataset.sample_from_datasets`): every item of every dataset once; a
      dataset that runs out is left out and the others are drawn by their weights from then on. `len()` is the
      sum of the datasets' lengths.
      `"first"` (as Hugging Face's `interleave_datasets` default, "first_exhausted"): the epoch ends when the first
      dataset runs out; the proportions hold to the end, the other datasets' remaining items are not read.
      `"cycle"` (Hugging Face's "all_exhausted"; the `tfrecord` package's `infinite=True` until each has been
      read once): a dataset that runs out starts again, until every dataset has run out at least once.
    - `seed`: with the epoch (`set_epoch`, passed on to the datasets) and the DataLoader worker, seeds the draws:
      the same arguments give the same mixture. Every rank draws the same sequence, so where the datasets give
      the ranks equal shares (TFRecordDataset does), every rank yields as many items per epoch with any `stop`
      (DDP's collectives never wait on a rank that has run out).

    `state_dict()` / `load_state_dict()` (the datasets must have them, as TFRecordDataset does) resume a mixed epoch
    where it stood, with the same datasets, weights and layout (number of DataLoader workers; each reader's
    state is its own, as torchdata's StatefulDataLoader keeps them). Under another world size or number of
    workers: merge every reader's state with `tfr_torch.elastic_state` and load that (stop "all" or "first");
    each dataset reads its rest once, split over the new readers as its own elastic resume splits it (cut to a
    multiple of the new world size unless it pads), and the mixture draws afresh from
    (seed, epoch, resume count, worker), still the same on every rank.

    >>> mixed = MixedDataset({"web": TFRecordDataset("web-*.tfrecord", spec),
    ...                       "books": TFRecordDataset("books-*.tfrecord", spec)}, weights={"web": 3, "books": 1})
    ...                                                                                  # doctest: +SKIP
    >>> loader = torch.utils.data.DataLoader(mixed, batch_size=64, num_workers=4)       # doctest: +SKIP
    """

    def __init__(self, datasets: Mapping[str, IterableDataset[Any]] | Sequence[IterableDataset[Any]],
                 weights: Mapping[str, float] | Sequence[float] | None = None, *, stop: str = "all",
                 seed: int = 0) -> None:
        super().__init__()
        if isinstance(datasets, Mapping):
            self.names = [str(name) for name in datasets]
            self.datasets = [datasets[name] for name in datasets]
        elif isinstance(datasets, Sequence) and not isinstance(datasets, (str, bytes)):
            self.names = [str(k) for k in range(len(datasets))]
            self.datasets = list(datasets)
        else:
            raise TypeError(f"datasets must be a dict of name -> IterableDataset or a list of them, got "
                            f"{type(datasets).__name__}")
        if not self.datasets:
            raise ValueError("MixedDataset needs at least one dataset")
        for name, dataset in zip(self.names, self.datasets):
            if not isinstance(dataset, IterableDataset):
                raise TypeError(f"dataset {name!r} must be an IterableDataset (such as TFRecordDataset), got "
                                f"{type(dataset).__name__}")
        self.weights = _weights(weights, self.names, isinstance(datasets, Mapping))
        if stop not in STOPS:
            raise ValueError(f"stop must be one of {', '.join(map(repr, STOPS))}, got {stop!r}")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.stop = stop
        self.seed = seed
        cells = shared_int64(2)  # one block of shared memory for many datasets' values
        self._epoch = cells[0]  # seen by persistent workers
        self._live: dict[str, Any] | None = None  # the running epoch's draws (this process)
        self._resume: dict[str, Any] | None = None  # a loaded state, until the next iteration takes it
        self._elastic: dict[str, Any] | None = None  # a loaded merged state (elastic_state): its epoch's next pass
        self._elastic_taken = cells[1]  # which pass took it (workers)

    # ----- epochs and length -------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds the draws, and each dataset's own (those with set_epoch)."""
        self._epoch.fill_(int(epoch))
        for dataset in self.datasets:
            if hasattr(dataset, "set_epoch"):
                dataset.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    @property
    def rank(self) -> int | None:
        """The rank the datasets read for (the first that says), or None: what a CachedDataset of this mixture
        keys its parts by."""
        return next((r for r in (getattr(d, "rank", None) for d in self.datasets) if isinstance(r, int)), None)

    @property
    def world_size(self) -> int | None:
        """The world size the datasets read for (the first that says), or None."""
        return next((w for w in (getattr(d, "world_size", None) for d in self.datasets) if isinstance(w, int)), None)

    @property
    def location_key(self) -> str | None:
        """The key under which every dataset's items carry their records' locations (TFRecordDataset's
        `location_key`, the same in all), else None: what DeviceLoader names a bad image by."""
        keys = {getattr(dataset, "location_key", None) for dataset in self.datasets}
        key = keys.pop() if len(keys) == 1 else None
        return key if isinstance(key, str) else None

    def __len__(self) -> int:
        """Items per epoch on this rank with stop="all": the sum of the datasets' lengths (TypeError from a
        dataset without one). The other stops end at a point the draws decide: no length."""
        if self.stop != "all":
            raise TypeError(f"a MixedDataset with stop={self.stop!r} has no length: its epoch ends where the draws "
                            "make a dataset run out (stop='all' has the sum of the datasets' lengths)")
        return sum(len(cast(Sized, dataset)) for dataset in self.datasets)  # TypeError from one without a length

    # ----- iteration ---------------------------------------------------------------------------------------------

    def _reader(self) -> tuple[int, int, int]:
        """(rank, worker, workers) of this reader."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        rank = self.rank
        return (rank if rank is not None else detect_rank_world()[0]), worker, workers

    def __iter__(self) -> Iterator[Any]:
        rank, worker, workers = self._reader()
        epoch = self.epoch
        live: dict[str, Any] = {"epoch": epoch, "rank": rank, "worker": worker, "workers": workers, "draws": 0,
                                "exhausted": [], "cycled": [], "restart": [], "started": []}
        fresh: set[int] = set()  # datasets not drawn again, or whose next draw starts a new pass
        resume, self._resume = self._resume, None
        elastic = self._take_elastic(epoch)
        live["segment"] = elastic["segment"] if elastic is not None else 0
        if resume is not None and resume["epoch"] == epoch:  # one of another epoch (set_epoch since) is dropped
            self._check_layout(resume, rank, worker, workers)
            live.update({key: list(resume[key]) for key in STATE_SETS}, draws=int(resume["draws"]),
                        segment=int(resume.get("segment", 0)))
            fresh = set(resume["exhausted"]) | set(resume["restart"])
            for k, (name, dataset) in enumerate(zip(self.names, self.datasets)):
                if k not in fresh:
                    dataset.load_state_dict(resume["datasets"][name])  # type: ignore[attr-defined]
        elif elastic is not None and elastic["over"]:  # every reader's stop="first" epoch had ended
            live["exhausted"] = list(range(len(self.datasets)))
            self._live = live
            return iter(())
        self._live = live
        # every other dataset's pass begins with the mixture's, not at its first draw: until then its state_dict
        # would say where its last pass stood (the same epoch iterated again), and a state taken then would resume
        # that
        iterators: list[Iterator[Any] | None] = [None if k in fresh else iter(dataset)
                                                 for k, dataset in enumerate(self.datasets)]
        return self._mix(live, iterators)

    def _mix(self, live: dict[str, Any], iterators: list[Iterator[Any] | None]) -> Iterator[Any]:
        # not the rank: every rank draws the same sequence, so with datasets that give the ranks equal shares (as
        # TFRecordDataset does) every rank's epoch has as many items, whatever `stop` (no rank waits in a collective)
        entropy = [self.seed & _MASK, live["epoch"] & _MASK, live["worker"]]
        if live["segment"]:  # resumed under another layout (elastic_state): the rest of the epoch draws afresh
            entropy.append(live["segment"])
        bits = np.random.PCG64(np.random.SeedSequence(entropy))
        bits.advance(live["draws"])  # one 64-bit output per uniform: where a resumed epoch stood
        draw = np.random.Generator(bits)
        weights = np.asarray(self.weights, dtype=np.float64)
        weights = np.ldexp(weights, -np.frexp(weights.max())[1])  # exactly scaled to the largest in [0.5, 1): a sum
        # of large weights never overflows to inf (which drew the last dataset only), tiny ones are not subnormal
        n = len(self.datasets)
        out = set(live["exhausted"])  # no longer drawn
        cycled = set(live["cycled"])  # ran out at least once (stop="cycle")
        restart = set(live["restart"])  # ran out; the next draw of it starts a new pass (stop="cycle")
        started = set(live["started"])  # yielded an item in its current pass

        def note() -> None:
            live.update(exhausted=sorted(out), cycled=sorted(cycled), restart=sorted(restart),
                        started=sorted(started))

        def drawable() -> tuple[list[int], list[float]]:  # the datasets still drawn, their cumulative weights
            active = [k for k in range(n) if k not in out]
            return active, np.cumsum(weights[active]).tolist()

        uniforms: list[float] = []
        at = 0
        active, cumulative = drawable()
        while active:
            if at == len(uniforms):
                uniforms, at = draw.random(_CHUNK).tolist(), 0
            u = uniforms[at]
            at += 1
            live["draws"] += 1
            k = active[min(bisect.bisect_right(cumulative, u * cumulative[-1]), len(active) - 1)]
            iterator = iterators[k]
            if iterator is None:
                if k in restart:  # a new pass over a dataset that ran out
                    restart.discard(k)
                    started.discard(k)
                    note()
                iterator = iterators[k] = iter(self.datasets[k])
            try:
                item = next(iterator)
            except StopIteration:
                iterators[k] = None
                if self.stop == "first":
                    out.update(range(n))  # the epoch is over: a state taken now resumes nothing
                    note()
                    return
                cycled.add(k)
                if self.stop == "all" or k not in started:  # "all": done with it; a pass of nothing: empty here
                    out.add(k)
                    active, cumulative = drawable()
                elif len(cycled) < n:
                    restart.add(k)
                note()
                if self.stop == "cycle" and len(cycled) == n:  # every dataset has run out once
                    out.update(range(n))  # the epoch is over: a state taken now resumes nothing
                    note()
                    return
                continue
            if k not in started:
                started.add(k)
                note()
            yield item

    # ----- pickling (the state methods: mixed_state.py) ----------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_live"] = None  # a worker's draws are its own
        return state


def _weights(weights: Mapping[str, float] | Sequence[float] | None, names: list[str], named: bool) -> list[float]:
    if weights is None:
        return [1.0] * len(names)
    if isinstance(weights, Mapping):
        if not named:
            raise TypeError("weights by name need datasets by name (a dict); give a list for a list of datasets")
        if set(map(str, weights)) != set(names):
            raise ValueError(f"weights name {sorted(map(str, weights))}, the datasets {sorted(names)}")
        values = [weights[name] for name in names]
    elif isinstance(weights, Sequence) and not isinstance(weights, (str, bytes)):
        if len(weights) != len(names):
            raise ValueError(f"{len(weights)} weights for {len(names)} datasets")
        values = list(weights)
    else:
        raise TypeError(f"weights must be a dict, a list or None, got {type(weights).__name__}")
    out: list[float] = []
    for name, value in zip(names, values):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"the weight of dataset {name!r} must be a positive finite number, got {value!r} (leave "
                             "a dataset out rather than weigh it 0)")
        out.append(float(value))
    return out
