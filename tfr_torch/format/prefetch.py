"""A background thread that runs a producer a few items ahead of its consumer (the GZIP/ZLIB inflate thread).

The producer's work (inflating the next piece of a stream) releases the GIL, so it overlaps with what the consumer
does with the previous piece (framing records, checking CRCs, copying them out). Memory stays bounded: at most
`depth` finished items wait in the queue, plus the one being made. Whatever the producer raises is handed over as
an item, in order, so the consumer raises it where it would have without the thread.

The thread never refers to the consumer, so dropping the consumer (garbage collection, an abandoned iterator) can
stop it through `weakref.finalize`; `stop()` returns every item made but not taken, so the consumer can rewind. A
forked child has no such thread: `take()` there raises RuntimeError instead of waiting forever.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Prefetch"]

T = TypeVar("T")


class Prefetch(Generic[T]):
    """Run `produce()` in a daemon thread until it returns an item for which `last(item)` is true.

    `take()` returns the items in order. `produce` must not raise: it returns what went wrong as an item (the
    Inflater returns the exception itself), so the consumer meets it in order. `stop()` ends the thread (waiting
    at most for the call in progress) and returns the items made but not taken, in order."""

    def __init__(self, produce: Callable[[], T], last: Callable[[T], bool], depth: int = 2, name: str = "") -> None:
        self.pid = os.getpid()
        self._queue: queue.Queue[T] = queue.Queue(maxsize=max(int(depth), 1))
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=_run, args=(produce, last, self._queue, self._stopping),
                                        name=f"tfr_torch-prefetch {name}".strip(), daemon=True)
        self._thread.start()

    def take(self) -> T:
        """The next item (waits for it)."""
        if self.pid != os.getpid():
            raise RuntimeError(f"this GZIP/ZLIB reader started inflating in process {self.pid}, and its inflate "
                               f"thread does not exist in this forked process ({os.getpid()}): open the file in the "
                               "process that reads it (or leave TFR_TORCH_INFLATE_THREAD unset)")
        while True:
            try:
                return self._queue.get(timeout=0.5)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the inflate thread ended without handing over its last item") from None

    def stop(self) -> list[T]:
        """Stop the thread and return the items it made that were not taken. Safe to call more than once, and
        from a forked child (where it only drops the queue)."""
        self._stopping.set()
        left: list[T] = []
        if self.pid != os.getpid() or threading.current_thread() is self._thread:
            return left  # no thread here; or the thread itself dropped the consumer's last reference
        while True:
            while True:  # a `put` blocked on a full queue returns once there is room
                try:
                    left.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._thread.join(0.01)
            if not self._thread.is_alive():
                break
        while True:
            try:
                left.append(self._queue.get_nowait())
            except queue.Empty:
                return left


def _run(produce: Callable[[], T], last: Callable[[T], bool], out: queue.Queue[T], stopping: threading.Event) -> None:
    while not stopping.is_set():
        item = produce()
        out.put(item)
        if last(item):
            return
