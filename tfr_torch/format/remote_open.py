"""Opening remote files, and opening them before they are read.

Opening a remote file costs a round trip (its size and version: a HEAD request), and its first block another.
A reader that opens its next file only when the current one ends waits for both each time; a reader that reads
a file in less time than a round trip (a block cache on local disk, small files) waits for them on every file.
`open_ahead` starts those requests in the process's request threads before the file is needed: a sequential
reader opens the next files while it reads the current one (`opening_ahead` in tfr_torch.data.reading: the HEADs
of the next 16 runs' files, the first blocks of the next one), and a shuffle through the index opens the files
of a window together. `open_remote` then takes the open file instead of opening it again.

A file opened ahead and never taken (a reader that stopped early) is closed once 64 more are waiting; each
process (each DataLoader worker) has its own. Errors (a missing file) are raised where the file is taken.

>>> from tfr_torch.format.remote_open import open_ahead, open_remote
>>> open_ahead("s3://bucket/train-00001.tfrecord", start=0)  # doctest: +SKIP
>>> f = open_remote("s3://bucket/train-00001.tfrecord")  # doctest: +SKIP
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import Future
from typing import IO, cast

from tfr_torch.format.paths import PathLike, as_path, open_input
from tfr_torch.format.remote import RemoteFile, _NoRangeReads
from tfr_torch.format.remote_options import RemoteOptions
from tfr_torch.format.remote_state import _pool

__all__ = ["open_remote", "open_ahead"]

_HEAD = 64  # the first bytes of a file opened ahead for reading by offset (what compression sniffing reads)
_LIMIT = 64  # files opened ahead and not yet taken, per process: past it the oldest are closed

_Key = tuple[int, str, RemoteOptions, bool]


class _Opening:
    """A file being opened ahead: the future of the RemoteFile and where its sequential reader will start (set
    once its first blocks are to be requested; applied by whichever comes second, the open or the request)."""

    __slots__ = ("future", "file", "warm_from", "lock")

    def __init__(self) -> None:
        self.future: Future[RemoteFile] | None = None
        self.file: RemoteFile | None = None
        self.warm_from: int | None = None
        self.lock = threading.Lock()

    def warm(self, start: int) -> None:
        with self.lock:
            if self.warm_from is None:
                self.warm_from = start
                if self.file is not None:
                    self.file.warm(start)


_OPENING: OrderedDict[_Key, _Opening] = OrderedDict()
_OPENING_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) gets a fresh lock: a parent thread may have held it at fork time, and
    that thread does not exist in the child to release it. (The files opened ahead are keyed by process.)"""
    global _OPENING_LOCK
    _OPENING_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def open_remote(url: PathLike, options: RemoteOptions | None = None, *, readahead: bool = True) -> IO[bytes]:
    """Open a remote file for reading with range requests in flight (see `RemoteFile`; a binary file, as
    `open_input` returns, with `prefetch`/`release` and `size`): the one `open_ahead` opened, when it did. A
    filesystem that cannot tell an object's size (a pipe-like stream) is read through its own file object, front
    to back, as before."""
    url = as_path(url)
    options = options if options is not None else RemoteOptions()
    with _OPENING_LOCK:
        opening = _OPENING.pop((os.getpid(), url, options, readahead), None)
    try:
        if opening is None or opening.future is None:
            return cast(IO[bytes], RemoteFile(url, options, readahead=readahead))
        opened = opening.future.result()
        with opening.lock:  # no warm() of another thread runs on it past this point
            return cast(IO[bytes], opened)
    except _NoRangeReads:
        return open_input(url)


def open_ahead(url: PathLike, options: RemoteOptions | None = None, *, readahead: bool = True,
               start: int | None = 0) -> None:
    """Start opening a remote file in this process's request threads: its HEAD request, then its first bytes,
    and for a sequential reader (`readahead`) the blocks from byte `start` (None: not yet; a later call with a
    `start` requests them). A later `open_remote` of the same URL with the same options and `readahead` in this
    process takes it, open, instead of waiting for those round trips (see the module's docstring).

    >>> open_ahead("s3://bucket/train-00001.tfrecord", RemoteOptions(), start=0)  # doctest: +SKIP
    """
    url = as_path(url)
    options = options if options is not None else RemoteOptions()
    key = (os.getpid(), url, options, readahead)
    with _OPENING_LOCK:
        opening = _OPENING.get(key)
        if opening is None:
            for stale in [k for k in _OPENING if k[0] != key[0]]:  # a forked child's copy of its parent's
                del _OPENING[stale]
            opening = _OPENING[key] = _Opening()
            opening.future = _pool(options.max_in_flight).submit(_open, opening, url, options, readahead)
            while len(_OPENING) > _LIMIT:
                dropped = _OPENING.popitem(last=False)[1].future
                if dropped is not None:
                    dropped.add_done_callback(_close_unused)
    if start is not None and readahead:
        opening.warm(start)


def _open(opening: _Opening, url: str, options: RemoteOptions, readahead: bool) -> RemoteFile:
    """(pool thread) A RemoteFile opened: for reading by offset with its first bytes, for a sequential reader
    with its first blocks requested once asked for."""
    opened = RemoteFile(url, options, readahead=readahead)
    if opened.size and not readahead:  # read by offset: what compression sniffing reads first
        opened._head = _head(opened)
    with opening.lock:
        opening.file = opened
        if opening.warm_from is not None:
            opened.warm(opening.warm_from)
    return opened


def _head(opened: RemoteFile) -> bytes:
    """(pool thread) The first bytes of the file: through block 0 in the cache (fetched once for all readers)
    when there is one, else one small request."""
    n = min(_HEAD, opened.size)
    cache = opened._cache
    if cache is not None:
        opened.requests += 1
        opened._fill(0)
        head = cache.pread(opened._key(0), opened._length(0), 0, n)
        if head is not None:
            return head
    opened.requests += 1
    return opened._fetch(0, n)


def _close_unused(opening: Future[RemoteFile]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()
