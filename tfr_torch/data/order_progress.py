"""How far a reader went in its order: the records of its share it yielded plus the bad ones it skipped among them
(on_error="skip" or a callable). A state that says only how many items were yielded cannot say where the order
stands once records were skipped; this says it: for a global shuffle as a count of positions ("consumed"), so a
resumed reader starts at the next record of its order instead of reading the yielded ones again; for every reader
of indexed files as the bad records' numbers ("skipped"), so an elastic merge (elastic.consumed) replays each
reader's order as it was read, without them, rather than counting a skipped record's position as unread (and, in a
shuffle buffer, taking other records for the yielded ones).

A bad record is found from the error that reports it: its file and the offset of its index entry (a corrupt region
of an uncompressed file: the indexed records that start in it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tfr_torch.errors import TFRecordError
from tfr_torch.format.reader import OnError, _resolve_policy

__all__ = ["OrderProgress"]


class OrderProgress:
    """One pass of a reader: the records it skipped as bad (their global numbers: `skipped_records`), and for a
    global shuffle over `ids` (global record numbers, the part of its order this pass reads; None for a reader of
    file runs) their positions in it, the pass starting `base` positions into its order with `done` records of it
    already yielded (a resumed pass); `before`: the records a resumed pass of file runs went past before its
    start that were skipped as bad (its state named them)."""

    def __init__(self, ids: np.ndarray | None, counts: Sequence[int], paths: Sequence[str], offsets: Sequence[Any],
                 base: int = 0, done: int = 0, before: Sequence[int] = ()) -> None:
        self.ids = ids
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.files = {path: f for f, path in enumerate(paths)}
        self.offsets = offsets
        self.base = base
        self.done = done
        self.skipped: list[int] = []  # positions in `ids` of the records skipped as bad, as reported
        self.skipped_records: list[int] = [int(n) for n in before]  # their global record numbers
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
        """Take the records `err` reports skipped: one bad record, or the indexed records of a corrupt region of
        an uncompressed file (where a GZIP/ZLIB member was given up, which records it held is not known)."""
        span = err.skipped_range
        start = span[0] if span is not None else err.offset
        f = self.files.get(err.path) if err.path is not None else None
        table = self.offsets[f] if f is not None else None
        if start is None or table is None or (err.skipped_estimated and err.skipped_file_range != span):
            self.lost = True
            return
        first = int(np.searchsorted(table[:, 0], start))
        if first >= len(table) or int(table[first, 0]) != start:
            self.lost = True
            return
        stop = first + 1
        if err.skipped_estimated and span is not None:  # a corrupt region: the indexed records starting in it
            stop = max(stop, int(np.searchsorted(table[:, 0], span[1])))
        numbers = [int(self.starts[f]) + row for row in range(first, stop)]
        self.skipped_records += numbers
        if self.ids is None:
            return
        for number in numbers:
            at = np.flatnonzero(self.ids == number)
            if not len(at):
                self.lost = True
                return
            self.skipped.append(int(at[0]))

    def skipped_numbers(self) -> list[int] | None:
        """The global numbers of the records this pass skipped so far, in order, each once; None where not known."""
        return None if self.lost else sorted(set(self.skipped_records))

    def consumed(self, yielded_records: int) -> int | None:
        """Positions of the whole order gone past once `yielded_records` records of it were yielded (those of
        earlier passes included): up to and including the last one yielded, the bad ones before it counted (and those
        right after it); the whole order once every good record of it was yielded (a reader may then be topping
        its share up with repeats: see EpochRecords._records). None where not known."""
        if self.lost or self.ids is None:
            return None
        wanted = yielded_records - self.done  # records yielded by this pass
        skipped = sorted(set(self.skipped))
        if wanted > len(self.ids) - len(skipped):  # more than the good records of this pass: its whole order
            return self.base + len(self.ids)  # (the last batch, partial, counted whole; or topping its share up)
        last = max(wanted, 0) - 1  # the position of the last one yielded: moved past every skipped one up to it
        for position in skipped:
            if position > last:
                break
            last += 1
        for position in skipped:  # and past those right after it (read, and reported, already)
            if position == last + 1:
                last += 1
        return self.base + last + 1
