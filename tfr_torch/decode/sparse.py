"""Decoders for VarLenFeature and SparseFeature (sparse COO results)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfr_torch import _native
from tfr_torch.decode.convert import direct_numpy
from tfr_torch.decode.results import SparseBytes
from tfr_torch.decode.specs import SparseFeature, VarLenFeature, string, wire_kind
from tfr_torch.decode.units import Units
from tfr_torch.format.options import FeatureKind

__all__ = ["VarLenDecoder", "SparseDecoder"]


def _indices(counts: np.ndarray) -> np.ndarray:
    """The [2, nnz] COO indices of per-unit value counts: (unit of each value, its position within its unit)."""
    core = _native.core
    if core is not None and counts.dtype == np.int64:
        return np.frombuffer(core.sparse_indices(np.ascontiguousarray(counts)), dtype=np.int64).reshape(2, -1)
    total = int(counts.sum())
    rows = np.repeat(np.arange(len(counts)), counts)
    starts = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return np.stack([rows, np.arange(total) - np.repeat(starts, counts)])


def _sparse(indices: np.ndarray, values: Any, shape: tuple[int, ...], dtype: Any, key: str, coalesced: bool,
            units: Units, unit_of: Any) -> Any:
    if dtype == string:
        return SparseBytes(torch.from_numpy(np.ascontiguousarray(indices.T)), list(values), tuple(shape))
    tensor = units.convert(np.asarray(values), dtype, key, unit_of)
    return torch.sparse_coo_tensor(torch.from_numpy(np.ascontiguousarray(indices)), tensor, shape,
                                   is_coalesced=coalesced, check_invariants=False)  # indices built valid here


class VarLenDecoder:
    """VarLenFeature: sparse COO `[B, max_len]` with indices (example, position), as tf.io.VarLenFeature. In
    SequenceExample feature lists: `[B, T, max_len]` (`[T, max_len]` for one example). Bytes values come back as
    lists (one per example) of lists of bytes."""

    def __init__(self, key: str, spec: VarLenFeature) -> None:
        self.key, self.spec = key, spec
        self.kind = wire_kind(spec.dtype)
        # the numpy dtype of the wire values when they are the result's values as they are (no conversion)
        self._direct = direct_numpy(spec.dtype)
        # the compiled kernel writes this key's COO indices when they are used as they are (see fast)
        self.kernel_indices = (key,) if self._direct is not None else ()

    def wire_keys(self) -> dict[str, FeatureKind]:
        return {self.key: self.kind}

    def fast(self, arena: Any, column: tuple[Any, ...], b: int, single: bool) -> Any:
        """The result from the compiled kernel's output (an arena and this key's column, see plan.py): the
        sparse tensor over views of the arena's values and indices, or the rows of a bytes column. None: take
        __call__ (an uncommon encoding in the column, or a dtype conversion)."""
        present, counts, values, total, _, indices, longest = column
        if present is None:
            return None
        if self.spec.dtype == string:
            rows, start = [], 0
            for count in np.frombuffer(arena, np.int64, b, counts).tolist():
                rows.append(values[start : start + count])
                start += count
            return rows[0] if single else rows
        if indices < 0 or self._direct is None:
            return None
        where = torch.from_numpy(np.frombuffer(arena, np.int64, 2 * total, indices).reshape(2, total))
        shape: tuple[int, ...] = (b, longest)
        if single:
            where, shape = where[1:], (longest,)
        return torch.sparse_coo_tensor(where, torch.from_numpy(np.frombuffer(arena, self._direct, total, values)),
                                       shape, is_coalesced=True, check_invariants=False)  # valid by construction

    def __call__(self, units: Units, single: bool = False, steps_per_example: np.ndarray | None = None) -> Any:
        col = units.column(self.key, self.kind)
        longest = int(col.counts.max()) if units.n else 0
        if self.spec.dtype == string:
            it = iter(col.values)
            rows = [[next(it) for _ in range(int(c))] for c in col.counts]
            if steps_per_example is not None:
                rows = _group(rows, steps_per_example)
            return rows[0] if single else rows
        shape: tuple[int, ...]
        if steps_per_example is None:
            indices, shape = _indices(col.counts), (units.n, longest)
            if single:
                indices, shape = indices[1:], (longest,)
        else:
            unit, pos = _indices(col.counts)
            assert units.example is not None and units.step is not None  # feature-list steps map to examples
            example, step = units.example[unit], units.step[unit]
            most_steps = int(steps_per_example.max()) if len(steps_per_example) else 0
            indices, shape = np.stack([example, step, pos]), (len(steps_per_example), most_steps, longest)
            if single:
                indices, shape = indices[1:], (int(steps_per_example[0]), longest)
        return _sparse(indices, col.values, shape, self.spec.dtype, self.key, True, units, _unit_of(col.counts))


def _unit_of(counts: np.ndarray) -> Any:
    """Map a position in the concatenated values to its unit (only ever called for an error message)."""
    return lambda pos: int(np.searchsorted(np.cumsum(counts), pos, side="right"))


def _group(rows: list[Any], sizes: np.ndarray) -> list[Any]:
    out, start = [], 0
    for size in sizes.tolist():
        out.append(rows[start : start + size])
        start += size
    return out


class SparseFeatureDecoder:
    """SparseFeature: sparse COO `[B, *size]` from index and value features, sorted by index unless
    `already_sorted`. Unlike TensorFlow, every index is checked against `size`, and index and value counts are
    checked per example (TensorFlow checks only the batch totals and can pair values with wrong indices)."""

    def __init__(self, key: str, spec: SparseFeature) -> None:
        self.key, self.spec = key, spec
        self.kind = wire_kind(spec.dtype)

    def wire_keys(self) -> dict[str, FeatureKind]:
        keys: dict[str, FeatureKind] = {k: "int64" for k in self.spec.index_keys}
        keys[self.spec.value_key] = self.kind
        return keys

    def __call__(self, units: Units, single: bool = False) -> Any:
        spec = self.spec
        values = units.column(spec.value_key, self.kind)
        index_columns = [units.column(k, "int64") for k in spec.index_keys]
        # the first example that breaks the feature: (example, a count before a range within it, key order, detail)
        first: tuple[int, int, int, str] | None = None
        for rank, (index_key, col) in enumerate(zip(spec.index_keys, index_columns)):
            wrong = col.counts != values.counts
            if wrong.any():
                i = int(np.flatnonzero(wrong)[0])
                found = (i, 0, rank, f"has {int(col.counts[i])} indices in {index_key!r} but "
                                      f"{int(values.counts[i])} values in {spec.value_key!r}")
                first = found if first is None or found < first else first
        for rank, (index_key, col, size) in enumerate(zip(spec.index_keys, index_columns, spec.sizes)):
            index_values = np.asarray(col.values)  # an int64 column: already an array
            out = (index_values < 0) | (index_values >= size)
            if out.any():
                pos = int(np.flatnonzero(out)[0])
                i = int(np.searchsorted(np.cumsum(col.counts), pos, side="right"))
                found = (i, 1, rank, f"has index {int(col.values[pos])} in {index_key!r}, outside [0, {size})")
                first = found if first is None or found < first else first
        if first is not None:
            ends = np.cumsum(values.counts)
            raise units.first_error(self.key, first[0], first[3], values.values, int(values.counts[: first[0]].sum()),
                                    spec.dtype, lambda pos: int(np.searchsorted(ends, pos, side="right")))
        unit = _indices(values.counts)[0]
        indices = np.stack([unit] + [np.asarray(c.values) for c in index_columns]) if len(unit) else np.zeros(
            (1 + len(index_columns), 0), dtype=np.int64)
        vals = values.values
        order = np.arange(indices.shape[1])
        if not spec.already_sorted and indices.shape[1]:
            order = np.lexsort(indices[::-1])
            indices = indices[:, order]
            vals = [vals[i] for i in order.tolist()] if spec.dtype == string else np.asarray(vals)[order]
        # sorted without duplicates means coalesced, which lets users call .indices() directly
        coalesced = not spec.already_sorted and bool((np.diff(indices, axis=1) != 0).any(axis=0).all())
        shape = (units.n, *spec.sizes)
        if single:
            indices, shape = indices[1:], shape[1:]
        unit_of = ((lambda pos: int(unit[order[pos]])) if not spec.already_sorted and len(unit)
                   else _unit_of(values.counts))
        return _sparse(indices, vals, shape, spec.dtype, self.key, coalesced, units, unit_of)


SparseDecoder = SparseFeatureDecoder
