"""TFRecord files, ShardedWriter folders and TFDS folders as Hugging Face `datasets`."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, Union

import datasets

from tfr_torch._version import __version__
from tfr_torch.data.dataset import TFRecordDataset
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.errors import DecodeError
from tfr_torch.format.index import scan_index
from tfr_torch.format.options import CompressionOrAuto
from tfr_torch.format.paths import PathLike, as_path, expand_paths, file_size, is_url
from tfr_torch.format.shardset import Sidecar, class_names, find_sidecar, read_sidecar
from tfr_torch.hf.features import _utf8_keys, features_from_spec, features_from_tfds, to_row

__all__ = ["load", "RAW_COLUMN", "HF_KEY"]

RAW_COLUMN = "bytes"  # the column of raw records (features=None), as tfr_torch.ray names it
HF_KEY = "huggingface"  # the sidecar entry tfr_torch.hf.write adds: {"features": Features.to_dict()}

AnyDataset = Union[datasets.Dataset, datasets.IterableDataset, datasets.DatasetDict, datasets.IterableDatasetDict]


class _UnitDataset(TFRecordDataset):
    """A TFRecordDataset that reads its unit whole: `datasets` has already given this unit to this DataLoader
    worker, so splitting it again by worker would lose the other workers' shares."""

    def _worker_info(self) -> Any:
        return None


class _Reader:
    """Reads one unit (a file, or a TFDS split string) into `datasets` rows; pickled to datasets' worker
    processes (num_proc) and streaming workers."""

    def __init__(self, features: datasets.Features, spec: Any, tfds: Any, options: Mapping[str, Any]) -> None:
        self.features, self.spec, self.tfds, self.options = features, spec, tfds, dict(options)

    def rows(self, unit: str) -> Iterator[dict[str, Any]]:
        if self.tfds is not None:
            from tfr_torch.tfds.features import TFDSDecoder

            decoder: Any = TFDSDecoder(self.tfds, decode_images=False)  # a decoder the datasets accept as features
            dataset: TFRecordDataset = _UnitDataset(self.tfds, decoder, split=unit, rank=0, world_size=1,
                                      verify=self.options["verify"])
        else:
            dataset = _UnitDataset(unit, self.spec, index=self.options["index"], rank=0, world_size=1,
                                      compression=self.options["compression"], verify=self.options["verify"])
        features = self.features
        if self.spec is None and self.tfds is None:
            for record in dataset:
                yield {RAW_COLUMN: record}
            return
        sequence = isinstance(self.spec, SequenceFeatures)
        for row, item in enumerate(dataset):
            if sequence:  # {"context": {...}, "feature_lists": {...}}: an error names the feature inside
                yield {part: {key: self._convert(unit, dataset, row, key, feature, item[part][key])
                              for key, feature in part_features.items()}
                       for part, part_features in features.items()}
            else:
                yield {key: self._convert(unit, dataset, row, key, feature, item[key])
                       for key, feature in features.items()}

    def _convert(self, unit: str, dataset: TFRecordDataset, row: int, key: str, feature: Any, value: Any) -> Any:
        """`to_row` of one feature's value; text that is not UTF-8 raises naming the file, offset and feature."""
        try:
            return to_row(feature, value)
        except UnicodeDecodeError as err:
            path, offset = self._where(unit, dataset, row)
            raise DecodeError(f"feature {key!r} of record {row} is not UTF-8 text ({err}); load it as binary "
                              "(leave it out of utf8=)", path, offset, key=key, index=row) from err

    def _where(self, unit: str, dataset: TFRecordDataset, row: int) -> tuple[Optional[str], Optional[int]]:
        """The file and byte offset of the unit's record `row`, for an error: a file unit, or a TFDS unit that is
        one whole shard ("train[3shard]"); a slice of a TFDS split names no file."""
        if self.tfds is None:
            return unit, _record_offset(unit, row, self.options["compression"])
        if len(dataset.paths) == 1 and re.fullmatch(r".*\[\d+shard\]", unit):
            return dataset.paths[0], _record_offset(dataset.paths[0], row, "auto")
        return (dataset.paths[0] if len(dataset.paths) == 1 else None), None


def _record_offset(path: str, row: int, compression: CompressionOrAuto) -> Optional[int]:
    """The byte offset of record `row` of a file read whole and in order (for compressed files, in the
    decompressed stream): found again by scanning the headers, only when an error must name it."""
    index = scan_index(path, compression)
    return int(index[row, 0]) if row < len(index) else None


def _generate(units: list[str], reader: _Reader) -> Iterator[dict[str, Any]]:
    for unit in units:
        yield from reader.rows(unit)


def load(paths: PathLike | Sequence[PathLike] | Any, features: Mapping[str, Any] | str | None = "auto", *,
         split: Optional[str] = None, streaming: bool = False, utf8: bool | Sequence[str] = False,
         index: Any = "auto", compression: str = "auto", verify: bool = True, cache_dir: Optional[str] = None,
         keep_in_memory: bool = False, num_proc: Optional[int] = None) -> AnyDataset:
    """TFRecord data as a `datasets.Dataset` (Arrow files written in chunks of rows: bounded memory, whatever the
    size), or with `streaming=True` a `datasets.IterableDataset` that reads the files (local or fsspec URLs) as it
    is iterated. Each file (each TFDS shard) is one unit of work for `num_proc` and for streaming workers.

    - `paths`: TFRecord files (a path, glob or list); a TFDS dataset folder or `tfr_torch.tfds.read_info(...)`
      (`split` in TFDS's syntax, all splits as a `DatasetDict` without it); or a folder of ShardedWriter shard
      sets (one split per sidecar: a `DatasetDict`, or the one named by `split`).
    - `features`: "auto" (the sidecar's spec, with the `datasets` features `write` recorded, the image
      converters' `Image` and `ClassLabel`; a TFDS folder's features.json), a spec, or None (a `bytes` column of
      raw records). `utf8`: the string features of a spec to give as text (`Value("string")`), True for all.

    >>> ds = tfr_torch.hf.load("~/tensorflow_datasets/mnist", split="train")     # doctest: +SKIP
    >>> ds.features["label"].names                                               # doctest: +SKIP
    """
    from tfr_torch.tfds.metadata import TFDSInfo, is_tfds_dir, read_info

    options = {"index": index, "compression": compression, "verify": bool(verify)}
    make = dict(streaming=streaming, cache_dir=cache_dir, keep_in_memory=keep_in_memory, num_proc=num_proc)
    if isinstance(paths, TFDSInfo) or (isinstance(paths, (str, os.PathLike)) and is_tfds_dir(paths)):
        info = paths if isinstance(paths, TFDSInfo) else read_info(paths)
        if not (isinstance(features, str) and features == "auto") or utf8 is not False:
            raise ValueError("a TFDS folder's features come from its features.json: leave features='auto' and "
                             "utf8=False (Text features are strings, string Tensors binary); for its raw records, "
                             "pass its shard files with features=None")
        return _load_tfds(info, split, options, make)
    if isinstance(paths, (str, os.PathLike)) and not is_url(as_path(paths)) and os.path.isdir(
            os.path.expanduser(as_path(paths))):
        return _load_folder(os.path.expanduser(as_path(paths)), features, split, utf8, options, make)
    if split is not None and not re.fullmatch(r"\w+(\.\w+)*", split):  # never a slice silently read whole
        raise ValueError(f"split={split!r}: slices and sums of splits select the records of TFDS folders; for "
                         "TFRecord files split= only names the split (such as 'train'): slice the Dataset instead "
                         "(ds.select(range(...)))")
    return _load_files(expand_paths(paths), features, split or "train", utf8, options, make)


def _load_tfds(info: Any, split: Optional[str], options: Mapping[str, Any], make: Mapping[str, Any]) -> AnyDataset:
    from tfr_torch.tfds.features import TFDSDecoder

    hf = features_from_tfds(TFDSDecoder(info, decode_images=False))
    reader = _Reader(hf, None, info, options)
    # the cache key: every shard file (its size and time: a shard rewritten in place is converted again), the counts
    files = [info.info_path, *(p for s in info.splits for p in info.shard_paths(s)),
             *(f"{s}:{t.shard_lengths}" for s, t in info.splits.items())]

    def one(split_string: str) -> Any:
        lengths = info.splits[split_string].shard_lengths if split_string in info.splits else None
        # a whole split: one unit per shard ("train[3shard]"; TFDS refuses a selection of no example), for
        # num_proc and streaming workers; a slice or a sum of splits is one unit
        units = [f"{split_string}[{i}shard]" for i, n in enumerate(lengths) if n] if lengths else [split_string]
        return _make(units or [split_string], reader, hf, split_string, files, make)

    if split is not None:
        return one(split)
    parts = {name: one(name) for name in info.splits}
    return datasets.IterableDatasetDict(parts) if make["streaming"] else datasets.DatasetDict(parts)


def _load_folder(folder: str, features: Any, split: Optional[str], utf8: Any, options: Mapping[str, Any],
                 make: Mapping[str, Any]) -> AnyDataset:
    sidecars = sorted(glob.glob(f"{glob.escape(folder)}/*.tfr_torch.json"))
    sets, found = {}, {}
    for path in sidecars:
        data = read_sidecar(path)
        sets[str(data["split"])] = [f"{folder}/{s['file']}" for s in data["shards"]]
        found[str(data["split"])] = Sidecar(path, data, list(data["shards"]))
    if not sets:
        raise ValueError(f"{folder} holds no shard set (no *.tfr_torch.json sidecar) and no TFDS dataset_info.json: "
                         "pass the TFRecord files (a glob such as 'folder/*.tfrecord*')")
    if split is not None:
        if split not in sets:
            raise ValueError(f"{folder} has no split {split!r} (it has {', '.join(map(repr, sorted(sets)))})")
        return _load_files(sets[split], features, split, utf8, options, make, found[split])
    parts = {name: _load_files(files, features, name, utf8, options, make, found[name])
             for name, files in sets.items()}
    return datasets.IterableDatasetDict(parts) if make["streaming"] else datasets.DatasetDict(parts)


def _load_files(paths: list[str], features: Any, split: str, utf8: Any, options: Mapping[str, Any],
                make: Mapping[str, Any], sidecar: Optional[Sidecar] = None) -> Any:
    """`sidecar`: the shard set's (a folder's split), which also describes a set of no shards."""
    from tfr_torch.data.arguments import auto_features

    if features is None:
        hf = datasets.Features({RAW_COLUMN: datasets.Value("binary")})
        return _make(paths, _Reader(hf, None, None, options), hf, split, paths, make)
    sidecar = sidecar if sidecar is not None else find_sidecar(paths)
    stored = (sidecar.data.get(HF_KEY) or {}).get("features") if sidecar is not None else None
    if isinstance(features, str):
        spec = auto_features(sidecar)  # the sidecar's spec, or the error that says there is none
        if stored is not None:  # what tfr_torch.hf.write recorded (Examples or SequenceExamples), utf8 keys as text
            hf = _as_text(datasets.Features.from_dict(stored), spec, utf8)
        elif isinstance(spec, SequenceFeatures):
            hf = features_from_spec(spec, utf8)
        else:
            image = (sidecar.data.get("image") if sidecar is not None else None) or {}
            image_keys = [image.get("key", "image/encoded")] if image else []
            names = class_names(sidecar.data if sidecar is not None else None)
            label = image.get("label_key", "image/class/label")
            hf = features_from_spec(spec, utf8, image_keys=[k for k in image_keys if k in spec],
                                    class_names={label: names} if names and label in spec else None)
    else:
        spec = features if isinstance(features, SequenceFeatures) else dict(features)
        hf = features_from_spec(spec, utf8)
    return _make(paths, _Reader(hf, spec, None, options), hf, split, [*paths, repr(spec)], make)


def _as_text(features: datasets.Features, spec: Any, utf8: Any) -> datasets.Features:
    """Recorded features with the binary columns `utf8` names (True: every binary column; the keys of either part
    of a SequenceExample) as `Value("string")`; the rest (Image, ClassLabel, text) as they were recorded."""
    if utf8 is False:
        return features
    parts = [spec.context, spec.sequence] if isinstance(spec, SequenceFeatures) else [spec]
    keys = _utf8_keys({k: f for part in parts for k, f in part.items()}, utf8)

    def text(key: str, feature: Any) -> Any:
        if isinstance(feature, datasets.Value) and feature.dtype in ("binary", "large_binary"):
            return datasets.Value("string")
        if isinstance(feature, datasets.List):
            return datasets.List(text(key, feature.feature), length=feature.length)
        if utf8 is not True:
            raise ValueError(f"utf8 names {key!r}, which the sidecar records as {feature!r}, not a binary column")
        return feature

    def convert(group: Mapping[str, Any]) -> dict[str, Any]:
        return {k: text(k, f) if k in keys else f for k, f in group.items()}

    if isinstance(spec, SequenceFeatures):
        return datasets.Features({part: convert(group) for part, group in features.items()})
    return datasets.Features(convert(features))


def _fingerprint(parts: Sequence[Any], hf: datasets.Features, options: Any) -> str:
    """The cache key of a conversion: the files (name, size, and the modification time, or for a URL the time /
    ETag / generation its filesystem reports), the features and the options, so a rewritten file is converted
    again rather than read from a stale cache."""
    described = []
    for p in parts:
        text = str(p)
        if os.path.exists(text):
            stat = os.stat(text)
            described.append([os.path.abspath(text), stat.st_size, stat.st_mtime_ns])
        elif is_url(text):
            described.append([text, *_remote_stamp(text)])
        else:
            described.append([text])
    data = json.dumps([__version__, described, hf.to_dict(), options], sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:32]


# what fsspec's info() says changes when an object is written again (gcsfs, s3fs, adlfs, http, local, memory)
_STAMPS = ("mtime", "created", "updated", "LastModified", "last_modified", "generation", "etag", "ETag",
           "VersionId", "md5Hash", "crc32c", "content_md5")


def _remote_stamp(url: str) -> list[Any]:
    """A URL's size and whatever its filesystem reports that changes with its content (time, ETag, generation)."""
    import fsspec

    fs, inner = fsspec.core.url_to_fs(url)
    info = fs.info(inner)
    return [info.get("size", file_size(url)), *(f"{k}={info[k]}" for k in _STAMPS if info.get(k) is not None)]


def _make(units: list[str], reader: _Reader, hf: datasets.Features, split: str, parts: Sequence[Any],
          make: Mapping[str, Any]) -> Any:
    name = split if re.fullmatch(r"\w+(\.\w+)*", split) else "train"
    kwargs = {"units": list(units), "reader": reader}
    if make["streaming"]:
        return datasets.IterableDataset.from_generator(_generate, features=hf, gen_kwargs=kwargs,
                                                       split=datasets.NamedSplit(name))
    fingerprint = _fingerprint([*parts, *units, f"split={name}"], hf, reader.options)
    if not units:  # no files (a shard set of no shards): datasets makes no split of no generator call
        return _empty(hf, name)
    try:
        return datasets.Dataset.from_generator(_generate, features=hf, gen_kwargs=kwargs,
                                               split=datasets.NamedSplit(name), cache_dir=make["cache_dir"],
                                               keep_in_memory=make["keep_in_memory"], num_proc=make["num_proc"],
                                               fingerprint=fingerprint)
    except ValueError as err:  # files of no records: datasets refuses a split of no rows; a streamed one is empty
        if "corresponds to no data" not in str(err):
            raise
        return _empty(hf, name)


def _empty(hf: datasets.Features, name: str) -> datasets.Dataset:
    """A Dataset of no rows with the features, as a stream of the same files is empty."""
    return datasets.Dataset.from_dict({k: [] for k in hf}, features=hf, split=datasets.NamedSplit(name))
