"""Decoders for FixedLenFeature and FixedLenSequenceFeature (dense results)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tfr_torch.decode.convert import NUMPY_OF_WIRE, direct_numpy, nest, wire_default
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, string, wire_kind
from tfr_torch.decode.units import Units
from tfr_torch.format.options import FeatureKind

__all__ = ["DenseBlock", "FixedLenDecoder", "FixedLenSequenceDecoder", "StepSequenceDecoder"]


def _shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


class FixedLenDecoder:
    """FixedLenFeature: dense `[B, *shape]`."""

    def __init__(self, key: str, spec: FixedLenFeature) -> None:
        self.key, self.spec = key, spec
        self.kind = wire_kind(spec.dtype)
        self.count = math.prod(spec.shape)
        self.default: Any = None if spec.default_value is None else wire_default(
            spec.default_value, spec.dtype, self.count, key, "FixedLenFeature")
        if self.count == 0:  # TensorFlow reads an empty default as none: a feature of no values stays required
            self.default = None
        # the numpy dtype of the wire values when they are the result's values as they are (no conversion)
        self._direct = direct_numpy(spec.dtype)
        self._scalar = not spec.shape
        self._string_scalar = spec.dtype == string and not spec.shape
        # one string per example: the compiled kernel may leave the values in the records (see plan.py)
        self.kernel_spans = (key,) if self._string_scalar else ()
        # float32 or int64 values as they are, at least one per example: a column of the kernel's dense block
        self.kernel_dense = self._direct is not None and self.count > 0

    def wire_keys(self) -> dict[str, FeatureKind]:
        return {self.key: self.kind}

    def fast(self, arena: Any, column: tuple[Any, ...], b: int, single: bool) -> Any:
        """The result from the compiled kernel's output (an arena and this key's column, see plan.py) when every
        example holds the feature with its number of values and no conversion is needed (float32 or int64
        values, or one string per example): views of the arena, no checks, no copies. None: take __call__."""
        if column[4] != self.count or not self.count:  # column[4]: the count every example has, else -1
            return None
        if self._string_scalar:
            values = column[2]  # a list of bytes, or a RecordSpans for the transport (never for one example)
            return values[0] if single else values
        if self._direct is None:
            return None
        values = np.frombuffer(arena, self._direct, column[3], column[2])
        if self._scalar and not single:  # already [B]
            return torch.from_numpy(values)
        # one example: its row shaped at once (indexing a [1, ...] tensor costs a torch op)
        return torch.from_numpy(values.reshape(self.spec.shape) if single else values.reshape(b, *self.spec.shape))

    def __call__(self, units: Units, single: bool = False) -> Any:
        key, n, spec = self.key, self.count, self.spec
        col = units.column(key, self.kind)
        if col.uniform == n and units.n:  # every example has the feature with n values: no checks, no copies
            if spec.dtype == string:
                if not spec.shape:
                    return col.values[0] if single else col.values
            else:
                b = units.n
                tensor = units.convert(np.asarray(col.values).reshape(b, n), spec.dtype, key,
                                       lambda pos: pos // max(n, 1)).reshape(b, *spec.shape)
                return tensor[0] if single else tensor
        if units.n == 1 and col.present[0] and col.counts[0] == n:  # one example with its feature: few array calls
            if spec.dtype == string:
                row = nest(list(col.values), spec.shape)
                return row if single else [row]
            tensor = units.convert(np.asarray(col.values), spec.dtype, key, lambda pos: 0).reshape(1, *spec.shape)
            return tensor[0] if single else tensor
        present = col.present
        if units.what == "context feature" and not present.all():
            # a SequenceExample's context: TensorFlow reads a Feature with no kind set as present with no values
            # (in an Example it counts as missing)
            present = present | _kindless(units, key)
        missing = ~present
        # the first example that is missing a required feature or holds another count of values: TensorFlow
        # checks example by example, so whichever comes first is the one to name
        wrong = present & (col.counts != n)
        bad = (wrong | missing) if self.default is None else wrong
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            found = int(col.counts[i])
            if missing[i]:
                detail = (f"is required but missing (FixedLenFeature with shape {_shape_text(spec.shape)}, "
                          f"{self.kind}, and no default_value)")
            elif found == 0:
                detail = (f"holds an empty list, expected {n} {self.kind} values (shape {_shape_text(spec.shape)}); "
                          "an empty list is an error even with a default_value, as in TensorFlow")
            else:
                detail = f"holds {found} {self.kind} values, expected {n} (shape {_shape_text(spec.shape)})"
            # a value of an earlier example that does not fit the dtype is that example's problem, so it comes first
            before = int(col.counts[:i].sum())  # the earlier examples all hold n values (or none)
            raise units.first_error(key, i, detail, col.values, before, spec.dtype,
                                    lambda pos: int(np.flatnonzero(col.present[:i])[pos // max(n, 1)]))
        b = units.n
        if spec.dtype == string:
            if not spec.shape and not missing.any():  # the common case: one string per example
                return col.values[0] if single else list(col.values)
            rows, it = [], iter(col.values)
            for i in range(b):
                flat = [next(it) for _ in range(n)] if present[i] else list(self.default)
                rows.append(nest(flat, spec.shape))
            return rows[0] if single else rows
        if missing.any():
            array = np.empty((b, n), dtype=NUMPY_OF_WIRE[self.kind])
            array[present] = np.asarray(col.values).reshape(int(present.sum()), n)
            array[missing] = self.default
        else:
            array = np.asarray(col.values).reshape(b, n)
        tensor = units.convert(array, spec.dtype, key, lambda pos: pos // max(n, 1)).reshape(b, *spec.shape)
        return tensor[0] if single else tensor


def _kindless(units: Units, key: str) -> np.ndarray:
    """Per unit, True where its Feature of `key` is there with no kind set (raw bytes b"")."""
    if units.raw_columns is not None and key in units.raw_columns:
        raws: Sequence[bytes | None] = units.raw_columns[key]
    else:
        raws = [m.get(key) for m in units.maps]
    return np.array([raw is not None and len(raw) == 0 for raw in raws], dtype=bool).reshape(units.n)


class DenseBlock:
    """The FixedLenFeatures whose values the compiled kernel lays out back to back (ExampleDecoder's `dense`
    columns) when every example holds each with its count, grouped by dtype and shape: each group's values are one
    array, so a batch's tensors of a group are made by one view and one unbind, however many features it has.
    Groups of fewer than MIN_GROUP features are left to FixedLenDecoder.fast (a view each costs no more there).

    `decoders` in the spec's order; `wire_at`: each key's column in the kernel's output."""

    MIN_GROUP = 3

    def __init__(self, decoders: Mapping[str, Any], wire_at: Mapping[str, int]) -> None:
        groups: dict[tuple[Any, tuple[int, ...]], list[str]] = {}
        for key, decoder in decoders.items():
            if getattr(decoder, "kernel_dense", False) and key in wire_at:
                groups.setdefault((decoder._direct, tuple(decoder.spec.shape)), []).append(key)
        # per group: (numpy dtype, shape, keys, the column of its first key, values per example)
        self.groups = [(dtype, shape, tuple(keys), wire_at[keys[0]], math.prod(shape))
                       for (dtype, shape), keys in groups.items() if len(keys) >= self.MIN_GROUP]
        self.keys = frozenset(key for group in self.groups for key in group[2])
        self.pairs = np.array([(wire_at[key], count) for _, _, keys, _, count in self.groups for key in keys],
                              dtype=np.int64).reshape(-1, 2).tobytes()  # ExampleDecoder's `dense`

    def views(self, arena: Any, columns: Sequence[tuple[Any, ...]], b: int, single: bool,
              result: dict[str, Any]) -> None:
        """Put every feature's tensor, a view of the arena, into `result` (the kernel said the block is laid out:
        every example holds each feature with its count, float32 or int64 values as they are)."""
        for dtype, shape, keys, first, count in self.groups:
            block = np.frombuffer(arena, dtype, len(keys) * b * count, columns[first][2])
            shaped = block.reshape(len(keys), *shape) if single else block.reshape(len(keys), b, *shape)
            result.update(zip(keys, torch.from_numpy(shaped).unbind(0)))


class FixedLenSequenceDecoder:
    """FixedLenSequenceFeature in an Example: `[B, T, *shape]`, rows padded with default_value (or 0)."""

    def __init__(self, key: str, spec: FixedLenSequenceFeature) -> None:
        if not spec.allow_missing:
            raise ValueError(f"FixedLenSequenceFeature {key!r}: parse_example needs allow_missing=True (as in "
                             "TensorFlow: 'FixedLenSequenceFeature requires allow_missing to be True')")
        self.key, self.spec = key, spec
        self.kind = wire_kind(spec.dtype)
        self.count = math.prod(spec.shape)
        self.pad = (b"" if spec.dtype == string else 0) if spec.default_value is None else wire_default(
            spec.default_value, spec.dtype, 1, key, "FixedLenSequenceFeature (a scalar default_value pads rows)")[0]

    def wire_keys(self) -> dict[str, FeatureKind]:
        return {self.key: self.kind}

    def __call__(self, units: Units, single: bool = False) -> Any:
        key, n, spec = self.key, self.count, self.spec
        col = units.column(key, self.kind)
        if n == 0:
            nonempty = col.counts > 0
            if nonempty.any():
                raise units.error(key, int(np.flatnonzero(nonempty)[0]), "holds values, but its shape has no elements")
            steps = np.zeros(units.n, dtype=np.int64)
        else:
            uneven = col.counts % n != 0
            if uneven.any():
                i = int(np.flatnonzero(uneven)[0])
                ends = np.cumsum(col.counts)
                raise units.first_error(key, i, f"holds {int(col.counts[i])} {self.kind} values, not a multiple of "
                                                f"{n} (FixedLenSequenceFeature shape {_shape_text(spec.shape)})",
                                        col.values, int(col.counts[:i].sum()), spec.dtype,
                                        lambda pos: int(np.searchsorted(ends, pos, side="right")), by_example=True)
            steps = col.counts // n
        return _pad(col.values, col.counts, steps, units, self, single)


class StepSequenceDecoder:
    """FixedLenSequenceFeature in SequenceExample feature lists: each step holds exactly prod(shape) values;
    result `[B, T, *shape]` zero-padded (`[T, *shape]` for one example), plus the lengths T."""

    def __init__(self, key: str, spec: FixedLenSequenceFeature) -> None:
        if spec.default_value is not None:
            raise ValueError(f"FixedLenSequenceFeature {key!r}: a default_value is not allowed in sequence_features "
                             "(as in TensorFlow); padding is 0 or b''")
        self.key, self.spec = key, spec
        self.kind = wire_kind(spec.dtype)
        self.count = math.prod(spec.shape)
        self.pad = b"" if spec.dtype == string else 0

    def __call__(self, steps: Units, steps_per_example: np.ndarray, single: bool) -> Any:
        key, n, spec = self.key, self.count, self.spec
        col = steps.column(key, self.kind)
        wrong = col.counts != n
        if wrong.any():
            u = int(np.flatnonzero(wrong)[0])
            detail = ("has no values (a Feature with no kind set)" if not col.present[u] else
                      f"holds {int(col.counts[u])} {self.kind} values, expected {n} per step (shape "
                      f"{_shape_text(spec.shape)})")
            raise steps.error(key, u, detail)
        return _pad(col.values, steps_per_example * n, steps_per_example, steps, self, single, by_step=True)


def _pad(values: Any, counts: np.ndarray, steps: np.ndarray, units: Units, decoder: Any, single: bool,
         by_step: bool = False) -> Any:
    """Lay out each example's values as `[T_i, *shape]`, padded to the longest T in the batch. `by_step`: the
    units are the steps (feature lists), so a value that does not convert is named by its example and step."""
    spec, n = decoder.spec, decoder.count
    b = len(counts)
    if single and b == 1 and spec.dtype != string:  # one example: its values are the result, nothing to pad
        count = int(counts[0])
        array = np.array(values[:count], dtype=NUMPY_OF_WIRE[decoder.kind])  # a copy of its own
        if by_step:
            tensor = units.convert(array, spec.dtype, decoder.key, lambda pos: pos // max(n, 1))
        else:
            tensor = units.convert(array, spec.dtype, decoder.key, lambda pos: 0, by_example=True)
        return tensor.reshape(int(steps[0]), *spec.shape)
    longest = int(steps.max()) if b else 0
    if spec.dtype == string:
        rows, it = [], iter(values)
        for i in range(b):
            flat = [next(it) for _ in range(int(counts[i]))]
            flat += [decoder.pad] * ((longest - int(steps[i])) * n if not single else 0)
            rows.append(nest(flat, ((int(steps[i]) if single else longest), *spec.shape)))
        return rows[0] if single else rows
    array = np.full((b, longest * n), decoder.pad, dtype=NUMPY_OF_WIRE[decoder.kind])
    if len(values):  # each row's first counts[i] places, in row-major order: the values as they come
        array[np.arange(longest * n) < counts[:, None]] = values
    row = max(longest * n, 1)
    if by_step:  # position -> the step's unit: the example's first step, plus the step within the row
        first = np.concatenate([[0], np.cumsum(steps)[:-1]]).astype(np.int64) if b else np.zeros(0, np.int64)
        tensor = units.convert(array, spec.dtype, decoder.key,
                               lambda pos: int(first[pos // row]) + (pos % row) // max(n, 1))
    else:
        tensor = units.convert(array, spec.dtype, decoder.key, lambda pos: pos // row, by_example=True)
    tensor = tensor.reshape(b, longest, *spec.shape)
    if single:
        return tensor[0, : int(steps[0])]
    return tensor
