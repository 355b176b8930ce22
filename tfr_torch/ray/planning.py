"""Which records each Ray read task reads: pure functions over what is known of the files, no I/O.

A file is read whole, or, when it is uncompressed and has an index, cut into record ranges so that one big file
still spreads over many tasks. Pieces are then grouped, in order, into at most `parallelism` tasks of similar
byte sizes, so the dataset's row order is the files' order whatever the number of tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["FileInfo", "Piece", "plan_pieces", "group_pieces"]


@dataclass(frozen=True)
class FileInfo:
    """What the planner knows of one file: its size in bytes, its record count (from an index or a sidecar; None
    when unknown) and, when it has an index, the (n, 2) offsets and framed sizes of its records. `splittable`:
    the file can be read by record ranges (an index over an uncompressed file). `partial`: only records
    `[first, first + count)` are wanted (a TFDS split slice such as "train[:10%]"); `offsets` then holds just theirs."""

    path: str
    size: int
    count: int | None
    offsets: np.ndarray | None
    splittable: bool
    first: int = 0
    partial: bool = False


@dataclass(frozen=True)
class Piece:
    """Records `[first, first + count)` of a file, found between byte offsets `start` and `end` (`end` None: to
    the end of the file; `count` None: unknown, read all); `nbytes` estimates the bytes read. `exact`: read
    exactly `count` records, after skipping `skip` records from `start` (a slice of a file without an index)."""

    path: str
    start: int
    end: int | None
    first: int
    count: int | None
    nbytes: int
    exact: bool = False
    skip: int = 0


def _split(n: int, parts: int) -> list[int]:
    base, extra = divmod(n, parts)
    return [base + (1 if p < extra else 0) for p in range(parts)]


def plan_pieces(files: Sequence[FileInfo], parallelism: int) -> list[Piece]:
    """Pieces covering every record of every file once, in file order. With fewer files than `parallelism`,
    splittable files are cut into record ranges, each file into a number of pieces proportional to its size."""
    if parallelism < 1:
        raise ValueError(f"parallelism must be >= 1, got {parallelism}")
    total = sum(f.size for f in files)
    split = len(files) < parallelism and total > 0
    pieces: list[Piece] = []
    for f in files:
        parts = 1
        if split and f.splittable and f.count:
            parts = min(f.count, max(1, round(parallelism * f.size / total)))
        if parts == 1 and f.partial and f.offsets is not None and f.count:
            start, end = int(f.offsets[0, 0]), int(f.offsets[-1, 0] + f.offsets[-1, 1])
            pieces.append(Piece(f.path, start, end, f.first, f.count, end - start, exact=True))
        elif parts == 1 and f.partial:  # no index: read from the start, skip to the slice
            pieces.append(Piece(f.path, 0, None, f.first, f.count, f.size, exact=True, skip=f.first))
        elif parts == 1:
            pieces.append(Piece(f.path, 0, None, 0, f.count, f.size))
        else:
            assert f.count is not None and f.offsets is not None  # only an indexed file with a count is split
            first = 0
            for n in _split(int(f.count), parts):
                start = int(f.offsets[first, 0])
                end = int(f.offsets[first + n - 1, 0] + f.offsets[first + n - 1, 1])
                pieces.append(Piece(f.path, start, end, f.first + first, n, end - start, exact=True))
                first += n
    return pieces


def group_pieces(pieces: Sequence[Piece], parallelism: int) -> list[list[Piece]]:
    """Consecutive pieces grouped into at most `parallelism` tasks of similar byte sizes (a piece goes to the task
    its midpoint falls in); no empty tasks."""
    total = sum(p.nbytes for p in pieces)
    if total <= 0:
        return [list(pieces)] if pieces else []
    groups: list[list[Piece]] = []
    last = -1
    done = 0
    for piece in pieces:
        task = min(int((done + piece.nbytes / 2) * parallelism / total), parallelism - 1)
        if task != last or not groups:
            groups.append([])
            last = task
        groups[-1].append(piece)
        done += piece.nbytes
    return groups
