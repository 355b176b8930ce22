#!/usr/bin/env python3
"""Benchmark harness: tfr_torch beside the `tfrecord` package and TensorFlow, on synthetic data it makes itself.

    python benchmarks/run.py                          # every workload, best of 3 after a warm-up
    python benchmarks/run.py --workloads read-16k write-16k --repeat 5
    python benchmarks/run.py --records 2000 --json out.json   # a quick smoke run
    python benchmarks/run.py --list

Design
- A registry of workloads (`WORKLOADS`). Each has a data set and, per library ("tfr_torch", "tfrecord",
  "tensorflow"), one or more variants registered with `@variant(...)`. A variant's function gets a `Ctx` and
  returns a zero-argument callable that does one full pass and returns how many records it handled.
- Variants of one kind (e.g. "crc": reads that check every CRC) are comparable; each row's ratio is
  tfr_torch's rate / the row's rate, against tfr_torch's variant of the same kind (>1: tfr_torch is faster).
- Every (workload, library) pair runs in its own subprocess (`--worker`): `import tfrecord` and
  `import tensorflow` cannot share a process (both register tensorflow.BytesList & co in protobuf's default
  pool), and a fresh process also keeps memory and allocator state from one library out of another's numbers.
  A library that does not import is reported as "not installed", not as an error.
- Data is generated once with tfr_torch (so every library reads the very same file) and cached in
  --data-dir (default benchmarks/data/, gitignored); files are named after their record count and regenerated
  when missing or when their sidecar .json does not match.
- Timing: one untimed warm-up pass (which also brings the file into the page cache), then --repeat timed
  passes; the best (shortest) is reported, with the process CPU time of that pass (plus that of its joined
  DataLoader workers) as a % of its wall time (over 100% means more than one core was busy). MB are 10**6 bytes
  of record payload (for gzip, decompressed), not counting the 16 bytes of framing per record.
- Workloads run on one core (TensorFlow's inter/intra-op pools of 1, OMP_NUM_THREADS=1 for torch) unless
  registered with parallel=True (loader-16k: DataLoader workers, tf.data AUTOTUNE).
- A pass may put extra numbers in `ctx.metrics` (loader-16k: the peak RSS of DataLoader workers); a variant's
  `summary` turns them into a line of the summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import glob
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
if REPO not in sys.path:  # use tfr_torch from this checkout, installed or not
    sys.path.insert(0, REPO)

LIBRARIES = ("tfr_torch", "tfrecord", "tensorflow")
IMPORT_NAME = {"tfr_torch": "tfr_torch", "tfrecord": "tfrecord", "tensorflow": "tensorflow"}
GEN_VERSION = 1  # bump when the generators below change, so cached files are rebuilt
TF_BATCH = 256
LOW_CPU_PCT = 90  # a best pass below this CPU % was probably descheduled: flagged in the table

# --------------------------------------------------------------------------------------------------------------
# Synthetic data sets


@dataclasses.dataclass(frozen=True)
class Dataset:
    name: str
    default_records: int
    suffix: str
    compression: str | None
    generate: Callable[[int], Iterator[bytes]]  # records -> the records' bytes, deterministic
    description: str

    def path(self, data_dir: str, records: int) -> str:
        return os.path.join(data_dir, f"{self.name}-{records}{self.suffix}")


RECORD_16K = 16 * 1024


def gen_16k(records: int, chunk: int = 1000) -> Iterator[bytes]:
    """16 KiB records: blocks of 64 random bytes then 64 zeros (deflate shrinks them to about 52%)."""
    import numpy as np

    rng = np.random.default_rng(16384)
    for first in range(0, records, chunk):
        k = min(chunk, records - first)
        blocks = np.frombuffer(rng.bytes(k * RECORD_16K), dtype=np.uint8).reshape(-1, 128).copy()
        blocks[:, 64:] = 0
        flat = blocks.reshape(k, RECORD_16K)
        for row in flat:
            yield row.tobytes()


# Feature kinds of the small Examples, in the tfrecord package's words ("int", "float", "byte").
SMALL_KINDS = {"id": "int", "label": "int", "score": "float", "embedding": "float", "name": "byte", "tags": "byte",
               "mask": "int"}


def small_features(i: int) -> dict[str, Any]:
    """The 7 feature values of small Example number i (deterministic; about 160 bytes serialized)."""
    import numpy as np

    return {
        "id": i,
        "label": i % 1000,
        "score": ((i * 7919) % 10007) / 10007.0,
        "embedding": np.array([i % 97, i % 89, i % 83, i % 79], dtype=np.float32) / 7.0,
        "name": b"item-%08d" % i,
        "tags": [b"tag-%d" % (i % 17), b"tag-%d" % (i % 31)],
        "mask": [(i >> b) & 1 for b in range(8)],
    }


def gen_small(records: int) -> Iterator[bytes]:
    from tfr_torch import encode_example

    for i in range(records):
        yield encode_example(small_features(i))


# The tabular Examples of `decode-tabular`, in the tfrecord package's words.
TABULAR_KINDS = {"id": "int", "label": "int", "f1": "float", "f2": "float", "emb": "float", "tokens": "int",
                 "name": "byte"}
TABULAR_EMB = 32


def gen_tabular(records: int, chunk: int = 10_000) -> Iterator[bytes]:
    """Tabular Examples: int64 id and label, float f1 and f2, a 32-float emb, 1 to 20 int64 tokens
    and a short bytes name (about 280 B). Deterministic: one seeded generator, drawn chunk by chunk, and
    encode_example writes the feature map in key order."""
    import numpy as np

    from tfr_torch import encode_example

    rng = np.random.default_rng(20_000)
    for first in range(0, records, chunk):
        k = min(chunk, records - first)
        labels = rng.integers(0, 10, k)
        floats = rng.random((k, 2), dtype=np.float32)
        emb = rng.standard_normal((k, TABULAR_EMB), dtype=np.float32)
        lengths = rng.integers(1, 21, k)
        tokens = rng.integers(0, 50_000, int(lengths.sum()))
        ends = np.cumsum(lengths)
        for j in range(k):
            i = first + j
            yield encode_example({
                "id": i,
                "label": int(labels[j]),
                "f1": float(floats[j, 0]),
                "f2": float(floats[j, 1]),
                "emb": emb[j],
                "tokens": tokens[ends[j] - lengths[j] : ends[j]],
                "name": b"user-%d" % i,
            })


def gen_example_16k(records: int, chunk: int = 1000) -> Iterator[bytes]:
    """Examples of a 16 KiB bytes feature "data" (random bytes) and an int64 "label" (16,407-16,409 B each)."""
    import numpy as np

    from tfr_torch import encode_example

    rng = np.random.default_rng(4096)
    for first in range(0, records, chunk):
        k = min(chunk, records - first)
        payload = rng.bytes(k * RECORD_16K)
        labels = rng.integers(0, 1000, k)
        for j in range(k):
            yield encode_example({"data": payload[j * RECORD_16K : (j + 1) * RECORD_16K], "label": int(labels[j])})


DATASETS = {
    d.name: d
    for d in (
        Dataset("16k", 20_000, ".tfrecord", None, gen_16k, "16 KiB records, half random bytes, uncompressed"),
        Dataset("16k-gzip", 20_000, ".tfrecord.gz", "gzip", gen_16k, "the 16k records in one GZIP stream (level 6)"),
        Dataset("small", 200_000, ".tfrecord", None, gen_small, "serialized tf.train.Examples, 7 features, ~160 B"),
        Dataset("tabular", 200_000, ".tfrecord", None, gen_tabular,
                "tf.train.Examples: id, label, f1, f2, emb[32], 1-20 tokens, name; ~280 B"),
        Dataset("example-16k", 20_000, ".tfrecord", None, gen_example_16k,
                "tf.train.Examples of a 16 KiB random bytes feature 'data' and an int64 'label'"),
    )
}


def ensure_dataset(ds: Dataset, data_dir: str, records: int, force: bool = False) -> dict[str, Any]:
    """Make the data set's file unless a matching one is cached; return its metadata."""
    path = ds.path(data_dir, records)
    meta_path = path + ".json"
    if not force and os.path.exists(path) and os.path.exists(meta_path):
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            if (meta.get("gen_version") == GEN_VERSION and meta.get("records") == records
                    and meta.get("file_bytes") == os.path.getsize(path)):
                return meta
        except (OSError, ValueError):
            pass
    from tfr_torch import TFRecordWriter

    os.makedirs(data_dir, exist_ok=True)
    log(f"generating {path} ({records:,} records: {ds.description}) ...")
    t0 = time.perf_counter()
    payload = 0
    with TFRecordWriter(path, compression=ds.compression) as writer:
        for record in ds.generate(records):
            writer.write(record)
            payload += len(record)
    meta = {"dataset": ds.name, "records": records, "payload_bytes": payload, "file_bytes": os.path.getsize(path),
            "compression": ds.compression, "gen_version": GEN_VERSION}
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    log(f"  done in {time.perf_counter() - t0:.1f} s ({meta['file_bytes'] / 1e6:.1f} MB on disk)")
    return meta


def raw_records(path: str) -> list[bytes]:
    """The records of an uncompressed TFRecord file, by plain framing (no library, no CRC check): input for the
    write workloads, so that every library writes exactly the same bytes."""
    with open(path, "rb") as f:
        data = f.read()
    out, pos, n = [], 0, len(data)
    unpack = struct.Struct("<Q").unpack_from
    while pos < n:
        (length,) = unpack(data, pos)
        out.append(data[pos + 12 : pos + 12 + length])
        pos += length + 16
    return out


# --------------------------------------------------------------------------------------------------------------
# Workload registry


@dataclasses.dataclass
class Ctx:
    """What a variant's setup gets. `path`: the data set's file; `out`: where a write variant writes."""

    workload: str
    library: str
    path: str
    meta: dict[str, Any]
    out: str
    records: int
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # a pass may record extra numbers here
    _cache: dict[str, Any] = dataclasses.field(default_factory=dict)

    def raw_records(self) -> list[bytes]:
        if "raw" not in self._cache:
            self._cache["raw"] = raw_records(self.path)
        return self._cache["raw"]

    def small_features(self) -> list[dict[str, Any]]:
        if "features" not in self._cache:
            self._cache["features"] = [small_features(i) for i in range(self.records)]
        return self._cache["features"]


@dataclasses.dataclass(frozen=True)
class Variant:
    library: str
    key: str  # short id, unique within the workload
    label: str  # what the row is, in the library's own API terms
    kind: str  # rows of the same kind are compared; each kind needs a tfr_torch variant
    setup: Callable[[Ctx], Callable[[], int]]
    note: str = ""
    same_bytes: bool = False  # a write variant whose output must equal the data set's file byte for byte
    # a summary line of its own from the pass's ctx.metrics: (this row, every row of the workload) -> text
    summary: Callable[[dict[str, Any], list[dict[str, Any]]], str] | None = None


@dataclasses.dataclass
class Workload:
    name: str
    dataset: str
    description: str
    baseline: str  # key of the tfr_torch variant that the summary compares with the peers
    # the targets, printed with a met/not met verdict: peer library -> (the least tfr_torch ÷ row ratio
    # over that peer's comparable rows, what the target says)
    targets: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)
    # False: one core (TensorFlow's inter/intra-op pools of 1, OMP_NUM_THREADS=1 for torch); True: each library's
    # default threading and worker processes (CPU % then counts the DataLoader workers too)
    parallel: bool = False
    variants: list[Variant] = dataclasses.field(default_factory=list)

    def of(self, library: str) -> list[Variant]:
        return [v for v in self.variants if v.library == library]


WORKLOADS: dict[str, Workload] = {}


def workload(name: str, dataset: str, description: str, baseline: str,
             targets: dict[str, tuple[float, str]] | None = None, parallel: bool = False) -> None:
    WORKLOADS[name] = Workload(name, dataset, description, baseline, dict(targets or {}), parallel)


def variant(workloads: str | tuple[str, ...], library: str, key: str, label: str, kind: str, note: str = "",
            same_bytes: bool = False, summary: Callable[[dict[str, Any], list[dict[str, Any]]], str] | None = None):
    """Register the decorated setup function as a variant of one or more workloads."""
    names = (workloads,) if isinstance(workloads, str) else workloads

    def register(setup: Callable[[Ctx], Callable[[], int]]):
        for name in names:
            WORKLOADS[name].variants.append(Variant(library, key, label, kind, setup, note, same_bytes, summary))
        return setup

    return register


READS = ("read-16k", "read-small", "read-16k-gzip")
workload("read-16k", "16k", "read every 16 KiB record of an uncompressed file", "crc",
         targets={"tensorflow": (1.0, "at least as fast as TensorFlow's single-threaded TFRecordDataset "
                                      "(every TF variant)")})
workload("write-16k", "16k", "write the 16 KiB records (already in memory) to a new file", "raw",
         targets={"tensorflow": (1.0, "at least as fast as TensorFlow's TFRecordWriter")})
workload("read-small", "small", "read every record of a file of small Examples: per-record overhead", "crc")
workload("write-small", "small", "write small Examples: pre-serialized, or encoded from dicts", "raw")
workload("read-16k-gzip", "16k-gzip", "read every 16 KiB record of a GZIP-compressed file", "crc")
workload("decode-tabular", "tabular", f"decode tabular Examples into tensors, {TF_BATCH} per batch, on one core",
         "parse",
         targets={"tfrecord": (3.0, "at least 3× the tfrecord package"),
                  "tensorflow": (0.5, "at least 0.5× TensorFlow's single-threaded parse_example (every TF variant)")})
workload("loader-16k", "example-16k", "one pass of a DataLoader (2 workers) or tf.data pipeline over 16 KiB "
         "Examples, decoded in batches of 256", "loader", parallel=True,
         targets={"tensorflow": (1.0, "a tfr_torch DataLoader at least as fast as TensorFlow's AUTOTUNE pipeline")})

NOTE_TFRECORD_READ = ("tfrecord.reader.tfrecord_iterator never checks CRCs and yields a memoryview into one reused "
                      "buffer (no copy per record); compared with tfr_torch's verify=False row")
NOTE_TFRECORD_GZIP = ("as above; with compression_type='gzip' it also inflates the whole file once first, to learn "
                      "its decompressed size")
NOTE_TF_READ = ("single-threaded: tf.data.Options threading.private_threadpool_size=1, max_intra_op_parallelism=1, "
                "autotune off, no injected prefetch; inter/intra-op pools of 1; TF checks every CRC")


# ---- tfr_torch


@variant(READS, "tfr_torch", "crc", "read_records(path)  [CRC checked]", "crc")
def _tfr_read(ctx: Ctx) -> Callable[[], int]:
    from tfr_torch import read_records

    path, compression = ctx.path, ctx.meta["compression"]

    def run() -> int:
        n = 0
        for _ in read_records(path, compression):
            n += 1
        return n

    return run


@variant(READS, "tfr_torch", "nocrc", "read_records(path, verify=False)", "nocrc")
def _tfr_read_nocrc(ctx: Ctx) -> Callable[[], int]:
    from tfr_torch import read_records

    path, compression = ctx.path, ctx.meta["compression"]

    def run() -> int:
        n = 0
        for _ in read_records(path, compression, verify=False):
            n += 1
        return n

    return run


@variant(("write-16k", "write-small"), "tfr_torch", "raw", "TFRecordWriter.write(bytes)", "raw", same_bytes=True)
def _tfr_write(ctx: Ctx) -> Callable[[], int]:
    from tfr_torch import TFRecordWriter

    records, out = ctx.raw_records(), ctx.out

    def run() -> int:
        with TFRecordWriter(out) as writer:
            write = writer.write
            for r in records:
                write(r)
        return len(records)

    return run


@variant("write-small", "tfr_torch", "encode", "TFRecordWriter.write_example(dict)  [encode + write]", "encode")
def _tfr_write_example(ctx: Ctx) -> Callable[[], int]:
    from tfr_torch import TFRecordWriter

    features, out = ctx.small_features(), ctx.out

    def run() -> int:
        with TFRecordWriter(out) as writer:
            write_example = writer.write_example
            for f in features:
                write_example(f)
        return len(features)

    return run


# ---- the tfrecord package (PyPI "tfrecord")


@variant(READS, "tfrecord", "iter", "tfrecord_iterator(path)  [no CRC check]", "nocrc", note=NOTE_TFRECORD_READ)
def _tfrecord_read(ctx: Ctx) -> Callable[[], int]:
    from tfrecord.reader import tfrecord_iterator

    path = ctx.path
    compression = "gzip" if ctx.meta["compression"] == "gzip" else None

    def run() -> int:
        n = 0
        for _ in tfrecord_iterator(path, compression_type=compression):
            n += 1
        return n

    return run


@variant("write-16k", "tfrecord", "example", "TFRecordWriter.write({'data': (record, 'byte')})", "raw",
         note="the tfrecord package has no raw-record writer: write() always encodes an Example, so each 16 KiB "
              "payload goes out wrapped in a one-feature Example (16,407-byte records)")
def _tfrecord_write_16k(ctx: Ctx) -> Callable[[], int]:
    from tfrecord.writer import TFRecordWriter

    datums = [{"data": (r, "byte")} for r in ctx.raw_records()]
    out = ctx.out

    def run() -> int:
        writer = TFRecordWriter(out)
        write = writer.write
        for d in datums:
            write(d)
        writer.close()
        return len(datums)

    return run


@variant("write-small", "tfrecord", "encode", "TFRecordWriter.write(datum)  [encode + write]", "encode",
         note="no raw-record writer (see above), so only the encode + write row; datum = {key: (value, kind)}")
def _tfrecord_write_small(ctx: Ctx) -> Callable[[], int]:
    from tfrecord.writer import TFRecordWriter

    datums = [{k: (v, SMALL_KINDS[k]) for k, v in f.items()} for f in ctx.small_features()]
    out = ctx.out

    def run() -> int:
        writer = TFRecordWriter(out)
        write = writer.write
        for d in datums:
            write(d)
        writer.close()
        return len(datums)

    return run


# ---- TensorFlow


def _tf():
    import tensorflow as tf

    return tf


def _tf_dataset(ctx: Ctx):
    tf = _tf()
    compression = "GZIP" if ctx.meta["compression"] == "gzip" else None
    ds = tf.data.TFRecordDataset(ctx.path, compression_type=compression)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.deterministic = True
    return ds.with_options(options)


@variant(READS, "tensorflow", "numpy", "TFRecordDataset(path).as_numpy_iterator()", "crc", note=NOTE_TF_READ)
def _tf_read(ctx: Ctx) -> Callable[[], int]:
    ds = _tf_dataset(ctx)

    def run() -> int:
        n = 0
        for _ in ds.as_numpy_iterator():
            n += 1
        return n

    return run


@variant(READS, "tensorflow", "batch", f"TFRecordDataset(path).batch({TF_BATCH}).as_numpy_iterator()", "crc",
         note=f"TF's best single-threaded raw read rate: {TF_BATCH} records per Python step (an object array of bytes)")
def _tf_read_batched(ctx: Ctx) -> Callable[[], int]:
    ds = _tf_dataset(ctx).batch(TF_BATCH)

    def run() -> int:
        n = 0
        for batch in ds.as_numpy_iterator():
            n += len(batch)
        return n

    return run


@variant(("read-16k", "read-small"), "tensorflow", "eager", "for t in TFRecordDataset(path): t.numpy()", "crc",
         note="eager iteration: an EagerTensor per record, then .numpy()")
def _tf_read_eager(ctx: Ctx) -> Callable[[], int]:
    ds = _tf_dataset(ctx)

    def run() -> int:
        n = 0
        for t in ds:
            t.numpy()
            n += 1
        return n

    return run


@variant(("write-16k", "write-small"), "tensorflow", "raw", "tf.io.TFRecordWriter.write(bytes)", "raw", same_bytes=True)
def _tf_write(ctx: Ctx) -> Callable[[], int]:
    tf = _tf()
    records, out = ctx.raw_records(), ctx.out

    def run() -> int:
        with tf.io.TFRecordWriter(out) as writer:
            write = writer.write
            for r in records:
                write(r)
        return len(records)

    return run


@variant("write-small", "tensorflow", "encode",
         "tf.io.TFRecordWriter.write(tf.train.Example(...).SerializeToString())  [encode + write]", "encode",
         note="builds tf.train.Example / Features / Feature / *List from each dict, as user code does")
def _tf_write_example(ctx: Ctx) -> Callable[[], int]:
    tf = _tf()
    features, out = ctx.small_features(), ctx.out
    Example, Features, Feature = tf.train.Example, tf.train.Features, tf.train.Feature
    lists = {"int": ("int64_list", tf.train.Int64List), "float": ("float_list", tf.train.FloatList),
             "byte": ("bytes_list", tf.train.BytesList)}
    kinds = [(k, *lists[kind]) for k, kind in SMALL_KINDS.items()]

    def encode(f: dict[str, Any]) -> bytes:
        feature = {}
        for key, field, cls in kinds:
            v = f[key]
            if not isinstance(v, (list, tuple)) and not hasattr(v, "shape"):
                v = [v]
            feature[key] = Feature(**{field: cls(value=v)})
        return Example(features=Features(feature=feature)).SerializeToString()

    def run() -> int:
        with tf.io.TFRecordWriter(out) as writer:
            write = writer.write
            for f in features:
                write(encode(f))
        return len(features)

    return run


# ---- decode-tabular: tabular Examples, already in memory (the tfrecord package reads the file), into tensors


def _tabular_spec(ns: Any, int64: Any, float32: Any, string: Any) -> dict[str, Any]:
    """The decode-tabular spec in a library's own terms (tfr_torch or tf.io): all FixedLen but tokens."""
    return {"id": ns.FixedLenFeature([], int64), "label": ns.FixedLenFeature([], int64),
            "f1": ns.FixedLenFeature([], float32), "f2": ns.FixedLenFeature([], float32),
            "emb": ns.FixedLenFeature([TABULAR_EMB], float32), "tokens": ns.VarLenFeature(int64),
            "name": ns.FixedLenFeature([], string)}


def _batches(records: list[bytes]) -> list[list[bytes]]:
    return [records[i : i + TF_BATCH] for i in range(0, len(records), TF_BATCH)]


NOTE_DECODE = (f"batches of {TF_BATCH} serialized records already in memory; tokens (VarLen) comes back as a sparse "
               f"COO [{TF_BATCH}, max_len] tensor (TF: SparseTensor), name as a list of bytes (TF: an object array)")


@variant("decode-tabular", "tfr_torch", "parse", "parse_example(batch, spec)", "decode", note=NOTE_DECODE)
def _tfr_decode_tabular(ctx: Ctx) -> Callable[[], int]:
    import torch

    import tfr_torch

    spec = _tabular_spec(tfr_torch, torch.int64, torch.float32, tfr_torch.string)
    batches, parse_example = _batches(ctx.raw_records()), tfr_torch.parse_example

    def run() -> int:
        n = 0
        for batch in batches:
            out = parse_example(batch, spec)
            n += len(out["id"])
        return n

    return run


@variant("decode-tabular", "tfrecord", "loader",
         f"example_loader(path, None, description) + collate {TF_BATCH} into tensors", "decode",
         note="tfrecord.reader.example_loader reads the file itself (no CRC check) and parses every record on its "
              "own: a protobuf Example object, then one numpy array per feature; collated here the fastest way: "
              "np.concatenate (scalars) / np.stack (emb) + torch.from_numpy, name a list of bytes, and tokens left "
              "as a list of per-record int64 arrays (not padded, no sparse tensor built: less work than the others)")
def _tfrecord_decode_tabular(ctx: Ctx) -> Callable[[], int]:
    import itertools

    import numpy as np
    import torch
    from tfrecord.reader import example_loader

    path, description = ctx.path, dict(TABULAR_KINDS)
    scalars = ("id", "label", "f1", "f2")
    islice, concatenate, stack, from_numpy = itertools.islice, np.concatenate, np.stack, torch.from_numpy

    def run() -> int:
        n = 0
        examples = example_loader(path, None, description)
        while True:
            chunk = list(islice(examples, TF_BATCH))
            if not chunk:
                return n
            batch = {k: from_numpy(concatenate([e[k] for e in chunk])) for k in scalars}
            batch["emb"] = from_numpy(stack([e["emb"] for e in chunk]))
            batch["tokens"] = [e["tokens"] for e in chunk]
            batch["name"] = [e["name"] for e in chunk]
            n += len(batch["id"])

    return run


NOTE_TF_DECODE = ("eager tf.io.parse_example on pre-built tf.constant batches; one core (inter/intra-op pools of 1, "
                  "so the op does not shard the batch over threads)")


def _tf_decode_setup(ctx: Ctx):
    tf = _tf()
    spec = _tabular_spec(tf.io, tf.int64, tf.float32, tf.string)
    return tf, spec, [tf.constant(b) for b in _batches(ctx.raw_records())]


@variant("decode-tabular", "tensorflow", "numpy", "tf.io.parse_example(batch, spec) → .numpy()", "decode",
         note=NOTE_TF_DECODE)
def _tf_decode_tabular(ctx: Ctx) -> Callable[[], int]:
    tf, spec, batches = _tf_decode_setup(ctx)
    parse_example = tf.io.parse_example

    def run() -> int:
        n = 0
        for batch in batches:
            out = parse_example(batch, spec)
            arrays = {k: v.numpy() for k, v in out.items() if k != "tokens"}
            tokens = out["tokens"]
            arrays["tokens"] = (tokens.indices.numpy(), tokens.values.numpy(), tokens.dense_shape.numpy())
            n += len(arrays["id"])
        return n

    return run


@variant("decode-tabular", "tensorflow", "torch", "tf.io.parse_example(batch, spec) → torch tensors", "decode",
         note="as above, then into what tfr_torch returns: torch.from_numpy for dense features, "
              "torch.sparse_coo_tensor(indices.T, values, dense_shape, is_coalesced=True) for tokens, "
              ".numpy().tolist() (a list of bytes) for name")
def _tf_decode_tabular_torch(ctx: Ctx) -> Callable[[], int]:
    import numpy as np
    import torch

    tf, spec, batches = _tf_decode_setup(ctx)
    parse_example, from_numpy = tf.io.parse_example, torch.from_numpy
    dense = [k for k in spec if k not in ("tokens", "name")]

    def run() -> int:
        n = 0
        for batch in batches:
            out = parse_example(batch, spec)
            tensors = {k: from_numpy(out[k].numpy()) for k in dense}
            tensors["name"] = out["name"].numpy().tolist()
            tokens = out["tokens"]
            tensors["tokens"] = torch.sparse_coo_tensor(
                from_numpy(np.ascontiguousarray(tokens.indices.numpy().T)), from_numpy(tokens.values.numpy()),
                tuple(tokens.dense_shape.numpy().tolist()), is_coalesced=True, check_invariants=False)
            n += len(tensors["id"])
        return n

    return run


# ---- loader-16k: one epoch through a DataLoader with 2 workers / a tf.data AUTOTUNE pipeline

LOADER_WORKERS = 2
LOADER_BATCH = int(os.environ.get("TFR_BENCH_LOADER_BATCH", "256"))  # TFR_BENCH_LOADER_BATCH=64 for the batches-of-64 rows
SHUFFLE_BUFFER = 10_000


def _proc_status_kb(pid: int, field: str) -> int | None:
    """A /proc/<pid>/status field in KiB (VmRSS, VmHWM), or None where there is no /proc or the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _loader_pass(loader: Any, count: Callable[[Any], int], metrics: dict[str, float]) -> int:
    """One epoch of a DataLoader with worker processes; records the largest worker's peak RSS (VmHWM, sampled after
    every batch, while the workers live) and the main process's RSS at the start of the pass, in MB (10^6 bytes)."""
    import multiprocessing

    main_kb = _proc_status_kb(os.getpid(), "VmRSS")
    it = iter(loader)  # starts (forks) the workers, or wakes persistent ones
    pids = [p.pid for p in multiprocessing.active_children()]
    peak_kb = 0
    n = 0
    for batch in it:
        n += count(batch)
        for pid in pids:
            peak_kb = max(peak_kb, _proc_status_kb(pid, "VmHWM") or 0)
    if peak_kb and main_kb:
        metrics["worker_peak_rss_mb"] = peak_kb * 1024 / 1e6
        metrics["main_rss_at_fork_mb"] = main_kb * 1024 / 1e6
    return n


LOADER_SPEC_NOTE = (f"tfr_torch.TFRecordDataset(path, spec, index='auto', batch_size={LOADER_BATCH}) in "
                    f"DataLoader(batch_size=None, num_workers={LOADER_WORKERS}, persistent_workers=True): indexed, "
                    f"so the workers split the file by record ranges; each worker decodes whole batches "
                    f"(parse_example) and sends them through its reused shared-memory slab; data arrives as a list "
                    f"of bytes, label as an int64 [{LOADER_BATCH}] tensor. The workers start in the warm-up pass and "
                    f"stay (as in training, epoch after epoch)")
PERSISTENT = "persistent_workers=True"


def _loader_spec() -> dict[str, Any]:
    import torch

    import tfr_torch

    return {"data": tfr_torch.FixedLenFeature([], tfr_torch.string), "label": tfr_torch.FixedLenFeature([], torch.int64)}


def _collating_loader(ctx: Ctx, dataset: Any) -> Callable[[], int]:
    """A pass of DataLoader(batch_size=LOADER_BATCH) over a per-item dataset of the loader spec."""
    import torch

    loader = torch.utils.data.DataLoader(dataset, batch_size=LOADER_BATCH, num_workers=LOADER_WORKERS,
                                         persistent_workers=True)
    return lambda: _loader_pass(loader, lambda batch: len(batch["label"]), ctx.metrics)


def _tfr_loader(ctx: Ctx, features: bool, persistent: bool = True, **options: Any) -> Callable[[], int]:
    import torch

    import tfr_torch

    spec = _loader_spec() if features else None
    if options.get("index") == "auto":
        tfr_torch.build_index(ctx.path)  # <file>.idx, untimed
    dataset = tfr_torch.TFRecordDataset(ctx.path, spec, batch_size=LOADER_BATCH, **options)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=LOADER_WORKERS,
                                         persistent_workers=persistent)

    def count(batch: Any) -> int:
        return len(batch["label"]) if features else len(batch)

    def run() -> int:
        return _loader_pass(loader, count, ctx.metrics)

    return run


@variant("loader-16k", "tfr_torch", "loader",
         f"DataLoader(TFRecordDataset(path, spec, index='auto', batch_size={LOADER_BATCH}), batch_size=None, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})", "decoded", note=LOADER_SPEC_NOTE)
def _tfr_loader_decoded(ctx: Ctx) -> Callable[[], int]:
    return _tfr_loader(ctx, True, index="auto")


def _fresh_workers_line(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    tf = next((r for r in rows if r["workload"] == row["workload"] and r["library"] == "tensorflow"
               and r.get("records_per_s")), None)
    text = (f"with the {LOADER_WORKERS} workers forked inside every timed pass (persistent_workers=False), "
            f"{fmt_int(row['records_per_s'])} records/s")
    if tf is not None:
        text += f" = {row['records_per_s'] / tf['records_per_s']:.2f}× TensorFlow's AUTOTUNE pipeline"
    return text + (" (each new worker pays its start and its first batches' page faults: ~20% of a pass over "
                   "these 20,000 records, nothing over an epoch of millions)")


@variant("loader-16k", "tfr_torch", "fresh",
         f"DataLoader(TFRecordDataset(path, spec, index='auto', batch_size={LOADER_BATCH}), batch_size=None, "
         f"num_workers={LOADER_WORKERS})  [workers forked every pass]", "decoded-fresh",
         note="as the first row, but the DataLoader forks its workers in every pass (persistent_workers=False)",
         summary=_fresh_workers_line)
def _tfr_loader_fresh(ctx: Ctx) -> Callable[[], int]:
    return _tfr_loader(ctx, True, persistent=False, index="auto")


@variant("loader-16k", "tfr_torch", "raw",
         f"DataLoader(TFRecordDataset(path, None, index='auto', batch_size={LOADER_BATCH}), batch_size=None, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})  [raw bytes]", "raw",
         note="raw bytes mode: each batch is a list of 256 record payloads (serialized Examples), nothing decoded")
def _tfr_loader_raw(ctx: Ctx) -> Callable[[], int]:
    return _tfr_loader(ctx, False, index="auto")


@variant("loader-16k", "tfr_torch", "records",
         f"DataLoader(TFRecordDataset(path, spec, index='auto'), batch_size={LOADER_BATCH}, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})  [per record, collated]", "decoded-record",
         note="per-record items (the tfrecord package's style): each worker yields one dict per Example (decoded "
              "32 at a time, a row each) and the DataLoader's default collate batches them in the worker")
def _tfr_loader_records(ctx: Ctx) -> Callable[[], int]:
    import tfr_torch

    tfr_torch.build_index(ctx.path)  # untimed
    return _collating_loader(ctx, tfr_torch.TFRecordDataset(ctx.path, _loader_spec(), index="auto"))


@variant("loader-16k", "tfr_torch", "map",
         f"DataLoader(IndexedTFRecordDataset(path, spec), batch_size={LOADER_BATCH}, num_workers={LOADER_WORKERS}, "
         f"{PERSISTENT})  [map-style]", "decoded-map",
         note="map-style: every item read by its offset (os.pread), in index order (a DistributedSampler or "
              "shuffle=True would read the same way, in another order); DataLoader fetches 256 indices at a time "
              "(__getitems__), decoded together")
def _tfr_loader_map(ctx: Ctx) -> Callable[[], int]:
    import tfr_torch

    tfr_torch.build_index(ctx.path)  # untimed
    return _collating_loader(ctx, tfr_torch.IndexedTFRecordDataset(ctx.path, _loader_spec()))


def _shuffle_memory_line(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    m = row.get("metrics") or {}
    if "worker_peak_rss_mb" not in m:
        return "peak memory of a worker with a 10,000-record shuffle buffer of 16 KB records: not measured (no /proc)"
    text = (f"peak memory of a worker with a {SHUFFLE_BUFFER:,}-record shuffle buffer of 16 KB records: "
            f"{m['worker_peak_rss_mb']:,.0f} MB (peak RSS, VmHWM, of the larger of {LOADER_WORKERS} workers; the main "
            f"process had {m['main_rss_at_fork_mb']:,.0f} MB resident")
    plain = next((r for r in rows if r["workload"] == row["workload"] and r["library"] == "tfr_torch"
                  and r.get("key") == "loader" and (r.get("metrics") or {}).get("worker_peak_rss_mb")), None)
    if plain is not None:
        peak = plain["metrics"]["worker_peak_rss_mb"]
        text += f"; a worker of the indexed, unshuffled DataLoader peaks at {peak:,.0f} MB"
    return text + ")"


@variant("loader-16k", "tfr_torch", "shuffle",
         f"DataLoader(TFRecordDataset(path, spec, shuffle=True, shuffle_buffer={SHUFFLE_BUFFER:_}, "
         f"batch_size={LOADER_BATCH}), batch_size=None, num_workers={LOADER_WORKERS}, {PERSISTENT})  [no index]",
         "shuffle",
         note=f"no index: with one file for {LOADER_WORKERS} workers each worker first counts the file's records "
              f"(a header scan; its warning is silenced here), then reads its half through a "
              f"{SHUFFLE_BUFFER:,}-record shuffle buffer, which holds all of its 10,000 records at once; "
              "its peak memory is in the summary",
         summary=_shuffle_memory_line)
def _tfr_loader_shuffle(ctx: Ctx) -> Callable[[], int]:
    import warnings

    warnings.filterwarnings("ignore", message="counting the records")  # inherited by the forked workers
    return _tfr_loader(ctx, True, index=None, shuffle=True, shuffle_buffer=SHUFFLE_BUFFER)


@variant("loader-16k", "tfrecord", "loader",
         f"DataLoader(tfrecord.torch.TFRecordDataset(path, index_path, description), batch_size={LOADER_BATCH}, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})", "decoded",
         note="index from tfrecord.tools.tfrecord2idx.create_index (needed to split the file between workers); every "
              "record is parsed on its own (protobuf Example, a bytes copy of data, a numpy array for label) and "
              f"the DataLoader's default collate builds each batch in the worker: data a list of bytes, label an "
              f"int64 [{LOADER_BATCH}, 1] tensor; no CRC check")
def _tfrecord_loader(ctx: Ctx) -> Callable[[], int]:
    import torch
    from tfrecord.tools.tfrecord2idx import create_index
    from tfrecord.torch.dataset import TFRecordDataset

    index_path = ctx.path + ".tfrecord-pkg.idx"
    create_index(ctx.path, index_path)  # untimed
    dataset = TFRecordDataset(ctx.path, index_path, {"data": "byte", "label": "int"})
    loader = torch.utils.data.DataLoader(dataset, batch_size=LOADER_BATCH, num_workers=LOADER_WORKERS,
                                         persistent_workers=True)

    def run() -> int:
        return _loader_pass(loader, lambda batch: len(batch["label"]), ctx.metrics)

    return run


@variant("loader-16k", "tensorflow", "autotune",
         f"TFRecordDataset(path).batch({LOADER_BATCH}).map(parse_example, AUTOTUNE).prefetch(AUTOTUNE)"
         ".as_numpy_iterator()", "decoded",
         note="tf.data with its default threading (AUTOTUNE: all cores), tf.io.parse_example per batch in the map; "
              "data arrives as an object array of bytes, label as an int64 array; TF checks every CRC")
def _tf_loader(ctx: Ctx) -> Callable[[], int]:
    tf = _tf()
    spec = {"data": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    ds = (tf.data.TFRecordDataset(ctx.path).batch(LOADER_BATCH)
          .map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))

    def run() -> int:
        n = 0
        for batch in ds.as_numpy_iterator():
            n += len(batch["label"])
        return n

    return run


# --------------------------------------------------------------------------------------------------------------
# Worker: runs one library's variants of one workload, in its own process


def import_library(library: str, one_core: bool = True) -> str:
    """Import the library; return its version. Raises ImportError (or anything else) when it cannot.
    `one_core`: TensorFlow gets inter/intra-op pools of 1 (else its defaults: every core)."""
    if library == "tensorflow":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        tf = importlib.import_module("tensorflow")
        if one_core:
            tf.config.threading.set_inter_op_parallelism_threads(1)
            tf.config.threading.set_intra_op_parallelism_threads(1)
        return tf.__version__
    module = importlib.import_module(IMPORT_NAME[library])
    return getattr(module, "__version__", None) or dist_version(library) or "?"


def children_cpu() -> float:
    """CPU seconds of this process's children: the finished, waited-for ones (DataLoader workers, once joined)
    plus the live ones (persistent workers), read from /proc where there is one."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return 0.0
    import multiprocessing

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for child in multiprocessing.active_children():
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except (OSError, ValueError, IndexError):
            pass
    return total


def time_variant(v: Variant, ctx: Ctx, repeat: int, warmup: int) -> dict[str, Any]:
    ctx.metrics = {}
    run = v.setup(ctx)
    times, cpus, metrics = [], [], []

    def one_pass() -> tuple[float, float]:
        gc.collect()
        ctx.metrics = {}
        t0, c0, k0 = time.perf_counter(), time.process_time(), children_cpu()
        n = run()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0 + children_cpu() - k0  # workers: joined, or live and read from /proc
        if n != ctx.meta["records"]:
            raise RuntimeError(f"handled {n} records, expected {ctx.meta['records']}")
        return wall, cpu

    try:
        for i in range(warmup):
            one_pass()
            if i == 0 and v.same_bytes and not same_file(ctx.out, ctx.path):
                raise RuntimeError(f"its output differs from {ctx.path}")
            remove_outputs(ctx.out)
        for _ in range(repeat):
            wall, cpu = one_pass()
            remove_outputs(ctx.out)
            times.append(wall)
            cpus.append(cpu)
            metrics.append(dict(ctx.metrics))
    finally:
        remove_outputs(ctx.out)
    best = min(range(len(times)), key=times.__getitem__)
    # CPU time of other threads is accounted coarsely: below ~50 ms a pass's CPU % means little
    cpu_pct = 100.0 * cpus[best] / times[best] if times[best] >= 0.05 else None
    result = {"times_s": times, "cpu_s": cpus, "best_s": times[best], "cpu_pct": cpu_pct}
    if any(metrics):  # extra numbers (e.g. peak memory): the largest over the timed passes
        keys = dict.fromkeys(k for m in metrics for k in m)
        result["metrics"] = {k: max(m[k] for m in metrics if k in m) for k in keys}
        result["metrics_per_pass"] = metrics
    return result


def same_file(a: str, b: str) -> bool:
    import filecmp

    return os.path.exists(a) and filecmp.cmp(a, b, shallow=False)


def remove_outputs(out: str) -> None:
    for p in [out, *glob.glob(os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.*"))]:
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def worker(args: argparse.Namespace) -> None:
    library, name = args.worker
    wl = WORKLOADS[name]
    ds = DATASETS[wl.dataset]
    records = args.records or ds.default_records
    path = ds.path(args.data_dir, records)
    with open(path + ".json") as f:
        meta = json.load(f)
    result: dict[str, Any] = {"library": library, "workload": name, "rows": []}
    if not wl.parallel:
        os.environ["OMP_NUM_THREADS"] = "1"  # torch's intra-op pool, when a variant imports it: one core
    try:
        result["version"] = import_library(library, one_core=not wl.parallel)
    except Exception as exc:  # noqa: BLE001 - any failure to import means "not installed" here
        result["status"] = "not installed"
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    else:
        result["status"] = "ok"
        out = os.path.join(args.data_dir, f"_out-{library}-{name}.tfrecord")
        ctx = Ctx(name, library, path, meta, out, records)
        for v in wl.of(library):
            row = {"key": v.key}
            log(f"  {name} / {library} / {v.label} ...")
            try:
                row.update(time_variant(v, ctx, args.repeat, args.warmup))
                row["status"] = "ok"
            except Exception as exc:  # noqa: BLE001 - reported in the table
                row["status"] = "error"
                row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            result["rows"].append(row)
    with open(args.worker_out, "w") as f:
        json.dump(result, f)


# --------------------------------------------------------------------------------------------------------------
# Parent: data, subprocesses, table


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def dist_version(library: str) -> str | None:
    names = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tensorflow-macos", "tf-nightly"),
             "tfrecord": ("tfrecord",), "tfr_torch": ()}.get(library, (library,))
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "?"


def machine_facts() -> dict[str, Any]:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    load = load_average()
    from tfr_torch import __version__ as tfr_version

    versions = {"tfr_torch": f"{tfr_version} (checkout {REPO})"}
    modules = {"tensorflow": "tensorflow", "tfrecord": "tfrecord", "numpy": "numpy", "protobuf": "google.protobuf",
               "crc32c": "crc32c", "torch": "torch"}
    for lib, module in modules.items():
        versions[lib] = dist_version(lib) if importlib.util.find_spec(module) else None
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return {"cpu_model": model, "cpu_count": os.cpu_count(), "cpus_usable": usable, "load_avg": load,
            "platform": platform.platform(), "python": python, "executable": sys.executable, "versions": versions}


def run_worker(library: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    fd, out = tempfile.mkstemp(prefix="tfr-bench-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", library, name, "--worker-out", out,
           "--repeat", str(args.repeat), "--warmup", str(args.warmup), "--data-dir", args.data_dir]
    if args.records:
        cmd += ["--records", str(args.records)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              timeout=args.timeout)
        for line in proc.stderr.splitlines():  # progress lines; TF's own chatter is dropped
            if line.startswith("  ") and " / " in line:
                log(line)
        try:
            with open(out) as f:
                return json.load(f)
        except (OSError, ValueError):
            tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            return {"library": library, "workload": name, "status": "error",
                    "error": f"worker exited with {proc.returncode}: {tail[:200]}", "rows": []}
    except subprocess.TimeoutExpired:
        return {"library": library, "workload": name, "status": "error", "error": f"timed out after {args.timeout} s",
                "rows": []}
    finally:
        os.remove(out)


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def build_rows(results: list[dict[str, Any]], metas: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per variant (or per library that is not installed / failed), with rates and ratios."""
    rows = []
    for res in results:
        wl = WORKLOADS[res["workload"]]
        meta = metas[res["workload"]]
        if res["status"] != "ok":
            rows.append({"workload": wl.name, "library": res["library"], "key": None, "label": "—",
                         "status": res["status"], "error": res.get("error", ""), "version": None})
            continue
        by_key = {v.key: v for v in wl.of(res["library"])}
        for r in res["rows"]:
            v = by_key[r["key"]]
            row = {"workload": wl.name, "library": res["library"], "key": v.key, "label": v.label, "kind": v.kind,
                   "note": v.note, "version": res.get("version"), **r}
            if r["status"] == "ok":
                row["records_per_s"] = meta["records"] / r["best_s"]
                row["mb_per_s"] = meta["payload_bytes"] / r["best_s"] / 1e6
            rows.append(row)
    for row in rows:  # lines of their own in the summary, which may refer to other rows
        v = next((v for v in WORKLOADS[row["workload"]].of(row["library"]) if v.key == row["key"]), None)
        if v is not None and v.summary is not None and row["status"] == "ok":
            row["summary_line"] = v.summary(row, rows)
    # ratios: tfr_torch's rate of the same kind / this row's rate
    for row in rows:
        if row.get("records_per_s") and row["library"] != "tfr_torch":
            base = next((b for b in rows if b["workload"] == row["workload"] and b["library"] == "tfr_torch"
                         and b.get("kind") == row["kind"] and b.get("records_per_s")), None)
            if base is not None:
                row["tfr_torch_ratio"] = base["records_per_s"] / row["records_per_s"]
                row["compared_with"] = base["label"]
    return rows


def print_table(rows: list[dict[str, Any]], metas: dict[str, dict[str, Any]], facts: dict[str, Any],
                command: str, args: argparse.Namespace) -> None:
    v = facts["versions"]
    print("# tfr_torch benchmarks")
    print()
    print(f"- machine: {facts['cpu_model']}, {facts['cpu_count']} CPUs ({facts['cpus_usable']} usable), "
          f"load average at start {facts['load_avg']}, at end {load_average()}; {facts['platform']}")
    print(f"- python: {facts['python']} ({facts['executable']})")
    print("- versions: " + ", ".join(f"{k} {v[k] or 'not installed'}" for k in v))
    print(f"- command: `{command}`")
    print(f"- timing: best of {args.repeat} after {args.warmup} warm-up pass(es); each library in its own subprocess; "
          "MB = 10^6 bytes of record payload; CPU % = process CPU time (with its DataLoader workers') / wall time "
          "of the best pass")
    print()
    notes: list[str] = []
    contended = False
    print("| workload | library | variant | records/s | MB/s | CPU % | **tfr_torch ÷ row** (>1: tfr_torch faster) "
          "| compared with (tfr_torch) |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for row in rows:
        label = f"`{row['label']}`" if row["label"] != "—" else "—"
        if row.get("note"):
            if row["note"] not in notes:
                notes.append(row["note"])
            label += f" [{notes.index(row['note']) + 1}]"
        if row["status"] == "not installed":
            cells = ["not installed" + (f" ({row['error']})" if row.get("error") else ""), "", "", "", ""]
        elif row["status"] != "ok":
            cells = [f"error: {row.get('error', '')}", "", "", "", ""]
        else:
            ratio = row.get("tfr_torch_ratio")
            cpu = f"{row['cpu_pct']:.0f}%" if row.get("cpu_pct") is not None else "n/a"
            if row.get("cpu_pct") is not None and row["cpu_pct"] < LOW_CPU_PCT:
                contended = True
                cpu += " ⚠"
            if row["library"] == "tfr_torch":
                cells = [fmt_int(row["records_per_s"]), f"{row['mb_per_s']:,.1f}", cpu, "baseline", ""]
            else:
                cells = [fmt_int(row["records_per_s"]), f"{row['mb_per_s']:,.1f}", cpu,
                         f"{ratio:.2f}×" if ratio else "—", f"`{row['compared_with']}`" if ratio else ""]
        print(f"| {row['workload']} | {row['library']} | {label} | " + " | ".join(cells) + " |")
    print()
    for i, note in enumerate(notes, 1):
        print(f"[{i}] {note}  ")
    if contended:
        print(f"⚠ CPU % under {LOW_CPU_PCT}%: the process (with its DataLoader workers, if any) spent part of its "
              "best pass waiting (other load on the machine, or write-back I/O; for a multi-threaded pipeline, "
              "possibly its own stalls), so that rate is likely pessimistic; rerun with a larger --repeat on a "
              "quieter machine  ")
    print()
    print("Data: " + "; ".join(
        f"{name}: {m['records']:,} records, {m['payload_bytes'] / 1e6:,.1f} MB payload, "
        f"{m['file_bytes'] / 1e6:,.1f} MB file" for name, m in metas.items()))
    print()
    # summary against each peer's fastest comparable row
    print("## tfr_torch against the fastest comparable row of each peer")
    print()
    for name in dict.fromkeys(r["workload"] for r in rows):
        wl = WORKLOADS[name]
        base = next((r for r in rows if r["workload"] == name and r["library"] == "tfr_torch"
                     and r["key"] == wl.baseline and r.get("records_per_s")), None)
        if base is None:
            print(f"- {name}: tfr_torch baseline `{wl.baseline}` did not run")
            continue
        parts = []
        for lib in LIBRARIES[1:]:
            mine = [r for r in rows if r["workload"] == name and r["library"] == lib]
            peers = [r for r in mine if r.get("tfr_torch_ratio")]
            if not peers:
                if mine:
                    parts.append(f"{lib}: {mine[0]['status']}")
                continue
            # the peer's fastest row that has a tfr_torch row of its kind; its ratio is against that row
            best = max(peers, key=lambda r: r["records_per_s"])
            ratio = best["tfr_torch_ratio"]
            parts.append(f"{ratio:.2f}× {lib} `{best['label']}`"
                         + (f" (vs tfr_torch `{best['compared_with']}`)" if best["compared_with"] != base["label"]
                            else ""))
            if lib in wl.targets:
                need, text = wl.targets[lib]
                worst = min(r["tfr_torch_ratio"] for r in peers)
                parts[-1] += f" — target, {text}: **{'met' if worst >= need else 'NOT met'}**"
        if not parts:
            parts = ["no peer ran"]
        print(f"- {name} (`{base['label']}`, {fmt_int(base['records_per_s'])} records/s): " + "; ".join(parts))
    for row in rows:
        if row.get("summary_line"):
            print(f"- {row['workload']}: {row['summary_line']}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workloads", nargs="+", metavar="NAME",
                   help="workloads to run (space or comma separated; default: all): " + ", ".join(WORKLOADS))
    p.add_argument("--libraries", nargs="+", metavar="LIB", help="libraries (default: all): " + ", ".join(LIBRARIES))
    p.add_argument("--repeat", type=int, default=3, help="timed passes per variant; the best is reported (default 3)")
    p.add_argument("--warmup", type=int, default=1, help="untimed passes first (default 1)")
    p.add_argument("--records", type=int, help="records per data set (default: 20,000 for the 16k sets, "
                                               "200,000 for small and tabular)")
    p.add_argument("--data-dir", default=os.path.join(HERE, "data"), help="cache of generated data "
                                                                          "(default benchmarks/data/)")
    p.add_argument("--regenerate", action="store_true", help="rebuild the data even when cached")
    p.add_argument("--json", metavar="PATH", help="also write every result (all pass times) as JSON")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per (workload, library) subprocess")
    p.add_argument("--list", action="store_true", help="list workloads and variants, then exit")
    p.add_argument("--worker", nargs=2, metavar=("LIB", "WORKLOAD"), help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    names = [n for item in (args.workloads or WORKLOADS) for n in item.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    args.workloads = list(dict.fromkeys(names))
    libs = [n for item in (args.libraries or LIBRARIES) for n in item.split(",") if n]
    if [x for x in libs if x not in LIBRARIES]:
        p.error(f"libraries are {', '.join(LIBRARIES)}")
    args.libraries = [x for x in LIBRARIES if x in libs]
    if args.repeat < 1 or args.warmup < 0 or (args.records is not None and args.records < 1):
        p.error("--repeat must be >= 1, --warmup >= 0, --records >= 1")
    args.data_dir = os.path.abspath(args.data_dir)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.list:
        for wl in WORKLOADS.values():
            print(f"{wl.name}: {wl.description} (data: {wl.dataset})")
            for v in wl.variants:
                print(f"    {v.library:10} {v.key:8} [{v.kind}] {v.label}")
        return 0
    command = shlex.join([sys.executable, *sys.argv])
    facts = machine_facts()
    metas: dict[str, dict[str, Any]] = {}
    made: dict[str, dict[str, Any]] = {}
    for name in args.workloads:
        ds = DATASETS[WORKLOADS[name].dataset]
        if ds.name not in made:
            made[ds.name] = ensure_dataset(ds, args.data_dir, args.records or ds.default_records, args.regenerate)
        metas[name] = made[ds.name]
    results = []
    for name in args.workloads:
        for lib in args.libraries:
            if not WORKLOADS[name].of(lib):
                continue
            if importlib.util.find_spec(IMPORT_NAME[lib]) is None:
                results.append({"library": lib, "workload": name, "status": "not installed", "rows": []})
                log(f"  {name} / {lib}: not installed")
                continue
            results.append(run_worker(lib, name, args))
            if results[-1]["status"] != "ok":
                log(f"  {name} / {lib}: {results[-1]['status']} {results[-1].get('error', '')}")
    rows = build_rows(results, metas)
    print_table(rows, {WORKLOADS[n].dataset: m for n, m in metas.items()}, facts, command, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command, "machine": facts, "repeat": args.repeat, "warmup": args.warmup,
                       "data": metas, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
