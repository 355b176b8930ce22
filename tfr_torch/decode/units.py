"""A batch of decoding units: the examples of a batch, or the steps of SequenceExample feature lists.

Every decoder reads its features column by column from `Units`, and every error it raises names the feature key
and the unit (example index, step) and, when the record came from a file, the file and byte offset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tfr_torch.decode.convert import NARROW_INTS, DoesNotFit, to_torch

from tfr_torch.errors import DecodeError
from tfr_torch.format.columns import Column, ColumnKindError, decode_column
from tfr_torch.format.options import FeatureKind
from tfr_torch.format.location import RecordLocation, location_of

__all__ = ["Units", "Locator"]

class Locator:
    """Describes example `i` of a batch in messages: its index, and its file and offset when its example name
    (TensorFlow's `example_names`) is a RecordLocation, as the datasets pass them; any other name is shown as is."""

    def __init__(self, names: Sequence[str | RecordLocation] | None, single: bool = False) -> None:
        self.names = names if names is None or isinstance(names, Sequence) else list(names)  # read on errors only
        self.single = single

    def describe(self, i: int, step: int | None = None) -> str:
        where = "the example" if self.single else f"example {i}"
        if self.names is not None and not isinstance(self.names[i], RecordLocation):
            where += f" ({self.names[i]})"
        return where if step is None else f"{where}, step {step}"

    def location(self, i: int) -> tuple[str | None, int | None]:
        return location_of(self.names[i]) if self.names is not None else (None, None)

    def error(self, key: str, i: int, detail: str, step: int | None = None, what: str = "feature") -> DecodeError:
        path, offset = self.location(i)
        return DecodeError(f"{what} {key!r} in {self.describe(i, step)} {detail}", path, offset, key=key, index=i,
                           step=step)


class Units:
    """Raw Feature bytes by key for each unit. `example[u]` and `step[u]` map a unit to its example (and step,
    for feature lists) for error messages."""

    def __init__(self, maps: Sequence[Mapping[str, bytes]], locator: Locator, example: np.ndarray | None = None,
                 step: np.ndarray | None = None, what: str = "feature") -> None:
        self.maps = maps
        self.n = len(maps)
        # key -> raw Feature per unit, when gathered up front
        self.raw_columns: dict[str, list[bytes | None]] | None = None
        self.locator = locator
        self.example = example
        self.step = step
        self.what = what
        self._cache: dict[tuple[str, str], Column] = {}

    def error(self, key: str, unit: int, detail: str) -> DecodeError:
        example = int(self.example[unit]) if self.example is not None else unit
        step = int(self.step[unit]) if self.step is not None else None
        return self.locator.error(key, example, detail, step, self.what)

    def convert(self, array: np.ndarray, dtype: Any, key: str, unit_of: Callable[[int], int],
                by_example: bool = False) -> torch.Tensor:
        """Convert wire values to `dtype`; a value that does not fit is reported against its unit (or, with
        `by_example`, its example)."""
        try:
            return to_torch(array, dtype)
        except DoesNotFit as exc:
            where = unit_of(exc.position)
            if by_example:
                raise self.locator.error(key, where, str(exc), what=self.what) from None
            raise self.error(key, where, str(exc)) from None

    def misfit_before(self, key: str, values: Any, before: int, dtype: Any, unit_of: Callable[[int], int],
                      by_example: bool = False) -> DecodeError | None:
        """The error of the first of the first `before` `values` (`unit_of` maps their positions to units) that
        does not fit `dtype`, else None: a problem found at a unit comes after the earlier units' values, since
        each feature reports the first unit that breaks it."""
        if before and dtype in NARROW_INTS:
            try:
                self.convert(np.asarray(values[:before]), dtype, key, unit_of, by_example)
            except DecodeError as exc:
                return exc
        return None

    def first_error(self, key: str, unit: int, detail: str, values: Any, before: int, dtype: Any,
                    unit_of: Callable[[int], int], by_example: bool = False) -> DecodeError:
        """The error to raise for a problem (`detail`) found at `unit`, unless a value of an earlier unit does
        not fit `dtype` (see misfit_before)."""
        misfit = self.misfit_before(key, values, before, dtype, unit_of, by_example)
        if misfit is not None:
            return misfit
        if by_example:
            return self.locator.error(key, unit, detail, what=self.what)
        return self.error(key, unit, detail)

    def preset(self, key: str, kind: FeatureKind, column: Column) -> None:
        """Give the column of `key` read as `kind`, already decoded."""
        self._cache[(key, kind)] = column

    def column(self, key: str, kind: FeatureKind) -> Column:
        cached = self._cache.get((key, kind))
        if cached is not None:
            return cached
        if self.raw_columns is not None and key in self.raw_columns:
            raws = self.raw_columns[key]
        else:
            raws = [m.get(key) for m in self.maps]
        try:
            column = decode_column(raws, kind, key)
        except ColumnKindError as exc:
            raise self.error(key, exc.index, f"holds {exc.found} values but {exc.expected} values were expected "
                                             "(data types don't match)") from None
        except DecodeError as exc:
            bad = _first_bad(raws, kind, key)
            raise self.error(key, bad, "is malformed: " + _without_key(exc.message, key)) from None
        self._cache[(key, kind)] = column
        return column


def _without_key(message: str, key: str) -> str:
    """format.strict names the key first ("feature 'k': its tf.train.Feature ..."); the located error names it."""
    prefix = f"feature {key!r}: "
    return message[len(prefix):] if message.startswith(prefix) else message


def _first_bad(raws: Sequence[bytes | None], kind: FeatureKind, key: str) -> int:
    for i, raw in enumerate(raws):
        try:
            decode_column([raw], kind, key)
        except DecodeError:
            return i
    return 0
