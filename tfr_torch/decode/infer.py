"""Propose a feature spec from the records themselves (`infer_features`, `tfr-torch schema`): records sampled from
every file, summarized chunk by chunk per key, and the proposal with what it was based on. What kind of message a
record holds is decode/record_kinds.py; the proposal printed as code, decode/spec_code.py."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from tfr_torch.decode.dtypes import DType
from tfr_torch.decode.record_kinds import EXAMPLE, SEQUENCE_EXAMPLE, TENSOR, _why_not_example, classify_record
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, string
from tfr_torch.errors import DecodeError, TFRecordError
from tfr_torch.format.columns import decode_column, kind_of
from tfr_torch.format.options import CompressionOrAuto, FeatureKind, check_compression
from tfr_torch.format.paths import expand_paths
from tfr_torch.format.reader import read_records
from tfr_torch.format.tensor import DTYPES

__all__ = ["InferredFeatures", "InferredSequenceFeatures", "infer_features"]

_DTYPE: dict[FeatureKind, DType] = {"float": torch.float32, "int64": torch.int64, "bytes": string}


class NoRecordsError(ValueError):
    """infer_features was given no records (empty files, or an empty iterable)."""


class _Provenance:
    """What a proposal was based on (see InferredFeatures)."""

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


class _Info(_Provenance):
    """The provenance gathered while reading, copied onto the proposal at the end."""

    def fill(self, spec: _Provenance) -> None:
        spec.records_read, spec.files_total = self.records_read, self.files_total
        spec.files_to_end, spec.per_file = self.files_to_end, self.per_file
        spec.present, spec.empty_keys = self.present, self.empty_keys


class InferredFeatures(dict[str, Any], _Provenance):
    """The spec that `infer_features` proposes for Examples (a plain dict of feature specs, usable wherever one
    is) and what it was proposed from:

    - `records_read`: records looked at; `files_total` / `files_to_end`: files given and files read to their end
      (both None for an iterable of records); `per_file`: the most records read from one file;
    - `present`: for each key, how many of those records carry it with values (a key carried by fewer than
      `records_read` records is proposed as a VarLenFeature); `empty_keys`: keys seen only without values.
    """


class InferredSequenceFeatures(SequenceFeatures, _Provenance):
    """The SequenceFeatures that `infer_features` proposes for SequenceExamples, and what it was proposed from:
    as InferredFeatures, `present` and `empty_keys` for the context, and for the feature lists `list_present`
    (records carrying each list) and `empty_lists` (lists whose steps never held values: no spec proposed)."""

    list_present: dict[str, int]
    empty_lists: list[str]


def _from_files(paths: list[str], max_records: int, info: _Provenance,
                compression: CompressionOrAuto) -> Iterator[tuple[bytes, int, str, int]]:
    """The first records of every file, each with its number in its file, the file and its offset: the budget is
    shared out evenly, at least one record per file, and what a short file leaves over goes to the files after it."""
    left, to_end, most = max_records, 0, 0
    for i, path in enumerate(paths):
        budget = max(1, left // (len(paths) - i))
        most = max(most, budget)
        n = 0
        with read_records(path, compression) as reader:
            records = iter(reader)
            offset = reader.offset
            for record in records:
                yield record, n, path, offset
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



_RECORD_TYPES = (bytes, bytearray, memoryview)  # (np.bytes_ is bytes)


def _from_records(records: Iterable[Any], max_records: int) -> Iterator[tuple[Any, int, None, None]]:
    """The first `max_records` of an iterable of serialized records, each with its number; an item that is not
    bytes is refused (bytes(n) of an int would be n zero bytes)."""
    for i, record in enumerate(itertools.islice(records, max_records)):
        if not isinstance(record, _RECORD_TYPES):
            raise TypeError(f"infer_features: record {i} has type {type(record).__name__} ({record!r:.60}); "
                            "expected a serialized record (bytes)")
        yield record, i, None, None


def _is_paths(items: Any) -> bool:
    return isinstance(items, (str, os.PathLike)) or (
        isinstance(items, (list, tuple)) and bool(items) and isinstance(items[0], (str, os.PathLike)))


def infer_features(paths_or_records: Any, max_records: int = 1000,
                   compression: CompressionOrAuto = "auto") -> InferredFeatures | InferredSequenceFeatures:
    """Propose a spec for tf.train.Example records: FixedLenFeature where every record read carries the key with
    the same number of values (shape [] for one value, [n] otherwise), VarLenFeature otherwise; the dtype comes
    from the wire (float32, int64, or tfr_torch.string).

    For tf.train.SequenceExample records (any record read with feature lists) it proposes a `SequenceFeatures`:
    the context as above, and for each feature list a FixedLenSequenceFeature where every step of every record
    read holds the same number of values (`allow_missing=True` when some record lacks the list), else a
    VarLenFeature. Records without feature lists are SequenceExamples without them there (an Example's bytes are
    a SequenceExample's with that context).

    From files (paths, globs, URLs) it reads about `max_records` records spread over every file: the first
    `max_records // len(files)` of each (at least one per file; a shorter file's share goes to the next ones).
    `compression` is the files' ("auto": from the name, else the first bytes). From an iterable of serialized
    records it reads the first `max_records`. The result is a dict of specs (a SequenceFeatures for
    SequenceExamples) that also says what it was based on (`InferredFeatures`: records and files read, records
    carrying each key).

    >>> import tfr_torch
    >>> records = [tfr_torch.encode_example({"id": i, "tokens": list(range(i + 1))}) for i in range(3)]
    >>> spec = tfr_torch.infer_features(records)
    >>> spec["id"], spec["tokens"]
    (FixedLenFeature(shape=(), dtype=torch.int64, default_value=None), VarLenFeature(dtype=torch.int64))
    >>> spec.records_read, spec.present["tokens"]
    (3, 3)
    >>> sequences = [tfr_torch.encode_sequence_example({"id": i}, {"frame": [[0.5, 1.5]] * i}) for i in range(3)]
    >>> tfr_torch.infer_features(sequences).sequence
    {'frame': FixedLenSequenceFeature(shape=(2,), dtype=torch.float32, allow_missing=False, default_value=None)}
    """
    if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records < 1:
        raise ValueError(f"max_records must be a positive int, got {max_records!r}")
    check_compression(compression, auto=True)
    if isinstance(paths_or_records, _RECORD_TYPES):
        size = memoryview(paths_or_records).nbytes
        raise TypeError(f"infer_features: expected paths or an iterable of serialized records, got one "
                        f"{type(paths_or_records).__name__} of {size:,} bytes; pass a list of records ([record])")
    info = _Info()
    if _is_paths(paths_or_records):
        sample: Iterable[tuple[Any, int, str | None, int | None]] = _from_files(
            expand_paths(paths_or_records), max_records, info, compression)
    else:
        sample = _from_records(paths_or_records, max_records)
    summary = _Summary()
    for record, i, path, offset in sample:
        what, parsed = classify_record(record)
        if what == EXAMPLE:
            summary.add(parsed, {}, len(record))
        elif what == SEQUENCE_EXAMPLE:
            summary.add(parsed[0], parsed[1], len(record))
        elif what == TENSOR:
            dtype = DTYPES[parsed.dtype][0]
            raise DecodeError(f"record {i} is a serialize_tensor payload ({dtype} {list(parsed.shape)}), not a "
                              f"tf.train.Example: no feature spec to propose; read such records with "
                              f"tfr_torch.parse_tensor(record, dtype=torch.{dtype})", path, offset)
        else:
            raise DecodeError(f"record {i} is not a tf.train.Example: {_why_not_example(bytes(record))}", path,
                              offset)
    summary.fold()
    if not summary.records:
        raise NoRecordsError("infer_features found no records to look at")
    info.records_read = summary.records
    context, info.present, info.empty_keys = _propose(summary.context, summary.records, "feature")
    if not summary.any_lists:
        spec = InferredFeatures(context)
        info.fill(spec)
        return spec
    sequence, present, empty = _propose_lists(summary.lists, summary.records)
    if not context and not sequence:
        raise DecodeError(f"no context feature and no step of any feature list of the {summary.records:,} records "
                          f"read holds a value (feature lists {', '.join(map(repr, empty))}; context features "
                          f"{', '.join(map(repr, info.empty_keys)) or 'none'}): there is nothing to propose a spec "
                          "for")
    sequence_spec = InferredSequenceFeatures(context, sequence)
    info.fill(sequence_spec)
    sequence_spec.list_present, sequence_spec.empty_lists = present, empty
    return sequence_spec


_CHUNK_BYTES = 4 << 20  # records summarized together: memory stays about this, whatever max_records and their size
_CHUNK_RECORDS = 512


class _Tally:
    """What the proposal needs of one key (a context feature, or the steps of a feature list) over the records
    summarized so far: the kinds seen, how many carry values (`present` of `total`), the counts of values they
    hold, and (feature lists) how many records carry the list."""

    def __init__(self) -> None:
        self.kinds: set[FeatureKind] = set()
        self.present = 0
        self.total = 0
        self.counts: set[int] = set()
        self.carried = 0

    def add(self, raws: list[bytes | None], key: str) -> None:
        kinds = {found for found in (kind_of(raw, key) for raw in raws) if found is not None}
        self.kinds |= kinds
        self.total += len(raws)
        if len(self.kinds) == 1 and kinds:  # (several kinds: _one_kind says so once every record is read)
            column = decode_column(raws, next(iter(kinds)), key)
            self.present += int(column.present.sum())
            self.counts.update(column.counts[column.present].tolist())


class _Summary:
    """The records read, summarized chunk by chunk (`_CHUNK_BYTES`) into a `_Tally` per key: what `_propose` and
    `_propose_lists` need, without keeping the records."""

    def __init__(self) -> None:
        self.records = 0
        self.any_lists = False
        self.context: dict[str, _Tally] = {}
        self.lists: dict[str, _Tally] = {}
        self._contexts: list[dict[str, bytes]] = []
        self._lists: list[dict[str, list[bytes]]] = []
        self._bytes = 0

    def add(self, context: dict[str, bytes], lists: dict[str, list[bytes]], size: int) -> None:
        self._contexts.append(context)
        self._lists.append(lists)
        self.any_lists = self.any_lists or bool(lists)
        self._bytes += size
        if self._bytes >= _CHUNK_BYTES or len(self._contexts) >= _CHUNK_RECORDS:
            self.fold()

    def fold(self) -> None:
        """Summarize the records added since the last fold, and let them go."""
        contexts, lists = self._contexts, self._lists
        for key in sorted({key for m in contexts for key in m}):
            self.context.setdefault(key, _Tally()).add([m.get(key) for m in contexts], key)
        for key in sorted({key for m in lists for key in m}):
            carried = [m[key] for m in lists if key in m]
            tally = self.lists.setdefault(key, _Tally())
            tally.carried += len(carried)
            tally.add([step for steps in carried for step in steps], key)
        self.records += len(contexts)
        self._contexts, self._lists, self._bytes = [], [], 0


def _propose(tallies: dict[str, _Tally], records: int, what: str) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """(spec, records carrying each key with values, keys seen only without values) of Features maps."""
    spec: dict[str, Any] = {}
    present: dict[str, int] = {}
    empty: list[str] = []
    for key in sorted(tallies):
        tally = tallies[key]
        kind = _one_kind(tally.kinds, key, what)
        if kind is None:
            empty.append(key)  # only kind-less Features: nothing to propose
            continue
        present[key] = tally.present
        if tally.present == records and len(tally.counts) == 1:
            n = next(iter(tally.counts))
            spec[key] = FixedLenFeature([] if n == 1 else [n], _DTYPE[kind])
        else:
            spec[key] = VarLenFeature(_DTYPE[kind])
    return spec, present, empty


def _propose_lists(tallies: dict[str, _Tally], records: int) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """(sequence spec, records carrying each feature list, lists whose steps never hold values) of the records'
    feature lists: a FixedLenSequenceFeature where every step holds the same number of values, else VarLen."""
    spec: dict[str, Any] = {}
    present: dict[str, int] = {}
    empty: list[str] = []
    for key in sorted(tallies):
        tally = tallies[key]
        present[key] = tally.carried
        kind = _one_kind(tally.kinds, key, "feature list")
        if kind is None:
            empty.append(key)  # no step of any record read holds values: nothing to propose
            continue
        # steps that all hold no values get a VarLenFeature: TensorFlow's parser divides by a step's size (a
        # FixedLenSequenceFeature of shape [0] stops TensorFlow 2.21 with SIGFPE)
        if tally.present == tally.total and len(tally.counts) == 1 and tally.counts != {0}:
            n = next(iter(tally.counts))
            spec[key] = FixedLenSequenceFeature([] if n == 1 else [n], _DTYPE[kind],
                                                allow_missing=tally.carried < records)
        else:
            spec[key] = VarLenFeature(_DTYPE[kind])
    return spec, present, empty


def _one_kind(kinds: set[FeatureKind], key: str, what: str) -> FeatureKind | None:
    if len(kinds) > 1:
        raise DecodeError(f"{what} {key!r} holds {' and '.join(sorted(kinds))} values in different records; "
                          "a spec needs one kind")
    return next(iter(kinds)) if kinds else None
