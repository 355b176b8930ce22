"""Small int64 values in shared memory (a dataset's epoch, its per-file record counts, once-only flags) that
DataLoader workers see change: `shared_int64(n)`, a view of a block that the process's datasets share. Each block
of torch's shared memory holds an open descriptor for the life of the process's tensors over it: a tensor per value
(four a dataset) ran a mixture of a few dozen datasets out of descriptors under a small `ulimit -n`."""

from __future__ import annotations

import os
import threading

import torch

__all__ = ["shared_int64"]

_BLOCK = 4096  # values a block holds (32 KiB)


class _Current:
    """The block values are handed out of, how many it has handed out, and the process it belongs to."""

    block: torch.Tensor | None = None
    used = 0
    pid = 0


_LOCK = threading.Lock()
_CURRENT = _Current()


def shared_int64(n: int) -> torch.Tensor:
    """`n` int64 zeros in shared memory (a view of a block that other values of this process share; never handed
    out twice). A forked child hands out values of blocks of its own: the parent's are the parent's to hand out."""
    with _LOCK:
        now = _CURRENT
        if now.block is None or now.pid != os.getpid() or now.used + n > now.block.numel():
            now.block = torch.zeros(max(_BLOCK, n), dtype=torch.int64).share_memory_()
            now.used, now.pid = 0, os.getpid()
        start = now.used
        now.used += n
        return now.block[start : start + n]
