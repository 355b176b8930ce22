"""Bytes values left inside their records: what a DataLoader worker's decoded batch holds for a string feature
until the transport writes it into shared memory (one copy, from the record to the slab, in place of two: record
to a new bytes object, then that object to the slab)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np

__all__ = ["RecordSpans"]


class RecordSpans:
    """`total` bytes values, each a span (record index, start, length; int64 triples at byte `offset` of the
    compiled kernel's `arena`) of one of `records`. Only ever made for a batch that goes straight to the transport
    (see ExamplePlan.parse's `spans`); anything else that meets one gets the list of bytes it stands for
    (`tolist()`, and pickling, which sends that list)."""

    __slots__ = ("core", "records", "arena", "offset", "total")

    def __init__(self, core: Any, records: Sequence[bytes], arena: Any, offset: int, total: int) -> None:
        self.core, self.records, self.arena, self.offset, self.total = core, records, arena, offset, total

    def __len__(self) -> int:
        return self.total

    def tolist(self) -> list[bytes]:
        values: list[bytes] = self.core.bytes_of_spans(self.records, self.arena, self.offset, self.total)
        return values

    def pack(self, buffer: Any, pos: int) -> list[int]:
        """Write the values back to back into the writable `buffer` from `pos`; their lengths."""
        lengths: list[int] = self.core.pack_spans(self.records, self.arena, self.offset, self.total, buffer, pos)
        return lengths

    def nbytes(self) -> int:
        """The total length of the values."""
        spans = np.frombuffer(self.arena, np.int64, 3 * self.total, self.offset)
        return int(spans[2::3].sum())

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return list, (self.tolist(),)
