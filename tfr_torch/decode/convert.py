"""From wire arrays (int64, float32, lists of bytes) to the torch dtype a spec asks for."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tfr_torch.decode.dtypes import DType
from tfr_torch.decode.specs import string, wire_kind
from tfr_torch.format.tensor import nest

__all__ = ["NARROW_INTS", "DoesNotFit", "direct_numpy", "to_torch", "wire_default", "nest", "NUMPY_OF_WIRE"]

NUMPY_OF_WIRE = {"float": np.float32, "int64": np.int64}
_DIRECT_DTYPE = {"float": torch.float32, "int64": torch.int64}  # the torch dtypes of wire values as they are
_NUMPY_OF_TORCH = {torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8}
NARROW_INTS = frozenset((*_NUMPY_OF_TORCH, torch.bool))  # the dtypes an int64 value may not fit (DoesNotFit)


class DoesNotFit(ValueError):
    """An integer that does not fit the dtype asked for, at flat position `position` of the converted array."""

    def __init__(self, position: int, value: int, dtype: Any, lo: int, hi: int) -> None:
        self.position = position
        self.detail = f"value {value} does not fit in {dtype} (range {lo} to {hi})"
        super().__init__(f"cannot be converted: {self.detail}")


def direct_numpy(dtype: Any) -> Any:
    """The numpy dtype of the wire values of a feature of `dtype` when they are its result's values as they are
    (float32 from a FloatList, int64 from an Int64List: no conversion), else None."""
    kind = wire_kind(dtype)
    return NUMPY_OF_WIRE.get(kind) if dtype == _DIRECT_DTYPE.get(kind) else None


def to_torch(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Convert a numeric wire array to `dtype`; an integer that does not fit raises DoesNotFit."""
    if dtype == torch.int64 or dtype == torch.float32:
        return torch.from_numpy(np.ascontiguousarray(array))
    if dtype in _NUMPY_OF_TORCH or dtype == torch.bool:
        target: np.dtype[Any] = np.dtype(_NUMPY_OF_TORCH.get(dtype, np.bool_))
        lo, hi = (0, 1) if dtype == torch.bool else (int(np.iinfo(target).min), int(np.iinfo(target).max))
        if array.size:
            bad = np.flatnonzero((array < lo) | (array > hi))
            if bad.size:
                pos = int(bad[0])
                raise DoesNotFit(pos, int(array.flat[pos]), dtype, lo, hi)
        return torch.from_numpy(np.ascontiguousarray(array.astype(target)))
    return torch.from_numpy(np.ascontiguousarray(array)).to(dtype)


def wire_default(default: Any, dtype: DType, count: int, key: str, what: str) -> Any:
    """Flatten and check a default_value: a numpy wire array (or list of bytes) of `count` values."""
    if dtype == string:
        flat: Any = (np.asarray(default, dtype=object).ravel().tolist() if not isinstance(default, (bytes, str))
                     else [default])
        flat = [v.encode("utf-8") if isinstance(v, str) else v for v in flat]
        if any(not isinstance(v, bytes) for v in flat):
            raise TypeError(f"{what} {key!r}: a string default_value holds bytes or str, got {default!r}")
    else:
        if isinstance(default, torch.Tensor):
            default = default.detach().cpu().to(torch.float64 if wire_kind(dtype) == "float" else torch.int64).numpy()
        try:
            with np.errstate(over="ignore"):  # a float beyond float32's range is inf there, as in TensorFlow
                flat = np.asarray(default, dtype=NUMPY_OF_WIRE[wire_kind(dtype)]).ravel()
        except (TypeError, ValueError, OverflowError):
            raise TypeError(f"{what} {key!r}: default_value {default!r} is not a {wire_kind(dtype)} value") from None
        if wire_kind(dtype) == "int64":  # as TensorFlow: 1.5 is no int64 ("Cannot convert 1.5 to ... int64")
            given = np.asarray(default).ravel()
            if given.dtype.kind in "fc" and not np.array_equal(given, flat):
                raise TypeError(f"{what} {key!r}: default_value {default!r} holds values that are not whole numbers, "
                                f"for a {str(dtype).removeprefix('torch.')} feature")
    if len(flat) != count:
        raise ValueError(f"{what} {key!r}: default_value has {len(flat)} values, expected {count} (the number of "
                         "elements of its shape)")
    if isinstance(dtype, torch.dtype):  # not string
        try:
            to_torch(flat, dtype)
        except DoesNotFit as exc:
            raise ValueError(f"{what} {key!r}: default_value {exc.detail}") from None
    return flat
