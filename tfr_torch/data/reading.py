"""Record streams for one reader: runs of files (sequential), records by offset (random), interleaving and a
bounded shuffle buffer. Every record travels with its file and byte offset, for error messages."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import NamedTuple, cast

import numpy as np

from tfr_torch.data.sharding import Run
from tfr_torch.errors import TFRecordError
from tfr_torch.format.reader import OnError, RecordFile, RecordReader

__all__ = ["Located", "Source", "iter_run", "iter_random", "interleave", "shuffle_buffer"]


class Located(NamedTuple):
    data: bytes
    path: str
    offset: int


class Source(NamedTuple):
    """How to read the files: paths, per-file offsets (from indexes; None where unknown) and reader options.

    `counts` (when known) are the record counts the split was made with; a file read without an index is checked
    against them as it is read: one that ends early, or, where `whole[f]` says the count is the file's total, one
    that holds more, raises instead of giving a rank fewer or more records than the others. `origin` names where
    the counts came from, for that message."""

    paths: Sequence[str]
    offsets: Sequence[np.ndarray | None]
    compression: str | None
    verify: bool
    on_error: OnError
    counts: Sequence[int] | None = None
    whole: Sequence[bool] | None = None
    origin: str = "the record count"


def iter_run(source: Source, run: Run) -> Iterator[Located]:
    """Records run.start..run.stop-1 of one file. With an index, reading starts at the first record's offset
    (one decompression pass for compressed files); without one, the records before `start` are read and
    dropped."""
    path = source.paths[run.file]
    offsets = source.offsets[run.file]
    wanted = run.stop - run.start
    if wanted <= 0:
        return
    if offsets is not None:
        start = int(offsets[run.start, 0])
        end = int(offsets[run.stop - 1, 0] + offsets[run.stop - 1, 1])
        skip = 0
    else:
        start, end, skip = 0, None, run.start
    checked = source.counts if offsets is None else None  # counts to check the file against as it is read
    with RecordReader(path, source.compression, source.verify, start=start, end=end, on_error=source.on_error) as reader:
        offset = reader.offset
        n = -1
        for n, record in enumerate(reader):
            if n >= skip:
                yield Located(record, path, offset)
                if n + 1 - skip >= wanted:
                    break
            offset = reader.offset
        else:
            if checked is not None and reader.skipped == 0:
                raise TFRecordError(f"the file ends after {n + 1} records, but {source.origin} is "
                                    f"{checked[run.file]} and this reader was to read records {run.start} to "
                                    f"{run.stop - 1}: the file changed after the dataset was built? Build the dataset "
                                    "again (and rewrite its index or sidecar)", path, reader.offset)
            return
        if (checked is not None and source.whole is not None and source.whole[run.file]
                and run.stop == checked[run.file]):
            more = reader.offset
            if next(reader, None) is not None:
                raise TFRecordError(f"the file holds more records than {source.origin} ({checked[run.file]}): "
                                    "the file changed after the dataset was built? Build the dataset again (and "
                                    "rewrite its index or sidecar)", path, more)


def iter_random(source: Source, global_ids: np.ndarray, counts: Sequence[int]) -> Iterator[Located]:
    """Records by global number, each read by its offset (one open handle per file)."""
    ends = np.cumsum(counts)
    tables = cast("Sequence[np.ndarray]", source.offsets)  # reading by offset: every file has its index
    files: dict[int, RecordFile] = {}
    try:
        for g in global_ids.tolist():
            f = int(np.searchsorted(ends, g, side="right"))
            i = g - (int(ends[f - 1]) if f else 0)
            handle = files.get(f)
            if handle is None:
                handle = files[f] = RecordFile(source.paths[f], source.compression, source.verify)
            offset, size = (int(v) for v in tables[f][i])
            yield Located(handle.read(offset, size), source.paths[f], offset)
    finally:
        for handle in files.values():
            handle.close()


def interleave(streams: Sequence[Iterator[Located]] | Iterator[Iterator[Located]], cycle: int) -> Iterator[Located]:
    """Round-robin over up to `cycle` streams at a time, opening the next stream when one ends (as
    tf.data's interleave), so a shuffle buffer mixes several files."""
    pending = iter(streams)
    active = list(itertools.islice(pending, max(cycle, 1)))
    while active:
        still = []
        for stream in active:
            item = next(stream, None)
            if item is None:
                replacement = next(pending, None)
                if replacement is not None:
                    still.append(replacement)
                continue
            yield item
            still.append(stream)
        active = still


def shuffle_buffer(items: Iterator[Located], size: int, rng: np.random.Generator) -> Iterator[Located]:
    """A bounded shuffle: keep `size` items, emit a random one as each new item arrives, then drain in random
    order (tf.data's shuffle(buffer_size))."""
    if size <= 1:
        yield from items
        return
    buffer: list[Located] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        j = int(rng.integers(size))
        yield buffer[j]
        buffer[j] = item
    order = rng.permutation(len(buffer))
    for j in order.tolist():
        yield buffer[j]
