"""What a dataset's arguments resolve to before any record is read, shared by TFRecordDataset and
IndexedTFRecordDataset: `features` (a spec, "auto" from the sidecar, or an object with its own plan) as the
decoding plan, the files' sizes (every missing file named at once), and whether `paths` is a TFDS folder."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tfr_torch.decode.hints import check_spec
from tfr_torch.decode.plan import compile_features
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.sidecar import spec_of_sidecar
from tfr_torch.format.paths import file_sizes
from tfr_torch.format.shardset import Sidecar

__all__ = ["auto_features", "check_location_key", "duplicates_warning", "existing_sizes", "plan_of"]


def auto_features(sidecar: Sidecar | None) -> dict[str, Any] | SequenceFeatures:
    """The spec of features="auto": the one in the sidecar ShardedWriter writes beside its shards (a dict, or a
    SequenceFeatures for SequenceExamples)."""
    spec = spec_of_sidecar(sidecar) if sidecar is not None else None
    if spec is None:
        raise ValueError("features='auto' needs the sidecar ShardedWriter writes beside its shards "
                         "(<name>-<split>.tfr_torch.json) and none describes these files; pass a spec "
                         "(tfr_torch.infer_features(paths) proposes one)")
    return spec


def existing_sizes(paths: Sequence[str]) -> list[int | None]:
    """Each file's size; FileNotFoundError now, in the main process, naming every missing file (a DataLoader
    worker would find them only when it reaches them)."""
    sizes = file_sizes(paths)
    missing = [p for p, size in zip(paths, sizes) if size is None]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise FileNotFoundError(f"{len(missing)} of the dataset's {len(paths)} file(s) do not exist (or are "
                                f"folders): {shown}")
    return sizes


def duplicates_warning(paths: Sequence[str]) -> str | None:
    """The warning for files named more than once in a dataset's list (a glob and a path that both name one, say):
    each is read as many times per epoch as it is named, so its records are not read once. None when every file is
    named once."""
    seen: dict[str, int] = {}
    for path in paths:
        key = path if "://" in path else os.path.normcase(os.path.abspath(os.path.expanduser(path)))  # no I/O
        seen[key] = seen.get(key, 0) + 1
    repeated = {k: n for k, n in seen.items() if n > 1}
    if not repeated:
        return None
    shown = ", ".join(f"{k} ({n} times)" for k, n in list(repeated.items())[:3])
    more = f" and {len(repeated) - 3} more" if len(repeated) > 3 else ""
    return (f"{len(repeated)} file(s) are named more than once in the dataset's files: {shown}{more}; each is read "
            "as many times per epoch as it is named (pass each file once to read every record once)")


def check_location_key(key: Any, features: Any, as_supervised: bool) -> str | None:
    """A dataset's `location_key` checked: a str that no feature (or a SequenceExample's "context" /
    "feature_lists") already names, for items that are dicts (decoded, not raw bytes nor (input, target) pairs)."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        raise TypeError(f"location_key must be a non-empty str (the key of each item's \"path:offset\"), got {key!r}")
    if features is None:
        raise ValueError("location_key needs features=: raw records are bytes, with no key to hold a location")
    if as_supervised or getattr(features, "as_supervised", False):  # the argument, or a TFDSDecoder's own
        raise ValueError("location_key does not go with as_supervised=True: its items are (input, target) pairs, "
                         "with no key to hold a location")
    if isinstance(features, SequenceFeatures):
        taken: list[Any] = ["context", "feature_lists"]
    elif hasattr(features, "keys"):
        taken = list(features.keys())
    else:  # a TFDSDecoder: its items' keys are its feature tree's top level
        taken = list(getattr(getattr(features, "tree", None), "children", None) or ())
    if key in taken:
        raise ValueError(f"location_key {key!r} is already a key of the decoded items: choose another")
    return key


def _is_tfds(paths: Any) -> bool:
    """A TFDS dataset folder (or a tfr_torch.tfds.TFDSInfo) rather than TFRecord files."""
    if type(paths).__name__ == "TFDSInfo":
        return True
    return isinstance(paths, (str, os.PathLike)) and os.path.isdir(os.path.expanduser(os.fspath(paths)))


def plan_of(features: Any) -> Any:
    """The decoding plan of `features`: a spec dict compiled by tfr_torch, or an object that makes its own plan
    (tfr_torch.tfds.TFDSDecoder). A spec spelled the way another library spells it gets a TypeError saying what
    to write instead (decode/hints.py)."""
    if hasattr(features, "plan"):
        return features.plan()
    if isinstance(features, Mapping):
        check_spec(features)
    return compile_features(features)
