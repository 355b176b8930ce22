"""What both decoding plans (ExamplePlan in decode/plan.py, SequenceExamplePlan in decode/sequence_plan.py) check
on the way in: a spec turned into the decoder of each feature (the `Decoder` protocol, the table of decoders by spec
type, keys read as two kinds refused), and a batch of records (a sequence of bytes, each record's raw Features, a
record-level error told against the record's name or location)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from tfr_torch.decode.dense import FixedLenDecoder, FixedLenSequenceDecoder
from tfr_torch.decode.hints import check_spec
from tfr_torch.decode.ragged import RaggedDecoder
from tfr_torch.decode.sparse import SparseDecoder, VarLenDecoder
from tfr_torch.decode.specs import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    VarLenFeature,
)
from tfr_torch.decode.units import Locator, Units
from tfr_torch.errors import DecodeError
from tfr_torch.format.location import ExampleName
from tfr_torch.format.options import FeatureKind
from tfr_torch.format.strict import example_features

__all__ = ["Decoder"]


class Decoder(Protocol):
    """What a plan asks of the decoder of one feature (FixedLenDecoder, VarLenDecoder, SparseDecoder, ...): the
    wire keys it reads with the kind each must hold, and a call that turns a batch's columns (`units`) into the
    feature's result (`single`: one example, as parse_single_example). Feature lists' FixedLenSequenceFeature
    (StepSequenceDecoder) is called per step instead and is not one of these."""

    key: str
    spec: Any

    def wire_keys(self) -> dict[str, FeatureKind]: ...

    def __call__(self, units: Units, single: bool = False) -> Any: ...


_EXAMPLE_DECODERS = {
    FixedLenFeature: FixedLenDecoder,
    VarLenFeature: VarLenDecoder,
    SparseFeature: SparseDecoder,
    RaggedFeature: RaggedDecoder,
    FixedLenSequenceFeature: FixedLenSequenceDecoder,
}


def _decoders(features: Mapping[str, Any] | None, table: dict[type[Any], Any], what: str) -> dict[str, Any]:
    if features is None:
        return {}
    if not isinstance(features, Mapping):
        raise TypeError(f"{what} must be a dict of feature names to specs, got {type(features).__name__}")
    out = {}
    for key, spec in features.items():
        if not isinstance(key, str):
            raise TypeError(f"{what}: feature names must be str, got {key!r}")
        decoder = table.get(type(spec))
        if decoder is None:
            # another library's spelling: say how tfr_torch spells it
            check_spec({key: spec}, "feature" if what == "features" else what)
            allowed = ", ".join(t.__name__ for t in table)
            raise TypeError(f"{what} {key!r}: expected one of {allowed}, got {spec!r}")
        out[key] = decoder(key, spec)
    return out


def _check_wire_kinds(decoders: dict[str, Decoder], what: str) -> None:
    """Two specs that read the same wire key must agree on its kind (float, int64 or bytes)."""
    seen: dict[str, tuple[FeatureKind, str]] = {}
    for name, decoder in decoders.items():
        for wire_key, kind in decoder.wire_keys().items():
            if wire_key in seen and seen[wire_key][0] != kind:
                other_kind, other = seen[wire_key]
                raise ValueError(f"{what}: feature {other!r} reads key {wire_key!r} as {other_kind} but {name!r} "
                                 f"reads it as {kind}")
            seen.setdefault(wire_key, (kind, name))


def _records(serialized: Any, example_names: Sequence[ExampleName] | None, what: str) -> Sequence[bytes]:
    if isinstance(serialized, (bytes, bytearray, memoryview, str)):
        raise TypeError(f"{what} expects a sequence of records (serialized bytes), got one {type(serialized).__name__} "
                        f"object; for one record use {what.replace('parse_', 'parse_single_')}")
    records = serialized if type(serialized) in (list, tuple) or isinstance(serialized, Sequence) else list(serialized)
    if example_names is not None and len(example_names) != len(records):
        raise ValueError(f"example_names has {len(example_names)} names for {len(records)} records")
    return records


def _record_bytes(record: Any, locator: Locator, i: int) -> bytes:
    if isinstance(record, bytes):
        return record
    if isinstance(record, (bytearray, memoryview)):
        return bytes(record)
    raise TypeError(f"{locator.describe(i)}: a serialized record must be bytes, got {type(record).__name__}")


def _size(record: Any) -> int:
    return len(record) if isinstance(record, (bytes, bytearray, memoryview)) else 0


def _located(exc: DecodeError, locator: Locator, i: int) -> DecodeError:
    """A record-level DecodeError from format.strict, told against the record's name or location."""
    path, offset = locator.location(i)
    return DecodeError(f"{locator.describe(i)}: {exc.message}", path, offset, key=exc.key, index=i,
                       position=exc.position)


def _features_of(record: Any, locator: Locator, i: int) -> Any:
    """{key: raw Feature} of record i under format.strict's rules (the reference path of parse_example)."""
    try:
        return example_features(_record_bytes(record, locator, i))
    except DecodeError as exc:
        raise _located(exc, locator, i) from None
