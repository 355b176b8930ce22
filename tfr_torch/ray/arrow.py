"""From tfr_torch's decoded batches to Arrow tables (Ray Data blocks), column by column.

A batch from `ExamplePlan.parse` becomes one `pyarrow.Table`, with the column types Ray users expect:

| spec | Arrow column |
|---|---|
| `FixedLenFeature([], dtype)` numeric | a plain column of `dtype` |
| `FixedLenFeature(shape, dtype)` numeric | Ray's tensor column of `shape` and `dtype` (`ArrowTensorArray`) |
| `FixedLenFeature(shape, string)` | binary (or utf-8 on request); fixed-size lists of them for a shape |
| `VarLenFeature(dtype)` | a list column |
| `FixedLenSequenceFeature(shape, dtype)` numeric | Ray's variable-shaped tensor column `[T, *shape]` (T per row) |
| `RaggedFeature(dtype, ...)` | nested list columns, one level per ragged dimension |

SequenceExamples (a `SequenceFeatures`) are made by `SequenceBlockMaker`: their context as above, their feature lists
one column each (see its docstring).

SparseFeature has no column form here: read its index and value keys as VarLenFeature columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from tfr_torch.decode.specs import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    UniformRowLength,
    VarLenFeature,
    string,
)
from tfr_torch.decode.results import step_rows
from tfr_torch.decode.sequence_plan import SequenceExamplePlan
from tfr_torch.errors import DecodeError
from tfr_torch.format.location import ExampleName, location_of

__all__ = ["BlockMaker", "SequenceBlockMaker", "block_maker", "RAW_COLUMN"]

RAW_COLUMN = "bytes"  # the column of raw records (features=None), as ray.data.read_binary_files names it

_ARROW_OF_TORCH = {
    torch.float32: pa.float32(), torch.float64: pa.float64(), torch.float16: pa.float16(),
    torch.int64: pa.int64(), torch.int32: pa.int32(), torch.int16: pa.int16(), torch.int8: pa.int8(),
    torch.uint8: pa.uint8(), torch.bool: pa.bool_(),
}


def _text_keys(specs: Sequence[Mapping[str, Any]], utf8: bool | Sequence[str]) -> set[str]:
    """The string features of `specs` read as utf-8 text: `utf8` False (none), True (all) or their keys, checked."""
    strings = {k for spec in specs for k, s in spec.items() if getattr(s, "dtype", None) == string}
    if isinstance(utf8, bool):
        return strings if utf8 else set()
    if isinstance(utf8, str):
        raise TypeError(f"utf8 must be a bool or a list of feature keys, got the string {utf8!r}")
    text = set(utf8)
    unknown = sorted(text - {k for spec in specs for k in spec})
    if unknown:
        raise ValueError(f"utf8 names features that are not in the spec: {unknown}")
    if text - strings:
        raise ValueError(f"utf8 names features that are not string features: {sorted(text - strings)}")
    return text


def _value_type(key: str, dtype: Any, text: bool) -> pa.DataType:
    if dtype == string:
        return pa.string() if text else pa.binary()
    arrow = _ARROW_OF_TORCH.get(dtype)
    if arrow is None:
        raise TypeError(f"feature {key!r}: {dtype} has no Arrow type (Ray Data blocks are Arrow tables); ask for "
                        "torch.float32 or torch.float16 and convert after reading")
    return arrow


def _fixed_lists(value: pa.DataType, shape: Sequence[int]) -> pa.DataType:
    for size in reversed(shape):
        value = pa.list_(value, size)
    return value


def _offsets(counts: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def _list_array(values: pa.Array, splits: np.ndarray) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(np.asarray(splits, dtype=np.int32), pa.int32()), values)


def _fixed_list_array(values: pa.Array, shape: Sequence[int]) -> pa.Array:
    for size in reversed(shape):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    return values


class BlockMaker:
    """Builds one Arrow table from the records of one batch, decoded with the spec's compiled plan.

    `utf8`: False (string features as binary), True (every string feature as utf-8 text) or the keys to read as
    text. The spec is checked when the maker is built, so a spec with no column form fails before any task runs.
    """

    def __init__(self, features: Mapping[str, Any], utf8: bool | Sequence[str] = False) -> None:
        from tfr_torch.decode.plan import compile_features

        self.features = dict(features)
        self.text = _text_keys([self.features], utf8)
        self.types: dict[str, pa.DataType] = {}
        twins = {}
        for key, spec in self.features.items():
            if isinstance(spec, SparseFeature):
                raise TypeError(f"feature {key!r}: SparseFeature has no column form in Ray Data; read its index key(s) "
                                f"{list(spec.index_keys)} and value key {spec.value_key!r} as VarLenFeature columns")
            value = _value_type(key, spec.dtype, key in self.text)
            if isinstance(spec, FixedLenFeature):
                self.types[key] = value if spec.dtype == string or not spec.shape else None  # tensors: Ray's type
                if spec.dtype == string:
                    self.types[key] = _fixed_lists(value, spec.shape)
            elif isinstance(spec, VarLenFeature):
                self.types[key] = pa.list_(value)
            elif isinstance(spec, FixedLenSequenceFeature):
                if not spec.allow_missing:
                    raise ValueError(f"feature {key!r}: FixedLenSequenceFeature needs allow_missing=True in "
                                     "tf.train.Example records (as in tf.io.parse_example)")
                wire = string if spec.dtype == string else (
                    torch.float32 if isinstance(spec.dtype, torch.dtype) and spec.dtype.is_floating_point
                    else torch.int64)
                twins[key] = VarLenFeature(wire)  # each row's true number of steps (the padded result hides it)
                self.types[key] = pa.list_(_fixed_lists(value, spec.shape)) if spec.dtype == string else None
            elif isinstance(spec, RaggedFeature):
                tail: list[int] = []
                for p in reversed(spec.partitions):
                    if not isinstance(p, UniformRowLength):
                        break
                    tail.insert(0, p.length)
                arrow = _fixed_lists(value, tail)
                for _ in range(len(spec.partitions) - len(tail) + 1):
                    arrow = pa.list_(arrow)
                self.types[key] = arrow
            else:
                raise TypeError(f"feature {key!r}: expected a FixedLenFeature, VarLenFeature, "
                                f"FixedLenSequenceFeature or RaggedFeature, got {spec!r}")
        self.plan = compile_features(self.features)
        self.twin_plan = compile_features(twins) if twins else None

    def schema_hint(self) -> dict[str, pa.DataType | None]:
        """Arrow type of each column, None for Ray's tensor columns."""
        return dict(self.types)

    def make(self, records: Sequence[bytes], names: Sequence[ExampleName]) -> pa.Table:
        """Decode `records` (named by their RecordLocation in `names`, read only for error messages) into a table."""
        batch = self.plan.parse(records, names)
        twins = self.twin_plan.parse(records, names) if self.twin_plan is not None else {}
        columns = {key: self._column(key, spec, batch, twins, names) for key, spec in self.features.items()}
        return pa.table(columns)

    # ----- one column -------------------------------------------------------------------------------------------

    def _column(self, key: str, spec: Any, batch: dict[str, Any], twins: dict[str, Any],
                names: Sequence[ExampleName]) -> pa.Array:
        result = batch[key]
        if isinstance(spec, FixedLenFeature):
            if spec.dtype == string:
                return self._strings(key, pa.array(result, _as_binary(self.types[key])), names)
            array = result.numpy()
            if not spec.shape:
                return pa.array(array, self.types[key])
            from ray.data.extensions import ArrowTensorArray

            return ArrowTensorArray.from_numpy(array, column_name=key)
        if isinstance(spec, VarLenFeature):
            n = len(names)
            if spec.dtype == string:
                counts = np.fromiter((len(row) for row in result), dtype=np.int64, count=n)
                flat = pa.array([v for row in result for v in row], pa.binary())
                return self._strings(key, _list_array(flat, _offsets(counts)), names)
            indices = result._indices().numpy()
            counts = np.bincount(indices[0], minlength=n) if indices.shape[1] else np.zeros(n, dtype=np.int64)
            values = pa.array(result._values().numpy(), _value_type(key, spec.dtype, False))
            return _list_array(values, _offsets(counts))
        if isinstance(spec, FixedLenSequenceFeature):
            return self._sequence(key, spec, result, twins[key], names)
        return self._ragged(key, spec, result, names)

    def _sequence(self, key: str, spec: FixedLenSequenceFeature, padded: Any, twin: Any,
                  names: Sequence[ExampleName]) -> pa.Array:
        n = len(names)
        width = max(math.prod(spec.shape), 1)
        if spec.dtype == string:
            row_steps = [len(row) // width for row in twin]
            kept = [padded[i][: row_steps[i]] for i in range(n)]
            return self._strings(key, pa.array(kept, _as_binary(self.types[key])), names)
        indices = twin._indices().numpy()
        counts = np.bincount(indices[0], minlength=n) if indices.shape[1] else np.zeros(n, dtype=np.int64)
        steps = counts // width if math.prod(spec.shape) else np.zeros(n, dtype=np.int64)
        array = padded.numpy()
        from ray.data.extensions import ArrowVariableShapedTensorArray

        if n == 0:
            return ArrowVariableShapedTensorArray.from_numpy(np.empty(0, dtype=object))
        rows = np.empty(n, dtype=object)
        for i, t in enumerate(steps.tolist()):
            rows[i] = array[i, :t]
        return ArrowVariableShapedTensorArray.from_numpy(rows)

    def _ragged(self, key: str, spec: RaggedFeature, result: Any, names: Sequence[ExampleName]) -> pa.Array:
        if spec.dtype == string:
            return self._strings(key, pa.array(result, _as_binary(self.types[key])), names)
        value_type = _value_type(key, spec.dtype, False)
        if isinstance(result, torch.Tensor) and result.is_nested:
            # a jagged nested tensor has offsets(); torch.Tensor's stubs do not declare it
            values, levels = result.values(), [result.offsets().numpy()]  # type: ignore[attr-defined]
        else:
            values, levels = result.values, [s.numpy() for s in result.nested_row_splits]
        inner = values.shape[1:]
        array = _fixed_list_array(pa.array(values.numpy().reshape(-1), value_type), inner)
        for splits in reversed(levels):
            array = _list_array(array, splits)
        return array

    def _strings(self, key: str, array: pa.Array, names: Sequence[ExampleName]) -> pa.Array:
        """Binary values as asked: kept, or checked and cast to utf-8 text (an invalid row raises naming it)."""
        if key not in self.text:
            return array
        try:
            return array.cast(self.types[key])
        except pa.ArrowInvalid:
            for i in range(len(array)):
                try:  # a row copied out: a slice of a list array casts (and checks) all its list's values
                    pa.array(array.slice(i, 1).to_pylist(), array.type).cast(self.types[key])
                except pa.ArrowInvalid:
                    path, offset = location_of(names[i])
                    raise DecodeError(f"feature {key!r} in example {i} is not valid UTF-8 text (it was asked for "
                                      "as utf8); read it as binary", path, offset, key=key, index=i) from None
            raise


class SequenceBlockMaker(BlockMaker):
    """Turns batches of tf.train.SequenceExample records into Arrow tables: one column per context feature (as
    BlockMaker makes them, from the context parse_sequence_example reads) and one per feature list,
    each row that record's steps:

    | feature list | Arrow column |
    |---|---|
    | `FixedLenSequenceFeature(shape, dtype)` numeric | Ray's variable-shaped tensor column `[T, *shape]` |
    | `FixedLenSequenceFeature(shape, string)` | a list (steps) of binary values / fixed-size lists of them |
    | `VarLenFeature(dtype)`, `RaggedFeature(dtype)` without partitions | a list (steps) of lists |

    Context and feature-list keys share the table's columns, so a key may not be in both."""

    def __init__(self, features: Any, utf8: bool | Sequence[str] = False) -> None:
        context, sequence = dict(features.context), dict(features.sequence)
        both = sorted(set(context) & set(sequence))
        if both:
            raise ValueError(f"features {both} are both context features and feature lists: Ray Data gives each "
                             "key one column; read them in two passes, one spec each")
        text = _text_keys([context, sequence], utf8)
        super().__init__(context, sorted(text & set(context)))
        self.text = text
        self.sequence = sequence
        self.context_plan = SequenceExamplePlan(context, {}) if context else None
        self.sequence_plan = SequenceExamplePlan({}, sequence) if sequence else None
        for key, spec in sequence.items():
            value = _value_type(key, spec.dtype, key in text)
            if isinstance(spec, FixedLenSequenceFeature):
                self.types[key] = None if spec.dtype != string else pa.list_(_fixed_lists(value, spec.shape))
            elif isinstance(spec, VarLenFeature) or (isinstance(spec, RaggedFeature) and not spec.partitions):
                self.types[key] = pa.list_(pa.list_(value))
            else:
                raise TypeError(f"feature list {key!r}: expected a FixedLenSequenceFeature, VarLenFeature or "
                                f"RaggedFeature without partitions, got {spec!r}")

    def make(self, records: Sequence[bytes], names: Sequence[ExampleName]) -> pa.Table:
        # the context as parse_sequence_example reads it: each record is parsed whole as a SequenceExample (its
        # feature lists too, as TensorFlow does) and an error says the record is not one
        columns: dict[str, Any] = {}
        if self.context_plan is not None:
            context = self.context_plan.parse(records, names)[0]
            columns = {key: self._column(key, spec, context, {}, names) for key, spec in self.features.items()}
        if self.sequence_plan is not None:
            # record by record: each record's steps as parse_single_sequence_example gives them
            steps = [self.sequence_plan.parse([record], [names[i]], single=True)[1]
                     for i, record in enumerate(records)]
            for key, spec in self.sequence.items():
                columns[key] = self._steps(key, spec, [s[key] for s in steps], names)
        return pa.table(columns)

    def _steps(self, key: str, spec: Any, values: list[Any], names: Sequence[ExampleName]) -> pa.Array:
        if isinstance(spec, FixedLenSequenceFeature) and spec.dtype != string:
            from ray.data.extensions import ArrowVariableShapedTensorArray

            rows = np.empty(len(values), dtype=object)
            for i, value in enumerate(values):
                rows[i] = value.numpy()
            return ArrowVariableShapedTensorArray.from_numpy(rows)
        if spec.dtype == string:
            return self._strings(key, pa.array([_plain(v) for v in values], _as_binary(self.types[key])), names)
        return pa.array([[row.tolist() for row in step_rows(v)] for v in values], self.types[key])


def _plain(value: Any) -> Any:
    """Strings per step as lists (of lists) of bytes."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if hasattr(value, "to_list"):
        return value.to_list()
    return [_plain(v) for v in value]


def block_maker(features: Any, utf8: bool | Sequence[str] = False) -> BlockMaker:
    """The block maker of a spec: Examples (a dict) or SequenceExamples (`SequenceFeatures`)."""
    from tfr_torch.decode.sequence_features import SequenceFeatures

    if isinstance(features, SequenceFeatures):
        return SequenceBlockMaker(features, utf8)
    return BlockMaker(features, utf8)


def _as_binary(arrow: pa.DataType) -> pa.DataType:
    """The same nesting with binary values (strings are decoded as binary first, then cast when asked)."""
    if pa.types.is_string(arrow):
        return pa.binary()
    if pa.types.is_fixed_size_list(arrow):
        return pa.list_(_as_binary(arrow.value_type), arrow.list_size)
    if pa.types.is_list(arrow):
        return pa.list_(_as_binary(arrow.value_type))
    return arrow
