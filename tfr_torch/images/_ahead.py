"""An iterator run ahead of its consumer in a background thread, a bounded number of items ahead (DeviceLoader's
`thread=True`)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Optional

__all__ = ["Ahead"]


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class Ahead:
    """Iterator `items` run in a background thread, at most `depth` items ahead of the consumer: the thread takes
    a slot before it pulls an item, the consumer gives one back when it takes one. An exception in the thread is
    raised to the consumer in its place in the sequence."""

    def __init__(self, items: Iterator[Any], depth: int, start: Optional[Callable[[], None]] = None) -> None:
        self._items = items
        self._start = start
        self._slots = threading.Semaphore(depth)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._run, name="tfr_torch DeviceLoader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            if self._start is not None:
                self._start()
            while True:
                while not self._slots.acquire(timeout=0.05):
                    if self._stop.is_set():
                        return
                if self._stop.is_set():
                    return
                try:
                    item = next(self._items)
                except StopIteration:
                    self._queue.put(_DONE)
                    return
                self._queue.put(item)
        except BaseException as exc:  # noqa: BLE001  # handed to the consumer, raised there
            self._queue.put(_Failure(exc))

    def __iter__(self) -> Ahead:
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        item = self._queue.get()
        if item is _DONE:
            self._finished = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._finished = True
            error, item = item.error, None
            try:
                raise error
            finally:  # its traceback holds this frame: no reference cycle through it
                del error
        self._slots.release()
        return item

    def close(self) -> None:
        """Stop the thread after the item it is preparing (if any); the items it prepared are dropped."""
        self._stop.set()
        self._slots.release()
        self._thread.join(timeout=10)
