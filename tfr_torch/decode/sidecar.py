"""The features spec in the JSON form that the shard-set sidecar stores (tfr_torch.format.shardset: shard names,
the sidecar file, its counts). `TFRecordDataset(features="auto")` reads the spec back through `spec_from_json`.
The shard-set names below are re-exported from tfr_torch.format.shardset for imports written before they moved."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, normalize_dtype, string
from tfr_torch.format.shardset import (
    SIDECAR_FORMAT,
    Sidecar,
    class_names,
    find_sidecar,
    read_sidecar,
    sidecar_path,
    trusted_counts,
)

__all__ = ["SIDECAR_FORMAT", "Sidecar", "sidecar_path", "spec_to_json", "spec_from_json", "specs_to_json",
           "spec_of_sidecar", "sidecar_for", "read_sidecar", "find_sidecar", "trusted_counts", "class_names"]


def _dtype_name(dtype: Any) -> str:
    return "string" if dtype == string else str(dtype).removeprefix("torch.")


def _json_default(value: Any) -> Any:
    """Defaults as JSON: bytes become {"hex": ...}, str {"text": ...} (nested like the value)."""
    if isinstance(value, (bytes, bytearray)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, (list, tuple)):
        return [_json_default(v) for v in value]
    return value


def _from_json_default(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"hex"}:
        return bytes.fromhex(value["hex"])
    if isinstance(value, dict) and set(value) == {"text"}:
        return value["text"]
    if isinstance(value, list):
        return [_from_json_default(v) for v in value]
    return value


def spec_to_json(features: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON form of a spec of FixedLenFeature / VarLenFeature / FixedLenSequenceFeature."""
    out = {}
    for key, spec in features.items():
        entry: dict[str, Any]
        if isinstance(spec, FixedLenFeature):
            entry = {"kind": "FixedLen", "shape": list(spec.shape), "dtype": _dtype_name(spec.dtype)}
            if spec.default_value is not None:
                entry["default_value"] = _json_default(spec.default_value)
        elif isinstance(spec, VarLenFeature):
            entry = {"kind": "VarLen", "dtype": _dtype_name(spec.dtype)}
        elif isinstance(spec, FixedLenSequenceFeature):
            entry = {"kind": "FixedLenSequence", "shape": list(spec.shape), "dtype": _dtype_name(spec.dtype),
                     "allow_missing": spec.allow_missing}
        else:
            raise TypeError(f"feature {key!r}: the sidecar stores FixedLen, VarLen and FixedLenSequence specs, got "
                            f"{type(spec).__name__}")
        out[key] = entry
    return out


def spec_from_json(data: Mapping[str, Any]) -> dict[str, Any]:
    """The spec back from `spec_to_json`."""
    out: dict[str, Any] = {}
    for key, entry in data.items():
        try:
            dtype = normalize_dtype(entry["dtype"])
        except ValueError as err:
            raise ValueError(f"sidecar feature {key!r}: {err}") from None
        kind = entry["kind"]
        if kind == "FixedLen":
            out[key] = FixedLenFeature(entry["shape"], dtype, _from_json_default(entry.get("default_value")))
        elif kind == "VarLen":
            out[key] = VarLenFeature(dtype)
        elif kind == "FixedLenSequence":
            allow_missing = entry.get("allow_missing", True)
            if not isinstance(allow_missing, bool):
                raise ValueError(f"sidecar feature {key!r}: allow_missing must be true or false, got "
                                 f"{allow_missing!r}")
            out[key] = FixedLenSequenceFeature(entry["shape"], dtype, allow_missing)
        else:
            raise ValueError(f"sidecar feature {key!r}: unknown kind {kind!r}")
    return out


def specs_to_json(features: Mapping[str, Any] | SequenceFeatures) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """What a sidecar stores of a dataset's spec: (its "features", its "sequence_features"): a dict spec's JSON form
    and None, or a SequenceFeatures' context and feature lists in that form (a reader that knows no
    "sequence_features" decodes the context alone: a SequenceExample's context is an Example's features)."""
    if isinstance(features, SequenceFeatures):
        return spec_to_json(features.context), spec_to_json(features.sequence)
    return spec_to_json(features), None


def spec_of_sidecar(sidecar: Sidecar) -> dict[str, Any] | SequenceFeatures | None:
    """The spec a sidecar stores (see specs_to_json): a dict, a SequenceFeatures, or None when it stores none;
    ValueError naming the sidecar file when what it stores is not a spec."""
    features, lists = sidecar.features, sidecar.sequence_features
    if features is None and lists is None:
        return None
    try:
        for part in (features, lists):
            if part is not None and not (isinstance(part, Mapping) and all(isinstance(e, Mapping)
                                                                           for e in part.values())):
                raise ValueError("not a dict of feature entries")
        context = spec_from_json(features or {})
        if lists is None:
            return context
        return SequenceFeatures(context, spec_from_json(lists))
    except (KeyError, TypeError, ValueError) as err:
        what = f"missing {err}" if isinstance(err, KeyError) else str(err)
        raise ValueError(f"{sidecar.path}: the features spec it stores cannot be read ({what})") from None


def sidecar_for(paths: Sequence[str]) -> tuple[dict[str, Any], dict[str, int]] | None:
    """If every path is a shard named the TFDS way and one sidecar describes them all: (sidecar, {shard file name:
    record count as the sidecar says}); else None. Kept for callers written before `find_sidecar`, which gives a
    `Sidecar` (its `.data` and `.counts` are this pair). Datasets check these counts (`trusted_counts`)."""
    found = find_sidecar(paths)
    if found is None:
        return None
    return found.data, found.counts
