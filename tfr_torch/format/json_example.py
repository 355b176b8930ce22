"""decode_json_example: JSON-encoded tf.train.Example protos to serialized Examples, as `tf.io.decode_json_example`.

The JSON is protobuf's JSON mapping of `tensorflow.Example` (what `google.protobuf.json_format.MessageToJson`
writes). It is read by protobuf's own `json_format`, against tfr_torch's private descriptor pool, and the
Example is then written as TensorFlow's op writes it, so the bytes are TensorFlow's byte for byte:

- map entries in the order their keys appear in the JSON (TensorFlow converts JSON to binary as it reads it;
  its output is neither sorted nor in protobuf's map order);
- repeated int64 / float values one tag each, not packed (again TensorFlow's JSON-to-binary converter; both
  forms parse to the same values).

Deliberate differences, all stricter than TensorFlow's C++ JSON reader (each raises DecodeError here):
a field or key given twice in one object (TF writes a repeated message field twice, which merges), a feature
given as `null` (TF writes a key without a value), a bare value or nested lists where a list is expected,
trailing commas, `null` inside a list (TF writes 0 or b""), single-quoted strings and unquoted keys (TF's reader takes
them), and numbers in spellings protobuf does not define (`"0x10"`, `"nan"`). Subnormal float values are kept
(TensorFlow's kernels run with subnormals flushed to zero, so it writes 0.0 for `1e-40`).

As TensorFlow: `-0` is -0.0 in a float_list; an int64_list value written with a fraction or an exponent (`1e15`,
`"2.0"`) is read as a double and taken only when it is a whole number no larger than 2**53 in magnitude (past that a
double is not exact: `1e16` is refused); a float_list string past a double's range (`"1e400"`) is +-Infinity.
Numbers of more than 39 digits (past float32's and int64's range) are refused before Python converts them, and so
are number strings only Python reads (`"1_000"`, digits that are not ASCII), as TensorFlow refuses them.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Sequence
from typing import Any, Union

import numpy as np
from google.protobuf import json_format

from tfr_torch.errors import DecodeError
from tfr_torch.format._proto import example_pb2, feature_pb2
from tfr_torch.format._proto._pool import POOL
from tfr_torch.format.wire import encode_varint, length_delimited

__all__ = ["decode_json_example"]

JsonExamples = Union[str, bytes, Sequence[Any], np.ndarray]

_FLOAT32_MAX = float(np.finfo(np.float32).max)
# protobuf's JSON float spellings besides numbers; anything else in quotes must be a JSON number
_FLOAT_WORDS = {"NaN", "Infinity", "-Infinity"}
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INT_STRING = re.compile(r"-?[0-9]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*")
_EXACT_INT = 2**53  # the largest magnitude up to which every whole double is exact (TF's bound for int64 from a double)
_MAX_DIGITS = 39  # float32's largest value has 39 digits, int64's 19: a longer JSON integer is out of range
_REASON_CHARS = 400  # an error message quotes at most about this much of what it found
_LIST_NAMES = {"bytesList": "bytes", "bytes_list": "bytes", "floatList": "float", "float_list": "float",
               "int64List": "int64", "int64_list": "int64"}


class _Invalid(Exception):
    """A JSON value protobuf's reader would take but TensorFlow rejects (or misreads); its text goes into the
    DecodeError."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Invalid(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _no_constant(word: str) -> None:
    raise _Invalid(f"{word} is not JSON (protobuf spells it as the string \"{word}\")")


def _cut(text: str, limit: int = 60) -> str:
    """`text` quoted, cut to `limit` characters (with its length) so an error message stays short."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def _json_int(text: str) -> int | float:
    """A JSON integer: `-0` kept as -0.0 (TensorFlow writes -0.0 for it in a float_list; Python's int loses the
    sign), and more than `_MAX_DIGITS` digits refused before Python converts them (out of any field's range; the
    conversion is quadratic in the digits where Python's digit limit is lifted)."""
    if text == "-0":
        return -0.0
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise _Invalid(f"the number {text[:20]}... has {len(text.lstrip('-')):,} digits: out of range for int64 "
                       "and float values")
    return int(text)


def _check_spelling(value: str, what: str) -> None:
    """Refuse what Python's int() and float() read but TensorFlow does not: '_' between digits, non-ASCII digits
    or spaces."""
    if "_" in value or not value.isascii():
        raise _Invalid(f"{what} value {_cut(value)} is not a number as TensorFlow reads one ('_' between digits, "
                       "or characters that are not ASCII)")


def _int64_value(value: Any) -> Any:
    """An int64_list value as TensorFlow reads it: an integer string (leading zeros dropped; more than 19 digits
    is out of range), or a number written with a fraction or an exponent, read as a double and taken only when
    it is whole and at most 2**53 in magnitude (protobuf's Python reader takes any whole double, rounded)."""
    if isinstance(value, str):
        _check_spelling(value, "int64_list")
        if _INT_STRING.fullmatch(value):
            digits = value.lstrip("-").lstrip("0")
            if len(digits) > 19:
                raise _Invalid(f"int64_list value {_cut(value)} is out of range for int64")
            return ("-" if value.startswith("-") and digits else "") + (digits or "0")
        if not _JSON_NUMBER.fullmatch(value):
            return value  # protobuf's reader says what is wrong
        number = float(value)
    elif isinstance(value, float):
        number = value
    else:
        return value
    if math.isfinite(number) and number.is_integer() and abs(number) > _EXACT_INT:
        raise _Invalid(f"int64_list value {_cut(value) if isinstance(value, str) else repr(value)} is written "
                       f"with a fraction or an exponent, so it is read as a double, which is exact only up to "
                       f"2**53; write it as an integer")
    return value


def _check_base64(text: Any) -> None:
    """TensorFlow's base64 rules: standard or URL-safe alphabet, '=' padding only to a multiple of 4."""
    if not isinstance(text, str):
        return  # protobuf's reader rejects it
    data = text[:-2] if text.endswith("==") else text[:-1] if text.endswith("=") else text
    if ((data != text and len(text) % 4) or len(data) % 4 == 1 or not _BASE64.fullmatch(data)):
        raise _Invalid(f"corrupt base64 in a bytes_list value: {_cut(text)}")


def _float32_value(value: Any) -> Any:
    """A float_list value rounded to float32 first, as TensorFlow does: 3.4028235e38 (what MessageToJson writes
    for float32's largest value) is that value, not a float too large (protobuf's Python reader compares the
    unrounded double)."""
    if isinstance(value, str) and value not in _FLOAT_WORDS:
        _check_spelling(value, "float_list")
        if not _JSON_NUMBER.fullmatch(value):
            return value  # protobuf's reader says what is wrong
        value = float(value)
        if math.isinf(value):  # a string past a double's range: TensorFlow reads it as +-Infinity
            return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        with np.errstate(over="ignore"):
            rounded = float(np.float32(value))
        return rounded if math.isfinite(rounded) else value  # too large: protobuf's reader raises
    return value


def _object(value: Any, what: str) -> dict[str, Any]:
    """A message-typed JSON value: an object, or null for an empty one (protobuf's Python reader also takes a
    list for a message; TensorFlow does not)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"expected a JSON object for {what}, got {json.dumps(value)[:40]}")
    return value


def _prepare(tree: Any) -> list[str]:
    """Check the parts of a parsed JSON Example that protobuf's reader would let through (message values that
    are not objects, base64, float32 range), round float values; return the feature keys in their JSON order."""
    if not isinstance(tree, dict):  # null too: a message inside an Example may be null, the Example itself not
        raise _Invalid(f"expected a JSON object for tensorflow.Example, got {json.dumps(tree)[:40]}")
    feature_map = _object(_object(tree.get("features"),
                                  "tensorflow.Features").get("feature"), "Features.feature")
    for key, feature in feature_map.items():
        if feature is None:
            raise _Invalid(f"feature {key!r} is null; expected a JSON object (tensorflow.Feature)")
        feature = _object(feature, f"feature {key!r}")
        for name, kind in _LIST_NAMES.items():
            values = _object(feature.get(name), f"{name} of feature {key!r}").get("value")
            if not isinstance(values, list):
                continue  # null (no values), or protobuf's reader rejects it
            if kind == "bytes":
                for value in values:
                    _check_base64(value)
            elif kind == "float":
                values[:] = [_float32_value(v) for v in values]
            else:
                values[:] = [_int64_value(v) for v in values]
    return list(feature_map)


def _encode_feature(feature: feature_pb2.Feature) -> bytes:
    """One Feature as TensorFlow's JSON op writes it: repeated numbers one tag each (not packed)."""
    kind = feature.WhichOneof("kind")
    if kind == "bytes_list":  # BytesList.value = 1
        return length_delimited(0x0A, b"".join(length_delimited(0x0A, v) for v in feature.bytes_list.value))
    if kind == "float_list":  # FloatList.value = 1, fixed32 (tag 0x0D)
        floats = feature.float_list.value
        return length_delimited(0x12, b"".join(b"\x0d" + struct.pack("<f", v) for v in floats))
    if kind == "int64_list":  # Int64List.value = 1, varint (tag 0x08), negatives as 10-byte two's complement
        ints = feature.int64_list.value
        return length_delimited(0x1A, b"".join(b"\x08" + encode_varint(v & 0xFFFFFFFFFFFFFFFF) for v in ints))
    return b""


def _encode(example: example_pb2.Example, keys: list[str]) -> bytes:
    if not example.HasField("features"):
        return b""
    feature_map = example.features.feature
    entries = b"".join(  # Features.feature = 1: map entries {key = 1, value = 2}
        length_delimited(0x0A, length_delimited(0x0A, key.encode("utf-8"))
                         + length_delimited(0x12, _encode_feature(feature_map[key])))
        for key in keys)
    return length_delimited(0x0A, entries)  # Example.features = 1


def _one(text: Any, index: int | None) -> bytes:
    where = "decode_json_example: " + ("" if index is None else f"item {index}: ")
    if isinstance(text, (bytes, bytearray, memoryview, np.bytes_)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise DecodeError(f"{where}expected a JSON-encoded tf.train.Example, got bytes that are not UTF-8 "
                              f"({e.reason} at byte {e.start})", index=index) from None
    elif not isinstance(text, str):
        raise TypeError(f"{where}expected a JSON string (str or bytes), got {type(text).__name__}: {text!r:.80}")
    try:
        tree = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_int=_json_int)
        keys = _prepare(tree)
        example = example_pb2.Example()
        json_format.ParseDict(tree, example, descriptor_pool=POOL)
    except (ValueError, _Invalid, json_format.Error, RecursionError) as e:
        reason = f"invalid JSON: {e}" if isinstance(e, json.JSONDecodeError) else str(e).rstrip(".")
        if len(reason) > _REASON_CHARS:  # protobuf's messages quote the value whole, however long
            reason = f"{reason[:_REASON_CHARS]}... ({len(reason):,} characters)"
        raise DecodeError(f"{where}expected a JSON-encoded tf.train.Example: {reason}", index=index) from None
    return _encode(example, keys)


def decode_json_example(json_examples: JsonExamples) -> Any:
    """Convert JSON-encoded tf.train.Example protos to serialized Examples, as `tf.io.decode_json_example`.

    `json_examples` is one JSON string (str or UTF-8 bytes), a list (or nested lists) of them, or a numpy array
    of them. The result has the same structure: bytes for one string, nested lists of bytes for lists (where
    TensorFlow returns a string tensor of the input's shape), a numpy object array of the same shape for an
    array. Each result is the serialized Example TensorFlow's op gives, byte for byte (see the module's notes).

    JSON that does not parse, or is not an Example, raises DecodeError naming the item (its position in
    row-major order, also in `.index`) and what protobuf found; a value that is not a string raises TypeError.

    >>> decode_json_example('{"features": {"feature": {"a": {"int64List": {"value": ["1"]}}}}}')
    b'\\n\\x0b\\n\\t\\n\\x01a\\x12\\x04\\x1a\\x02\\x08\\x01'
    """
    if isinstance(json_examples, (str, bytes, bytearray, memoryview, np.bytes_, np.str_)):
        return _one(json_examples, None)
    if isinstance(json_examples, np.ndarray):
        if json_examples.dtype.kind not in "SUO":
            raise TypeError(f"decode_json_example: expected an array of JSON strings, got dtype {json_examples.dtype}")
        out = np.empty(json_examples.shape, dtype=object)
        for i, (pos, text) in enumerate(np.ndenumerate(json_examples)):
            out[pos] = _one(text, i)
        return out
    if isinstance(json_examples, (list, tuple)):
        counter = [0]
        return _nested(json_examples, counter)
    raise TypeError(f"decode_json_example: expected a JSON string (str or bytes) or a (nested) list of them, got "
                    f"{type(json_examples).__name__}: {json_examples!r:.80}")


def _nested(items: Sequence[Any], counter: list[int]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if isinstance(item, (list, tuple)):
            out.append(_nested(item, counter))
        else:
            out.append(_one(item, counter[0]))
            counter[0] += 1
    return out
