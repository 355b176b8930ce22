"""Where this process sits in a distributed job: rank and world size, and which source said so.

Sources, first that answers wins:

1. `rank=` / `world_size=` given by the caller;
2. `torch.distributed`, when a process group is initialized (`get_rank()`, `get_world_size()`);
3. torch_xla, only when this process has already imported it *and* its runtime is already initialized (inside a
   `torch_xla.launch` / `xmp.spawn` replica, or after the first use of an XLA device) with more than one replica:
   `runtime.global_ordinal()` / `runtime.world_size()` (`process_index()` / `process_count()` under SPMD, where one
   process feeds all its devices);
4. the `RANK` / `WORLD_SIZE` environment variables (torchrun, most launchers);
5. `(0, 1)`.

The torch_xla probe never imports torch_xla (importing it writes `PJRT_DEVICE` and `XLA_FLAGS` into the
environment), never starts its runtime (after which `xmp.spawn` refuses to run: "Runtime is already initialized"),
and never writes the environment. Any failure of the probe (no libtpu, an API that moved) falls through to the next
source with a debug log line.

A dataset detects its rank once, where it is built. Built before a launcher starts the replicas (and handed to them),
it would make every replica read everything: `check_rank_world` detects again where the data is read and refuses
that with a message saying what to do.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import NamedTuple

__all__ = ["RankWorld", "check_rank_world", "detect_rank_world", "rank_world"]

logger = logging.getLogger(__name__)

ARGUMENTS = "rank=/world_size="
TORCH_DISTRIBUTED = "torch.distributed"
TORCH_XLA = "torch_xla"
ENVIRONMENT = "RANK/WORLD_SIZE"
DEFAULT = "default"

# What torch_xla's probe may raise when its runtime cannot answer (no libtpu, a private name that moved, a runtime
# torn down): each falls through to the next source.
_PROBE_ERRORS = (AttributeError, ImportError, OSError, RuntimeError, TypeError, ValueError)


class RankWorld(NamedTuple):
    """A rank, a world size and the source that gave them (one of "rank=/world_size=", "torch.distributed",
    "torch_xla", "RANK/WORLD_SIZE", "default")."""

    rank: int
    world_size: int
    source: str

    def describe(self) -> str:
        return f"rank {self.rank} of {self.world_size} (from {self.source})"


def rank_world(rank: int | None = None, world_size: int | None = None) -> RankWorld:
    """Rank, world size and their source: the arguments when given, else detected in the documented order.

    >>> rank_world(1, 4)
    RankWorld(rank=1, world_size=4, source='rank=/world_size=')
    """
    if (rank is None) != (world_size is None):
        raise ValueError(f"give both rank and world_size or neither (got rank={rank!r}, world_size={world_size!r})")
    if rank is None:
        found = _detect()
    else:
        found = RankWorld(rank, world_size, ARGUMENTS)  # type: ignore[arg-type]  # both given (checked above)
    if isinstance(found.world_size, bool) or not isinstance(found.world_size, int) or found.world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {found.world_size!r} (from {found.source})")
    if isinstance(found.rank, bool) or not isinstance(found.rank, int) or not 0 <= found.rank < found.world_size:
        raise ValueError(f"rank must be an int in [0, {found.world_size}), got {found.rank!r} (from {found.source})")
    return found


def detect_rank_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Rank and world size: the arguments when given, else torch.distributed when initialized, else torch_xla when
    its runtime is already running replicas in this process, else RANK / WORLD_SIZE, else (0, 1).

    >>> detect_rank_world(0, 2)
    (0, 2)
    """
    found = rank_world(rank, world_size)
    return found.rank, found.world_size


def check_rank_world(built: RankWorld, what: str = "the dataset") -> None:
    """Refuse to read when the rank was detected (not given) where `what` was built and a detection here, where
    it is read, gives another answer: a dataset built before `torch_xla.launch` / `xmp.spawn` /
    `init_process_group` and handed to the replicas would otherwise read every record on every replica.

    A dataset calls it where its records are read in the replica: in `__iter__`, and when it is pickled for
    spawned DataLoader workers (`__getstate__`; torch_xla's replicas spawn theirs). In a DataLoader worker that
    sees no running job (a spawned one: torch.distributed and torch_xla are not set up there) it checks nothing:
    the replica checked when it pickled the dataset. It only asks sources that are already running.

    >>> check_rank_world(RankWorld(0, 2, "rank=/world_size="))  # given explicitly: never second-guessed
    """
    if built.source == ARGUMENTS:
        return
    here = _detect()
    if (here.rank, here.world_size) == (built.rank, built.world_size):
        return
    if here.source not in (TORCH_DISTRIBUTED, TORCH_XLA):
        from torch.utils.data import get_worker_info

        if get_worker_info() is not None:  # a spawned worker knows nothing of the job its replica is in
            return
    raise RuntimeError(
        f"{what} was built as {built.describe()} but is read as {here.describe()}: built before the distributed "
        f"job started (before torch_xla.launch / xmp.spawn / init_process_group) and handed to it, it would not "
        f"split the records between ranks. Build it inside the function each replica runs, or pass rank= and "
        f"world_size= explicitly")


def _detect() -> RankWorld:
    found = _from_torch_distributed() or _from_torch_xla() or _from_environment()
    return found or RankWorld(0, 1, DEFAULT)


def _from_torch_distributed() -> RankWorld | None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return RankWorld(dist.get_rank(), dist.get_world_size(), TORCH_DISTRIBUTED)
    return None


def _from_torch_xla() -> RankWorld | None:
    """torch_xla's answer, only when it can give one without importing torch_xla or starting its runtime."""
    xla = sys.modules.get("torch_xla")
    if xla is None:  # not imported here: importing it would write PJRT_DEVICE / XLA_FLAGS into the environment
        return None
    try:
        # torch_xla's own guard in xmp.spawn; asking an uninitialized runtime anything would start it
        if not xla._XLAC._xla_runtime_is_initialized():
            logger.debug("torch_xla is imported but its runtime is not initialized: not asking it for the rank")
            return None
        runtime = xla.runtime
        if runtime.is_spmd():  # one process feeds all its devices: ranks are processes
            rank, world_size = runtime.process_index(), runtime.process_count()
        else:
            rank, world_size = runtime.global_ordinal(), runtime.world_size()
        rank, world_size = int(rank), int(world_size)
    except _PROBE_ERRORS as exc:
        logger.debug("torch_xla could not give the rank (%s: %s); trying the next source", type(exc).__name__, exc)
        return None
    if world_size <= 1:
        logger.debug("torch_xla's runtime runs one replica: trying the next source")
        return None
    return RankWorld(rank, world_size, TORCH_XLA)


def _from_environment() -> RankWorld | None:
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    try:
        return RankWorld(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), ENVIRONMENT)
    except ValueError:
        raise ValueError(f"RANK={os.environ['RANK']!r} / WORLD_SIZE={os.environ['WORLD_SIZE']!r} are not "
                         "integers") from None
