"""A local-disk cache of blocks of remote files, shared by threads, DataLoader workers and processes.

Each block is one file, named by a hash of (URL, the object's version: ETag or size and modification time, the
block size, the block number): a changed object has new names, so nothing stale is ever served; its old blocks
age out. A block is written under a temporary name, flushed to disk (fsync) and renamed, so a reader sees a
whole block or none, also after a crash; a reader also checks the file's length against the block's and treats
a mismatch as a miss (and removes the file). Temporary files left by a crashed writer are never read, and are
removed by the next eviction scan once they are old.

Size: every write adds its bytes to a usage counter (a small file updated under an exclusive `flock` on the
folder's lock file); when the counter passes `max_bytes`, the writer that passed it scans the folder and removes
the least recently used blocks (modification time, touched on each hit) until the folder holds 90% of the limit.
A block being read while another process evicts it stays readable through the reader's open descriptor.

One fetch per block: `fill` takes an exclusive `flock` on a lock file of the block's own before fetching it, and
looks again once it holds it, so readers of one block in several threads or processes (DataLoader workers that
start together on a cold cache) wait for the first one's fetch instead of each making the same request. The lock
is the kernel's: a fetcher that dies releases it, and the next one finds no block and fetches it. The lock only
saves requests; what is served never depends on it (a block is whole or absent either way).

Reads by offset keep up to `_OPEN_BLOCKS` blocks open per process (`pread`; fewer where the process may open few
files: an eighth of RLIMIT_NOFILE): a record costs one `pread`, not an open, a stat and a close. Where the process
runs out of descriptors all the same (EMFILE), those kept are closed and the open tried again; a block that still
cannot be opened is a miss (fetched again), never an error. Blocks are never changed in place (a new block is a
new file), so an open descriptor always reads the bytes its name stood for, also after another process evicted it
(its disk space is freed when the descriptor closes).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import mmap
import os
import resource
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator

__all__ = ["BlockCache", "block_key"]

_log = logging.getLogger(__name__)

_SUFFIX = ".blk"
_STALE_TMP_S = 600.0  # a temporary file this old belongs to a writer that died: the eviction scan removes it
_LOW_WATER = 0.9
_OPEN_BLOCKS = 128  # descriptors of cached blocks kept open per process for reads by offset (1 GiB of 8 MiB blocks),
# at most an eighth of the process's descriptor limit (RLIMIT_NOFILE: 1024 in many containers, 64 in some)
_SHORT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
_LOCK_SUFFIX = ".lock"


# Descriptors of lock files (block fetch locks, the folder's lock) this process has open, under _HELD_LOCK. A flock
# belongs to the open file description, which a forked child shares through its copy of the descriptor: a child
# (a DataLoader worker) that kept those copies would keep its parent's locks held after the parent's thread closed
# its own, and wait forever on them. The child closes its copies at fork (its parent's locks stay the parent's).
_HELD_FDS: set[int] = set()
_HELD_LOCK = threading.Lock()


def _before_fork() -> None:
    _HELD_LOCK.acquire()  # the set is consistent at fork: no descriptor half opened or half closed


def _after_fork_in_parent() -> None:
    _HELD_LOCK.release()


def _after_fork_in_child() -> None:
    """Close the inherited lock descriptors and renew the locks a parent thread could hold at fork time."""
    global _HELD_LOCK
    for fd in _HELD_FDS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_FDS.clear()
    _HELD_LOCK = threading.Lock()
    BlockCache._instances_lock = threading.Lock()


@contextlib.contextmanager
def _flocked(path: str, removed_by_holders: bool = False) -> Iterator[None]:
    """An exclusive flock on the file `path` (created if needed) while the block runs. Its descriptor is opened and
    closed under _HELD_LOCK and listed in _HELD_FDS meanwhile, so a fork never copies it unlisted.
    `removed_by_holders`: a holder removes the file before it lets go (a block's fetch lock), so a lock taken on a
    file no longer at `path` is let go and the one there now locked instead: else a waiter on the removed file and
    a newcomer on a new one would both hold "the" lock."""
    while True:
        with _HELD_LOCK:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            _HELD_FDS.add(fd)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not removed_by_holders or _still_at(fd, path):
                break
        except BaseException:
            _close_held(fd)
            raise
        _close_held(fd)
    try:
        yield
    finally:
        _close_held(fd)


def _still_at(fd: int, path: str) -> bool:
    """Whether the file open as `fd` is the one at `path` now."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def _close_held(fd: int) -> None:
    with _HELD_LOCK:
        _HELD_FDS.discard(fd)
        os.close(fd)  # closing releases the lock


def _open_limit() -> int:
    """How many block descriptors a process keeps open: _OPEN_BLOCKS, at most an eighth of its RLIMIT_NOFILE."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return _OPEN_BLOCKS
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return _OPEN_BLOCKS
    return max(1, min(_OPEN_BLOCKS, soft // 8))


def block_key(url: str, version: str, size: int, block_size: int, block: int) -> str:
    """The name of one block in the cache: a hash of everything that decides its bytes."""
    text = f"{url}\0{version}\0{size}\0{block_size}\0{block}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class BlockCache:
    """Blocks on local disk under `folder`, at most about `max_bytes` of them (plus blocks being written).

    >>> cache = BlockCache("/tmp/tfr-cache", 1 << 30)  # doctest: +SKIP
    >>> cache.put(key, data); cache.read(key, len(data), 0, 16)  # doctest: +SKIP
    """

    _instances: dict[tuple[int, str, int], BlockCache] = {}
    _instances_lock = threading.Lock()

    def __init__(self, folder: str, max_bytes: int) -> None:
        self.folder = os.path.abspath(os.fspath(folder))
        self.max_bytes = int(max_bytes)
        os.makedirs(self.folder, exist_ok=True)
        self._lock_path = os.path.join(self.folder, ".lock")
        self._usage_path = os.path.join(self.folder, ".usage")
        self._touched: set[str] = set()  # blocks whose time this process set already (one utime per block)
        self._open: OrderedDict[str, int] = OrderedDict()  # key -> descriptor of a whole block, least recent first
        self._open_lock = threading.RLock()  # (reentrant: _open_whole sheds the kept descriptors under it)
        self._max_open = _open_limit()
        self._short_logged = False
        self._complained = False
        self.hits = self.misses = self.evicted = 0  # this process's counts, for tests and benchmarks
        self.fetched = self.waited = 0  # fills that fetched a block; fills that found it fetched by another reader

    @classmethod
    def shared(cls, folder: str, max_bytes: int) -> BlockCache:
        """One instance per (process, folder, limit): its counters see every reader of this process."""
        key = (os.getpid(), os.path.abspath(os.fspath(folder)), int(max_bytes))
        with cls._instances_lock:
            cache = cls._instances.get(key)
            if cache is None:
                cache = cls._instances[key] = cls(folder, max_bytes)
            return cache

    def path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key + _SUFFIX)

    def read(self, key: str, length: int, offset: int = 0, count: int | None = None) -> bytes | None:
        """`count` bytes (all when None) from `offset` of the block `key` whose full length is `length`; None when
        the cache does not hold it whole (a file of another length is removed)."""
        fd = self._open_whole(key, length)
        if fd is None:
            return None
        try:
            want = length - offset if count is None else count
            data = os.pread(fd, want, offset)
        finally:
            os.close(fd)
        if len(data) != want:  # cut short since it was opened: a miss after all
            self.hits -= 1
            self.misses += 1
            return None
        return data

    def map(self, key: str, length: int) -> mmap.mmap | None:
        """Block `key` (whole length `length`) mapped read-only into memory, or None when the cache does not hold
        it whole: its bytes without a copy, from the page cache (a block evicted meanwhile stays mapped)."""
        fd = self._open_whole(key, length)
        if fd is None:
            return None
        try:
            # populated here (a request thread), not page by page where the reader first touches it
            flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
            return mmap.mmap(fd, length, flags=flags, prot=mmap.PROT_READ) if length else None
        finally:
            os.close(fd)

    def has(self, key: str, length: int) -> bool:
        """Whether the cache holds block `key` whole (`length` bytes); counts neither a hit nor a miss."""
        try:
            return os.stat(self.path(key)).st_size == length
        except OSError:
            return False

    def pread(self, key: str, length: int, offset: int, count: int) -> bytes | None:
        """`count` bytes from `offset` of block `key` (whole length `length`) through a descriptor kept open (see the
        module's docstring); None when the cache does not hold the block whole. Reads of one process take turns
        (a descriptor is never closed under a read)."""
        with self._open_lock:
            fd = self._kept(key, length)
            if fd is None:
                return None
            data = os.pread(fd, count, offset)
        return data if len(data) == count else None

    def descriptor(self, key: str, length: int) -> int | None:
        """A new descriptor (the caller closes it) of block `key` when the cache holds it whole, else None: for
        reading many records of one block in one call."""
        with self._open_lock:
            fd = self._kept(key, length)
            if fd is None:
                return None
            try:
                return os.dup(fd)
            except OSError as exc:
                if exc.errno not in _SHORT_OF_DESCRIPTORS:
                    raise
                self._shed(keep=key)  # the others kept: then one more descriptor fits
                try:
                    return os.dup(fd)
                except OSError as again:
                    if again.errno not in _SHORT_OF_DESCRIPTORS:
                        raise
                    return None  # a miss: the caller reads the bytes another way

    def _kept(self, key: str, length: int) -> int | None:
        """The descriptor kept open for block `key` (opened now when the cache holds it whole; the least recently
        used ones closed past _OPEN_BLOCKS), or None. The caller holds _open_lock."""
        fd = self._open.get(key)
        if fd is not None:
            self._open.move_to_end(key)
            return fd
        fd = self._open_whole(key, length)
        if fd is None:
            return None
        self._open[key] = fd
        while len(self._open) > self._max_open:
            os.close(self._open.popitem(last=False)[1])
        return fd

    def _shed(self, keep: str | None = None) -> None:
        """Close the descriptors kept open for reads by offset (but `keep`'s): the process ran out of them."""
        with self._open_lock:
            for key in [k for k in self._open if k != keep]:
                os.close(self._open.pop(key))

    def _open_whole(self, key: str, length: int) -> int | None:
        """A new descriptor of block `key` when the file holds it whole (a hit), else None (a miss)."""
        path = self.path(key)
        try:
            fd = self._open_file(path)
        except FileNotFoundError:
            self.misses += 1
            return None
        if fd is None:  # out of descriptors: a miss (the caller fetches the block, and cannot cache it either)
            self.misses += 1
            return None
        if os.fstat(fd).st_size != length:  # never a partial block: a short (or long) file is a miss, and removed
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            self.misses += 1
            return None
        self.hits += 1
        if key not in self._touched:  # least recently used: by modification time, set on the first hit here
            self._touched.add(key)
            with contextlib.suppress(OSError):
                os.utime(path)
        return fd

    def _open_file(self, path: str) -> int | None:
        """os.open(path) for reading; where the process is out of descriptors, the kept ones closed and tried again,
        then None (logged once per cache)."""
        try:
            return os.open(path, os.O_RDONLY)
        except OSError as exc:
            if exc.errno not in _SHORT_OF_DESCRIPTORS:
                raise
        self._shed()
        try:
            return os.open(path, os.O_RDONLY)
        except OSError as exc:
            if exc.errno not in _SHORT_OF_DESCRIPTORS:
                raise
            if not self._short_logged:
                self._short_logged = True
                _log.warning("the block cache in %s cannot open its blocks (%s): they are read from the store "
                             "instead; raise the limit of open files (ulimit -n)", self.folder, exc)
            return None

    def fill(self, key: str, length: int, fetch: Callable[[], bytes]) -> bytes | None:
        """Make sure the cache holds block `key` (`length` bytes): fetch it with `fetch()` and store it, unless it is
        held already or another thread or process is fetching it (then wait for that fetch; see the module's
        docstring). Returns the bytes when this call fetched them, else None (the block is in the cache). Only
        `fetch()`'s errors are raised: a disk that refuses the block (full, read-only) is logged, and the fetched
        bytes are returned uncached."""
        if self.has(key, length):
            return None
        lock_path = os.path.join(os.path.dirname(self.path(key)), f".{key}{_LOCK_SUFFIX}")
        with contextlib.ExitStack() as stack:  # the lock, released (its descriptor closed) on the way out
            try:
                os.makedirs(os.path.dirname(lock_path), exist_ok=True)
                stack.enter_context(_flocked(lock_path, removed_by_holders=True))
            except OSError as exc:
                self._complain("cannot lock block %s in %s (%s): fetching it without", key, self.folder, exc)
                return self._fetch_and_put(key, fetch)
            try:
                if self.has(key, length):  # fetched by the reader that held the lock before
                    self.waited += 1
                    return None
                return self._fetch_and_put(key, fetch)
            finally:  # every holder removes the lock file before it lets go (see _flocked: removed_by_holders);
                # whoever waits on it looks at the cache again once it holds the lock of the file there then
                with contextlib.suppress(OSError):
                    os.unlink(lock_path)

    def _fetch_and_put(self, key: str, fetch: Callable[[], bytes]) -> bytes:
        data = fetch()
        self.fetched += 1
        try:
            self.put(key, data)
        except OSError as exc:  # a full or read-only disk: reading goes on without caching this block
            self._complain("cannot cache block %s in %s: %s", key, self.folder, exc)
        return data

    def _complain(self, message: str, *args: object) -> None:
        """Log a block the disk refused: a warning the first time in this process, then at debug level (a full disk
        refuses every block after it)."""
        level = logging.DEBUG if self._complained else logging.WARNING
        self._complained = True
        _log.log(level, message + ("" if level == logging.DEBUG else " (later such failures are logged at debug "
                                   "level)"), *args)

    def close(self) -> None:
        """Close the blocks kept open for reads by offset."""
        with self._open_lock:
            for fd in self._open.values():
                os.close(fd)
            self._open.clear()

    def put(self, key: str, data: bytes) -> None:
        """Store a block: temporary file, fsync, rename; then count its bytes and evict if over the limit. A block
        larger than the whole cache is not stored."""
        if len(data) > self.max_bytes:
            return
        path = self.path(key)
        folder = os.path.dirname(path)
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._touched.add(key)
        self._account(len(data))

    def usage(self) -> int:
        """Bytes of whole blocks in the folder now (a scan)."""
        return sum(size for _, size, _ in self._blocks())

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return _flocked(self._lock_path)  # the folder's lock (see _HELD_FDS: a forked child never inherits it held)

    def _account(self, added: int) -> None:
        with self._locked():
            try:
                with open(self._usage_path, "rb") as f:
                    usage = int(f.read().decode("ascii") or "x") + added
            except (OSError, ValueError):  # no counter yet, or a torn one: count the folder
                usage = self.usage()
            if usage > self.max_bytes:
                usage = self._evict(int(self.max_bytes * _LOW_WATER))
            tmp = f"{self._usage_path}.tmp-{os.getpid()}"
            try:
                with open(tmp, "wb") as f:
                    f.write(str(usage).encode("ascii"))
                os.replace(tmp, self._usage_path)
            except BaseException:  # (a full disk): no counter left half written beside the blocks
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def _evict(self, target: int) -> int:
        """Remove the least recently used blocks until at most `target` bytes remain (and old temporary files);
        return the bytes left. Called under the lock."""
        blocks = sorted(self._blocks(), key=lambda b: b[2])
        total = sum(size for _, size, _ in blocks)
        for path, size, _ in blocks:
            if total <= target:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                self.evicted += 1
            total -= size
        return total

    def _blocks(self) -> list[tuple[str, int, float]]:
        """(path, size, mtime) of every block; temporary files older than _STALE_TMP_S are removed on the way."""
        out = []
        now = time.time()
        for sub in os.scandir(self.folder):
            if not sub.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(sub.path):
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if entry.name.endswith(_SUFFIX):
                    out.append((entry.path, st.st_size, st.st_mtime))
                elif ((".tmp-" in entry.name or entry.name.endswith(_LOCK_SUFFIX))
                      and now - st.st_mtime > _STALE_TMP_S):  # a dead writer's, or a lock file left by one
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        return out


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
