"""A Ray Dataset into TFRecord shards, without TensorFlow: the layout ShardedWriter makes, byte for byte.

Write tasks encode their rows as tf.train.Examples (`encode_example`) into uncompressed part files (each written
atomically) in a hidden staging folder. When every task has finished (`on_write_complete`, on the driver), the
shard boundaries are computed over the dataset's rows in order with ShardedWriter's rule (by `shard_size`, or
`records_per_shard`), Ray tasks assemble the shards in parallel (compressing when asked) under temporary names,
and the driver gives them their final TFDS-style names, writes their indexes and the sidecar, and removes the
staging folder. So the shards depend only on the rows and their order, never on how many tasks wrote them; no
file ever appears under a final name half-written; and a run that failed leaves its staging folder only, which
the next run of the same name and split removes.

`out_dir` may be an fsspec URL (s3://, gs://, ...) that every node can reach: write tasks then make their part
file on local disk and upload it into the staging folder under that URL, assembling tasks read the parts' byte
ranges from there and upload the shards they make (with their seek points), and the final names are given by
moves inside the object store.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import ray
from ray.data.block import BlockAccessor
from ray.data.datasource import Datasink

from tfr_torch.format.options import Compression, CompressionName, compression_name
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.folder import OutputFolder
from tfr_torch.format.paths import PathLike, atomic_output
from tfr_torch.format.shardset import check_set_name
from tfr_torch.ray.schema import _arrow_spec, _spec_of_blocks, _strings, _untyped, spec_from_schema

__all__ = ["TFRecordDatasink", "write_tfrecords", "plan_shards", "spec_from_schema"]  # (spec_from_schema: in schema.py)



def plan_shards(lengths: np.ndarray, shard_size: int, records_per_shard: int | None) -> list[int]:
    """First record of each shard, for records of `lengths` bytes written in order, with ShardedWriter's rule: a
    new shard starts when the current one holds `records_per_shard` records, or (without it) when the next
    framed record would take the shard past `shard_size` bytes (a record larger than that gets a shard alone)."""
    n = len(lengths)
    if n == 0:
        return []
    if records_per_shard is not None:
        return list(range(0, n, records_per_shard))
    ends = np.cumsum(np.asarray(lengths, dtype=np.int64) + OVERHEAD)
    starts, first, before = [0], 0, 0
    while True:  # the shard from `first` ends at the last record whose end stays within shard_size
        nxt = int(np.searchsorted(ends, before + shard_size, side="right"))
        nxt = max(nxt, first + 1)
        if nxt >= n:
            return starts
        starts.append(nxt)
        first, before = nxt, int(ends[nxt - 1])


@ray.remote
def _assemble(ranges: list[tuple[str, int, int]], out_dir: str, name: str, compression: CompressionName) -> int:
    """Copy the records in `ranges` ((part file, start, end) byte ranges, in order) into the shard `name` of
    `out_dir`, atomically, with its seek points when compressed (`name.idx.seek`, as ShardedWriter writes them);
    return its size in bytes. For a URL `out_dir` the shard is made on local disk and uploaded."""
    from tfr_torch.format.reader import RecordReader
    from tfr_torch.format.seek import build_seek_points
    from tfr_torch.format.writer import TFRecordWriter

    folder = OutputFolder(out_dir)
    local = tempfile.mkdtemp(prefix="tfr_torch-shard-") if folder.remote else None
    out = f"{local}/shard" if local is not None else folder.join(name)
    try:
        with TFRecordWriter(out, None if compression == "none" else compression) as writer:
            for part, start, end in ranges:
                with RecordReader(part, "none", True, start=start, end=end) as reader:
                    for record in reader:
                        writer.write(record)
        if compression != "none":
            build_seek_points(out, out + ".idx.seek", compression)
        size = os.path.getsize(out)
        if local is not None:
            if os.path.exists(out + ".idx.seek"):
                folder.upload(out + ".idx.seek", name + ".idx.seek")
            folder.upload(out, name)
        return size
    finally:
        if local is not None:
            shutil.rmtree(local, ignore_errors=True)


def _write_part(blocks: Iterable[Any], task: int, part: str, lengths: list[int]) -> list[Any]:
    """Encode a write task's rows as Examples into the file `part` (atomically), appending each record's length
    to `lengths`; return the Arrow schemas of its non-empty blocks (each distinct one once)."""
    from tfr_torch.format.example import encode_example
    from tfr_torch.format.writer import TFRecordWriter

    schemas: list[Any] = []
    with TFRecordWriter(part) as writer:
        for b, block in enumerate(blocks):
            accessor = BlockAccessor.for_block(block)
            if accessor.num_rows() == 0:
                continue
            schema = accessor.to_arrow().schema
            if schema not in schemas:
                schemas.append(schema)
            strings = {name for name in schema.names if _strings(schema.field(name).type)}
            untyped = {name for name in schema.names if _untyped(schema.field(name).type)}
            columns = accessor.to_batch_format("numpy")
            keys = list(columns)
            for j in range(accessor.num_rows()):
                row = {key: _value(columns[key][j], key in strings) for key in keys
                       if not (key in untyped and _empty(columns[key][j]))}
                try:
                    record = encode_example(row)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise type(exc)(f"write_tfrecords: row {j} of block {b} of write task {task}: {exc}") from None
                writer.write(record)
                lengths.append(len(record))
    return schemas


class TFRecordDatasink(Datasink[dict[str, Any]]):  # each write task returns a dict
    """The `ray.data.Datasink` behind `write_tfrecords` (see it for the arguments). After the write,
    `paths` lists the shards and `records` their number of records."""

    def __init__(self, out_dir: PathLike, name: str, split: str = "train", shard_size: int | str = "128MB",
                 compression: Compression = None, *, records_per_shard: int | None = None,
                 features: Mapping[str, Any] | str | None = "auto", image: Mapping[str, Any] | None = None,
                 tfds: Mapping[str, Any] | None = None) -> None:
        from tfr_torch.tools.shards import parse_size

        check_set_name(name, split)
        self.out_dir = OutputFolder(out_dir).path  # (a folder object per process: tasks make their own)
        self.name, self.split = name, split
        self.shard_size = parse_size(shard_size)
        if records_per_shard is not None and (not isinstance(records_per_shard, int) or records_per_shard < 1):
            raise ValueError(f"records_per_shard must be a positive int, got {records_per_shard!r}")
        self.records_per_shard = records_per_shard
        self.compression = compression_name(compression)
        if isinstance(features, str) and features != "auto":
            raise ValueError(f'features must be "auto", a spec dict or None, got {features!r}')
        if features is not None and not isinstance(features, (str, Mapping)):
            raise TypeError(f"features must be \"auto\", a spec dict or None, got {type(features).__name__} "
                            "(write_tfrecords writes rows as tf.train.Example records)")
        if isinstance(features, Mapping):
            from tfr_torch.decode.sidecar import spec_to_json

            spec_to_json(features)  # a spec the sidecar cannot store fails now, not after the write
        self.features = dict(features) if isinstance(features, Mapping) else features
        self.image = dict(image) if image is not None else None
        self.tfds = dict(tfds) if tfds is not None else None  # TFDS metadata instead of the sidecar
        if self.tfds is not None:
            from tfr_torch.tfds.write import tfds_options

            spec = self.features if isinstance(self.features, Mapping) else {}
            tfds_options(self.tfds, spec, self.compression)  # bad options fail now, not after the write
            if self.features is None and not self.tfds.get("features"):
                raise ValueError("TFDS metadata needs the features: features='auto' or a spec, or "
                                 "tfds={'features': ...}")
        self.staging_name = f".{name}-{split}.ray-{uuid.uuid4().hex[:12]}"
        self.paths: list[str] = []
        self.records = 0
        self.completed = False

    # ----- driver: before ---------------------------------------------------------------------------------------

    def on_write_start(self, schema: Any = None) -> None:
        folder = OutputFolder(self.out_dir)
        folder.makedirs()
        prefix = f".{self.name}-{self.split}.ray-"
        for stale in folder.names():  # what an earlier, failed run of this name and split left
            if stale.startswith(prefix) and stale != self.staging_name:
                folder.remove_tree(stale)
        if self.features == "auto" and schema is not None:  # a column with no Feature form fails before any write
            for name in schema.names:  # (the spec itself comes from every block's schema, after the write)
                if not _untyped(schema.field(name).type):
                    _arrow_spec(name, schema.field(name).type)

    # ----- tasks ------------------------------------------------------------------------------------------------

    def write(self, blocks: Iterable[Any], ctx: Any) -> dict[str, Any]:
        folder = OutputFolder(self.out_dir)
        part_name = f"{self.staging_name}/part-{ctx.task_idx:08d}"
        local = tempfile.mkdtemp(prefix="tfr_torch-part-") if folder.remote else None  # uploaded once written
        if local is None:
            os.makedirs(folder.join(self.staging_name), exist_ok=True)
        lengths: list[int] = []
        try:
            schemas = _write_part(blocks, ctx.task_idx, f"{local}/part" if local else folder.join(part_name), lengths)
            if local is not None:
                folder.upload(f"{local}/part", part_name)
        finally:
            if local is not None:
                shutil.rmtree(local, ignore_errors=True)
        return {"task": ctx.task_idx, "part": folder.join(part_name), "lengths": np.asarray(lengths, dtype=np.int64),
                "schemas": schemas}

    # ----- driver: after ----------------------------------------------------------------------------------------

    def on_write_complete(self, write_result: Any) -> None:
        results = sorted((r for r in write_result.write_returns if r is not None), key=lambda r: r["task"])
        if self.features == "auto":  # the spec of every block's schema (not just the first's: see _spec_of_blocks)
            schemas = [schema for r in results for schema in r["schemas"]]
            self.features = _spec_of_blocks(schemas) if schemas else None
        lengths = np.concatenate([r["lengths"] for r in results]) if results else np.zeros(0, dtype=np.int64)
        starts = plan_shards(lengths, self.shard_size, self.records_per_shard)
        bounds = list(zip(starts, starts[1:] + [len(lengths)]))
        # where each record lies: its part file and byte offset in it
        part_of = np.concatenate([np.full(len(r["lengths"]), i) for i, r in enumerate(results)]) if results else \
            np.zeros(0, dtype=np.int64)
        framed = lengths + OVERHEAD
        offset_in_part = np.zeros(len(lengths), dtype=np.int64)
        first = 0
        for r in results:
            n = len(r["lengths"])
            if n:
                offset_in_part[first + 1 : first + n] = np.cumsum(framed[first : first + n - 1])
            first += n
        folder = OutputFolder(self.out_dir)
        if not folder.remote:
            os.makedirs(folder.join(self.staging_name), exist_ok=True)
        partials = [f"{self.staging_name}/shard-{i:08d}" for i in range(len(bounds))]
        jobs = []
        for (a, b), partial in zip(bounds, partials):
            ranges = []
            i = a
            while i < b:
                p = int(part_of[i])
                j = min(b, int(np.searchsorted(part_of, p, side="right")))
                ranges.append((results[p]["part"], int(offset_in_part[i]),
                               int(offset_in_part[j - 1] + framed[j - 1])))
                i = j
            jobs.append(_assemble.remote(ranges, self.out_dir, partial, self.compression))
        sizes = ray.get(jobs)
        self._finish(folder, bounds, partials, sizes, framed)

    def _finish(self, folder: OutputFolder, bounds: list[tuple[int, int]], partials: list[str], sizes: list[int],
                framed: np.ndarray) -> None:
        from tfr_torch.decode.sidecar import spec_to_json
        from tfr_torch.format.shardset import shard_name, sidecar_data
        from tfr_torch.tools.shards import publish_set

        count = len(bounds)
        finals = [shard_name(self.name, self.split, i, count) for i in range(count)]
        shards: list[dict[str, Any]] = [{"file": final, "records": b - a, "bytes": int(size)}
                  for final, (a, b), size in zip(finals, bounds, sizes)]
        features = self.features if isinstance(self.features, Mapping) else None
        sidecar = sidecar_data(self.name, self.split, self.compression, shards,
                               spec_to_json(features) if features is not None else None, self.image)
        text = json.dumps(sidecar, indent=1)
        for (a, b), partial in zip(bounds, partials):
            positions = np.zeros(b - a, dtype=np.int64)
            np.cumsum(framed[a : b - 1], out=positions[1:]) if b - a > 1 else None
            with atomic_output(folder.join(partial + ".idx")) as f:
                f.write("".join(f"{o} {s}\n" for o, s in zip(positions.tolist(), framed[a:b].tolist())).encode())
        tfds = None
        if self.tfds is not None:
            from tfr_torch.tfds.write import tfds_options

            tfds = tfds_options(self.tfds, features, self.compression)
        publish_set(folder, self.name, self.split, list(zip(partials, finals)), shards, text, tfds)
        folder.remove_tree(self.staging_name)
        self.paths = [folder.join(final) for final in finals]
        self.records = int(sidecar["records"])
        self.completed = True

    def on_write_failed(self, error: Exception) -> None:
        OutputFolder(self.out_dir).remove_tree(self.staging_name)


def _value(value: Any, strings: bool = False) -> Any:
    """A cell of a numpy batch as encode_example takes it (object arrays of lists hold arrays already); an empty
    list of a column of bytes or str as an empty bytes list (numpy gives it as an untyped object array)."""
    if isinstance(value, np.ndarray) and value.dtype == object:
        if strings and not value.size:
            return np.array([], dtype=bytes)
        return list(value)
    return value


def _empty(value: Any) -> bool:
    """An empty list of a column typed by no value (list<null>): left out of its Example, as a missing key reads
    back as an empty list."""
    return isinstance(value, np.ndarray) and not value.size


def write_tfrecords(dataset: Any, out_dir: PathLike, name: str, split: str = "train", shard_size: int | str = "128MB",
                    compression: Compression = None, *, records_per_shard: int | None = None,
                    features: Mapping[str, Any] | str | None = "auto", image: Mapping[str, Any] | None = None,
                    tfds: Mapping[str, Any] | None = None, concurrency: int | None = None,
                    ray_remote_args: dict[str, Any] | None = None) -> list[str]:
    """Write a `ray.data.Dataset` as sharded TFRecord files of tf.train.Examples, without TensorFlow.

    Each row (a dict of numpy arrays, scalars, bytes or str) becomes one Example, exactly as
    `tfr_torch.encode_example` makes it. The result is the layout `ShardedWriter` makes locally, byte for byte:
    shards `{name}-{split}.tfrecord-NNNNN-of-NNNNN` cut by `shard_size` (bytes before compression) or
    `records_per_shard`, each with its `.idx` (and, compressed, its seek points `.idx.seek`), and the sidecar
    `{name}-{split}.tfr_torch.json` holding `features` ("auto": the spec of the dataset's schema, which
    `read_tfrecords(features="auto")` and `TFRecordDataset(features="auto")` use; or a spec; or None) and every
    shard's record count. The dataset is
    written in its order (Ray's `preserve_order` is switched on for the write), so the same rows give the same
    bytes whatever the number of workers. `out_dir` must be a folder every Ray node can write: on a cluster, an
    object store URL (s3://, gs://, ...; parts and shards are made on each node's local disk and uploaded) or a
    shared file system. `tfds` ({"version", "features", "supervised_keys", "class_names", "description"}, all
    optional, as in `ShardedWriter`) writes TensorFlow Datasets metadata (dataset_info.json, features.json) instead
    of the sidecar, so that `out_dir` (name it `<data_dir>/<name>/<version>`) loads with
    `tfds.builder_from_directory`. Returns the shard paths.

    >>> tfr_torch.ray.write_tfrecords(ds, "out/", "mydata", "train", shard_size="128MB")  # doctest: +SKIP
    """
    sink = TFRecordDatasink(out_dir, name, split, shard_size, compression, records_per_shard=records_per_shard,
                            features=features, image=image, tfds=tfds)
    context = dataset.context  # what the write runs with: each dataset holds a copy of the context it was made in
    before = context.execution_options.preserve_order
    context.execution_options.preserve_order = True
    try:
        kwargs: dict[str, Any] = {}
        if concurrency is not None:
            kwargs["concurrency"] = concurrency
        if ray_remote_args is not None:
            kwargs["ray_remote_args"] = ray_remote_args
        dataset.write_datasink(sink, **kwargs)
    finally:
        context.execution_options.preserve_order = before
    if not sink.completed:  # an empty dataset runs no write task: still write the (empty) set
        sink.on_write_complete(_NoWrites())
    return sink.paths


class _NoWrites:
    write_returns: list[dict[str, Any]] = []
