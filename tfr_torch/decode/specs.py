"""Feature specs with TensorFlow's names, arguments and defaults (tf.io.FixedLenFeature, ...).

A spec says what to decode and into which torch dtype. The wire carries only int64, float32 and bytes:
integer and bool dtypes read int64 lists, floating dtypes read float lists, `tfr_torch.string` reads bytes lists.
Asking for a narrower dtype than the wire's (int64 -> int32/uint8/bool, float32 -> float16/bfloat16) converts;
an integer that does not fit raises DecodeError naming the key.
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
import torch

from tfr_torch.decode.dtypes import DTYPE_NAMES, DType, string
from tfr_torch.format.options import FeatureKind

__all__ = [
    "string",
    "FixedLenFeature",
    "VarLenFeature",
    "SparseFeature",
    "RaggedFeature",
    "FixedLenSequenceFeature",
    "RowLengths",
    "RowSplits",
    "RowStarts",
    "RowLimits",
    "ValueRowIds",
    "UniformRowLength",
    "FeatureSpec",
    "normalize_dtype",
    "wire_kind",
]

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
# the names of the dtypes a tf.train.Feature can be read into (tfr_torch.decode.dtypes: the one table of names)
_DTYPE_NAMES = {name: dtype for name, dtype in DTYPE_NAMES.items()
                if dtype == string or dtype in _FLOAT_DTYPES or dtype in _INT_DTYPES}


def normalize_dtype(dtype: Any) -> DType:
    """Return a torch dtype or `string` for a torch dtype, a TensorFlow dtype name ("float32", "tf.int64",
    "string"), `bytes`/`str`, or a TensorFlow DType object (by its name)."""
    if isinstance(dtype, torch.dtype):
        if dtype in _FLOAT_DTYPES or dtype in _INT_DTYPES:
            return dtype
        raise ValueError(f"dtype {dtype} cannot be read from a tf.train.Feature: expected a float dtype "
                         f"(read from float_list), an integer or bool dtype (from int64_list), or tfr_torch.string")
    if dtype is bytes or dtype is str or dtype is string:
        return string
    if isinstance(dtype, type) and issubclass(dtype, np.generic) or isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype).name  # numpy dtypes, e.g. np.float32, by name
    name = getattr(dtype, "name", dtype)  # tf.DType has .name
    if isinstance(name, str):
        key = name.removeprefix("tf.").removeprefix("torch.")
        if key in _DTYPE_NAMES:
            return _DTYPE_NAMES[key]
    raise ValueError(f"unknown dtype {dtype!r}: expected torch.float32, torch.int64 (or a narrower torch dtype), "
                     "tfr_torch.string, or TensorFlow's names 'float32', 'int64', 'string'")


def wire_kind(dtype: DType) -> FeatureKind:
    """The feature kind a dtype is read from: 'float', 'int64' or 'bytes'."""
    if dtype == string:
        return "bytes"
    return "float" if dtype in _FLOAT_DTYPES else "int64"


def _freeze(value: Any) -> Any:
    """Make a default_value hashable (nested tuples), so specs can key a cache of compiled plans."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().tolist()
    elif hasattr(value, "tolist") and not isinstance(value, (bytes, str)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


_MAX_ELEMENTS = 1 << 62  # a shape's elements: counts and offsets stay within int64


def _shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{what}: shape must be a sequence of ints, got {shape!r}") from None
    for d in dims:
        if d is None:
            raise ValueError(f"{what}: shape {list(dims)} has an unknown dimension; for variable-length values use "
                             "FixedLenSequenceFeature, VarLenFeature or RaggedFeature")
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise ValueError(f"{what}: shape dimensions must be non-negative ints, got {list(dims)}")
    if math.prod(dims) >= _MAX_ELEMENTS:
        raise ValueError(f"{what}: shape {list(dims)} has {math.prod(dims)} elements, more than any record can hold "
                         f"(the limit is 2**62)")
    return dims


@dataclass(frozen=True)
class FixedLenFeature:
    """A dense feature of a fixed shape, as tf.io.FixedLenFeature: result `[B, *shape]` (no batch dimension in
    the single forms). Missing without `default_value` is an error; a wrong value count is an error."""

    shape: Sequence[int]  # any sequence of ints; stored as a tuple
    dtype: DType
    default_value: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, "FixedLenFeature"))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "default_value", _freeze(self.default_value))


@dataclass(frozen=True)
class VarLenFeature:
    """A variable-length feature, as tf.io.VarLenFeature: a sparse COO tensor `[B, max_len]` with TensorFlow's
    indices (see `tfr_torch.to_padded` for padded dense values with lengths)."""

    dtype: DType

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))


@dataclass(frozen=True)
class SparseFeature:
    """A sparse feature from index and value features, as tf.io.SparseFeature: sparse COO `[B, *size]` sorted by
    index. An index outside `[0, size)` is an error (TensorFlow does not check)."""

    index_key: Union[str, tuple[str, ...]]
    value_key: str
    dtype: DType
    size: Union[int, tuple[int, ...]]
    already_sorted: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        keys = (self.index_key,) if isinstance(self.index_key, str) else tuple(self.index_key)
        sizes = (self.size,) if isinstance(self.size, int) else tuple(self.size)
        if not keys or len(keys) != len(sizes):
            raise ValueError(f"SparseFeature: index_key {self.index_key!r} and size {self.size!r} must have the "
                             "same number of entries")
        if any(not isinstance(s, int) or s < 0 for s in sizes):
            raise ValueError(f"SparseFeature: size must be non-negative ints, got {self.size!r}")
        object.__setattr__(self, "index_key", keys[0] if len(keys) == 1 else keys)
        object.__setattr__(self, "size", sizes[0] if len(sizes) == 1 else sizes)

    @property
    def index_keys(self) -> tuple[str, ...]:
        return (self.index_key,) if isinstance(self.index_key, str) else self.index_key

    @property
    def sizes(self) -> tuple[int, ...]:
        return (self.size,) if isinstance(self.size, int) else self.size


@dataclass(frozen=True)
class RowLengths:
    """Ragged partition: the feature `key` holds the length of each row."""
    key: str


@dataclass(frozen=True)
class RowSplits:
    """Ragged partition: the feature `key` holds row splits (starts at 0, one more entry than rows)."""
    key: str


@dataclass(frozen=True)
class RowStarts:
    """Ragged partition: the feature `key` holds the start offset of each row."""
    key: str


@dataclass(frozen=True)
class RowLimits:
    """Ragged partition: the feature `key` holds the end offset of each row."""
    key: str


@dataclass(frozen=True)
class ValueRowIds:
    """Ragged partition: the feature `key` holds the row id of each value (non-decreasing)."""
    key: str


@dataclass(frozen=True)
class UniformRowLength:
    """Ragged partition: rows of a fixed `length`."""
    length: int


_PARTITIONS = (RowLengths, RowSplits, RowStarts, RowLimits, ValueRowIds, UniformRowLength)
Partition = Union[RowLengths, RowSplits, RowStarts, RowLimits, ValueRowIds, UniformRowLength]


@dataclass(frozen=True)
class RaggedFeature:
    """A ragged feature, as tf.io.RaggedFeature: values (from `value_key`, default the feature's own key) split
    by `partitions`, outermost first. The result is a torch nested tensor (jagged layout) where that can
    represent it, else `RaggedTensor` values plus row splits."""

    dtype: DType
    value_key: Union[str, None] = None
    partitions: Sequence[Partition] = ()  # any sequence of partitions (the README passes a list); stored as a tuple
    row_splits_dtype: torch.dtype = torch.int32
    validate: bool = False

    RowLengths = RowLengths
    RowSplits = RowSplits
    RowStarts = RowStarts
    RowLimits = RowLimits
    ValueRowIds = ValueRowIds
    UniformRowLength = UniformRowLength

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        parts = tuple(self.partitions)
        for p in parts:
            if not isinstance(p, _PARTITIONS):
                raise TypeError(f"RaggedFeature: partitions must be RowLengths, RowSplits, RowStarts, RowLimits, "
                                f"ValueRowIds or UniformRowLength, got {p!r}")
        object.__setattr__(self, "partitions", parts)
        rsd = normalize_dtype(self.row_splits_dtype)
        if rsd not in (torch.int32, torch.int64):
            raise ValueError(f"RaggedFeature: row_splits_dtype must be int32 or int64, got {self.row_splits_dtype!r}")
        object.__setattr__(self, "row_splits_dtype", rsd)


@dataclass(frozen=True)
class FixedLenSequenceFeature:
    """Variable-length rows of fixed-shape items, as tf.io.FixedLenSequenceFeature: `[B, T, *shape]` padded with
    `default_value` (or 0). `allow_missing=True` is required in parse_example."""

    shape: Sequence[int]  # any sequence of ints; stored as a tuple
    dtype: DType
    allow_missing: bool = False
    default_value: Any = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, "FixedLenSequenceFeature"))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "default_value", _freeze(self.default_value))


FeatureSpec = Union[FixedLenFeature, VarLenFeature, SparseFeature, RaggedFeature, FixedLenSequenceFeature]
