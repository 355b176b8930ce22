"""Feature specs and TFDS feature trees as `datasets.Features`, and back; decoded values as the rows `datasets`
encodes.

| tfr_torch / TFDS | `datasets` |
|---|---|
| `FixedLenFeature([], dtype)`, TFDS `Tensor`/`Scalar` of shape () | `Value(dtype)` |
| `FixedLenFeature([], string)`, TFDS string `Tensor` | `Value("binary")` (`Value("string")` for `utf8` keys) |
| TFDS `Text` | `Value("string")` |
| `FixedLenFeature([n])`, a 1-D shape | `List(Value, length=n)` |
| a fixed 2-D to 5-D shape (the first dimension may be unknown) | `Array2D` ... `Array5D` |
| `VarLenFeature`, unknown or deeper shapes, TFDS `Sequence` | `List` (nested; a `Sequence` of a dict: dict of lists) |
| `FixedLenSequenceFeature(shape)` | `List(...)` of the shape's feature |
| TFDS `ClassLabel`, the image converters' label (sidecar class names) | `ClassLabel(names=...)` |
| TFDS `Image`, the image converters' `image/encoded` | `Image()` (kept encoded, decoded lazily by `datasets`) |
| TFDS `Video` | `List(Image())` |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import datasets
import numpy as np
import torch

from tfr_torch.decode.results import RaggedTensor, step_rows
from tfr_torch.format.example import ByteStrings
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, string

__all__ = ["features_from_spec", "features_from_tfds", "spec_from_features", "sequence_spec_from_features",
           "is_sequence_features", "to_row", "from_row", "steps_from_row"]

_ARRAYS = {2: datasets.Array2D, 3: datasets.Array3D, 4: datasets.Array4D, 5: datasets.Array5D}
_HF_OF_TORCH = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
                torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
                torch.uint8: "uint8", torch.bool: "bool"}
# what each `datasets` Value is stored as in a tf.train.Example (and read back with)
_TORCH_OF_HF = {"bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                "int64": torch.int64, "uint8": torch.uint8, "uint16": torch.int64, "uint32": torch.int64,
                "uint64": torch.int64, "float16": torch.float16, "float32": torch.float32, "float64": torch.float64}
_TEXT = ("string", "large_string")
_BYTES = ("binary", "large_binary")


def _value(key: str, dtype: str) -> datasets.Value:
    if dtype == "bfloat16":
        raise TypeError(f"feature {key!r}: bfloat16 has no `datasets` Value type")
    return datasets.Value(dtype)


def _shaped(key: str, value: Any, shape: Sequence[Optional[int]], numeric: bool) -> Any:
    """The feature of `shape` of `value`s: Value, List(length=n), ArrayND or nested Lists."""
    if not shape:
        return value
    if numeric and 2 <= len(shape) <= 5 and all(d is not None for d in shape[1:]) and 0 not in shape:
        return _ARRAYS[len(shape)](shape=tuple(shape), dtype=value.dtype)
    feature = value
    for d in reversed(shape):  # a 0 dimension as a List of any length (Arrow has no fixed lists of length 0)
        feature = datasets.List(feature, length=-1 if d is None or d == 0 else int(d))
    return feature


def _torch_dtype_name(key: str, dtype: Any) -> str:
    name = _HF_OF_TORCH.get(dtype)
    if name is None:
        raise TypeError(f"feature {key!r}: {dtype} has no `datasets` Value type")
    return name


def features_from_spec(spec: Mapping[str, Any] | SequenceFeatures, utf8: bool | Sequence[str] = False, *,
                       image_keys: Sequence[str] = (), class_names: Optional[Mapping[str, Sequence[str]]] = None,
                       ) -> datasets.Features:
    """`datasets.Features` for a spec of FixedLenFeature / VarLenFeature / FixedLenSequenceFeature. String
    features are binary, or text for the keys in `utf8` (True: all); `image_keys` (encoded images) become
    `Image()`, the integer keys of `class_names` `ClassLabel`s. A `SequenceFeatures` (SequenceExamples) gives
    `{"context": {...}, "feature_lists": {...}}`, the rows as its records decode, each feature list one `List`
    per step (`utf8` names keys of either spec)."""
    if isinstance(spec, SequenceFeatures):
        return _sequence_features(spec, utf8)
    text = _utf8_keys(spec, utf8)
    out: dict[str, Any] = {}
    for key, feature in spec.items():
        dtype = getattr(feature, "dtype", None)
        if key in image_keys:
            out[key] = datasets.Image()
            continue
        if class_names and key in class_names:
            out[key] = datasets.ClassLabel(names=list(class_names[key]))
            continue
        if dtype == string:
            value = datasets.Value("string" if key in text else "binary")
        else:
            value = _value(key, _torch_dtype_name(key, dtype))
        numeric = dtype != string
        if isinstance(feature, FixedLenFeature):
            out[key] = _shaped(key, value, list(feature.shape), numeric)
        elif isinstance(feature, VarLenFeature):
            out[key] = datasets.List(value)
        elif isinstance(feature, FixedLenSequenceFeature):
            out[key] = _shaped(key, value, [None, *feature.shape], numeric)
        else:
            raise TypeError(f"feature {key!r}: a {type(feature).__name__} has no `datasets` feature here (FixedLen, "
                            "VarLen and FixedLenSequence features do); read its keys as VarLenFeatures")
    return datasets.Features(out)


def _sequence_features(spec: SequenceFeatures, utf8: bool | Sequence[str]) -> datasets.Features:
    from tfr_torch.decode.specs import RaggedFeature

    # the string features of either part (a key may be a context feature and a feature list, one of them a string)
    text = _utf8_keys({k: f for part in (spec.context, spec.sequence) for k, f in part.items()
                       if getattr(f, "dtype", None) == string}, utf8)
    context = features_from_spec(spec.context, sorted(text & {k for k, f in spec.context.items()
                                                              if getattr(f, "dtype", None) == string}))
    steps: dict[str, Any] = {}
    for key, feature in spec.sequence.items():
        dtype = feature.dtype
        value = (datasets.Value("string" if key in text else "binary") if dtype == string
                 else _value(key, _torch_dtype_name(key, dtype)))
        if isinstance(feature, FixedLenSequenceFeature):
            steps[key] = _shaped(key, value, [None, *feature.shape], dtype != string)
        elif isinstance(feature, VarLenFeature) or (isinstance(feature, RaggedFeature) and not feature.partitions):
            steps[key] = datasets.List(datasets.List(value))
        else:
            raise TypeError(f"feature list {key!r}: a RaggedFeature with partitions has no `datasets` feature here; "
                            "read it as a VarLenFeature (a list per step)")
    return datasets.Features({"context": dict(context), "feature_lists": steps})


def _utf8_keys(spec: Mapping[str, Any], utf8: bool | Sequence[str]) -> set[str]:
    strings = {k for k, s in spec.items() if getattr(s, "dtype", None) == string}
    if isinstance(utf8, bool):
        return strings if utf8 else set()
    if isinstance(utf8, str):
        raise TypeError(f"utf8 must be a bool or a list of feature keys, got the string {utf8!r}")
    keys = set(utf8)
    if keys - strings:
        raise ValueError(f"utf8 names features that are not string features of the spec: {sorted(keys - strings)}")
    return keys


def features_from_tfds(decoder: Any) -> datasets.Features:
    """`datasets.Features` of a TFDS feature tree (a `TFDSDecoder`'s), as its records decode with
    `decode_images=False`."""
    from tfr_torch.tfds.features import DictNode

    tree = decoder.tree
    assert isinstance(tree, DictNode)  # TFDSDecoder checks the top node
    return datasets.Features({k: _tfds_node(k, v, []) for k, v in tree.children.items()})


def _tfds_node(key: str, node: Any, seq: list[Optional[int]]) -> Any:
    from tfr_torch.tfds.features import DictNode, SequenceNode

    if isinstance(node, DictNode):
        return {k: _tfds_node(f"{key}/{k}", v, seq) for k, v in node.children.items()}
    if isinstance(node, SequenceNode):
        if node.video:
            return _shaped(key, datasets.Image(), [*seq, node.length], False)
        return _tfds_node(key, node.feature, [*seq, node.length])
    kind = node.type
    if kind == "Image":
        return _shaped(key, datasets.Image(), seq, False)
    if kind == "ClassLabel":
        label = datasets.ClassLabel(names=list(node.names)) if node.names else datasets.ClassLabel(
            num_classes=int(node.num_classes or 0))
        return _shaped(key, label, seq, False)
    if kind == "Text":
        return _shaped(key, datasets.Value("string"), seq, False)
    if node.dtype == "string":
        return _shaped(key, datasets.Value("binary"), [*seq, *node.shape], False)
    return _shaped(key, _value(key, node.dtype), [*seq, *node.shape], True)


# ----- values ------------------------------------------------------------------------------------------------------

def _items(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        if value.is_sparse:
            return list(value.coalesce().values().unbind(0))
        return list(value.unbind(0))
    if isinstance(value, RaggedTensor):
        return value.to_list()
    return list(value)


def to_row(feature: Any, value: Any) -> Any:
    """A decoded value (tensors, bytes, lists, RaggedTensor) as the Python / numpy value `datasets` encodes for
    `feature`."""
    if isinstance(feature, dict):
        return {k: to_row(f, value[k]) for k, f in feature.items()}
    if isinstance(feature, datasets.Image):
        return {"bytes": bytes(value), "path": None}
    if isinstance(feature, (datasets.Value, datasets.ClassLabel)):
        if isinstance(value, torch.Tensor):
            value = value.item()
        elif isinstance(value, np.ndarray):
            value = value.item()
        if isinstance(feature, datasets.Value) and feature.dtype in _TEXT and isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8")
        return value
    if isinstance(value, torch.Tensor) and (value.is_nested or (value.is_sparse and value.dim() == 2)):
        if isinstance(feature, datasets.List):  # a list per step of a SequenceExample's feature list
            return [to_row(feature.feature, row) for row in step_rows(value)]
    if type(feature).__name__ in _ARRAY_NAMES and feature.dtype in _TEXT:  # as a Dataset's Arrow cast gives them
        return _text(value)
    numeric = _numeric(feature)
    if numeric and isinstance(value, torch.Tensor) and not value.is_sparse and not value.is_nested:
        return value.numpy()
    if numeric and isinstance(value, torch.Tensor) and value.is_sparse:
        return value.coalesce().values().numpy()
    if isinstance(value, RaggedTensor):
        value = value.to_list()
    if isinstance(feature, datasets.List):
        return [to_row(feature.feature, v) for v in _items(value)]
    return value


def _text(value: Any) -> Any:
    """Nested lists of bytes (a string ArrayND's value) as nested lists of str."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    if isinstance(value, str):
        return value
    return [_text(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]


def _numeric(feature: Any) -> bool:
    while isinstance(feature, datasets.List):
        feature = feature.feature
    if isinstance(feature, datasets.Value):
        return feature.dtype not in _TEXT + _BYTES
    return type(feature).__name__ in ("Array2D", "Array3D", "Array4D", "Array5D")


# ----- the other way: datasets' features and rows to Examples -------------------------------------------------------

def spec_from_features(features: Mapping[str, Any]) -> dict[str, Any]:
    """The spec each column is written (and read back) with: Value and ClassLabel -> FixedLenFeature([]),
    List(length=n) and ArrayND -> FixedLenFeature(shape), List -> VarLenFeature, List of a fixed shape ->
    FixedLenSequenceFeature, Image -> FixedLenFeature([], string) (the encoded file), List(Image()) ->
    VarLenFeature(string). Strings and binary are bytes_list, integers and bools int64_list, floats float_list
    (float32: a float64 column loses precision, as TensorFlow's Example does)."""
    out: dict[str, Any] = {}
    for key, feature in features.items():
        out[key] = _spec_of(key, feature)
    return out


def is_sequence_features(features: Mapping[str, Any]) -> bool:
    """Whether `datasets` features are a SequenceExample's rows: exactly a `context` dict and a `feature_lists`
    dict (what `features_from_spec` makes of a SequenceFeatures)."""
    return set(features) == {"context", "feature_lists"} and all(isinstance(features[k], dict) for k in features)


def sequence_spec_from_features(features: Mapping[str, Any]) -> SequenceFeatures:
    """The SequenceFeatures `{"context": {...}, "feature_lists": {...}}` rows are written (and read back) with:
    the context as `spec_from_features` maps columns; each feature list, one entry per step, as
    `FixedLenSequenceFeature(shape)` (steps of a fixed shape: `List(Value)`, `List(List(Value, length=k))`,
    `Array2D`-`Array5D` with a variable first dimension) or `VarLenFeature` (steps of any length:
    `List(List(Value))`)."""
    steps: dict[str, Any] = {}
    for key, feature in features["feature_lists"].items():
        inner = feature.feature if isinstance(feature, datasets.List) else None
        if isinstance(inner, datasets.List) and inner.length == -1 and not isinstance(inner.feature, datasets.List):
            steps[key] = VarLenFeature(_leaf_dtype(key, inner.feature))
            continue
        spec = _spec_of(key, feature)
        if isinstance(spec, VarLenFeature):  # one value per step
            steps[key] = FixedLenSequenceFeature([], spec.dtype, allow_missing=True)
        elif isinstance(spec, FixedLenSequenceFeature):
            steps[key] = FixedLenSequenceFeature(list(spec.shape), spec.dtype, allow_missing=True)
        else:
            raise TypeError(f"feature list {key!r}: {feature!r} is not a list of steps (a List, or an ArrayND whose "
                            "first dimension varies)")
    return SequenceFeatures(spec_from_features(features["context"]), steps)


def steps_from_row(key: str, feature: Any, spec: Any, value: Any, *, row: Optional[int] = None) -> list[Any]:
    """A feature list's row value (one entry per step) as encode_sequence_example takes it: each step typed by
    the spec, as `from_row` types a column's value."""
    step = feature.feature if isinstance(feature, datasets.List) else datasets.Value(getattr(feature, "dtype", ""))
    step_spec = VarLenFeature(spec.dtype) if isinstance(spec, VarLenFeature) else FixedLenFeature(
        list(spec.shape), spec.dtype)
    if value is None:
        raise ValueError(f"feature list {key!r}, row {row}: a None value has no tf.train.SequenceExample form")
    return [from_row(f"{key}[{t}]", step, step_spec, v, row=row) for t, v in enumerate(value)]


def _leaf_dtype(key: str, feature: Any) -> Any:
    if isinstance(feature, datasets.Image):
        return string
    if isinstance(feature, datasets.ClassLabel):
        return torch.int64
    if isinstance(feature, datasets.Value):
        if feature.dtype in _TEXT + _BYTES:
            return string
        dtype = _TORCH_OF_HF.get(feature.dtype)
        if dtype is not None:
            return dtype
    raise TypeError(f"column {key!r}: {feature!r} has no tf.train.Example form here (Value, ClassLabel, Image, List "
                    "and Array2D-5D of them do; nested dicts: flatten them first, e.g. Dataset.flatten())")


def _spec_of(key: str, feature: Any) -> Any:
    shape: list[Optional[int]] = []
    while isinstance(feature, datasets.List) or type(feature).__name__ in _ARRAY_NAMES:
        if isinstance(feature, datasets.List):
            shape.append(None if feature.length == -1 else feature.length)
            feature = feature.feature
        else:
            shape.extend(feature.shape)
            feature = datasets.Value(feature.dtype)
    if isinstance(feature, datasets.Sequence):  # pragma: no cover - datasets 4+ makes Lists of these
        feature = feature.feature
    dtype = _leaf_dtype(key, feature)
    if any(d is None for d in shape[1:]):
        raise TypeError(f"column {key!r}: lists of lists of unknown lengths have no tf.train.Example form here "
                        f"(shape {shape}; only the first dimension may vary)")
    if not shape or shape[0] is not None:
        return FixedLenFeature([int(d) for d in shape if d is not None], dtype)
    if len(shape) == 1:
        return VarLenFeature(dtype)
    return FixedLenSequenceFeature([int(d) for d in shape[1:] if d is not None], dtype, allow_missing=True)


_ARRAY_NAMES = ("Array2D", "Array3D", "Array4D", "Array5D")

_NUMPY_OF_TORCH = {torch.bool: np.bool_, torch.int8: np.int64, torch.int16: np.int64, torch.int32: np.int64,
                   torch.int64: np.int64, torch.uint8: np.int64, torch.float16: np.float32, torch.float32: np.float32,
                   torch.float64: np.float32}


def from_row(key: str, feature: Any, spec: Any, value: Any, *, row: Optional[int] = None) -> Any:
    """A `datasets` row value as encode_example takes it, typed by the spec (an empty list of strings or images
    is a ByteStrings: a bare `[]` has no type of its own). `row` (the row's position) goes into the errors."""
    where = f"column {key!r}" if row is None else f"column {key!r}, row {row}"
    if value is None or (not isinstance(value, (str, bytes, bytearray, Mapping, np.ndarray))
                         and isinstance(value, Sequence) and any(v is None for v in _flatten_any(value))):
        raise ValueError(f"{where}: a None value has no tf.train.Example form; fill or drop the missing "
                         "values first (e.g. Dataset.filter or Dataset.map)")
    if isinstance(feature, datasets.Image):
        return _image_bytes(key, value)
    if isinstance(feature, datasets.List) and isinstance(feature.feature, datasets.Image):
        return ByteStrings(_image_bytes(key, v) for v in value)
    if spec.dtype == string:
        flat = _flatten(value)
        return ByteStrings(v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in flat)
    if _is_uint64(feature):
        too_big = [v for v in _flatten_any(value) if isinstance(v, (int, np.integer)) and int(v) > _INT64_MAX]
        if too_big:
            raise ValueError(f"{where}: the uint64 value {int(too_big[0])} is past 2**63 - 1, the largest an "
                             "int64_list holds; store such values as strings or binary")
    return np.asarray(value, dtype=_NUMPY_OF_TORCH[spec.dtype]).reshape(-1)


_INT64_MAX = 2**63 - 1


def _is_uint64(feature: Any) -> bool:
    while isinstance(feature, datasets.List):
        feature = feature.feature
    dtype = getattr(feature, "dtype", None)
    return dtype == "uint64"


def _flatten_any(value: Any) -> list[Any]:
    if isinstance(value, np.ndarray):
        return list(value.reshape(-1).tolist()) if value.dtype in (object, np.uint64) else []
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flatten_any(item)]
    return [value]


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (str, bytes, bytearray)):
        return [value]
    return [v for item in value for v in _flatten(item)]


def _image_bytes(key: str, value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, Mapping):
        if value.get("bytes") is not None:
            return bytes(value["bytes"])
        if value.get("path"):
            from tfr_torch.format.paths import open_input

            with open_input(value["path"]) as f:
                data: bytes = f.read()
            return data
    raise TypeError(f"column {key!r}: an image with neither bytes nor a path: {value!r}")
