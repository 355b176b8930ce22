"""The compiled core's Example decoder (tfr_torch/_native) as the plans use it: the kind codes it takes, and its
output for a batch (one arena, a column per key) as Columns and Units for the decoders. ExamplePlan (decode/plan.py)
decodes Examples with it, SequenceExamplePlan (decode/sequence_plan.py) the SequenceExamples' context."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tfr_torch.decode.spans import RecordSpans
from tfr_torch.decode.units import Locator, Units
from tfr_torch.format.columns import Column
from tfr_torch.format.options import FeatureKind

_KERNEL_KINDS = {"bytes": 0, "float": 1, "int64": 2}  # the compiled decoder's kind codes
_NUMPY_OF_KIND = {"float": np.float32, "int64": np.int64}
_NO_FEATURES: list[dict[str, bytes]] = [{}]


def _example_kernel(core: Any, wire_kinds: Mapping[str, str], indices: Sequence[str] = (),
                    spans: Sequence[str] = (), dense: bytes = b"") -> Any:
    """The compiled core's decoder of these keys' Features (of Examples, or SequenceExamples' context); for the
    keys in `indices` it also writes the sparse COO indices of their values, the bytes of the keys in `spans` it
    can give as spans of the records (decode(records, True)), and the columns of `dense` (DenseBlock.pairs) it
    lays out back to back."""
    return core.ExampleDecoder([key.encode() for key in wire_kinds],
                               bytes(_KERNEL_KINDS[kind] for kind in wire_kinds.values()),
                               bytes(key in indices for key in wire_kinds), bytes(key in spans for key in wire_kinds),
                               dense)


def _arena_column(arena: Any, kind: FeatureKind, column: tuple[Any, ...], n: int) -> Column:
    """A Column of the compiled kernel's output: numpy views of the batch's arena (see ExampleDecoder.decode)."""
    present, counts, values, total, uniform = column[:5]
    if isinstance(values, RecordSpans):
        values = values.tolist()
    elif kind != "bytes":
        values = np.frombuffer(arena, _NUMPY_OF_KIND[kind], total, values)
    return Column(np.frombuffer(arena, np.bool_, n, present), np.frombuffer(arena, np.int64, n, counts), values,
                  uniform)


def _arena_units(arena: Any, columns: Sequence[tuple[Any, ...]], wire_kinds: Mapping[str, FeatureKind], n: int,
                 what: str = "feature") -> Units:
    """Units with every column of the kernel's output preset; a column of uncommon encodings (present is None)
    is left as raw Features for the reference decoder."""
    units = Units(_NO_FEATURES * n, Locator(None), what=what)
    raws = {}
    for (key, kind), column in zip(wire_kinds.items(), columns):
        if column[0] is None:
            raws[key] = column[2]
        else:
            units.preset(key, kind, _arena_column(arena, kind, column, n))
    if raws:
        units.raw_columns = raws
    return units


def _kernel_units(kernel: Any, wire_kinds: Mapping[str, FeatureKind], records: Sequence[bytes],
                  what: str = "feature") -> Units | None:
    """Units with every column of `wire_kinds` decoded by the compiled kernel in one pass over the records; None
    when a record needs the reference parser (malformed, uncommon, or not bytes), which then defines the answer."""
    out = kernel.decode(records)
    if out[0]:
        return None
    return _arena_units(out[1], out[2], wire_kinds, len(records), what)
