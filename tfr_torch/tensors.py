"""serialize_tensor / parse_tensor for torch tensors (TensorFlow's tf.io.serialize_tensor / tf.io.parse_tensor)."""

from __future__ import annotations

from typing import Any, Union

import numpy as np
import torch

from tfr_torch.decode.dtypes import ALIASES, TORCH_OF_NAME, string
from tfr_torch.errors import DecodeError
from tfr_torch.format.tensor import DTYPES, MAX_TENSOR_BYTES, DataType, decode_tensor_proto, encode_tensor_proto

__all__ = ["serialize_tensor", "parse_tensor"]

# DataType codes <-> torch dtypes and names, from the one table of names (tfr_torch.decode.dtypes)
_TORCH_OF_CODE: dict[int, torch.dtype] = {code: dtype for code, (name, _, _) in DTYPES.items()
                                          for dtype in [TORCH_OF_NAME[name]] if isinstance(dtype, torch.dtype)}
_CODE_OF_TORCH = {v: k for k, v in _TORCH_OF_CODE.items()}
_CODE_OF_NAME = {name: code for code, (name, _, _) in DTYPES.items()}
_CODE_OF_NAME.update({alias: _CODE_OF_NAME[name] for alias, name in ALIASES.items()})


def serialize_tensor(x: torch.Tensor | np.ndarray) -> bytes:
    """Serialize a tensor as TensorFlow's `tf.io.serialize_tensor` does, byte for byte.

    Accepts a torch.Tensor or numpy array of any dtype both frameworks have (float16/32/64, bfloat16,
    int8/16/32/64, uint8/16/32/64, bool, complex64/128), or a numpy array of bytes/str (a string tensor).

    >>> parse_tensor(serialize_tensor(torch.arange(6).reshape(2, 3)))
    tensor([[0, 1, 2],
            [3, 4, 5]])
    """
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise TypeError(f"cannot serialize a tensor with layout {x.layout}: tf.io.serialize_tensor takes dense "
                            "tensors (call .to_dense() first)")
        # conj() / neg views hold their values lazily (a bit on the tensor): resolve them, as .numpy() requires
        x = x.detach().cpu().resolve_conj().resolve_neg().contiguous()
        code = _CODE_OF_TORCH.get(x.dtype)
        if code is None:
            raise TypeError(f"cannot serialize a tensor of dtype {x.dtype}: TensorFlow has no such dtype")
        if code == DataType.BFLOAT16:
            return encode_tensor_proto(x.view(torch.int16).numpy().view(np.uint16), DataType.BFLOAT16)
        return encode_tensor_proto(x.numpy(), code)
    if isinstance(x, (np.ndarray, np.generic)):
        return encode_tensor_proto(np.asarray(x))
    raise TypeError(f"serialize_tensor expects a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def _dtype_code(dtype: Any) -> int:
    if dtype is float:
        # numpy and torch (dtype=float) read float as float64, TensorFlow's as_dtype (code ported from
        # tf.io.parse_tensor) as float32: no single meaning
        raise ValueError("dtype float is ambiguous (float64 to numpy and torch, float32 to TensorFlow): name the "
                         "width, such as torch.float32 or 'float64'")
    if isinstance(dtype, torch.dtype):
        if dtype not in _CODE_OF_TORCH:
            raise ValueError(f"dtype {dtype} has no TensorFlow equivalent")
        return _CODE_OF_TORCH[dtype]
    if isinstance(dtype, str) and dtype.removeprefix("tf.") in _CODE_OF_NAME:
        return _CODE_OF_NAME[dtype.removeprefix("tf.")]
    if dtype is bytes or dtype is str or dtype is string:
        return DataType.STRING
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        np_dtype = None
    if np_dtype is not None and np_dtype.kind not in "SUO" and np_dtype.name in _CODE_OF_NAME:
        return _CODE_OF_NAME[np_dtype.name]
    raise ValueError(f"unknown dtype {dtype!r}: expected a torch dtype, a TensorFlow dtype name such as 'float32', "
                     "or tfr_torch.string")


def parse_tensor(data: bytes, dtype: Any = None, *,
                 max_bytes: int | None = MAX_TENSOR_BYTES) -> Union[torch.Tensor, list[Any], bytes]:
    """Parse a serialized TensorProto (from `tf.io.serialize_tensor` or `serialize_tensor`) into a torch.Tensor.

    `dtype` (a torch dtype, a name such as "float32", or tfr_torch.string), when given, must match the stored
    dtype, as in TensorFlow's `parse_tensor(serialized, out_type)`. String tensors come back as nested lists of
    bytes shaped like the tensor (a scalar as bytes). The `*_val` forms are read as TensorFlow reads them.

    `max_bytes` (default 256 MiB) bounds what a payload may expand to: a few bytes can declare a huge shape and
    one `*_val` value to broadcast over it (TensorFlow would allocate it all). A tensor larger than both
    `max_bytes` and its own payload raises DecodeError before anything is allocated; tensors stored in full
    (what serialize_tensor writes) are never refused. `max_bytes=None` removes the limit.

    >>> parse_tensor(serialize_tensor(np.array([1.5, -2.0], dtype=np.float32)), dtype=torch.float32)
    tensor([ 1.5000, -2.0000])
    """
    decoded = decode_tensor_proto(data, max_bytes=max_bytes)
    if dtype is not None:
        want = _dtype_code(dtype)
        if want != decoded.dtype:
            raise DecodeError(f"type mismatch: the serialized tensor is {DTYPES[decoded.dtype][0]}, "
                              f"but dtype {DTYPES[want][0]} was asked for")
    if decoded.dtype == DataType.STRING:
        strings: list[Any] | bytes = decoded.values  # nested lists of bytes (a scalar: bytes)
        return strings
    values = decoded.values
    if values.size == 0:  # numpy gives an empty array zero strides; torch.from_numpy would keep them
        return torch.empty(values.shape, dtype=_TORCH_OF_CODE[decoded.dtype])
    if decoded.dtype == DataType.BFLOAT16:
        return torch.from_numpy(values.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(values)
