"""How remote files (fsspec URLs) are read: `RemoteOptions`, a frozen, self-checking value that the readers, the
datasets and the block cache take (format/remote.py reads with it).

>>> from tfr_torch.format.remote_options import RemoteOptions
>>> RemoteOptions(block_size=4 << 20, readahead=8).block_size
4194304
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tfr_torch.format.options import check_positive_int

__all__ = ["RemoteOptions"]


@dataclass(frozen=True)
class RemoteOptions:
    """How remote files (fsspec URLs) are read. Defaults suit S3 and GCS from a machine in the same region.

    - `block_size`: bytes per range request when reading sequentially, and per cached block (8 MiB).
    - `readahead`: blocks requested ahead of a sequential reader, per open file (4: ~40 MB of memory per file).
    - `max_in_flight`: range requests running at once per process (threads; 16).
    - `merge_gap`: reading records by offset, ranges at most this many bytes apart are fetched in one request
      (64 KiB).
    - `cache_dir`: a local folder for a block cache shared by workers and processes (None: no cache). Each block
      is fetched once while the cache holds it; reading by offset then fetches whole blocks.
    - `cache_bytes`: the cache's size limit (10 GiB; at least one block); least recently used blocks are removed
      past it.
    - `metadata_ttl`: seconds an object's size and version (its ETag; one HEAD request) are trusted in this
      process once read (60, as gcsfuse and Mountpoint for S3 with a cache): the next epochs open the files
      without a round trip each. 0: every open asks. An object replaced by another program within that time is
      still read as the version first seen where the cache holds its blocks, and a fetched range of another
      length raises; objects written through tfr_torch in this process are asked again at once. Training data
      that never changes in place can take a far longer time; data that does, 0.

    >>> RemoteOptions(cache_dir="/tmp/tfr-cache", cache_bytes=50 << 30)  # doctest: +ELLIPSIS
    RemoteOptions(block_size=8388608, readahead=4, max_in_flight=16, merge_gap=65536, cache_dir='/tmp/tfr-cache', ...)
    """

    block_size: int = 8 << 20
    readahead: int = 4
    max_in_flight: int = 16
    merge_gap: int = 1 << 16
    cache_dir: str | None = None
    cache_bytes: int = 10 << 30
    metadata_ttl: float = 60.0

    def __post_init__(self) -> None:
        check_positive_int(self.block_size, "block_size", "bytes per range request and cached block")
        check_positive_int(self.max_in_flight, "max_in_flight", "range requests at once")
        check_positive_int(self.cache_bytes, "cache_bytes", "the block cache's size limit")
        if self.cache_dir is not None and self.cache_bytes < self.block_size:
            raise ValueError(f"cache_bytes ({self.cache_bytes}) must hold at least one block (block_size "
                             f"{self.block_size}): a smaller cache evicts each block before it is read")
        for name in ("readahead", "merge_gap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        ttl = self.metadata_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl >= 0:
            raise ValueError(f"metadata_ttl must be a non-negative number of seconds, got {ttl!r}")
        if self.cache_dir is not None:
            if not isinstance(self.cache_dir, (str, os.PathLike)):
                raise TypeError(f"cache_dir must be None or a local folder (str or os.PathLike), got "
                                f"{type(self.cache_dir).__name__}: {self.cache_dir!r}")
            object.__setattr__(self, "cache_dir", os.fspath(self.cache_dir))
