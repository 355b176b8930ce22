"""SequenceExample workloads: the sequence data set's file decoded into tensors in batches of 256
(read-decode-sequence) and record by record (per-record-sequence), on one core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.datasets import SEQUENCE_FRAME
from benchmarks.registry import TF_BATCH, Ctx, variant, workload
from benchmarks.variants.tfdata import import_tf, tf_dataset

workload("read-decode-sequence", "sequence", f"read the SequenceExamples' file and decode them into tensors, "
         f"{TF_BATCH} per batch, on one core (end to end)", "dataset",
         targets={"tensorflow": (1.5, (f"at least 1.5x tf.data's TFRecordDataset(path).batch({TF_BATCH})"
                                       ".map(parse_sequence_example) on one thread"))})
workload("per-record-sequence", "sequence", "read the SequenceExamples' file and decode them record by record, "
         "on one core", "dataset",
         targets={"tfrecord": (2.0, "at least 2x the tfrecord package's TFRecordDataset(path, None, description, "
                                    "sequence_description)")})


def _specs(ns: Any, int64: Any, float32: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(context, sequence) specs in a library's own terms (tfr_torch or tf.io)."""
    return ({"id": ns.FixedLenFeature([], int64), "label": ns.FixedLenFeature([], int64)},
            {"frames": ns.FixedLenSequenceFeature([SEQUENCE_FRAME], float32),
             "tokens": ns.FixedLenSequenceFeature([], int64)})


def _tfr_spec() -> Any:
    import torch

    import tfr_torch

    return tfr_torch.SequenceFeatures(*_specs(tfr_torch, torch.int64, torch.float32))


NOTE_BATCH = (f"iterated in this process (no DataLoader): each batch of {TF_BATCH} records read (CRC checked) and "
              f"decoded as parse_sequence_example does: frames [{TF_BATCH}, T_max, {SEQUENCE_FRAME}] and tokens "
              f"[{TF_BATCH}, T_max] zero-padded, the lengths, the context")


@variant("read-decode-sequence", "tfr_torch", "dataset",
         f"TFRecordDataset(path, SequenceFeatures(context, sequence), batch_size={TF_BATCH})", "decode",
         note=NOTE_BATCH, pure_python=True)
def _tfr_batches(ctx: Ctx) -> Callable[[], int]:
    import tfr_torch

    dataset = tfr_torch.TFRecordDataset(ctx.path, _tfr_spec(), batch_size=TF_BATCH)

    def run() -> int:
        n = 0
        for batch in dataset:
            n += len(batch["context"]["id"])
        return n

    return run


@variant("read-decode-sequence", "tensorflow", "batch",
         f"for batch in TFRecordDataset(path).batch({TF_BATCH}).map(parse_sequence_example): → .numpy()", "decode",
         note="single-threaded tf.data (one private thread, autotune off, no injected prefetch; a sequential map): "
              "tf.io.parse_sequence_example on each batch, every tensor of the result turned into numpy; TF checks "
              "every CRC")
def _tf_batches(ctx: Ctx) -> Callable[[], int]:
    tf = import_tf()
    context, sequence = _specs(tf.io, tf.int64, tf.float32)
    ds = tf_dataset(ctx).batch(TF_BATCH).map(
        lambda x: tf.io.parse_sequence_example(x, context_features=context, sequence_features=sequence))

    def run() -> int:
        n = 0
        for ctx_out, lists, lengths in ds:
            n += len(ctx_out["id"].numpy())
            for value in (*lists.values(), *lengths.values(), *ctx_out.values()):
                value.numpy()
        return n

    return run


@variant("per-record-sequence", "tfr_torch", "dataset",
         "TFRecordDataset(path, SequenceFeatures(context, sequence))  [one dict per record]", "record",
         note="per-record mode, iterated in this process: one {'context', 'feature_lists'} dict per record as "
              "parse_single_sequence_example gives it (frames [T, 16], tokens [T]), cut from batches of 32; CRC "
              "checked", pure_python=True)
def _tfr_records(ctx: Ctx) -> Callable[[], int]:
    import tfr_torch

    dataset = tfr_torch.TFRecordDataset(ctx.path, _tfr_spec())

    def run() -> int:
        n = 0
        for _ in dataset:
            n += 1
        return n

    return run


@variant("per-record-sequence", "tfrecord", "dataset",
         "tfrecord.torch.TFRecordDataset(path, None, description, sequence_description)  [one pair per record]",
         "record", note="the tfrecord package's dataset iterated in this process: each record parsed on its own (a "
                        "protobuf SequenceExample, numpy arrays per feature: frames a list of T arrays); no CRC check")
def _tfrecord_records(ctx: Ctx) -> Callable[[], int]:
    from tfrecord.torch.dataset import TFRecordDataset

    dataset = TFRecordDataset(ctx.path, None, {"id": "int", "label": "int"},
                              sequence_description={"frames": "float", "tokens": "int"})

    def run() -> int:
        n = 0
        for _ in dataset:
            n += 1
        return n

    return run


@variant("per-record-sequence", "tensorflow", "map",
         "for example in TFRecordDataset(path).map(parse_single_sequence_example): → .numpy()", "record",
         note="single-threaded tf.data with a sequential map of tf.io.parse_single_sequence_example: one (context, "
              "feature_lists) pair per record, every tensor turned into numpy; TF checks every CRC")
def _tf_records(ctx: Ctx) -> Callable[[], int]:
    tf = import_tf()
    context, sequence = _specs(tf.io, tf.int64, tf.float32)
    ds = tf_dataset(ctx).map(
        lambda x: tf.io.parse_single_sequence_example(x, context_features=context, sequence_features=sequence))

    def run() -> int:
        n = 0
        for ctx_out, lists in ds:
            for value in (*lists.values(), *ctx_out.values()):
                value.numpy()
            n += 1
        return n

    return run
