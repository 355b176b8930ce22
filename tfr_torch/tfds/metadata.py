"""Reading and checking a TensorFlow Datasets directory's metadata, without TensorFlow.

A prepared TFDS dataset lives in `<data_dir>/<name>/<version>/` (configs add a level: `<name>/<config>/<version>/`) and
holds the shards (`<name>-<split>.tfrecord-00000-of-00004`), `dataset_info.json` (splits, shard lengths, file
name template, file format, supervised keys), `features.json` (the feature tree) and `<feature>.labels.txt` (class
names of ClassLabel features). `read_info` finds the version folder, reads and validates these files, and says
what is wrong with them naming the file.

>>> info = read_info("~/tensorflow_datasets", "mnist")     # doctest: +SKIP
>>> info.version, info.splits["train"].num_examples
('3.0.1', 60000)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from tfr_torch.errors import TFRecordError
from tfr_torch.format.paths import PathLike, as_path, exists, file_size, is_url, open_input
from tfr_torch.format.shardset import TFDS_TEMPLATE, fill_template, tfds_file_bytes, unknown_placeholders

__all__ = ["TFDSMetadataError", "SplitInfo", "TFDSInfo", "read_info", "find_version_dir", "is_tfds_dir",
           "DEFAULT_TEMPLATE"]

DEFAULT_TEMPLATE = TFDS_TEMPLATE  # the file layout (templates, shard names, sizes) is format/shardset.py's
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


class TFDSMetadataError(TFRecordError, ValueError):
    """A TFDS dataset directory whose metadata (dataset_info.json, features.json, *.labels.txt) is missing,
    malformed, unsupported, or disagrees with its shards. `path` is the file concerned."""


@dataclass(frozen=True)
class SplitInfo:
    """One split of dataset_info.json: its name, each shard's example count, its size in bytes (the serialized
    examples, without TFRecord framing; None when not recorded) and the shard file name template."""

    name: str
    shard_lengths: tuple[int, ...]
    num_bytes: Optional[int] = None
    filepath_template: str = DEFAULT_TEMPLATE

    @property
    def num_examples(self) -> int:
        return sum(self.shard_lengths)

    @property
    def num_shards(self) -> int:
        return len(self.shard_lengths)

    def filenames(self, dataset: str, file_format: str = "tfrecord") -> list[str]:
        """The shard file names, as TFDS's ShardedFileTemplate makes them."""
        n = self.num_shards
        return [fill_template(self.filepath_template, dataset, self.name, file_format, i, n) for i in range(n)]


@dataclass(frozen=True)
class TFDSInfo:
    """What a TFDS dataset directory says about itself (see `read_info`).

    `path`: the version folder; `features`: features.json as parsed JSON; `class_names`: the names read from each
    `*.labels.txt`, by file stem (e.g. "label", "objects-label"); `supervised_keys`: (input, target) feature keys or
    None.
    """

    path: str
    name: str
    version: str
    file_format: str
    splits: Mapping[str, SplitInfo]
    features: Mapping[str, Any]
    supervised_keys: Optional[tuple[str, str]] = None
    description: str = ""
    class_names: Mapping[str, list[str]] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def info_path(self) -> str:
        return f"{self.path}/dataset_info.json"

    def shard_paths(self, split: str) -> list[str]:
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}; {self.info_path} lists {', '.join(map(repr, self.splits))}")
        return [f"{self.path}/{n}" for n in self.splits[split].filenames(self.name, self.file_format)]


def _listdir(path: str) -> list[str]:
    if is_url(path):
        from tfr_torch.format.paths import _fsspec

        fs, inner = _fsspec(path)
        return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(inner, detail=False)]
    return os.listdir(path)


def _isdir(path: str) -> bool:
    if is_url(path):
        from tfr_torch.format.paths import _fsspec

        fs, inner = _fsspec(path)
        return bool(fs.isdir(inner))
    return os.path.isdir(path)


def is_tfds_dir(path: PathLike) -> bool:
    """True for a local TFDS version folder (it holds dataset_info.json) or a folder with version subfolders."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    text = os.path.expanduser(as_path(path)).rstrip("/")
    if any(c in text for c in "*?[") or is_url(text):  # local folders only: no request to tell a URL apart
        return False
    try:
        if not _isdir(text):
            return False
        if exists(f"{text}/dataset_info.json"):
            return True
        return any(_VERSION.match(v) and exists(f"{text}/{v}/dataset_info.json") for v in _listdir(text))
    except (ImportError, OSError, ValueError):  # a URL without its fsspec package, an unreadable folder: not one
        return False


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def find_version_dir(path: PathLike, name: Optional[str] = None, version: Optional[str] = None) -> str:
    """The version folder of a dataset: `path` itself when it holds dataset_info.json; else
    `path[/name]/<version>`, the latest version (by number) when `version` is None."""
    root = os.path.expanduser(as_path(path)).rstrip("/")
    if name:
        root = f"{root}/{name.strip('/')}"
    if version is None and exists(f"{root}/dataset_info.json"):
        return root
    if not _isdir(root):
        raise FileNotFoundError(f"no TFDS dataset at {root}: the folder does not exist")
    if version is not None:
        version = str(version)
        if not exists(f"{root}/{version}/dataset_info.json"):
            found = sorted((v for v in _listdir(root) if _VERSION.match(v)), key=_version_key)
            raise FileNotFoundError(f"no version {version} of the TFDS dataset in {root} (found: "
                                    f"{', '.join(found) or 'no version folder'})")
        return f"{root}/{version}"
    versions = sorted((v for v in _listdir(root) if _VERSION.match(v) and exists(f"{root}/{v}/dataset_info.json")),
                      key=_version_key)
    if not versions:
        raise FileNotFoundError(f"{root} is not a TFDS dataset folder: it holds no dataset_info.json and no version "
                                "folder (such as 1.0.0/) that does")
    return f"{root}/{versions[-1]}"


def _read_json(path: str) -> Any:
    try:
        with open_input(path) as f:
            text = f.read()
    except FileNotFoundError:
        raise TFDSMetadataError("missing: a TFDS dataset folder holds dataset_info.json and features.json",
                                path) from None
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise TFDSMetadataError(f"not valid JSON: {exc}", path) from None


def _int(value: Any, what: str, path: str) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):  # int() would truncate
        raise TFDSMetadataError(f"{what} must be an integer, got {value!r}", path)
    try:
        number = int(value)  # protobuf's JSON writes int64 as strings
    except (TypeError, ValueError):
        raise TFDSMetadataError(f"{what} must be an integer, got {value!r}", path) from None
    if number < 0:
        raise TFDSMetadataError(f"{what} must not be negative, got {number}", path)
    return number


def _split_info(entry: Any, i: int, path: str) -> SplitInfo:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise TFDSMetadataError(f"splits[{i}] must be an object with a non-empty \"name\", got {entry!r}", path)
    name = entry["name"]
    lengths = entry.get("shardLengths")
    if lengths is None:
        raise TFDSMetadataError(f"split {name!r} has no \"shardLengths\" (examples per shard): it was written by a "
                                "TFDS too old for tfr_torch to read its shards safely (prepare it again with TFDS 4)",
                                path)
    if not isinstance(lengths, list):
        raise TFDSMetadataError(f"split {name!r}: \"shardLengths\" must be a list, got {lengths!r}", path)
    shard_lengths = tuple(_int(v, f"split {name!r}: shardLengths[{k}]", path) for k, v in enumerate(lengths))
    num_bytes = entry.get("numBytes")
    template = entry.get("filepathTemplate") or DEFAULT_TEMPLATE
    unknown = unknown_placeholders(template) if isinstance(template, str) else []
    if unknown or not isinstance(template, str):
        raise TFDSMetadataError(f"split {name!r}: unknown placeholder(s) {unknown} in filepathTemplate "
                                f"{template!r}", path)
    return SplitInfo(name, shard_lengths, None if num_bytes is None else _int(num_bytes, f"split {name!r}: numBytes",
                                                                               path), template)


def _supervised(data: Mapping[str, Any], path: str) -> Optional[tuple[str, str]]:
    keys = data.get("supervisedKeys")
    if not keys:
        return None
    if isinstance(keys, Mapping) and isinstance(keys.get("input"), str) and isinstance(keys.get("output"), str):
        return keys["input"], keys["output"]  # TFDS < 4.7
    tuple_ = keys.get("tuple") if isinstance(keys, Mapping) else None
    items = tuple_.get("items") if isinstance(tuple_, Mapping) else None
    found = [item.get("featureKey") if isinstance(item, Mapping) else None
             for item in (items if isinstance(items, list) else [])]
    names = [n for n in found if isinstance(n, str)]
    if len(found) != 2 or len(names) != 2:
        raise TFDSMetadataError("supervisedKeys: tfr_torch reads an (input, target) pair of feature keys, got "
                                f"{keys!r}", path)
    return names[0], names[1]


def _labels_files(folder: str) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for entry in _listdir(folder):
        if entry.endswith(".labels.txt"):
            with open_input(f"{folder}/{entry}") as f:
                data = f.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TFDSMetadataError(f"class names are not UTF-8 text ({exc}): expected one name a line",
                                        f"{folder}/{entry}") from None
            names[entry[: -len(".labels.txt")]] = [line.strip() for line in text.split("\n") if line.strip()]
    return names


def read_info(path: PathLike, name: Optional[str] = None, version: Optional[str] = None) -> TFDSInfo:
    """Read a TFDS dataset's metadata: `path` is the version folder, or a `data_dir` with `name` (and `version`,
    default the latest). Only TFRecord datasets can be read (`fileFormat` "tfrecord")."""
    folder = find_version_dir(path, name, version)
    info_path = f"{folder}/dataset_info.json"
    data = _read_json(info_path)
    if not isinstance(data, Mapping):
        raise TFDSMetadataError(f"expected a JSON object, got {type(data).__name__}", info_path)
    file_format = data.get("fileFormat") or "tfrecord"
    if file_format != "tfrecord":
        raise TFDSMetadataError(f"the shards are in the {file_format!r} format; tfr_torch reads TFRecord datasets only "
                                "(prepare the dataset with file_format='tfrecord')", info_path)
    dataset = data.get("name") or folder.rstrip("/").split("/")[-2]
    splits_json = data.get("splits")
    if not isinstance(splits_json, list) or not splits_json:
        raise TFDSMetadataError("no \"splits\": the dataset was not prepared (or this is not a TFDS dataset_info.json)",
                                info_path)
    splits: dict[str, SplitInfo] = {}
    for i, entry in enumerate(splits_json):
        split = _split_info(entry, i, info_path)
        if split.name in splits:
            raise TFDSMetadataError(f"split {split.name!r} is listed twice", info_path)
        splits[split.name] = split
    features_path = f"{folder}/features.json"
    features = _read_json(features_path)
    if not isinstance(features, Mapping):
        raise TFDSMetadataError(f"expected a JSON object, got {type(features).__name__}", features_path)
    return TFDSInfo(path=folder, name=str(dataset), version=str(data.get("version") or folder.rsplit("/", 1)[-1]),
                    file_format=file_format, splits=splits, features=features,
                    supervised_keys=_supervised(data, info_path), description=str(data.get("description") or ""),
                    class_names=_labels_files(folder), raw=data)


def check_split_files(info: TFDSInfo, split: str) -> list[str]:
    """The split's shard paths, after checking that every shard exists and, when dataset_info.json records the
    split's size, that the files hold exactly that many bytes (serialized examples plus their framing).
    Returns the paths; raises TFDSMetadataError naming the file otherwise. When the sizes disagree, or the split
    records no numBytes, the shards are counted, and the first shard whose count differs from shardLengths is named
    with both numbers."""
    paths = info.shard_paths(split)
    for p in paths:
        if not exists(p):
            raise TFDSMetadataError(f"shard missing: {info.info_path} lists {len(paths)} shard(s) for split {split!r}",
                                    p)
    split_info = info.splits[split]
    # the files' total size checks shardLengths where numBytes is recorded; without it (protobuf's JSON leaves out a
    # numBytes of 0, and a hand-made file may lack it) the shards are counted, as when the sizes disagree: a count
    # trusted unchecked would make a slice ("train[3:7]") take other records than TFDS's, silently
    if split_info.num_bytes is not None:
        total = sum(file_size(p) for p in paths)
        if total == tfds_file_bytes(split_info.num_bytes, split_info.num_examples):
            return paths
    from tfr_torch.format.index import scan_index

    for p, expected in zip(paths, split_info.shard_lengths):
        found = len(scan_index(p, "none"))
        if found != expected:
            raise TFDSMetadataError(f"shard holds {found} records but {info.info_path} says {expected} "
                                    f"(shardLengths of split {split!r})", p)
    return paths


def check_counts(info: TFDSInfo, split: str, paths: Sequence[str], counts: Sequence[int]) -> None:
    """Raise TFDSMetadataError when a shard's record count (from its index) differs from shardLengths."""
    for p, found, expected in zip(paths, counts, info.splits[split].shard_lengths):
        if found != expected:
            raise TFDSMetadataError(f"shard holds {found} records but {info.info_path} says {expected} (shardLengths "
                                    f"of split {split!r})", p)
