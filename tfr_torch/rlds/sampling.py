"""Seeded sampling for frame datasets: pure functions and generators, no I/O.

- `reader_rng`: one generator per (seed, epoch, rank, DataLoader worker, stream), so each reader's draws are
  exactly reproducible and independent of the other readers'.
- `choices`: the dataset each frame is drawn from, with probabilities proportional to the weights of the datasets
  still able to give frames (drawn in blocks: one numpy call per 1,024 frames).
- `shuffled`: a shuffle buffer that never holds more than `size` items (its memory bound is `size` times the
  largest item), then drains in a seeded order.
- `collate_frames`: frames stacked into one batch (tensors stacked, other values listed).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["reader_rng", "choices", "shuffled", "collate_frames", "frame_nbytes"]

_STREAM = 0x524C4453  # "RLDS": keeps these draws apart from TFRecordDataset's epoch_rng streams
_BLOCK = 1024


def reader_rng(seed: int, epoch: int, rank: int, worker: int, workers: int, stream: int) -> np.random.Generator:
    """The generator of one reader (rank x worker) for one use (`stream`) in one epoch."""
    return np.random.default_rng(np.random.SeedSequence(
        [int(seed) & (2**63 - 1), int(epoch), _STREAM, int(rank), int(worker), int(workers), int(stream)]))


def choices(weights: Sequence[float], alive: Sequence[bool], rng: np.random.Generator) -> Iterator[int]:
    """Dataset numbers drawn with probability weight / (sum of the live datasets' weights), forever; the caller
    starts a new one (same rng) when a dataset stops being live."""
    p = np.asarray(weights, dtype=np.float64) * np.asarray(alive, dtype=bool)
    total = p.sum()
    if total <= 0:
        return
    p = p / total
    while True:
        yield from rng.choice(len(p), size=_BLOCK, p=p).tolist()


def shuffled(items: Iterable[Any], size: int, rng: np.random.Generator) -> Iterator[Any]:
    """`items` shuffled through a buffer of at most `size` items: once full, each new item takes the place of one
    drawn at random, which is yielded; at the end the rest comes out in a random order. `size` 0 or 1: in order.

    >>> list(shuffled(range(5), 0, np.random.default_rng(0)))
    [0, 1, 2, 3, 4]
    """
    if size <= 1:
        yield from items
        return
    draw = random.Random(int(rng.integers(2**63)))
    buffer: list[Any] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        i = draw.randrange(size)
        out, buffer[i] = buffer[i], item
        yield out
    draw.shuffle(buffer)
    while buffer:
        yield buffer.pop()


def collate_frames(frames: Sequence[Any]) -> Any:
    """One batch of frames: tensors stacked on a new first axis, dicts collated key by key, anything else (bytes,
    strings) as a list.

    >>> collate_frames([{"a": torch.zeros(2), "t": b"x"}, {"a": torch.ones(2), "t": b"y"}])["t"]
    [b'x', b'y']
    """
    first = frames[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(list(frames))
    if isinstance(first, dict):
        return {key: collate_frames([f[key] for f in frames]) for key in first}
    return list(frames)


def frame_nbytes(value: Any) -> int:
    """The bytes a frame (or any nesting of dicts, lists, tensors and bytes) holds: what it costs in a buffer."""
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if isinstance(value, dict):
        return sum(frame_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(frame_nbytes(v) for v in value)
    if isinstance(value, (bytes, str)):
        return len(value)
    return 8
