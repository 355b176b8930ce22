"""The files of a shard set, as ShardedWriter, `reshard` and Ray's `write_tfrecords` lay them out and the datasets
find them again: shards named the TFDS way (`{name}-{split}.tfrecord-00000-of-00004`), an index beside each shard
(`<shard>.idx`), and one JSON sidecar `{name}-{split}.tfr_torch.json` holding the features spec (in the JSON form
of tfr_torch.decode.sidecar), every shard's record count and byte size, the image encoding and the version.

The file layout of a TensorFlow Datasets split lives here too: dataset_info.json's `filepathTemplate` and its
placeholders (`fill_template`), shard names parsed back into name and split (`parse_shard_name`), and the byte
count a split's `numBytes` records (`tfds_num_bytes`, `tfds_file_bytes`). tfr_torch.tfds reads and writes the rest
of that metadata (its JSON, features.json).

Torch-free, like the rest of the format layer. The sidecar's spec is kept here as JSON: tfr_torch.decode.sidecar
turns it into feature specs and back.

>>> shard_name("mnist", "train", 3, 4)
'mnist-train.tfrecord-00003-of-00004'
>>> sidecar_path("out", "mnist", "train")
'out/mnist-train.tfr_torch.json'
>>> fill_template(TFDS_TEMPLATE, "mnist", "train", "tfrecord", 3, 4)
'mnist-train.tfrecord-00003-of-00004'
>>> parse_shard_name("mnist-train.tfrecord-00003-of-00004")
('mnist', 'train', 3, 4)
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfr_torch._version import __version__
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.paths import as_path, exists, open_input

__all__ = ["SIDECAR_FORMAT", "SHARD_PATTERN", "TFDS_TEMPLATE", "TEMPLATE_PLACEHOLDERS", "Sidecar", "check_set_name",
           "shard_name",
           "shard_files", "stale_shards", "sidecar_path", "sidecar_data", "read_sidecar", "find_sidecar",
           "trusted_counts", "class_names", "fill_template", "unknown_placeholders", "parse_shard_name",
           "tfds_num_bytes", "tfds_file_bytes"]

SIDECAR_FORMAT = "tfr_torch.shards/1"
# a shard's path as TFDS names it: {prefix}.tfrecord-00003-of-00004 (prefix: folder/name-split)
SHARD_PATTERN = re.compile(r"^(?P<prefix>.+)\.tfrecord-(?P<index>\d+)-of-(?P<count>\d+)$")


def check_set_name(name: object, split: object) -> None:
    """ValueError naming the argument unless `name` and `split` can name a shard set's files (non-empty strings
    without '/')."""
    for label, value in (("name", name), ("split", split)):
        if not isinstance(value, str) or not value or "/" in value:
            raise ValueError(f"{label} must be a non-empty string without '/', got {value!r}")


def shard_name(name: str, split: str, index: int, count: int) -> str:
    """TFDS's shard name: `{name}-{split}.tfrecord-{index:05d}-of-{count:05d}` (more digits past 99999)."""
    digits = max(5, len(str(count)))
    return f"{name}-{split}.tfrecord-{index:0{digits}d}-of-{count:0{digits}d}"


def shard_files(name: str, split: str) -> re.Pattern[str]:
    """The file names of any shard set of `name` and `split`, whatever its shard count, their indexes and seek
    points."""
    return re.compile(re.escape(f"{name}-{split}.tfrecord-") + r"\d+-of-\d+(\.idx(\.seek)?)?")


def stale_shards(names: Iterable[str], name: str, split: str, finals: Sequence[str]) -> list[str]:
    """Of the file `names` in an output folder, those of an earlier set of `name` and `split` with another shard
    count (shards, their indexes and seek points) that the new set, whose shard names are `finals`, does not
    overwrite: remove them once it is written."""
    pattern = shard_files(name, split)
    keep = set(finals)
    return [f for f in names if pattern.fullmatch(f) and f.removesuffix(".seek").removesuffix(".idx") not in keep]


def sidecar_path(out_dir: str, name: str, split: str) -> str:
    """`{out_dir}/{name}-{split}.tfr_torch.json`."""
    return f"{out_dir.rstrip('/')}/{name}-{split}.tfr_torch.json"


def sidecar_data(name: str, split: str, compression: str, shards: Sequence[Mapping[str, Any]],
                 features: Mapping[str, Any] | None, image: Mapping[str, Any] | None,
                 sequence_features: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The sidecar's JSON content for finished `shards` (each `{"file", "records", "bytes"}`); `features` is the
    spec's JSON form (tfr_torch.decode.sidecar.spec_to_json) or None (for SequenceExamples: the context's, with
    `sequence_features` the feature lists' in that form), `compression` "none", "gzip" or "zlib"."""
    shards = [dict(shard) for shard in shards]
    data = {"format": SIDECAR_FORMAT, "name": name, "split": split,
            "compression": None if compression == "none" else compression,
            "records": sum(s["records"] for s in shards), "shards": shards,
            "features": dict(features) if features is not None else None,
            "image": dict(image) if image is not None else None, "tfr_torch_version": __version__}
    if sequence_features is not None:
        data["sequence_features"] = dict(sequence_features)
    return data


# deflate's largest expansion on inflation (zlib's FAQ: 1032:1): what a GZIP/ZLIB shard of n bytes can hold at most
_MAX_DEFLATE_RATIO = 1032


def read_sidecar(path: str) -> dict[str, Any]:
    """A sidecar's JSON content; ValueError naming the file when it is not a tfr_torch sidecar, or when its shard
    list is not one (see `_shards_problem`): a count that lies is found here where it can be (more records than
    the bytes it records could hold), else against the files (`trusted_counts`, then as they are read)."""
    with open_input(path) as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError as err:  # JSONDecodeError, and UnicodeDecodeError for bytes that are no text
        raise ValueError(f"{path} is not a tfr_torch shard sidecar (not JSON: {err})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a tfr_torch shard sidecar (JSON {json.dumps(data)[:40]}, expected an "
                         "object)")
    if data.get("format") != SIDECAR_FORMAT:
        raise ValueError(f"{path} is not a tfr_torch shard sidecar (format {data.get('format')!r}, expected "
                         f"{SIDECAR_FORMAT!r})")
    problem = _sidecar_problem(data)
    if problem is not None:
        raise ValueError(f"{path}: {problem} (a damaged or hand-edited sidecar? Remove it, or write the shard set "
                         "again)")
    return data


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _sidecar_problem(data: Mapping[str, Any]) -> str | None:
    """What makes a sidecar's content unusable, or None: its name and split strings; its shards a list of
    `{"file": a file name, "records": int >= 0, "bytes": int >= 0 (or absent / null: its count is then not
    trusted)}`, each file listed once, and no more records than its bytes could hold."""
    for key in ("name", "split"):
        if not isinstance(data.get(key), str):
            return f"{key!r} is {json.dumps(data.get(key))[:40]}, expected a string"
    shards = data.get("shards")
    if not isinstance(shards, list):
        return f"'shards' is {json.dumps(shards)[:40]}, expected a list of {{'file', 'records', 'bytes'}}"
    compressed = data.get("compression") is not None
    seen: set[str] = set()
    for i, entry in enumerate(shards):
        where = f"shard entry {i}"
        if not isinstance(entry, dict):
            return f"{where} is {json.dumps(entry)[:40]}, expected {{'file', 'records', 'bytes'}}"
        name = entry.get("file")
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            return f"{where} has 'file' {json.dumps(name)[:40]}, expected a file name"
        if name in seen:
            return f"{where} lists {name} again"
        seen.add(name)
        if "records" not in entry:
            return f"{where} ({name}) has no 'records', expected an int >= 0"
        records, size = entry["records"], entry.get("bytes")
        if not _count(records):
            return f"{where} ({name}) has 'records' {json.dumps(records)[:40]}, expected an int >= 0"
        if size is None:
            continue
        if not _count(size):
            return f"{where} ({name}) has 'bytes' {json.dumps(size)[:40]}, expected an int >= 0 (or null)"
        most = size * _MAX_DEFLATE_RATIO // OVERHEAD if compressed else size // OVERHEAD
        if records > most:
            return (f"{where} ({name}) says {records} records in {size} bytes, but {size} bytes hold at most "
                    f"{most} records ({OVERHEAD} bytes each at least{', inflated 1032:1' if compressed else ''})")
    return None


@dataclass(frozen=True)
class Sidecar:
    """A sidecar that describes a list of shards: its `path`, its JSON `data`, and per shard (in the list's order)
    its entry `{"file", "records", "bytes"}`. Its counts are what the sidecar says: check them with
    `trusted_counts` before using them."""

    path: str
    data: dict[str, Any]
    shards: list[dict[str, Any]]

    @property
    def name(self) -> str | None:
        return self.data.get("name")

    @property
    def split(self) -> str | None:
        return self.data.get("split")

    @property
    def features(self) -> dict[str, Any] | None:
        """The features spec in its JSON form (tfr_torch.decode.sidecar.spec_from_json reads it), or None."""
        return self.data.get("features") or None

    @property
    def sequence_features(self) -> dict[str, Any] | None:
        """For SequenceExamples: the feature lists' spec in that JSON form (`features` is the context's), or None."""
        return self.data.get("sequence_features")

    @property
    def image(self) -> dict[str, Any] | None:
        return self.data.get("image")

    @property
    def counts(self) -> dict[str, int]:
        """{shard file name: record count as the sidecar says}, for the shards described."""
        return {shard["file"]: int(shard["records"]) for shard in self.shards}


def find_sidecar(paths: Sequence[str]) -> Sidecar | None:
    """The sidecar beside `paths` when every path is a shard named the TFDS way and one sidecar lists them all;
    else None. Its counts are what the sidecar says: check them with `trusted_counts` before using them."""
    prefixes = set()
    for path in paths:
        match = SHARD_PATTERN.match(as_path(path))
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


# ------------------------------------------------------------------------------ TensorFlow Datasets' file layout

# dataset_info.json's filepathTemplate: TFDS's default, and every placeholder its ShardedFileTemplate knows
TFDS_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
TEMPLATE_PLACEHOLDERS = frozenset({"DATASET", "SPLIT", "FILEFORMAT", "SHARD_INDEX", "NUM_SHARDS", "SHARD_X_OF_Y"})
_PLACEHOLDER = re.compile(r"\{([A-Z_]+)\}")
# a TFDS shard's file name, {name}-{split}.tfrecord-00000-of-00004 (.tfrecords too): the split has no '-' or '.'
_TFDS_SHARD = re.compile(r"^(?P<name>.+)-(?P<split>[^-.]+)\.tfrecords?-(?P<index>\d+)-of-(?P<count>\d+)$")


def fill_template(template: str, dataset: str, split: str, file_format: str, index: int, count: int) -> str:
    """Shard `index` of `count`'s file name from a filepathTemplate, as TFDS's ShardedFileTemplate makes it."""
    values = {"DATASET": dataset, "SPLIT": split, "FILEFORMAT": file_format, "SHARD_INDEX": f"{index:05d}",
              "NUM_SHARDS": f"{count:05d}", "SHARD_X_OF_Y": f"{index:05d}-of-{count:05d}"}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def unknown_placeholders(template: str) -> list[str]:
    """The placeholders of a filepathTemplate that TFDS does not define (sorted; empty when it is usable)."""
    return sorted(set(_PLACEHOLDER.findall(template)) - TEMPLATE_PLACEHOLDERS)


def parse_shard_name(file_name: str) -> tuple[str, str, int, int] | None:
    """(name, split, index, count) of a file named the TFDS way (`mnist-train.tfrecord-00003-of-00004`), else None."""
    match = _TFDS_SHARD.match(file_name)
    if match is None:
        return None
    return match.group("name"), match.group("split"), int(match.group("index")), int(match.group("count"))


def tfds_num_bytes(shards: Sequence[tuple[int, int]]) -> int:
    """A split's `numBytes` in dataset_info.json for its shards' (records, file bytes): the serialized examples,
    without the TFRecord framing (OVERHEAD bytes per record) that the files add."""
    return sum(size - OVERHEAD * records for records, size in shards)


def tfds_file_bytes(num_bytes: int, num_examples: int) -> int:
    """What the uncompressed shards of a split with this `numBytes` and number of examples hold in all."""
    return num_bytes + OVERHEAD * num_examples
