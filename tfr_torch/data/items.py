"""The items a TFRecordDataset yields, made from the blocks of records its readers read (a mixin of its class,
data/dataset.py): one decoded dict per record (decoded ROW_CHUNK records at a time) or decoded batches, each item's
record locations, the user's `transform` (and what `applying()` tells it), and the wrap for the shared-memory
transport of DataLoader workers."""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast, overload

from tfr_torch.data.blocks import Block, drop, flatten, regroup
from tfr_torch.data.pipe import for_the_pipe
from tfr_torch.data.transport import Batch, lending_slabs, wrap_for_transport
from tfr_torch.decode.plan import ExamplePlan
from tfr_torch.format.location import RecordLocation

__all__ = ["ItemMaker", "applying", "ROW_CHUNK"]

ROW_CHUNK = 32  # records decoded together in per-record mode (see ItemMaker._rows)


class ItemMaker:
    """The item methods of TFRecordDataset, which sets every attribute below."""

    batch_size: int | None
    drop_last: bool
    transform: Callable[[Any], Any] | None
    location_key: str | None
    _position: int

    def _items(self, blocks: Iterator[Block], plan: Any, skip: int, wrap: bool, converts_only: bool,
               pipe: bool = False) -> Iterator[Any]:
        """The epoch's items from this reader's `blocks`, the first `skip` items (a resumed state's) left out;
        `wrap`: each sent through the shared-memory transport; `pipe`: each sent through a DataLoader worker's pipe
        (pipe.for_the_pipe); `converts_only`: see dataset._converts_only."""
        transform = self.transform
        parcel = converts_only and transform is None  # see transport.Parcel
        if self.batch_size is None:
            blocks = drop(blocks, skip)
            # rows that travel as a Batch are made one (wrap_for_transport then passes them as they are)
            marked = wrap and transform is None and not parcel and type(plan) is ExamplePlan
            items: Iterator[Any] = each(blocks) if plan is None else self._rows(blocks, plan, marked)
        else:
            marked = False
            # a Parcel goes to the slab untouched: its strings can stay in the records until then (RecordSpans)
            spans = wrap and parcel and isinstance(plan, ExamplePlan)
            items = self._batches(drop(blocks, skip * self.batch_size), plan, spans)
        if transform is None and (marked or not wrap):  # nothing to do to an item but count it
            for item in items:
                self._position += 1
                yield for_the_pipe(item) if pipe else item
            return
        for item in items:
            if transform is not None:
                _APPLYING.dataset = self  # see applying()
                try:
                    if wrap:  # a dict it returns travels as a Batch: its slab tensors go without a copy
                        with lending_slabs():
                            item = transform(item)
                    else:
                        item = transform(item)
                finally:  # (a transform that raises must not leave this dataset and its batch held here)
                    _APPLYING.dataset = _APPLYING.names = None
            if wrap:
                item = wrap_for_transport(item, parcel)
            elif pipe:
                item = for_the_pipe(item)
            self._position += 1
            yield item

    def _rows(self, blocks: Iterator[Block], plan: Any, marked: bool = False) -> Iterator[Any]:
        """One decoded dict per record, decoded ROW_CHUNK records at a time (see ExamplePlan.iter_rows); `marked`:
        each a transport Batch (an ExamplePlan's rows only)."""
        key = self.location_key
        options = {"row_type": Batch} if marked else {}
        if key is None and type(plan) is ExamplePlan:  # no Python step per row here (ExamplePlan.rows)
            return itertools.chain.from_iterable(
                plan.rows(flatten(group), Names(group), **options) for group in regroup(blocks, ROW_CHUNK, True))
        return self._rows_named(blocks, plan, key, options)

    def _rows_named(self, blocks: Iterator[Block], plan: Any, key: str | None, options: dict[str, Any]
                    ) -> Iterator[Any]:
        """_rows for other plans, and rows that get their location under `key`."""
        for group in regroup(blocks, ROW_CHUNK, True):
            rows = plan.iter_rows(flatten(group), Names(group), **options)
            if key is None:
                yield from rows
                continue
            for row, where in zip(rows, Names(group).texts()):
                row[key] = where
                yield row

    def _batches(self, blocks: Iterator[Block], plan: Any, spans: bool = False) -> Iterator[Any]:
        batch_size = self.batch_size
        assert batch_size is not None  # only a dataset with a batch_size batches
        for group in regroup(blocks, batch_size):
            records = flatten(group)
            if len(records) < batch_size and self.drop_last:
                return
            names = Names(group)
            batch = records if plan is None else plan.parse(records, names, spans=True) if spans else plan.parse(
                records, names)
            if self.location_key is not None:  # decoded (check_location_key): a dict
                cast("dict[str, Any]", batch)[self.location_key] = names.texts()
            if self.transform is not None:
                _APPLYING.names = names  # for the transform about to get this batch (see applying())
            yield batch


_APPLYING = threading.local()


def applying() -> tuple[Any, Sequence[RecordLocation] | None]:
    """What a `transform` running in this thread was given by: (the TFRecordDataset applying it, the locations of
    the records of the batch it got, None for a single record), or (None, None) outside a dataset's transform. A
    transform keys its random choices by that dataset's `epoch` and `rank`, and names a bad record by its file and
    offset (DecodeImages), in the main process as in DataLoader workers, under any wrapper (MixedDataset,
    CachedDataset) that `get_worker_info().dataset` would name instead."""
    return getattr(_APPLYING, "dataset", None), getattr(_APPLYING, "names", None)


class Names(Sequence[RecordLocation]):
    """The RecordLocation of each record of a batch (its example name), made only when an error message needs one."""

    def __init__(self, group: list[Block]) -> None:
        self._group = group
        self._ends = list(itertools.accumulate(len(block) for block in group))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def texts(self) -> list[str]:
        """Every record's location as "path:offset" (what `location_key` puts in the items)."""
        return [text for block in self._group for text in block.texts()]

    @overload
    def __getitem__(self, i: int) -> RecordLocation: ...

    @overload
    def __getitem__(self, i: slice) -> list[RecordLocation]: ...

    def __getitem__(self, i: int | slice) -> RecordLocation | list[RecordLocation]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"record {i} of a batch of {n}")
        i %= n
        b = bisect.bisect_right(self._ends, i)
        return self._group[b].location(i - (self._ends[b - 1] if b else 0))



def each(blocks: Iterator[Block]) -> Iterator[bytes]:
    for block in blocks:
        yield from block.records
