"""A TFDS feature tree (features.json) as a tfr_torch decoder: the flat wire spec TFDS's serializer wrote, and the
steps TFDS's decoders take after parsing (reshape, bool/int32/uint16 casts, `bytes`/`zlib` tensor encodings, image
decoding, ragged sequences, nesting), giving what `tfds.as_numpy(builder.as_dataset(split))` gives, as torch
values: tensors, with images as uint8 `[C, H, W]` (videos `[T, C, H, W]`); Text as bytes; nested sequences as
`tfr_torch.RaggedTensor`.

Supported: FeaturesDict (nested), Tensor and Scalar (every integer, bool and float dtype, strings; static and
dynamic shapes; encodings none/bytes/zlib), ClassLabel (names from `*.labels.txt`), Text, Image (uint8; png, jpeg,
...), Video (frames as images), BBoxFeature, Audio (stored as samples), Sequence (fixed and variable length, of any
of these, nested). Anything else raises TFDSMetadataError naming the feature's key and type.

The tree itself (features.json parsed and checked): tfds/feature_tree.py; one leaf's decoder: tfds/leaf_decoder.py;
here, the tree compiled into a decoder.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Optional

import torch

from tfr_torch.decode.results import RaggedTensor
from tfr_torch.errors import DecodeError
from tfr_torch.tfds.feature_tree import DictNode, FeatureNode, LeafNode, SequenceNode, Shape, parse_features
from tfr_torch.tfds.leaf_decoder import _LeafDecoder
from tfr_torch.tfds.metadata import TFDSInfo, TFDSMetadataError

__all__ = ["FeatureNode", "DictNode", "SequenceNode", "LeafNode", "parse_features", "TFDSDecoder"]


class _DictDecoder:
    def __init__(self, children: dict[str, Any]) -> None:
        self.children = children

    def decode(self, raw: Mapping[str, Any], name: Optional[str]) -> dict[str, Any]:
        return {k: c.decode(raw, name) for k, c in self.children.items()}

    def collate(self, values: list[Any]) -> dict[str, Any]:
        return {k: c.collate([v[k] for v in values]) for k, c in self.children.items()}

    def leaves(self) -> Iterator[_LeafDecoder]:
        for child in self.children.values():
            yield from (child.leaves() if isinstance(child, _DictDecoder) else [child])


class _StepsDecoder(_DictDecoder):
    """A dict under a Sequence (a Dataset feature: an RLDS episode's steps): every value must hold as many steps
    as the others, as TFDS requires (tf.data: "Dimensions 4 and 3 are not compatible")."""

    steps = True  # (TFDSPlan decodes them record by record, so that each record's are checked)

    def __init__(self, children: dict[str, Any], key: str) -> None:
        super().__init__(children)
        self.key = key

    def decode(self, raw: Mapping[str, Any], name: Optional[str]) -> dict[str, Any]:
        out = super().decode(raw, name)
        check_step_lengths(out, self.key, name)
        return out


def _step_lengths(value: Any, key: str) -> Iterator[tuple[str, int]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _step_lengths(v, f"{key}/{k}" if key else str(k))
    elif isinstance(value, torch.Tensor):
        if value.dim():
            yield key, int(value.shape[0])
    elif isinstance(value, (list, tuple, RaggedTensor)):
        yield key, len(value)


def check_step_lengths(steps: Mapping[str, Any], key: str = "", name: Optional[str] = None) -> int:
    """The number of steps of `steps` (a dict of [T, ...] values, nested), or DecodeError naming the first value
    whose length differs from the first one's."""
    lengths = list(_step_lengths(steps, key))
    if not lengths:
        return 0
    first, want = lengths[0]
    for k, n in lengths[1:]:
        if n != want:
            label = f"{name} feature {k!r}" if name else f"feature {k!r}"
            raise DecodeError(f"{label}: holds {n} steps where {first!r} holds {want} (every value of a "
                              "Dataset feature's steps must hold one row per step)", key=k)
    return want


def _compile(node: FeatureNode, key: str, seq: Shape, video: bool, decode_images: bool, where: str) -> Any:
    if isinstance(node, DictNode):
        return _DictDecoder({name: _compile(child, f"{key}/{name}" if key else name, seq, video, decode_images, where)
                             for name, child in node.children.items()})
    if isinstance(node, SequenceNode):
        inner = _compile(node.feature, key, seq + (node.length,), video or node.video, decode_images, where)
        if not seq and isinstance(inner, _DictDecoder):  # (outer dims only: a nested Sequence's values are ragged)
            return _StepsDecoder(inner.children, key)
        return inner
    assert isinstance(node, LeafNode)
    return _LeafDecoder(key, node, seq, video, decode_images, where)


def _path_of(children: Mapping[str, Any], key: str) -> Optional[list[str]]:
    """The dict keys leading to feature `key` ("objects/label"; a top-level key may itself hold "/", as the image
    converters' "image/encoded"), or None."""
    if key in children:
        return [key]
    for name, child in children.items():
        if key.startswith(name + "/") and isinstance(child, _DictDecoder):
            rest = _path_of(child.children, key[len(name) + 1 :])
            if rest is not None:
                return [name, *rest]
    return None


class TFDSDecoder:
    """Decodes the records of a TFDS dataset as TFDS does, TensorFlow-free.

    `tfr_torch.TFRecordDataset(folder, split=...)` builds one; pass your own as `features=` to choose options:
    `decode_images=False` keeps images (and video frames) as their encoded bytes, `as_supervised=True` gives
    `(input, target)` pairs from the dataset's supervised_keys. `decode_threads`: threads that decode the images of
    one record's Sequence (an RLDS episode's steps) together; None: the CPUs (at most 8, or the
    TFR_TORCH_DECODE_THREADS environment variable), 1 inside DataLoader workers; 0 or 1: in the calling thread.

    >>> info = tfr_torch.tfds.read_info("~/tensorflow_datasets", "mnist")        # doctest: +SKIP
    >>> decoder = TFDSDecoder(info, decode_images=False)                        # doctest: +SKIP
    """

    def __init__(self, info: TFDSInfo, *, decode_images: bool = True, as_supervised: bool = False,
                 decode_threads: Optional[int] = None) -> None:
        if decode_threads is not None and (isinstance(decode_threads, bool) or not isinstance(decode_threads, int)
                                           or decode_threads < 0):
            raise ValueError(f"decode_threads must be None or an int >= 0, got {decode_threads!r}")
        self.info = info
        self.decode_images = bool(decode_images)
        self.as_supervised = bool(as_supervised)
        self.decode_threads = decode_threads
        where = f"{info.path}/features.json"
        self.tree = parse_features(info.features, where, info.class_names)
        if not isinstance(self.tree, DictNode):
            raise TFDSMetadataError("the top feature must be a FeaturesDict", where)
        self.root = _compile(self.tree, "", (), False, self.decode_images, where)
        self.wire: dict[str, Any] = {}
        for leaf in self.root.leaves():
            leaf.decode_threads = decode_threads
            for key, spec in leaf.wire.items():
                if key in self.wire:
                    raise TFDSMetadataError(f"two features are stored under the same key {key!r}", where)
                self.wire[key] = spec
        if self.as_supervised:
            if info.supervised_keys is None:
                raise ValueError(f"as_supervised=True but {info.info_path} has no supervisedKeys")
            for k in info.supervised_keys:
                self._lookup_leaf(k)

    def _lookup_leaf(self, key: str) -> None:
        if _path_of(self.root.children, key) is None:
            raise TFDSMetadataError(f"supervised key {key!r} names no feature", self.info.info_path)

    def __repr__(self) -> str:  # compile caches and error messages show this
        return (f"TFDSDecoder({self.info.path!r}, decode_images={self.decode_images}, "
                f"as_supervised={self.as_supervised})")

    def plan(self) -> Any:
        """What the datasets decode with (tfr_torch.tfds.plan.TFDSPlan)."""
        from tfr_torch.tfds.plan import TFDSPlan

        return TFDSPlan(self)

    def leaves(self) -> list[_LeafDecoder]:
        return list(self.root.leaves())

    def supervised(self, item: dict[str, Any]) -> Any:
        if not self.as_supervised:
            return item
        out = []
        for key in self.info.supervised_keys or ():  # as_supervised needs them (checked in __init__)
            value: Any = item
            for part in _path_of(self.root.children, key) or ():
                value = value[part]
            out.append(value)
        return tuple(out)

    def class_names(self) -> dict[str, list[str]]:
        """Class names of every ClassLabel feature, by feature key: its names, or as TFDS names the classes of a
        ClassLabel(num_classes=N) declared without names, "0" to "N-1"."""
        return {leaf.key: leaf.leaf.names if leaf.leaf.names is not None else
                [str(i) for i in range(leaf.leaf.num_classes or 0)] for leaf in self.root.leaves()
                if leaf.leaf.type == "ClassLabel" and (leaf.leaf.names is not None or leaf.leaf.num_classes)}
