"""Writing the metadata TensorFlow Datasets needs to load shards tfr_torch wrote: `dataset_info.json` (splits with
shard lengths and sizes, file name template, version, supervised keys), `features.json` (the feature tree, in
TFDS's protobuf-JSON form) and `<feature>.labels.txt` (class names), so that `tfds.builder_from_directory(folder)`
reads the split as if TFDS had prepared it. Several splits written one after another share one dataset_info.json.

>>> write_metadata("out/photos/1.0.0", "photos", "train", [("photos-train.tfrecord-00000-of-00001", 10, 4242)],
...                features_from_spec(spec))                                          # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from tfr_torch.format.paths import atomic_output, exists, open_input
from tfr_torch.format.writer import naming_the_path
from tfr_torch.format.shardset import TFDS_TEMPLATE, tfds_num_bytes

__all__ = ["write_metadata", "features_from_spec", "image_features", "tensor_feature", "text_feature",
           "class_label_feature", "image_feature", "features_dict", "labels_file_stem"]

_PREFIX = "tensorflow_datasets.core.features."


def tensor_feature(shape: Sequence[Optional[int]], dtype: str) -> dict[str, Any]:
    """A `tfds.features.Tensor` entry of features.json (`None` dimensions are unknown)."""
    return {"pythonClassName": _PREFIX + "tensor_feature.Tensor",
            "tensor": {"shape": {"dimensions": [str(-1 if d is None else int(d)) for d in shape]} if shape else {},
                       "dtype": dtype, "encoding": "none"}}


def text_feature() -> dict[str, Any]:
    return {"pythonClassName": _PREFIX + "text_feature.Text", "text": {}}


def class_label_feature(num_classes: int) -> dict[str, Any]:
    return {"pythonClassName": _PREFIX + "class_label_feature.ClassLabel",
            "classLabel": {"numClasses": str(int(num_classes))}}


def image_feature(shape: Sequence[Optional[int]] = (None, None, None), dtype: str = "uint8",
                  encoding_format: Optional[str] = None) -> dict[str, Any]:
    content: dict[str, Any] = {"shape": {"dimensions": [str(-1 if d is None else int(d)) for d in shape]},
                               "dtype": dtype}
    if encoding_format:
        content["encodingFormat"] = encoding_format
    return {"pythonClassName": _PREFIX + "image_feature.Image", "image": content}


def features_dict(features: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    return {"pythonClassName": _PREFIX + "features_dict.FeaturesDict", "featuresDict": {"features": dict(features)}}


def labels_file_stem(key: str) -> str:
    """The `<stem>.labels.txt` name TFDS gives the class names of a top-level feature `key` ('/' becomes '.')."""
    return key.replace("/", ".")


def _dtype_name(dtype: Any) -> str:
    from tfr_torch.decode.specs import string

    if dtype == string:
        return "string"
    return str(dtype).removeprefix("torch.")


def features_from_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """features.json for a tfr_torch spec: FixedLenFeature -> Tensor of its shape (Text for a scalar string),
    VarLenFeature -> Tensor of shape (None,), FixedLenSequenceFeature -> Tensor of shape (None, *shape). Other
    specs (sparse, ragged) have no TFDS equivalent: ValueError naming the key."""
    from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature

    out = {}
    for key, feature in spec.items():
        dtype = _dtype_name(getattr(feature, "dtype", None))
        if isinstance(feature, FixedLenFeature):
            scalar_text = dtype == "string" and not feature.shape
            out[key] = text_feature() if scalar_text else tensor_feature(feature.shape, dtype)
        elif isinstance(feature, VarLenFeature):
            out[key] = tensor_feature((None,), dtype)
        elif isinstance(feature, FixedLenSequenceFeature):
            out[key] = tensor_feature((None, *feature.shape), dtype)
        else:
            raise ValueError(f"feature {key!r}: a {type(feature).__name__} has no TensorFlow Datasets equivalent "
                             "(TFDS metadata describes FixedLen, VarLen and FixedLenSequence features)")
    return features_dict(out)


def image_features(spec: Mapping[str, Any], num_classes: Optional[int], encoding: str) -> dict[str, Any]:
    """features.json for the shards tfr_torch's image converters write: `image/encoded` is an Image (any
    encoding, channels as stored), `image/class/label` a ClassLabel, the rest as `features_from_spec`."""
    if encoding == "raw":
        raise ValueError("TensorFlow Datasets cannot decode 'raw' (serialize_tensor) images: convert with format "
                         "'jpeg', 'png' or 'keep' for a TFDS dataset")
    tree = features_from_spec(spec)
    features = tree["featuresDict"]["features"]
    # no encoding format and no channel count: TFDS then decodes every image by its content (as the converter may
    # keep mixed formats) with its own channels; TFDS refuses an unknown channel count with a png/jpeg format
    features["image/encoded"] = image_feature((None, None, None), "uint8", None)
    if num_classes is not None:
        features["image/class/label"] = class_label_feature(num_classes)
    return tree


def _read_json(path: str) -> Any:
    """The JSON in `path` (a local path or URL), or None when there is no such file."""
    if not exists(path):
        return None
    with open_input(path) as f:
        return json.loads(f.read())


def _read_existing(path: str, name: str, version: str) -> dict[str, Any]:
    data: dict[str, Any] | None = _read_json(path)
    if data is None:
        return {}
    if data.get("name") != name or str(data.get("version")) != version:
        raise ValueError(f"{path} describes dataset {data.get('name')!r} version {data.get('version')!r}, not "
                         f"{name!r} {version!r}: write each dataset version into its own folder")
    return data


def check_folder(out_dir: str, name: str, split: str, options: Mapping[str, Any]) -> None:
    """Before a split's shards are written into `out_dir` (ShardedWriter's start): the folder's dataset_info.json,
    if any, must describe this dataset and version and its features.json these features, as write_metadata checks at
    the end; refused here, the folder's other splits, and the split being replaced, are left as they were."""
    existing = _read_existing(f"{out_dir}/dataset_info.json", name, options["version"])
    old_features = _read_json(f"{out_dir}/features.json") if existing else None
    new_features = json.loads(json.dumps(options["features"], sort_keys=True))
    if old_features is not None and old_features != new_features:
        raise ValueError(f"{out_dir}/features.json describes other features than split {split!r} has: write splits "
                         "of different features into different datasets")


def write_metadata(out_dir: str, name: str, split: str, shards: Sequence[tuple[str, int, int]],
                   features: Mapping[str, Any], *, version: str = "1.0.0",
                   supervised_keys: Optional[tuple[str, str]] = None,
                   class_names: Optional[Mapping[str, Sequence[str]]] = None, description: str = "") -> list[str]:
    """Write (or update) dataset_info.json, features.json and the labels files in `out_dir` for one split whose
    `shards` are (file name, records, file bytes) of uncompressed TFRecord files named the TFDS way. Other splits
    already described there are kept; the features must be the same. Returns the paths written."""
    info_path = f"{out_dir}/dataset_info.json"
    existing = _read_existing(info_path, name, version)
    features_path = f"{out_dir}/features.json"
    features_text = json.dumps(features, indent=4, sort_keys=True)
    old_features = _read_json(features_path) if existing else None
    if old_features is not None and old_features != json.loads(features_text):
        raise ValueError(f"{features_path} describes other features than split {split!r} has: write splits "
                         "of different features into different datasets")
    entry = {"filepathTemplate": TFDS_TEMPLATE, "name": split,
             "numBytes": str(tfds_num_bytes([(records, size) for _, records, size in shards])),
             "shardLengths": [str(records) for _, records, _ in shards]}
    splits = [s for s in existing.get("splits", []) if s.get("name") != split] + [entry]
    info: dict[str, Any] = {"name": name, "version": version, "fileFormat": "tfrecord",
                            "description": description or existing.get("description", ""),
                            "moduleName": "tfr_torch", "splits": splits}
    if supervised_keys is not None:
        info["supervisedKeys"] = {"tuple": {"items": [{"featureKey": k} for k in supervised_keys]}}
    elif "supervisedKeys" in existing:  # a split written without them keeps those the folder's other splits have
        info["supervisedKeys"] = existing["supervisedKeys"]
    written = []
    for stem, names in (class_names or {}).items():
        path = f"{out_dir}/{stem}.labels.txt"
        with naming_the_path(path, "a TFDS class-names file"), atomic_output(path) as f:
            # surrogateescape: a class folder whose name is not UTF-8 keeps its bytes (as the records' class text)
            f.write("".join(f"{n}\n" for n in names).encode("utf-8", "surrogateescape"))
        written.append(path)
    with naming_the_path(features_path, "TFDS feature metadata"), atomic_output(features_path) as f:
        f.write(features_text.encode())
    # last: a folder with dataset_info.json is complete
    with naming_the_path(info_path, "TFDS dataset metadata"), atomic_output(info_path) as f:
        f.write(json.dumps(info, indent=2, sort_keys=True).encode())
    return written + [features_path, info_path]


def tfds_options(options: Mapping[str, Any], spec: Optional[Mapping[str, Any]], compression: str) -> dict[str, Any]:
    """Check ShardedWriter's `tfds=` options ({"version", "features", "supervised_keys", "class_names",
    "description"}, all optional) and fill in features.json from the spec; raises before anything is written."""
    unknown = set(options) - {"version", "features", "supervised_keys", "class_names", "description"}
    if unknown:
        raise ValueError(f"tfds options: unknown key(s) {sorted(unknown)} (version, features, supervised_keys, "
                         "class_names, description)")
    if compression not in (None, "none"):
        raise ValueError(f"TensorFlow Datasets reads uncompressed shards only, got compression={compression!r} with "
                         "tfds metadata")
    out = dict(options)
    out["version"] = str(out.get("version") or "1.0.0")
    if len(out["version"].split(".")) != 3 or not all(p.isdigit() for p in out["version"].split(".")):
        raise ValueError(f"a TFDS version is MAJOR.MINOR.PATCH, got {out['version']!r}")
    if out.get("features") is None:
        if spec is None:
            raise ValueError("TFDS metadata needs the features: pass features= (a spec) or tfds={'features': ...}")
        out["features"] = features_from_spec(spec)
    _check_supervised_keys(out.get("supervised_keys"), out["features"])
    _check_class_names(out.get("class_names") or {})
    return out


def _check_supervised_keys(keys: Any, features: Mapping[str, Any]) -> None:
    """ValueError unless `keys` (None, or a tuple of 2 or 3 keys) name top-level features of the features.json tree
    `features`: TFDS's `as_supervised=True` fails with a bare KeyError on a folder whose keys it lacks."""
    if keys is None:
        return
    if isinstance(keys, str) or not isinstance(keys, Sequence) or len(keys) not in (2, 3):
        raise ValueError(f"tfds supervised_keys: expected a tuple of 2 or 3 feature keys, got {keys!r}")
    known = (features.get("featuresDict") or {}).get("features") or {}
    missing = [k for k in keys if k not in known]
    if missing:
        raise ValueError(f"tfds supervised_keys {tuple(keys)!r}: no feature {missing[0]!r} in the features "
                         f"({', '.join(map(repr, known))})")


def _check_class_names(class_names: Mapping[str, Sequence[str]]) -> None:
    """ValueError naming the labels file and the name when a class name cannot round-trip through
    `<stem>.labels.txt` (one name a line, which TFDS reads back stripped, skipping empty lines)."""
    for stem, names in class_names.items():
        for name in names:
            if not isinstance(name, str) or not name or name != name.strip() or "\n" in name or "\r" in name:
                raise ValueError(f"class name {name!r} of {stem}.labels.txt: TensorFlow Datasets reads class names "
                                 "one a line, stripped of surrounding whitespace and skipping empty lines; use a "
                                 "non-empty name without line breaks or surrounding whitespace")


def finish_split(out_dir: str, name: str, split: str, shards: Sequence[Mapping[str, Any]],
                 options: Mapping[str, Any]) -> list[str]:
    """ShardedWriter.close for a TFDS dataset: the metadata of one split (see write_metadata)."""
    return write_metadata(out_dir, name, split, [(s["file"], s["records"], s["bytes"]) for s in shards],
                          options["features"], version=options["version"],
                          supervised_keys=options.get("supervised_keys"), class_names=options.get("class_names"),
                          description=options.get("description", ""))


def reshard_options(paths: Sequence[str], out_dir: str, name: str, version: str, features: Optional[Mapping[str, Any]],
                    image: Optional[Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """`reshard(..., tfds=True)`: the TFDS version folder to write (`out_dir/name/version`) and ShardedWriter's
    tfds options. Shards of a TFDS folder keep its features.json, class names, supervised keys and description;
    shards of tfr_torch's image converters get their image features; others the features of their spec."""
    from tfr_torch.format.paths import as_path, is_url
    from tfr_torch.tfds.metadata import read_info

    folders = {as_path(p).rsplit("/", 1)[0] if is_url(as_path(p)) else os.path.dirname(os.path.abspath(as_path(p)))
               for p in paths}
    source = None
    if len(folders) == 1 and exists(f"{next(iter(folders))}/dataset_info.json"):
        source = read_info(next(iter(folders)))
    target = f"{as_path(out_dir).rstrip('/') or '.'}/{name}/{version}"
    if source is not None:
        options: dict[str, Any] = {"version": version, "features": dict(source.features),
                                   "class_names": dict(source.class_names), "description": source.description}
        if source.supervised_keys:
            options["supervised_keys"] = source.supervised_keys
        return target, options
    if features is None:
        raise ValueError("a TFDS dataset needs the records' features: the input has no sidecar and its records are "
                         "not tf.train.Examples tfr_torch can describe")
    if image:
        classes = image.get("classes")
        spec = {k: v for k, v in features.items() if k != image.get("key", "image/encoded")}
        options = {"version": version, "features": image_features(spec, len(classes) if classes else None,
                                                                  image.get("encoding", "keep"))}
        if classes:
            options["class_names"] = {labels_file_stem(image.get("label_key", "image/class/label")): list(classes)}
            options["supervised_keys"] = (image.get("key", "image/encoded"),
                                          image.get("label_key", "image/class/label"))
        return target, options
    return target, {"version": version, "features": features_from_spec(features)}
