"""The JSON sidecar that ShardedWriter writes beside its shards: the features spec, each shard's record count,
the image encoding and the tfr_torch version. `TFRecordDataset(features="auto")` and `len()` read it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, string
from tfr_torch.format.paths import as_path, exists, open_input

__all__ = ["SIDECAR_FORMAT", "sidecar_path", "spec_to_json", "spec_from_json", "sidecar_for", "read_sidecar"]

SIDECAR_FORMAT = "tfr_torch.shards/1"
_SHARD = re.compile(r"^(?P<prefix>.+)\.tfrecord-(?P<index>\d+)-of-(?P<count>\d+)$")


def sidecar_path(out_dir: str, name: str, split: str) -> str:
    """`{out_dir}/{name}-{split}.tfr_torch.json`."""
    return f"{out_dir.rstrip('/')}/{name}-{split}.tfr_torch.json"


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
        dtype = entry["dtype"] if entry["dtype"] == "string" else getattr(torch, entry["dtype"])
        kind = entry["kind"]
        if kind == "FixedLen":
            out[key] = FixedLenFeature(entry["shape"], dtype, _from_json_default(entry.get("default_value")))
        elif kind == "VarLen":
            out[key] = VarLenFeature(dtype)
        elif kind == "FixedLenSequence":
            out[key] = FixedLenSequenceFeature(entry["shape"], dtype, entry.get("allow_missing", True))
        else:
            raise ValueError(f"sidecar feature {key!r}: unknown kind {kind!r}")
    return out


def read_sidecar(path: str) -> dict[str, Any]:
    with open_input(path) as f:
        data = json.loads(f.read())
    if data.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"{path} is not a tfr_torch shard sidecar (format {data.get('format')!r}, expected "
                         f"{SIDECAR_FORMAT!r})")
    return data


def sidecar_for(paths: Sequence[str]) -> tuple[dict[str, Any], dict[str, int]] | None:
    """If every path is a shard named the TFDS way and one sidecar describes them all: (sidecar, {shard file name:
    record count}); else None."""
    prefixes = set()
    for path in paths:
        match = _SHARD.match(as_path(path))
        if match is None:
            return None
        prefixes.add(match.group("prefix"))
    if len(prefixes) != 1:
        return None
    prefix = prefixes.pop()
    candidate = f"{prefix}.tfr_torch.json"
    if not exists(candidate):
        return None
    data = read_sidecar(candidate)
    counts = {shard["file"]: int(shard["records"]) for shard in data["shards"]}
    names = [as_path(p).rsplit("/", 1)[-1] for p in paths]
    if any(n not in counts for n in names):
        return None
    return data, {n: counts[n] for n in names}
