"""A one-line progress display for long conversions (records/s, MB/s, ETA) on stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Counts items and bytes; redraws at most every `interval` seconds when enabled."""

    def __init__(self, total: int | None, label: str = "", enabled: bool = True, stream: TextIO | None = None,
                 interval: float = 0.5) -> None:
        self.total, self.label, self.enabled = total, label, enabled
        self.stream = stream or sys.stderr
        self.interval = interval
        self.items = self.bytes = 0
        self.start = self._last = time.perf_counter()

    def update(self, items: int = 1, nbytes: int = 0) -> None:
        self.items += items
        self.bytes += nbytes
        now = time.perf_counter()
        if self.enabled and now - self._last >= self.interval:
            self._last = now
            self.stream.write("\r" + self.line(now) + " " * 4)
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        elapsed = max((now or time.perf_counter()) - self.start, 1e-9)
        rate = self.items / elapsed
        text = f"{self.label}{self.items}" + (f"/{self.total}" if self.total else "") + " items"
        text += f"  {rate:,.0f} items/s  {self.bytes / elapsed / 1e6:,.1f} MB/s"
        if self.total and rate > 0:
            left = max(self.total - self.items, 0) / rate
            text += f"  ETA {int(left // 3600)}:{int(left % 3600 // 60):02d}:{int(left % 60):02d}"
        return text

    def done(self) -> float:
        """End the display line; return the elapsed seconds."""
        elapsed = time.perf_counter() - self.start
        if self.enabled:
            self.stream.write("\r" + self.line() + "\n")
            self.stream.flush()
        return elapsed
