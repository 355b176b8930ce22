"""Synthetic data sets: deterministic generators, cached files named after their record count."""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.system import log

GEN_VERSION = 1  # bump when the generators below change, so cached files are rebuilt



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
    """Examples of a 16 KiB bytes feature "data" (random bytes) and an int64 "label" (16,426-16,427 B each)."""
    import numpy as np

    from tfr_torch import encode_example

    rng = np.random.default_rng(4096)
    for first in range(0, records, chunk):
        k = min(chunk, records - first)
        payload = rng.bytes(k * RECORD_16K)
        labels = rng.integers(0, 1000, k)
        for j in range(k):
            yield encode_example({"data": payload[j * RECORD_16K : (j + 1) * RECORD_16K], "label": int(labels[j])})


SEQUENCE_FRAME = 16  # floats per step of the "frames" feature list


def gen_sequence(records: int, chunk: int = 1000) -> Iterator[bytes]:
    """tf.train.SequenceExamples (video-clip-like): context int64 "id" and "label"; feature lists "frames" (16
    floats a step) and "tokens" (one int64 a step), 5 to 40 steps (about 1.8 KB each). Deterministic."""
    import numpy as np

    from tfr_torch import encode_sequence_example

    rng = np.random.default_rng(7)
    for first in range(0, records, chunk):
        k = min(chunk, records - first)
        steps = rng.integers(5, 41, k)
        labels = rng.integers(0, 100, k)
        frames = rng.standard_normal((int(steps.sum()), SEQUENCE_FRAME), dtype=np.float32)
        tokens = rng.integers(0, 30_000, int(steps.sum()))
        ends = np.cumsum(steps)
        for j in range(k):
            a, b = int(ends[j] - steps[j]), int(ends[j])
            yield encode_sequence_example({"id": first + j, "label": int(labels[j])},
                                          {"frames": list(frames[a:b]), "tokens": [[int(t)] for t in tokens[a:b]]})


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
        Dataset("sequence", 50_000, ".tfrecord", None, gen_sequence,
                "tf.train.SequenceExamples: context id, label; 5-40 steps of frames[16] and tokens; ~1.8 KB"),
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

