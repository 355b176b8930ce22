"""TFRecord files as a Ray Data datasource, read and decoded by tfr_torch (no TensorFlow in any task)."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.errors import SkippedRecordWarning, TFRecordError
from tfr_torch.format.compression import compression_from_name
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.index import index_path_for, read_index
from tfr_torch.format.location import FileLocations
from tfr_torch.format.paths import PathLike, as_path, exists, expand_paths, file_size, is_url
from tfr_torch.format.options import CompressionOrAuto, OnError, check_on_error, compression_name
from tfr_torch.format.reader import RecordReader
from tfr_torch.ray.planning import FileInfo, Piece, group_pieces, plan_pieces

if TYPE_CHECKING:
    from typing_extensions import TypeGuard  # typing.TypeGuard is Python 3.10+

__all__ = ["TFRecordDatasource", "read_tfrecords"]

_BATCH_ROWS = 4096  # records decoded into one block, at most (batch_rows=None)
_BATCH_BYTES = 64 << 20  # ... or this many record bytes, whichever comes first
_SHARD = re.compile(r".+\.tfrecord-\d+-of-\d+(\.gz|\.zz|\.zlib)?$")


@ray.remote(num_cpus=0)
class _SkipLog:
    """Collects the bad records that read tasks skipped (on_error="skip"), for the driver to report."""

    def __init__(self) -> None:
        self.entries: list[str] = []

    def add(self, entries: list[str]) -> None:
        self.entries.extend(entries)

    def get(self) -> list[str]:
        return list(self.entries)


class _ReadPieces:
    """The body of one read task: its pieces, record by record, into blocks of `batch_rows` records."""

    def __init__(self, pieces: list[Piece], features: Any, utf8: Any, compression: str | None,
                 verify: bool, on_error: Any, batch_rows: int | None, skip_log: Any) -> None:
        self.pieces, self.features, self.utf8 = pieces, features, utf8
        self.compression, self.verify, self.on_error = compression, verify, on_error
        self.batch_rows, self.skip_log = batch_rows, skip_log

    def __call__(self) -> Iterator[Any]:
        import pyarrow as pa

        from tfr_torch.ray.arrow import RAW_COLUMN, block_maker

        maker = block_maker(self.features, self.utf8) if self.features is not None else None
        rows_cap = self.batch_rows or _BATCH_ROWS
        bytes_cap = None if self.batch_rows else _BATCH_BYTES
        for piece in self.pieces:
            if piece.exact and piece.count == 0:
                continue
            skipped: list[str] = []
            policy = self.on_error
            if self.on_error == "skip":
                def policy(err: TFRecordError, skipped: list[str] = skipped) -> None:
                    skipped.append(str(err))
                    warnings.warn(f"skipping bad data: {err}", SkippedRecordWarning, stacklevel=2)
            try:
                reader = RecordReader(piece.path, self.compression, self.verify, start=piece.start, end=piece.end,
                                      on_error=policy)
                with reader:
                    records: list[bytes] = []
                    offsets: list[int] = []
                    size = 0
                    for record in reader:
                        # its number in the piece, counting the bad records skipped before it, as a TFDS slice does
                        # (dataset_info.json's shard lengths hold them)
                        position = reader.records - 1 + reader.skipped
                        if position < piece.skip:  # a slice of a file without an index: records before it are
                            continue  # read, not kept
                        if piece.exact and position >= piece.skip + (piece.count or 0):  # past a bad last record
                            break
                        records.append(record)
                        # reader.offset is where the next record starts: this one began its framing before (not
                        # where the previous one ended, when a bad record between them was skipped)
                        offsets.append(reader.offset - len(record) - OVERHEAD)
                        size += len(record)
                        if len(records) >= rows_cap or (bytes_cap is not None and size >= bytes_cap):
                            yield self._block(maker, records, piece.path, offsets, pa, RAW_COLUMN)
                            records, offsets, size = [], [], 0
                        if piece.exact and position + 1 >= piece.skip + (piece.count or 0):
                            break
                    if records:
                        yield self._block(maker, records, piece.path, offsets, pa, RAW_COLUMN)
            finally:
                if skipped and self.skip_log is not None:
                    ray.get(self.skip_log.add.remote(skipped))

    @staticmethod
    def _block(maker: Any, records: list[bytes], path: str, offsets: list[int], pa: Any, raw: str) -> Any:
        if maker is None:
            return pa.table({raw: pa.array(records, pa.binary())})
        return maker.make(records, FileLocations(path, offsets))


def _shard_files(directory: str, split: str | None) -> list[str]:
    from tfr_torch.format.folder import OutputFolder

    names = sorted(n for n in OutputFolder(directory).names() if _SHARD.fullmatch(n))  # a local folder or a URL
    if split is None:
        splits = sorted({n.rsplit(".tfrecord-", 1)[0].rsplit("-", 1)[-1] for n in names})
        raise ValueError(f"{directory} is a folder: pass split= (it holds the splits {splits}) or a list of files")
    chosen = [n for n in names if n.rsplit(".tfrecord-", 1)[0].endswith(f"-{split}")]
    if not chosen:
        raise FileNotFoundError(f"no shards of split {split!r} in {directory} (expected files named "
                                f"<name>-{split}.tfrecord-NNNNN-of-NNNNN)")
    sets = sorted({n.rsplit(".tfrecord-", 1)[0][: -len(split) - 1] for n in chosen})
    if len(sets) > 1:  # several datasets written into one folder: never read them as one
        raise ValueError(f"{directory} holds split {split!r} of several shard sets, named {sets}: pass the files of "
                         f"one (a glob such as {directory.rstrip('/')}/{sets[0]}-{split}.tfrecord-*)")
    return [f"{directory.rstrip('/')}/{n}" for n in chosen]


def _tfds_folder(paths: Any) -> TypeGuard[str | os.PathLike[str]]:
    if not isinstance(paths, (str, os.PathLike)):
        return False
    from tfr_torch.tfds.metadata import is_tfds_dir

    return is_tfds_dir(os.path.expanduser(as_path(paths)))


def _tfds_wire_spec(info: Any) -> dict[str, Any]:
    """The Example features of a TFDS dataset as stored (images and encoded tensors as bytes, class labels as
    int64, Sequences as FixedLenSequence): what read_tfrecords(features="auto") decodes a TFDS folder with."""
    from tfr_torch.tfds.features import TFDSDecoder

    spec: dict[str, Any] = {}
    for leaf in TFDSDecoder(info, decode_images=False).leaves():
        spec.update(leaf.wire)
    return spec


def _resolve_paths(paths: Any, split: str | None) -> list[str]:
    if isinstance(paths, (str, os.PathLike)) and os.path.isdir(as_path(paths)):
        return _shard_files(as_path(paths), split)
    if isinstance(paths, str) and split is not None and is_url(paths):  # a folder that write_tfrecords wrote there
        return _shard_files(paths, split)
    if split is not None:
        raise ValueError(f"split={split!r} selects shards in a folder; paths is not a folder: {paths!r}")
    files = expand_paths(paths)
    if not files:
        raise ValueError("read_tfrecords needs at least one file, got an empty list")
    return files


class TFRecordDatasource(Datasource):
    """TFRecord files as a `ray.data.Datasource`: raw records, or Examples decoded by tfr_torch's batch decoder
    into Arrow columns (see `tfr_torch.ray.read_tfrecords` for the arguments).

    Use it directly to see what `on_error="skip"` skipped once the dataset has been read:

    >>> source = TFRecordDatasource("data/*.tfrecord", features=spec, on_error="skip")  # doctest: +SKIP
    >>> ds = ray.data.read_datasource(source).materialize()
    >>> source.skipped  # ["path:offset: what was wrong", ...]
    """

    def __init__(self, paths: PathLike | Sequence[PathLike],
                 features: Mapping[str, Any] | SequenceFeatures | str | None = None, *,
                 index: Any = "auto", compression: CompressionOrAuto = "auto", split: str | None = None,
                 verify: bool = True, on_error: OnError = "raise",
                 batch_rows: int | None = None, utf8: bool | Sequence[str] = False) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # ray's Datasource.__init__ is unannotated
        self.compression = compression_name(compression, auto=True)
        check_on_error(on_error)  # both options fail here, before any path is looked at
        self.tfds = None  # the TFDSSource of a TFDS dataset folder (its shards, slices and counts)
        if _tfds_folder(paths):
            from tfr_torch.tfds.source import open_tfds

            self.tfds = open_tfds(os.path.expanduser(as_path(paths)), split, features={})
            self.paths = list(self.tfds.paths)
        else:
            self.paths = _resolve_paths(paths, split)
        if batch_rows is not None and (not isinstance(batch_rows, int) or isinstance(batch_rows, bool)
                                       or batch_rows < 1):
            raise ValueError(f"batch_rows must be None or a positive int, got {batch_rows!r}")
        from tfr_torch.decode.sidecar import spec_from_json
        from tfr_torch.format.shardset import find_sidecar

        sidecar = find_sidecar(self.paths) if self.tfds is None else None
        if features is not None and not isinstance(features, (str, Mapping, SequenceFeatures)):
            raise TypeError(f'features must be None, a spec dict, a SequenceFeatures or "auto", got '
                            f"{type(features).__name__}")
        if isinstance(features, str):
            if features != "auto":
                raise ValueError(f'features must be None, a spec dict or "auto", got {features!r}')
            if self.tfds is not None:
                features = _tfds_wire_spec(self.tfds.info)
            elif sidecar is None or not sidecar.features:
                raise ValueError("features='auto' needs the sidecar that ShardedWriter / write_tfrecords write beside "
                                 "their shards (<name>-<split>.tfr_torch.json) and none describes these files; pass "
                                 "a spec (tfr_torch.infer_features(paths) proposes one)")
            elif sidecar.sequence_features is not None:
                from tfr_torch.decode.sidecar import spec_of_sidecar

                features = spec_of_sidecar(sidecar)  # a SequenceFeatures
            else:
                features = spec_from_json(sidecar.features)
        if features is not None:
            from tfr_torch.ray.arrow import block_maker

            block_maker(features, utf8)  # check the spec here, before any task runs
        elif utf8 is not False:
            raise ValueError("utf8 applies to string features of a spec; with features=None the rows are raw records")
        self.features: Mapping[str, Any] | SequenceFeatures | None = (
            features if features is None or isinstance(features, SequenceFeatures)
            else dict(features))
        self.utf8 = utf8
        self.verify = bool(verify)
        self.on_error = on_error
        self.batch_rows = batch_rows
        counts: dict[str, int] = {}
        if sidecar is not None:  # its counts only for shards that still have the size it recorded (see trusted_counts)
            from tfr_torch.format.shardset import trusted_counts

            trusted, _ = trusted_counts(sidecar, [file_size(p) for p in self.paths], [None] * len(self.paths))
            counts = {p.rsplit("/", 1)[-1]: c for p, c in zip(self.paths, trusted) if c is not None}
        self._files = [self._file_info(p, index, i, counts) for i, p in enumerate(self.paths)]
        if self.tfds is not None:  # counts from dataset_info.json; split slices as record windows
            self._files = [self._tfds_slice(f, skip, take, expected) for f, skip, take, expected in
                           zip(self._files, self.tfds.skips, self.tfds.counts, self.tfds.expected)]
        # @ray.remote makes _SkipLog an actor class, which mypy cannot see (it ignores class decorators)
        self._skip_log = _SkipLog.remote() if on_error == "skip" else None  # type: ignore[attr-defined]

    def _file_info(self, path: str, index: Any, i: int, counts: dict[str, int]) -> FileInfo:
        if index is None:
            chosen = None
        elif index == "auto":
            chosen = index_path_for(path) if exists(index_path_for(path)) else None
        elif isinstance(index, (str, os.PathLike)):
            raise ValueError('index must be None, "auto" or a list of index paths (one per file)')
        else:
            index = list(index)
            if len(index) != len(self.paths):
                raise ValueError(f"index lists {len(index)} index files for {len(self.paths)} TFRecord files")
            chosen = None if index[i] is None else as_path(index[i])
        offsets = read_index(chosen, path, self.compression) if chosen is not None else None
        count = len(offsets) if offsets is not None else counts.get(path.rsplit("/", 1)[-1])
        compression: str | None = self.compression
        if offsets is not None and compression == "auto":
            compression = compression_from_name(path)
            if compression is None:
                with RecordReader(path, "auto", verify=False) as reader:
                    compression = reader.compression
        return FileInfo(path, file_size(path), count, offsets, offsets is not None and compression == "none")

    def _tfds_slice(self, f: FileInfo, skip: int, take: int, expected: int) -> FileInfo:
        offsets = f.offsets
        if offsets is not None:
            if len(offsets) != expected:
                from tfr_torch.tfds.metadata import TFDSMetadataError

                assert self.tfds is not None  # slices exist only for a TFDS folder
                raise TFDSMetadataError(f"shard holds {len(offsets)} records but {self.tfds.info.info_path} says "
                                        f"{expected} (shardLengths of its split)", f.path)
            offsets = offsets[skip : skip + take]
        partial = skip != 0 or take != expected
        return FileInfo(f.path, f.size, take, offsets, f.splittable, first=skip, partial=partial)

    # ----- Datasource -------------------------------------------------------------------------------------------

    def get_name(self) -> str:
        return "TFRecordTorch"

    def estimate_inmemory_data_size(self) -> int | None:
        return sum(f.size for f in self._files)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                       data_context: Any = None) -> list[ReadTask]:
        groups = group_pieces(plan_pieces(self._files, max(int(parallelism), 1)), max(int(parallelism), 1))
        exact = self.on_error == "raise"  # skipped records would make the planned counts wrong
        tasks = []
        for group in groups:
            counts = [p.count for p in group]
            known = [c for c in counts if c is not None]
            rows = sum(known) if exact and len(known) == len(counts) else None
            metadata = BlockMetadata(num_rows=rows, size_bytes=int(sum(p.nbytes for p in group)),
                                     input_files=tuple(sorted({p.path for p in group})), exec_stats=None)
            read = _ReadPieces(group, self.features, self.utf8, self.compression, self.verify, self.on_error,
                               self.batch_rows, self._skip_log)
            tasks.append(ReadTask(read, metadata, per_task_row_limit=per_task_row_limit))
        return tasks

    # ----- after reading ----------------------------------------------------------------------------------------

    @property
    def skipped(self) -> list[str]:
        """What the read tasks skipped under on_error="skip" so far: "path:offset: problem" per bad record or
        corrupt region (empty with other policies)."""
        return [] if self._skip_log is None else ray.get(self._skip_log.get.remote())

    @property
    def num_records(self) -> int | None:
        """Records in all files when every file's count is known (indexes, sidecar), else None."""
        counts = [f.count for f in self._files if f.count is not None]
        return None if len(counts) < len(self._files) else int(np.sum(counts))


def read_tfrecords(paths: PathLike | Sequence[PathLike],
                   features: Mapping[str, Any] | SequenceFeatures | str | None = None, *,
                   index: Any = "auto", compression: CompressionOrAuto = "auto", split: str | None = None,
                   verify: bool = True, on_error: OnError = "raise",
                   batch_rows: int | None = None, utf8: bool | Sequence[str] = False,
                   override_num_blocks: int | None = None, concurrency: int | None = None,
                   ray_remote_args: dict[str, Any] | None = None) -> Any:
    """Read TFRecord files into a `ray.data.Dataset`, without TensorFlow.

    - `paths`: a file, a list, a glob pattern, fsspec URLs, or a folder (local or a URL) of shards with `split=`
      (the shards named `<name>-<split>.tfrecord-NNNNN-of-NNNNN`, as ShardedWriter and `write_tfrecords` write them;
      the folder must hold that split of one set only).
    - `features`: None gives one `bytes` column of raw records; a spec (`{"key": tfr_torch.FixedLenFeature(...)}`)
      gives decoded columns (numeric FixedLen as Ray tensor columns of the spec's shape and dtype, scalars as plain
      columns, VarLen as list columns, strings as binary, or as utf-8 text for the keys in `utf8`); "auto" takes
      the spec from the sidecar beside the shards. SequenceExamples take a `tfr_torch.SequenceFeatures`: a column
      per context feature (as for Examples) and one per feature list, each row that record's steps (numeric
      FixedLenSequence lists as variable-shaped tensors `[T, *shape]`, VarLen and Ragged lists as lists of lists).
    - `index`: "auto" uses `<file>.idx` where present (one big indexed file is split by record ranges over many
      read tasks), None ignores indexes, or one index path per file. Indexes and the sidecar give Ray exact row
      counts without reading the data.
    - `verify`, `on_error`, `compression`: as in `tfr_torch.read_records`; errors name the file and byte offset.
      With "skip", bad records are skipped and warned about in the tasks; `TFRecordDatasource.skipped` lists them.
    - `batch_rows`: records per block (default: up to 4096 records or 64 MB); each block is decoded as one batch.
    - `override_num_blocks`, `concurrency`, `ray_remote_args`: passed to `ray.data.read_datasource`.

    >>> ds = tfr_torch.ray.read_tfrecords("gs://bucket/train-*", features=spec)  # doctest: +SKIP
    >>> for batch in ds.iter_torch_batches(batch_size=256): ...
    """
    source = TFRecordDatasource(paths, features, index=index, compression=compression, split=split, verify=verify,
                                on_error=on_error, batch_rows=batch_rows, utf8=utf8)
    kwargs: dict[str, Any] = {}
    if override_num_blocks is not None:
        kwargs["override_num_blocks"] = override_num_blocks
    if concurrency is not None:
        kwargs["concurrency"] = concurrency
    if ray_remote_args is not None:
        kwargs["ray_remote_args"] = ray_remote_args
    return ray.data.read_datasource(source, **kwargs)
