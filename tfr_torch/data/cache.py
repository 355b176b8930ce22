"""CachedDataset: tf.data's `cache()` for PyTorch: the items of the first full epoch kept in memory or on local
disk, replayed in later epochs without reading or decoding the records again.

For a small dataset read for many epochs from slow storage (object storage, a network file system), or one whose
decoding costs more than a training step: the first epoch reads and decodes as usual and keeps what it yields;
every later epoch replays that. Each reader (rank x DataLoader worker) keeps its own part, so the replayed epoch
holds exactly the items of the first one, each once, split the same way.

A part is kept only when its reader finished the epoch: an epoch abandoned midway (`break`, an error) keeps
nothing and the next epoch reads the source again. On disk, each part is written atomically with its CRC-32 and
size beside it (checked before it is replayed: a damaged part is removed, with a warning naming it, and read
again), and the folder holds a manifest describing the source (its files' names, sizes and modification times, and
its settings); a folder made from other files or settings is rebuilt, with a warning, never replayed blindly.
The folder's format (parts, their checks, the manifest) is cache_folder.py's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from tfr_torch.data.cache_folder import (
    CACHE_FORMAT,
    is_cache_file,
    kept_at,
    load_part,
    part_epoch,
    part_path,
    prepare_folder,
    source_differences,
    source_identity,
    write_part,
)
from tfr_torch.data.distributed import detect_rank_world
from tfr_torch.data.pipe import for_the_pipe
from tfr_torch.data.resumable import later_epoch_set
from tfr_torch.data.shared_cells import shared_int64
from tfr_torch.data.transport import Batch, RecordBatch, shared_memory_available, wrap_for_transport
from tfr_torch.format.paths import is_url

__all__ = ["CachedDataset", "CACHE_FORMAT"]

CACHE_STATE_VERSION = 1  # the version of CachedDataset.state_dict's layout
_MASK = 0xFFFF_FFFF_FFFF_FFFF  # seeds and epochs as numpy's generators take them (non-negative)


class CachedDataset(IterableDataset[Any]):
    """Replay the items an IterableDataset yields (decoded batches, or records) from memory or a local folder.

    - `dataset`: a TFRecordDataset (or any IterableDataset) whose items are tensors, dicts/lists/tuples of them,
      bytes, numbers or strings.
    - `directory`: None keeps the items in memory, in the process that read them (with DataLoader workers, pass
      `persistent_workers=True`, or the workers' caches end with the workers); a local folder keeps them on disk
      (`<folder>/part-...pt`), for any workers and for later runs of the same script.
    - `shuffle`: replayed epochs visit the kept items in a new order each epoch, seeded by (`seed`, epoch); the
      epoch comes from `set_epoch` (passed on to the dataset too). Leave the dataset's own shuffling off, or the
      first epoch's order is the one kept (as with tf.data, shuffle after the cache).
    - `transform`: applied to every item as it is yielded, in every epoch (random augmentation belongs here, not
      in the dataset's own `transform`, whose results are what is kept).

    Items are copied when kept and when replayed from memory (a tensor changed in place by a training step never
    changes the cache). `len()` is the dataset's. `state_dict()` / `load_state_dict()` resume an epoch where it
    stood, with the same ranks and DataLoader workers.

    >>> train = CachedDataset(TFRecordDataset("train-*.tfrecord", spec, batch_size=64), "/local/cache",
    ...                       shuffle=True)                                                        # doctest: +SKIP
    >>> loader = torch.utils.data.DataLoader(train, batch_size=None, num_workers=4)                # doctest: +SKIP
    """

    def __init__(self, dataset: IterableDataset[Any], directory: str | os.PathLike[str] | None = None, *,
                 shuffle: bool = False, seed: int = 0, transform: Callable[[Any], Any] | None = None) -> None:
        super().__init__()
        if not isinstance(dataset, IterableDataset):
            raise TypeError(f"CachedDataset caches an IterableDataset (such as TFRecordDataset), got "
                            f"{type(dataset).__name__}; a map-style dataset can be cached by indexing it into a list")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.dataset = dataset
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.transform = transform
        self._epoch = shared_int64(1)[0]  # seen by persistent workers
        self._memory: dict[str, list[Any]] = {}
        self._memory_epoch: dict[str, int] = {}  # the epoch each part in memory was read in
        self._live: dict[str, Any] | None = None  # where this process's running epoch stands
        self._resume: dict[str, Any] | None = None  # a loaded state, until the next iteration takes it
        self._identity: dict[str, Any] | None = None  # the source's description, as states name it (made once)
        self.directory: str | None = None
        if directory is not None:
            folder = os.fspath(directory)
            if not isinstance(folder, str) or is_url(folder):
                raise ValueError(f"the cache folder must be a local folder, got {folder!r}: the cache is for reading "
                                 "remote files once")
            self.directory = folder
            prepare_folder(folder, self.dataset)

    # ----- epochs and length -------------------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds the replay order (and the dataset's own, when it has set_epoch)."""
        self._epoch.fill_(int(epoch))
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    @property
    def location_key(self) -> str | None:
        """The key under which the dataset's items carry their records' locations (TFRecordDataset's), or None:
        what DeviceLoader names a bad image by."""
        key = getattr(self.dataset, "location_key", None)
        return key if isinstance(key, str) else None

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]  # TypeError from len() when the dataset has none

    def cached(self) -> bool:
        """Whether this reader's part is kept (in this process's memory, or in the folder)."""
        key = self._key()
        return key in self._memory or (self.directory is not None and os.path.exists(part_path(self.directory, key)))

    def clear(self) -> None:
        """Forget every kept part (memory and folder); the next epoch reads the dataset again."""
        self._memory.clear()
        self._memory_epoch.clear()
        if self.directory is not None and os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                if is_cache_file(name):
                    os.remove(os.path.join(self.directory, name))

    # ----- iteration ---------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        key = self._key()
        epoch = int(self._epoch)
        # a new pass: until its first item, state_dict says where it starts (the loaded state it resumes, which
        # stays loaded until then), not where the last pass of this epoch stood
        self._live = None
        resume = self._resume
        if resume is not None and resume["epoch"] == epoch and resume["phase"] is not None:
            if resume["reader"] != key:
                raise ValueError(f"this CachedDataset state was taken by reader {resume['reader']}, not {key}: a "
                                 "cache resumes with the same ranks and DataLoader workers")
            if resume["phase"] == "read":
                return self._read_resumed(key, resume)
            items = self._part(key)
            if items is None:  # a new process (a cache in memory), or a part removed: read it again first
                items = self._read_part(key, int(resume["kept_epoch"]))
            return self._replay(key, items, fresh=key not in self._memory, skip=int(resume["yielded"]))
        items = self._part(key)
        if items is None:
            return self._read_through(key)
        return self._replay(key, items, fresh=self.directory is not None and key not in self._memory)

    def _part(self, key: str) -> list[Any] | None:
        items = self._memory.get(key)
        if items is None and self.directory is not None:
            items = load_part(self.directory, key)
        return items

    def _read_through(self, key: str) -> Iterator[Any]:
        """Read the source, keeping its items. Where other readers kept their parts in a folder in an earlier epoch
        (this one abandoned it), the source is read as in that epoch (its set_epoch, for the time of this read): a
        shuffling source splits each epoch differently, and only parts of one epoch's split hold each item once."""
        epoch = int(self._epoch)
        # the epoch other readers' parts in the folder were read in (parts in memory are each process's own: see
        # docs/limitations.md)
        other = None if self.directory is None else kept_at(self.directory, key)
        source_epoch = epoch if other is None else other
        kept = []
        self._resume = None
        live = self._live = {"epoch": epoch, "phase": "read", "yielded": 0, "kept_epoch": source_epoch}
        sent = self._sent()
        with self._source_at(source_epoch):
            for item in self.dataset:
                kept.append(_copy(_plain(item)))  # a copy: the caller may change what it gets in place
                live["yielded"] += 1
                yield sent(item)
        self._keep(key, kept, source_epoch)  # the epoch is complete: keep it

    def _sent(self) -> Callable[[Any], Any]:
        """What an item of the source read through becomes as it is yielded: transformed, and what the transform
        made wrapped for the trip out of a DataLoader worker (_sender); the source's own items come wrapped
        already."""
        transform = self.transform
        if transform is None:
            return _itself
        send = self._sender()
        return lambda item: send(transform(item))

    def _sender(self) -> Callable[[Any], Any]:
        """How an item this dataset makes leaves it: in a DataLoader worker, a dict or list as the shared-memory
        transport sends it (when the source sends through shared memory), else a dict as a PipeBatch; elsewhere
        the item itself."""
        if get_worker_info() is None:
            return _itself
        if getattr(self.dataset, "shared_memory", False) and shared_memory_available():
            return _wrapped
        return for_the_pipe

    @contextlib.contextmanager
    def _source_at(self, source_epoch: int) -> Iterator[None]:
        """The dataset set to `source_epoch` for the time of a read (when that is not the current epoch)."""
        epoch = int(self._epoch)
        set_epoch: Callable[[int], None] | None = (getattr(self.dataset, "set_epoch", None) if source_epoch != epoch
                                                   else None)
        if set_epoch is not None:
            set_epoch(source_epoch)
        try:
            yield
        finally:
            if set_epoch is not None:
                set_epoch(epoch)

    def _read_resumed(self, key: str, resume: Mapping[str, Any]) -> Iterator[Any]:
        """The rest of a first epoch from where a saved state stood: the source resumes from its own state. What
        an earlier run yielded of that epoch is not here, so nothing is kept: the next epoch reads the source
        again and keeps it."""
        epoch = int(self._epoch)
        self._resume = None
        self.dataset.load_state_dict(resume["source"])  # type: ignore[attr-defined]  # load_state_dict checked it
        live = self._live = {"epoch": epoch, "phase": "read", "yielded": int(resume["yielded"]),
                             "kept_epoch": int(resume["kept_epoch"])}
        sent = self._sent()
        try:
            for item in self.dataset:
                live["yielded"] += 1
                yield sent(item)
        finally:
            if int(resume["kept_epoch"]) != epoch and hasattr(self.dataset, "set_epoch"):
                self.dataset.set_epoch(epoch)  # it was read as in another epoch (see _read_through)

    def _read_part(self, key: str, source_epoch: int) -> list[Any]:
        """This reader's part read from the source whole, as in the epoch it was first read (to resume a replayed
        epoch where the part is no longer kept); kept again."""
        with self._source_at(source_epoch):
            kept = [_copy(_plain(item)) for item in self.dataset]
        self._keep(key, kept, source_epoch)
        return kept

    def _keep(self, key: str, kept: list[Any], source_epoch: int) -> None:
        if self.directory is None:
            self._memory[key] = kept
            self._memory_epoch[key] = source_epoch
        else:
            write_part(self.directory, key, kept, source_epoch)

    def _part_epoch(self, key: str) -> int:
        """The epoch this reader's kept part was read in (its source's order and split)."""
        if key in self._memory_epoch:
            return self._memory_epoch[key]
        if self.directory is not None:
            recorded = part_epoch(self.directory, key)
            if recorded is not None:
                return recorded
        return 0

    # ----- state -------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Where this reader (this DataLoader worker, in a worker process) stands in the current epoch: reading
        the source (with the source's own state_dict) or replaying its kept part (how many items). torchdata's
        StatefulDataLoader collects one per worker."""
        epoch = int(self._epoch)
        if self._resume is not None and self._resume["epoch"] == epoch:  # loaded, not yet iterated: saved again as
            return dict(self._resume)  # it was (not after set_epoch to another epoch)
        live = self._live if self._live is not None and self._live["epoch"] == epoch else None
        state: dict[str, Any] = {"version": CACHE_STATE_VERSION, "kind": "tfr_torch.CachedDataset", "epoch": epoch,
                                 "reader": self._key(), "shuffle": self.shuffle, "seed": self.seed,
                                 "phase": None, "yielded": 0, "kept_epoch": epoch,
                                 "source_identity": self._source_identity()}
        if live is None and self.cached():  # not begun, a part kept: this epoch replays it (also in a new process)
            state.update(phase="replay", kept_epoch=self._part_epoch(state["reader"]))
        elif live is not None:
            state.update(phase=live["phase"], yielded=live["yielded"], kept_epoch=live["kept_epoch"])
            if live["phase"] == "read":
                if not hasattr(self.dataset, "state_dict"):
                    raise TypeError(f"the dataset ({type(self.dataset).__name__}) has no state_dict: a CachedDataset "
                                    "is resumable in its first epoch when its dataset is")
                state["source"] = self.dataset.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from `state_dict()`: the next iteration of that epoch (set_epoch to it, or it is set here) goes on
        where the state stood. A replayed epoch replays the rest of its order (a part no longer kept, as in a new
        process without a folder, is read from the source again first); a first epoch goes on through the
        source's own state, and is not kept (the next epoch reads and keeps it). StatefulDataLoader's own load
        of a state of an earlier epoch than the one the cache is set to resumes nothing (see `later_epoch_set`)."""
        if not isinstance(state, Mapping) or state.get("kind") != "tfr_torch.CachedDataset":
            raise ValueError("not a CachedDataset state (from CachedDataset.state_dict)")
        if state.get("version") != CACHE_STATE_VERSION:
            raise ValueError(f"CachedDataset state version {state.get('version')!r}; this tfr_torch reads version "
                             f"{CACHE_STATE_VERSION}")
        mine = {"shuffle": self.shuffle, "seed": self.seed}
        differ = [f"{k} {state.get(k)!r} (here {v!r})" for k, v in mine.items() if state.get(k) != v]
        if differ:
            raise ValueError(f"this state is of another cache: {'; '.join(differ)}")
        if "source_identity" in state and state["source_identity"] != self._source_identity():  # (older states
            # have none) a replayed epoch's state holds no state of its source: without this, one of a cache of
            # another source would skip its count of this source's items
            raise ValueError(f"this state is of a cache of another dataset "
                             f"({source_differences(state['source_identity'], self._source_identity())})")
        for key in ("epoch", "yielded", "kept_epoch"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"CachedDataset state: {key} must be a non-negative int, got {value!r}")
        if state.get("phase") not in (None, "read", "replay") or not isinstance(state.get("reader"), str):
            raise ValueError(f"CachedDataset state: phase {state.get('phase')!r} or reader {state.get('reader')!r} "
                             "is not one state_dict writes")
        if state["phase"] == "read":
            if not isinstance(state.get("source"), Mapping):
                raise ValueError("CachedDataset state: a first epoch's state holds its dataset's state ('source')")
            if not hasattr(self.dataset, "load_state_dict"):
                raise TypeError(f"the dataset ({type(self.dataset).__name__}) has no load_state_dict")
            check = getattr(self.dataset, "_checked_state", None)  # TFRecordDataset's, MixedDataset's: changes
            if check is not None:  # nothing; refused now, not where the epoch resumes (a DataLoader worker)
                check(state["source"])
        if later_epoch_set(state, self.epoch):  # not resumed, the epoch not set back (see later_epoch_set)
            self._resume = None
            return
        self._resume = dict(state)
        self.set_epoch(int(state["epoch"]))

    def _replay(self, key: str, items: list[Any], fresh: bool, skip: int = 0) -> Iterator[Any]:
        epoch = int(self._epoch)
        order: Any = range(len(items))
        if self.shuffle:
            order = np.random.default_rng([self.seed & _MASK, epoch & _MASK]).permutation(len(items))
        self._resume = None
        live = self._live = {"epoch": epoch, "phase": "replay", "yielded": min(skip, len(items)),
                             "kept_epoch": self._part_epoch(key)}
        send = self._sender()
        for i in order[live["yielded"]:]:
            live["yielded"] += 1
            item = items[int(i)] if fresh else _copy(items[int(i)])
            if self.transform is not None:
                item = self.transform(item)
            yield send(item)

    def _source_identity(self) -> dict[str, Any]:
        if self._identity is None:
            self._identity = source_identity(self.dataset)
        return self._identity

    # ----- readers and pickling ----------------------------------------------------------------------------------

    def _key(self) -> str:
        rank, world = (getattr(self.dataset, "rank", None), getattr(self.dataset, "world_size", None))
        if rank is None or world is None:
            rank, world = detect_rank_world(None, None)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return f"rank{rank}of{world}-worker{worker}of{workers}"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_memory"], state["_memory_epoch"] = {}, {}  # each process keeps its own parts
        state["_live"] = None
        return state


def _plain(item: Any) -> Any:
    """The item as plain containers (the shared-memory transport's marker types dropped)."""
    if type(item) is Batch:
        return dict(item)
    if type(item) is RecordBatch:
        return list(item)
    return item


def _copy(item: Any) -> Any:
    """A copy of a kept item: new tensors (and containers), so nothing the caller changes reaches the cache."""
    if isinstance(item, torch.Tensor):
        return item.clone()
    if isinstance(item, dict):
        return {k: _copy(v) for k, v in item.items()}
    if isinstance(item, list):
        return [_copy(v) for v in item]
    if isinstance(item, tuple) and not hasattr(item, "_fields"):
        return tuple(_copy(v) for v in item)
    if hasattr(item, "_fields"):  # NamedTuple (SparseBytes)
        return type(item)(*(_copy(v) for v in item))
    return item


def _itself(item: Any) -> Any:
    return item


def _wrapped(item: Any) -> Any:
    return wrap_for_transport(item) if type(item) in (dict, list) else item
