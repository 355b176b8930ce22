"""Propose a feature spec from the records themselves (`infer_features`, `tfr-torch schema`)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from typing import Any

import torch
from google.protobuf.message import DecodeError as _ProtoDecodeError

from tfr_torch.decode.specs import FixedLenFeature, VarLenFeature, string
from tfr_torch.errors import DecodeError
from tfr_torch.format._proto import raw_example_pb2
from tfr_torch.format.columns import decode_column, kind_of
from tfr_torch.format.paths import expand_paths
from tfr_torch.format.reader import read_records

__all__ = ["infer_features", "format_features"]

_DTYPE = {"float": torch.float32, "int64": torch.int64, "bytes": string}


def _records(paths_or_records: Any, max_records: int) -> Iterable[tuple[bytes, str | None, int | None]]:
    """(record, path, offset) for at most `max_records` records of files or of an iterable of records."""
    items = paths_or_records
    if isinstance(items, (str, os.PathLike)) or (isinstance(items, (list, tuple)) and items and
                                                 isinstance(items[0], (str, os.PathLike))):
        def from_files():
            for path in expand_paths(items):
                with read_records(path) as reader:
                    offset = reader.offset
                    for record in reader:
                        yield record, path, offset
                        offset = reader.offset
        return itertools.islice(from_files(), max_records)
    return itertools.islice(((record, None, None) for record in items), max_records)


def infer_features(paths_or_records: Any, max_records: int = 1000) -> dict[str, Any]:
    """Propose a spec for tf.train.Example records: FixedLenFeature where every record carries the key with the
    same number of values (shape [] for one value, [n] otherwise), VarLenFeature otherwise; the dtype comes
    from the wire (float32, int64, or tfr_torch.string). Reads at most `max_records` records from files (paths,
    globs, URLs) or from an iterable of serialized records.

    >>> import tfr_torch
    >>> records = [tfr_torch.encode_example({"id": i, "tokens": list(range(i + 1))}) for i in range(3)]
    >>> spec = tfr_torch.infer_features(records)
    >>> spec["id"], spec["tokens"]
    (FixedLenFeature(shape=(), dtype=torch.int64, default_value=None), VarLenFeature(dtype=torch.int64))
    """
    if not isinstance(max_records, int) or max_records < 1:
        raise ValueError(f"max_records must be a positive int, got {max_records!r}")
    maps = []
    for i, (record, path, offset) in enumerate(_records(paths_or_records, max_records)):
        try:
            maps.append(dict(raw_example_pb2.RawExample.FromString(bytes(record)).features.feature))
        except _ProtoDecodeError as exc:
            raise DecodeError(f"record {i} is not a tf.train.Example: {exc}", path, offset) from None
    if not maps:
        raise ValueError("infer_features found no records to look at")
    keys = sorted({key for m in maps for key in m})
    spec: dict[str, Any] = {}
    for key in keys:
        raws = [m.get(key) for m in maps]
        kinds = {kind_of(raw, key) for raw in raws} - {None}
        if not kinds:
            continue  # only kind-less Features: nothing to propose
        if len(kinds) > 1:
            raise DecodeError(f"feature {key!r} holds {' and '.join(sorted(kinds))} values in different records; "
                              "a spec needs one kind")
        kind = kinds.pop()
        column = decode_column(raws, kind, key)
        counts = set(column.counts[column.present].tolist())
        if column.present.all() and len(counts) == 1:
            n = counts.pop()
            spec[key] = FixedLenFeature([] if n == 1 else [n], _DTYPE[kind])
        else:
            spec[key] = VarLenFeature(_DTYPE[kind])
    return spec


def format_features(spec: dict[str, Any], name: str = "features") -> str:
    """Python code that rebuilds `spec` (what `tfr-torch schema` prints)."""
    def dtype(d: Any) -> str:
        return "tfr_torch.string" if d == string else f"torch.{str(d).removeprefix('torch.')}"

    lines = ["import torch", "", "import tfr_torch", "", f"{name} = {{"]
    for key, s in spec.items():
        if isinstance(s, FixedLenFeature):
            shape = "[" + ", ".join(map(str, s.shape)) + "]"
            lines.append(f"    {key!r}: tfr_torch.FixedLenFeature({shape}, {dtype(s.dtype)}),")
        else:
            lines.append(f"    {key!r}: tfr_torch.VarLenFeature({dtype(s.dtype)}),")
    lines.append("}")
    return "\n".join(lines) + "\n"
