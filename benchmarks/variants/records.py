"""Read and write workloads: 16 KiB records, small Examples, GZIP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.datasets import SMALL_KINDS
from benchmarks.registry import TF_BATCH, Ctx, variant, workload
from benchmarks.variants.tfdata import import_tf, tf_dataset

READS = ("read-16k", "read-small", "read-16k-gzip")
workload("read-16k", "16k", "read every 16 KiB record of an uncompressed file", "crc",
         targets={"tensorflow": (3.0, "at least 3× TensorFlow's single-threaded TFRecordDataset "
                                      "(every TF variant)")})
workload("write-16k", "16k", "write the 16 KiB records (already in memory) to a new file", "raw",
         targets={"tensorflow": (2.0, "at least 2× TensorFlow's TFRecordWriter")})
workload("read-small", "small", "read every record of a file of small Examples: per-record overhead", "crc")
workload("write-small", "small", "write small Examples: pre-serialized, or encoded from dicts", "raw")
workload("read-16k-gzip", "16k-gzip", "read every 16 KiB record of a GZIP-compressed file", "crc",
         targets={"tensorflow": (1.5, "at least 1.5× TensorFlow's single-threaded TFRecordDataset with zlib-ng "
                                      "installed (every TF variant)")})

NOTE_TFRECORD_READ = ("tfrecord.reader.tfrecord_iterator never checks CRCs and yields a memoryview into one reused "
                      "buffer (no copy per record); compared with tfr_torch's verify=False row")
NOTE_TFRECORD_GZIP = ("as above; with compression_type='gzip' it also inflates the whole file once first, to learn "
                      "its decompressed size")
NOTE_TF_READ = ("single-threaded: tf.data.Options threading.private_threadpool_size=1, max_intra_op_parallelism=1, "
                "autotune off, no injected prefetch; inter/intra-op pools of 1; TF checks every CRC")


# ---- tfr_torch


@variant(READS, "tfr_torch", "crc", "read_records(path)  [CRC checked]", "crc", pure_python=True)
def _tfr_read(ctx: Ctx) -> Callable[[], int]:
    from tfr_torch import read_records

    path, compression = ctx.path, ctx.meta["compression"]

    def run() -> int:
        n = 0
        for _ in read_records(path, compression):
            n += 1
        return n

    return run


@variant(READS, "tfr_torch", "nocrc", "read_records(path, verify=False)", "nocrc", pure_python=True)
def _tfr_read_nocrc(ctx: Ctx) -> Callable[[], int]:
    from tfr_torch import read_records

    path, compression = ctx.path, ctx.meta["compression"]

    def run() -> int:
        n = 0
        for _ in read_records(path, compression, verify=False):
            n += 1
        return n

    return run


@variant("read-16k-gzip", "tfr_torch", "shuffled",
         "TFRecordDataset(path, index='auto', shuffle=True)  [global shuffle: seek points, spilled]", "shuffled",
         note="every record once in a random order (a new one each pass). Read in groups of max_group_bytes (64 "
              "MiB), each group's records inflated in one pass over the 1 MiB seek intervals they touch (build_index's "
              "seek points, built before the timed passes), a file of N such groups would cost about N sequential "
              "reads (5 for this 328 MB file): so the share is spilled (spill_dir, the default), one sequential pass "
              "into a temporary file read back in the shuffled order; no peer reads a GZIP file in a random order")
def _tfr_read_gzip_shuffled(ctx: Ctx) -> Callable[[], int]:
    import tfr_torch
    from tfr_torch.format.seek import has_seek_points

    path = ctx.path
    if not has_seek_points(path):
        tfr_torch.build_index(path)
    dataset = tfr_torch.TFRecordDataset(path, index="auto", shuffle=True, seed=0)
    epoch = [0]

    def run() -> int:
        dataset.set_epoch(epoch[0])
        epoch[0] += 1
        n = 0
        for _ in dataset:
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


@variant(READS, "tensorflow", "numpy", "TFRecordDataset(path).as_numpy_iterator()", "crc", note=NOTE_TF_READ)
def _tf_read(ctx: Ctx) -> Callable[[], int]:
    ds = tf_dataset(ctx)

    def run() -> int:
        n = 0
        for _ in ds.as_numpy_iterator():
            n += 1
        return n

    return run


@variant(READS, "tensorflow", "batch", f"TFRecordDataset(path).batch({TF_BATCH}).as_numpy_iterator()", "crc",
         note=f"TF's best single-threaded raw read rate: {TF_BATCH} records per Python step (an object array of bytes)")
def _tf_read_batched(ctx: Ctx) -> Callable[[], int]:
    ds = tf_dataset(ctx).batch(TF_BATCH)

    def run() -> int:
        n = 0
        for batch in ds.as_numpy_iterator():
            n += len(batch)
        return n

    return run


@variant(("read-16k", "read-small"), "tensorflow", "eager", "for t in TFRecordDataset(path): t.numpy()", "crc",
         note="eager iteration: an EagerTensor per record, then .numpy()")
def _tf_read_eager(ctx: Ctx) -> Callable[[], int]:
    ds = tf_dataset(ctx)

    def run() -> int:
        n = 0
        for t in ds:
            t.numpy()
            n += 1
        return n

    return run


@variant(("write-16k", "write-small"), "tensorflow", "raw", "tf.io.TFRecordWriter.write(bytes)", "raw", same_bytes=True)
def _tf_write(ctx: Ctx) -> Callable[[], int]:
    tf = import_tf()
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
    tf = import_tf()
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

