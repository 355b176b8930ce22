"""The JSON sidecar that ShardedWriter writes beside its shards: the features spec, each shard's record count,
the image encoding and the tfr_torch version. `TFRecordDataset(features="auto")` and `len()` read it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, string
from tfr_torch.format.paths import as_path, exists, open_input

__all__ = ["SIDECAR_FORMAT", "Sidecar", "sidecar_path", "spec_to_json", "spec_from_json", "sidecar_for", "read_sidecar",
           "find_sidecar", "trusted_counts", "class_names"]

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
        data: dict[str, Any] = json.loads(f.read())
    if data.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"{path} is not a tfr_torch shard sidecar (format {data.get('format')!r}, expected "
                         f"{SIDECAR_FORMAT!r})")
    return data


class Sidecar(NamedTuple):
    """A sidecar that describes a list of shards: its `path`, its JSON `data`, and per shard (in the list's order)
    its entry `{"file", "records", "bytes"}`."""

    path: str
    data: dict[str, Any]
    shards: list[dict[str, Any]]


def find_sidecar(paths: Sequence[str]) -> Sidecar | None:
    """The sidecar beside `paths` when every path is a shard named the TFDS way and one sidecar lists them all;
    else None. Its counts are what the sidecar says: check them with `trusted_counts` before using them."""
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
    entries = {shard["file"]: shard for shard in data.get("shards", [])}
    names = [as_path(p).rsplit("/", 1)[-1] for p in paths]
    if any(n not in entries for n in names):
        return None
    return Sidecar(candidate, data, [entries[n] for n in names])


def sidecar_for(paths: Sequence[str]) -> tuple[dict[str, Any], dict[str, int]] | None:
    """If every path is a shard named the TFDS way and one sidecar describes them all: (sidecar, {shard file name:
    record count as the sidecar says}); else None. Datasets check these counts (`trusted_counts`)."""
    found = find_sidecar(paths)
    if found is None:
        return None
    return found.data, {shard["file"]: int(shard["records"]) for shard in found.shards}


def trusted_counts(sidecar: Sidecar | None, sizes: Sequence[int | None],
                   indexed: Sequence[int | None]) -> tuple[list[int | None], list[str]]:
    """Per shard, the record count that can be trusted, and what contradicts the sidecar.

    A count from an index (`indexed`, already checked against its file) always wins. A sidecar's count is used
    only when the shard still has the byte size the sidecar recorded (`sizes`: the files' sizes now); a shard
    that was rewritten since gets None (count it). Each problem names the shard and both numbers.

    >>> car = Sidecar("ds.tfr_torch.json", {}, [{"file": "a", "records": 5, "bytes": 100}])
    >>> trusted_counts(car, [120], [None])
    ([None], ['a: the sidecar says 5 records in 100 bytes, but the file has 120 bytes'])
    """
    counts: list[int | None] = []
    problems: list[str] = []
    for i, (size, from_index) in enumerate(zip(sizes, indexed)):
        entry = sidecar.shards[i] if sidecar is not None else None
        if entry is None:
            counts.append(from_index)
            continue
        records, recorded = int(entry["records"]), entry.get("bytes")
        if from_index is not None:
            counts.append(from_index)
            if from_index != records:
                problems.append(f"{entry['file']}: the sidecar says {records} records, but its index (checked "
                                f"against the file) lists {from_index}")
        elif recorded is None:
            counts.append(None)
            problems.append(f"{entry['file']}: the sidecar records no byte size to check its count of {records} "
                            "against")
        elif size != int(recorded):
            counts.append(None)
            problems.append(f"{entry['file']}: the sidecar says {records} records in {recorded} bytes, but the file "
                            f"has {size} bytes")
        else:
            counts.append(records)
    return counts, problems


def class_names(data: Mapping[str, Any] | None) -> list[str] | None:
    """The class names a sidecar records (ImageFolder's sorted order, label i is `names[i]`), or None."""
    if not data:
        return None
    for holder in (data.get("image") or {}, data):
        for key in ("classes", "class_names", "labels"):
            names = holder.get(key) if isinstance(holder, Mapping) else None
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                return list(names)
    return None
