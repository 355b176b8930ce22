"""TensorProto (tf.io.serialize_tensor / tf.io.parse_tensor) to and from numpy, without torch.

Numeric tensors are stored as numpy arrays; bfloat16, which numpy lacks, travels as its uint16 bit patterns
with `dtype == DT_BFLOAT16`. String tensors are nested lists of bytes. The torch conversion lives in
`tfr_torch.tensors`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from google.protobuf.message import DecodeError as _ProtoDecodeError

from tfr_torch.errors import DecodeError
from tfr_torch.format._proto import tensor_pb2, types_pb2
from tfr_torch.format.wire import encode_varint, length_delimited

__all__ = ["DataType", "DTYPES", "TensorData", "encode_tensor_proto", "decode_tensor_proto", "dtype_code_of", "nest",
           "MAX_TENSOR_BYTES"]

# parse_tensor's default limit on the size of a decoded tensor (bytes); see `decode_tensor_proto`.
MAX_TENSOR_BYTES = 256 << 20
# numpy (and so torch.from_numpy) holds at most this many dimensions; TensorFlow allows up to 254.
MAX_DIMS = 64
_INT64_MAX = 2**63 - 1
_LIST_BYTES = 64  # the memory one nested Python list costs, for the size estimate of string tensors


class DataType:
    """TensorFlow's DataType codes (tensorflow/core/framework/types.proto)."""

    FLOAT, DOUBLE, INT32, UINT8, INT16, INT8, STRING, COMPLEX64, INT64, BOOL = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
    BFLOAT16, UINT16, COMPLEX128, HALF, UINT32, UINT64 = 14, 17, 18, 19, 22, 23


# code -> (TensorFlow's name, numpy storage dtype, *_val field); bfloat16 is stored as uint16 bits.
DTYPES: dict[int, tuple[str, np.dtype | None, str]] = {
    DataType.FLOAT: ("float32", np.dtype("<f4"), "float_val"),
    DataType.DOUBLE: ("float64", np.dtype("<f8"), "double_val"),
    DataType.INT32: ("int32", np.dtype("<i4"), "int_val"),
    DataType.UINT8: ("uint8", np.dtype("u1"), "int_val"),
    DataType.INT16: ("int16", np.dtype("<i2"), "int_val"),
    DataType.INT8: ("int8", np.dtype("i1"), "int_val"),
    DataType.STRING: ("string", None, "string_val"),
    DataType.COMPLEX64: ("complex64", np.dtype("<c8"), "scomplex_val"),
    DataType.INT64: ("int64", np.dtype("<i8"), "int64_val"),
    DataType.BOOL: ("bool", np.dtype("?"), "bool_val"),
    DataType.BFLOAT16: ("bfloat16", np.dtype("<u2"), "half_val"),
    DataType.UINT16: ("uint16", np.dtype("<u2"), "int_val"),
    DataType.COMPLEX128: ("complex128", np.dtype("<c16"), "dcomplex_val"),
    DataType.HALF: ("float16", np.dtype("<f2"), "half_val"),
    DataType.UINT32: ("uint32", np.dtype("<u4"), "uint32_val"),
    DataType.UINT64: ("uint64", np.dtype("<u8"), "uint64_val"),
}
_CODE_OF_NUMPY = {np.dtype(storage).newbyteorder("="): code for code, (_, storage, _) in DTYPES.items()
                  if storage is not None and code != DataType.BFLOAT16}


class TensorData(NamedTuple):
    """A decoded TensorProto: DataType code, shape, and values (a numpy array of that shape, or nested lists
    of bytes for strings; bfloat16 as uint16 bits)."""

    dtype: int
    shape: tuple[int, ...]
    values: Any


def dtype_code_of(array: np.ndarray) -> int:
    """The DataType code for a numpy array (strings and bytes arrays are DT_STRING)."""
    if array.dtype.kind in "SUO":
        return DataType.STRING
    try:
        return _CODE_OF_NUMPY[array.dtype.newbyteorder("=")]
    except KeyError:
        raise TypeError(f"cannot serialize a tensor of dtype {array.dtype}: TensorFlow has no such dtype") from None


def encode_tensor_proto(array: np.ndarray | Any, dtype: int | None = None) -> bytes:
    """Serialize an array as TensorFlow's serialize_tensor does: `dtype`, `tensor_shape`, then `tensor_content`
    (raw little-endian bytes, absent when empty) or, for strings, one `string_val` per element.

    `dtype` overrides the code taken from the array (used for bfloat16 passed as uint16 bits).
    """
    if not isinstance(array, np.ndarray):
        array = np.asarray(array)
    code = dtype_code_of(array) if dtype is None else dtype
    if code not in DTYPES:
        raise ValueError(f"unknown DataType code {code}")
    shape = b"".join(length_delimited(0x12, b"\x08" + encode_varint(d) if d else b"") for d in array.shape)
    out = [b"\x08", encode_varint(code), length_delimited(0x12, shape)]
    if code == DataType.STRING:
        for item in array.ravel().tolist():
            if isinstance(item, str):
                item = item.encode("utf-8")
            elif not isinstance(item, (bytes, bytearray)):
                raise TypeError(f"a string tensor holds bytes or str, found {type(item).__name__}")
            out.append(length_delimited(0x42, bytes(item)))
    elif array.size:
        storage = DTYPES[code][1]
        assert storage is not None  # only DT_STRING has no numeric storage, and it is encoded above
        if array.dtype.itemsize != storage.itemsize:
            raise TypeError(f"array of dtype {array.dtype} cannot carry DataType {DTYPES[code][0]}")
        content = np.ascontiguousarray(array).astype(storage.newbyteorder("<"), copy=False).tobytes()
        out.append(length_delimited(0x22, content))
    return b"".join(out)


def decode_tensor_proto(data: bytes, *, what: str = "TensorProto",
                        max_bytes: int | None = MAX_TENSOR_BYTES) -> TensorData:
    """Parse a serialized TensorProto (tensor_content or any *_val form) as tf.io.parse_tensor reads it.

    *_val lists shorter than the shape are completed with their last value (one value broadcasts to the whole
    shape); no values at all means zeros (empty strings). tensor_content, when present, wins over *_val; for
    strings it is TensorFlow's C++ form (the varint32 lengths of all strings, then the strings). A tensor with no
    elements ignores both, as TensorFlow does. Raises DecodeError for anything malformed.

    `max_bytes` bounds what a payload may expand to: a tensor whose decoded size (for string tensors, also the
    Python lists and references that hold them) exceeds both `max_bytes` and the payload's own size raises
    DecodeError before anything is allocated. A tensor stored in full (tensor_content, as serialize_tensor
    writes it) decodes to at most its payload's size and is never refused; a few bytes that declare a huge
    shape and one *_val to broadcast are. `None` removes the limit (TensorFlow has none).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected a serialized TensorProto as bytes, got {type(data).__name__}")
    if max_bytes is not None and (not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0):
        raise ValueError(f"max_bytes must be a non-negative int or None, got {max_bytes!r}")
    proto, shape = _parse(data, what)
    code = proto.dtype
    name, storage, _ = DTYPES[code]
    count = math.prod(shape)
    itemsize = 8 if storage is None else storage.itemsize
    nbytes = count * itemsize
    if proto.tensor_content and count and code != DataType.STRING:  # stored in full: its size is the payload's
        return _from_content(proto.tensor_content, code, shape, nbytes, what)
    # (a tensor with no elements ignores its tensor_content, whatever its size, as TensorFlow's Tensor::FromProto)
    if math.prod(d for d in shape if d) * itemsize > _INT64_MAX:
        raise DecodeError(f"{what} has shape {list(shape)}, too large for an array of {name} (even with no elements, "
                          "numpy and torch need the product of its dimensions to fit in 63 bits)")

    if code == DataType.STRING:
        lists = _nested_lists(shape)
        _check_size(what, shape, nbytes + lists * _LIST_BYTES, len(data), max_bytes)
        if proto.tensor_content and count:  # TensorFlow's C++ AsProtoTensorContent form; it wins over string_val
            values = _strings_from_content(proto.tensor_content, count, what)
            return TensorData(code, shape, nest(values, shape))
        values = list(proto.string_val)
        return TensorData(code, shape, nest(_complete(values, count, b""), shape))

    _check_size(what, shape, nbytes, len(data), max_bytes)
    return TensorData(code, shape, _from_values(proto, code, shape, count, what))


def _parse(data: bytes | bytearray | memoryview, what: str) -> tuple[Any, tuple[int, ...]]:
    """The TensorProto message and its shape, with its dtype and shape checked."""
    try:
        proto = tensor_pb2.TensorProto.FromString(bytes(data))
    except _ProtoDecodeError:  # (protobuf's own text differs between its releases: "Error parsing message" ...)
        raise DecodeError(f"cannot parse {len(data)} bytes as a {what}: its protobuf wire format is corrupt") from None
    code = proto.dtype
    if code not in DTYPES:
        name = types_pb2.DataType.Name(code) if code in types_pb2.DataType.values() else str(code)
        raise DecodeError(f"{what} has dtype {name}, which tfr_torch cannot read (expected one of "
                          f"{', '.join(n for n, _, _ in DTYPES.values())})")
    if proto.tensor_shape.unknown_rank:
        raise DecodeError(f"{what} has an unknown rank: a serialized tensor must have a known shape")
    shape = tuple(d.size for d in proto.tensor_shape.dim)
    if len(shape) > MAX_DIMS:
        raise DecodeError(f"{what} has {len(shape)} dimensions: numpy and torch tensors hold at most {MAX_DIMS}")
    if shape and min(shape) < 0:
        raise DecodeError(f"{what} has a negative dimension in its shape {list(shape)}")
    return proto, shape


def _from_content(content: bytes, code: int, shape: tuple[int, ...], nbytes: int, what: str) -> TensorData:
    """A numeric tensor stored in full in tensor_content (what serialize_tensor writes)."""
    name, storage, _ = DTYPES[code]
    assert storage is not None  # only DT_STRING has no numeric storage, and it never comes here
    if len(content) != nbytes:
        raise DecodeError(f"{what} of dtype {name} and shape {list(shape)} needs {nbytes} bytes of "
                          f"tensor_content, found {len(content)}")
    array = np.frombuffer(content, dtype=storage.newbyteorder("<")).astype(storage.newbyteorder("="))
    if code == DataType.BOOL:  # a byte other than 0 and 1 is no bool (TensorFlow refuses it too)
        raw = array.view(np.uint8)
        bad = np.flatnonzero(raw > 1)
        if bad.size:
            raise DecodeError(f"{what} of dtype bool holds byte {int(raw[bad[0]])} at element {int(bad[0])} of "
                              f"tensor_content ({bad.size} such): expected 0 or 1")
    return TensorData(code, shape, array.reshape(shape))


def _strings_from_content(content: bytes, count: int, what: str) -> list[bytes]:
    """A string tensor's tensor_content as TensorFlow's DecodeStringList reads it: `count` varint32 lengths, then
    the strings back to back, filling the rest exactly. Each length takes a byte at least, so a shape larger
    than the content is refused before any list is built."""
    if count > len(content):
        raise DecodeError(f"{what} of dtype string has {count} elements but only {len(content)} bytes of "
                          f"tensor_content: expected {count} varint lengths, then the strings")
    lengths: list[int] = []
    pos = 0
    for i in range(count):
        length = shift = 0
        while True:
            if pos >= len(content) or shift > 28:
                raise DecodeError(f"{what} of dtype string has a corrupt tensor_content: the length of string {i} "
                                  f"(at byte {pos}) is not a varint32")
            byte = content[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        lengths.append(length & 0xFFFFFFFF)
    if sum(lengths) != len(content) - pos:
        raise DecodeError(f"{what} of dtype string has a corrupt tensor_content: its {count} lengths add up to "
                          f"{sum(lengths)} bytes, but {len(content) - pos} bytes follow them")
    values = []
    for length in lengths:
        values.append(bytes(content[pos : pos + length]))
        pos += length
    return values


def _from_values(proto: Any, code: int, shape: tuple[int, ...], count: int, what: str) -> np.ndarray:
    """A numeric tensor from its *_val list: completed with the last value (zeros when there is none)."""
    name, storage, val_field = DTYPES[code]
    raw = list(getattr(proto, val_field))
    if code in (DataType.COMPLEX64, DataType.COMPLEX128):
        if len(raw) % 2:
            raise DecodeError(f"{what} of dtype {name} has an odd number ({len(raw)}) of {val_field} entries: "
                              "expected (real, imaginary) pairs")
        raw = [complex(raw[i], raw[i + 1]) for i in range(0, len(raw), 2)]
    if len(raw) > count:
        raw = raw[:count]
    if code in (DataType.HALF, DataType.BFLOAT16):
        array = np.array([v & 0xFFFF for v in raw], dtype=np.uint16)
        array = array.view(np.float16) if code == DataType.HALF else array
    elif code in (DataType.INT8, DataType.INT16, DataType.UINT8, DataType.UINT16):
        array = np.array(raw, dtype=np.int64).astype(storage)  # int_val holds them widened; TF truncates back
    else:
        array = np.array(raw, dtype=storage)
    out = np.zeros(shape, dtype=array.dtype)  # built from the shape: a zero-size tensor costs nothing
    if len(array):
        flat = out.reshape(-1)
        flat[: len(array)] = array
        flat[len(array) :] = array[-1]
    return out


def _nested_lists(shape: tuple[int, ...]) -> int:
    """How many Python lists `nest` builds for `shape` (1 + d0 + d0*d1 + ... up to the last dimension)."""
    total, level = 0, 1
    for d in shape[:-1]:
        total += level
        level *= d
    return total + (level if shape else 0)


def _check_size(what: str, shape: tuple[int, ...], size: int, payload: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max(max_bytes, payload):
        raise DecodeError(f"{what} of {payload} bytes declares shape {list(shape)}, which decodes to about {size} "
                          f"bytes: more than max_bytes={max_bytes} (pass a larger max_bytes, or None, to parse_tensor "
                          "if the data is trusted)")


def _complete(values: list[Any], count: int, zero: Any) -> list[Any]:
    if len(values) >= count:
        return values[:count]
    if not values:
        return [zero] * count
    return values + [values[-1]] * (count - len(values))


def nest(flat: list[Any], shape: Sequence[int]) -> Any:
    """Nest a flat list into lists shaped like `shape` (a scalar shape gives the single value). Built from the
    innermost dimension out, so the work is the number of lists made: a zero-size shape such as [2**40, 0] is
    never walked dimension by dimension beyond its first zero (callers bound the lists with `_nested_lists`)."""
    if not shape:
        return flat[0]
    if 0 in shape:
        zero = shape.index(0)
        if zero == 0:
            return []
        level: list[Any] = [[] for _ in range(math.prod(shape[:zero]))]
        outer = shape[1:zero]
    else:
        level = list(flat)
        outer = shape[1:]
    for d in reversed(outer):
        level = [level[i : i + d] for i in range(0, len(level), d)]
    return level
