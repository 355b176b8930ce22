"""Assertions shared by the decode layer's tests (test_parse*.py): tensors compared bit for bit, sparse rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def float32_bits(values: Any) -> list[int]:
    return np.asarray(values, dtype=np.float32).reshape(-1).view(np.uint32).tolist()


_INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
             torch.float64: torch.int64}


def assert_same_tensor(actual: Any, expected: torch.Tensor) -> None:
    """Same dtype, shape and bits (floats compared by bit pattern, so NaN and -0.0 are exact)."""
    assert isinstance(actual, torch.Tensor), type(actual)
    assert actual.dtype == expected.dtype
    assert tuple(actual.shape) == tuple(expected.shape)
    view = _INT_VIEW.get(expected.dtype)
    if view is not None:
        assert torch.equal(actual.contiguous().view(view), expected.contiguous().view(view)), (actual, expected)
    else:
        assert torch.equal(actual, expected), (actual, expected)


def sparse_rows(sparse: torch.Tensor, batch: int) -> list[torch.Tensor]:
    """The values of each example of a 2-D VarLenFeature result, checking their positions run 0..n-1."""
    sparse = sparse.coalesce()
    indices, values = sparse.indices(), sparse.values()
    rows = []
    for i in range(batch):
        mine = indices[0] == i
        assert indices[1][mine].tolist() == list(range(int(mine.sum())))
        rows.append(values[mine])
    return rows
