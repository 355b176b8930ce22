"""Reading remote files (s3://, gs://, any fsspec URL) with several range requests in flight, and an optional
local-disk block cache.

A request to object storage costs a round trip (tens of milliseconds) before its first byte: one reader that
asks for one block at a time waits most of the time. `RemoteFile` keeps requests in flight ahead of its reader:

- sequential reading (`RecordReader`): the next `readahead` blocks of `block_size` bytes are requested while the
  current one is read, so memory stays at about `readahead + 1` blocks per open file;
- reading records by offset (`RecordFile`, a shuffle through an index): the reader announces the byte ranges of
  the next records (`prefetch`); nearby ranges (gaps up to `merge_gap`) are merged into one request, and the
  requests run together; without a cache only those ranges are fetched;
- with `cache_dir`, whole blocks are kept on local disk (`BlockCache`: content-addressed by URL, ETag or size and
  modification time, and block; size-limited, least recently used out; safe across workers and processes): a
  block is fetched once, later reads of it (any record in it, any epoch, any worker) come from local disk.

Opening a remote file costs a round trip too (its size and version: a HEAD request): `remote_open.open_ahead`
starts that before the file is needed, and what it tells is trusted for `metadata_ttl` seconds in the process (the
next epoch's opens of the same objects make no request; see `RemoteOptions`).

Requests run in a thread pool of `max_in_flight` threads per process (each DataLoader worker has its own), made
on first use in the process that reads, so forked workers are safe. Errors name the URL and the byte range.
The options are format/remote_options.py; the request threads and what HEAD requests told, format/remote_state.py.

>>> from tfr_torch.format.remote import RemoteOptions
>>> RemoteOptions(block_size=4 << 20, readahead=8).block_size
4194304
"""

from __future__ import annotations

import bisect
import io
import logging
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from tfr_torch.format.blockcache import BlockCache, block_key
from tfr_torch.format.paths import PathLike, _fsspec, as_path
from tfr_torch.format.remote_options import RemoteOptions
from tfr_torch.format.remote_state import _known, _pool, _remember, _version, forget_object

__all__ = ["RemoteOptions", "RemoteFile", "forget_object"]

_log = logging.getLogger(__name__)

_SMALL = 64  # reads this short away from the blocks read ahead are served apart (a header sniffed at offset 0)


def _merge(ranges: Sequence[tuple[int, int]], gap: int, limit: int) -> list[tuple[int, int]]:
    """Sorted ranges with those at most `gap` apart merged, no merged range longer than `limit` (unless one range
    alone is)."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start - out[-1][1] <= gap and max(end, out[-1][1]) - out[-1][0] <= limit:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


class RemoteFile(io.RawIOBase):
    """A remote file read with range requests in flight (see the module's docstring). `readahead=False` for
    reading by offset: no blocks fetched ahead, only what `prefetch` announces or a read asks for.

    Attributes: `url`, `size`, `version` (what the cache keys on), `requests` (range requests made so far)."""

    def __init__(self, url: PathLike, options: RemoteOptions | None = None, *, readahead: bool = True) -> None:
        super().__init__()
        self.url = as_path(url)
        self.options = options if options is not None else RemoteOptions()
        self._fs, self._inner = _fsspec(self.url)
        known = _known(self._fs, self.url, self.options.metadata_ttl)
        if known is None:
            self.size, self.version = self._ask()
            _remember(self._fs, self.url, self.size, self.version)
        else:
            self.size, self.version = known
        opts = self.options
        self._block_size = opts.block_size
        self._readahead = opts.readahead if readahead else 0
        self._pool = _pool(opts.max_in_flight)
        self._cache = (BlockCache.shared(opts.cache_dir, opts.cache_bytes)
                       if opts.cache_dir is not None and self.version else None)
        self._pos = 0
        self._blocks: OrderedDict[int, Future[bytes | mmap.mmap]] = OrderedDict()  # in memory, for sequential reading
        self._stored: dict[int, Future[None]] = {}  # blocks being put in the cache (reading by offset)
        # prefetched ranges, sorted (reading by offset), and their starts for bisect: one tuple, replaced whole
        # under _pins_lock by `prefetch` and `release` (threads may call them at once), read without a lock
        self._pins: tuple[list[int], list[tuple[int, int, Future[bytes]]]] = ([], [])
        self._pins_lock = threading.Lock()
        self._pid = os.getpid()  # a forked child makes its own lock (another thread may hold this one at fork)
        self._head = b""  # the file's first bytes, when opened ahead
        self._keys: dict[int, str] = {}  # block -> its name in the cache
        self.requests = 0

    def _ask(self) -> tuple[int, str]:
        """The object's size and version, from the store (a HEAD request)."""
        try:
            # Never a listing's stale ETag: the cached listing is dropped first. Not info(refresh=True): a filesystem
            # that passes unknown keywords on to its requests (HTTPFileSystem, to aiohttp) fails on it, and
            # HTTPFileSystem reports that failure as FileNotFoundError.
            self._fs.invalidate_cache(self._inner)
            info = self._fs.info(self._inner)
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.url!r}") from None
        except NotImplementedError:  # no listing, so no size: a stream
            raise _NoRangeReads(self.url) from None
        except OSError:
            raise  # PermissionError, IsADirectoryError, ... as the store says them
        except Exception as exc:  # what is not an OSError (botocore's NoCredentialsError, gcsfs's HttpError): say where
            raise OSError(f"cannot ask the store about {self.url}: {type(exc).__name__}: {exc}") from exc
        if info.get("type") == "directory":
            raise IsADirectoryError(f"{self.url!r} is a folder, not a file")
        if info.get("size") is None:
            raise _NoRangeReads(self.url)
        return int(info["size"]), _version(info)

    # ----- io.RawIOBase ------------------------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset} in {self.url}")
        self._pos = base + offset
        return self._pos

    def readinto(self, view: Any) -> int:
        data = self._read_at(self._pos, len(view))
        n = len(data)
        memoryview(view).cast("B")[:n] = data
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = max(self.size - self._pos, 0)
        parts = []
        while size > 0:
            data = self._read_at(self._pos, size)
            if not data:
                break
            parts.append(bytes(data))
            self._pos += len(data)
            size -= len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readall(self) -> bytes:
        return self.read(-1)

    def close(self) -> None:
        if not self.closed:
            futures: list[Future[Any]] = [*self._blocks.values(), *self._stored.values()]
            for fut in futures + [f for _, _, f in self._pins[1]]:
                fut.cancel()
            self._blocks.clear()
            self._stored.clear()
            self._pins = ([], [])
        super().close()

    # ----- reading by offset -------------------------------------------------------------------------------------

    def prefetch(self, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int, Future[bytes]]]:
        """Start fetching these byte ranges [start, end) (the next records to be read by offset) and return a
        token for `release`. With a cache, their blocks are fetched into it instead (the token is empty)."""
        ranges = [(max(s, 0), min(e, self.size)) for s, e in ranges if min(e, self.size) > max(s, 0)]
        if self._cache is not None:
            bs = self._block_size
            for b in sorted({b for s, e in ranges for b in range(s // bs, (e - 1) // bs + 1)}):
                if b not in self._stored:
                    self.requests += 1
                    self._stored[b] = self._pool.submit(self._store_block, b)
            return []
        token = []
        for start, end in _merge(ranges, self.options.merge_gap, self._block_size):
            self.requests += 1
            token.append((start, end, self._pool.submit(self._fetch, start, end)))
        with self._pinning():
            starts, pinned = list(self._pins[0]), list(self._pins[1])
            for entry in token:
                i = bisect.bisect_right(starts, entry[0])
                starts.insert(i, entry[0])
                pinned.insert(i, entry)
            self._pins = (starts, pinned)
        return token

    def release(self, token: list[tuple[int, int, Future[bytes]]]) -> None:
        """Forget ranges fetched by `prefetch` (their records were read)."""
        gone = {id(entry) for entry in token}
        if gone:
            with self._pinning():
                pinned = [entry for entry in self._pins[1] if id(entry) not in gone]
                self._pins = ([entry[0] for entry in pinned], pinned)

    def _pinning(self) -> threading.Lock:
        """The lock that `prefetch` and `release` take to replace the prefetched ranges (new in a forked child)."""
        if self._pid != os.getpid():
            self._pins_lock, self._pid = threading.Lock(), os.getpid()
        return self._pins_lock

    # ----- where bytes come from ---------------------------------------------------------------------------------

    def _read_at(self, pos: int, n: int) -> memoryview | bytes:
        """Some bytes (at least one, unless at the end) from `pos`, at most `n`."""
        end = min(pos + n, self.size)
        if pos >= end:
            return b""
        if end <= len(self._head):
            return memoryview(self._head)[pos:end]
        starts, pinned = self._pins  # one snapshot: another thread's prefetch or release replaces it whole
        if pinned:
            i = bisect.bisect_right(starts, pos) - 1
            for start, stop, fut in pinned[max(i - 3, 0) : i + 1][::-1]:
                if start <= pos and end <= stop:
                    return memoryview(fut.result())[pos - start : end - start]
        bs = self._block_size
        b = pos // bs
        if self._readahead and b not in self._blocks and self._blocks and end - pos <= _SMALL:
            return self._small(pos, end)  # a header sniffed away from where reading goes on: leave the blocks be
        if self._readahead or b in self._blocks:
            data = self._block(b)
            return memoryview(data)[pos - b * bs : min(end - b * bs, len(data))]
        if self._cache is not None:
            return self._cached_range(pos, end)
        self.requests += 1
        return self._fetch(pos, end)

    def warm(self, start: int) -> None:
        """A sequential reader's first requests now: the blocks from byte `start` on (read-ahead's worth), before
        the first read asks for them."""
        if self._readahead and 0 <= start < self.size:
            self._request_from(start // self._block_size)

    def _block(self, b: int) -> bytes | mmap.mmap:
        """Block `b` for a sequential reader: dropping the blocks before it, asking for the next ones."""
        self._request_from(b)
        return self._blocks[b].result()

    def _request_from(self, b: int) -> None:
        for old in [k for k in self._blocks if k < b]:
            del self._blocks[old]
        last = (self.size - 1) // self._block_size
        for k in range(b, min(b + self._readahead, last) + 1):
            if k not in self._blocks:
                self.requests += 1
                self._blocks[k] = self._pool.submit(self._load_block, k)
        # After a backward seek, blocks past the new read-ahead window are left from before: drop those (never
        # block `b` itself, which the caller reads next; popping the last inserted one could be exactly `b`).
        for far in [k for k in self._blocks if k > b + self._readahead]:
            self._blocks.pop(far).cancel()

    def _small(self, pos: int, end: int) -> bytes:
        """A few bytes [pos, end) within one block: from the cache when it holds the block, else one request."""
        b = pos // self._block_size
        end = min(end, (b + 1) * self._block_size)
        if self._cache is not None:
            data = self._cache.read(self._key(b), self._length(b), pos - b * self._block_size, end - pos)
            if data is not None:
                return data
        self.requests += 1
        return self._fetch(pos, end)

    def block_descriptor(self, b: int) -> tuple[int, int] | None:
        """(reading by offset, with a cache) A new descriptor of block `b` in the cache and the file offset where
        the block starts, the block fetched into the cache first if needed; None without a cache or when the
        cache cannot hold it. The caller closes the descriptor."""
        if self._cache is None or not 0 <= b * self._block_size < self.size:
            return None
        fut = self._stored.get(b)
        if fut is None:
            fd = self._cache.descriptor(self._key(b), self._length(b))  # held already: no request thread needed
            if fd is not None:
                return fd, b * self._block_size
            self.requests += 1
            fut = self._stored[b] = self._pool.submit(self._store_block, b)
        fut.result()
        fd = self._cache.descriptor(self._key(b), self._length(b))
        return None if fd is None else (fd, b * self._block_size)

    def local_extent(self, pos: int) -> tuple[int, int, int] | None:
        """(a sequential reader, with a cache) Where byte `pos` lies on local disk: a new descriptor of its block's
        file in the cache (the caller closes it), the offset of `pos` in it and the bytes that follow in the block;
        the block fetched into the cache first if needed, and the next `readahead` blocks on their way there. None
        without a cache, past the end, or when the cache cannot hold the block."""
        if self._cache is None or not 0 <= pos < self.size:
            return None
        bs = self._block_size
        b = pos // bs
        for k in range(b + 1, min(b + self.options.readahead, (self.size - 1) // bs) + 1):
            if k not in self._stored:
                self.requests += 1
                self._stored[k] = self._pool.submit(self._store_block, k)
        for old in [k for k in self._stored if k < b]:  # the blocks behind a sequential reader are done
            del self._stored[old]
        opened = self.block_descriptor(b)
        if opened is None:
            return None
        fd, start = opened
        return fd, pos - start, self._length(b) - (pos - start)

    def _cached_range(self, pos: int, end: int) -> bytes:
        """Bytes [pos, end) (within one block) through the cache: the block fetched into it first if needed."""
        bs = self._block_size
        b = pos // bs
        end = min(end, (b + 1) * bs)
        fut = self._stored.get(b)
        if fut is None:
            self.requests += 1
            fut = self._stored[b] = self._pool.submit(self._store_block, b)
        fut.result()
        assert self._cache is not None
        data = self._cache.pread(self._key(b), self._length(b), pos - b * bs, end - pos)
        if data is None:  # evicted since (a cache smaller than what is being read): fetch the bytes themselves
            del self._stored[b]
            self.requests += 1
            data = self._fetch(pos, end)
        return data

    def _key(self, b: int) -> str:
        key = self._keys.get(b)
        if key is None:
            key = self._keys[b] = block_key(self.url, self.version, self.size, self._block_size, b)
        return key

    def _length(self, b: int) -> int:
        return min(self._block_size, self.size - b * self._block_size)

    def _load_block(self, b: int) -> bytes | mmap.mmap:
        """(pool thread) Block `b` from the cache (mapped, not copied), else fetched (and stored in the cache, once
        for all readers)."""
        length = self._length(b)
        if self._cache is None:
            return self._fetch(b * self._block_size, b * self._block_size + length)
        mapped = self._cache.map(self._key(b), length)
        if mapped is not None:
            return mapped
        fetched = self._fill(b)
        if fetched is not None:
            return fetched
        mapped = self._cache.map(self._key(b), length)  # fetched by another reader meanwhile
        return mapped if mapped is not None else self._fetch(b * self._block_size, b * self._block_size + length)

    def _store_block(self, b: int) -> None:
        """(pool thread) Make sure the cache holds block `b`."""
        self._fill(b)

    def _fill(self, b: int) -> bytes | None:
        """(pool thread) Block `b` into the cache unless it is there (one fetch for all readers: BlockCache.fill);
        the bytes when this call fetched them."""
        assert self._cache is not None
        start = b * self._block_size
        length = self._length(b)
        return self._cache.fill(self._key(b), length, lambda: self._fetch(start, start + length))

    def _fetch(self, start: int, end: int) -> bytes:
        """(any thread) Bytes [start, end) of the object, exactly."""
        try:
            data = self._fs.cat_file(self._inner, start=start, end=end)
        except FileNotFoundError:
            forget_object(self.url)
            raise FileNotFoundError(f"no such file: {self.url!r} (it was removed while being read)") from None
        except Exception as exc:  # also what is not an OSError (gcsfs's HttpError, aiohttp's errors): say where
            raise OSError(f"cannot read bytes [{start}, {end}) of {self.url}: {exc}") from exc
        if len(data) != end - start:
            forget_object(self.url)  # the next open asks what the object is now
            if len(data) == self.size:  # not the range asked for, but all of it
                raise OSError(f"reading bytes [{start}, {end}) of {self.url}: the server ignored the byte-range "
                              f"request and sent the whole object ({len(data)} bytes); remote files are read by "
                              f"range requests: serve it from a store that answers them, or copy it to local disk")
            raise OSError(f"reading bytes [{start}, {end}) of {self.url} gave {len(data)} bytes, expected "
                          f"{end - start}: the object changed while it was read? (it had {self.size} bytes and "
                          f"version {self.version or 'unknown'} when opened)")
        return bytes(data)


class _NoRangeReads(Exception):
    """The filesystem cannot say an object's size (no `info`, or no size in it): it is read as one stream."""
