"""Result types of batch decoding that torch has no direct equivalent for, and helpers to reshape results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Union, cast

import torch

__all__ = ["RaggedTensor", "SparseBytes", "to_padded"]


@dataclass(frozen=True)
class RaggedTensor:
    """A ragged tensor as values plus row splits, like tf.RaggedTensor, for results a torch nested tensor cannot
    hold (more than one ragged dimension, or bytes values).

    `values` is a tensor (first dimension: the innermost rows' values; further dimensions are uniform) or a
    list of bytes; `nested_row_splits` lists the row splits from the outermost dimension inwards (dtype
    `row_splits_dtype` of the spec). `to_list()` gives the nested Python lists, as tf.RaggedTensor.to_list().
    """

    values: Union[torch.Tensor, list[bytes]]
    nested_row_splits: tuple[torch.Tensor, ...]

    @property
    def row_splits(self) -> torch.Tensor:
        """The outermost row splits."""
        return self.nested_row_splits[0]

    @property
    def ragged_rank(self) -> int:
        return len(self.nested_row_splits)

    def __len__(self) -> int:
        return len(self.nested_row_splits[0]) - 1

    def to_list(self) -> list[Any]:
        values: Any = self.values.tolist() if isinstance(self.values, torch.Tensor) else list(self.values)
        for splits in reversed(self.nested_row_splits):
            bounds = splits.tolist()
            values = [values[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]
        nested: list[Any] = values
        return nested


class SparseBytes(NamedTuple):
    """A sparse tensor of bytes values (torch sparse tensors hold numbers only): `indices` is an int64 tensor
    [N, ndim] as in tf.SparseTensor, `values` a list of N bytes, `dense_shape` a tuple."""

    indices: torch.Tensor
    values: list[bytes]
    dense_shape: tuple[int, ...]

    def to_list(self, default: bytes = b"") -> list[Any]:
        """Dense nested lists, missing entries filled with `default` (as tf.sparse.to_dense)."""
        def build(shape: tuple[int, ...]) -> list[Any]:
            if len(shape) > 1:
                return [build(shape[1:]) for _ in range(shape[0])]
            return [default] * (shape[0] if shape else 1)
        out: Any = build(self.dense_shape)
        for idx, value in zip(self.indices.tolist(), self.values):
            cell = out
            for i in idx[:-1]:
                cell = cell[i]
            cell[idx[-1]] = value
        rows: list[Any] = out
        return rows


def to_padded(sparse: torch.Tensor, padding_value: Any = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn a VarLenFeature result (sparse COO `[B, max_len]`) into padded dense values and lengths.

    Most torch models want `(values [B, max_len], lengths [B])` rather than a sparse tensor; this gives them,
    padding with `padding_value`. Works on the 3-D results of VarLenFeature in SequenceExample feature lists too
    (lengths then have shape [B, T]).

    >>> import tfr_torch, torch
    >>> records = [tfr_torch.encode_example({"t": [1, 2, 3]}), tfr_torch.encode_example({"t": [4]})]
    >>> values, lengths = to_padded(tfr_torch.parse_example(records, {"t": tfr_torch.VarLenFeature(torch.int64)})["t"])
    >>> values.tolist(), lengths.tolist()
    ([[1, 2, 3], [4, 0, 0]], [3, 1])
    """
    if not isinstance(sparse, torch.Tensor) or sparse.layout != torch.sparse_coo:
        raise TypeError(f"to_padded expects a sparse COO tensor (a VarLenFeature result), got {type(sparse).__name__}")
    sparse = sparse.coalesce()
    indices, values = sparse.indices(), sparse.values()
    dense = torch.full(tuple(sparse.shape), padding_value, dtype=sparse.dtype)
    dense[tuple(indices)] = values
    # a row's length is its last position + 1 (VarLen positions run 0..len-1)
    rows = torch.zeros(indices.shape[1], dtype=torch.int64)
    for d, size in enumerate(sparse.shape[:-1]):
        rows = rows * size + indices[d]
    lengths = torch.zeros(int(torch.tensor(sparse.shape[:-1]).prod()), dtype=torch.int64)
    lengths.scatter_reduce_(0, rows, indices[-1] + 1, reduce="amax")
    return dense, lengths.reshape(tuple(sparse.shape[:-1]))


def _rows_of(value: Any, n: int) -> Sequence[Any]:
    """The n rows of a FixedLenFeature or VarLenFeature batch result, each as parse_single_example gives it:
    views of a dense tensor's rows; a sparse [n, max_len] tensor cut into [len] tensors of each row's values;
    a list's items."""
    if not isinstance(value, torch.Tensor):
        return cast("Sequence[Any]", value)
    if not value.is_sparse:
        return value.unbind(0)
    indices = value.indices()
    ends = torch.bincount(indices[0], minlength=n).cumsum(0).tolist()
    positions: Any = indices[1:]
    values: Any = value.values()
    if values.dtype in _NUMPY_SLICES:  # numpy views of the rows: a slice costs a tenth of a torch op
        positions, values = positions.numpy(), values.numpy()
        to_tensor: Any = torch.from_numpy
    else:
        to_tensor = _same
    rows, start = [], 0
    for end in ends:
        rows.append(torch.sparse_coo_tensor(to_tensor(positions[:, start:end]), to_tensor(values[start:end]),
                                            (end - start,), is_coalesced=True, check_invariants=False))
        start = end
    return rows


_NUMPY_SLICES = {torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.float64, torch.float32,
                 torch.float16, torch.bool}


def _same(value: Any) -> Any:
    return value


def step_rows(value: Any) -> list[torch.Tensor]:
    """Each step's values of a feature list as parse_single_sequence_example gives it (a 2-D sparse tensor for a
    VarLenFeature, a nested tensor or a RaggedTensor for a RaggedFeature): one tensor per step, in order, empty
    steps included."""
    if isinstance(value, torch.Tensor) and value.is_sparse:
        sparse = value.coalesce()
        counts = torch.bincount(sparse.indices()[0], minlength=int(value.shape[0])).tolist()
        return list(sparse.values().split(counts))
    if isinstance(value, torch.Tensor):
        return list(value.unbind(0))
    return [torch.as_tensor(row) for row in value.to_list()]
