"""decode_raw: TensorFlow's `tf.io.decode_raw` for torch, for one record's bytes or a batch of them.

Arrays written with `array.tobytes()` (or TF's `tf.io.encode_raw`-style features) come back as a tensor of the
given dtype. The result owns its memory and is writable (no `torch.frombuffer` warning about a non-writable
buffer, no tensor that changes when the bytes object is reused): the bytes are copied once, straight into it.

>>> decode_raw(b"\\x01\\x00\\x02\\x00", torch.int16)
tensor([1, 2], dtype=torch.int16)
>>> decode_raw([b"\\x01\\x02", b"\\x03\\x04"], torch.uint8)
tensor([[1, 2],
        [3, 4]], dtype=torch.uint8)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Union

import numpy as np
import torch

from tfr_torch.errors import DecodeError

__all__ = ["decode_raw"]

BytesLike = Union[bytes, bytearray, memoryview]


def _dtype(dtype: object) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        out = dtype
    elif isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype):
        out = getattr(torch, dtype)
    elif isinstance(dtype, (np.dtype, type)) and not isinstance(dtype, str):
        try:
            out = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
        except (TypeError, ValueError):
            raise TypeError(f"decode_raw: dtype must be a torch dtype (or its name, e.g. 'float32'), got "
                            f"{dtype!r}") from None
    else:
        raise TypeError(f"decode_raw: dtype must be a torch dtype (or its name, e.g. 'float32'), got {dtype!r}")
    if not out.is_complex and not out.is_floating_point and out not in _INTEGERS:
        raise TypeError(f"decode_raw: {out} has no fixed byte layout to decode; expected a numeric or bool dtype")
    return out


_INTEGERS = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
             torch.uint64}


def _as_bytes(value: object, i: int | None) -> memoryview:
    where = "" if i is None else f"item {i}: "
    if isinstance(value, (bytes, bytearray)):
        return memoryview(value)
    if isinstance(value, memoryview):
        return value.cast("B") if value.format != "B" or value.ndim != 1 else value
    if isinstance(value, np.ndarray) and value.dtype.kind == "S" and value.ndim == 0:
        return memoryview(value.tobytes())
    if isinstance(value, np.bytes_):
        return memoryview(bytes(value))
    if isinstance(value, str):
        raise TypeError(f"decode_raw: {where}expected bytes, got str (encode it, or pass the record's bytes)")
    raise TypeError(f"decode_raw: {where}expected bytes, got {type(value).__name__}")


def decode_raw(data: BytesLike | Sequence[BytesLike] | np.ndarray, dtype: torch.dtype | str,
               shape: Sequence[int] | None = None, *, little_endian: bool = True,
               fixed_length: int | None = None) -> torch.Tensor:
    """Reinterpret raw bytes as a tensor of `dtype`, as `tf.io.decode_raw` does.

    - `data`: one record's bytes (result shape `[n]`, or `shape`), or a list of them, e.g. a VarLen/FixedLen
      `tfr_torch.string` column of a batch (result `[batch, n]`, or `[batch, *shape]`). Every item of a batch
      must decode to the same number of values unless `fixed_length` is given.
    - `shape`: the shape of one record's values (one entry may be -1); checked against the byte count.
    - `little_endian`: the byte order of the data (TensorFlow's default, and numpy's `tobytes()` on x86/ARM).
    - `fixed_length`: as TF: each item is cut or zero-padded to this many bytes first.

    Bad data raises DecodeError naming the item and both sizes; bad arguments raise TypeError/ValueError.
    """
    out_type = _dtype(dtype)
    size = torch.empty(0, dtype=out_type).element_size()
    if fixed_length is not None and (not isinstance(fixed_length, int) or isinstance(fixed_length, bool)
                                     or fixed_length < 0 or fixed_length % size):
        raise ValueError(f"decode_raw: fixed_length must be a non-negative multiple of {size} (the size of "
                         f"{out_type}), got {fixed_length!r}")
    single = isinstance(data, (bytes, bytearray, memoryview, np.bytes_)) or (
        isinstance(data, np.ndarray) and data.ndim == 0)
    if single:
        items = [_as_bytes(data, None)]
    elif isinstance(data, (str,)) or not isinstance(data, (Sequence, np.ndarray)):
        items = [_as_bytes(data, None)]  # raises the TypeError naming the type
    else:
        items = [_as_bytes(v, i) for i, v in enumerate(data)]
    lengths = [fixed_length if fixed_length is not None else len(v) for v in items]
    for i, n in enumerate(lengths):
        if n % size:
            where = "" if single else f"item {i}: "
            raise DecodeError(f"decode_raw: {where}{n} bytes is not a multiple of {size} (the size of {out_type})")
    if not single and len(set(lengths)) > 1:
        first = lengths[0]
        other = next(i for i, n in enumerate(lengths) if n != first)
        raise DecodeError(f"decode_raw: the items of a batch must have the same length to make one tensor: item 0 "
                          f"has {first} bytes, item {other} has {lengths[other]} (pass fixed_length= to cut or pad "
                          "them, or decode them one by one)")
    width = lengths[0] if lengths else 0
    count = width // size
    values_shape = _values_shape(shape, count, width, out_type)
    out = torch.empty((len(items), count), dtype=out_type)
    raw = out.view(torch.uint8).numpy().reshape(len(items), width) if width else None
    if raw is not None:
        for i, item in enumerate(items):
            take = min(len(item), width)
            raw[i, :take] = np.frombuffer(item, dtype=np.uint8, count=take)
            if take < width:
                raw[i, take:] = 0
        # TensorFlow swaps each scalar: a complex value's real and imaginary parts are swapped one by one
        unit = size // 2 if out_type.is_complex else size
        if unit > 1 and little_endian != (sys.byteorder == "little"):
            swapped = raw.reshape(-1, unit)
            swapped[:] = swapped[:, ::-1].copy()
    out = out.reshape((len(items), *values_shape))
    return out[0] if single else out


def _values_shape(shape: Sequence[int] | None, count: int, width: int, dtype: torch.dtype) -> tuple[int, ...]:
    if shape is None:
        return (count,)
    try:
        dims = [int(d) for d in shape]
    except (TypeError, ValueError):
        raise TypeError(f"decode_raw: shape must be a sequence of ints, got {shape!r}") from None
    if sum(d == -1 for d in dims) > 1 or any(d < -1 for d in dims):
        raise ValueError(f"decode_raw: shape may hold one -1 and otherwise sizes >= 0, got {tuple(dims)}")
    known = int(np.prod([d for d in dims if d != -1])) if dims else 1
    if -1 in dims:
        if known == 0 or count % known:
            raise DecodeError(f"decode_raw: {width} bytes ({count} {dtype} values) cannot be viewed as shape "
                              f"{tuple(dims)}")
        dims[dims.index(-1)] = count // known
    elif known != count:
        raise DecodeError(f"decode_raw: {width} bytes ({count} {dtype} values) cannot be viewed as shape "
                          f"{tuple(dims)}: it needs {known} values")
    return tuple(dims)
