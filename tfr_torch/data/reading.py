"""Record streams for one reader, read from the files: runs of files (sequential, opened ahead for remote files)
and records by offset (random, in groups for compressed files). Records travel in blocks (blocks.py: a list of
records and where each came from, for error messages): the reader frames a buffer's worth at once, and batching
takes them without a Python step per record."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, cast

import numpy as np

from tfr_torch.data.blocks import Block, Located, blocks_of
from tfr_torch.data.open_files import OpenFiles
from tfr_torch.data.sharding import Run
from tfr_torch.data.spill import SpillFailed, local_readers, spill_folder, spilled, worth_spilling
from tfr_torch.errors import IndexMismatchError, TFRecordError
from tfr_torch.format.compression import NONE, compression_from_name, normalize_compression
from tfr_torch.format.paths import is_url
from tfr_torch.format.read_errors import _mark_skipped
from tfr_torch.format.reader import OnError, RecordReader, _resolve_policy
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.remote_open import open_ahead

__all__ = ["Source", "iter_run", "opening_ahead", "iter_random", "group_bounds", "GROUP_BYTES"]

_AHEAD = 256  # records read by offset from remote files: announced this many at a time, one window ahead
_AHEAD_CACHED = 1024  # ... with a block cache (whole blocks fetched: the window is read a block at a time)
_OPEN_AHEAD = 16  # runs of remote files a sequential reader opens ahead (their HEAD requests)
GROUP_BYTES = 64 << 20  # records of compressed files read by offset: read together, this many framed bytes at most
LOCAL_GROUP_BYTES = 4 << 20  # ... and of local uncompressed files (one compiled call a group; less memory held)


class Source(NamedTuple):
    """How to read the files: paths, per-file offsets (from indexes; None where unknown) and reader options.

    `counts` (when known) are the record counts the split was made with; a file read without an index is checked
    against them as it is read: one that ends early, or, where `whole[f]` says the count is the file's total, one
    that holds more, raises instead of giving a rank fewer or more records than the others. `origin` names where
    the counts came from, for that message. `remote`: how URLs are read (a `RemoteOptions`; None: its defaults).
    `group_bytes`: records of GZIP/ZLIB files read by offset are read in groups of at most this many framed
    bytes (see `group_bounds`). `seeks`: per file, the seek points build_index wrote beside an index given by path
    (None: RecordFile's default place). `spill_dir`: where such a shuffle may spill its records when that costs
    less (data/spill.py): True the system's temporary folder, a path that folder, False never."""

    paths: Sequence[str]
    offsets: Sequence[np.ndarray | None]
    compression: str | None
    verify: bool
    on_error: OnError
    counts: Sequence[int] | None = None
    whole: Sequence[bool] | None = None
    origin: str = "the record count"
    remote: Any = None
    group_bytes: int = GROUP_BYTES
    seeks: Sequence[str | None] | None = None  # per file, its seek points where not `<file>.idx.seek`
    spill_dir: Any = True  # where a global shuffle of GZIP/ZLIB files may spill (data/spill.py); False: never


def iter_run(source: Source, run: Run) -> Iterator[Block]:
    """Records run.start..run.stop-1 of one file, in blocks. With an index, reading starts at the first record's
    offset (one decompression pass for compressed files); without one, the records before `start` are read and
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
    at = [0]  # records read from the file so far (what `policy` looks at)
    on_error: OnError = source.on_error
    if offsets is None and on_error != "raise":
        last = checked is not None and run.stop == checked[run.file]
        on_error = _own_errors(_resolve_policy(on_error), at, run, last)
    with RecordReader(path, source.compression, source.verify, start=start, end=end,
                      on_error=on_error, remote=source.remote) as reader:
        blocks = reader.blocks(None if offsets is None else offsets[run.start : run.stop, 1])
        read = given = 0  # records read from the file; records yielded
        extra: int | None = None  # the offset of a record past the run, once one is read
        for records, offset in blocks:
            block = Block(records, path, offset)
            read += len(records)
            at[0] = read
            if read <= skip:
                continue
            if read - len(records) < skip:
                block = block.tail(skip - (read - len(records)))
            if given + len(block) >= wanted:
                if given + len(block) > wanted:
                    extra = block.location(wanted - given).offset
                    block = block.head(wanted - given)
                yield block
                break
            given += len(block)
            yield block
        else:
            if checked is not None and reader.skipped == 0:
                raise TFRecordError(f"the file ends after {read} records, but {source.origin} is "
                                    f"{checked[run.file]} and this reader was to read records {run.start} to "
                                    f"{run.stop - 1}: the file changed after the dataset was built? Build the dataset "
                                    "again (and rewrite its index or sidecar)", path, reader.offset)
            if offsets is not None and reader.skipped == 0:  # the index was checked when the dataset was built
                listed = int(offsets[-1, 0] + offsets[-1, 1])
                raise IndexMismatchError(f"the file ends after {read} of the {wanted} records (numbers {run.start} to "
                                         f"{run.stop - 1}) this reader was to read, but its index lists {len(offsets)} "
                                         f"records ending at byte {listed}: the file changed after the dataset was "
                                         "built? Rewrite its index (`tfr-torch index FILES`) and build the dataset "
                                         "again", path, reader.offset)
            return
        if (checked is not None and source.whole is not None and source.whole[run.file]
                and run.stop == checked[run.file]):
            if extra is None:
                more = next(blocks, None)
                extra = None if more is None else more[1]
            if extra is not None:
                raise TFRecordError(f"the file holds more records than {source.origin} ({checked[run.file]}): "
                                    "the file changed after the dataset was built? Build the dataset again (and "
                                    "rewrite its index or sidecar)", path, extra)


def _own_errors(report: Any, at: list[int], run: Run, last: bool) -> Any:
    """The on_error policy of a reader that reads a file from its start to its run (no index): the errors of the
    records before its run are the readers' of those records, told to them; this one reports a bad record that
    lies before one of its own (`at[0]` good records were read before it), or after its last one where its run
    ends the file. A reader frames a block of good records up to a bad one, hands it out, then reports the bad one."""

    def policy(err: TFRecordError) -> None:
        if run.start <= at[0] < run.stop or (last and at[0] >= run.stop):
            report(err)

    return policy


def opening_ahead(source: Source, runs: Iterable[Run], depth: int = 1) -> Iterator[Run]:
    """The runs, each handed out once the files of the runs after it are being opened (remote files,
    `open_ahead`): the HEAD requests of the next `_OPEN_AHEAD` runs' files, and the first blocks of the next
    `depth` runs (from where each starts), so a reader that reads its runs one after another (or `depth` at a
    time, interleaved) finds its next file open and its first blocks coming instead of waiting for their round
    trips."""
    pending: list[Run] = []
    warmed = 0  # how many of `pending` have their first blocks requested
    runs = iter(runs)
    while True:
        while len(pending) <= max(depth, _OPEN_AHEAD):
            run = next(runs, None)
            if run is None:
                break
            if is_url(source.paths[run.file]):
                open_ahead(source.paths[run.file], source.remote, start=None)
            pending.append(run)
        if not pending:
            return
        for run in pending[warmed : depth + 1]:
            path = source.paths[run.file]
            if is_url(path):
                offsets = source.offsets[run.file]
                plain = (normalize_compression(source.compression, allow_auto=True) == NONE
                         or (source.compression == "auto" and compression_from_name(path) is None))
                start = (int(offsets[run.start, 0])  # a compressed file's offsets are not where its bytes are read
                         if plain and offsets is not None and 0 < run.start < len(offsets) else 0)
                open_ahead(path, source.remote, start=start)
        warmed = max(warmed, min(depth + 1, len(pending))) - 1
        yield pending.pop(0)


def group_bounds(sizes: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Cut records in reading order (their framed sizes) into consecutive groups of at most `budget` bytes each
    (a record larger than the budget makes a group alone): [(start, stop), ...].

    >>> group_bounds(np.array([4, 4, 4, 9, 1]), 8)
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    """
    ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
    bounds, start = [], 0
    while start < len(ends):
        before = int(ends[start - 1]) if start else 0
        stop = max(int(np.searchsorted(ends, before + budget, side="right")), start + 1)
        bounds.append((start, stop))
        start = stop
    return bounds


def iter_random(source: Source, global_ids: np.ndarray, counts: Sequence[int]) -> Iterator[Block]:
    """Records by global number, each read by its offset, in blocks. Files are kept open (at most half the
    process's descriptor limit of them: data/open_files.py; the least recently used closed first). Records of remote
    files are announced to their handles a window of `_AHEAD` ahead, so their range requests run together while
    the window before is read. Records of GZIP/ZLIB files (read through their seek points) are read in groups of
    `source.group_bytes`: each group's records of a file are inflated together (RecordFile.read_many: one pass over
    the intervals they touch, instead of one restart per record) and yielded in the order asked; a reader then
    holds at most one group's records of compressed files, plus one run's compressed bytes. A record that does not
    read (corrupt, truncated) raises, or under `source.on_error` ("skip", a callable) is handed to it and left out,
    as a sequential reader does."""
    ends = np.cumsum(counts)
    policy = _resolve_policy(source.on_error)  # None: raise
    tables = cast("Sequence[np.ndarray]", source.offsets)  # reading by offset: every file has its index
    remote = any(is_url(p) for p in source.paths)

    def opener(f: int) -> RecordFile:
        seek = source.seeks[f] if source.seeks is not None else None
        return RecordFile(source.paths[f], source.compression, source.verify, remote=source.remote, seek=seek)

    files: OpenFiles[RecordFile] = OpenFiles(opener)
    handle = files.get

    def where(ids: np.ndarray) -> tuple[list[int], list[int]]:
        f = np.searchsorted(ends, ids, side="right")
        return f.tolist(), (ids - np.where(f > 0, ends[np.maximum(f - 1, 0)], 0)).tolist()

    def announce(ids: np.ndarray) -> list[tuple[int, RecordFile, Any]]:
        """Announce these records to their remote files' handles (which stay open until `release`d)."""
        tokens = []
        by_file: dict[int, list[int]] = {}
        for f, i in zip(*where(ids)):
            by_file.setdefault(f, []).append(i)
        for f in by_file:  # the files not open yet are opened together: their round trips overlap
            if f not in files and is_url(source.paths[f]):
                open_ahead(source.paths[f], source.remote, readahead=False)
        for f, rows in by_file.items():
            if is_url(source.paths[f]):
                table = tables[f][rows]
                opened = files.pin(f)
                tokens.append((f, opened, opened.prefetch(table[:, 0], table[:, 1])))
        return tokens

    def release(tokens: list[tuple[int, RecordFile, Any]]) -> None:
        for f, opened, token in tokens:
            opened.release(token)
            files.unpin(f)

    def grouped(files_of: list[int], rows: list[int]) -> Iterator[Located]:
        """Records in the order given; those of files that read a group faster than one by one (compressed, remote
        with a cache, local with the compiled core: RecordFile.groups) read a group at a time."""
        packed = {f: handle(f).groups for f in set(files_of)}
        if not any(packed.values()):
            yield from one_by_one(files_of, rows)
            return
        file_ids, row_ids = np.asarray(files_of, dtype=np.int64), np.asarray(rows, dtype=np.int64)
        located = np.empty((len(rows), 2), dtype=np.int64)  # each record's (offset, framed size)
        for f in packed:
            mine = file_ids == f
            located[mine] = tables[f][row_ids[mine], :2]
        limit = source.group_bytes if compressed or remote else min(source.group_bytes, LOCAL_GROUP_BYTES)
        for start, stop in group_bounds(located[:, 1], limit):
            ready: list[bytes | None] = [None] * (stop - start)  # the group's records read together
            for f in set(files_of[start:stop]):
                if packed[f]:
                    at = np.flatnonzero(file_ids[start:stop] == f)
                    try:
                        read = handle(f).read_many(located[start + at, 0], located[start + at, 1])
                    except TFRecordError:
                        # a bad record among them: each is read alone below, in the order asked, so the records
                        # ahead of the bad one come out first and it raises at its turn (or goes to `policy`)
                        continue
                    for k, record in zip(at.tolist(), read):
                        ready[k] = record
            for f, (offset, size), got in zip(files_of[start:stop], located[start:stop].tolist(), ready):
                data = one(f, offset, size) if got is None else got
                if data is not None:
                    yield Located(data, source.paths[f], offset)

    def one_by_one(files_of: list[int], rows: list[int]) -> Iterator[Located]:
        for f, i in zip(files_of, rows):
            offset, size = (int(v) for v in tables[f][i])
            record = one(f, offset, size)
            if record is not None:
                yield Located(record, source.paths[f], offset)

    def one(f: int, offset: int, size: int) -> bytes | None:
        """The record at `offset` of file `f`; None when it does not read and `policy` took its error."""
        try:
            return handle(f).read(offset, size)
        except TFRecordError as err:
            if policy is None:
                raise
            span = (offset, offset + size)  # in the decompressed stream for a GZIP/ZLIB file
            _mark_skipped(err, 1, False, span, None if handle(f).compressed else span)
            policy(err)
            return None

    compressed = source.compression not in (None, "")  # "auto" may find some compressed: asked of each file

    def window_step() -> int:
        """Records of remote files read (announced, grouped) a window at a time."""
        cached = source.remote is not None and source.remote.cache_dir is not None
        return _AHEAD_CACHED if cached else _AHEAD

    def records() -> Iterator[Located]:
        step = window_step() if remote else max(len(global_ids), 1)
        ahead = announce(global_ids[:step]) if remote else []
        for w in range(0, len(global_ids), step):
            window = global_ids[w : w + step]
            current, ahead = ahead, (announce(global_ids[w + step : w + 2 * step]) if remote else [])
            files_of, rows = where(window)
            yield from grouped(files_of, rows)
            release(current)

    def spill_plan() -> tuple[Any, ...] | None:
        """(folder, file of each record, (offset, framed size) of each, group bounds, where each file's pass ends)
        where this share's records are all of compressed local files and spilling them costs less (spill.py)."""
        folder = spill_folder(source.spill_dir)
        if folder is None or not len(global_ids):
            return None
        files_of, rows = where(global_ids)
        touched = sorted(set(files_of))
        if not all(handle(f).compressed for f in touched):
            return None
        file_ids, row_ids = np.asarray(files_of, dtype=np.int64), np.asarray(rows, dtype=np.int64)
        located = np.empty((len(rows), 2), dtype=np.int64)
        for f in touched:
            mine = file_ids == f
            located[mine] = tables[f][row_ids[mine], :2]
        bounds = group_bounds(located[:, 1], source.group_bytes)
        read_as = bounds  # the groups the grouped reads would read: of remote files, within windows (records())
        if remote:
            step = window_step()
            read_as = [(w + a, w + b) for w in range(0, len(located), step)
                       for a, b in group_bounds(located[w : w + step, 1], source.group_bytes)]
        stops = {f: int(located[file_ids == f].sum(axis=1).max()) for f in touched}  # where each pass ends
        spans = {f: handle(f).seek_span for f in touched}
        if not worth_spilling(folder, file_ids, located, read_as, spans, stops, local_readers()):
            return None
        # stale seek points of a local file: the grouped reads raise where they need one, the pass would not (a
        # remote file's are not asked: a request per point; its pass is checked against the index and the CRCs)
        if not all(is_url(source.paths[f]) or handle(f).seek_points_match() for f in touched):
            return None
        return folder, file_ids, located, bounds, stops

    try:
        plan = spill_plan()
        if plan is None:
            yield from blocks_of(records())
        else:
            folder, file_ids, located, bounds, stops = plan
            spill = spilled(folder, source.paths, source.compression, source.verify, file_ids, located, bounds,
                            stops, one, source.remote)
            try:
                first = next(spill, None)  # the pass over the files: SpillFailed comes before any record
            except SpillFailed as err:
                warnings.warn(f"{err}; reading this shuffle's records of compressed files in groups instead "
                              "(TFRecordDataset(spill_dir=...) names another folder)", RuntimeWarning, stacklevel=2)
                yield from blocks_of(records())
                return
            if first is not None:
                yield first
                yield from spill
    finally:
        files.close()
