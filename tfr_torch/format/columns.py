"""Column-wise decoding of tf.train.Feature values across a batch of records (torch-free).

A batch decoder gathers, for one feature key, the raw Feature bytes of every record (None where absent) and
calls `decode_column`, which returns the values of all records concatenated plus a count per record. Canonical
Features (what TensorFlow and tfr_torch write: one packed list) are split with a few byte comparisons and their
payloads decoded in bulk with numpy (floats by reinterpreting bytes, varints with a vectorised decoder); every
other encoding goes through format.strict, which accepts it where TensorFlow's parse_example and protobuf agree
and raises DecodeError otherwise. This is the reference the compiled decoder (tfr_torch._native) is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Union, cast

import numpy as np

from tfr_torch.errors import DecodeError
from tfr_torch.format.options import FeatureKind
from tfr_torch.format.strict import FEATURE_KINDS, FEATURE_TAGS, decode_feature
from tfr_torch.format.wire import (
    VARINT_CUT,
    VARINT_LONG,
    WireError,
    decode_packed_varints,
    decode_varint_list,
    read_short_varints,
    read_varint,
)

__all__ = ["Column", "ColumnKindError", "decode_column", "decode_varints", "kind_of"]

_TAG_BYTES = FEATURE_TAGS["bytes"]  # Feature list tags <-> kinds: format.strict's FEATURE_KINDS / FEATURE_TAGS

Values = Union[np.ndarray, list[bytes]]


class Column(NamedTuple):
    """One feature across a batch: `present[i]` (the record has the feature with a kind set), `counts[i]` (its
    number of values, 0 when absent) and `values`, all records' values concatenated (float32 or int64 array,
    or list of bytes). `uniform`, when not -1, says every record has the feature with that many values."""

    present: np.ndarray
    counts: np.ndarray
    values: Values
    uniform: int = -1  # when known: every record has the feature with this many values (a dense column)

    def row(self, i: int) -> Values:
        start = int(self.counts[:i].sum())
        return self.values[start : start + int(self.counts[i])]


class ColumnKindError(DecodeError):
    """A record's feature has another kind than the one asked for. `.index` is the record's position in the
    batch, `.found` and `.expected` the kinds ('float', 'int64' or 'bytes')."""

    index: int  # always set here (DecodeError's may be None)
    _carried = DecodeError._carried + ("found", "expected")

    def __init__(self, key: str, index: int | None = None, found: str = "", expected: str = "") -> None:
        self.found, self.expected = found, expected
        if index is None:  # one text: torch's DataLoader re-raising the error of a worker (errors.py reads it)
            super().__init__(key)
            return
        super().__init__(f"feature {key!r} in record {index} holds {found} values, expected {expected}", key=key,
                         index=index)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A varint at `pos`: (value, position after it), or (-1, pos) when it is cut or too long (not canonical)."""
    try:
        return read_varint(buf, pos, len(buf))
    except WireError:
        return -1, pos


def _split(raw: bytes) -> tuple[int, int] | None:
    """For a canonical Feature (one kind, one packed run or an empty list) return (tag, payload start);
    the payload runs to the end of `raw`. None means: not canonical, use protobuf."""
    n = len(raw)
    if n < 2:
        return None
    tag = raw[0]
    length = raw[1]
    pos = 2
    if length >= 0x80:
        length, pos = _varint(raw, 1)
    if pos + length != n or tag not in FEATURE_KINDS:
        return None
    if length == 0 or tag == _TAG_BYTES:
        return tag, pos
    if raw[pos] != 0x0A or pos + 1 >= n:  # not one packed run, or its length byte is missing
        return None
    inner = raw[pos + 1]
    start = pos + 2
    if inner >= 0x80:
        inner, start = _varint(raw, pos + 1)
    if start + inner != n:
        return None
    return tag, start


def _slow(raw: bytes, key: str) -> tuple[FeatureKind | None, Values]:
    """Any Feature that is not one canonical packed list: format.strict's rules decide (kind or None when no kind
    is set, values), or raise DecodeError naming the byte offset."""
    return decode_feature(raw, key)


def kind_of(raw: bytes | None, key: str = "?") -> FeatureKind | None:
    """The kind of one raw Feature ('bytes', 'float', 'int64'), or None when absent or kind-less."""
    if raw is None:
        return None
    split = _split(raw)
    if split is not None:
        return FEATURE_KINDS[split[0]]
    return _slow(raw, key)[0]


_VARINT_ERRORS = {VARINT_CUT: "the packed int64 list ends inside a varint",
                  VARINT_LONG: "a varint in the packed int64 list is longer than 10 bytes"}


def decode_varints(buf: np.ndarray) -> np.ndarray:
    """Decode a uint8 array of concatenated varints into int64 values (two's complement, as protobuf's int64).
    Raises ValueError if the buffer ends inside a varint or a varint is longer than 10 bytes."""
    try:
        return decode_packed_varints(buf)
    except WireError as err:
        raise ValueError(_VARINT_ERRORS[err.message]) from None


def decode_column(raws: Sequence[bytes | None], kind: FeatureKind, key: str) -> Column:
    """Decode one feature of every record. `kind` is the kind expected ('float', 'int64' or 'bytes'); a record
    whose feature has another kind raises ColumnKindError; absent or kind-less features count as not present."""
    if kind == "bytes":
        return _bytes_column(raws, key)
    tag = FEATURE_TAGS[kind]
    fast = _few_numeric(raws, tag, kind) if len(raws) <= _FEW else None
    if fast is None:
        fast = _bulk_numeric(raws, tag, kind, key)
    if fast is not None:
        return fast
    return _numeric_by_record(raws, tag, kind, key)


def _bytes_column(raws: Sequence[bytes | None], key: str) -> Column:
    """A bytes column: one short or long string per record split by byte comparisons, anything else by the rules."""
    n = len(raws)
    present = np.zeros(n, dtype=bool)
    counts = np.zeros(n, dtype=np.int64)
    out: list[bytes] = []
    for i, raw in enumerate(raws):
        if raw is None:
            continue
        n = len(raw)
        if 4 <= n < 0x80 and raw[0] == 0x0A and raw[2] == 0x0A and raw[1] == n - 2 and raw[3] == n - 4:
            present[i] = True  # the common case, one short string: 0a L 0a l <bytes>
            counts[i] = 1
            out.append(raw[4:])
            continue
        if n >= 0x80 and raw[0] == 0x0A:  # one long string: 0a L(varint) 0a l(varint) <bytes>
            outer, p = _varint(raw, 1)
            if p + outer == n and p < n and raw[p] == 0x0A:
                inner, q = _varint(raw, p + 1)
                if q + inner == n:
                    present[i] = True
                    counts[i] = 1
                    out.append(raw[q:])
                    continue
        found, values = _slow(raw, key)
        if found is None:
            continue
        if found != "bytes":
            raise ColumnKindError(key, i, found, "bytes")
        present[i] = True
        counts[i] = len(values)
        out.extend(values)
    return Column(present, counts, out)


def _numeric_by_record(raws: Sequence[bytes | None], tag: int, kind: str, key: str) -> Column:
    """A numeric column record by record (what the array paths decline: long lists, uncommon encodings, errors):
    canonical payloads decoded together, other encodings by the rules, kind mismatches reported."""
    n = len(raws)
    present = np.zeros(n, dtype=bool)
    counts = np.zeros(n, dtype=np.int64)
    chunks: list[memoryview | None] = []  # None where `slow` holds the record's values
    slow: dict[int, np.ndarray] = {}
    for i, raw in enumerate(raws):
        if raw is None:
            continue
        split = _split(raw)
        if split is None:
            found, values = _slow(raw, key)
            if found is None:
                continue
            if found != kind:
                raise ColumnKindError(key, i, found, kind)
            present[i] = True
            slow[i] = np.asarray(values)  # a numeric kind: already an array
            chunks.append(None)
            continue
        found_tag, start = split
        if found_tag != tag:
            raise ColumnKindError(key, i, FEATURE_KINDS[found_tag], kind)
        present[i] = True
        chunks.append(memoryview(raw)[start:])
    if slow:  # rare: mix canonical payloads and protobuf-decoded arrays in record order
        pieces = []
        it = iter(chunks)
        for i in np.flatnonzero(present).tolist():
            chunk = next(it)
            pieces.append(slow[i] if chunk is None else _decode_payloads([chunk], kind, key)[0])
        counts[present] = [len(p) for p in pieces]
        dtype = np.float32 if kind == "float" else np.int64
        values = np.concatenate(pieces).astype(dtype, copy=False) if pieces else np.zeros(0, dtype)
        return Column(present, counts, values)
    values, per_chunk = _decode_payloads(cast("list[memoryview]", chunks), kind, key)  # no None without `slow`
    counts[present] = per_chunk
    return Column(present, counts, values)


# A column of at most this many records (parse_single_example: one) with short numeric lists is decoded in plain
# Python: the array path's dozen numpy calls cost more than the work itself
_FEW = 8
_FEW_BYTES = 512


def _few_numeric(raws: Sequence[bytes | None], tag: int, kind: str) -> Column | None:
    """A numeric column of a few canonical Features with short payloads; None sends the caller to the array path."""
    n = len(raws)
    present = np.zeros(n, dtype=bool)
    counts = np.zeros(n, dtype=np.int64)
    payloads = []
    for i, raw in enumerate(raws):
        if raw is None:
            continue
        split = _split(raw)
        if split is None or split[0] != tag or len(raw) - split[1] > _FEW_BYTES:
            return None
        payloads.append(raw[split[1]:])
        present[i] = True
    if kind == "float":
        sizes = [len(p) for p in payloads]
        if any(size % 4 for size in sizes):
            return None
        counts[present] = [size // 4 for size in sizes]
        return Column(present, counts, np.frombuffer(b"".join(payloads), dtype="<f4").astype(np.float32))
    values: list[int] = []
    per = []
    for payload in payloads:
        if not payload:
            per.append(0)
            continue
        try:
            got = decode_varint_list(payload)
        except WireError:
            return None  # malformed: the array path reports it
        values.extend(got)
        per.append(len(got))
    counts[present] = per
    return Column(present, counts, np.array(values, dtype=np.uint64).view(np.int64))


def _bulk_numeric(raws: Sequence[bytes | None], tag: int, kind: str, key: str) -> Column | None:
    """Decode a numeric column with array operations when every present Feature is canonical with short length
    fields (lists of up to 4095 bytes); None sends the caller to the per-record path (which also reports errors)."""
    n = len(raws)
    if None in raws:
        present = np.fromiter((raw is not None for raw in raws), dtype=bool, count=n)
        chosen: Sequence[bytes] = [raw for raw in raws if raw is not None]
    else:
        present, chosen = np.ones(n, dtype=bool), cast("Sequence[bytes]", raws)  # no None in it
    if not chosen:
        return None
    sizes = np.fromiter(map(len, chosen), dtype=np.int64, count=len(chosen))
    if sizes.min() < 2:
        return None  # kind-less Features
    flat = np.frombuffer(b"".join(chosen), dtype=np.uint8)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    if (flat[starts] != tag).any():
        return None
    outer = read_short_varints(flat, starts + 1)
    if outer is None:
        return None
    length, pos = outer
    if (pos + length != ends).any():
        return None
    nonempty = length > 0
    payload_start = pos.copy()
    payload_size = np.zeros(len(chosen), dtype=np.int64)
    if nonempty.any():
        p = pos[nonempty]
        if (flat[p] != 0x0A).any() or (p + 1 >= ends[nonempty]).any():  # not a packed run, or its length is cut
            return None
        inner = read_short_varints(flat, p + 1)
        if inner is None:
            return None
        inner_length, q = inner
        if (q + inner_length != ends[nonempty]).any():
            return None
        payload_start[nonempty] = q
        payload_size[nonempty] = inner_length
    total = int(payload_size.sum())
    offsets = np.cumsum(payload_size) - payload_size
    payload = flat[np.arange(total) + np.repeat(payload_start - offsets, payload_size)] if total else flat[:0]
    if kind == "float":
        if (payload_size % 4).any():
            return None
        values = payload.view("<f4").astype(np.float32)
        per = payload_size // 4
    else:
        try:
            values = decode_varints(payload)
        except ValueError:
            return None
        ends_p = np.cumsum(payload_size)
        if (flat.size and total and (payload[ends_p[payload_size > 0] - 1] >= 0x80).any()):
            return None
        terminators = np.concatenate(([0], np.cumsum(payload < 0x80)))
        per = terminators[ends_p] - terminators[ends_p - payload_size]
    counts = np.zeros(n, dtype=np.int64)
    counts[present] = per
    return Column(present, counts, values)


def _decode_payloads(chunks: Sequence[bytes | memoryview], kind: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Decode packed payloads; return (all values, count per payload)."""
    sizes = np.fromiter((len(c) for c in chunks), dtype=np.int64, count=len(chunks))
    flat = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    if kind == "float":
        if (sizes % 4).any():
            bad = int(np.flatnonzero(sizes % 4)[0])
            raise DecodeError(f"feature {key!r}: a packed float list of {sizes[bad]} bytes is not a multiple of 4")
        return flat.view("<f4").astype(np.float32), sizes // 4
    try:
        values = decode_varints(flat)
    except ValueError as exc:
        raise DecodeError(f"feature {key!r}: {exc}") from None
    ends = np.cumsum(sizes)
    nonempty = sizes > 0
    if (flat[ends[nonempty] - 1] >= 0x80).any():  # each payload must end on a varint boundary
        raise DecodeError(f"feature {key!r}: a packed int64 list ends inside a varint")
    terminators = np.concatenate(([0], np.cumsum(flat < 0x80)))
    return values, terminators[ends] - terminators[ends - sizes]
