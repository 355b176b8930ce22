"""The open files of a reader that reads records by offset from many files (a global shuffle, random access):
`OpenFiles`, at most a budget of them open at once (the least recently used closed first), so a shuffle over more
files than the process may open (`ulimit -n`, often 1024; TFDS's ImageNet has 1,024 train shards) reads them all
instead of failing with "Too many open files". The budget is the process's: readers with files open share it (a
mixture of several large datasets read in one DataLoader worker)."""

from __future__ import annotations

import errno
import resource
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["OpenFiles", "open_budget", "interleaved_within_limit"]

_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class _Closable(Protocol):
    def close(self) -> None: ...


H = TypeVar("H", bound=_Closable)


def open_budget(share: float = 0.5, least: int = 8) -> int:
    """How many files the readers of this process keep open in all (OpenFiles divide it): `share` of its
    descriptor limit (RLIMIT_NOFILE's soft limit; the rest is for everything else the process opens), at least
    `least`."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 1 << 30
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 1 << 30
    return max(least, int(soft * share))


T = TypeVar("T")


def interleaved_within_limit(blocks: Iterator[T], interleave: int) -> Iterator[T]:
    """`blocks` of a reader that reads `interleave` files at once (each open from its first record to its last):
    such files are not OpenFiles' to close between turns, so an interleave wider than the descriptor limit runs out
    of descriptors; the error then names `interleave` and the limit, not only the file it could not open."""
    try:
        yield from blocks
    except OSError as err:
        if err.errno not in _OUT_OF_DESCRIPTORS or interleave <= 1:
            raise
        try:
            limit = f"{resource.getrlimit(resource.RLIMIT_NOFILE)[0]} (RLIMIT_NOFILE, `ulimit -n`)"
        except (OSError, ValueError):
            limit = "its limit (RLIMIT_NOFILE, `ulimit -n`)"
        raise OSError(err.errno, f"{err.strerror}: this reader keeps interleave={interleave} files open at once "
                      f"(with everything else the process has open), and the process may hold {limit} descriptors: "
                      "lower `interleave` or raise the limit", err.filename) from err


_READERS: weakref.WeakSet[OpenFiles[Any]] = weakref.WeakSet()  # every OpenFiles of this process
_READERS_LOCK = threading.Lock()


def _active_others(me: OpenFiles[Any]) -> int:
    """How many OpenFiles of this process other than `me` have files open."""
    with _READERS_LOCK:
        readers = list(_READERS)
    return sum(1 for r in readers if r is not me and len(r))


class OpenFiles(Generic[H]):
    """Handles by file number, opened by `opener(file)` when asked for and kept open while fewer than its share of
    `budget` are (the budget divided between the OpenFiles of the process with files open, at least 8 or the
    budget); past it (or when an open fails for want of descriptors, EMFILE/ENFILE) its least recently used ones
    not pinned are closed. A pinned handle (`pin`, until as many `unpin`s) stays open: one being read by a thread, or
    with reads announced to it. Threads may share one: a lock guards the table (not the reads).

    >>> files = OpenFiles(lambda f: open(paths[f], "rb"), budget=2)  # doctest: +SKIP
    >>> handle = files.pin(3)  # doctest: +SKIP
    >>> try: handle.read() finally: files.unpin(3)  # doctest: +SKIP
    """

    def __init__(self, opener: Callable[[int], H], budget: int | None = None) -> None:
        self._opener = opener
        self.budget = max(1, open_budget() if budget is None else budget)
        self._open: OrderedDict[int, H] = OrderedDict()
        self._pins: dict[int, int] = {}
        self._lock = threading.Lock()
        self.opened = 0  # how many opens so far (reopens included)
        with _READERS_LOCK:
            _READERS.add(self)

    def __contains__(self, f: int) -> bool:
        return f in self._open

    def __len__(self) -> int:
        return len(self._open)

    def handles(self) -> dict[int, H]:
        """The open handles now, by file number."""
        with self._lock:
            return dict(self._open)

    def get(self, f: int) -> H:
        """File `f`'s handle, opened (or opened again) where it is not open. Another thread's `get` or `pin` may
        close it: a thread that reads it while others open files `pin`s it instead."""
        with self._lock:
            return self._get(f)

    def _get(self, f: int) -> H:
        handle = self._open.get(f)
        if handle is not None:
            self._open.move_to_end(f)
            return handle
        share = self.share()
        if len(self._open) >= share:
            self._shed(len(self._open) - share + 1)
        try:
            handle = self._opener(f)
        except OSError as err:
            if err.errno not in _OUT_OF_DESCRIPTORS or not self._shed(max(1, len(self._open) // 2)):
                raise
            handle = self._opener(f)  # half of ours closed: once more (another EMFILE is the caller's)
        self.opened += 1
        self._open[f] = handle
        return handle

    def share(self) -> int:
        """How many files this one keeps open: the budget divided between it and the other OpenFiles of the
        process that have files open (each keeps at least 8, or the budget where that is less)."""
        return max(min(self.budget, 8), self.budget // (1 + _active_others(self)))

    def pin(self, f: int) -> H:
        """File `f`'s handle (as `get`), kept open until as many `unpin(f)`s."""
        with self._lock:
            handle = self._get(f)
            self._pins[f] = self._pins.get(f, 0) + 1
            return handle

    def unpin(self, f: int) -> None:
        with self._lock:
            left = self._pins.get(f, 0) - 1
            if left > 0:
                self._pins[f] = left
            else:
                self._pins.pop(f, None)

    def _shed(self, count: int) -> int:
        """Close up to `count` of the least recently used handles not pinned; how many were closed."""
        victims = [f for f in self._open if f not in self._pins][:count]
        for f in victims:
            self._open.pop(f).close()
        return len(victims)

    def close(self) -> None:
        """Close every handle (pinned ones too)."""
        with self._lock:
            while self._open:
                self._open.popitem(last=False)[1].close()
