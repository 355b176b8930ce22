"""TFRecordDataset: an IterableDataset that feeds DataLoader workers, DDP ranks and TPU replicas every record
exactly once per epoch (or an equal-sized subset per rank), shuffled, and resumable mid-epoch."""

from __future__ import annotations

import bisect
import itertools
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, cast, overload

import numpy as np
import torch
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
from tfr_torch.data.elastic import (
    epoch_sequence,
    history_digest,
    reader_order,
    reader_streams,
    remaining,
    segment_rng,
    segment_sequence,
)
from tfr_torch.data.distributed import check_rank_world, rank_world
from tfr_torch.data.indexes import resolve_indexes, seek_points_beside
from tfr_torch.data.resumable import ResumableState
from tfr_torch.data.reading import (
    GROUP_BYTES,
    Block,
    Source,
    blocks_of,
    drop,
    flatten,
    interleave,
    iter_random,
    iter_run,
    located,
    opening_ahead,
    regroup,
    shuffle_buffer,
)
from tfr_torch.data.transport import Batch, lending_slabs, shared_memory_available, wrap_for_transport
from tfr_torch.data.sharding import (
    Run,
    epoch_rng,
    file_order,
    files_for_worker,
    global_block,
    rank_quota,
    runs_of_block,
    split_sizes,
    worker_block,
)
from tfr_torch.decode.plan import ExamplePlan
from tfr_torch.decode.hints import check_features_argument
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.format.compression import normalize_compression
from tfr_torch.format.index import scan_index  # noqa: F401  (a test patches scan_index here)
from tfr_torch.format.location import RecordLocation
from tfr_torch.format.options import CompressionOrAuto, OnError, check_compression, check_on_error, check_positive_int
from tfr_torch.format.paths import PathLike, expand_paths
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.remote import RemoteOptions
from tfr_torch.format.seek import has_seek_points
from tfr_torch.format.shardset import class_names, find_sidecar, trusted_counts

__all__ = ["TFRecordDataset"]

_ROW_CHUNK = 32  # records decoded together in per-record mode (see TFRecordDataset._rows)


def _compressed(path: str, compression: str | None) -> bool:
    if normalize_compression(compression, allow_auto=True) != "auto":  # known without opening the file
        return normalize_compression(compression) != "none"
    with RecordReader(path, compression, verify=False) as reader:
        return reader.compression != "none"


class TFRecordDataset(ResumableState, IterableDataset[Any]):
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
      dataset is dropped, or with `pad=True` the first records are repeated to fill the last ranks.
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
        self._rank_world = rank_world(rank, world_size)  # checked again where the records are read
        self.rank, self.world_size = self._rank_world.rank, self._rank_world.world_size
        self.offsets = resolve_indexes(self.paths, index, compression)
        self._seeks = seek_points_beside(self.paths, index)  # where build_index wrote them beside a given index
        # the sidecar's counts only where the shard still has the size it recorded (an index's count always wins)
        counts, stale = trusted_counts(sidecar, sizes, [None if o is None else len(o) for o in self.offsets])
        self.metadata: dict[str, Any] | None = sidecar.data if sidecar is not None else None
        self._shared = SharedCounts(counts)
        self._sidecar_counts = sidecar is not None and not stale  # every count is the sidecar's or an index's
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
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self._resume: dict[str, Any] | None = None
        # which pass of DataLoader workers took the loaded state (its workers' base seed; 0: none yet): shared, so
        # that the workers of a later pass, forked or pickled from this dataset that still holds it, do not
        # resume it again (see _takes_resume)
        self._resume_taken = torch.zeros((), dtype=torch.int64).share_memory_()
        self._position = 0
        self._worker = (0, 1)
        self._history: list[dict[str, Any]] = []  # the epoch's segments before the one being read (elastic.py)
        self._layout: dict[str, Any] | None = None  # the layout of the segment being read
        self._progress_epoch: int | None = None  # the epoch the three above are of (None: no pass begun)

    # ----- counts and epochs -------------------------------------------------------------------------------------

    @property
    def _counts(self) -> list[int] | None:
        """Every file's record count (from indexes, a checked sidecar, or counting), or None while any is unknown.
        Shared with DataLoader workers: counts taken in a worker reach the main process and later epochs."""
        return self._shared.known()

    @_counts.setter
    def _counts(self, counts: Sequence[int] | None) -> None:
        self._shared = SharedCounts([None] * len(self.paths) if counts is None else list(counts))

    def _count_file(self, f: int) -> int:
        """Records of file `f` as reading yields them (under on_error="skip" or a callable, the ones that survive).
        A bad record is left out silently here: the warning, or the call of the `on_error` callable, comes when a
        reader reads it, once, not also when it is counted."""
        verify = self.verify if self.on_error != "raise" else False  # reading raises on a bad data CRC anyway
        policy: OnError = "raise" if self.on_error == "raise" else _ignore
        with RecordReader(self.paths[f], self.compression, verify, on_error=policy) as reader:
            return sum(len(lengths) for lengths, _ in reader.lengths())  # framed, never copied out

    def _count_now(self) -> list[int]:
        return self._shared.count_here(self._count_file)

    def _ensure_counts(self, why: str) -> list[int]:
        """Count the files of unknown count now, in this process, with one warning at the user's line."""
        counts = self._counts
        if counts is None:
            unknown = self._shared.unknown()
            if self._shared.first(0):
                self._site.warn(f"counting the records of {len(unknown)} file(s) without an index ({why}): this "
                                "reads them once (the counts are kept for every epoch); write indexes (`tfr-torch "
                                "index FILES`) and pass index='auto' to skip it")
            counts = self._count_now()
        return counts

    def _warn_if_empty(self) -> None:
        """Warn (once, at the user's line) when this rank will yield nothing in an epoch."""
        counts = self._counts
        if counts is None:
            return
        total = sum(counts)
        quota = rank_quota(total, self.world_size, self.pad)
        if total == 0:
            self._site.warn(f"the {len(self.paths)} file(s) of this dataset hold no records: it yields nothing")
        elif quota == 0:
            self._site.warn(f"every rank yields nothing: {total} records for world_size={self.world_size} leaves "
                            f"0 per rank (pass pad=True to repeat records so that each rank gets one)")
        elif self.batch_size is not None and self.drop_last and quota < self.batch_size:
            self._site.warn(f"this rank yields no batch: {quota} records per rank for batch_size={self.batch_size} "
                            "with drop_last=True (use a smaller batch_size or drop_last=False)")

    def _warn_idle_workers(self, quota: int, workers: int, multiple: int) -> None:
        """In DataLoader worker 0: warn once (for every worker and epoch) when some workers get nothing."""
        if workers < 2 or not self._shared.first(1):
            return
        sizes = split_sizes(quota, workers, multiple)
        idle = [w for w, size in enumerate(sizes) if size == 0]
        if not idle or quota == 0:
            return
        unit = f"{-(-quota // multiple)} batches of {multiple}" if multiple > 1 else f"{quota} records"
        busy = workers - len(idle)
        self._site.warn(f"DataLoader workers {', '.join(map(str, idle))} of {workers} get nothing to read: this rank "
                        f"has {unit} for {workers} workers (num_workers={busy} would do the same work)")

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
        self._history, self._layout, self._position = [], None, 0
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
        self._history, self._layout = [], None
        if resume is not None and resume["epoch"] == epoch and resume["version"] == 1:
            if (resume["worker"], resume["num_workers"]) == (worker, workers):
                skip = int(resume["yielded"])
        elif resume is not None and resume["epoch"] == epoch:
            self._history, self._layout, skip = self._resume_point(resume, worker, workers)
        self._position = skip
        if self._history:
            blocks = self._resumed(epoch, self._history, self._layout, worker)
        else:
            if self._layout is not None and self._layout["split"] == "ranges" and self._counts is None:
                # the state's epoch was split by record ranges (its job had counted these files): read the same
                # ranges, not whole files, or the items it says were yielded would be other records
                self._ensure_counts("resuming an epoch that was split by record ranges")
            self._layout = self._layout_for(workers)
            blocks = self._records(epoch, worker, workers)
        plan = plan_of(self.features) if self.features is not None else None  # once per epoch
        transform = self.transform
        wrap = info is not None and self.shared_memory and shared_memory_available()
        parcel = converts_only and transform is None  # see transport.Parcel
        if self.batch_size is None:
            blocks = drop(blocks, skip)
            # rows that travel as a Batch are made one (wrap_for_transport then passes them as they are)
            marked = wrap and transform is None and not parcel and type(plan) is ExamplePlan
            items: Iterator[Any] = _each(blocks) if plan is None else self._rows(blocks, plan, marked)
        else:
            marked = False
            # a Parcel goes to the slab untouched: its strings can stay in the records until then (RecordSpans)
            spans = wrap and parcel and isinstance(plan, ExamplePlan)
            items = self._batches(drop(blocks, skip * self.batch_size), plan, spans)
        if transform is None and (marked or not wrap):  # nothing to do to an item but count it
            for item in items:
                self._position += 1
                yield item
            return
        for item in items:
            if transform is not None:
                _APPLYING.dataset = self  # see applying()
                if wrap:  # a dict it returns travels as a Batch: its slab tensors (slab_tensor) go without a copy
                    with lending_slabs():
                        item = transform(item)
                else:
                    item = transform(item)
                _APPLYING.dataset = _APPLYING.names = None
            if wrap:
                item = wrap_for_transport(item, parcel)
            self._position += 1
            yield item

    def _rows(self, blocks: Iterator[Block], plan: Any, marked: bool = False) -> Iterator[Any]:
        """One decoded dict per record, decoded _ROW_CHUNK records at a time (see ExamplePlan.iter_rows); `marked`:
        each a transport Batch (an ExamplePlan's rows only)."""
        key = self.location_key
        options = {"row_type": Batch} if marked else {}
        if key is None and type(plan) is ExamplePlan:  # no Python step per row here (ExamplePlan.rows)
            return itertools.chain.from_iterable(
                plan.rows(flatten(group), _Names(group), **options) for group in regroup(blocks, _ROW_CHUNK))
        return self._rows_named(blocks, plan, key, options)

    def _rows_named(self, blocks: Iterator[Block], plan: Any, key: str | None, options: dict[str, Any]
                    ) -> Iterator[Any]:
        """_rows for other plans, and rows that get their location under `key`."""
        for group in regroup(blocks, _ROW_CHUNK):
            rows = plan.iter_rows(flatten(group), _Names(group), **options)
            if key is None:
                yield from rows
                continue
            for row, where in zip(rows, _Names(group).texts()):
                row[key] = where
                yield row

    def _batches(self, blocks: Iterator[Block], plan: Any, spans: bool = False) -> Iterator[Any]:
        batch_size = self.batch_size
        assert batch_size is not None  # only a dataset with a batch_size batches
        for group in regroup(blocks, batch_size):
            records = flatten(group)
            if len(records) < batch_size and self.drop_last:
                return
            names = _Names(group)
            batch = records if plan is None else plan.parse(records, names, spans=True) if spans else plan.parse(
                records, names)
            if self.location_key is not None:  # decoded (check_location_key): a dict
                cast("dict[str, Any]", batch)[self.location_key] = names.texts()
            if self.transform is not None:
                _APPLYING.names = names  # for the transform about to get this batch (see applying())
            yield batch

    def _resumed(self, epoch: int, history: list[dict[str, Any]], layout: Any, worker: int) -> Iterator[Block]:
        """This reader's records in a segment after the first: what the segments of `history` left, split for
        `layout` (see elastic.py), read by offset (a global shuffle) or as file runs that skip what was yielded."""
        counts = self._ensure_counts("resuming an epoch under another layout needs the record counts")
        order = self._order_info()
        s_records = epoch_sequence(counts, self._global_shuffle, self.shuffle, self.seed, epoch,
                                   history[0]["world_size"], self.pad)
        left, _ = remaining(s_records, counts, order, epoch, history, self.pad)
        seq = segment_sequence(left, layout["world_size"], self.pad)
        streams = reader_streams(seq, s_records, counts, layout, self.rank, worker)
        source = self._source()
        if layout["split"] == "global":
            return iter_random(source, s_records[streams[0]] if streams else np.zeros(0, np.int64), counts)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

        def read(positions: np.ndarray) -> Iterator[Block]:
            records = s_records[positions]
            f = int(np.searchsorted(starts[1:], records[0], side="right"))
            index = records - starts[f]
            blocks = iter_run(source, self._in_file(Run(f, int(index[0]), int(index[-1]) + 1)))
            if len(index) == index[-1] - index[0] + 1:
                return blocks
            keep = np.zeros(int(index[-1] - index[0]) + 1, dtype=bool)
            keep[index - index[0]] = True
            return blocks_of(item for item, wanted in zip(located(blocks), keep.tolist()) if wanted)

        if not self.shuffle:
            return _chain(read(p) for p in streams)
        rng = segment_rng(self.seed, epoch, len(history), history_digest(history), layout, self.rank, worker)
        return blocks_of(reader_order([located(read(p)) for p in streams], True, self.interleave,
                                      self.shuffle_buffer, rng))

    def _in_file(self, run: Run) -> Run:
        """A TFDS split slice starts inside a shard: without an index, its record numbers count from the file's
        start."""
        skip = self.tfds.skips[run.file] if self.tfds is not None and self.offsets[run.file] is None else 0
        return Run(run.file, run.start + skip, run.stop + skip) if skip else run

    def _source(self) -> Source:
        # a file read without an index must hold exactly the records counted for it (a stale count would make
        # ranks unequal or leave records unread): `whole` says a count is the file's total: every count but a
        # TFDS slice's, and a slice's too when it takes the whole shard (more records there than dataset_info.json
        # says would else be dropped unseen)
        if self.tfds is None:
            whole = [True] * len(self.paths)
        else:
            whole = [skip == 0 and take == expected
                     for skip, take, expected in zip(self.tfds.skips, self.tfds.counts, self.tfds.expected)]
        return Source(self.paths, self.offsets, self.compression, self.verify, self.on_error,
                      self._counts, whole, self._count_origin(), self.remote, self.max_group_bytes, self._seeks)

    def _count_origin(self) -> str:
        if self._sidecar_counts and self.metadata is not None:
            return "the count in the sidecar"
        return "the count taken when the dataset was built" if self.tfds is None else "the split's record count"

    def _split_counts(self, worker: int, workers: int, readers: int) -> list[int]:
        """Counts for splitting fewer files than readers by record ranges: in DataLoader workers, counted once
        for the dataset by all workers together (see data/counting.py); in one process, here."""
        if workers < 2 or self._worker_info() is None:
            return self._ensure_counts(_split_reason(len(self.paths), readers))
        return self._shared.count_shared(self._count_file, worker, workers)

    def _warn_shared_count(self, worker: int, workers: int, readers: int) -> None:
        """In DataLoader worker 0, once for the dataset: the workers count the files that had no count as built.
        Said even when the other workers have already counted them all (worker 0 may start last)."""
        if (worker == 0 and workers >= 2 and len(self.paths) < readers and self._shared._initial
                and self._worker_info() is not None and self._shared.first(0)):
            unknown = len(self._shared._initial)
            self._site.warn(f"counting the records of {unknown} file(s) without an index "
                            f"({_split_reason(len(self.paths), readers)}): the DataLoader workers count them together "
                            "once, and every later epoch and len() use the counts; write indexes (`tfr-torch index "
                            "FILES`) and pass index='auto' to skip it")

    def _records(self, epoch: int, worker: int, workers: int) -> Iterator[Block]:
        """This reader's records for the epoch, in order (before batching), in blocks."""
        source = self._source()
        multiple = self.batch_size or 1
        if self._global_shuffle:  # a true global shuffle: a seeded permutation, each record read by offset
            counts = self._counts
            assert counts is not None  # every file is indexed, so every count is known
            quota = rank_quota(sum(counts), self.world_size, self.pad)
            a, b = worker_block(quota, self.rank, worker, workers, multiple)
            if worker == 0:
                self._warn_idle_workers(quota, workers, multiple)
            return iter_random(source, global_block(counts, self.seed, epoch, a, b), counts)
        order = file_order(len(self.paths), self.shuffle, self.seed, epoch)
        readers = workers * self.world_size
        self._warn_shared_count(worker, workers, readers)
        if self._counts is None and len(self.paths) < readers:
            self._split_counts(worker, workers, readers)
        if self._counts is None:  # one rank, enough files, counts unknown: whole files per worker
            known = [len(o) if o is not None else 1 << 62 for o in self.offsets]  # read unknown files to their end
            streams = (iter_run(source, Run(f, 0, known[f])) for f in files_for_worker(order, worker, workers))
        else:
            quota = rank_quota(sum(self._counts), self.world_size, self.pad)
            a, b = worker_block(quota, self.rank, worker, workers, multiple)
            if worker == 0:
                self._warn_idle_workers(quota, workers, multiple)
            runs = opening_ahead(source, (self._in_file(run) for run in runs_of_block(self._counts, order, a, b)),
                                 self.interleave if self.shuffle else 1)
            streams = (iter_run(source, run) for run in runs)
        if not self.shuffle:
            return _chain(streams)
        rng = epoch_rng(self.seed, epoch, 3 + worker + workers * self.rank)
        return blocks_of(shuffle_buffer(interleave((located(s) for s in streams), self.interleave),
                                        self.shuffle_buffer, rng))


def _refuse_rebatching(dataset: TFRecordDataset, caller: Any) -> None:
    """A DataLoader that batches (its default batch_size=1) would stack this dataset's batches into a new leading
    dimension: raise, saying to pass batch_size=None. `caller` is the frame that called iter(): DataLoader's
    fetcher, in the main process or a worker."""
    fetcher = caller.f_locals.get("self") if caller is not None else None
    if getattr(fetcher, "dataset", None) is dataset and getattr(fetcher, "auto_collation", False):
        raise ValueError(f"this TFRecordDataset yields whole batches (batch_size={dataset.batch_size}) but the "
                         "DataLoader batches them again (its batch_size defaults to 1), adding a leading dimension: "
                         "pass DataLoader(dataset, batch_size=None), or leave batch_size out of the dataset and let "
                         "the DataLoader batch records")


def _converts_only(dataset: TFRecordDataset, caller: Any) -> bool:
    """Whether `caller`, the frame that called iter(), is a DataLoader worker's fetcher that passes each item this
    dataset yields to torch's `default_convert` and nothing else (DataLoader(batch_size=None), no collate_fn)."""
    fetcher = caller.f_locals.get("self") if caller is not None else None
    return (getattr(fetcher, "dataset", None) is dataset and getattr(fetcher, "auto_collation", True) is False
            and getattr(fetcher, "collate_fn", None) is default_convert)


_APPLYING = threading.local()


def applying() -> tuple[Any, Sequence[RecordLocation] | None]:
    """What a `transform` running in this thread was given by: (the TFRecordDataset applying it, the locations of
    the records of the batch it got, None for a single record), or (None, None) outside a dataset's transform. A
    transform keys its random choices by that dataset's `epoch` and `rank`, and names a bad record by its file and
    offset (DecodeImages), in the main process as in DataLoader workers, under any wrapper (MixedDataset,
    CachedDataset) that `get_worker_info().dataset` would name instead."""
    return getattr(_APPLYING, "dataset", None), getattr(_APPLYING, "names", None)


class _Names(Sequence[RecordLocation]):
    """The RecordLocation of each record of a batch (its example name), made only when an error message needs one."""

    def __init__(self, group: list[Block]) -> None:
        self._group = group
        self._ends = list(itertools.accumulate(len(block) for block in group))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def texts(self) -> list[str]:
        """Every record's location as "path:offset" (what `location_key` puts in the items)."""
        return [text for block in self._group for text in block.texts()]

    @overload
    def __getitem__(self, i: int) -> RecordLocation: ...

    @overload
    def __getitem__(self, i: slice) -> list[RecordLocation]: ...

    def __getitem__(self, i: int | slice) -> RecordLocation | list[RecordLocation]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"record {i} of a batch of {n}")
        i %= n
        b = bisect.bisect_right(self._ends, i)
        return self._group[b].location(i - (self._ends[b - 1] if b else 0))


def _ignore(err: Exception) -> None:
    """The on_error policy of counting: a bad record is not counted, and said nothing of (reading says it)."""


def _chain(streams: Iterable[Iterable[Block]]) -> Iterator[Block]:
    for stream in streams:
        yield from stream


def _each(blocks: Iterator[Block]) -> Iterator[bytes]:
    for block in blocks:
        yield from block.records


def _split_reason(files: int, readers: int) -> str:
    return f"{files} file(s) for {readers} readers (ranks x DataLoader workers): files are split by record ranges"
