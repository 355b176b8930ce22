"""IndexedTFRecordDataset: map-style random access to records by global number, through index files."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, cast

import numpy as np
from torch.utils.data import Dataset, get_worker_info

from tfr_torch.data.counting import user_site
from tfr_torch.data.arguments import (
    _is_tfds,
    auto_features,
    check_location_key,
    duplicates_warning,
    existing_sizes,
    plan_of,
)
from tfr_torch.data.indexes import resolve_indexes, seek_points_beside
from tfr_torch.data.open_files import OpenFiles
from tfr_torch.data.pipe import PipeBatch
from tfr_torch.decode.hints import check_features_argument
from tfr_torch.decode.plan import ExamplePlan
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.data.transport import Batch, shared_memory_available
from tfr_torch.errors import TFRecordError
from tfr_torch.format.index import scan_index
from tfr_torch.format.location import FileLocations, RecordLocation
from tfr_torch.format.paths import PathLike, expand_paths
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.shardset import class_names, find_sidecar

__all__ = ["IndexedTFRecordDataset"]


class IndexedTFRecordDataset(Dataset[Any]):
    """Records of uncompressed TFRecord files by global number (file after file), for any sampler:
    `DistributedSampler`, `random_split`, `Subset`, weighted sampling...

    Each access reads one record by its offset (one open handle per file, opened lazily in each worker; the
    files are never read whole). `index="auto"` uses `<file>.idx` beside each file and scans files that have
    none (with a warning); a list gives one index path per file. `features=None` returns the record's bytes,
    a spec dict the decoded Example (as parse_single_example), "auto" the spec in ShardedWriter's sidecar;
    `transform` is applied to what is returned. `metadata` is that sidecar (or None), `classes` its class names.
    In DataLoader workers, decoded dicts are marked so that the batches the default collate makes of them reach
    the main process through shared memory (see TFRecordDataset's `shared_memory`; False turns it off).
    `location_key`: a key under which each decoded item gets its record's location, "path:offset" (as
    TFRecordDataset's). Items may be read from several threads at once (a thread pool, torchdata's ParallelMapper
    with method="thread"): they share one handle per file.

    >>> ds = IndexedTFRecordDataset("train-*.tfrecord", features=spec)  # doctest: +SKIP
    >>> sampler = torch.utils.data.DistributedSampler(ds)                 # doctest: +SKIP
    """

    def __init__(self, paths: PathLike | Sequence[PathLike],
                 features: Mapping[str, Any] | SequenceFeatures | Literal["auto"] | None = None,
                 index: Any = "auto", *, transform: Callable[[Any], Any] | None = None, verify: bool = True,
                 shared_memory: bool = True, split: str | None = None, as_supervised: bool = False,
                 location_key: str | None = None) -> None:
        self.tfds = None  # a TFDS dataset folder and split (see TFRecordDataset)
        if split is not None or as_supervised or _is_tfds(paths):
            from tfr_torch.tfds.source import open_tfds

            self.tfds = open_tfds(paths, split, features, as_supervised)
            paths, features = self.tfds.paths, self.tfds.features
        check_features_argument(features)
        self.paths = expand_paths(paths)
        existing_sizes(self.paths)  # every missing file named now, not at the first access in a worker
        repeated = duplicates_warning(self.paths) if self.tfds is None else None
        if repeated is not None:
            user_site().warn(repeated)
        sidecar = find_sidecar(self.paths) if self.tfds is None else None
        self.metadata: dict[str, Any] | None = sidecar.data if sidecar is not None else None
        if isinstance(features, str):  # "auto": the sidecar's spec
            features = auto_features(sidecar)
        self.features = features
        self._plan = plan_of(features) if features is not None else None  # checks the spec now
        self.location_key = check_location_key(location_key, features, as_supervised)
        self.transform = transform
        self.verify = verify
        self.shared_memory = bool(shared_memory)
        offsets = resolve_indexes(self.paths, index if index is not None else "auto", "auto")
        self._seeks = seek_points_beside(self.paths, index)
        missing = [p for p, o in zip(self.paths, offsets) if o is None]
        if missing:
            user_site().warn(f"{len(missing)} file(s) have no index ({missing[0]}...): scanning them now; write "
                             "indexes with `tfr-torch index FILES` to skip this")
            offsets = [o if o is not None else scan_index(p) for p, o in zip(self.paths, offsets)]
        if self.tfds is not None:
            offsets = self.tfds.windowed(offsets)
        self.offsets = cast("list[np.ndarray]", offsets)  # every file has its index by now (scanned above)
        self._ends = np.cumsum([len(o) for o in self.offsets]).astype(np.int64)
        self._files = self._open_files()
        self._pid = os.getpid()
        for path, seek in zip(self.paths, self._seeks):  # refuse compressed files now, not in a worker
            RecordFile(path, seek=seek).close()

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def classes(self) -> list[str] | None:
        """The class names recorded beside the shards (label i is `classes[i]`), or None."""
        names = getattr(self.tfds, "classes", None) if self.tfds is not None else None
        return list(names) if names is not None else class_names(self.metadata)

    def locate(self, index: int) -> tuple[str, int, int]:
        """(path, byte offset, framed size) of record `index`."""
        f, offset, size = self._where(index)
        return self.paths[f], offset, size

    def _where(self, index: int) -> tuple[int, int, int]:
        n = len(self)
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise TypeError(f"record numbers are ints, got {type(index).__name__}")
        asked = index
        index = int(index)  # a numpy int8 -1 plus n would overflow its own type
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"record {asked} is out of range: the dataset has {n} records")
        f = int(np.searchsorted(self._ends, index, side="right"))
        i = int(index) - (int(self._ends[f - 1]) if f else 0)
        offset, size = (int(v) for v in self.offsets[f][i])
        return f, offset, size

    def _read(self, index: int) -> tuple[bytes, RecordLocation]:
        """Record `index` and its location (its example name)."""
        f, offset, size = self._where(index)
        with self._handle(f) as handle:
            return handle.read(offset, size), RecordLocation(self.paths[f], offset)

    def _open_files(self) -> OpenFiles[RecordFile]:
        """The files' handles, opened when first read, at most half the descriptor limit of them open at once
        (data/open_files.py: a DataLoader worker's random reads reach every file of a dataset of thousands)."""
        return OpenFiles(lambda f: RecordFile(self.paths[f], verify=self.verify, seek=self._seeks[f]))

    @contextlib.contextmanager
    def _handle(self, f: int) -> Iterator[RecordFile]:
        """File `f`'s handle, kept open while the block reads it (other threads may be opening files)."""
        if self._pid != os.getpid():  # forked into a DataLoader worker: never share the parent's file handles
            self._files, self._pid = self._open_files(), os.getpid()
        files = self._files
        handle = files.pin(f)
        try:
            yield handle
        finally:
            files.unpin(f)

    def _read_many(self, indices: list[int]) -> tuple[list[bytes], Sequence[RecordLocation]]:
        """Records `indices` (in order) and their locations, each file's read together (RecordFile.read_many).
        Any index that is not a valid record number, or any record that does not read, sends the whole call to
        `_read` index by index, which raises what the first bad one gives alone."""
        n = len(self)
        whole = set(map(type, indices)) <= {int} or all(
            type(i) is int or (isinstance(i, np.integer) and not isinstance(i, np.bool_)) for i in indices)
        try:
            wanted = np.fromiter(indices, dtype=np.int64, count=len(indices)) if whole else None
        except OverflowError:  # an index past int64 (a numpy uint64): out of range, as `_read` says
            wanted = None
        if wanted is None or not len(wanted) or wanted.min() < -n or wanted.max() >= n:
            read = [self._read(i) for i in indices]
            return [data for data, _ in read], [name for _, name in read]
        if wanted.min() < 0:
            wanted = np.where(wanted < 0, wanted + n, wanted)
        files = np.searchsorted(self._ends, wanted, side="right")
        try:
            first = int(files[0])
            if (files == first).all():  # a batch from one file (the common case): one read, names made when asked
                table = self.offsets[first][wanted - (int(self._ends[first - 1]) if first else 0)]
                offsets = table[:, 0]
                with self._handle(first) as handle:
                    return handle.read_many(offsets, table[:, 1]), FileLocations(self.paths[first], offsets)
            records: list[bytes] = [b""] * len(indices)
            names: list[RecordLocation] = [cast(RecordLocation, None)] * len(indices)
            for f in np.unique(files).tolist():
                at = np.flatnonzero(files == f)
                local = wanted[at] - (int(self._ends[f - 1]) if f else 0)
                table = self.offsets[f][local]
                path = self.paths[f]
                with self._handle(f) as handle:
                    got = handle.read_many(table[:, 0], table[:, 1])
                for k, data, offset in zip(at.tolist(), got, table[:, 0].tolist()):
                    records[k], names[k] = data, RecordLocation(path, offset)
        except TFRecordError:
            read = [self._read(i) for i in indices]  # the error of the first bad record in the caller's order
            return [data for data, _ in read], [name for _, name in read]
        return records, names

    def _plan_here(self) -> Any:
        if self._plan is None:
            self._plan = plan_of(self.features)
        return self._plan

    def _finish(self, item: Any, mark: type[dict[Any, Any]] | None) -> Any:
        if self.transform is not None:
            item = self.transform(item)
        if mark is not None and type(item) is dict:
            # in a DataLoader worker: collate functions keep a mapping's type (default_collate does), so the batch
            # goes through shared memory (Batch), or through the pipe with its sparse tensors sent as torch sends
            # dense ones (PipeBatch: no warning from torch's rebuild of each)
            item = mark(item)
        return item

    def _mark(self) -> type[dict[Any, Any]] | None:
        """How a dict item leaves this DataLoader worker: Batch (shared memory), PipeBatch (the pipe), or None
        outside workers."""
        if get_worker_info() is None:
            return None
        return Batch if self.shared_memory and shared_memory_available() else PipeBatch

    def __getitem__(self, index: int) -> Any:
        data, name = self._read(index)
        item = data if self.features is None else self._plan_here().parse([data], [name], single=True)
        if self.location_key is not None:  # decoded (check_location_key): a dict
            cast("dict[str, Any]", item)[self.location_key] = str(name)
        return self._finish(item, self._mark())

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """Several items at once (what DataLoader asks for when it batches), each equal to `self[i]`; the records are
        decoded together where the spec allows (see ExamplePlan.iter_rows)."""
        indices = list(indices)
        if len(indices) < 2:
            return [self[i] for i in indices]
        records, names = self._read_many(indices)  # a GZIP/ZLIB file's records inflated together (read_many)
        mark = self._mark()
        if self.features is None:
            return records if self.transform is None else [self._finish(data, mark) for data in records]
        plan = self._plan_here()
        key = self.location_key
        if self.transform is None and type(plan) is ExamplePlan:  # rows made as what _finish would make of them
            rows = list(plan.rows(records, names, row_type=mark or dict))
            if key is not None:
                for row, name in zip(rows, names):
                    row[key] = str(name)
            return rows
        rows = plan.iter_rows(records, names)
        if key is None:
            return [self._finish(row, mark) for row in rows]
        out = []
        for row, name in zip(rows, names):
            row[key] = str(name)
            out.append(self._finish(row, mark))
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_files"] = None  # open handles stay in the process that opened them (a lock does not pickle)
        state["_plan"] = None  # compiled again where it is used
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._files = self._open_files()

    def close(self) -> None:
        self._files.close()
