"""Propose a feature spec from the records themselves (`infer_features`, `tfr-torch schema`), and tell what kind
of message a record holds (`record_kind`: Example, SequenceExample, serialize_tensor payload or raw bytes)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from typing import Any, Final

import torch
from google.protobuf.message import DecodeError as _ProtoDecodeError

from tfr_torch.decode.dtypes import DType
from tfr_torch.decode.specs import FixedLenFeature, VarLenFeature, string
from tfr_torch.errors import DecodeError, TFRecordError
from tfr_torch.format._proto import raw_example_pb2
from tfr_torch.format.columns import decode_column, kind_of
from tfr_torch.format.options import CompressionOrAuto, FeatureKind, RecordKind, check_compression
from tfr_torch.format.paths import expand_paths
from tfr_torch.format.reader import read_records
from tfr_torch.format.tensor import DTYPES, TensorData, decode_tensor_proto

__all__ = ["InferredFeatures", "infer_features", "format_features", "record_kind", "classify_record"]

_DTYPE: dict[FeatureKind, DType] = {"float": torch.float32, "int64": torch.int64, "bytes": string}
_parse_raw_example = raw_example_pb2.RawExample.FromString
_parse_raw_sequence = raw_example_pb2.RawSequenceExample.FromString

EXAMPLE: Final = "example"
SEQUENCE_EXAMPLE: Final = "sequence_example"
TENSOR: Final = "tensor"
RAW: Final = "raw"


def _tensor(record: bytes) -> TensorData | None:
    try:
        return decode_tensor_proto(record)
    except DecodeError:
        return None


def classify_record(record: bytes) -> tuple[RecordKind, Any]:
    """`record_kind` and what it parsed: ("example", {key: raw Feature bytes}), ("sequence_example", (context
    {key: raw Feature bytes}, {key: [raw Feature bytes of each step]})), ("tensor", TensorData) or ("raw", None)."""
    record = bytes(record)
    if not record:
        return EXAMPLE, {}
    try:
        message = _parse_raw_sequence(record)
    except _ProtoDecodeError:
        message = None
    if message is not None:
        if message.feature_lists.feature_list:
            lists = {key: list(value.feature) for key, value in message.feature_lists.feature_list.items()}
            return SEQUENCE_EXAMPLE, (dict(message.context.feature), lists)
        if message.HasField("context"):
            return EXAMPLE, dict(message.context.feature)
    tensor = _tensor(record)
    if tensor is not None:
        return TENSOR, tensor
    try:
        example = _parse_raw_example(record)
    except _ProtoDecodeError:
        return RAW, None
    return (EXAMPLE, dict(example.features.feature)) if example.HasField("features") else (RAW, None)


def record_kind(record: bytes) -> RecordKind:
    """What a serialized record holds: "example" (a tf.train.Example, also the empty record), "sequence_example"
    (a SequenceExample with feature lists), "tensor" (a `tf.io.serialize_tensor` payload) or "raw" (none of them).

    A TensorProto parses as an empty Example (its fields have other wire types), so a non-empty record without
    an Example's `features` field is tried as a tensor before it is called an Example.

    >>> import numpy as np, tfr_torch
    >>> record_kind(tfr_torch.encode_example({"a": 1})), record_kind(tfr_torch.serialize_tensor(np.zeros(2)))
    ('example', 'tensor')
    """
    return classify_record(record)[0]


class InferredFeatures(dict[str, Any]):
    """The spec that `infer_features` proposes (a plain dict of feature specs, usable wherever one is) and what it
    was proposed from:

    - `records_read`: records looked at; `files_total` / `files_to_end`: files given and files read to their end
      (both None for an iterable of records); `per_file`: the most records read from one file;
    - `present`: for each key, how many of those records carry it with values (a key carried by fewer than
      `records_read` records is proposed as a VarLenFeature); `empty_keys`: keys seen only without values.
    """

    records_read: int = 0
    files_total: int | None = None
    files_to_end: int | None = None
    per_file: int | None = None
    present: dict[str, int]
    empty_keys: list[str]

    def describe(self) -> str:
        """One sentence: how many records of how many files the proposal is based on."""
        if self.files_total is None:
            return f"Proposed from {self.records_read:,} record{'s' * (self.records_read != 1)}"
        files = f"{self.files_total:,} file{'s' * (self.files_total != 1)}"
        if self.files_to_end == self.files_total:
            return f"Proposed from all {self.records_read:,} records of {files}"
        return (f"Proposed from {self.records_read:,} records of {files} (at most {self.per_file:,} from each; "
                f"{self.files_to_end:,} read to the end)")


def _from_files(paths: list[str], max_records: int, info: InferredFeatures,
                compression: CompressionOrAuto) -> Iterator[tuple[bytes, str, int]]:
    """The first records of every file: the budget is shared out evenly, at least one record per file, and what
    a short file leaves over goes to the files after it."""
    left, to_end, most = max_records, 0, 0
    for i, path in enumerate(paths):
        budget = max(1, left // (len(paths) - i))
        most = max(most, budget)
        n = 0
        with read_records(path, compression) as reader:
            records = iter(reader)
            offset = reader.offset
            for record in records:
                yield record, path, offset
                offset = reader.offset
                n += 1
                if n == budget:
                    break
            ended = n < budget
            if not ended:
                try:
                    ended = next(records, None) is None
                except TFRecordError:  # only peeking: a problem after the sample is not this function's to report
                    ended = False
        to_end += ended
        left = max(0, left - n)
    info.files_total, info.files_to_end, info.per_file = len(paths), to_end, most


def _is_paths(items: Any) -> bool:
    return isinstance(items, (str, os.PathLike)) or (
        isinstance(items, (list, tuple)) and bool(items) and isinstance(items[0], (str, os.PathLike)))


def infer_features(paths_or_records: Any, max_records: int = 1000,
                   compression: CompressionOrAuto = "auto") -> InferredFeatures:
    """Propose a spec for tf.train.Example records: FixedLenFeature where every record read carries the key with
    the same number of values (shape [] for one value, [n] otherwise), VarLenFeature otherwise; the dtype comes
    from the wire (float32, int64, or tfr_torch.string).

    From files (paths, globs, URLs) it reads about `max_records` records spread over every file: the first
    `max_records // len(files)` of each (at least one per file; a shorter file's share goes to the next ones).
    `compression` is the files' ("auto": from the name, else the first bytes). From an iterable of serialized
    records it reads the first `max_records`. The result is a dict of specs that
    also says what it was based on (`InferredFeatures`: records and files read, records carrying each key).

    >>> import tfr_torch
    >>> records = [tfr_torch.encode_example({"id": i, "tokens": list(range(i + 1))}) for i in range(3)]
    >>> spec = tfr_torch.infer_features(records)
    >>> spec["id"], spec["tokens"]
    (FixedLenFeature(shape=(), dtype=torch.int64, default_value=None), VarLenFeature(dtype=torch.int64))
    >>> spec.records_read, spec.present["tokens"]
    (3, 3)
    """
    if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
        raise ValueError(f"max_records must be a positive int, got {max_records!r}")
    check_compression(compression, auto=True)
    spec = InferredFeatures()
    if _is_paths(paths_or_records):
        sample: Iterable[tuple[bytes, str | None, int | None]] = _from_files(
            expand_paths(paths_or_records), max_records, spec, compression)
    else:
        sample = itertools.islice(((record, None, None) for record in paths_or_records), max_records)
    maps = []
    for i, (record, path, offset) in enumerate(sample):
        what, parsed = classify_record(record)
        if what == EXAMPLE:
            maps.append(parsed)
        elif what == SEQUENCE_EXAMPLE:
            raise DecodeError(f"record {i} is a tf.train.SequenceExample (feature lists "
                              f"{', '.join(map(repr, sorted(parsed[1])))}): infer_features proposes specs for "
                              "tf.train.Example records only; write the context and sequence specs for "
                              "parse_sequence_example by hand", path, offset)
        elif what == TENSOR:
            dtype = DTYPES[parsed.dtype][0]
            raise DecodeError(f"record {i} is a serialize_tensor payload ({dtype} {list(parsed.shape)}), not a "
                              f"tf.train.Example: no feature spec to propose; read such records with "
                              f"tfr_torch.parse_tensor(record, dtype=torch.{dtype})", path, offset)
        else:
            try:
                _parse_raw_example(bytes(record))
                why = f"its {len(record)} bytes hold no Features message"
            except _ProtoDecodeError as exc:
                why = str(exc)
            raise DecodeError(f"record {i} is not a tf.train.Example: {why}", path, offset)
    if not maps:
        raise ValueError("infer_features found no records to look at")
    spec.records_read = len(maps)
    spec.present, spec.empty_keys = {}, []
    for key in sorted({key for m in maps for key in m}):
        raws = [m.get(key) for m in maps]
        kinds = {found for found in (kind_of(raw, key) for raw in raws) if found is not None}
        if not kinds:
            spec.empty_keys.append(key)  # only kind-less Features: nothing to propose
            continue
        if len(kinds) > 1:
            raise DecodeError(f"feature {key!r} holds {' and '.join(sorted(kinds))} values in different records; "
                              "a spec needs one kind")
        kind = kinds.pop()
        column = decode_column(raws, kind, key)
        spec.present[key] = int(column.present.sum())
        counts = set(column.counts[column.present].tolist())
        if column.present.all() and len(counts) == 1:
            n = counts.pop()
            spec[key] = FixedLenFeature([] if n == 1 else [n], _DTYPE[kind])
        else:
            spec[key] = VarLenFeature(_DTYPE[kind])
    return spec


def format_features(spec: dict[str, Any], name: str = "features") -> str:
    """Python code that rebuilds `spec` (what `tfr-torch schema` prints). For an `InferredFeatures`, comments
    say what it was proposed from and mark the keys that not every record carries."""
    def dtype(d: Any) -> str:
        return "tfr_torch.string" if d == string else f"torch.{str(d).removeprefix('torch.')}"

    lines = []
    info = spec if isinstance(spec, InferredFeatures) and spec.records_read > 0 else None
    if info is not None:
        lines += [f"# {info.describe()}.",
                  "# VarLenFeature: the count of values varies, or some records lack the key (noted beside it)."]
    lines += ["import torch", "", "import tfr_torch", "", f"{name} = {{"]
    for key, s in spec.items():
        if isinstance(s, FixedLenFeature):
            shape = "[" + ", ".join(map(str, s.shape)) + "]"
            line = f"    {key!r}: tfr_torch.FixedLenFeature({shape}, {dtype(s.dtype)}),"
        else:
            line = f"    {key!r}: tfr_torch.VarLenFeature({dtype(s.dtype)}),"
        if info is not None and info.present.get(key, info.records_read) < info.records_read:
            line += f"  # in {info.present[key]:,} of {info.records_read:,} records read"
        lines.append(line)
    if info is not None:
        lines += [f"    # {key!r}: no values in any record read (a Feature without a kind): no spec proposed"
                  for key in info.empty_keys]
    lines.append("}")
    return "\n".join(lines) + "\n"
