"""How far a reader of a global shuffle went in its order: the records of its share it yielded plus the bad ones it
skipped among them (on_error="skip" or a callable). A state that says only how many items were yielded cannot say
where the order stands once records were skipped; this says it, so a resumed reader starts at the next record of its
order instead of reading the yielded ones again, and an elastic merge takes exactly the positions the readers went
past (elastic.consumed) rather than counting a skipped record's position as unread.

A global shuffle reads each record by its offset, so a bad record is one position of the order, and the error that
reports it names that record (its file and the offset of its index entry): its position is found from those."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tfr_torch.errors import TFRecordError
from tfr_torch.format.reader import OnError, _resolve_policy

__all__ = ["OrderProgress"]


class OrderProgress:
    """One pass of a global shuffle reader over `ids` (global record numbers, the part of its order this pass reads),
    which starts `base` positions into its order with `done` records of it already yielded (a resumed pass)."""

    def __init__(self, ids: np.ndarray, counts: Sequence[int], paths: Sequence[str], offsets: Sequence[Any],
                 base: int = 0, done: int = 0, tops_up: bool = False) -> None:
        self.ids = ids
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.files = {path: f for f, path in enumerate(paths)}
        self.offsets = offsets
        self.base = base
        self.done = done
        self.tops_up = tops_up  # a reader short of its share repeats its first records (EpochRecords._topped_up)
        self.skipped: list[int] = []  # positions in `ids` of the records skipped as bad, as reported
        self.lost = False  # a skipped record whose position is not known: the progress says nothing

    def policy(self, on_error: OnError) -> Callable[[TFRecordError], None] | None:
        """The reader's on_error policy that also notes each skipped record's position (None: raise)."""
        user = _resolve_policy(on_error)
        if user is None:
            return None

        def noting(err: TFRecordError) -> None:
            self.note(err)
            user(err)

        return noting

    def note(self, err: TFRecordError) -> None:
        """Take the position of the record `err` reports skipped."""
        span = err.skipped_range
        start = span[0] if span is not None else err.offset
        f = self.files.get(err.path) if err.path is not None else None
        table = self.offsets[f] if f is not None else None
        if start is None or table is None or (err.skipped_records or 1) != 1:
            self.lost = True
            return
        row = int(np.searchsorted(table[:, 0], start))
        if row >= len(table) or int(table[row, 0]) != start:
            self.lost = True
            return
        at = np.flatnonzero(self.ids == self.starts[f] + row)
        if not len(at):
            self.lost = True
            return
        self.skipped.append(int(at[0]))

    def consumed(self, yielded_records: int) -> int | None:
        """Positions of the whole order gone past once `yielded_records` records of it were yielded (those of
        earlier passes included): up to and including the last one yielded, the bad ones before it counted (and those
        right after it). None where not known, and once every good record of the order was yielded and the reader
        tops its share up with repeats (a resume then reads the share again: the repeats go on where they were)."""
        if self.lost:
            return None
        wanted = yielded_records - self.done  # records yielded by this pass
        skipped = sorted(set(self.skipped))
        if wanted > len(self.ids) - len(skipped):  # more than the good records of this pass
            if self.tops_up and (skipped or self.base != self.done):
                return None  # topping its share up with repeats (a resume reads the share again: they go on)
            return self.base + len(self.ids)  # the last batch, partial, counted whole
        last = wanted - 1  # the position of the last one yielded: moved past every skipped position up to it
        for position in skipped if wanted > 0 else ():
            if position > last:
                break
            last += 1
        last = max(last, -1)
        for position in skipped:  # and past those right after it (read, and reported, already)
            if position == last + 1:
                last += 1
        return self.base + last + 1
