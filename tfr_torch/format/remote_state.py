"""Per-process state of remote reading: the request threads (one pool per size, made in the process that reads, so
forked DataLoader workers make their own), and what a HEAD request told of each object (its size and version),
trusted for `RemoteOptions.metadata_ttl` seconds. Fork-safe: a forked child gets fresh locks."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tfr_torch.format.paths import _fsspec

__all__ = ["forget_object"]

_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of `threads` request threads (a forked child makes its own)."""
    key = (os.getpid(), threads)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ThreadPoolExecutor(threads, thread_name_prefix="tfr_torch-remote")
        return pool


# (filesystem, URL) -> (when it was asked, size, version): what a HEAD request told, for RemoteOptions.metadata_ttl.
# Per process; a forked DataLoader worker starts with its parent's (the ages are of the same monotonic clock).
_KNOWN: dict[tuple[str, str], tuple[float, int, str]] = {}
_KNOWN_LOCK = threading.Lock()
_KNOWN_LIMIT = 1 << 16
_clock = time.monotonic


def _known_key(fs: Any, url: str) -> tuple[str, str]:
    """Which object: the URL on this filesystem's options (fsspec's token: another endpoint is another object),
    in one spelling (memory://a/b and memory:///a/b are one object)."""
    return str(getattr(fs, "_fs_token", None) or id(fs)), _canonical(fs, url)


def _canonical(fs: Any, url: str) -> str:
    return str(fs.unstrip_protocol(fs._strip_protocol(url)))


def _known(fs: Any, url: str, ttl: float) -> tuple[int, str] | None:
    """The size and version of `url` asked less than `ttl` seconds ago in this process, or None."""
    if ttl <= 0:
        return None
    with _KNOWN_LOCK:
        entry = _KNOWN.get(_known_key(fs, url))
    if entry is None or _clock() - entry[0] >= ttl:
        return None
    return entry[1], entry[2]


def _remember(fs: Any, url: str, size: int, version: str) -> None:
    with _KNOWN_LOCK:
        if len(_KNOWN) >= _KNOWN_LIMIT:
            _KNOWN.pop(next(iter(_KNOWN)))
        _KNOWN[_known_key(fs, url)] = (_clock(), size, version)


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) gets fresh module locks: a parent thread may have held one at fork
    time, and that thread does not exist in the child to release it."""
    global _POOLS_LOCK, _KNOWN_LOCK
    _POOLS_LOCK = threading.Lock()
    _KNOWN_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def forget_object(url: str) -> None:
    """Ask `url`'s size and version again on its next open in this process (it was just written)."""
    fs, _ = _fsspec(url)
    url = _canonical(fs, url)
    with _KNOWN_LOCK:
        for key in [key for key in _KNOWN if key[1] == url]:
            del _KNOWN[key]


def _version(info: dict[str, Any]) -> str:
    """What identifies this version of the object: its ETag (or checksum, generation), else its modification
    time; "" when the filesystem tells neither (then nothing is cached)."""
    for key in ("ETag", "etag", "md5Hash", "Content-MD5", "Digest", "generation", "VersionId", "version_id",
                "mtime", "LastModified", "Last-Modified", "last_modified", "updated", "created"):
        value = info.get(key)
        if value:
            return f"{key}={value}"
    return ""
