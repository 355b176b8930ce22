"""Hugging Face `datasets` to sharded TFRecord files that TensorFlow, TFDS and tfr_torch read."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Optional, Union

import datasets

from tfr_torch.format.options import Compression
from tfr_torch.format.paths import atomic_output
from tfr_torch.format.shardset import read_sidecar, sidecar_path
from tfr_torch.hf.features import (
    from_row,
    is_sequence_features,
    sequence_spec_from_features,
    spec_from_features,
    steps_from_row,
)
from tfr_torch.hf.load import HF_KEY

__all__ = ["write", "tfds_features"]


def tfds_features(features: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """features.json (TFDS's tree) for `datasets` features, and the class names by labels-file stem: Image ->
    Image, ClassLabel -> ClassLabel, Value("string") -> Text, the rest -> Tensor of their shape and dtype."""
    from tfr_torch.hf.features import _leaf_dtype, _spec_of
    from tfr_torch.tfds.write import (
        class_label_feature,
        features_dict,
        image_feature,
        labels_file_stem,
        tensor_feature,
        text_feature,
    )

    out: dict[str, Any] = {}
    names: dict[str, list[str]] = {}
    for key, feature in features.items():
        if isinstance(feature, datasets.Image):
            out[key] = image_feature((None, None, None), "uint8", None)
        elif isinstance(feature, datasets.ClassLabel):
            out[key] = class_label_feature(feature.num_classes)
            names[labels_file_stem(key)] = list(feature.names)
        elif isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string"):
            out[key] = text_feature()
        else:
            spec = _spec_of(key, feature)
            leaf = feature
            while isinstance(leaf, datasets.List):
                leaf = leaf.feature
            if isinstance(leaf, (datasets.Image, datasets.ClassLabel)):
                raise TypeError(f"column {key!r}: lists of {type(leaf).__name__} are not written as TFDS features "
                                "here; write without tfds= (the sidecar keeps them)")
            dtype = getattr(leaf, "dtype", None) or _leaf_dtype(key, leaf)
            dtype = "string" if dtype in ("string", "large_string", "binary", "large_binary") else dtype
            shape = list(getattr(spec, "shape", []))
            if type(spec).__name__ in ("VarLenFeature", "FixedLenSequenceFeature"):
                shape = [None, *shape]
            out[key] = tensor_feature(shape, str(dtype))
    return features_dict(out), names


def write(dataset: Union[datasets.Dataset, datasets.IterableDataset, datasets.DatasetDict,
                         datasets.IterableDatasetDict], out_dir: str, name: str, split: Optional[str] = None, *,
          shard_size: Union[int, str] = "128MB", records_per_shard: Optional[int] = None,
          compression: Compression = None, tfds: Union[bool, Mapping[str, Any], None] = None,
          batch_size: int = 1000) -> dict[str, list[str]]:
    """Write a `datasets.Dataset` (each split of a `DatasetDict`) as ShardedWriter's shards of tf.train.Examples,
    each with an index, and a sidecar holding the spec and the `datasets` features (so `tfr_torch.hf.load` gives
    the same features back); or, with `tfds=True` / `tfds={"version": ..., "description": ...}`, TFDS's metadata
    (`out_dir` is then the version folder: `<data_dir>/<name>/<version>`). Columns map as
    `tfr_torch.hf.features.spec_from_features` says; `Image` columns are written as their encoded files.
    Returns each split's shard paths.

    >>> tfr_torch.hf.write(datasets.load_dataset("mnist"), "out/", "mnist")   # doctest: +SKIP
    """
    from tfr_torch.tools.shards import ShardedWriter

    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        if split is not None:
            raise ValueError(f"split={split!r} with a DatasetDict: its splits are written under their own names")
        return {str(s): write(d, out_dir, name, str(s), shard_size=shard_size, records_per_shard=records_per_shard,
                              compression=compression, tfds=tfds, batch_size=batch_size)[str(s)]
                for s, d in dataset.items()}
    if not isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        raise TypeError(f"expected a datasets.Dataset, IterableDataset or DatasetDict, got {type(dataset).__name__}")
    if dataset.features is None:
        raise ValueError("the dataset's features are unknown (an IterableDataset without features): give it "
                         "features, e.g. ds.cast(features), or resolve them with ds._resolve_features()")
    split = split or _split_name(dataset.split)
    features = dataset.features
    as_tfds = tfds is not None and tfds is not False  # True or options (an empty dict too, as ShardedWriter's)
    if is_sequence_features(features):  # the rows hf.load makes of SequenceExamples
        if as_tfds:
            raise ValueError("tfds=: TensorFlow Datasets folders hold tf.train.Example records; rows of a context "
                             "and feature lists are written as SequenceExamples with the sidecar instead")
        return {split: _write_sequences(dataset, out_dir, name, split, shard_size, records_per_shard, compression,
                                        batch_size)}
    spec = spec_from_features(features)
    options: Optional[dict[str, Any]] = None
    if as_tfds:
        tree, names = tfds_features(features)
        options = {"features": tree, "class_names": names, **(dict(tfds) if isinstance(tfds, Mapping) else {})}
    plain = dataset.with_format(None)
    for key, feature in features.items():  # encoded images, never decoded and encoded again
        if isinstance(feature, datasets.Image):
            plain = plain.cast_column(key, datasets.Image(decode=False))
        elif isinstance(feature, datasets.List) and isinstance(feature.feature, datasets.Image):
            plain = plain.cast_column(key, datasets.List(datasets.Image(decode=False), length=feature.length))
    with ShardedWriter(out_dir, name, split, shard_size, compression, records_per_shard=records_per_shard,
                       features=spec, tfds=options) as writer:
        done = 0  # rows written before this batch: the row an error names
        for batch in plain.iter(batch_size=batch_size):
            columns = [(key, features[key], spec[key], batch[key]) for key in features]
            rows = len(columns[0][3]) if columns else 0
            for i in range(rows):
                writer.write_example({key: from_row(key, feature, s, values[i], row=done + i)
                                      for key, feature, s, values in columns})
            done += rows
    if not as_tfds:
        _record_features(out_dir, name, split, features)
    return {split: list(writer.paths)}


def _split_name(split: Any) -> str:
    """The split a dataset's rows are written as: its split's name, without the slice `load_dataset` leaves in it
    ("train[:10%]" -> "train": a file name, and a TFDS split that TFDS and `load` read), "train" without one."""
    match = re.match(r"\w+(\.\w+)*", str(split)) if split is not None else None
    return match.group() if match else "train"


def _write_sequences(dataset: Any, out_dir: str, name: str, split: str, shard_size: Union[int, str],
                     records_per_shard: Optional[int], compression: Compression, batch_size: int) -> list[str]:
    """Rows of `{"context": {...}, "feature_lists": {...}}` as tf.train.SequenceExamples (see
    `sequence_spec_from_features`); the sidecar holds the SequenceFeatures and the `datasets` features."""
    from tfr_torch.format.example import encode_sequence_example
    from tfr_torch.tools.shards import ShardedWriter

    features = dataset.features
    spec = sequence_spec_from_features(features)
    context, lists = features["context"], features["feature_lists"]
    with ShardedWriter(out_dir, name, split, shard_size, compression, records_per_shard=records_per_shard,
                       features=spec) as writer:
        done = 0
        for batch in dataset.with_format(None).iter(batch_size=batch_size):
            rows = _rows_of(batch["context"]), _rows_of(batch["feature_lists"])
            for i, (c, f) in enumerate(zip(*rows)):
                writer.write(encode_sequence_example(
                    {k: from_row(k, context[k], spec.context[k], c[k], row=done + i) for k in context},
                    {k: steps_from_row(k, lists[k], spec.sequence[k], f[k], row=done + i) for k in lists}))
            done += len(rows[0])
    _record_features(out_dir, name, split, features)
    return list(writer.paths)


def _rows_of(column: Any) -> list[dict[str, Any]]:
    """A struct column of a batch as rows (datasets gives a list of dicts, or a dict of lists)."""
    if isinstance(column, Mapping):
        keys = list(column)
        return [dict(zip(keys, values)) for values in zip(*(column[k] for k in keys))]
    return list(column)


def _record_features(out_dir: str, name: str, split: str, features: datasets.Features) -> None:
    """Add the `datasets` features to the sidecar ShardedWriter wrote (other readers ignore the entry)."""
    path = sidecar_path(out_dir, name, split)
    data = read_sidecar(path)
    data[HF_KEY] = {"features": features.to_dict(), "datasets_version": datasets.__version__}
    with atomic_output(path) as f:
        f.write(json.dumps(data, indent=1).encode())
