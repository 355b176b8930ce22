"""SequenceFeatures: the spec of tf.train.SequenceExample records for the datasets (TFRecordDataset,
IndexedTFRecordDataset, torchdata's ExampleDecoder), as the `tfrecord` package's `sequence_description` and
TensorFlow's `parse_sequence_example(serialized, context_features, sequence_features)` take it.

A batch decodes to one dict, nested as parse_sequence_example's three results are:
`{"context": {...}, "feature_lists": {...}, "lengths": {...}}` (context features as parse_example gives them,
FixedLenSequenceFeature lists `[B, T, *shape]` zero-padded with their steps per record in "lengths", VarLenFeature
lists sparse `[B, T, max_len]`, RaggedFeature lists RaggedTensors); a single record (a dataset without batch_size)
to parse_single_sequence_example's two: `{"context": {...}, "feature_lists": {...}}`, lists `[T, *shape]`.

>>> import torch, tfr_torch
>>> spec = tfr_torch.SequenceFeatures(context={"id": tfr_torch.FixedLenFeature([], torch.int64)},
...                                   sequence={"tokens": tfr_torch.FixedLenSequenceFeature([], torch.int64)})
>>> records = [tfr_torch.encode_sequence_example({"id": 7}, {"tokens": [[1], [2], [3]]}),
...            tfr_torch.encode_sequence_example({"id": 8}, {"tokens": [[4]]})]
>>> batch = spec.plan().parse(records)
>>> batch["context"]["id"].tolist(), batch["feature_lists"]["tokens"].tolist(), batch["lengths"]["tokens"].tolist()
([7, 8], [[1, 2, 3], [4, 0, 0]], [3, 1])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tfr_torch.decode.hints import check_spec
from tfr_torch.decode.results import _rows_of
from tfr_torch.decode.sequence_plan import SequenceExamplePlan
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature
from tfr_torch.errors import DecodeError
from tfr_torch.format.location import ExampleName

__all__ = ["SequenceFeatures", "SequenceBatchPlan"]


class SequenceFeatures:
    """The context spec and the feature-list spec of tf.train.SequenceExample records, for a dataset's `features=`
    (see the module docstring for what it decodes to). `context` takes what parse_example takes (FixedLenFeature,
    VarLenFeature, SparseFeature, RaggedFeature); `sequence` FixedLenSequenceFeature, VarLenFeature and
    RaggedFeature. Both are checked here, as parse_sequence_example checks them."""

    __slots__ = ("context", "sequence")

    def __init__(self, context: Mapping[str, Any] | None = None, sequence: Mapping[str, Any] | None = None) -> None:
        for name, value in (("context", context), ("sequence", sequence)):
            if value is not None and not isinstance(value, Mapping):
                raise TypeError(f"SequenceFeatures: {name} must be a dict of feature names to specs, got "
                                f"{type(value).__name__}")
        self.context: dict[str, Any] = dict(context or {})
        self.sequence: dict[str, Any] = dict(sequence or {})
        check_spec(self.context, "context feature")
        check_spec(self.sequence, "sequence feature")
        SequenceExamplePlan(self.context, self.sequence)  # the whole check, now: where the spec is written

    def plan(self) -> SequenceBatchPlan:
        """What the datasets decode with."""
        return SequenceBatchPlan(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SequenceFeatures):
            return NotImplemented
        return self.context == other.context and self.sequence == other.sequence

    __hash__ = None  # type: ignore[assignment]  # holds dicts

    def __getstate__(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.context, self.sequence

    def __setstate__(self, state: tuple[dict[str, Any], dict[str, Any]]) -> None:
        self.context, self.sequence = state

    def __repr__(self) -> str:
        return f"SequenceFeatures(context={self.context!r}, sequence={self.sequence!r})"


class SequenceBatchPlan:
    """A SequenceFeatures compiled: `parse` (a batch, or one record with `single=True`) and `iter_rows` (one
    record's dict at a time), the interface the datasets decode through."""

    def __init__(self, spec: SequenceFeatures) -> None:
        self.spec = spec
        self._plan = SequenceExamplePlan(spec.context, spec.sequence)
        # rows can be cut out of a batch (as ExamplePlan.iter_rows cuts them) when the context is FixedLen/VarLen
        # and every feature list a FixedLenSequenceFeature, [B, T_max, ...] cut to each record's T; other lists
        # (sparse or ragged over the steps) are decoded record by record
        self._sliceable = (all(type(s) in (FixedLenFeature, VarLenFeature) for s in spec.context.values())
                           and all(type(s) is FixedLenSequenceFeature for s in spec.sequence.values()))

    def parse(self, serialized: Sequence[bytes], example_names: Sequence[ExampleName] | None = None,
              single: bool = False) -> dict[str, Any]:
        """parse_sequence_example's (context, feature_lists, lengths) as one dict; with `single` (one record)
        parse_single_sequence_example's (context, feature_lists)."""
        context, lists, lengths = self._plan.parse(serialized, example_names, single)
        if single:
            return {"context": context, "feature_lists": lists}
        return {"context": context, "feature_lists": lists, "lengths": lengths}

    def iter_rows(self, serialized: Sequence[bytes],
                  example_names: Sequence[ExampleName] | None = None) -> Iterator[dict[str, Any]]:
        """What parse(single=True) gives for each record, in order. Dense results are decoded as one batch and cut
        into rows (each feature list to its record's steps); if the batch does not decode, the records are decoded
        one by one, so the rows before the bad record come out and its error is the one it gives alone.
        `example_names` must support slicing."""
        n = len(serialized)
        if self._sliceable and n > 1:
            try:
                batch = self.parse(serialized, example_names)
            except DecodeError:
                pass
            else:
                steps = batch["lengths"]
                context = [(key, _rows_of(value, n)) for key, value in batch["context"].items()]
                lists = [(key, _rows_of(value, n), steps[key].tolist())
                         for key, value in batch["feature_lists"].items()]
                for j in range(n):
                    yield {"context": {key: rows[j] for key, rows in context},
                           "feature_lists": {key: rows[j][: counts[j]] for key, rows, counts in lists}}
                return
        for i in range(n):
            yield self.parse(serialized[i : i + 1], None if example_names is None else example_names[i : i + 1],
                             single=True)

