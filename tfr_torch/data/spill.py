"""A global shuffle's records of GZIP/ZLIB files through a spill file, where reading them in groups costs more than
one pass over the files.

Read in groups (reading.iter_random), each group of the shuffled order inflates every seek interval its records
touch; once a reader's share is several groups and its records are small beside the interval, every group touches
nearly every interval, and the epoch costs about (share / group) passes over the files. Spilled, the reader makes
one sequential pass over each file it has records of (up to its last such record) and appends each of its records
to its group's region of an unnamed temporary file (the file vanishes when closed, also after a crash; records
gathered in memory and written WRITE_BYTES at a time), then reads the regions back one group at a time, in order,
each record cut out at its place in the shuffled order. The order, the errors and what `on_error` gets are the
grouped path's: a record the pass did not deliver (a bad one, one past a failed GZIP member, one whose index line
the file denies) is read alone at its turn (the caller's `one`), which raises or reports what is wrong there.
Memory: one group's region and its records (two groups' bytes), the records gathered for writing, and 25 bytes of
bookkeeping per record of the share.

Chosen per reader and epoch when the grouped path's estimated inflation (the distinct intervals of each group,
times the span) exceeds SPILL_FACTOR x the spill's (one pass over the files, plus the share written and read once),
and the temporary folder has room for the share, times the readers of the machine that may spill at once
(local_readers), plus FREE_MARGIN. Where the spill file cannot be made or written
(the disk filled up since), the share is read in groups after all, with a warning."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from torch.utils.data import get_worker_info

from tfr_torch.data.blocks import Block
from tfr_torch.errors import TFRecordError
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.seek import DEFAULT_SPAN

__all__ = ["spill_folder", "local_readers", "worth_spilling", "spilled", "SpillFailed",
           "SPILL_FACTOR", "FREE_MARGIN"]

SPILL_FACTOR = 1.5  # spill when the grouped reads would inflate more than this many times the spill's cost
FREE_MARGIN = 256 << 20  # bytes the temporary folder keeps free beyond the spill file
WRITE_BYTES = 32 << 20  # records gathered in memory before they are written to the spill file


def spill_folder(setting: Any) -> str | None:
    """The folder a `spill_dir` setting names: True the system's temporary folder (TMPDIR), False/None none."""
    if setting is True:
        return tempfile.gettempdir()
    if setting is False or setting is None:
        return None
    return str(os.fspath(setting))


def local_readers() -> int:
    """How many readers of this machine may spill at once: this process's DataLoader workers, times the ranks of
    the machine where the launcher says (LOCAL_WORLD_SIZE, as torchrun sets it)."""
    info = get_worker_info()
    try:
        ranks = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        ranks = 1
    return (info.num_workers if info is not None else 1) * ranks


def worth_spilling(folder: str, file_ids: np.ndarray, located: np.ndarray, bounds: Sequence[tuple[int, int]],
                   spans: dict[int, int], ends: dict[int, int], readers: int = 1) -> bool:
    """Whether spilling the share (records `located[k]` = (decompressed offset, framed size) of file `file_ids[k]`,
    read in groups `bounds`) into `folder` inflates less than the grouped reads would. `spans`: each file's seek
    interval; `ends`: where the pass over each file stops (the end of its last record of the share); `readers`:
    how many readers may spill shares like this one into the folder at once (each needs its room)."""
    if len(bounds) < 2:  # one group is one pass over what it touches: nothing to gain
        return False
    span = np.array([spans.get(int(f), DEFAULT_SPAN) for f in range(int(file_ids.max()) + 1)], dtype=np.int64)
    interval = file_ids.astype(np.int64) << 40 | located[:, 0] // span[file_ids]
    grouped = sum(int(span[file_ids[start:stop]].mean()) * len(np.unique(interval[start:stop]))
                  for start, stop in bounds)
    share = int(located[:, 1].sum())
    cost = sum(ends.values()) + share
    if grouped <= SPILL_FACTOR * cost:
        return False
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return False
    return free >= share * readers + FREE_MARGIN


def spilled(folder: str, paths: Sequence[str], compression: str | None, verify: bool, file_ids: np.ndarray,
            located: np.ndarray, bounds: Sequence[tuple[int, int]], ends: dict[int, int],
            one: Callable[[int, int, int], bytes | None], remote: Any = None) -> Iterator[Block]:
    """The share's records in its order, in blocks: spilled as the module docstring says, each record the pass did
    not deliver read by `one(file, offset, framed size)` at its turn (None: handed to `on_error` and left out;
    raising: after a block of the records before it)."""
    n = len(file_ids)
    sizes = located[:, 1] - OVERHEAD
    group_of = np.zeros(n, dtype=np.int64)
    for g, (start, stop) in enumerate(bounds):
        group_of[start:stop] = g
    region = np.zeros(len(bounds) + 1, dtype=np.int64)  # each group's bytes in the spill file, in group order
    np.cumsum([int(sizes[start:stop].sum()) for start, stop in bounds], out=region[1:])
    place = np.full(n, -1, dtype=np.int64)  # each record's offset in its group's region; -1: not delivered
    try:
        spill = tempfile.TemporaryFile(dir=folder)
    except OSError as err:
        raise SpillFailed(f"could not make a spill file in {folder}: {err}") from err
    try:
        # its full size at once (sparse): a region whose last records were not delivered still reads whole
        os.ftruncate(spill.fileno(), int(region[-1]))
    except OSError as err:
        spill.close()  # now: the traceback the caller catches would keep it open (and warn when collected)
        raise SpillFailed(f"could not make a spill file in {folder}: {err}") from err
    with spill:
        writer = _Writer(spill.fileno(), region, folder)
        for f in sorted(ends):
            _pass(paths[f], compression, verify, np.flatnonzero(file_ids == f), located, ends[f], group_of, place,
                  writer, remote)
        writer.flush()
        for g, (start, stop) in enumerate(bounds):
            # each record's (path, offset), a group at a time (for the whole share: ~100 bytes a record)
            where = list(zip((paths[f] for f in file_ids[start:stop].tolist()), located[start:stop, 0].tolist()))
            data = _pread(spill.fileno(), int(region[g + 1] - region[g]), int(region[g]))
            if len(data) != region[g + 1] - region[g]:
                raise OSError(f"the spill file in {folder} ended at byte {int(region[g]) + len(data)}, inside group "
                              f"{g} of the shuffle ({int(region[g])} to {int(region[g + 1])})")
            starts = place[start:stop]
            cuts = zip(starts.tolist(), (starts + sizes[start:stop]).tolist())
            if starts.min(initial=0) >= 0:  # every record delivered (the usual case): the group in one block
                yield Block([data[a:b] for a, b in cuts], where=where)
                continue
            yield from _with_missing(data, cuts, start, stop, where, file_ids, located, one)


def _with_missing(data: bytes, cuts: Iterator[tuple[int, int]], start: int, stop: int,
                  where: list[tuple[str, int]], file_ids: np.ndarray, located: np.ndarray,
                  one: Callable[[int, int, int], bytes | None]) -> Iterator[Block]:
    """A group's records, those the pass did not deliver (`cuts` (-1, ...)) read alone at their turn. `where`: the
    group's records' (path, offset), `where[0]` that of the share's record `start`."""
    records: list[bytes] = []
    first = start  # the share's position of records[0]
    for k, (a, b) in zip(range(start, stop), cuts):
        if a >= 0:
            records.append(data[a:b])
            continue
        try:
            record = one(int(file_ids[k]), int(located[k, 0]), int(located[k, 1]))
        except Exception:
            if records:
                yield Block(records, where=where[first - start : k - start])
            raise
        if record is not None:
            records.append(record)
            continue
        if records:  # the record was handed to on_error: the block ends before it
            yield Block(records, where=where[first - start : k - start])
        records, first = [], k + 1
    if records:
        yield Block(records, where=where[first - start :])


class SpillFailed(OSError):
    """The spill file could not be made or written (a full disk): raised before any record is yielded, so the
    caller can read the share in groups instead."""


class _Writer:
    """Records appended to their groups' regions of the spill file, gathered in memory and written WRITE_BYTES at a
    time (each group's gathered records in one os.pwrite)."""

    def __init__(self, fd: int, region: np.ndarray, folder: str) -> None:
        self.fd = fd
        self.folder = folder
        self.next = region[:-1].tolist()  # where each group's next gathered bytes go
        self.filled = [0] * (len(region) - 1)  # bytes of each group placed so far
        self.pending: list[list[bytes]] = [[] for _ in range(len(region) - 1)]
        self.held = 0

    def add(self, groups: list[int], records: list[bytes]) -> list[int]:
        """Place each record in its group's region; the offset of each there."""
        filled, pending = self.filled, self.pending
        places = []
        for group, record in zip(groups, records):
            places.append(filled[group])
            filled[group] += len(record)
            pending[group].append(record)
            self.held += len(record)
        if self.held >= WRITE_BYTES:
            self.flush()
        return places

    def flush(self) -> None:
        for group, records in enumerate(self.pending):
            if not records:
                continue
            data = b"".join(records)
            try:
                _pwrite(self.fd, data, self.next[group])
            except OSError as err:
                raise SpillFailed(f"could not write the spill file in {self.folder}: {err}") from err
            self.next[group] += len(data)
            records.clear()
        self.held = 0


def _pass(path: str, compression: str | None, verify: bool, mine: np.ndarray, located: np.ndarray, end: int,
          group_of: np.ndarray, place: np.ndarray, writer: _Writer, remote: Any = None) -> None:
    """One sequential read of `path` up to `end`, each record of the share (`mine`: their positions in it) given
    to `writer` in its group, `place` set to where it went. Errors are left to the caller's read of the record
    alone (the reader goes on past them as under on_error="skip", without warnings)."""
    offsets = located[mine, 0]
    order = np.argsort(offsets, kind="stable")
    wanted, positions = offsets[order], mine[order]
    last = len(wanted) - 1

    def quiet(err: TFRecordError) -> None:
        pass

    with RecordReader(path, compression, verify, end=end, on_error=quiet, remote=remote) as reader:
        for records, off in reader.blocks():
            lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
            starts = np.empty(len(records), dtype=np.int64)
            starts[0] = off
            np.cumsum(lengths[:-1] + OVERHEAD, out=starts[1:])
            starts[1:] += off
            at = np.searchsorted(wanted, starts)
            hit = np.flatnonzero((at < len(wanted)) & (wanted[np.minimum(at, last)] == starts))
            ks = positions[at[hit]]
            fits = lengths[hit] == located[ks, 1] - OVERHEAD  # else: the index disagrees; the read alone says so
            hit, ks = hit[fits], ks[fits]
            if len(hit) == len(records):
                chosen = records
            else:
                chosen = [records[j] for j in hit.tolist()]
            place[ks] = writer.add(group_of[ks].tolist(), chosen)


def _pwrite(fd: int, data: bytes, offset: int) -> None:
    """All of `data` at `offset`: os.pwrite, again for the rest where it writes less (a full disk raises)."""
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        if done <= 0:
            raise OSError(f"nothing written at byte {offset} (is the disk full?)")
        view, offset = view[done:], offset + done


def _pread(fd: int, size: int, offset: int) -> bytes:
    """`size` bytes at `offset` (fewer at the end of the file): os.pread, again where it returns fewer (a read of
    over 2 GiB does)."""
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
