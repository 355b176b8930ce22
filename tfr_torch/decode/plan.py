"""Compiled decoding plans: built once per feature spec, they decode whole batches column by column.

Error order. When a batch has several problems, parse_example (and parse_single_example) reports the first of
them in this order, on every backend, down to the message:

1. The wire format, record by record in batch order (as TensorFlow's parser reads a record's Example before any of
   its values): for record i, first the record itself (not bytes, or not a valid Example: its Features, map
   entries and keys), then the Features of the planned keys (the spec's features in order, each with the keys it
   reads), the first that is malformed (a list with an unknown field included, as TensorFlow rejects it) or holds
   another kind than the spec's.
2. Only when the whole batch's wire format is sound: the values, feature by feature in the spec's order, each
   reporting the first example that breaks it (a value count that does not fit the shape, a required feature
   missing, a value that does not fit the dtype, ...).

The pure-Python reference implements this order (ExamplePlan.parse, _first_wire_error); the compiled kernel never
names a problem of step 1 itself: at the first record or Feature it finds malformed, uncommon or of another kind
it hands the batch back to the reference (tfr_torch/_native/src/batch.h), and a column it hands over as raw
Features (an uncommon encoding) is checked before any value, so the kernel only ever reports step 2's errors,
from the same decoders in the same order. TensorFlow itself checks each record's values before reading the next
record; across records, step 2 here goes feature by feature instead.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from tfr_torch import _native
from tfr_torch.decode.dense import DenseBlock
from tfr_torch.decode.kernel import _arena_units, _example_kernel
from tfr_torch.decode.plan_inputs import (
    _EXAMPLE_DECODERS,
    Decoder,
    _check_wire_kinds,
    _decoders,
    _features_of,
    _records,
    _size,
)
from tfr_torch.decode.results import _rows_of
from tfr_torch.decode.spans import RecordSpans
from tfr_torch.decode.specs import FixedLenFeature, VarLenFeature
from tfr_torch.decode.units import Locator, Units, _without_key
from tfr_torch.errors import DecodeError
from tfr_torch.format.columns import Column
from tfr_torch.format.location import ExampleName
from tfr_torch.format.options import FeatureKind
from tfr_torch.format.strict import decode_feature

__all__ = ["ExamplePlan", "compile_features"]

# From this average record size on, parse_example takes the features it needs out of each record as soon as the
# record is parsed, so each record's parse (a copy of it) is dropped at once and its memory, still in cache, is
# reused for the next: for 16 KB records this halves the memory a batch sweeps through
_GATHER_FROM = 2048


def _first_wire_error(units: Units, wire_kinds: Mapping[str, FeatureKind], keys: Collection[str] | None = None,
                      ) -> tuple[int, int, DecodeError] | None:
    """Step 1 of the error order (see the module docstring) over decoded columns: the first malformed or
    other-kind Feature, record by record and in plan order within a record, as (record, position of its key in
    the plan, error); None when there is none. Each column (of `keys`, default all) is decoded by `units.column`
    (cached: the decoders read it from there) and reports its own first bad record."""
    first: tuple[int, int, DecodeError] | None = None
    for position, (key, kind) in enumerate(wire_kinds.items()):
        if keys is not None and key not in keys:
            continue
        try:
            units.column(key, kind)
        except DecodeError as exc:
            found = (exc.index if exc.index is not None else 0, position, exc)
            if first is None or found[:2] < first[:2]:
                first = found
    return first


def _wire_error_before(units: Units, wire_kinds: Mapping[str, FeatureKind], exc: Exception, record: int,
                       position: int = -1, keys: Collection[str] | None = None) -> Exception:
    """The error to raise for a problem of step 1 found at `record` (`position`: its key's place in the plan, -1
    for the record itself): a malformed Feature of an earlier record, or of an earlier key of the same record,
    comes first."""
    first = _first_wire_error(units, wire_kinds, keys)
    return first[2] if first is not None and first[:2] < (record, position) else exc


class ExamplePlan:
    """The decoding plan of one `features` spec for tf.train.Example records (see `parse_example`)."""

    def __init__(self, features: Mapping[str, Any]) -> None:
        self.features = dict(features)
        self.decoders: dict[str, Decoder] = _decoders(features, _EXAMPLE_DECODERS, "features")
        _check_wire_kinds(self.decoders, "features")
        self._wire_kinds: dict[str, FeatureKind] = {
            key: kind for decoder in self.decoders.values() for key, kind in decoder.wire_keys().items()}
        # a batch's rows are parse_single_example's results (see iter_rows)
        self._splits = all(type(spec) in (FixedLenFeature, VarLenFeature) for spec in self.features.values())
        self._kernel: Any = None  # the compiled core's decoder for these keys, made on first use
        self._kernel_of: Any = None  # the core module it was made by
        # per feature: (key, its fast path from the kernel's output or None, its decoder, where the column of its
        # key is in that output); see _native_parse. Then the keys whose sparse indices the kernel writes.
        self._wire_at = wire_at = {key: i for i, key in enumerate(self._wire_kinds)}
        self._steps: list[tuple[str, Any, Decoder, int]] = [
            (key, getattr(decoder, "fast", None) if key in wire_at else None, decoder, wire_at.get(key, -1))
            for key, decoder in self.decoders.items()]
        self._indices = [key for decoder in self.decoders.values() for key in getattr(decoder, "kernel_indices", ())]
        # the keys whose bytes may stay in the records as spans: read by one decoder, which takes them as they are
        readers = Counter(key for decoder in self.decoders.values() for key in decoder.wire_keys())
        self._spans = [key for decoder in self.decoders.values() for key in getattr(decoder, "kernel_spans", ())
                       if readers[key] == 1]
        # the FixedLenFeatures made from the kernel's dense block in one view per dtype and shape, and the other
        # features' steps, taken when the kernel laid that block out (see _native_parse)
        self._dense = DenseBlock(self.decoders, wire_at)
        self._other_steps = [step for step in self._steps if step[0] not in self._dense.keys]

    def _native_parse(self, core: Any, records: Sequence[bytes], locator: Locator, single: bool,
                      spans: bool = False) -> dict[str, Any] | None:
        """parse() by the compiled kernel: every column in one pass over the records, then each feature's result
        straight from the kernel's arena where the decoder has a fast path for it (`fast`: the common case, such
        as every example holding a FixedLenFeature with its count of values), else by the decoder from Units.
        None when a record needs the reference parser (malformed, uncommon, or not bytes, or a Feature the kernel
        handed over raw is malformed), which then defines the answer or the error: so the kernel only reports
        step 2 of the error order (see the module docstring)."""
        if self._kernel_of is not core:
            self._kernel = _example_kernel(core, self._wire_kinds, self._indices, self._spans, self._dense.pairs)
            self._kernel_of = core
        spans = spans and bool(self._spans)
        out = self._kernel.decode(records, spans)
        if out[0]:
            return None
        _, arena, columns, dense = out
        n = len(records)
        if spans:
            for key in self._spans:
                at = self._wire_at[key]
                column = columns[at]
                if isinstance(column[2], int):
                    columns[at] = (*column[:2], RecordSpans(core, records, arena, column[2], column[3]), *column[3:])
        result: dict[str, Any] = {}
        steps = self._steps
        if dense:  # every dense FixedLenFeature as views of the block, a few calls whatever their number
            result = dict.fromkeys(self.decoders)  # (the spec's order)
            self._dense.views(arena, columns, n, single, result)
            steps = self._other_steps
        units = None
        for key, fast, decoder, at in steps:
            value = fast(arena, columns[at], n, single) if fast is not None else None
            if value is None:  # (a fast path never takes a column of raw Features, nor raises)
                if units is None:
                    units = _arena_units(arena, columns, self._wire_kinds, n)
                    units.locator = locator
                    # raw Features (uncommon encodings), checked before any decoder reports a value's problem: when
                    # one is malformed, the reference names the batch's first problem (see the error order)
                    if units.raw_columns and _first_wire_error(units, self._wire_kinds) is not None:
                        return None
                value = decoder(units, single)
            result[key] = value
        return result

    def parse(self, serialized: Sequence[bytes], example_names: Sequence[ExampleName] | None = None,
              single: bool = False, spans: bool = False) -> dict[str, Any]:
        """parse_example's result. `spans` (for a batch that goes straight to the DataLoader's transport): a
        FixedLenFeature of one string per example may come back as a RecordSpans, its values left in the
        records until the transport copies them once into shared memory."""
        records = _records(serialized, example_names, "parse_example")
        locator = Locator(example_names, single)
        core = _native.core
        if core is not None:
            parsed = self._native_parse(core, records, locator, single, spans)
            if parsed is not None:
                return parsed
        if len(records) > 1 and sum(map(_size, records)) >= _GATHER_FROM * len(records):
            units = self._gather(records, locator)
        else:
            units = self._split(records, locator)
        first = _first_wire_error(units, self._wire_kinds)
        if first is not None:
            raise first[2]
        return self._decode(units, locator, single)

    def _split(self, records: Sequence[bytes], locator: Locator) -> Units:
        """Units of every record's raw Features; a record that is not an Example raises, unless a Feature of an
        earlier record is malformed (the error order, see the module docstring)."""
        maps: list[Mapping[str, bytes]] = []
        for i, record in enumerate(records):
            try:
                maps.append(_features_of(record, locator, i))
            except (DecodeError, TypeError) as exc:
                raise _wire_error_before(Units(maps, locator), self._wire_kinds, exc, i) from None
        return Units(maps, locator)

    def iter_rows(self, serialized: Sequence[bytes], example_names: Sequence[ExampleName] | None = None, *,
                  row_type: type[dict[str, Any]] = dict) -> Iterator[dict[str, Any]]:
        """What parse_single_example gives for each record, in order. When every feature is a FixedLenFeature or
        VarLenFeature the records are decoded as one batch and each dict is a row of it (a tenth of the cost); if
        the batch does not decode they are decoded one by one, so the rows before the bad record come out and its
        error is the one it gives alone. `example_names` must support slicing. `row_type`: the class of each row,
        dict or a subclass of it (the datasets' DataLoader workers mark rows for their transport with one)."""
        yield from self.rows(serialized, example_names, row_type=row_type)

    def rows(self, serialized: Sequence[bytes], example_names: Sequence[ExampleName] | None = None, *,
             row_type: type[dict[str, Any]] = dict) -> Iterator[dict[str, Any]]:
        """iter_rows' rows, with the batch decoded by this call rather than at the first row taken: an iterator
        that takes no Python step per row where the batch decodes (the datasets' per-record items)."""
        n = len(serialized)
        if self._splits and n > 1:
            try:
                batch = self.parse(serialized, example_names)
            except DecodeError:
                pass
            else:
                columns = [_rows_of(value, n) for value in batch.values()]
                # row j is row_type(zip(keys, (each column[j]))), made by map and zip: no Python step per row
                values = zip(*columns) if columns else itertools.repeat((), n)  # (an empty spec: empty rows)
                make = cast("Callable[[Iterable[tuple[str, Any]]], dict[str, Any]]", row_type)
                return map(make, map(zip, itertools.repeat(list(batch), n), values))
        return self._rows_one_by_one(serialized, example_names, row_type)

    def _rows_one_by_one(self, serialized: Sequence[bytes], example_names: Sequence[ExampleName] | None,
                         row_type: type[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for i in range(len(serialized)):
            row = self.parse(serialized[i : i + 1], None if example_names is None else example_names[i : i + 1],
                             single=True)
            yield row if row_type is dict else row_type(row)

    def _gather(self, records: Sequence[bytes], locator: Locator) -> Units:
        """Units for large records (see _GATHER_FROM): each record is split into its raw Features and dropped once
        the spec's features are taken, so a batch of large records never holds their unused features. Bytes
        features become columns right here (one copy of each value)."""
        n = len(records)
        strings: dict[str, tuple[list[bytes], np.ndarray, np.ndarray]] = {
            key: ([], np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64))
            for key, kind in self._wire_kinds.items() if kind == "bytes"}
        raws: dict[str, list[bytes | None]] = {key: [] for key, kind in self._wire_kinds.items() if kind != "bytes"}
        numeric = list(raws.items())
        text = [(key, *column) for key, column in strings.items()]
        # every column is preset or in raw_columns below, so the per-unit maps are never read
        units = Units(cast("list[Mapping[str, bytes]]", [None] * n), locator)
        for i, record in enumerate(records):
            try:
                found = _features_of(record, locator, i)
            except (DecodeError, TypeError) as exc:
                raise self._gathered_error(raws, locator, i, exc) from None
            for key, column in numeric:
                column.append(found.get(key))
            for key, values, present, counts in text:
                feature = found.get(key)
                if feature is None:
                    continue
                try:
                    kind, got = decode_feature(feature, key)
                except DecodeError as exc:
                    error = units.error(key, i, "is malformed: " + _without_key(exc.message, key))
                    raise self._gathered_error(raws, locator, i + 1, error, key) from None
                if kind is None:
                    continue
                if kind != "bytes":
                    error = units.error(key, i, f"holds {kind} values but bytes values were expected (data types "
                                                "don't match)")
                    raise self._gathered_error(raws, locator, i + 1, error, key) from None
                present[i] = True
                counts[i] = len(got)
                values.extend(got)
        units.raw_columns = raws
        for key, (values, present, counts) in strings.items():
            units.preset(key, "bytes", Column(present, counts, values))
        return units

    def _gathered_error(self, raws: dict[str, list[bytes | None]], locator: Locator, n: int, exc: Exception,
                        key: str | None = None) -> Exception:
        """The error to raise when _gather finds a problem of step 1 (see the module docstring) in record n - 1
        (of its Feature `key`) or record n (the record itself, key None): a malformed numeric Feature of the n
        records read so far comes first when it is in an earlier record or belongs to an earlier key."""
        probe = Units(cast("list[Mapping[str, bytes]]", [None] * n), locator)
        probe.raw_columns = {k: column[:n] for k, column in raws.items()}
        if key is None:
            return _wire_error_before(probe, self._wire_kinds, exc, n, keys=raws)
        return _wire_error_before(probe, self._wire_kinds, exc, n - 1, list(self._wire_kinds).index(key), raws)

    def _decode(self, units: Units, locator: Locator, single: bool) -> dict[str, Any]:
        units.locator = locator
        return {key: decoder(units, single) for key, decoder in self.decoders.items()}


_PLANS: dict[str, ExamplePlan] = {}
_PLANS_LOCK = threading.Lock()
_MAX_PLANS = 64
# the names and specs of the last spec compiled, and its plan, as one tuple that a thread reads at once (separate
# items could be read across another thread's update, pairing one spec with another's plan)
_LAST: list[tuple[tuple[str, ...], tuple[Any, ...], ExamplePlan | None]] = [((), (), None)]


def compile_features(features: Mapping[str, Any]) -> ExamplePlan:
    """Build (or fetch from a small cache) the decoding plan of a features spec.

    >>> import torch, tfr_torch
    >>> plan = tfr_torch.compile_features({"label": tfr_torch.FixedLenFeature([], torch.int64)})
    >>> plan.parse([tfr_torch.encode_example({"label": 4})])["label"]
    tensor([4])
    """
    if type(features) is not dict and not isinstance(features, Mapping):  # (a dict skips the ABC's check)
        raise TypeError(f"features must be a dict of feature names to specs, got {type(features).__name__}")
    names, specs = tuple(features), tuple(features.values())
    last_names, last_specs, last_plan = _LAST[0]  # last_plan is None before the first spec: {} must not match it
    if last_plan is not None and names == last_names and all(map(operator.is_, specs, last_specs)):
        return last_plan  # the same names and (frozen) spec objects as the last call: skip the repr
    key = repr(tuple(zip(names, specs)))  # reprs are exact (they tell 0.0 from -0.0, unlike ==)
    with _PLANS_LOCK:  # threads may compile specs at once
        plan = _PLANS.get(key)
        if plan is None:
            plan = ExamplePlan(features)
            if len(_PLANS) >= _MAX_PLANS:
                _PLANS.pop(next(iter(_PLANS)))
            _PLANS[key] = plan
    _LAST[0] = (names, specs, plan)
    return plan
