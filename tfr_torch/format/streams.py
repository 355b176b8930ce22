"""Small helpers over the inputs the readers open (format/reader.py, format/record_file.py): their size, whether
they seek, and a stream with bytes already read put back in front of it."""

from __future__ import annotations

import os
import stat
from typing import IO

_BUFFER = 1 << 20  # RecordReader's default buffer; RecordFile reads at most 16 times this per read call


def _seekable(raw: IO[bytes]) -> bool:
    try:
        return bool(raw.seekable())
    except (AttributeError, OSError, ValueError):
        return False


class _Prefixed:
    """`readinto` over some bytes already read from a stream, then the rest of the stream."""

    def __init__(self, head: bytes, raw: IO[bytes]) -> None:
        self._head = memoryview(head)
        self._raw = raw

    def readinto(self, view: memoryview, /) -> int:
        if self._head.nbytes:
            n = min(len(view), self._head.nbytes)
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        readinto = getattr(self._raw, "readinto", None)
        if readinto is not None:
            return readinto(view) or 0
        data = self._raw.read(len(view))
        view[: len(data)] = data
        return len(data)


def _size_of(raw: IO[bytes]) -> int | None:
    """The size of a regular file; None for a stream of unknown length (a pipe, a FIFO, /dev/stdin, a socket, a
    character device: their st_size says nothing about what they hold, and it is read to its end instead)."""
    try:
        st = os.fstat(raw.fileno())
        return st.st_size if stat.S_ISREG(st.st_mode) else None
    except (AttributeError, OSError, ValueError):
        size = getattr(raw, "size", None)
        return int(size) if isinstance(size, int) else None
