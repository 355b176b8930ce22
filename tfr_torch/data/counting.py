"""Record counts of files that have no index, counted once per dataset and shared by every process that uses it.

A dataset splits files by record ranges when there are fewer files than readers (ranks x DataLoader workers),
which needs each file's record count. With several ranks the counts are taken when the dataset is built. With
one rank the number of DataLoader workers is known only inside the workers, so the workers count at their first
epoch, in parallel (each counts its share of the files, then takes over any file nobody has started), and publish
the counts in shared memory: the main process (`len()`), later epochs and persistent workers then use them.

A table slot holds a count (>= 0) or UNKNOWN, and is written once with the count: a count once known stays known.
Beside it, a claim slot holds the process id of the worker counting the file (0: nobody, FAILED: its counter
failed). Two workers may both count a file that neither had claimed when they looked (each writes the same count);
a claim in the count's own slot let a late counter hide a count another worker had just published, and a worker
that read the table then saw no counts and read the whole file while the other read its range: records twice. A
worker never waits on a file nobody counts: a failed or unclaimed file, or one whose counter's process is gone (a
worker of an earlier pass, shut down mid-count when its iterator was dropped), is counted by the waiting worker
itself, so a worker that fails raises its error and the others raise the same one.

Warnings that a dataset gives from a worker are attributed to the line of user code that built the dataset (the
only user line there is), and given once per dataset whatever the number of workers and epochs.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import torch

from tfr_torch.data.shared_cells import shared_int64

__all__ = ["SharedCounts", "UserSite", "user_site"]

UNKNOWN, FAILED = -1, -2
_POLL = 0.005  # seconds between looks at the table while another worker counts


class UserSite:
    """The line of user code that built a dataset: where its warnings point, from any process."""

    def __init__(self, filename: str, lineno: int, module: str) -> None:
        self.filename, self.lineno, self.module = filename, lineno, module

    def warn(self, message: str, category: type[Warning] = UserWarning) -> None:
        warnings.warn_explicit(message, category, self.filename, self.lineno, module=self.module,
                               registry=_REGISTRY.setdefault((self.filename, self.lineno), {}))


_REGISTRY: dict[tuple[str, int], dict[Any, Any]] = {}  # warnings' per-location registries (see warn_explicit)


def user_site() -> UserSite:
    """The innermost calling frame outside tfr_torch (and outside torch and the standard library's
    multiprocessing), i.e. the user's line that called into the library."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(("tfr_torch.", "torch.", "importlib.", "multiprocessing.")) and module != "tfr_torch":
            return UserSite(frame.f_code.co_filename, frame.f_lineno, module)
        frame = frame.f_back
    return UserSite("<unknown>", 0, "tfr_torch")


class SharedCounts:
    """Per-file record counts in shared memory (UNKNOWN until counted), and once-only warning flags."""

    def __init__(self, counts: Sequence[int | None]) -> None:
        n = len(counts)
        cells = shared_int64(2 * n + 8)  # one block of shared memory for many datasets' values
        self.table, self.claims, self.flags = cells[:n], cells[n : 2 * n], cells[2 * n :]
        self.table.copy_(torch.tensor([UNKNOWN if c is None else int(c) for c in counts], dtype=torch.int64))
        self._initial = self.unknown()  # the files to count as built, the same list in every worker

    def known(self) -> list[int] | None:
        """Every file's count, or None while any is unknown."""
        values = self.table.tolist()
        return values if all(v >= 0 for v in values) else None

    def unknown(self) -> list[int]:
        return [f for f, v in enumerate(self.table.tolist()) if v < 0]

    def first(self, flag: int) -> bool:
        """True the first time `flag` is asked for (by any process sharing this table)."""
        if int(self.flags[flag]):
            return False
        self.flags[flag] = 1
        return True

    def count_here(self, count: Callable[[int], int]) -> list[int]:
        """Count every unknown file in this process (the main process, or a single reader)."""
        for f in self.unknown():
            self.table[f] = int(count(f))
        return self.known()  # type: ignore[return-value]  # every file was just counted: never None

    def count_shared(self, count: Callable[[int], int], worker: int, workers: int) -> list[int]:
        """In DataLoader worker `worker` of `workers`: count this worker's share of the unknown files, then any
        file nobody has claimed, then wait for the files other workers are counting."""
        table, claims = self.table, self.claims
        mine = self._initial[worker::workers]
        for f in mine:
            if int(table[f]) < 0 and int(claims[f]) == 0:
                self._count_one(f, count)
        while True:
            values = table.tolist()
            pending = [f for f, v in enumerate(values) if v < 0]
            if not pending:
                return values
            owners = claims.tolist()
            orphans = [f for f in pending if owners[f] <= 0 or not _alive(owners[f])]
            for f in orphans:  # nobody counts it (its counter failed, or is gone): count it here, raising its error
                self._count_one(f, count)
            if not orphans:
                time.sleep(_POLL)

    def _count_one(self, f: int, count: Callable[[int], int]) -> None:
        self.claims[f] = os.getpid()
        try:
            n = int(count(f))
        except BaseException:
            if int(self.table[f]) < 0:  # another worker's count stands
                self.claims[f] = FAILED
            raise
        self.table[f] = n  # the slot's only write: every counter of the file gives the same count


def _alive(pid: int) -> bool:
    """Whether process `pid` exists (a worker that claimed a file and may still count it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True
