"""Small helpers over the inputs the readers open (format/reader.py, format/record_file.py): their size, whether
they seek, and a stream with bytes already read put back in front of it."""

from __future__ import annotations

import os
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
    try:
        return os.fstat(raw.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        size = getattr(raw, "size", None)
        return int(size) if isinstance(size, int) else None
