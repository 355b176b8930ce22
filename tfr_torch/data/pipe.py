"""Batches that DataLoader workers send through their pipes, torch's usual way (`shared_memory=False`, no shared
memory where they run, or the values of a batch that the shared-memory transport, data/transport.py, leaves in the
pickle). Each dense CPU tensor is moved to torch's shared memory (/dev/shm) before the pickle rather than in it,
and sent as its bytes where that fails (`_Inline`): torch's own move happens in the worker's queue feeder thread,
which prints the error of a full /dev/shm and drops the batch. Each sparse COO tensor is sent as its indices and
values and rebuilt in the main process without torch's "Sparse invariant checks are implicitly disabled ...
SEGFAULT" warning, which torch's own rebuild gives at every batch (the tensor was made by the worker's decoder:
nothing to check)."""

from __future__ import annotations

import pickle
import warnings
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable

import torch

__all__ = ["PipeBatch", "for_the_pipe"]


class PipeBatch(dict[Any, Any]):
    """A decoded batch (a plain dict) that a DataLoader worker sends through the pipe, torch's usual way
    (`shared_memory=False`, or no shared memory where it runs): it arrives as the plain dict, its sparse COO tensors
    rebuilt without torch's warning (see the module doc). A dict subclass, so that collate functions (which copy a
    mapping's type) keep it."""

    __slots__ = ()


def for_the_pipe(item: Any) -> Any:
    """In a DataLoader worker that sends its items through the pipe: a dict as a PipeBatch (see there); anything
    else as it is."""
    return PipeBatch(item) if type(item) is dict else item


def _dense_cpu_tensor(value: Any) -> bool:
    """Whether `value` is a plain dense CPU tensor: one whose storage can be shared (or written into a slab)."""
    return (type(value) is torch.Tensor and value.layout == torch.strided and not value.is_nested
            and value.device.type == "cpu" and not value.requires_grad and not value.is_quantized
            and not value.is_conj() and not value.is_neg())


class _Inline:
    """A dense CPU tensor of a batch that goes in the pickle: torch's way (its storage moved to torch's shared
    memory, /dev/shm, and sent as a descriptor), moved here rather than later in the pickler, where torch's error for
    a full /dev/shm (64 MB in a default Docker container) is raised in the worker's queue feeder thread, which prints
    it and drops the batch (the DataLoader then ends the epoch without it, or waits for it forever). Where torch's
    shared memory cannot be had, the tensor goes in the pickle itself, as its bytes (slower, with one warning per
    process)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        tensor = self.tensor
        if not tensor.is_shared() and _SHM_FAILED[0] is None:
            try:
                tensor.share_memory_()
            except (RuntimeError, OSError) as exc:  # torch: "unable to allocate shared memory(shm) ... (28)"
                _SHM_FAILED[0] = str(exc)
                warnings.warn(f"tfr_torch: torch's shared memory (/dev/shm) cannot hold a batch's tensors ({exc}); "
                              "they go through the DataLoader's pipe as bytes instead (slower for large batches)",
                              RuntimeWarning, stacklevel=2)
        if tensor.is_shared():
            return _plain, (tensor,)  # torch's reduction: the storage's descriptor
        return pickle.loads, (pickle.dumps(tensor),)  # plain pickle: the tensor's bytes, in the message


_SHM_FAILED: list[str | None] = [None]  # why torch's shared memory failed in this process (then: tensors as bytes)


class _SparseCOO:
    """A sparse COO tensor on its way through the pickle: its indices and values go as torch sends dense tensors,
    and it is rebuilt without torch's warning (see the module doc)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        t = self.tensor
        return _rebuild_sparse, (_portable(t._indices()), _portable(t._values()), tuple(t.shape), t.is_coalesced())


def _rebuild_sparse(indices: torch.Tensor, values: torch.Tensor, size: tuple[int, ...], coalesced: bool
                    ) -> torch.Tensor:
    return torch.sparse_coo_tensor(indices, values, size, is_coalesced=coalesced, check_invariants=False)


def _portable(value: Any) -> Any:
    """`value` as it goes in the pickle: a dense CPU tensor as an _Inline, a sparse COO tensor as a _SparseCOO,
    anything else as it is."""
    if type(value) is not torch.Tensor:
        return value
    if _dense_cpu_tensor(value):
        return _Inline(value)
    if value.layout == torch.sparse_coo and value.device.type == "cpu" and not value.requires_grad:
        return _SparseCOO(value)
    return value


def _portable_tree(value: Any) -> Any:
    """`value` with each tensor in it, as deep as its dicts and lists go, wrapped by _portable."""
    cls = type(value)
    if cls is dict or cls is PipeBatch:
        return {key: _portable_tree(item) for key, item in value.items()}
    if cls is list:
        return [_portable_tree(item) for item in value]
    return _portable(value)


def _reduce_pipe(batch: PipeBatch) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """What ForkingPickler calls for a PipeBatch: the plain dict, its tensors wrapped by _portable."""
    return _plain, (_portable_tree(batch),)


def _plain(item: Any) -> Any:
    return item


ForkingPickler.register(PipeBatch, _reduce_pipe)
