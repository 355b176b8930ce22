"""A TFDS feature tree (features.json) parsed into nodes: FeaturesDict as DictNode, Sequence as SequenceNode, every
other feature as a LeafNode with its dtype, shape, encoding and class names, each checked against what TFDS writes
(a TFDSMetadataError names the key and what was expected). tfds/features.py compiles the tree into a decoder."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from tfr_torch.tfds.metadata import TFDSMetadataError

__all__ = ["FeatureNode", "DictNode", "SequenceNode", "LeafNode", "parse_features"]

Shape = tuple[Optional[int], ...]  # None where TFDS leaves a dimension unknown

_NUMPY: dict[str, type[np.generic]] = {
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64}
_SUPPORTED = ("FeaturesDict, Tensor, Scalar, ClassLabel, Text, Image, Video, BBoxFeature, Audio (not lazily "
              "decoded), Sequence, Dataset")


# ----- the feature tree ------------------------------------------------------------------------------------------

class FeatureNode:
    """A node of the feature tree read from features.json."""


@dataclass
class DictNode(FeatureNode):
    children: dict[str, FeatureNode]


@dataclass
class SequenceNode(FeatureNode):
    """A Sequence (or a Video's frames, or a Dataset: RLDS's steps, stored as a Sequence is)."""

    feature: FeatureNode
    length: Optional[int]
    video: bool = False
    dataset: bool = False


@dataclass
class LeafNode(FeatureNode):
    """`type`: Tensor, Scalar, ClassLabel, Text, Image, BBoxFeature or Audio; `shape` and `dtype` of the decoded
    value (TFDS's, so images are (H, W, C)); `encoding` of Tensors; `image_format`; `names` of ClassLabels."""

    type: str
    shape: Shape
    dtype: str
    encoding: str = "none"
    image_format: Optional[str] = None
    num_classes: Optional[int] = None
    names: Optional[list[str]] = None


def _shape(value: Any, key: str, path: str) -> Shape:
    if value is None:
        return ()
    dims = value.get("dimensions", []) if isinstance(value, Mapping) else value
    if not isinstance(dims, list):
        raise TFDSMetadataError(f"feature {key!r}: a shape must be a list of dimensions, got {value!r}", path)
    out: list[Optional[int]] = []
    for d in dims:
        if d is None:
            out.append(None)
            continue
        try:
            n = int(d)
        except (TypeError, ValueError):
            raise TFDSMetadataError(f"feature {key!r}: shape {value!r} has a dimension that is not an integer",
                                    path) from None
        if n < -1:
            raise TFDSMetadataError(f"feature {key!r}: shape {value!r} has a negative dimension", path)
        out.append(None if n == -1 else n)
    return tuple(out)


def _dtype(value: Any, key: str, path: str) -> str:
    name = str(value or "")
    name = {"object": "string", "str": "string", "bytes": "string", "bool_": "bool"}.get(name, name)
    if name not in _NUMPY and name not in ("string", "bfloat16"):
        raise TFDSMetadataError(f"feature {key!r}: dtype {value!r} is not supported (expected bool, an integer or "
                                "float type, or string)", path)
    return name


def _kind_and_content(entry: Any, key: str, path: str) -> tuple[str, Any]:
    if not isinstance(entry, Mapping):
        raise TFDSMetadataError(f"feature {key!r}: expected a JSON object, got {entry!r}", path)
    if "pythonClassName" in entry:
        kind = str(entry["pythonClassName"]).rsplit(".", 1)[-1]
        contents = [v for k, v in entry.items() if k not in ("pythonClassName", "description", "valueRange")]
        return kind, (contents[0] if contents else {})
    if "type" in entry:  # TFDS < 4.6: {"type": "...Tensor", "content": {...}}
        content = entry.get("content", {})
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except ValueError:
                raise TFDSMetadataError(f"feature {key!r}: content is not valid JSON", path) from None
        return str(entry["type"]).rsplit(".", 1)[-1], content or {}
    raise TFDSMetadataError(f"feature {key!r}: no \"pythonClassName\" (nor legacy \"type\"): not a TFDS feature", path)


def _get(content: Mapping[str, Any], *names: str, default: Any = None) -> Any:
    for name in names:
        if name in content:
            return content[name]
    return default


def _count(value: Any, key: str, path: str, what: str) -> int:
    """A non-negative integer from the JSON (an int, or a string of digits as TFDS's proto JSON writes int64)."""
    if (isinstance(value, bool) or not isinstance(value, (int, str))
            or not (str(value).isascii() and str(value).isdigit())):
        raise TFDSMetadataError(f"feature {key!r}: {what} must be a non-negative integer, got {value!r}", path)
    return int(value)


def _node(entry: Any, key: str, path: str, labels: Mapping[str, list[str]], label_name: Optional[str]) -> FeatureNode:
    kind, content = _kind_and_content(entry, key, path)
    if not isinstance(content, Mapping):
        raise TFDSMetadataError(f"feature {key!r} ({kind}): expected an object as its description, got {content!r}",
                                path)
    if kind == "FeaturesDict":
        children = content.get("features", content) if "features" in content or "type" not in content else content
        if not isinstance(children, Mapping):
            raise TFDSMetadataError(f"feature {key!r}: FeaturesDict needs a \"features\" object", path)
        out = {}
        for name, child in children.items():
            file_name = name.replace("/", ".")
            child_label = file_name if label_name is None else f"{label_name}-{file_name}"
            out[name] = _node(child, f"{key}/{name}" if key else name, path, labels, child_label)
        return DictNode(out)
    if kind in ("Sequence", "Dataset"):  # a Dataset (RLDS's steps) is stored as a Sequence is; read as one
        length = _get(content, "length")
        length = None if length in (None, -1, "-1") else _count(length, key, path, "Sequence length")
        if "feature" not in content:
            raise TFDSMetadataError(f"feature {key!r}: {kind} needs a \"feature\"", path)
        return SequenceNode(_node(content["feature"], key, path, labels, label_name), length,
                            dataset=kind == "Dataset")
    if kind in ("Tensor", "Scalar"):
        if content.get("optional"):
            raise TFDSMetadataError(f"feature {key!r}: optional Tensors are not supported (supported: {_SUPPORTED})",
                                    path)
        encoding = str(content.get("encoding") or "none").lower()
        if encoding not in ("none", "bytes", "zlib"):
            raise TFDSMetadataError(f"feature {key!r}: unknown Tensor encoding {encoding!r} (none, bytes or zlib)",
                                    path)
        return LeafNode(kind, _shape(content.get("shape"), key, path), _dtype(content.get("dtype"), key, path),
                        encoding)
    if kind == "ClassLabel":
        n = _get(content, "numClasses", "num_classes")
        names = labels.get(label_name or key)
        if names is None and isinstance(content.get("names"), list):
            names = [str(x) for x in content["names"]]
        num = _count(n, key, path, "ClassLabel numClasses") if n is not None else (
            len(names) if names is not None else None)
        if names is not None and num is not None and len(names) != num:
            raise TFDSMetadataError(f"feature {key!r}: {label_name}.labels.txt holds {len(names)} class names but "
                                    f"ClassLabel has {num} classes", path)
        return LeafNode("ClassLabel", (), "int64", num_classes=num, names=names)
    if kind == "Text":
        if any(k in content for k in ("encoder", "encoderConfig", "encoder_config")):
            raise TFDSMetadataError(f"feature {key!r}: Text with an encoder (deprecated in TFDS) is not supported",
                                    path)
        return LeafNode("Text", (), "string")
    if kind in ("Image", "LabeledImage"):
        shape = _shape(content.get("shape"), key, path) or (None, None, 3)
        dtype = _dtype(content.get("dtype") or "uint8", key, path)
        if len(shape) != 3:
            raise TFDSMetadataError(f"feature {key!r}: Image shape must be (height, width, channels), got {shape}",
                                    path)
        return LeafNode("Image", shape, dtype, image_format=_get(content, "encodingFormat", "encoding_format"))
    if kind == "Video":
        shape = _shape(content.get("shape"), key, path)
        dtype = _dtype(content.get("dtype") or "uint8", key, path)
        if len(shape) != 4:
            raise TFDSMetadataError(f"feature {key!r}: Video shape must be (frames, height, width, channels), got "
                                    f"{shape}", path)
        frame = LeafNode("Image", shape[1:], dtype, image_format=_get(content, "encodingFormat", "encoding_format"))
        return SequenceNode(frame, shape[0], video=True)
    if kind == "BBoxFeature":
        return LeafNode("BBoxFeature", (4,), _dtype(content.get("dtype") or "float32", key, path))
    if kind == "Audio":
        if _get(content, "lazyDecode", "lazy_decode") or _get(content, "fileFormat", "file_format"):
            raise TFDSMetadataError(f"feature {key!r}: Audio stored as encoded files (file_format / lazy_decode) is "
                                    "not supported: only Audio stored as samples", path)
        encoding = str(content.get("encoding") or "none").lower()
        return LeafNode("Audio", _shape(content.get("shape"), key, path) or (None,),
                        _dtype(content.get("dtype") or "int64", key, path), encoding)
    raise TFDSMetadataError(f"feature {key!r} is a {kind}, which tfr_torch does not read (supported: {_SUPPORTED})",
                            path)


def parse_features(features: Mapping[str, Any], path: str = "features.json",
                   class_names: Optional[Mapping[str, list[str]]] = None) -> FeatureNode:
    """The feature tree of a features.json document (`path` names it in errors); `class_names` maps the stems of
    the `*.labels.txt` files to their names."""
    return _node(features, "", path, class_names or {}, None)
