"""TensorFlow as the single-core workloads use it."""

from __future__ import annotations

from typing import Any

from benchmarks.registry import Ctx


def import_tf() -> Any:
    """TensorFlow, imported when a variant's setup runs (in its own subprocess), never when registering."""
    import tensorflow as tf

    return tf


def tf_dataset(ctx: Ctx) -> Any:
    """`tf.data.TFRecordDataset` of the data set's file, single-threaded (the options below), deterministic."""
    tf = import_tf()
    compression = "GZIP" if ctx.meta["compression"] == "gzip" else None
    ds = tf.data.TFRecordDataset(ctx.path, compression_type=compression)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    options.autotune.enabled = False
    options.experimental_optimization.inject_prefetch = False
    options.deterministic = True
    return ds.with_options(options)

