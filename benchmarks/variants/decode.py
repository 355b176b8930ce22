"""Decode workloads: tabular Examples into tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.datasets import TABULAR_EMB, TABULAR_KINDS
from benchmarks.registry import TF_BATCH, Ctx, variant, workload
from benchmarks.variants.tfdata import import_tf

# ---- decode-tabular: tabular Examples, already in memory (the tfrecord package reads the file), into tensors

workload("decode-tabular", "tabular", f"decode tabular Examples into tensors, {TF_BATCH} per batch, on one core",
         "parse",
         targets={"tfrecord": (3.0, "at least 3× the tfrecord package"),
                  "tensorflow": (0.5, "at least 0.5× TensorFlow's single-threaded parse_example (every TF variant)")})


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
    tf = import_tf()
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

