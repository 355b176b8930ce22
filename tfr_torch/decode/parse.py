"""TensorFlow's parsing functions (tf.io.parse_example and friends), returning torch tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tfr_torch.decode.plan import compile_features
from tfr_torch.decode.sequence_plan import SequenceExamplePlan
from tfr_torch.format.location import ExampleName

__all__ = ["parse_example", "parse_single_example", "parse_sequence_example", "parse_single_sequence_example"]


def parse_example(serialized: Sequence[bytes], features: Mapping[str, Any],
                  example_names: Sequence[ExampleName] | None = None) -> dict[str, Any]:
    """Parse a batch of serialized tf.train.Example records, as tf.io.parse_example does, into torch tensors.

    Results per spec: FixedLenFeature -> dense `[B, *shape]`; VarLenFeature -> sparse COO `[B, max_len]`
    (`to_padded` gives padded values and lengths); SparseFeature -> sparse COO `[B, size]`; RaggedFeature ->
    nested (jagged) tensor or RaggedTensor; FixedLenSequenceFeature -> dense `[B, T, *shape]`. Bytes features
    come back as lists of bytes nested like the shape. `example_names` label errors: strings are shown as names;
    `tfr_torch.RecordLocation(path, offset)`s (what the datasets pass) also set the error's `.path` / `.offset`.
    An empty `example_names` means no names, as in TensorFlow; any other length must match the records.

    >>> import torch, tfr_torch
    >>> records = [tfr_torch.encode_example({"x": [1.0, 2.0], "id": 7}), tfr_torch.encode_example({"x": [3.0, 4.0]})]
    >>> spec = {"x": tfr_torch.FixedLenFeature([2], torch.float32),
    ...         "id": tfr_torch.FixedLenFeature([], torch.int64, default_value=-1)}
    >>> out = tfr_torch.parse_example(records, spec)
    >>> out["x"].tolist(), out["id"].tolist()
    ([[1.0, 2.0], [3.0, 4.0]], [7, -1])
    """
    return compile_features(features).parse(serialized, _names(example_names))


def parse_single_example(serialized: bytes, features: Mapping[str, Any],
                         example_names: ExampleName | None = None) -> dict[str, Any]:
    """Parse one serialized tf.train.Example, as tf.io.parse_single_example: like parse_example without the batch
    dimension (a RaggedFeature without partitions gives a dense 1-D tensor, as in TensorFlow)."""
    names = None if example_names is None else [example_names]
    return compile_features(features).parse([serialized], names, single=True)


def parse_sequence_example(serialized: Sequence[bytes], context_features: Mapping[str, Any] | None = None,
                           sequence_features: Mapping[str, Any] | None = None,
                           example_names: Sequence[ExampleName] | None = None,
                           ) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
    """Parse a batch of tf.train.SequenceExample records, as tf.io.parse_sequence_example.

    Returns (context, feature_lists, lengths): context features as parse_example returns them;
    FixedLenSequenceFeature lists as dense `[B, T, *shape]` zero-padded, VarLenFeature lists as sparse
    `[B, T, max_len]`, RaggedFeature lists as RaggedTensor `[B, (T), (values)]`; `lengths` gives T per example
    for each FixedLenSequenceFeature.
    """
    return SequenceExamplePlan(context_features, sequence_features).parse(serialized, _names(example_names))


def parse_single_sequence_example(serialized: bytes, context_features: Mapping[str, Any] | None = None,
                                  sequence_features: Mapping[str, Any] | None = None,
                                  example_name: ExampleName | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse one tf.train.SequenceExample, as tf.io.parse_single_sequence_example: (context, feature_lists), with
    FixedLenSequenceFeature lists as `[T, *shape]`, VarLenFeature lists as sparse `[T, max_len]` and RaggedFeature
    lists as a nested tensor over the steps."""
    context, lists, _ = SequenceExamplePlan(context_features, sequence_features).parse(
        [serialized], None if example_name is None else [example_name], single=True)
    return context, lists


def _names(example_names: Sequence[ExampleName] | None) -> Sequence[ExampleName] | None:
    """TensorFlow's rule: an empty names vector is the same as none (its ops accept 0 names or one per record)."""
    return None if example_names is not None and len(example_names) == 0 else example_names
