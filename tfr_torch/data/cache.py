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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from tfr_torch.data.distributed import detect_rank_world
from tfr_torch.data.transport import Batch, RecordBatch, shared_memory_available, wrap_for_transport
from tfr_torch.format.paths import atomic_output, is_url

__all__ = ["CachedDataset", "CACHE_FORMAT"]

CACHE_STATE_VERSION = 1  # the version of CachedDataset.state_dict's layout
CACHE_FORMAT = "tfr_torch.cache/2"  # 2: each part's CRC-32 and size beside it (`check-*.json`)
_MANIFEST = "tfr_torch-cache.json"
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
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()  # seen by persistent workers
        self._memory: dict[str, list[Any]] = {}
        self._memory_epoch: dict[str, int] = {}  # the epoch each part in memory was read in
        self._live: dict[str, Any] | None = None  # where this process's running epoch stands
        self._resume: dict[str, Any] | None = None  # a loaded state, until the next iteration takes it
        self.directory: str | None = None
        if directory is not None:
            folder = os.fspath(directory)
            if not isinstance(folder, str) or is_url(folder):
                raise ValueError(f"the cache folder must be a local folder, got {folder!r}: the cache is for reading "
                                 "remote files once")
            self.directory = folder
            self._prepare_folder()

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
        return key in self._memory or (self.directory is not None and os.path.exists(self._part_path(key)))

    def clear(self) -> None:
        """Forget every kept part (memory and folder); the next epoch reads the dataset again."""
        self._memory.clear()
        self._memory_epoch.clear()
        if self.directory is not None and os.path.isdir(self.directory):
            for name in os.listdir(self.directory):
                if _cache_file(name):
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
            items = self._load(key)
        return items

    def _read_through(self, key: str) -> Iterator[Any]:
        """Read the source, keeping its items. Where other readers kept their parts in a folder in an earlier epoch
        (this one abandoned it), the source is read as in that epoch (its set_epoch, for the time of this read): a
        shuffling source splits each epoch differently, and only parts of one epoch's split hold each item once."""
        epoch = int(self._epoch)
        kept_at = self._kept_at(key)
        source_epoch = epoch if kept_at is None else kept_at
        kept = []
        self._resume = None
        live = self._live = {"epoch": epoch, "phase": "read", "yielded": 0, "kept_epoch": source_epoch}
        with self._source_at(source_epoch):
            for item in self.dataset:
                kept.append(_copy(_plain(item)))  # a copy: the caller may change what it gets in place
                live["yielded"] += 1
                yield item if self.transform is None else self.transform(item)
        self._keep(key, kept, source_epoch)  # the epoch is complete: keep it

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
        self.dataset.load_state_dict(resume["source"])  # type: ignore[attr-defined]  # state_dict checked it
        live = self._live = {"epoch": epoch, "phase": "read", "yielded": int(resume["yielded"]),
                             "kept_epoch": int(resume["kept_epoch"])}
        try:
            for item in self.dataset:
                live["yielded"] += 1
                yield item if self.transform is None else self.transform(item)
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
            path = self._part_path(key)
            with atomic_output(path) as f:
                torch.save(kept, f)
            with atomic_output(self._check_path(key)) as f:  # after the part: a part without one is not replayed
                f.write(json.dumps({**_file_crc(path), "epoch": source_epoch}).encode())

    def _part_epoch(self, key: str) -> int:
        """The epoch this reader's kept part was read in (its source's order and split)."""
        if key in self._memory_epoch:
            return self._memory_epoch[key]
        if self.directory is not None:
            try:
                with open(self._check_path(key)) as f:
                    epoch = json.load(f).get("epoch")
                if isinstance(epoch, int) and not isinstance(epoch, bool):
                    return epoch
            except (OSError, ValueError, AttributeError):
                pass
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
                                 "phase": None, "yielded": 0, "kept_epoch": epoch}
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
        source's own state, and is not kept (the next epoch reads and keeps it)."""
        if not isinstance(state, Mapping) or state.get("kind") != "tfr_torch.CachedDataset":
            raise ValueError("not a CachedDataset state (from CachedDataset.state_dict)")
        if state.get("version") != CACHE_STATE_VERSION:
            raise ValueError(f"CachedDataset state version {state.get('version')!r}; this tfr_torch reads version "
                             f"{CACHE_STATE_VERSION}")
        mine = {"shuffle": self.shuffle, "seed": self.seed}
        differ = [f"{k} {state.get(k)!r} (here {v!r})" for k, v in mine.items() if state.get(k) != v]
        if differ:
            raise ValueError(f"this state is of another cache: {'; '.join(differ)}")
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
        self._resume = dict(state)
        self.set_epoch(int(state["epoch"]))

    def _kept_at(self, key: str) -> int | None:
        """The epoch the other readers' parts kept in the folder were read in (their checks say), or None when
        none is kept (or the parts are in memory, each process's own: see docs/limitations.md)."""
        if self.directory is None:
            return None
        for name in sorted(os.listdir(self.directory)):
            if name.startswith("check-") and name.endswith(".json") and name != f"check-{key}.json":
                try:
                    with open(os.path.join(self.directory, name)) as f:
                        epoch = json.load(f).get("epoch")
                except (OSError, ValueError, AttributeError):
                    continue
                if isinstance(epoch, int) and not isinstance(epoch, bool):
                    return epoch
        return None

    def _replay(self, key: str, items: list[Any], fresh: bool, skip: int = 0) -> Iterator[Any]:
        epoch = int(self._epoch)
        order: Any = range(len(items))
        if self.shuffle:
            order = np.random.default_rng([self.seed & _MASK, epoch & _MASK]).permutation(len(items))
        wrap = (get_worker_info() is not None and getattr(self.dataset, "shared_memory", False)
                and shared_memory_available())
        self._resume = None
        live = self._live = {"epoch": epoch, "phase": "replay", "yielded": min(skip, len(items)),
                             "kept_epoch": self._part_epoch(key)}
        for i in order[live["yielded"]:]:
            live["yielded"] += 1
            item = items[int(i)] if fresh else _copy(items[int(i)])
            if self.transform is not None:
                item = self.transform(item)
            yield wrap_for_transport(item) if wrap and type(item) in (dict, list) else item

    # ----- the folder --------------------------------------------------------------------------------------------

    def _key(self) -> str:
        rank, world = (getattr(self.dataset, "rank", None), getattr(self.dataset, "world_size", None))
        if rank is None or world is None:
            rank, world = detect_rank_world(None, None)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return f"rank{rank}of{world}-worker{worker}of{workers}"

    def _part_path(self, key: str) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, f"part-{key}.pt")

    def _check_path(self, key: str) -> str:
        """Where a part's CRC-32 and size are kept (written after the part, read before it is replayed)."""
        assert self.directory is not None
        return os.path.join(self.directory, f"check-{key}.json")

    def _prepare_folder(self) -> None:
        """Write the manifest; a folder whose manifest describes another source is emptied first (with a
        warning saying what changed)."""
        folder = self.directory
        assert folder is not None
        os.makedirs(folder, exist_ok=True)
        source = describe_source(self.dataset)
        manifest = {"format": CACHE_FORMAT, "source": source,
                    "fingerprint": hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()}
        path = os.path.join(folder, _MANIFEST)
        old = None
        if os.path.exists(path):
            try:
                with open(path) as f:
                    old = json.load(f)
            except (OSError, ValueError):
                old = {}
        kept = [n for n in os.listdir(folder) if _cache_file(n)]
        if (old is not None and old.get("fingerprint") == manifest["fingerprint"]
                and old.get("format") == CACHE_FORMAT):
            return
        if kept:
            parts = sum(n.startswith("part-") for n in kept)
            changed = _differences(old.get("source") if isinstance(old, dict) else None, source)
            warnings.warn(f"the cache in {folder} was made from another dataset ({changed}): its {parts} part(s) "
                          "are removed and the next epoch reads the dataset again", stacklevel=3)
            for name in kept:
                os.remove(os.path.join(folder, name))
        with atomic_output(path) as f:
            f.write(json.dumps(manifest, indent=1, sort_keys=True).encode())

    def _load(self, key: str) -> list[Any] | None:
        """This reader's kept part, or None: none kept, or one that is not what was written (its CRC-32 and size,
        kept beside it, disagree, or it does not load: a full disk, an interrupted copy, a flipped bit), which is
        removed with a warning naming it, and the epoch reads the dataset again."""
        path = self._part_path(key)
        if not os.path.exists(path):
            return None
        from tfr_torch.decode.results import RaggedTensor, SparseBytes

        try:
            with open(self._check_path(key)) as f:
                recorded = json.load(f)
        except (OSError, ValueError):
            recorded = None
        problem = None
        if recorded is None or {k: recorded.get(k) for k in ("crc32", "bytes")} != _file_crc(path):
            problem = "its CRC-32 or size is not the one recorded when it was written" if recorded is not None else \
                "the CRC-32 recorded beside it is missing or unreadable"
        else:
            try:
                with torch.serialization.safe_globals([RaggedTensor, SparseBytes]):
                    items: list[Any] = torch.load(path, weights_only=True, mmap=True)
                return items
            except Exception as exc:  # noqa: BLE001 - whatever torch raises for a part that does not load
                problem = f"it does not load ({type(exc).__name__}: {str(exc)[:120]})"
        warnings.warn(f"the cached part {path} is damaged ({problem}): it is removed and this epoch reads the dataset "
                      "again", stacklevel=3)
        for stale in (path, self._check_path(key)):
            with contextlib.suppress(OSError):
                os.remove(stale)
        return None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_memory"], state["_memory_epoch"] = {}, {}  # each process keeps its own parts
        state["_live"] = None
        return state


def _cache_file(name: str) -> bool:
    """A part, or a part's check, in a cache folder."""
    return (name.startswith("part-") and name.endswith(".pt")) or (name.startswith("check-") and name.endswith(".json"))


def _file_crc(path: str) -> dict[str, int]:
    """{"crc32": ..., "bytes": ...} of a file, read in 1 MiB pieces."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return {"crc32": crc, "bytes": size}


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable_repr(value: Any) -> str:
    """repr() without the object addresses a default repr holds (`<function f at 0x7f...>`): another run of the
    same script gets other addresses, and its cache must still be replayed."""
    return _ADDRESS.sub("", repr(value))


def describe_source(dataset: Any) -> dict[str, Any]:
    """What identifies the items a dataset yields: its type, its files (name, size, modification time) and its
    settings; a MixedDataset's, each of its datasets too. A cache made from a different description is not replayed."""
    files = []
    for path in getattr(dataset, "paths", []) or []:
        try:
            st = os.stat(path)
            files.append([str(path), st.st_size, st.st_mtime_ns])
        except OSError:
            files.append([str(path), None, None])  # a URL: its name only
    settings = {}
    # not the rank: the ranks share a folder, each its own parts; names, weights, stop: a MixedDataset's
    for name in ("features", "batch_size", "drop_last", "shuffle", "seed", "pad", "compression", "on_error",
                 "transform", "world_size", "names", "weights", "stop"):
        if hasattr(dataset, name):
            settings[name] = _stable_repr(getattr(dataset, name))
    described: dict[str, Any] = {"type": f"{type(dataset).__module__}.{type(dataset).__qualname__}",
                                 "files": files, "settings": settings}
    parts = getattr(dataset, "datasets", None)
    if isinstance(parts, list):  # a MixedDataset: what each of its datasets is
        described["datasets"] = [describe_source(part) for part in parts]
    return described


def _differences(old: Any, new: dict[str, Any]) -> str:
    if not isinstance(old, dict):
        return "its manifest is missing or unreadable"
    changed = [k for k in ("type", "files", "datasets") if old.get(k) != new.get(k)]
    old_settings = old.get("settings") or {}
    changed += [f"{k}" for k in sorted(set(old_settings) | set(new["settings"]))
                if old_settings.get(k) != new["settings"].get(k)]
    return "changed: " + ", ".join(changed) if changed else "another cache format"


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
