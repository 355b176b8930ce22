"""Progress on stderr for long CLI runs (count, verify, index, inspect, reshard, convert), drawn by tqdm.

Shown only when the stream is a terminal, so logs, pipes and CI output stay clean; `enabled=False` (the
commands' `-q`) turns it off everywhere, `tty_only=False` shows it on any stream.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, TextIO

from tqdm import tqdm

__all__ = ["Progress", "is_terminal"]


def is_terminal(stream: Any) -> bool:
    """Whether `stream` is an interactive terminal (False for files, pipes, StringIO, closed streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _screen(stream: Any) -> tuple[int, int]:
    """The terminal's (columns, rows). A terminal that reports a zero size (a fresh pseudo-terminal, as some CI
    runners and `script` give) would make tqdm draw nothing: then $COLUMNS / $LINES, else 80 x 24."""
    try:
        columns, rows = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        columns, rows = 0, 0
    fallback = shutil.get_terminal_size((80, 24))
    return columns or fallback.columns or 80, rows or fallback.lines or 24


class Progress:
    """Counts items (records, images) and bytes, and draws a tqdm bar of them.

    The bar follows bytes when `total_bytes` is given (e.g. the sizes of the files being read: an ETA), items
    otherwise (`total` items, or no total); the other count is shown beside it. `items` and `bytes` are always
    counted, shown or not (a conversion reports them).

    >>> meter = Progress(total=3, label="demo")  # doctest: +SKIP
    >>> for record in records:  # doctest: +SKIP
    ...     meter.update(1, len(record))
    >>> seconds = meter.done()  # doctest: +SKIP
    """

    def __init__(self, total: int | None = None, label: str = "", enabled: bool = True, stream: TextIO | None = None,
                 interval: float = 0.5, *, total_bytes: int | None = None, unit: str = "items",
                 tty_only: bool = True) -> None:
        self.total, self.total_bytes, self.unit = total, total_bytes, unit
        self.label = label.rstrip().rstrip(":")
        self.stream = stream if stream is not None else sys.stderr
        self.shown = bool(enabled) and (not tty_only or is_terminal(self.stream))
        self.items = self.bytes = 0
        self.start = time.perf_counter()
        self._by_bytes = total_bytes is not None
        self._bar: tqdm[Any] | None = None
        if self.shown:
            columns, rows = _screen(self.stream)
            self._bar = tqdm(total=total_bytes if self._by_bytes else total, desc=self.label or None,
                             unit="B" if self._by_bytes else f" {unit}", unit_scale=self._by_bytes,
                             file=self.stream, mininterval=interval, ncols=columns, nrows=rows, leave=True)
        self._postfix_at = self.start

    def update(self, items: int = 1, nbytes: int = 0) -> None:
        """Count `items` more items and `nbytes` more bytes."""
        self.items += items
        self.bytes += nbytes
        bar = self._bar
        if bar is not None:
            bar.update(nbytes if self._by_bytes else items)
            now = time.perf_counter()
            if now - self._postfix_at >= bar.mininterval:
                self._postfix_at = now
                bar.set_postfix_str(self._other(), refresh=False)

    def unknown_total(self) -> None:
        """Drop the total (e.g. a compressed file: its decompressed bytes are not known in advance)."""
        self.total = self.total_bytes = None
        if self._bar is not None:
            self._bar.total = None
            self._bar.refresh()

    def write(self, line: str, file: TextIO | None = None) -> None:
        """Print a line to `file` (default: the bar's stream), clearing the bar and drawing it again below."""
        file = file if file is not None else self.stream
        if self._bar is not None:
            self._bar.write(line, file=file)
        else:
            print(line, file=file)

    def _other(self) -> str:
        if self._by_bytes:
            return f"{self.items:,} {self.unit}"
        return f"{self.bytes / max(time.perf_counter() - self.start, 1e-9) / 1e6:,.1f} MB/s" if self.bytes else ""

    def line(self) -> str:
        """A one-line summary: items (of the total), items/s and MB/s since the start."""
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        text = f"{self.label + ': ' if self.label else ''}{self.items:,}"
        text += f"/{self.total:,}" if self.total else ""
        return text + f" {self.unit}  {self.items / elapsed:,.0f} {self.unit}/s  {self.bytes / elapsed / 1e6:,.1f} MB/s"

    def done(self) -> float:
        """Close the bar (its last state stays on screen); return the seconds since the start."""
        elapsed = time.perf_counter() - self.start
        if self._bar is not None:
            self._bar.set_postfix_str(self._other(), refresh=False)
            self._bar.close()
            self._bar = None
        return elapsed
