"""The decoding plan of tf.train.SequenceExample records (see `parse_sequence_example`): the context decoded as
an Example's features, every feature list step by step; by the compiled kernels (decode/kernel.py for the context)
when they can, else by the pure-Python reference. It shares ExamplePlan's spec and record checks
(decode/plan_inputs.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tfr_torch import _native
from tfr_torch.decode.dense import FixedLenDecoder, StepSequenceDecoder
from tfr_torch.decode.kernel import _KERNEL_KINDS, _NO_FEATURES, _NUMPY_OF_KIND, _example_kernel, _kernel_units
from tfr_torch.decode.plan_inputs import (
    _EXAMPLE_DECODERS,
    Decoder,
    _check_wire_kinds,
    _decoders,
    _located,
    _record_bytes,
    _records,
)
from tfr_torch.decode.ragged import RaggedDecoder
from tfr_torch.decode.sparse import VarLenDecoder
from tfr_torch.decode.specs import FixedLenSequenceFeature, RaggedFeature, VarLenFeature
from tfr_torch.decode.units import Locator, Units
from tfr_torch.errors import DecodeError
from tfr_torch.format.columns import Column
from tfr_torch.format.location import ExampleName
from tfr_torch.format.options import FeatureKind
from tfr_torch.format.strict import sequence_example_features
from tfr_torch.format.wire import WireError, read_delimited, read_tag, skip_field

__all__ = ["SequenceExamplePlan"]

_SEQUENCE_DECODERS = {
    FixedLenSequenceFeature: StepSequenceDecoder,
    VarLenFeature: VarLenDecoder,
    RaggedFeature: RaggedDecoder,
}


class SequenceExamplePlan:
    """The decoding plan for tf.train.SequenceExample records (see `parse_sequence_example`)."""

    def __init__(self, context_features: Mapping[str, Any] | None, sequence_features: Mapping[str, Any] | None) -> None:
        self.context: dict[str, Decoder] = _decoders(context_features, {k: v for k, v in _EXAMPLE_DECODERS.items()
                                                    if k is not FixedLenSequenceFeature}, "context_features")
        self.sequence = _decoders(sequence_features, _SEQUENCE_DECODERS, "sequence_features")
        if not self.context and not self.sequence:
            raise ValueError("parse_sequence_example needs context_features or sequence_features (both are empty)")
        _check_wire_kinds(self.context, "context_features")
        self._list_keys = {key: self._keys_of(key, d) for key, d in self.sequence.items()}
        self._context_kinds = {k: kind for d in self.context.values() for k, kind in d.wire_keys().items()}
        self._list_kinds: dict[str, FeatureKind] = {}  # every feature list read, and its kind
        self._native_ok = True  # False when one list is read as two kinds: the reference reports it
        for d in self.sequence.values():
            for k, kind in (d.wire_keys() if not isinstance(d, StepSequenceDecoder) else {d.key: d.kind}).items():
                self._native_ok &= self._list_kinds.setdefault(k, kind) == kind
        self._kernel: Any = None  # the compiled core's context decoder, made on first use
        self._kernel_of: Any = None

    @staticmethod
    def _keys_of(key: str, decoder: Any) -> list[str]:
        if isinstance(decoder, StepSequenceDecoder):
            return [key]
        return list(decoder.wire_keys())

    def parse(self, serialized: Sequence[bytes], example_names: Sequence[ExampleName] | None = None,
              single: bool = False) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]]:
        records = _records(serialized, example_names, "parse_sequence_example")
        locator = Locator(example_names, single)
        core = _native.core
        if core is not None and self._native_ok:
            parsed = self._native_parse(core, records, locator, single)
            if parsed is not None:
                return parsed
        contexts: list[Mapping[str, bytes]] = []
        lists: list[Mapping[str, Sequence[bytes]]] = []
        for i, record in enumerate(records):
            data = _record_bytes(record, locator, i)
            try:
                context_features, record_lists = sequence_example_features(data)
                _check_entries_key_first(data)
            except DecodeError as exc:
                raise _located(exc, locator, i) from None
            contexts.append(context_features)
            lists.append(record_lists)
        context_units = Units(contexts, locator, what="context feature")
        context = {key: decoder(context_units, single) for key, decoder in self.context.items()}
        return (context, *self._feature_lists(lambda key, decoder: self._steps(key, decoder, lists, locator), single))

    def _feature_lists(self, steps_of: Callable[[str, Any], tuple[Units, np.ndarray]],
                       single: bool) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """(feature lists, lengths) from each sequence feature's steps and steps per example (`steps_of(key,
        decoder)`: by the reference or from the kernel's columns)."""
        feature_lists: dict[str, Any] = {}
        lengths: dict[str, torch.Tensor] = {}
        for key, decoder in self.sequence.items():
            steps, per_example = steps_of(key, decoder)
            if isinstance(decoder, StepSequenceDecoder):
                feature_lists[key] = decoder(steps, per_example, single)
                lengths[key] = torch.from_numpy(per_example)
            else:
                feature_lists[key] = decoder(steps, single, steps_per_example=per_example)
        return feature_lists, lengths

    def _native_parse(self, core: Any, records: Sequence[bytes], locator: Locator,
                      single: bool) -> tuple[dict[str, Any], dict[str, Any], dict[str, torch.Tensor]] | None:
        """parse() by the compiled kernels: the context by the Example decoder (SequenceExample.context has
        Example.features' field number), every feature list in one pass. None when a record needs the reference
        parser, which then defines the answer or the error."""
        status, columns = core.decode_feature_lists([k.encode() for k in self._list_kinds],
                                                    bytes(_KERNEL_KINDS[kind] for kind in self._list_kinds.values()),
                                                    records)
        if status:
            return None
        context_units = None
        if self._context_kinds:
            if self._kernel_of is not core:
                self._kernel = _example_kernel(core, self._context_kinds)
                self._kernel_of = core
            context_units = _kernel_units(self._kernel, self._context_kinds, records, what="context feature")
            if context_units is None or self._maybe_kindless(context_units, records):
                return None
            context_units.locator = locator
        lists = {key: column for key, column in zip(self._list_kinds, columns)}
        # no context decoders without context kinds: context_units is None only when there is nothing to decode
        context = ({key: decoder(context_units, single) for key, decoder in self.context.items()}
                   if context_units is not None else {})
        n = len(records)
        return (context, *self._feature_lists(
            lambda key, decoder: self._native_steps(key, decoder, lists, n, locator, core), single))

    def _maybe_kindless(self, units: Units, records: Sequence[bytes]) -> bool:
        """Whether a record the kernel found without a context FixedLenFeature may hold it with no kind set (its key's
        bytes are in the record): TensorFlow reads that as present with no values, which the reference decides."""
        for key, decoder in self.context.items():
            if isinstance(decoder, FixedLenDecoder):
                present = units.column(key, decoder.kind).present
                if not present.all():
                    needle = key.encode()
                    if any(needle in bytes(records[int(i)]) for i in np.flatnonzero(~present)):
                        return True
        return False

    def _native_steps(self, key: str, decoder: Any, lists: dict[str, Any], n: int, locator: Locator,
                      core: Any) -> tuple[Units, np.ndarray]:
        """_steps from the kernel's columns: the same units, and the same first error."""
        keys = self._list_keys[key]
        has = (np.stack([np.frombuffer(lists[k][0], dtype=np.bool_) for k in keys]) if n
               else np.zeros((len(keys), 0), bool))
        steps = np.stack([np.frombuffer(lists[k][1], dtype=np.int64) for k in keys]) if n else np.zeros((len(keys), 0),
                                                                                                        np.int64)
        found = np.asarray(has.any(axis=0))  # an array: has is 2-D
        required = isinstance(decoder, StepSequenceDecoder) and not decoder.spec.allow_missing
        uneven = found & (~has.all(axis=0) | (steps != steps[:1]).any(axis=0))
        bad = np.flatnonzero(uneven | (~found if required else np.zeros(n, dtype=bool)))
        if len(bad):
            i = int(bad[0])
            if not found[i]:
                raise locator.error(key, i, "is required but missing (FixedLenSequenceFeature with "
                                            "allow_missing=False)", what="feature list")
            shown = ", ".join(f"{k!r}: {int(steps[j, i]) if has[j, i] else 'missing'}" for j, k in enumerate(keys))
            raise locator.error(key, i, f"reads feature lists with different numbers of steps ({shown})",
                                what="feature list")
        per_example = np.where(found, steps[0], 0).astype(np.int64) if n else np.zeros(0, dtype=np.int64)
        total = int(per_example.sum())
        where = np.frombuffer(core.sparse_indices(per_example), dtype=np.int64).reshape(2, total)
        units = Units(_NO_FEATURES * total, locator, where[0], where[1], what="feature list")
        for k in keys:
            _, _, step_present, step_counts, values, uniform = lists[k]
            kind = self._list_kinds[k]
            if kind != "bytes":
                values = np.frombuffer(values, dtype=_NUMPY_OF_KIND[kind])
            units.preset(k, kind, Column(np.frombuffer(step_present, dtype=np.bool_),
                                         np.frombuffer(step_counts, dtype=np.int64), values, uniform))
        return units, per_example

    def _steps(self, key: str, decoder: Any, lists: list[Mapping[str, Sequence[bytes]]],
               locator: Locator) -> tuple[Units, np.ndarray]:
        """Units for one sequence feature: every step of every example, with the step's Feature of each key it
        reads; all those feature lists must have the same number of steps in an example."""
        keys = self._list_keys[key]
        maps: list[dict[str, bytes]] = []
        per_example = np.zeros(len(lists), dtype=np.int64)
        example_of: list[int] = []
        step_of: list[int] = []
        for i, feature_lists in enumerate(lists):
            found = {k: feature_lists[k] for k in keys if k in feature_lists}
            if not found:
                if isinstance(decoder, StepSequenceDecoder) and not decoder.spec.allow_missing:
                    raise locator.error(key, i, "is required but missing (FixedLenSequenceFeature with "
                                                "allow_missing=False)", what="feature list")
                continue
            counts = {k: len(v) for k, v in found.items()}
            if len(found) < len(keys) or len(set(counts.values())) > 1:
                shown = ", ".join(f"{k!r}: {counts.get(k, 'missing')}" for k in keys)
                raise locator.error(key, i, f"reads feature lists with different numbers of steps ({shown})",
                                    what="feature list")
            n = next(iter(counts.values()))
            per_example[i] = n
            for k, steps in found.items():
                for step, raw in enumerate(steps):
                    at = _bytes_after_list(raw)
                    if at is not None:
                        raise locator.error(k, i, f"is malformed: its tf.train.Feature ({len(raw)} bytes) has more "
                                                  f"fields after its list (at byte {at}); TensorFlow's "
                                                  "parse_sequence_example rejects them in a feature list's steps",
                                            step, what="feature list")
            for step in range(n):
                maps.append({k: v[step] for k, v in found.items()})
            example_of.extend([i] * n)
            step_of.extend(range(n))
        units = Units(maps, locator, np.array(example_of, dtype=np.int64), np.array(step_of, dtype=np.int64),
                      what="feature list")
        return units, per_example


# TensorFlow's parse_sequence_example is stricter than its parse_example (checked with TensorFlow 2.21): every map
# entry of a SequenceExample (context or feature lists, read or not) must hold its key before its value, and a step
# of a feature list it reads must be its one list and nothing after it (no unknown field after the list, none after
# a packed run inside it). Records that break these are refused on every path (the compiled core leaves them to
# this reference: it takes only key-then-value entries and steps that are one list).


def _check_entries_key_first(data: bytes) -> None:
    """Raise DecodeError at the first map entry of a SequenceExample (already checked by format.strict) whose
    value comes before its key."""
    try:
        pos, end = 0, len(data)
        while pos < end:
            number, wire, after = read_tag(data, pos, end)
            if wire != 2 or number not in (1, 2):
                pos = skip_field(data, after, end, wire)
                continue
            start, pos = read_delimited(data, after, end, "field")
            at = start
            while at < pos:
                _, _, body = read_tag(data, at, pos)
                entry, at = read_delimited(data, body, pos, "map entry")
                if entry < at and data[entry] != 0x0A:  # the key (field 1, length-delimited) is not first
                    what = "context feature" if number == 1 else "feature list"
                    raise DecodeError(f"cannot parse {len(data)} bytes as a tf.train.SequenceExample: byte {entry} "
                                      f"has a {what} map entry with its value before its key (TensorFlow's "
                                      "parse_sequence_example rejects it)", position=entry)
    except WireError:
        return  # not reached for records format.strict accepted


def _bytes_after_list(raw: bytes) -> int | None:
    """Where a step's Feature has more bytes after its list, or after the packed run inside a numeric list;
    None when it has none (or is malformed or kind-less: format.strict's decode_feature decides those)."""
    end = len(raw)
    if end < 2 or raw[0] not in (0x0A, 0x12, 0x1A):
        return None
    try:
        start, stop = read_delimited(raw, 1, end, "list")
        if stop < end:
            return stop
        if raw[0] != 0x0A and start < stop and raw[start] == 0x0A:  # a numeric list's packed run
            _, run_stop = read_delimited(raw, start + 1, stop, "packed run")
            if run_stop < stop:
                return run_stop
    except WireError:
        return None
    return None
