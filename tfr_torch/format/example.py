"""tf.train.Example and tf.train.SequenceExample: encoding Python/numpy/torch values and decoding to numpy.

Encoding rules (the feature kind follows the value's type):
- bool, int, numpy bool/int*/uint* -> int64_list (a uint64 above 2**63 - 1 is an error, never a wrap);
- float, numpy float16/32/64, bfloat16 -> float_list (stored as float32, as TensorFlow does);
- bytes, str (UTF-8) -> bytes_list.
Arrays and tensors of any shape are flattened row-major (0-d ones in a list count as the scalars they hold). Torch
tensors are accepted without this module importing torch. A tf.train.Feature (tfr_torch's or TensorFlow's own class)
is copied as is. Anything else raises TypeError naming the key and the type; a value no feature can hold (an int
beyond int64, a str with no UTF-8 form) raises ValueError naming the key.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, Union

import numpy as np
from tfr_torch.format._proto import example_pb2, feature_pb2
from tfr_torch.format.strict import decode_feature, example_features, sequence_example_features
from tfr_torch.format.wire import length_delimited

__all__ = [
    "ByteStrings",
    "FeatureValue",
    "encode_example",
    "decode_example",
    "encode_sequence_example",
    "decode_sequence_example",
    "to_feature",
    "from_feature",
]



class ByteStrings(list[bytes]):
    """The values of a bytes_list feature as decoded: a plain list of bytes that remembers its kind, so that an
    empty one encodes back to an empty bytes_list (a bare `[]` has no kind and is refused by encode_example)."""

    __slots__ = ()


FeatureValue = Union[np.ndarray, list[bytes]]  # float32/int64 arrays, or lists of bytes

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PLAIN = frozenset({int, float, bool, str, bytes})  # list items that are never a 0-d array or tensor


def _torch_like(value: Any) -> bool:
    """True if `value` is a torch.Tensor (checked only when torch is already imported: never imports it)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _torch_to_numpy(value: Any, key: str) -> np.ndarray:
    torch = sys.modules["torch"]
    if value.layout != torch.strided:
        raise TypeError(f"feature {key!r}: cannot encode a tensor with layout {value.layout} (call .to_dense() first)")
    if value.is_quantized:
        raise TypeError(f"feature {key!r}: cannot encode a quantized tensor of dtype {value.dtype} (call "
                        ".dequantize() first)")
    if value.device.type == "meta":
        raise ValueError(f"feature {key!r}: cannot encode a tensor on the meta device: it holds no values")
    # conj() / neg views hold their values lazily (a bit on the tensor): resolve them, as .numpy() requires
    value = value.detach().cpu().resolve_conj().resolve_neg()
    if value.dtype == torch.bfloat16:
        value = value.to(torch.float32)
    try:
        array: np.ndarray = value.contiguous().numpy()
    except TypeError:  # a dtype numpy lacks (float8_*, complex32, ...): torch's message names no feature
        raise TypeError(f"feature {key!r}: cannot encode a tensor of dtype {value.dtype} (TFRecord features hold "
                        "int64, float32 or bytes: expected a bool, integer or floating-point tensor)") from None
    return array


def _utf8(key: str, text: str) -> bytes:
    """`text` encoded as UTF-8; a str that has no UTF-8 form (a lone surrogate) is a ValueError naming the key."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"feature {key!r}: string {text!r} cannot be encoded as UTF-8 ({error.reason} at position "
                         f"{error.start}); pass bytes to store other byte strings") from None


def _scalar(item: Any, key: str) -> Any:
    """A 0-d numpy array or torch tensor as the scalar it holds (any other item unchanged), so that a list of
    them encodes like a list of numbers."""
    if _torch_like(item) and item.dim() == 0:
        item = _torch_to_numpy(item, key)
    if isinstance(item, np.ndarray) and item.ndim == 0:
        return item[()]
    return item


def _fits_float(item: Any) -> bool:
    try:
        float(item)
    except OverflowError:
        return False
    return True


def _tf_feature(value: Any) -> bool:
    """True for a tf.train.Feature made by TensorFlow (or any protobuf runtime): the same message, another class."""
    descriptor = getattr(type(value), "DESCRIPTOR", None)
    return getattr(descriptor, "full_name", None) == "tensorflow.Feature" and hasattr(value, "SerializeToString")


def _array_feature(key: str, array: np.ndarray, feature: feature_pb2.Feature) -> None:
    kind = array.dtype.kind
    if kind in "biu":
        if kind == "u" and array.dtype.itemsize == 8 and array.size and int(array.max()) > _INT64_MAX:
            raise ValueError(
                f"feature {key!r}: uint64 value {int(array.max())} does not fit in int64_list (max 2**63 - 1)")
        feature.int64_list.SetInParent()  # an empty list is still a present feature
        feature.int64_list.value.extend(array.astype(np.int64, copy=False).ravel().tolist())
    elif kind == "f" or array.dtype.name == "bfloat16":
        # float64 beyond float32's range becomes inf, as in TensorFlow; a signalling NaN is no error either
        with np.errstate(over="ignore", invalid="ignore"):
            payload = array.astype("<f4").tobytes()
        # parse the packed list from its bytes: keeps every bit (NaN payloads too), unlike a trip through Python floats
        feature.MergeFromString(length_delimited(0x12, length_delimited(0x0A, payload) if payload else b""))
    elif kind == "S":
        feature.bytes_list.SetInParent()
        feature.bytes_list.value.extend(array.ravel().tolist())
    elif kind == "U":
        feature.bytes_list.SetInParent()
        feature.bytes_list.value.extend(_utf8(key, s) for s in array.ravel().tolist())
    elif kind == "O":
        items = array.ravel().tolist()
        _list_feature(key, items, feature, nested_ok=False)
    else:
        raise TypeError(f"feature {key!r}: cannot encode values of dtype {array.dtype} (TFRecord features hold "
                        "int64, float32 or bytes: expected bool, int, uint, float, bytes or str values)")


def _list_feature(key: str, items: list[Any], feature: feature_pb2.Feature, nested_ok: bool = True) -> None:
    if not items and isinstance(items, ByteStrings):
        feature.bytes_list.SetInParent()
        return
    if not items:
        raise TypeError(f"feature {key!r}: an empty list has no type; pass a typed empty array such as "
                        "np.array([], dtype=np.int64), np.array([], dtype=np.float32) or np.array([], dtype=bytes)")
    if not all(type(item) in _PLAIN for item in items):  # (the common case costs one pass of type checks)
        items = [_scalar(item, key) for item in items]
    kinds = set()
    for item in items:
        if isinstance(item, (bytes, bytearray, memoryview, str)):
            kinds.add("bytes")
        elif isinstance(item, (bool, int, np.bool_, np.integer)):
            kinds.add("int")
        elif isinstance(item, (float, np.floating)):
            kinds.add("float")
        elif nested_ok and isinstance(item, (list, tuple, np.ndarray)) or _torch_like(item):
            kinds.add("nested")
        else:
            raise TypeError(f"feature {key!r}: cannot encode a list element of type {type(item).__name__} "
                            "(expected int, float, bytes or str)")
    if kinds == {"bytes"}:
        feature.bytes_list.value.extend(
            _utf8(key, item) if isinstance(item, str) else bytes(item) for item in items)
    elif kinds == {"int"}:
        values = [int(item) for item in items]
        if min(values) < _INT64_MIN or max(values) > _INT64_MAX:
            bad = next(v for v in values if not _INT64_MIN <= v <= _INT64_MAX)
            raise ValueError(f"feature {key!r}: integer {bad} does not fit in int64_list")
        feature.int64_list.value.extend(values)
    elif kinds <= {"int", "float"}:
        try:
            floats = [float(item) for item in items]
        except OverflowError:
            bad = next(item for item in items if not _fits_float(item))
            raise ValueError(f"feature {key!r}: an integer of {bad.bit_length()} bits is too large for a float_list "
                             "(a list that holds floats stores every value as float32)") from None
        feature.float_list.value.extend(floats)
    elif kinds == {"nested"}:
        # flatten row-major through an object array, so numpy cannot quietly turn mixed ints and strings into text
        try:
            array = np.asarray([_torch_to_numpy(i, key) if _torch_like(i) else i for i in items], dtype=object)
        except ValueError:
            array = None
        leaves = array.ravel().tolist() if array is not None else []
        leaves = [_scalar(leaf, key) for leaf in leaves]
        if array is None or any(isinstance(leaf, (list, tuple, np.ndarray)) or _torch_like(leaf) for leaf in leaves):
            raise TypeError(f"feature {key!r}: nested lists must be rectangular (ragged nested lists cannot be "
                            "flattened into one feature)")
        _list_feature(key, leaves, feature, nested_ok=False)
    else:
        raise TypeError(f"feature {key!r}: a list mixes {' and '.join(sorted(kinds))} values; one feature holds one "
                        "kind")


def to_feature(key: str, value: Any, feature: feature_pb2.Feature | None = None) -> feature_pb2.Feature:
    """Fill (or make) a tf.train.Feature from one value; `key` is only used in error messages."""
    if feature is None:
        feature = feature_pb2.Feature()
    if isinstance(value, (bytes, bytearray, memoryview)):
        feature.bytes_list.value.append(bytes(value))
    elif isinstance(value, str):
        feature.bytes_list.value.append(_utf8(key, value))
    elif isinstance(value, (bool, int, float)):
        _list_feature(key, [value], feature)
    elif isinstance(value, (np.ndarray, np.generic)):
        _array_feature(key, np.asarray(value), feature)
    elif isinstance(value, (list, tuple)):
        _list_feature(key, value if isinstance(value, ByteStrings) else list(value), feature)
    elif isinstance(value, feature_pb2.Feature):
        feature.CopyFrom(value)
    elif _torch_like(value):
        _array_feature(key, _torch_to_numpy(value, key), feature)
    elif _tf_feature(value):  # tf.train.Feature from TensorFlow's own classes: copied through its bytes
        feature.Clear()
        feature.MergeFromString(value.SerializeToString())
    else:
        raise TypeError(f"feature {key!r}: cannot encode a value of type {type(value).__name__} (expected int, "
                        "float, bytes, str, a list of them, a numpy array or a torch tensor)")
    return feature


def _fill_features(features_msg: feature_pb2.Features, features: Mapping[str, Any]) -> None:
    if not isinstance(features, Mapping):
        raise TypeError(f"features must be a mapping of names to values, got {type(features).__name__}")
    target = features_msg.feature
    for key, value in features.items():
        if not isinstance(key, str):
            raise TypeError(f"feature names must be str, got {type(key).__name__}: {key!r}")
        _utf8(key, key)  # a protobuf map key must be UTF-8: say which name is not, before protobuf refuses it
        to_feature(key, value, target[key])


def encode_example(features: Mapping[str, Any]) -> bytes:
    """Serialize a mapping of feature names to values as a tf.train.Example.

    >>> import numpy as np
    >>> record = encode_example({"label": 3, "score": [0.5, 1.0], "name": "cat", "emb": np.zeros((2, 2))})
    >>> decode_example(record)["label"]
    array([3])
    """
    example = example_pb2.Example()
    _fill_features(example.features, features)
    # map entries in protobuf's deterministic order: the same bytes in every process with the same protobuf runtime
    # (upb, TensorFlow 2.21's too, puts a key after the longer keys it is a prefix of; pure-Python protobuf sorts)
    return example.SerializeToString(deterministic=True)


def from_feature(feature: feature_pb2.Feature) -> FeatureValue | None:
    """Return a Feature's values: float32 array, int64 array, list of bytes, or None when no kind is set."""
    kind = feature.WhichOneof("kind")
    if kind == "int64_list":
        return np.array(feature.int64_list.value, dtype=np.int64)
    if kind == "float_list":
        return np.array(feature.float_list.value, dtype=np.float32)
    if kind == "bytes_list":
        return ByteStrings(feature.bytes_list.value)
    return None


def _raw_value(raw: bytes, key: str) -> FeatureValue | None:
    """The values of one raw Feature (tfr_torch.format.strict's rules), or None when no kind is set."""
    kind, values = decode_feature(raw, key)
    if kind is None:
        return None
    return ByteStrings(values) if kind == "bytes" else values


def _values_of(raw_features: Mapping[str, bytes]) -> dict[str, FeatureValue]:
    out = {}
    for key, raw in raw_features.items():
        value = _raw_value(raw, key)
        if value is not None:  # a Feature with no kind set counts as missing, as in TensorFlow
            out[key] = value
    return out


def _check_bytes(data: Any, what: str) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"expected the serialized {what} as bytes, got {type(data).__name__}")


def decode_example(data: bytes) -> dict[str, FeatureValue]:
    """Parse a serialized tf.train.Example into {name: float32 array | int64 array | list of bytes}.

    Features whose kind is not set are left out (TensorFlow treats them as missing); empty lists are kept.
    Every record gets the answer `parse_example` gives (tfr_torch.format.strict's rules: where TensorFlow's
    parse_example and protobuf disagree on an unusual encoding, DecodeError). Linear time in the record's size.
    Garbage raises DecodeError.

    >>> features = decode_example(encode_example({"label": 3, "name": "cat"}))
    >>> features["label"], features["name"]
    (array([3]), [b'cat'])
    """
    return _values_of(example_features(_check_bytes(data, "tf.train.Example")))


def encode_sequence_example(
    context: Mapping[str, Any] | None = None, feature_lists: Mapping[str, Sequence[Any]] | None = None
) -> bytes:
    """Serialize a tf.train.SequenceExample: `context` as in encode_example, and `feature_lists` mapping each
    name to a sequence of steps, each step a value encoded like a feature.

    >>> record = encode_sequence_example({"id": 7}, {"tokens": [[1, 2], [3]], "words": [b"a", b"bc"]})
    >>> decode_sequence_example(record)[1]["tokens"]
    [array([1, 2]), array([3])]
    """
    message = example_pb2.SequenceExample()
    if context:
        _fill_features(message.context, context)
    if feature_lists:
        if not isinstance(feature_lists, Mapping):
            raise TypeError("feature_lists must be a mapping of names to sequences, got "
                            f"{type(feature_lists).__name__}")
        target = message.feature_lists.feature_list
        for key, steps in feature_lists.items():
            if not isinstance(key, str):
                raise TypeError(f"feature list names must be str, got {type(key).__name__}: {key!r}")
            if isinstance(steps, (str, bytes)) or (not isinstance(steps, (Sequence, np.ndarray))
                                                   and not _torch_like(steps)):
                raise TypeError(f"feature list {key!r}: expected a sequence of steps, got {type(steps).__name__}")
            flist = target[key]
            for step, value in enumerate(steps):
                to_feature(f"{key}[{step}]", value, flist.feature.add())
    return message.SerializeToString(deterministic=True)


def decode_sequence_example(data: bytes) -> tuple[dict[str, FeatureValue], dict[str, list[FeatureValue | None]]]:
    """Parse a serialized tf.train.SequenceExample into (context, feature_lists).

    `context` is as decode_example returns; `feature_lists` maps each name to a list with one value per step
    (None for a step whose Feature has no kind set).
    """
    context, feature_lists = sequence_example_features(_check_bytes(data, "tf.train.SequenceExample"))
    lists = {key: [_raw_value(raw, f"{key}[{step}]") for step, raw in enumerate(steps)]
             for key, steps in feature_lists.items()}
    return _values_of(context), lists
