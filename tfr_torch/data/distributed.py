"""Where this process sits in a distributed job: rank and world size."""

from __future__ import annotations

import importlib.util
import os

__all__ = ["detect_rank_world"]


def detect_rank_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Rank and world size, from the arguments when given, else torch.distributed when initialized, else
    torch_xla.runtime (global_ordinal, world_size) when torch_xla is installed, else the RANK / WORLD_SIZE
    environment variables, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError(f"give both rank and world_size or neither (got rank={rank!r}, world_size={world_size!r})")
    if rank is None:
        rank, world_size = _detect()
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    return rank, world_size


def _detect() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if importlib.util.find_spec("torch_xla") is not None:
        try:
            import torch_xla.runtime as xr

            return int(xr.global_ordinal()), int(xr.world_size())
        except (ImportError, RuntimeError, AttributeError):  # torch_xla installed but no XLA runtime here
            pass
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        try:
            return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except ValueError:
            raise ValueError(f"RANK={os.environ['RANK']!r} / WORLD_SIZE={os.environ['WORLD_SIZE']!r} are not "
                             "integers") from None
    return 0, 1
