"""From wire arrays (int64, float32, lists of bytes) to the torch dtype a spec asks for."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfr_torch.decode.specs import DType, string, wire_kind
from tfr_torch.errors import DecodeError

__all__ = ["to_torch", "wire_default", "nest", "NUMPY_OF_WIRE"]

NUMPY_OF_WIRE = {"float": np.float32, "int64": np.int64}
_NUMPY_OF_TORCH = {torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8}


def to_torch(array: np.ndarray, dtype: DType, key: str, where: Any = None) -> torch.Tensor:
    """Convert a wire array to `dtype`; integers that do not fit raise DecodeError naming the key.

    `where(position)` may give the example label for the flat position of an offending value."""
    if dtype == torch.int64 or dtype == torch.float32:
        return torch.from_numpy(np.ascontiguousarray(array))
    if dtype in _NUMPY_OF_TORCH or dtype == torch.bool:
        target = np.dtype(_NUMPY_OF_TORCH.get(dtype, np.bool_))
        lo, hi = (0, 1) if dtype == torch.bool else (np.iinfo(target).min, np.iinfo(target).max)
        if array.size:
            bad = np.flatnonzero((array < lo) | (array > hi))
            if bad.size:
                pos = int(bad[0])
                detail = f" in {where(pos)}" if where is not None else ""
                raise DecodeError(f"feature {key!r}{detail}: value {int(array.flat[pos])} does not fit in {dtype} "
                                  f"(range {lo} to {hi})")
        return torch.from_numpy(np.ascontiguousarray(array.astype(target)))
    return torch.from_numpy(np.ascontiguousarray(array)).to(dtype)


def wire_default(default: Any, dtype: DType, count: int, key: str, what: str) -> Any:
    """Flatten and check a default_value: a numpy wire array (or list of bytes) of `count` values."""
    if dtype == string:
        flat = np.asarray(default, dtype=object).ravel().tolist() if not isinstance(default, (bytes, str)) else [default]
        flat = [v.encode("utf-8") if isinstance(v, str) else v for v in flat]
        if any(not isinstance(v, bytes) for v in flat):
            raise TypeError(f"{what} {key!r}: a string default_value holds bytes or str, got {default!r}")
    else:
        if isinstance(default, torch.Tensor):
            default = default.detach().cpu().to(torch.float64 if wire_kind(dtype) == "float" else torch.int64).numpy()
        try:
            flat = np.asarray(default, dtype=NUMPY_OF_WIRE[wire_kind(dtype)]).ravel()
        except (TypeError, ValueError, OverflowError):
            raise TypeError(f"{what} {key!r}: default_value {default!r} is not a {wire_kind(dtype)} value") from None
    if len(flat) != count:
        raise ValueError(f"{what} {key!r}: default_value has {len(flat)} values, expected {count} (the number of "
                         "elements of its shape)")
    return flat


def nest(flat: list, shape: tuple) -> Any:
    """Nest a flat list of bytes into lists shaped like `shape` (a scalar shape gives the single value)."""
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return list(flat)
    step = len(flat) // shape[0] if shape[0] else 0
    return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
