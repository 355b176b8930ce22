"""Which records each reader (rank x DataLoader worker) reads in an epoch: pure functions, no I/O.

A dataset's records are numbered globally: file after file (in the epoch's file order), record after record. An
epoch's *order* is either that sequence (files possibly shuffled) or, with indexes and shuffling, a seeded
permutation of all records. With several ranks, the order is cut to a multiple of the world size (or padded by
repeating its first records) and each rank takes one contiguous block of it; a rank's block is cut between its
DataLoader workers into sizes that depend only on the block's length, so every rank yields the same number of
samples and batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["Run", "epoch_rng", "file_order", "rank_quota", "split_sizes", "worker_block", "runs_of_block",
           "global_block", "files_for_worker"]


class Run(NamedTuple):
    """Records `[start, stop)` of file number `file` (in the dataset's file list)."""

    file: int
    start: int
    stop: int


def epoch_rng(seed: int, epoch: int, stream: int = 0) -> np.random.Generator:
    """The generator for (seed, epoch): the same on every rank and worker, different for each epoch."""
    return np.random.default_rng(np.random.SeedSequence([int(seed) & (2**63 - 1), int(epoch), stream]))


def file_order(num_files: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """File numbers in the order an epoch reads them."""
    if not shuffle:
        return np.arange(num_files)
    return epoch_rng(seed, epoch, 1).permutation(num_files)


def rank_quota(total: int, world_size: int, pad: bool) -> int:
    """Records each rank yields: total // world_size (drop the remainder) or the ceiling (pad)."""
    if world_size == 1:
        return total
    return -(-total // world_size) if pad else total // world_size


def split_sizes(n: int, parts: int, multiple: int = 1) -> list[int]:
    """Cut n into `parts` near-equal sizes made of whole batches of `multiple`: only the last non-empty part may
    end with a partial batch (parts after it are empty), so the number of batches is ceil(n / multiple)
    whatever `parts` is."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    chunks = -(-n // multiple)  # batches
    base, extra = divmod(chunks, parts)
    sizes = []
    left = n
    for p in range(parts):
        take = min(left, (base + (1 if p < extra else 0)) * multiple)
        sizes.append(take)
        left -= take
    return sizes


def runs_of_block(counts: Sequence[int], order: np.ndarray, a: int, b: int) -> list[Run]:
    """The runs covering positions [a, b) of the sequence of records of the files in `order` (positions past the
    end wrap around to the start: that is how padding repeats records)."""
    count_of = np.asarray(counts, dtype=np.int64)
    total = int(count_of.sum())
    runs: list[Run] = []
    if total == 0 or b <= a:
        return runs
    ordered = count_of[order]
    ends = np.cumsum(ordered)
    pos = a
    while pos < b:
        wrapped = pos % total
        i = int(np.searchsorted(ends, wrapped, side="right"))
        start_of_file = int(ends[i] - ordered[i])
        first = wrapped - start_of_file
        take = min(int(ordered[i]) - first, b - pos)
        runs.append(Run(int(order[i]), first, first + take))
        pos += take
    return runs


def global_block(counts: Sequence[int], seed: int, epoch: int, a: int, b: int) -> np.ndarray:
    """Global record numbers at positions [a, b) of the epoch's seeded permutation of all records (wrapping
    around for padding)."""
    total = int(np.sum(counts))
    if total == 0 or b <= a:
        return np.zeros(0, dtype=np.int64)
    perm = epoch_rng(seed, epoch, 2).permutation(total)
    return perm[np.arange(a, b) % total]


def worker_block(quota: int, rank: int, worker: int, num_workers: int, multiple: int = 1) -> tuple[int, int]:
    """Positions [a, b) of the epoch order read by one worker of one rank: the rank's block is
    [rank * quota, (rank + 1) * quota), cut by `split_sizes`."""
    sizes = split_sizes(quota, num_workers, multiple)
    a = rank * quota + sum(sizes[:worker])
    return a, a + sizes[worker]


def files_for_worker(order: np.ndarray, worker: int, num_workers: int) -> list[int]:
    """Whole files for one worker, round-robin over the epoch's file order (one rank, unknown record counts)."""
    return [int(f) for f in order[worker::num_workers]]
