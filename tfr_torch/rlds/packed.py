"""Frames packed for the shuffle buffer: an episode's windows gathered at once (one index_select per key, as
`window_episode`), then each frame kept as one row of bytes of its own (a copy: no view of the episode) beside a
layout shared by the episode's frames. A batch of frames with one layout is stacked once and cut into its keys (one
copy per key); a single frame is cut the same way. The values equal `gather_frames(steps, window, index, row)`
collated by `collate_frames`, bit for bit.

Tensors of any dtype are stored as their bytes, each key's bytes padded to 8 so every key starts aligned; values
that are not tensors (bytes, lists of them) stay Python objects beside the row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
import torch

from tfr_torch.rlds.sampling import collate_frames

__all__ = ["Layout", "PackedFrame", "pack_frames", "unpack_frame", "collate_packed"]

_ALIGN = 8


@dataclass(frozen=True)
class Column:
    """One tensor key of a frame: where its bytes sit in the row, and its dtype and shape (of one frame)."""

    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


Tree = tuple[tuple[str, Union["Tree", int]], ...]  # (key, subtree or leaf number); leaf >= 0: column, < 0: extra


@dataclass(frozen=True)
class Layout:
    """The keys of a frame in their order (`tree`), its tensor columns, and the row's size in bytes."""

    tree: Tree
    columns: tuple[Column, ...]
    nbytes: int


class PackedFrame:
    """One frame in the buffer: its own row of bytes, its layout, its non-tensor values."""

    __slots__ = ("row", "layout", "extras")

    def __init__(self, row: np.ndarray, layout: Layout, extras: tuple[Any, ...]) -> None:
        self.row, self.layout, self.extras = row, layout, extras


def _flatten(value: Mapping[str, Any], tensors: list[torch.Tensor], others: list[Any]) -> Tree:
    tree: list[tuple[str, Union[Tree, int]]] = []
    for key, v in value.items():
        if isinstance(v, Mapping):
            tree.append((key, _flatten(v, tensors, others)))
        elif (isinstance(v, torch.Tensor) and v.layout == torch.strided and v.dim() >= 1 and v.device.type == "cpu"
              and not v.requires_grad):
            tensors.append(v)
            tree.append((key, len(tensors) - 1))
        else:
            others.append(v)
            tree.append((key, -len(others)))
    return tuple(tree)


def pack_frames(frames: Mapping[str, Any], count: int, layouts: dict[Layout, Layout]) -> list[PackedFrame]:
    """The `count` frames of `frames` (gather_frames' values with a leading frame axis: tensors `[count, ...]`,
    lists of `count` items) as PackedFrames; `layouts` interns the layouts (same keys, dtypes and shapes: the same
    object), so a batch checks them by identity."""
    tensors: list[torch.Tensor] = []
    others: list[Any] = []
    tree = _flatten(frames, tensors, others)
    columns, offset, parts = [], 0, []
    for t in tensors:
        if t.shape[0] != count:
            raise ValueError(f"a frame value has {t.shape[0]} rows for {count} frames")
        rows = t.reshape(count, -1) if 0 not in t.shape[1:] else torch.zeros((count, 0), dtype=torch.uint8)
        if rows.stride() != (rows.shape[1], 1):  # (an expanded value can be "contiguous" with a stride of 0)
            rows = rows.clone(memory_format=torch.contiguous_format)
        raw = rows.view(torch.uint8).numpy()
        size = raw.shape[1]
        columns.append(Column(offset, size, t.dtype, tuple(t.shape[1:])))
        parts.append((offset, raw))
        offset += -(-size // _ALIGN) * _ALIGN
    layout = Layout(tree, tuple(columns), offset)
    layout = layouts.setdefault(layout, layout)
    matrix = np.zeros((count, offset), dtype=np.uint8)
    for start, raw in parts:
        matrix[:, start : start + raw.shape[1]] = raw
    lists = [_rows(v, count) for v in others]
    return [PackedFrame(matrix[i].copy(), layout, tuple(v[i] for v in lists)) for i in range(count)]


def _rows(value: Any, count: int) -> Sequence[Any]:
    if isinstance(value, torch.Tensor):  # not packed (another device, layout...): each frame its own copy
        return [value[i].clone() for i in range(count)]
    if not isinstance(value, (list, tuple)) or len(value) != count:
        raise ValueError(f"a frame value of type {type(value).__name__} does not have one item per frame ({count})")
    return value


def _cut(matrix: np.ndarray, column: Column, lead: tuple[int, ...]) -> torch.Tensor:
    """A key's values from a row ([nbytes]) or a stack of rows ([B, nbytes]): always a new array of its own."""
    if not column.nbytes:
        return torch.empty(lead + column.shape, dtype=column.dtype)
    raw = matrix[..., column.offset : column.offset + column.nbytes].copy()
    return torch.from_numpy(raw).view(column.dtype).reshape(lead + column.shape)


def _build(tree: Tree, layout: Layout, matrix: np.ndarray, lead: tuple[int, ...], extras: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, node in tree:
        if isinstance(node, tuple):
            out[key] = _build(node, layout, matrix, lead, extras)
        elif node >= 0:
            out[key] = _cut(matrix, layout.columns[node], lead)
        else:
            out[key] = extras(-node - 1)
    return out


def unpack_frame(frame: PackedFrame) -> dict[str, Any]:
    """The frame as gather_frames gives it: a dict of tensors (each its own) and the other values."""
    return _build(frame.layout.tree, frame.layout, frame.row, (), frame.extras.__getitem__)


def collate_packed(frames: Sequence[PackedFrame]) -> dict[str, Any]:
    """A batch as collate_frames gives it from the unpacked frames, for frames of one layout: their rows stacked
    once, each key cut from the stack; other values listed per frame."""
    layout = frames[0].layout
    matrix = np.stack([f.row for f in frames])
    return _build(layout.tree, layout, matrix, (len(frames),), lambda j: collate_frames([f.extras[j] for f in frames]))


def same_layout(frames: Sequence[PackedFrame]) -> bool:
    layout = frames[0].layout
    return all(f.layout is layout for f in frames)
