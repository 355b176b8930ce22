"""`tfr-torch inspect`: what is in some TFRecord files.

Per file: records, bytes, compression. Over the records read (all, or the first `max_records` of each file),
in constant memory: what kind of message they are; for Examples (and SequenceExample contexts) each feature's
kind, the dtype a spec would use, how many records carry it, its count of values per record and its value range
(min/max of numbers, lengths of bytes); for SequenceExample feature lists the same per step; for
serialize_tensor payloads each dtype's shapes and value range.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tfr_torch.decode.record_kinds import EXAMPLE, RAW, SEQUENCE_EXAMPLE, TENSOR, classify_record
from tfr_torch.errors import DecodeError
from tfr_torch.format.columns import decode_column, kind_of
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.options import CompressionOrAuto, FeatureKind, check_compression
from tfr_torch.format.paths import as_path, file_size, is_url
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.tensor import DTYPES
from tfr_torch.tools.progress import Progress

__all__ = ["inspect_files"]

_CHUNK = 1024  # records decoded column-wise at a time
_CHUNK_BYTES = 8 << 20  # ... or fewer, once the records held add up to this many bytes (large images)
_DTYPES = {"float": "float32", "int64": "int64", "bytes": "string"}
_KIND_NAMES = {EXAMPLE: "tf.train.Example", SEQUENCE_EXAMPLE: "tf.train.SequenceExample",
               TENSOR: "serialize_tensor payload", RAW: "raw (none of these)"}
_HEAD = ["key", "kind", "dtype", "records", "values min/mean/max", "min", "max"]


@dataclass
class _Range:
    """Running min/max of numbers (NaN counted apart) or of byte-string lengths."""

    low: Any = None
    high: Any = None
    nan: int = 0

    def add(self, values: Any) -> None:
        if isinstance(values, list):  # bytes values: their lengths
            if not values:
                return
            lengths = [len(v) for v in values]
            low, high = min(lengths), max(lengths)
        else:
            array = np.asarray(values)
            if array.size == 0:
                return
            if array.dtype.kind in "fc":
                if array.dtype.kind == "c":
                    array = np.abs(array)
                nans = np.isnan(array)
                self.nan += int(nans.sum())
                array = array[~nans]
                if array.size == 0:
                    return
            low, high = array.min().item(), array.max().item()
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def cells(self, unit: str = "") -> list[str]:
        if self.low is None:
            return ["-", "-"]
        return [_number(self.low) + unit, _number(self.high) + unit]


def _cell(text: str) -> str:
    """Text as one cell of a tab-separated line: a key holding tabs or line breaks (any string is a valid feature
    key) is shown escaped, as Python writes it, so the table keeps its columns."""
    return text if text.isprintable() else repr(text)[1:-1]


def _number(value: Any) -> str:
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.7g}"
    return str(value)


@dataclass
class _Feature:
    """One feature key over the records read: its kinds, how many records carry it, values per record."""

    kinds: set[str] = field(default_factory=set)
    records: int = 0
    count_min: int | None = None
    count_max: int = 0
    count_sum: int = 0
    values: _Range = field(default_factory=_Range)
    malformed: str | None = None
    steps: _Range = field(default_factory=_Range)  # feature lists: steps per record

    def add(self, raws: list[bytes | None], key: str) -> None:
        """Add one chunk of raw Feature bytes (None where a record lacks the key)."""
        found: list[FeatureKind | None] = []
        malformed = False
        for raw in raws:
            try:
                found.append(kind_of(raw, key))
            except DecodeError as exc:  # noted, and left out like an absent one (the rest of the chunk is kept)
                self.malformed = self.malformed or exc.message
                found.append(None)
                malformed = True
        kinds = {kind for kind in found if kind is not None}
        self.kinds |= kinds
        for kind in sorted(kinds):
            whole = len(kinds) == 1 and not malformed
            chosen = raws if whole else [r if k == kind else None for r, k in zip(raws, found)]
            try:
                column = decode_column(chosen, kind, key)
            except DecodeError as exc:
                self.malformed = self.malformed or exc.message
                continue
            counts = column.counts[column.present]
            if counts.size:
                self.records += int(counts.size)
                self.count_min = int(counts.min()) if self.count_min is None else min(self.count_min, int(counts.min()))
                self.count_max = max(self.count_max, int(counts.max()))
                self.count_sum += int(counts.sum())
            self.values.add(column.values)

    def cells(self, key: str) -> list[str]:
        key = _cell(key)
        if len(self.kinds) != 1:
            return [key, "/".join(sorted(self.kinds)) or "no kind", "-", str(self.records), "-", "-", "-"]
        kind = next(iter(self.kinds))
        counts = "-" if not self.records else f"{self.count_min}/{self.count_sum / self.records:.2f}/{self.count_max}"
        row = [key, f"{kind}_list", _DTYPES[kind], str(self.records), counts,
               *self.values.cells(" bytes" if kind == "bytes" else "")]
        notes = []
        if self.values.nan:
            notes.append(f"{self.values.nan} NaN")
        if self.malformed:
            notes.append(f"malformed: {_cell(self.malformed)}")
        return row + (["; ".join(notes)] if notes else [])


@dataclass
class _Tensors:
    """serialize_tensor payloads of one dtype: shapes seen and value range."""

    records: int = 0
    shapes: dict[tuple[int, ...], int] = field(default_factory=dict)  # shape -> records (at most _SHAPES kept)
    values: _Range = field(default_factory=_Range)

    def add(self, tensor: Any) -> None:
        self.records += 1
        shape = tuple(tensor.shape)
        if shape in self.shapes or len(self.shapes) < 8:
            self.shapes[shape] = self.shapes.get(shape, 0) + 1
        values = tensor.values
        if isinstance(values, bytes):  # a scalar string tensor: its one value
            values = [values]
        if isinstance(values, list):  # strings, nested like the shape
            flat: list[Any] = []
            stack = [values]
            while stack:
                item = stack.pop()
                if isinstance(item, list):
                    stack.extend(item)
                else:
                    flat.append(item)
            self.values.add(flat)
        else:
            array = np.asarray(values)
            if tensor.dtype == 14:  # bfloat16 bits -> float32
                array = (array.astype(np.uint32) << 16).view(np.float32)
            self.values.add(array)

    def shape_text(self) -> str:
        shapes = sorted(self.shapes, key=lambda s: (-self.shapes[s], s))
        text = ", ".join(f"{list(s)}" + (f" x{self.shapes[s]}" if len(shapes) > 1 else "") for s in shapes)
        return text + (", ..." if sum(self.shapes.values()) < self.records else "")


class _Report:
    """Statistics of every record read, kept per chunk so memory stays constant whatever the number of records."""

    def __init__(self) -> None:
        self.kinds: dict[str, int] = {}
        self.features: dict[str, _Feature] = {}
        self.lists: dict[str, _Feature] = {}
        self.list_records: dict[str, int] = {}
        self.tensors: dict[str, _Tensors] = {}
        self._contexts: list[Mapping[str, bytes]] = []  # raw Features by key, per record
        self._lists: list[Mapping[str, Sequence[bytes]]] = []  # raw Features by key and step, per record
        self._held = 0  # bytes of the records whose raw Features are held

    def add(self, record: bytes) -> None:
        kind, parsed = classify_record(record)
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if kind == EXAMPLE:
            self._contexts.append(parsed)
            self._held += len(record)
        elif kind == SEQUENCE_EXAMPLE:
            self._contexts.append(parsed[0])
            self._lists.append(parsed[1])
            self._held += len(record)
        elif kind == TENSOR:
            self.tensors.setdefault(DTYPES[parsed.dtype][0], _Tensors()).add(parsed)
        if len(self._contexts) >= _CHUNK or len(self._lists) >= _CHUNK or self._held >= _CHUNK_BYTES:
            self.flush()

    def flush(self) -> None:
        self._held = 0
        maps, self._contexts = self._contexts, []
        for key in sorted({k for m in maps for k in m}):
            self.features.setdefault(key, _Feature()).add([m.get(key) for m in maps], key)
        lists, self._lists = self._lists, []
        for key in sorted({k for m in lists for k in m}):
            stats = self.lists.setdefault(key, _Feature())
            steps = [m[key] for m in lists if key in m]
            self.list_records[key] = self.list_records.get(key, 0) + len(steps)
            stats.steps.add(np.array([len(s) for s in steps]))
            stats.add([raw for s in steps for raw in s], key)

    def text(self, read: int, max_records: int | None) -> list[str]:
        self.flush()
        which = f"at most {max_records} per file" if max_records is not None else "every record"
        kinds = ", ".join(f"{_KIND_NAMES[k]}: {n}" for k, n in sorted(self.kinds.items(), key=lambda kv: -kv[1]))
        lines = [f"records read: {read} ({which}); {kinds or 'none'}"]
        if self.features:
            context = " (Examples, and SequenceExamples' context)" if SEQUENCE_EXAMPLE in self.kinds else ""
            lines += ["", f"features{context}:", "\t".join(_HEAD)]
            lines += ["\t".join(self.features[key].cells(key)) for key in sorted(self.features)]
        if self.lists:
            lines += ["", "feature lists (SequenceExamples; values per step):",
                      "\t".join(_HEAD[:3] + ["records", "steps min/max", "steps"] + _HEAD[4:])]
            for key in sorted(self.lists):
                stats = self.lists[key]
                cells = stats.cells(key)
                cells[3:3] = [str(self.list_records[key]), "/".join(stats.steps.cells())]
                lines.append("\t".join(cells))
        if self.tensors:
            lines += ["", "tensors (serialize_tensor payloads):", "dtype\trecords\tshape\tmin\tmax"]
            for dtype in sorted(self.tensors):
                t = self.tensors[dtype]
                unit = " bytes" if dtype == "string" else ""
                row = [dtype, str(t.records), t.shape_text(), *t.values.cells(unit)]
                lines.append("\t".join(row + ([f"{t.values.nan} NaN"] if t.values.nan else [])))
        return lines


def _known_size(path: str) -> int | None:
    """The size of the file at `path`; None for a local pipe, FIFO, socket or device (`<(cat f)`, /dev/stdin), whose
    st_size (0) says nothing about what it holds."""
    path = as_path(path)  # a file:// URL: its local path
    if not is_url(path):
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return None
    return file_size(path)


def _bytes_cell(size: int | None) -> str:
    return "unknown" if size is None else str(size)


def inspect_files(paths: Sequence[str], compression: CompressionOrAuto = "auto", max_records: int | None = None, *,
                  progress: bool = False) -> str:
    """A text report (tab-separated tables): each file's records, bytes and compression; then, over the records
    read (every record, or the first `max_records` of each file), the kinds of records and, per feature key, its
    kind, the dtype a spec would use, how many records carry it, its values per record (min/mean/max) and the
    range of its values (numbers: min and max, NaN counted apart; bytes: shortest and longest). serialize_tensor
    payloads get their dtypes, shapes and value ranges. Every record's CRCs are checked. A pipe's bytes are those
    read from it (its size is known once it is read to the end); a compressed pipe's, which only the decompressor
    sees, are "unknown".

    >>> print(inspect_files(["train.tfrecord"]))  # doctest: +SKIP
    """
    if max_records is not None and (not isinstance(max_records, int) or max_records < 1):
        raise ValueError(f"max_records must be None or a positive int, got {max_records!r}")
    check_compression(compression, auto=True)
    known = [_known_size(path) for path in paths]
    sizes: list[int | None] = []
    lines = ["file\trecords\tbytes\tcompression"]
    report = _Report()
    read = 0
    counts: list[int] = []
    meter = Progress(label="inspect", enabled=progress, unit="records",
                     total_bytes=None if None in known else sum(k for k in known if k is not None))
    for path, size in zip(paths, known):
        with RecordReader(path, compression, verify=True) as reader:
            if reader.compression != "none":
                meter.unknown_total()
            n = 0
            for record in reader:
                n += 1
                meter.update(1, len(record) + OVERHEAD)
                if max_records is None or n <= max_records:
                    report.add(record)
                    read += 1
        if size is None and reader.compression == "none":
            size = reader.offset  # a pipe read to its end (every record checked): the stream's size is known now
        counts.append(n)
        sizes.append(size)
        lines.append(f"{_cell(path)}\t{n}\t{_bytes_cell(size)}\t{reader.compression}")
    meter.done()
    if len(paths) > 1:
        total = None if None in sizes else sum(s for s in sizes if s is not None)
        lines.append(f"total\t{sum(counts)}\t{_bytes_cell(total)}")
    lines.append("")
    lines += report.text(read, max_records)
    return "\n".join(lines) + "\n"
