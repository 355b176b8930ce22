"""TFRecordDataset: an IterableDataset that feeds DataLoader workers, DDP ranks and TPU replicas every record
exactly once per epoch (or an equal-sized subset per rank), shuffled, and resumable mid-epoch.

The class checks and keeps its options and wires three mixins, one idea each: which records each reader reads in an
epoch and the counts that decide it (epoch_records.py), the items made of them (items.py), and the resumable state
(resumable.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal

from torch.utils.data import IterableDataset, default_convert, get_worker_info

from tfr_torch.data.arguments import (
    _is_tfds,
    auto_features,
    check_location_key,
    duplicates_warning,
    existing_sizes,
    plan_of,
)
from tfr_torch.data.counting import SharedCounts, user_site
from tfr_torch.data.distributed import check_rank_world, rank_world
from tfr_torch.data.epoch_records import EpochRecords
from tfr_torch.data.indexes import resolve_indexes, seek_points_beside
from tfr_torch.data.items import ItemMaker
from tfr_torch.data.reading import GROUP_BYTES
from tfr_torch.data.resumable import ResumableState, _loaded_skipped
from tfr_torch.data.sharding import rank_quota
from tfr_torch.data.shared_cells import shared_int64
from tfr_torch.data.transport import shared_memory_available
from tfr_torch.decode.hints import check_features_argument
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.format.compression import normalize_compression
from tfr_torch.format.options import CompressionOrAuto, OnError, check_compression, check_on_error, check_positive_int
from tfr_torch.format.paths import PathLike, expand_paths
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.remote import RemoteOptions
from tfr_torch.format.seek import has_seek_points
from tfr_torch.format.shardset import class_names, find_sidecar, trusted_counts

__all__ = ["TFRecordDataset"]


def _compressed(path: str, compression: str | None) -> bool:
    if normalize_compression(compression, allow_auto=True) != "auto":  # known without opening the file
        return normalize_compression(compression) != "none"
    with RecordReader(path, compression, verify=False) as reader:
        return reader.compression != "none"


class TFRecordDataset(ResumableState, EpochRecords, ItemMaker, IterableDataset[Any]):
    """Records of TFRecord files for a DataLoader: raw bytes, decoded Examples, or decoded batches.

    - `paths`: a file, a list, a glob pattern, or fsspec URLs (s3://, gs://, ...).
    - `features`: None yields each record's bytes; a spec dict (see `parse_example`) yields decoded dicts, one
      per record, or, with `batch_size`, decoded batches (the fast path: use `DataLoader(batch_size=None)`).
    - `index`: None, "auto" (`<file>.idx` beside each file when present) or one index path per file. With
      indexes, work is split by record ranges and, for uncompressed files, `shuffle` is a global permutation of
      all records, each read by its offset.
    - `shuffle`, `seed`: per-epoch shuffling, deterministic from (seed, epoch); without indexes, a shuffled file
      order, `interleave` files read at once, and a `shuffle_buffer` of records. Call `set_epoch(epoch)`
      each epoch (it reaches workers also with `persistent_workers=True`).
    - `rank`, `world_size`: detected when not given (torch.distributed, torch_xla, RANK/WORLD_SIZE, else 0/1).
      With world_size > 1 every rank yields the same number of records (and batches): the remainder of the
      dataset is dropped, or with `pad=True` the first records are repeated to fill the last ranks; a reader
      that skipped bad records (`on_error`) repeats its own first ones to keep its share.
    - `state_dict()` / `load_state_dict()` resume mid-epoch (torchdata's StatefulDataLoader calls them).
    - `shared_memory`: in DataLoader workers, batches (dicts and lists) reach the main process through a
      shared-memory buffer each worker reuses, copied out on arrival (plain dicts, lists, bytes and tensors);
      False sends them through the DataLoader's pipe as usual.
    - `remote`: how URLs are read (`RemoteOptions`: block size, read-ahead, requests in flight, a local block
      cache shared by workers); None: its defaults.
    - `max_group_bytes`: a global shuffle over GZIP/ZLIB files (through their seek points) reads its records in
      groups of at most this many bytes, in the shuffled order: each group's records of a file are inflated in one
      pass over the intervals they touch instead of one restart per record. A reader holds at most one group's
      records (plus one run's compressed bytes); larger groups make an epoch cheaper (see the README).
    - `spill_dir`: where a reader whose share of such a shuffle is many groups may spill it instead (True: the
      system's temporary folder, TMPDIR; a path; False: never): one sequential pass over each file writes the
      share's records in the shuffled order into an unnamed temporary file, read back front to back. Chosen only
      when it inflates less than the groups would and the folder has room for the share; same order and errors.
    - `location_key`: a key under which each decoded item gets its record's location, "path:offset" (a list of
      them in a batch; the offset in the decompressed stream for GZIP/ZLIB files), as TFDS's `add_tfds_id`: to log
      or find the records of a batch. DeviceLoader names a bad image by it.
    - A TensorFlow Datasets folder (`~/tensorflow_datasets/mnist` or its version folder) with `split` in TFDS's
      syntax ("train[:10%]", "train+test"): its shards, counts and features from its metadata, decoded as TFDS
      does (images as uint8 [C, H, W]); `as_supervised=True` gives (input, target) pairs. See tfr_torch.tfds.

    >>> loader = torch.utils.data.DataLoader(  # doctest: +SKIP
    ...     TFRecordDataset("train-*.tfrecord", features=spec, batch_size=256, shuffle=True, index="auto"),
    ...     batch_size=None, num_workers=8, pin_memory=True)
    """

    def __init__(
        self,
        paths: PathLike | Sequence[PathLike],
        features: Mapping[str, Any] | SequenceFeatures | Literal["auto"] | None = None,
        *,
        index: Any = None,
        compression: CompressionOrAuto = "auto",
        shuffle: bool = False,
        seed: int = 0,
        batch_size: int | None = None,
        drop_last: bool = False,
        transform: Callable[[Any], Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        pad: bool = False,
        shuffle_buffer: int = 10_000,
        interleave: int = 4,
        verify: bool = True,
        on_error: OnError = "raise",
        shared_memory: bool = True,
        split: str | None = None,
        as_supervised: bool = False,
        remote: RemoteOptions | None = None,
        max_group_bytes: int = GROUP_BYTES,
        spill_dir: PathLike | bool = True,
        location_key: str | None = None,
    ) -> None:
        super().__init__()
        # the options first: a bad value raises here, naming it, before any file is looked at (not in a worker)
        self.compression = check_compression(compression, auto=True)
        self.on_error = check_on_error(on_error)
        self._site = user_site()  # where this dataset's warnings point, also from DataLoader workers
        self.tfds = None  # a TFDS dataset folder: its split's shards, counts and decoder (tfr_torch.tfds)
        if split is not None or as_supervised or _is_tfds(paths):
            from tfr_torch.tfds.source import open_tfds

            self.tfds = open_tfds(paths, split, features, as_supervised)
            paths, features = self.tfds.paths, self.tfds.features
        check_features_argument(features)
        self.paths = expand_paths(paths)
        sizes = existing_sizes(self.paths)
        repeated = duplicates_warning(self.paths) if self.tfds is None else None  # a TFDS split may slice a shard twice
        if repeated is not None:
            self._site.warn(repeated)
        sidecar = find_sidecar(self.paths) if self.tfds is None else None  # ShardedWriter's: spec and record counts
        if isinstance(features, str):  # "auto" (check_features_argument refused anything else)
            features = auto_features(sidecar)
        if features is not None:
            plan_of(features)  # check the spec now, in the main process
        self.location_key = check_location_key(location_key, features, as_supervised)
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be None or a positive int, got {batch_size!r}")
        if not isinstance(shuffle_buffer, int) or shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer must be a non-negative int (records), got {shuffle_buffer!r}")
        self.features = features
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.transform = transform
        self.pad = bool(pad)
        self.shuffle_buffer = shuffle_buffer
        self.interleave = check_positive_int(interleave, "interleave", "files read at once")
        self.verify = verify
        self.shared_memory = bool(shared_memory)
        if remote is not None and not isinstance(remote, RemoteOptions):
            raise TypeError(f"remote must be None or a RemoteOptions, got {type(remote).__name__}: {remote!r}")
        self.remote = remote
        if not isinstance(max_group_bytes, int) or isinstance(max_group_bytes, bool) or max_group_bytes < 1:
            raise ValueError(f"max_group_bytes must be a positive int (bytes), got {max_group_bytes!r}")
        self.max_group_bytes = max_group_bytes
        if not isinstance(spill_dir, (bool, str, os.PathLike)):
            raise TypeError(f"spill_dir must be True, False or a folder's path, got {type(spill_dir).__name__}: "
                            f"{spill_dir!r}")
        if not isinstance(spill_dir, bool) and not os.path.isdir(spill_dir):
            raise ValueError(f"spill_dir {os.fspath(spill_dir)!r} is not a folder (True: the system's temporary "
                             "folder; False: never spill)")
        self.spill_dir = spill_dir
        self._rank_world = rank_world(rank, world_size)  # checked again where the records are read
        self.rank, self.world_size = self._rank_world.rank, self._rank_world.world_size
        self.offsets = resolve_indexes(self.paths, index, compression)
        self._seeks = seek_points_beside(self.paths, index)  # where build_index wrote them beside a given index
        # the sidecar's counts only where the shard still has the size it recorded (an index's count always wins)
        counts, stale = trusted_counts(sidecar, sizes, [None if o is None else len(o) for o in self.offsets])
        dropped = False
        if self.on_error != "raise" and self.tfds is None and self.world_size > 1:
            # a file without an index is read by record numbers that count the records that read (bad ones
            # skipped), so the count that splits it between ranks must too: the sidecar's counts every record
            # written (bad ones too; one rank keeps it: its len() then counts them)
            dropped = any(c is not None and o is None for c, o in zip(counts, self.offsets))
            counts = [c if o is not None else None for c, o in zip(counts, self.offsets)]
        self.metadata: dict[str, Any] | None = sidecar.data if sidecar is not None else None
        self._shared = SharedCounts(counts)
        # every count is the sidecar's or an index's
        self._sidecar_counts = sidecar is not None and not stale and not dropped
        if stale and sidecar is not None:  # stale shards are only found against a sidecar
            shown = "; ".join(stale[:3]) + (f"; and {len(stale) - 3} more" if len(stale) > 3 else "")
            self._site.warn(f"the sidecar {sidecar.path} does not match {len(stale)} of its {len(self.paths)} shards "
                            f"(rewritten after it was written?): {shown}. Their records are counted now instead")
            self._count_now()
        if self.tfds is not None:  # dataset_info.json's counts; indexes cut to the records the split selects
            if self.on_error != "raise":  # a slice inside a shard counts skipped records too: by index positions
                self.offsets = self.tfds.positions(self.offsets, self.compression)
            self.offsets = self.tfds.windowed(self.offsets)
            self._counts = list(self.tfds.counts)
        if self.world_size > 1:
            self._ensure_counts("every rank must yield the same number of records")
        self._warn_if_empty()
        # a global shuffle reads records by offset: for indexed files, uncompressed or with seek points (else: buffered
        # shuffle)
        self._global_shuffle = self.shuffle and all(o is not None for o in self.offsets) and not any(
            _compressed(p, compression) and seek is None and not has_seek_points(p)
            for p, seek in zip(self.paths, self._seeks))
        cells = shared_int64(2)  # seen by DataLoader workers (persistent ones too); one block for many datasets
        self._epoch = cells[0]
        self._resume: dict[str, Any] | None = None
        # which pass of DataLoader workers took the loaded state (its workers' base seed; 0: none yet): shared, so
        # that the workers of a later pass, forked or pickled from this dataset that still holds it, do not
        # resume it again (see _takes_resume)
        self._resume_taken = cells[1]
        self._position = 0
        self._order_progress = None  # how far a global shuffle's pass went in its order (OrderProgress)
        self._worker = (0, 1)
        self._history: list[dict[str, Any]] = []  # the epoch's segments before the one being read (elastic.py)
        self._layout: dict[str, Any] | None = None  # the layout of the segment being read
        self._progress_epoch: int | None = None  # the epoch the three above are of (None: no pass begun)

    # ----- epochs and length -------------------------------------------------------------------------------------

    @property
    def classes(self) -> list[str] | None:
        """The class names recorded beside the shards (label i is `classes[i]`), or None."""
        tfds = getattr(self, "tfds", None)
        names = getattr(tfds, "classes", None) if tfds is not None else None
        return list(names) if names is not None else class_names(self.metadata)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds shuffling (as DistributedSampler.set_epoch); seen by persistent workers."""
        self._epoch.fill_(int(epoch))

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    def __len__(self) -> int:
        """Records (or batches, with batch_size) this rank yields per epoch. Needs the record counts (indexes, the
        sidecar, or several ranks, which count at construction); otherwise TypeError, as for any stream of
        unknown length (list() and DataLoader then do without it)."""
        if self._counts is None:
            raise TypeError("the length of this TFRecordDataset is unknown: it needs record counts, from indexes "
                            "(index='auto'; `tfr-torch index FILES` writes them) or the sidecar of ShardedWriter")
        quota = rank_quota(sum(self._counts), self.world_size, self.pad)
        if self.batch_size is None:
            return quota
        return quota // self.batch_size if self.drop_last else -(-quota // self.batch_size)

    # ----- iteration --------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        caller = sys._getframe(1)
        if self.batch_size is not None:
            _refuse_rebatching(self, caller)
        check_rank_world(self._rank_world, "TFRecordDataset")
        # a new pass: what state_dict() reports until its first item is this epoch's start (or the loaded state
        # it resumes), not the last pass's progress (torchdata's StatefulDataLoader asks before the first item)
        self._history, self._layout, self._position, self._order_progress = [], None, 0, None
        self._progress_epoch = self.epoch
        return self._iterate(_converts_only(self, caller))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for spawned DataLoader workers (torch_xla's replicas spawn theirs): checked in the replica."""
        check_rank_world(self._rank_world, "TFRecordDataset")
        return self.__dict__.copy()

    def _worker_info(self) -> Any:
        """The DataLoader worker this process is (None outside workers); a reader of one unit that a caller has
        already given to this worker (tfr_torch.hf) answers None, so the unit is read whole."""
        return get_worker_info()

    def _iterate(self, converts_only: bool = False) -> Iterator[Any]:
        info = self._worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        self._worker = (worker, workers)
        epoch = self.epoch
        skip = 0
        resume, self._resume = self._resume, None
        self._progress_epoch = epoch
        if resume is not None and not self._takes_resume():
            resume = None  # an earlier pass of DataLoader workers resumed it: this one reads its epoch whole
        self._history, self._layout, self._order_progress = [], None, None
        went: int | None = None  # positions of a global shuffle's order the state says this reader went past
        skipped: list[int] | None = None  # the bad records the state says this reader skipped (file runs)
        if resume is not None and resume["epoch"] == epoch and resume["version"] == 1:
            if (resume["worker"], resume["num_workers"]) == (worker, workers):
                skip = int(resume["yielded"])
        elif resume is not None and resume["epoch"] == epoch:
            self._history, self._layout, skip, went = self._resume_point(resume, worker, workers)
            skipped = _loaded_skipped(resume, self._history, self.rank, worker)
        self._position = skip
        if self._history:
            blocks = self._resumed(epoch, self._history, self._layout, worker)
        else:
            if self._layout is not None and self._layout["split"] == "ranges" and self._counts is None:
                # the state's epoch was split by record ranges (its job had counted these files): read the same
                # ranges, not whole files, or the items it says were yielded would be other records
                self._ensure_counts("resuming an epoch that was split by record ranges")
            self._layout = self._layout_for(workers)
            start = self._start_of(went, skip, worker, workers, skipped)
            if start is not None:
                blocks = self._records(epoch, worker, workers, start, skip * (self.batch_size or 1),
                                       _below(skipped, self._share_bounds(worker, workers)[0] + start))
                skip = 0
            else:
                blocks = self._records(epoch, worker, workers)
        plan = plan_of(self.features) if self.features is not None else None  # once per epoch
        wrap = info is not None and self.shared_memory and shared_memory_available()
        yield from self._items(blocks, plan, skip, wrap, converts_only, pipe=info is not None and not wrap)

    def _start_of(self, went: int | None, skip: int, worker: int, workers: int,
                  skipped: list[int] | None = None) -> int | None:
        """Where this resumed reader starts in its order, which it went `went` positions into (its state says,
        checked against its share) yielding `skip` items: there, for a global shuffle or file order split by record
        ranges (orders of positions; bad records skipped before the state was taken counted: see OrderProgress).
        File order whose state names the bad records it skipped (`skipped`, on_error other than "raise") went past
        its yielded records and the skipped ones among and right after them. None (the share is read again, the
        yielded items dropped): a shuffle buffer (its contents are not saved), a state that does not say, or a
        reader of several ranks past every position of its share yet short of it (topping it up with repeats,
        which go on where they were only when the share is read again)."""
        assert self._layout is not None
        ordered = not self.shuffle and self._layout["split"] == "ranges"
        if not skip or not (self._global_shuffle or ordered):
            return None
        share, done = self._share_size(worker, workers), skip * (self.batch_size or 1)
        if went is None and ordered and skipped is not None:
            went = _went_past(skipped, self._share_bounds(worker, workers)[0], done, share)
        if went is None:
            return None
        went = self._checked_ahead(went, done, share, self.batch_size or 1, worker)
        return None if went >= share > done and self.world_size > 1 else went  # (one rank: nothing to top up)


def _went_past(skipped: Sequence[int], start: int, done: int, share: int) -> int:
    """Positions of a share of file order (`share` records: `start`, `start` + 1, ... of the epoch) gone past once
    `done` records of it were yielded and the bad records `skipped` (record numbers) skipped: the yielded ones, the
    skipped ones among them and those right after them (read, and reported, already); the whole share once more
    were yielded than it has good records (a reader of several ranks topping its share up with repeats)."""
    went = done
    for position in sorted({int(n) - start for n in skipped if start <= int(n) < start + share}):
        if position > went:
            break
        went += 1
    return min(went, share)


def _below(skipped: list[int] | None, stop: int) -> list[int]:
    """The record numbers of `skipped` before record `stop` (those a resumed reader starting there went past)."""
    return sorted(int(n) for n in skipped if int(n) < stop) if skipped else []


def _refuse_rebatching(dataset: TFRecordDataset, caller: Any) -> None:
    """A DataLoader that batches (its default batch_size=1) would stack this dataset's batches into a new leading
    dimension: raise, saying to pass batch_size=None. `caller` is the frame that called iter(): DataLoader's
    fetcher, in the main process or a worker."""
    fetcher = _fetcher_of(caller)
    if getattr(fetcher, "dataset", None) is dataset and getattr(fetcher, "auto_collation", False):
        raise ValueError(f"this TFRecordDataset yields whole batches (batch_size={dataset.batch_size}) but the "
                         "DataLoader batches them again (its batch_size defaults to 1), adding a leading dimension: "
                         "pass DataLoader(dataset, batch_size=None), or leave batch_size out of the dataset and let "
                         "the DataLoader batch records")


def _fetcher_of(caller: Any) -> Any:
    """The object whose `__init__` is `caller` (a DataLoader's fetcher calls iter() there), or None. Only such a
    frame's locals are read: before Python 3.13, reading a frame's `f_locals` leaves a snapshot of them on the frame,
    which would keep a caller's objects (this dataset among them) alive after the caller dropped them."""
    if caller is None or caller.f_code.co_name != "__init__":
        return None
    return caller.f_locals.get("self")


def _converts_only(dataset: TFRecordDataset, caller: Any) -> bool:
    """Whether `caller`, the frame that called iter(), is a DataLoader worker's fetcher that passes each item this
    dataset yields to torch's `default_convert` and nothing else (DataLoader(batch_size=None), no collate_fn)."""
    fetcher = _fetcher_of(caller)
    return (getattr(fetcher, "dataset", None) is dataset and getattr(fetcher, "auto_collation", True) is False
            and getattr(fetcher, "collate_fn", None) is default_convert)

