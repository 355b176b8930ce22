"""The Ray engine of `convert_image_folder` / `convert_dataset` (`engine="ray"`, `tfr-torch convert --engine ray`).

The items (images) are split into chunks that Ray tasks encode anywhere on the cluster; the encoded records come
back in item order to the one ShardedWriter of the conversion. So the shards are byte-identical to the local
engine's, and an interrupted conversion resumes the same way (from its last finished shard) with either engine.
Image folders must be readable at the same path on every node (a shared file system); a dataset object is
shipped to the cluster once.
"""

from __future__ import annotations

import collections
import itertools
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import ray

__all__ = ["ordered_map", "connect"]

_CHUNK = 8  # items per task: enough to amortise a task's overhead, small enough to keep every CPU busy


@ray.remote
def _encode_chunk(job: Callable[[int], tuple[Any, ...]], indices: range) -> list[tuple[Any, ...]]:
    return [job(i) for i in indices]


def connect(address: str | None = None) -> Callable[[], None] | None:
    """Make sure this process is connected to Ray: the running session if there is one, else `address` (a
    cluster's "host:port" or "auto"), else a new local Ray (or the cluster named by RAY_ADDRESS). Returns how to
    disconnect where this call connected (None where Ray was already running): `ray.shutdown()`, and the SIGTERM
    handler the process had put back. `ray.init` sets its own (SIGTERM raises SystemExit) and `ray.shutdown` leaves
    it: in the caller's process SIGTERM would then no longer end it at once, and a process forked later (a
    multiprocessing pool's worker) that gets SIGTERM as it starts loses it and never ends."""
    if ray.is_initialized():
        return None
    before = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)

    def disconnect() -> None:
        ray.shutdown()
        if before is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, before)

    return disconnect


def ordered_map(job: Callable[[int], tuple[Any, ...]], indices: range, *, address: str | None = None,
                chunk: int = _CHUNK) -> Iterator[tuple[Any, ...]]:
    """job(i) for every index, in order, computed by Ray tasks, with a bounded number of chunks in flight (about
    four per CPU of the cluster) so memory stays bounded however many items there are. A task that fails raises
    here, after the chunks before it were yielded; closing the iterator cancels what is still running."""
    disconnect = connect(address)
    pending: collections.deque[Any] = collections.deque()  # Ray object refs
    try:
        job_ref = ray.put(job)
        window = max(2, int(ray.cluster_resources().get("CPU", 1)) * 4)
        chunks = (indices[k : k + chunk] for k in range(0, len(indices), chunk))
        for part in itertools.islice(chunks, window):
            pending.append(_encode_chunk.remote(job_ref, part))
        while pending:
            results = ray.get(pending.popleft())
            more = next(chunks, None)
            if more is not None:
                pending.append(_encode_chunk.remote(job_ref, more))
            yield from results
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if disconnect is not None:
            disconnect()

