"""One answer for every encoding of a tf.train.Example / SequenceExample: the wire rules every decoding path applies.

TensorFlow has two readers of an Example that disagree on non-canonical encodings: `tf.io.parse_example` (its fast
parser reads one list per Feature and ignores what follows, rejects groups and odd map entries) and protobuf
(`tf.train.Example.FromString`: merges repeated fields, skips unknown fields and groups up to a depth limit).
tfr_torch accepts a record only where both accept it and agree on every value, and raises DecodeError (naming the
byte offset in the record and the feature key) everywhere else, so `parse_example` (batched, single, large-record,
compiled) and `decode_example` give one answer for every input. The rules, checked against TensorFlow 2.21:

1. Example: field 1 is Features (may repeat; entries concatenate, a duplicate key: the last wins). Other fields
   are skipped by wire type. A group (wire types 3, 4) anywhere in the record is an error (TensorFlow's fast
   parser rejects groups; protobuf rejects deep ones). Tags must be minimally encoded.
2. Features hold only map entries (field 1).
3. A map entry holds exactly one key (field 1, UTF-8) and one value (field 2), in either order, nothing else
   (TensorFlow rejects an entry whose value appears twice; protobuf would merge the two).
4. A Feature is empty (no kind: the feature counts as missing) or starts with its one list (bytes_list,
   float_list or int64_list); after it only unknown fields (numbers >= 4) may follow; a second list is an error.
5. BytesList: only its values (field 1). FloatList / Int64List: one packed run (floats: a multiple of 4 bytes)
   followed only by unknown fields (numbers >= 2), or only unpacked values.
6. Every length is checked against the bytes that remain in its enclosing message before it is used.

`example_features` and `sequence_example_features` split a record into raw Feature bytes by key (protobuf's C
parser for canonical records, proved canonical by two size checks; the rule walk otherwise); `decode_feature`
decodes one raw Feature. All run in linear time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

import numpy as np
from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.message import DecodeError as _ProtoDecodeError

from tfr_torch.errors import DecodeError
from tfr_torch.format._proto import raw_example_pb2
from tfr_torch.format._proto._pool import POOL
from tfr_torch.format.options import FeatureKind
from tfr_torch.format.wire import (
    WIRE_NAMES,
    WireError,
    decode_packed_varints,
    decode_varint_list,
    read_delimited,
    read_tag,
    read_varint,
    skip_field,
)

__all__ = ["FEATURE_KINDS", "FEATURE_TAGS", "example_features", "sequence_example_features", "decode_feature",
           "walk_example", "walk_sequence_example", "Values"]

Values = Union[np.ndarray, list[bytes]]
_Buf = Union[bytes, memoryview]  # a record, or a view into one
# A Feature's kind, written once: the tag of its list field (field number << 3 | length-delimited: bytes_list is
# field 1, float_list 2, int64_list 3) and back. format.columns and the decoders use these.
FEATURE_KINDS: dict[int, FeatureKind] = {0x0A: "bytes", 0x12: "float", 0x1A: "int64"}
FEATURE_TAGS: dict[FeatureKind, int] = {kind: tag for tag, kind in FEATURE_KINDS.items()}


# --------------------------------------------------------------------------------------------- message walks

def _entry(buf: _Buf, pos: int, end: int, what: str) -> tuple[str, int, int]:
    """A map entry in buf[pos:end]: (key, value start, value stop)."""
    entry_start = pos
    key: str | None = None
    value: tuple[int, int] | None = None
    while pos < end:
        number, wire, after = read_tag(buf, pos, end)
        if number == 1 and wire == 2:
            if key is not None:
                raise WireError(pos, f"has a {what} map entry with two keys", key)
            start, pos = read_delimited(buf, after, end, "key")
            try:
                key = bytes(buf[start:pos]).decode("utf-8")
            except UnicodeDecodeError:
                raise WireError(start, f"has a {what} key that is not valid UTF-8: "
                                       f"{bytes(buf[start:pos])[:40]!r}") from None
        elif number == 2 and wire == 2:
            if value is not None:
                raise WireError(pos, f"has a {what} map entry whose value field appears twice (TensorFlow's "
                                     "parse_example rejects such a record; protobuf would merge the two values)", key)
            value = read_delimited(buf, after, end, "value")
            pos = value[1]
        else:
            raise WireError(pos, f"has an unexpected field {number} ({WIRE_NAMES[wire]}) in a {what} map entry "
                            "(expected only a key and a value)", key)
    if key is None:
        raise WireError(entry_start, f"has a {what} map entry without a key")
    if value is None:
        raise WireError(entry_start, f"has a {what} map entry without a value", key)
    return key, value[0], value[1]


def _features(buf: _Buf, pos: int, end: int, out: dict[str, tuple[int, int]], what: str = "feature") -> None:
    """Entries of a Features message in buf[pos:end] into `out` (key -> (start, stop) of the raw Feature)."""
    while pos < end:
        if buf[pos] != 0x0A:
            number, wire, _ = read_tag(buf, pos, end)
            raise WireError(pos, f"has an unexpected field {number} ({WIRE_NAMES[wire]}) among its {what}s (a Features "
                            "message holds only map entries)")
        start, pos = read_delimited(buf, pos + 1, end, f"{what} map entry")
        key, vstart, vstop = _entry(buf, start, pos, what)
        out[key] = (vstart, vstop)


def _message_fields(buf: _Buf, fields: dict[int, Callable[[int, int], None]], what: str) -> None:
    """Walk a top-level message whose known fields (all length-delimited) are in `fields` (number -> handler
    taking (start, stop)); unknown fields are skipped."""
    pos, end = 0, len(buf)
    while pos < end:
        number, wire, after = read_tag(buf, pos, end)
        handler = fields.get(number) if wire == 2 else None
        if handler is None:
            pos = skip_field(buf, after, end, wire)
            continue
        start, pos = read_delimited(buf, after, end, what)
        handler(start, pos)


def walk_example(data: bytes) -> dict[str, bytes]:
    """Split a serialized Example into {key: raw Feature bytes} by walking its wire format under the rules
    (pure Python, linear time). Raises DecodeError naming the byte offset where a rule is broken."""
    buf = memoryview(data)
    spans: dict[str, tuple[int, int]] = {}
    try:
        _message_fields(buf, {1: lambda s, e: _features(buf, s, e, spans)}, "features message")
    except WireError as bad:
        raise _error(bad, "tf.train.Example", len(data)) from None
    return {key: bytes(buf[s:e]) for key, (s, e) in spans.items()}


def walk_sequence_example(data: bytes) -> tuple[dict[str, bytes], dict[str, list[bytes]]]:
    """Split a serialized SequenceExample into ({key: raw Feature}, {key: [raw Feature per step]}) under the
    rules (linear time). Raises DecodeError naming the byte offset where a rule is broken."""
    buf = memoryview(data)
    context: dict[str, tuple[int, int]] = {}
    lists: dict[str, tuple[int, int]] = {}

    def feature_lists(start: int, stop: int) -> None:
        _features(buf, start, stop, lists, "feature list")

    try:
        _message_fields(buf, {1: lambda s, e: _features(buf, s, e, context, "context feature"), 2: feature_lists},
                        "SequenceExample field")
        steps = {key: _feature_list(buf, s, e, key) for key, (s, e) in lists.items()}
    except WireError as bad:
        raise _error(bad, "tf.train.SequenceExample", len(data)) from None
    return {key: bytes(buf[s:e]) for key, (s, e) in context.items()}, steps


def _feature_list(buf: _Buf, pos: int, end: int, key: str) -> list[bytes]:
    out = []
    while pos < end:
        if buf[pos] != 0x0A:
            number, wire, _ = read_tag(buf, pos, end)
            raise WireError(pos, f"has an unexpected field {number} ({WIRE_NAMES[wire]}) in a FeatureList (expected "
                            "only Features)", key)
        start, pos = read_delimited(buf, pos + 1, end, "Feature")
        out.append(bytes(buf[start:pos]))
    return out


def _error(bad: WireError, what: str, size: int) -> DecodeError:
    where = f" (feature {bad.key!r})" if bad.key is not None else ""
    return DecodeError(f"cannot parse {size} bytes as a {what}: byte {bad.pos}{where} {bad.message}", key=bad.key,
                       position=bad.pos)


# --------------------------------------------------------------------------------------------- fast checks

def _list_views() -> tuple[Any, Any]:
    """Message classes that read an Example / SequenceExample with every map entry kept as a list item with
    explicit presence (proto2 `optional`), for the size checks in `example_features`."""
    fdp = descriptor_pb2.FileDescriptorProto(name="tfr_torch/strict_views.proto", package="tfr_torch_strict",
                                             syntax="proto2")
    opt = descriptor_pb2.FieldDescriptorProto

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        msg = fdp.message_type.add(name=name)
        for field_name, number, label, ftype, type_name in fields:
            msg.field.add(name=field_name, number=number, label=label, type=ftype, type_name=type_name or None)

    O, R, B, M = opt.LABEL_OPTIONAL, opt.LABEL_REPEATED, opt.TYPE_BYTES, opt.TYPE_MESSAGE
    message("Entry", ("key", 1, O, B, ""), ("value", 2, O, B, ""))
    message("Features", ("feature", 1, R, M, ".tfr_torch_strict.Entry"))
    message("Example", ("features", 1, O, M, ".tfr_torch_strict.Features"))
    message("FeatureList", ("feature", 1, R, B, ""))
    message("ListEntry", ("key", 1, O, B, ""), ("value", 2, O, M, ".tfr_torch_strict.FeatureList"))
    message("FeatureLists", ("feature_list", 1, R, M, ".tfr_torch_strict.ListEntry"))
    message("SequenceExample", ("context", 1, O, M, ".tfr_torch_strict.Features"),
            ("feature_lists", 2, O, M, ".tfr_torch_strict.FeatureLists"))
    POOL.Add(fdp)

    def get(name: str) -> Any:
        return message_factory.GetMessageClass(POOL.FindMessageTypeByName(f"tfr_torch_strict.{name}"))

    return get("Example"), get("SequenceExample")


_ListExample, _ListSequenceExample = _list_views()
_parse_raw_example = raw_example_pb2.RawExample.FromString
_parse_raw_sequence = raw_example_pb2.RawSequenceExample.FromString


def is_canonical_example(data: bytes, parsed: raw_example_pb2.RawExample) -> bool:
    """True when `data`, already parsed by protobuf as `parsed` (a RawExample), follows the rules and every entry
    survives in the parsed map, proved by sizes only: `parsed` re-encodes to exactly len(data) bytes, so does a
    list view that keeps every field present in the record and drops unknown fields, and both hold the same number
    of entries. (A missing key or value, a duplicate field or entry, an unknown field or group, a padded varint,
    a split Features message: each makes one of the three differ.) Map entries may come in any order."""
    size = len(data)
    if parsed.ByteSize() != size:
        return False
    view = _ListExample.FromString(data)
    view.DiscardUnknownFields()
    return view.ByteSize() == size and len(view.features.feature) == len(parsed.features.feature)


def example_features(data: bytes) -> Mapping[str, bytes]:
    """The features of a serialized Example as {key: raw Feature bytes} (a mapping with `get`), under the rules.

    Canonical records (all that TensorFlow and tfr_torch write, in any entry order) take protobuf's C parser and
    two size checks; others are walked in Python, which applies the rules and raises DecodeError naming the byte
    offset. The raw Features still have to pass `decode_feature` (or an equivalent fast path)."""
    try:
        parsed = _parse_raw_example(data)
    except _ProtoDecodeError:
        parsed = None
    if parsed is not None and is_canonical_example(data, parsed):
        return parsed.features.feature
    return walk_example(data)


def is_canonical_sequence_example(data: bytes, parsed: raw_example_pb2.RawSequenceExample) -> bool:
    """`is_canonical_example` for a SequenceExample parsed as a RawSequenceExample."""
    size = len(data)
    if parsed.ByteSize() != size:
        return False
    view = _ListSequenceExample.FromString(data)
    view.DiscardUnknownFields()
    return (view.ByteSize() == size and len(view.context.feature) == len(parsed.context.feature)
            and len(view.feature_lists.feature_list) == len(parsed.feature_lists.feature_list))


def sequence_example_features(data: bytes) -> tuple[Mapping[str, bytes], Mapping[str, Sequence[bytes]]]:
    """(context {key: raw Feature}, feature lists {key: sequence of raw Features}) of a serialized
    SequenceExample under the rules; like `example_features`."""
    try:
        parsed = _parse_raw_sequence(data)
    except _ProtoDecodeError:
        parsed = None
    if parsed is not None and is_canonical_sequence_example(data, parsed):
        return parsed.context.feature, {key: flist.feature for key, flist in parsed.feature_lists.feature_list.items()}
    return walk_sequence_example(data)


# --------------------------------------------------------------------------------------------- Features

def decode_feature(raw: bytes, key: str = "?") -> tuple[FeatureKind | None, Values]:
    """Decode one serialized tf.train.Feature under the rules: (kind, values) with kind "bytes" (a list of bytes),
    "float" (float32 array) or "int64" (int64 array), or (None, []) for a Feature with no kind set (it counts as
    missing). Raises DecodeError naming the key and the byte offset in the Feature."""
    size = len(raw)
    if (4 <= size < 0x82 and isinstance(raw, (bytes, bytearray)) and raw[1] == size - 2 and raw[2] == 0x0A
            and raw[3] == size - 4):  # one short packed run filling the Feature: no walk needed
        tag = raw[0]
        if tag == 0x12 and size % 4 == 0:
            return "float", np.frombuffer(raw, dtype="<f4", offset=4).astype(np.float32)
        if tag == 0x1A:
            if raw.isascii():  # one-byte varints
                return "int64", np.frombuffer(raw, dtype=np.uint8, offset=4).astype(np.int64)
            if size - 4 <= _SMALL_RUN and raw[-1] < 0x80:
                try:
                    return "int64", _unsigned(decode_varint_list(bytes(raw[4:]), 4))
                except WireError:
                    pass  # the walk below names the error
    try:
        return _decode_feature(memoryview(raw), size)
    except WireError as bad:
        raise DecodeError(f"feature {key!r}: its tf.train.Feature ({len(raw)} bytes) {bad.message} (at byte {bad.pos})",
                          key=key, position=bad.pos) from None


def _decode_feature(buf: _Buf, end: int) -> tuple[FeatureKind | None, Values]:
    if end == 0:
        return None, []
    tag = buf[0]
    kind = FEATURE_KINDS.get(tag)
    if kind is None:
        number, wire, _ = read_tag(buf, 0, end)
        raise WireError(0, f"starts with field {number} ({WIRE_NAMES[wire]}): expected its list first (bytes_list, "
                      "float_list or int64_list)")
    start, stop = read_delimited(buf, 1, end, f"{kind} list")
    pos = stop
    while pos < end:  # only unknown fields may follow the list
        number, wire, after = read_tag(buf, pos, end)
        if number <= 3:
            raise WireError(pos, "holds a second list after its first (a Feature holds one list; TensorFlow's "
                            "parse_example reads the first, protobuf would merge them)")
        pos = skip_field(buf, after, end, wire)
    if kind == "bytes":
        return kind, _bytes_list(buf, start, stop)
    if kind == "float":
        return kind, _numeric_list(buf, start, stop, 0x0D, "float")
    return kind, _numeric_list(buf, start, stop, 0x08, "int64")


def _bytes_list(buf: _Buf, pos: int, end: int) -> list[bytes]:
    out = []
    while pos < end:
        if buf[pos] != 0x0A:
            number, wire, _ = read_tag(buf, pos, end)
            raise WireError(pos, f"has field {number} ({WIRE_NAMES[wire]}) in its bytes_list (expected only values)")
        start, pos = read_delimited(buf, pos + 1, end, "bytes value")
        out.append(bytes(buf[start:pos]))
    return out


def _numeric_list(buf: _Buf, pos: int, end: int, unpacked_tag: int, kind: str) -> np.ndarray:
    dtype = np.float32 if kind == "float" else np.int64
    if pos == end:
        return np.zeros(0, dtype=dtype)
    if buf[pos] == 0x0A:  # one packed run, then only unknown fields
        start, stop = read_delimited(buf, pos + 1, end, f"packed {kind} run")
        rest = stop
        while rest < end:
            number, wire, after = read_tag(buf, rest, end)
            if number == 1:
                raise WireError(rest, f"has more {kind} values after its packed run (TensorFlow's parse_example reads "
                                      "only the run, protobuf would append them)")
            rest = skip_field(buf, after, end, wire)
        if kind == "float":
            if (stop - start) % 4:
                raise WireError(start, f"has a packed float run of {stop - start} bytes, not a multiple of 4")
            return np.frombuffer(buf[start:stop], dtype="<f4").astype(np.float32)
        run = bytes(buf[start:stop])
        if run.isascii():  # every varint is one byte (values 0..127): the common case, one numpy call
            return np.frombuffer(run, dtype=np.uint8).astype(np.int64)
        if len(run) <= _SMALL_RUN:  # numpy's per-call cost dominates short runs: plain Python
            return _unsigned(decode_varint_list(run, start))
        return decode_packed_varints(np.frombuffer(run, dtype=np.uint8), start)
    if buf[pos] == unpacked_tag:  # only unpacked values
        values: list[Any] = []  # 4-byte floats, or ints
        while pos < end:
            if buf[pos] != unpacked_tag:
                number, wire, _ = read_tag(buf, pos, end)
                raise WireError(pos, f"has field {number} ({WIRE_NAMES[wire]}) among its unpacked {kind} values")
            if kind == "float":
                if pos + 5 > end:
                    raise WireError(pos, "ends inside a float value")
                values.append(bytes(buf[pos + 1 : pos + 5]))
                pos += 5
            else:
                value, pos = read_varint(buf, pos + 1, end)
                values.append(value & 0xFFFF_FFFF_FFFF_FFFF)
        if kind == "float":
            return np.frombuffer(b"".join(values), dtype="<f4").astype(np.float32)
        return np.array(values, dtype=np.uint64).view(np.int64)
    number, wire, _ = read_tag(buf, pos, end)
    raise WireError(pos, f"has field {number} ({WIRE_NAMES[wire]}) first in its {kind} list (expected values)")


_SMALL_RUN = 48  # packed int64 runs up to this many bytes are decoded without numpy's vector machinery


def _unsigned(values: list[int]) -> np.ndarray:
    """Unsigned 64-bit varint values as int64 (two's complement, as protobuf's int64)."""
    return np.array(values, dtype=np.uint64).view(np.int64)
