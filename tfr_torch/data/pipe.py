"""Batches that DataLoader workers send through their pipes, torch's usual way (`shared_memory=False`, no shared
memory where they run, or the values of a batch that the shared-memory transport, data/transport.py, leaves in the
pickle): each sparse COO tensor is sent as its indices and values and rebuilt in the main process without torch's
"Sparse invariant checks are implicitly disabled ... SEGFAULT" warning, which torch's own rebuild gives at every
batch (the tensor was made by the worker's decoder: nothing to check)."""

from __future__ import annotations

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


class _SparseCOO:
    """A sparse COO tensor on its way through the pickle: its indices and values go as torch sends dense tensors,
    and it is rebuilt without torch's warning (see the module doc)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        t = self.tensor
        return _rebuild_sparse, (t._indices(), t._values(), tuple(t.shape), t.is_coalesced())


def _rebuild_sparse(indices: torch.Tensor, values: torch.Tensor, size: tuple[int, ...], coalesced: bool
                    ) -> torch.Tensor:
    return torch.sparse_coo_tensor(indices, values, size, is_coalesced=coalesced, check_invariants=False)


def _portable(value: Any) -> Any:
    """`value`, or a sparse COO tensor wrapped to travel without torch's warning (see _SparseCOO)."""
    if (type(value) is torch.Tensor and value.layout == torch.sparse_coo and value.device.type == "cpu"
            and not value.requires_grad):
        return _SparseCOO(value)
    return value


def _portable_tree(value: Any) -> Any:
    """`value` with each sparse COO tensor in it, as deep as its dicts go, wrapped by _portable."""
    if type(value) is dict or type(value) is PipeBatch:
        return {key: _portable_tree(item) for key, item in value.items()}
    return _portable(value)


def _reduce_pipe(batch: PipeBatch) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """What ForkingPickler calls for a PipeBatch: the plain dict, its sparse tensors as _SparseCOO."""
    return _plain, (_portable_tree(batch),)


def _plain(item: dict[Any, Any]) -> dict[Any, Any]:
    return item


ForkingPickler.register(PipeBatch, _reduce_pipe)
