"""Frames packed for the shuffle buffer: each frame of an episode kept as one row of bytes of its own (a copy: no
view of the episode) beside a layout shared by the episode's frames. The episode's windows are gathered straight into
those rows (one take per key into a matrix the reader reuses, then one copy per frame), not into tensors first. A
batch of frames with one layout is stacked once into reused memory and cut into its keys, each key a region of one
batch allocation; that allocation is handed out again once nothing holds any of its keys (its reference count says
so), because fresh memory for every batch costs a page fault per 4 KiB (on a VM, about as much as the copies). The
values equal `gather_frames(steps, window, index, row)` collated by `collate_frames`, bit for bit.

Tensors of any dtype are stored as their bytes, each key's bytes padded to 8 so every key starts aligned; values
that are not tensors (bytes, lists of them) stay Python objects beside the row.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import torch

from tfr_torch.rlds.sampling import collate_frames
from tfr_torch.rlds.windows import FrameIndex, Window, _gather, _take

__all__ = ["Layout", "PackedFrame", "Packer", "pack_frames", "pack_episode", "unpack_frame", "collate_packed"]

_ALIGN = 8
_KEY_ALIGN = 64  # each key's region in a batch's memory
_KEEP = 4  # batch allocations a Packer keeps for reuse


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


class _Deferred:
    """A step tensor whose frames are taken later, straight into the rows: value[idx] ([N, ...] from [T, ...])."""

    __slots__ = ("value", "idx")

    def __init__(self, value: torch.Tensor, idx: np.ndarray) -> None:
        self.value, self.idx = value, idx


def _packable(v: Any) -> bool:
    return (isinstance(v, torch.Tensor) and v.layout == torch.strided and v.dim() >= 1 and v.device.type == "cpu"
            and not v.requires_grad)


def _defer(value: Any, idx: np.ndarray, key: str) -> Any:
    """gather_frames' take, with the packable tensors' gathers deferred (the rest taken at once, as it takes them)."""
    if isinstance(value, Mapping):
        return {k: _defer(v, idx, f"{key}/{k}") for k, v in value.items()}
    if _packable(value) and np.ndim(idx) >= 1:
        return _Deferred(value, idx)
    return _take(value, idx, key)


def _raw_rows(t: torch.Tensor) -> np.ndarray:
    """A [n, ...] tensor's bytes as a [n, row bytes] uint8 array (a view where it can be)."""
    if 0 in t.shape:  # (an empty episode, or empty rows: nothing to view)
        return np.zeros((t.shape[0], int(np.prod(t.shape[1:], dtype=np.int64)) * t.element_size()), dtype=np.uint8)
    rows = t.reshape(t.shape[0], -1)
    if rows.stride() != (rows.shape[1], 1):  # (an expanded value can be "contiguous" with a stride of 0)
        rows = rows.clone(memory_format=torch.contiguous_format)
    raw: np.ndarray = rows.view(torch.uint8).numpy()
    return raw


def _flatten(value: Mapping[str, Any], sources: list[Any], others: list[Any]) -> Tree:
    tree: list[tuple[str, Union[Tree, int]]] = []
    for key, v in value.items():
        if isinstance(v, Mapping):
            tree.append((key, _flatten(v, sources, others)))
        elif isinstance(v, _Deferred) or _packable(v):
            sources.append(v)
            tree.append((key, len(sources) - 1))
        else:
            others.append(v)
            tree.append((key, -len(others)))
    return tuple(tree)


class Packer:
    """One reader's packing: the interned layouts (same keys, dtypes and shapes: the same object, so a batch checks
    them by identity) and the memory it reuses: an episode's matrix of frames, a batch's stacked rows, and the batch
    allocations it hands out again once nothing else holds them."""

    def __init__(self, lend: bool = False) -> None:
        self.lend = lend  # batches in slabs of their own (transport.slab_tensor): a worker whose batches it sends
        self.layouts: dict[Layout, Layout] = {}
        self._matrix = np.empty(0, dtype=np.uint8)
        self._scratch = np.empty(0, dtype=np.uint8)
        self._stack = np.empty(0, dtype=np.uint8)
        self._batches: list[np.ndarray] = []

    def pack(self, frames: Mapping[str, Any], count: int) -> list[PackedFrame]:
        """The `count` frames of `frames` (gather_frames' values with a leading frame axis, or _defer's) as
        PackedFrames."""
        sources: list[Any] = []
        others: list[Any] = []
        tree = _flatten(frames, sources, others)
        columns, offset, fills = [], 0, []
        for s in sources:
            if isinstance(s, _Deferred):
                raw, idx = _raw_rows(s.value), s.idx
                if idx.shape[0] != count:
                    raise ValueError(f"a frame value has {idx.shape[0]} rows for {count} frames")
                lead, shape = tuple(idx.shape[1:]), tuple(idx.shape[1:]) + tuple(s.value.shape[1:])
                dtype = s.value.dtype
            else:
                if s.shape[0] != count:
                    raise ValueError(f"a frame value has {s.shape[0]} rows for {count} frames")
                raw, idx, lead, shape, dtype = _raw_rows(s), None, (), tuple(s.shape[1:]), s.dtype
            size = raw.shape[1] * int(np.prod(lead, dtype=np.int64))
            columns.append(Column(offset, size, dtype, shape))
            fills.append((offset, raw, idx))
            offset += -(-size // _ALIGN) * _ALIGN
        layout = Layout(tree, tuple(columns), offset)
        layout = self.layouts.setdefault(layout, layout)
        if self._matrix.size < count * offset:
            self._matrix = np.empty(count * offset, dtype=np.uint8)
        matrix = self._matrix[: count * offset].reshape(count, offset)
        for start, raw, idx in fills:
            width = raw.shape[1]
            if not width:
                continue
            if idx is None:
                matrix[:, start : start + width] = raw
                continue
            # numpy's take writes straight into out= only when that is contiguous (else into a new temporary): one
            # slot of the window at a time through reused scratch, then into the rows
            flat = idx.reshape(count, -1)
            if self._scratch.size < count * width:
                self._scratch = np.empty(count * width, dtype=np.uint8)
            taken = self._scratch[: count * width].reshape(count, width)
            for j in range(flat.shape[1]):
                np.take(raw, flat[:, j], axis=0, out=taken, mode="clip")  # (frame_index clamps the steps)
                matrix[:, start + j * width : start + (j + 1) * width] = taken
        lists = [_rows(v, count) for v in others]
        return [PackedFrame(matrix[i].copy(), layout, tuple(v[i] for v in lists)) for i in range(count)]

    def collate(self, frames: Sequence[PackedFrame]) -> dict[str, Any]:
        """A batch as collate_frames gives it from the unpacked frames, for frames of one layout: their rows
        stacked once into reused memory, each key copied from the stack into its region of one batch allocation;
        other values listed per frame."""
        layout, count = frames[0].layout, len(frames)
        need = count * layout.nbytes
        if self._stack.size < need:
            self._stack = np.empty(need, dtype=np.uint8)
        stack = self._stack[:need].reshape(count, layout.nbytes)
        np.stack([f.row for f in frames], out=stack)
        regions, total = [], 0
        for column in layout.columns:
            regions.append(total)
            total += -(-(count * column.nbytes) // _KEY_ALIGN) * _KEY_ALIGN
        lent = self._lent(total)
        memory = self._memory(total) if lent is None else lent.numpy()
        tensors = []
        for column, start in zip(layout.columns, regions):
            if not column.nbytes:
                tensors.append(torch.empty((count, *column.shape), dtype=column.dtype))
                continue
            region = memory[start : start + count * column.nbytes]
            np.copyto(region.reshape(count, column.nbytes), stack[:, column.offset : column.offset + column.nbytes])
            # in a lent slab: views of its one tensor, which the transport sends as views (no copy either side)
            flat = torch.from_numpy(region) if lent is None else lent[start : start + count * column.nbytes]
            tensors.append(flat.view(column.dtype).reshape(count, *column.shape))
        return _build(layout.tree, tensors.__getitem__, lambda j: collate_frames([f.extras[j] for f in frames]))

    def _lent(self, nbytes: int) -> torch.Tensor | None:
        """A batch's memory in a slab of its own, where this packer lends (a DataLoader worker whose batches go
        through the transport) and a slab is free; else None."""
        if not self.lend or nbytes <= 0:
            return None
        from tfr_torch.data.transport import lending_slabs, slab_tensor

        with lending_slabs():
            return slab_tensor((nbytes,), torch.uint8)

    def _memory(self, nbytes: int) -> np.ndarray:
        """A batch's memory: a kept allocation that nothing else refers to any more (no key of an earlier batch
        alive), else a new one (kept while fewer than _KEEP are)."""
        for kept in self._batches:
            # references: the list, `kept` and getrefcount's argument; any more is a key of a batch still in use
            if kept.size >= nbytes and sys.getrefcount(kept) <= 3:
                return kept
        fresh = np.empty(max(nbytes, 1), dtype=np.uint8)
        if len(self._batches) < _KEEP:
            self._batches.append(fresh)
        return fresh


def pack_frames(frames: Mapping[str, Any], count: int, layouts: dict[Layout, Layout]) -> list[PackedFrame]:
    """The `count` frames of `frames` (gather_frames' values with a leading frame axis: tensors `[count, ...]`,
    lists of `count` items) as PackedFrames; `layouts` interns the layouts (same keys, dtypes and shapes: the same
    object), so a batch checks them by identity."""
    packer = Packer()
    packer.layouts = layouts
    return packer.pack(frames, count)


def pack_episode(steps: Mapping[str, Any], window: Window, index: FrameIndex, packer: Packer,
                 extra: Optional[Mapping[str, torch.Tensor]] = None) -> list[PackedFrame]:
    """The frames of `index` (all its rows) of an episode's `steps`, as pack_frames(gather_frames(steps, window,
    index) | extra, ...) gives them, without the gathered tensors in between: each tensor's steps are taken straight
    into the frames' rows. `extra`: more per-frame values ([N, ...] tensors), after gather_frames' keys."""
    frames = _gather(steps, window, index, slice(None), _defer)
    if extra:
        frames.update(extra)
    return packer.pack(frames, len(index.timestep))


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


def _build(tree: Tree, tensor: Any, extras: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, node in tree:
        if isinstance(node, tuple):
            out[key] = _build(node, tensor, extras)
        elif node >= 0:
            out[key] = tensor(node)
        else:
            out[key] = extras(-node - 1)
    return out


def unpack_frame(frame: PackedFrame) -> dict[str, Any]:
    """The frame as gather_frames gives it: a dict of tensors (each its own) and the other values."""
    columns = frame.layout.columns
    return _build(frame.layout.tree, lambda j: _cut(frame.row, columns[j], ()), frame.extras.__getitem__)


def collate_packed(frames: Sequence[PackedFrame], packer: Optional[Packer] = None) -> dict[str, Any]:
    """A batch as collate_frames gives it from the unpacked frames, for frames of one layout (`packer`: the
    reader's, whose memory it reuses)."""
    return (packer or Packer()).collate(frames)


def same_layout(frames: Sequence[PackedFrame]) -> bool:
    layout = frames[0].layout
    return all(f.layout is layout for f in frames)
