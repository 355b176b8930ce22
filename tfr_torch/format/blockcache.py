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
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterator

__all__ = ["BlockCache", "block_key"]

_SUFFIX = ".blk"
_STALE_TMP_S = 600.0  # a temporary file this old belongs to a writer that died: the eviction scan removes it
_LOW_WATER = 0.9


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
        self.hits = self.misses = self.evicted = 0  # this process's counts, for tests and benchmarks

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
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            self.misses += 1
            return None
        try:
            if os.fstat(fd).st_size != length:  # never a partial block: a short (or long) file is a miss
                with contextlib.suppress(OSError):
                    os.unlink(path)
                self.misses += 1
                return None
            want = length - offset if count is None else count
            data = os.pread(fd, want, offset)
            if len(data) != want:
                self.misses += 1
                return None
        finally:
            os.close(fd)
        self.hits += 1
        if key not in self._touched:  # least recently used: by modification time, set on the first hit here
            self._touched.add(key)
            with contextlib.suppress(OSError):
                os.utime(path)
        return data

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

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

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
            with open(tmp, "wb") as f:
                f.write(str(usage).encode("ascii"))
            os.replace(tmp, self._usage_path)

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
                elif ".tmp-" in entry.name and now - st.st_mtime > _STALE_TMP_S:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        return out
