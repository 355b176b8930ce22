"""Decoder for RaggedFeature: a torch nested tensor (jagged layout) when the result has one ragged dimension and
numeric values, otherwise a RaggedTensor (values plus nested row splits); bytes values as nested lists."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfr_torch.decode.convert import nest
from tfr_torch.decode.results import RaggedTensor
from tfr_torch.decode.specs import (
    RaggedFeature,
    RowLengths,
    RowLimits,
    RowSplits,
    RowStarts,
    UniformRowLength,
    ValueRowIds,
    string,
    wire_kind,
)
from tfr_torch.decode.units import Units
from tfr_torch.errors import DecodeError
from tfr_torch.format.columns import Column
from tfr_torch.format.options import FeatureKind

__all__ = ["RaggedDecoder", "MAX_EMPTY_ROWS"]


# A ValueRowIds partition can describe rows that hold no values (ids [0, 5]: rows 1-4 empty) for free: a row id
# of 10**12 in a 33-byte record would ask for 8 TB of row splits. At most this many empty rows per unit.
MAX_EMPTY_ROWS = 1 << 16


def _decreases(data: np.ndarray) -> bool:
    return bool(len(data) > 1 and (data[1:] < data[:-1]).any())


def _splits_of(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out


class RaggedDecoder:
    """RaggedFeature over units (examples, or feature-list steps). Partitions are always validated: row
    partitions that do not match the values raise DecodeError (TensorFlow, with validate=False, would build an
    inconsistent tensor)."""

    def __init__(self, key: str, spec: RaggedFeature) -> None:
        self.key, self.spec = key, spec
        self.kind = wire_kind(spec.dtype)
        self.value_key = spec.value_key or key
        for p in spec.partitions:
            if isinstance(p, UniformRowLength) and (not isinstance(p.length, int) or p.length <= 0):
                raise ValueError(f"RaggedFeature {key!r}: UniformRowLength needs a positive length, got {p.length!r}")
        # UniformRowLength partitions innermost (after the last row partition) fold into the values' shape
        tail: list[int] = []
        for p in reversed(spec.partitions):
            if not isinstance(p, UniformRowLength):
                break
            tail.insert(0, p.length)
        self.inner_shape = tuple(tail)
        self.row_partitions = spec.partitions[: len(spec.partitions) - len(tail)]

    def wire_keys(self) -> dict[str, FeatureKind]:
        keys: dict[str, FeatureKind] = {p.key: "int64" for p in self.spec.partitions
                                        if not isinstance(p, UniformRowLength)}
        keys[self.value_key] = self.kind
        return keys

    def __call__(self, units: Units, single: bool = False, steps_per_example: np.ndarray | None = None) -> Any:
        values = units.column(self.value_key, self.kind)
        width = int(np.prod(self.inner_shape)) if self.inner_shape else 1
        uneven = values.counts % width != 0
        first_uneven = int(np.flatnonzero(uneven)[0]) if uneven.any() else units.n
        ends = np.cumsum(values.counts)

        def unit_of(pos: int) -> int:
            return int(np.searchsorted(ends, pos, side="right"))

        rows = values.counts // width
        levels: list[np.ndarray] = []  # row splits, outermost first, concatenated over units
        per_unit: list[tuple[int, list[np.ndarray]]] = []
        columns: dict[str, Column] = {}
        if self.row_partitions:
            columns = {p.key: units.column(p.key, "int64") for p in self.row_partitions if hasattr(p, "key")}
        # unit by unit, so the first unit that breaks the feature is the one named (its values, its partitions,
        # or an earlier unit's value that does not fit the dtype)
        for u in range(first_uneven if self.row_partitions else 0):
            try:
                per_unit.append(self._unit_levels(units, u, int(rows[u]), columns))
            except DecodeError as exc:
                misfit = units.misfit_before(self.key, values.values, int(values.counts[:u].sum()),
                                             self.spec.dtype, unit_of)
                raise (misfit or exc) from None
        if first_uneven < units.n:
            u = first_uneven
            raise units.first_error(self.key, u, f"holds {int(values.counts[u])} values, not a multiple of the "
                                                 f"UniformRowLength {width}", values.values,
                                    int(values.counts[:u].sum()), self.spec.dtype, unit_of)
        if self.row_partitions:
            rows = np.array([r for r, _ in per_unit], dtype=np.int64)
            for depth in range(len(self.row_partitions)):
                pieces, offset = [np.zeros(1, dtype=np.int64)], 0
                for _, unit_levels in per_unit:
                    splits = unit_levels[depth]
                    pieces.append(splits[1:] + offset)
                    offset += int(splits[-1])
                levels.append(np.concatenate(pieces))
        # outer levels: units within examples (feature lists), then the batch
        outer: list[np.ndarray] = []
        if steps_per_example is not None:
            if not single:
                outer.append(_splits_of(steps_per_example))
            outer.append(_splits_of(rows))
        elif not single:
            outer.append(_splits_of(rows))
        nested = outer + levels
        if self.spec.dtype == string:
            flat = list(values.values)
            if self.inner_shape:  # group the bytes into rows of the uniform inner shape
                flat = [nest(flat[i : i + width], self.inner_shape) for i in range(0, len(flat), width)]
            return RaggedTensor(flat, tuple(torch.from_numpy(s) for s in nested)).to_list() if nested else flat
        tensor = units.convert(np.asarray(values.values), self.spec.dtype, self.key, unit_of)
        tensor = tensor.reshape(-1, *self.inner_shape)
        if not nested:  # one example, no row partitions: dense, as TensorFlow returns it
            return tensor
        if len(nested) == 1:
            return torch.nested.nested_tensor_from_jagged(tensor, torch.from_numpy(nested[0]))
        splits_dtype = self.spec.row_splits_dtype
        return RaggedTensor(tensor, tuple(torch.from_numpy(s).to(splits_dtype) for s in nested))

    def _unit_levels(self, units: Units, u: int, nvals: int,
                     columns: dict[str, Column]) -> tuple[int, list[np.ndarray]]:
        """Row splits of one unit for each row partition (outermost first) and its number of outer rows."""
        levels: list[np.ndarray] = []
        for p in reversed(self.row_partitions):
            if isinstance(p, UniformRowLength):
                if nvals % p.length:
                    raise units.error(self.key, u, f"has {nvals} rows, not a multiple of UniformRowLength {p.length}")
                splits = np.arange(0, nvals + 1, p.length, dtype=np.int64)
            else:
                data = np.asarray(columns[p.key].row(u), dtype=np.int64)
                splits = self._partition(units, u, p, data, nvals)
            levels.insert(0, splits)
            nvals = len(splits) - 1
        return nvals, levels

    def _partition(self, units: Units, u: int, p: Any, data: np.ndarray, nvals: int) -> np.ndarray:
        name = f"{type(p).__name__}({p.key!r})"

        def fail(detail: str) -> Exception:
            return units.error(self.key, u, f"has an invalid partition {name}: {detail}")

        # every check compares values (never np.diff or sums that could wrap around in int64)
        if isinstance(p, RowLengths):
            if (data < 0).any():
                raise fail(f"a negative row length {int(data[data < 0][0])}")
            if (data > nvals).any():
                raise fail(f"a row length {int(data[data > nvals][0])} larger than the number of values ({nvals})")
            total = int(data.sum())  # each length <= nvals, so no int64 wrap-around
            if total != nvals:
                raise fail(f"row lengths sum to {total}, expected {nvals} (the number of values)")
            return _splits_of(data)
        if isinstance(p, RowSplits):
            if len(data) == 0 and nvals == 0:  # a missing partition of an empty unit: no rows
                return np.zeros(1, dtype=np.int64)
            if len(data) == 0 or data[0] != 0 or _decreases(data) or data[-1] != nvals:
                raise fail(f"row splits must start at 0, never decrease and end at {nvals}; got {data.tolist()[:20]}")
            return data
        if isinstance(p, RowStarts):
            splits = np.concatenate((data, [nvals])).astype(np.int64)
            if (len(data) and data[0] != 0) or _decreases(splits) or (not len(data) and nvals):
                raise fail(f"row starts must start at 0, never decrease and stay within {nvals}; "
                           f"got {data.tolist()[:20]}")
            return splits
        if isinstance(p, RowLimits):
            splits = np.concatenate(([0], data)).astype(np.int64)
            if _decreases(splits) or splits[-1] != nvals:
                raise fail(f"row limits must never decrease and end at {nvals}; got {data.tolist()[:20]}")
            return splits
        if isinstance(p, ValueRowIds):
            if len(data) != nvals or (len(data) and (data[0] < 0 or _decreases(data))):
                raise fail(f"expected {nvals} non-negative, non-decreasing row ids; got {data.tolist()[:20]}")
            nrows = int(data[-1]) + 1 if len(data) else 0
            if nrows > nvals + MAX_EMPTY_ROWS:
                raise fail(f"row id {int(data[-1])} implies {nrows} rows for {nvals} values: more than "
                           f"{MAX_EMPTY_ROWS} empty rows (tfr_torch.decode.ragged.MAX_EMPTY_ROWS)")
            return _splits_of(np.bincount(data, minlength=nrows))
        raise TypeError(f"unknown partition {p!r}")  # pragma: no cover - specs validate partitions
