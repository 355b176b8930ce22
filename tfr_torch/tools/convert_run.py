"""Running a conversion's job over its items: each item encoded in this process, in worker processes (at most a
window of chunks in flight, so memory stays bounded) or in Ray tasks, and the records written in item order to the
conversion's ShardedWriter, so the shards are the same whichever runs them; a failed item raises or is skipped."""

from __future__ import annotations

import collections
import itertools
import multiprocessing
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from tfr_torch.errors import DecodeError
from tfr_torch.tools.convert_jobs import _Item
from tfr_torch.tools.progress import Progress
from tfr_torch.tools.shards import ShardedWriter


def _run(job: Callable[[int], _Item], count: int, writer: ShardedWriter, workers: int, on_error: str,
         progress: Progress, start: int, skipped: list[list[Any]], engine: str = "local",
         address: str | None = None) -> None:
    """Encode items start..count-1 (in worker processes when workers > 1, in Ray tasks with engine="ray") and
    write them in order."""
    indices = range(start, count)
    pool = None
    results: Any  # for Ray, a generator that is closed below
    if engine == "ray":
        from tfr_torch.ray.convert import ordered_map

        results = ordered_map(job, indices, address=address)
    elif workers > 1:
        context = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        # the job (a dataset, a folder's listing: large) reaches each worker once, with its start (forked: not even
        # pickled), never with each chunk: a dead worker raises BrokenProcessPool, never hangs
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_set_job, initargs=(job,))
        results = _ordered_map(pool, indices, window=workers * 4, chunk=8)
    else:
        results = map(job, indices)
    try:
        for i, record, nbytes, error in results:
            if error is not None:
                if on_error == "raise":
                    raise DecodeError(f"{error} (use on_error='skip' / --on-error skip to skip broken images)")
                skipped.append([i, error])
                progress.update(1, 0)
                continue
            writer.write(record, position=i, state={"skipped": skipped})
            progress.update(1, nbytes)
    finally:
        if engine == "ray":
            results.close()  # cancels the Ray tasks still running
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


_job: Callable[[int], _Item] | None = None  # in a worker process: the conversion's job, set once by _set_job


def _set_job(job: Callable[[int], _Item]) -> None:
    global _job
    _job = job


def _run_chunk(indices: range) -> list[_Item]:
    assert _job is not None  # _set_job, the pool's initializer, ran first
    return [_job(i) for i in indices]


def _ordered_map(pool: ProcessPoolExecutor, indices: range, window: int, chunk: int) -> Iterator[_Item]:
    """The job (installed in each worker by _set_job) of every index, in order, computed in the pool with at most
    `window` chunks in flight (so memory stays bounded however many items there are); a chunk sends only its
    indices."""
    chunks = (indices[k : k + chunk] for k in range(0, len(indices), chunk))
    pending: collections.deque[Future[list[_Item]]] = collections.deque()
    for part in itertools.islice(chunks, window):
        pending.append(pool.submit(_run_chunk, part))
    while pending:
        results = pending.popleft().result()
        more = next(chunks, None)
        if more is not None:
            pending.append(pool.submit(_run_chunk, more))
        yield from results
