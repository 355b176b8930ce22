"""What `TFRecordDataset` / `IndexedTFRecordDataset` read for a TFDS dataset folder and a split string: the shard
files in TFDS's order, the records to skip and take in each, the counts from dataset_info.json (checked against
the files) and the decoder built from features.json."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from tfr_torch.tfds.metadata import TFDSInfo, TFDSMetadataError, check_split_files, read_info
from tfr_torch.tfds.splits import resolve_split

__all__ = ["TFDSSource", "open_tfds", "is_tfds_source"]


def is_tfds_source(paths: Any) -> bool:
    """A TFDS dataset folder (local) or a TFDSInfo, rather than TFRecord files."""
    if isinstance(paths, TFDSInfo):
        return True
    return isinstance(paths, (str, os.PathLike)) and os.path.isdir(os.path.expanduser(os.fspath(paths)))


@dataclass
class TFDSSource:
    """The reads of one split string: `paths[i]` (a shard; a shard may appear twice, e.g. "train[:5]+train[:10]"),
    records `skips[i]` to `skips[i] + counts[i]` of it; `expected[i]` is the shard's length in dataset_info.json;
    `features` is what the dataset decodes with (a TFDSDecoder unless a spec was given)."""

    info: TFDSInfo
    split: str
    paths: list[str]
    skips: list[int]
    counts: list[int]
    expected: list[int]
    features: Any

    def windowed(self, offsets: Sequence[Optional[np.ndarray]]) -> list[Optional[np.ndarray]]:
        """Each shard's index cut to the records the split reads, after checking it counts what dataset_info.json
        says (an index, written by tfr_torch or DALI, is checked against its file when read)."""
        out: list[Optional[np.ndarray]] = []
        for path, o, skip, take, expected in zip(self.paths, offsets, self.skips, self.counts, self.expected):
            if o is None:
                out.append(None)
                continue
            if len(o) != expected:
                raise TFDSMetadataError(f"shard holds {len(o)} records but {self.info.info_path} says {expected} "
                                        f"(shardLengths of its split)", path)
            out.append(o[skip : skip + take])
        return out

    def positions(self, offsets: Sequence[Optional[np.ndarray]], compression: Any) -> list[Optional[np.ndarray]]:
        """`offsets` with an index scanned now for each shard that the split cuts inside (a slice that starts or
        ends in it) and that has none: a record skipped for an error (on_error="skip") must still count as a
        position, as in dataset_info.json's shardLengths, or the slice would take records of the next slice."""
        from tfr_torch.format.index import scan_index

        out, scanned = list(offsets), {}  # a shard that two terms cut ("train[:5]+train[3:8]") is scanned once
        for i, (path, skip, take, expected) in enumerate(zip(self.paths, self.skips, self.counts, self.expected)):
            if out[i] is None and not (skip == 0 and take == expected):
                if path not in scanned:
                    scanned[path] = scan_index(path, compression)
                out[i] = scanned[path]
        return out

    def class_names(self) -> dict[str, list[str]]:
        """Class names of every ClassLabel feature that has them, by feature key ("objects/label")."""
        features = self.features
        return features.class_names() if hasattr(features, "class_names") else {}

    @property
    def classes(self) -> Optional[list[str]]:
        """The class names of the dataset's label: the supervised target when it is a ClassLabel, else the only
        ClassLabel (named by its labels file or features.json, else "0" to "N-1" as in TFDS); None when there is no
        such feature."""
        names = self.class_names()
        target = self.info.supervised_keys[1] if self.info.supervised_keys else None
        if target in names:
            return list(names[target])
        return list(next(iter(names.values()))) if len(names) == 1 else None


def open_tfds(path: Any, split: Optional[str], features: Any = None, as_supervised: bool = False) -> TFDSSource:
    """Resolve a TFDS dataset folder (the version folder, or the dataset folder: latest version) or a TFDSInfo
    (`tfr_torch.tfds.read_info(data_dir, name, version)`) and a split string into the shards to read."""
    from tfr_torch.tfds.features import TFDSDecoder

    if isinstance(path, TFDSInfo):
        info = path
    elif isinstance(path, (str, os.PathLike)):
        info = read_info(path)
    else:
        raise TypeError(f"split= is for TFDS dataset folders: pass the folder (e.g. '~/tensorflow_datasets/mnist' or "
                        f"its version folder), not {type(path).__name__}")
    if split is None:
        raise ValueError(f"{info.path} is a TFDS dataset: pass split= (one of {', '.join(map(repr, info.splits))}, or "
                         "TFDS's slices such as 'train[:10%]' and sums such as 'train+test')")
    reads = resolve_split(split, {name: s.shard_lengths for name, s in info.splits.items()})
    files = {name: check_split_files(info, name) for name in dict.fromkeys(r.split for r in reads)}
    if features is None or (isinstance(features, str) and features == "auto"):
        features = TFDSDecoder(info, as_supervised=as_supervised)
    elif isinstance(features, TFDSDecoder):
        if as_supervised and not features.as_supervised:
            raise ValueError("as_supervised=True with a TFDSDecoder made without it: pass "
                             "TFDSDecoder(info, as_supervised=True)")
    elif as_supervised:
        raise ValueError("as_supervised=True needs the dataset's own decoder (features=None), not a feature spec")
    return TFDSSource(info=info, split=split, paths=[files[r.split][r.shard] for r in reads],
                      skips=[r.skip for r in reads], counts=[r.take for r in reads],
                      expected=[info.splits[r.split].shard_lengths[r.shard] for r in reads], features=features)
