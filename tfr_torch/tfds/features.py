"""A TFDS feature tree (features.json) as a tfr_torch decoder: the flat wire spec TFDS's serializer wrote, and the
steps TFDS's decoders take after parsing (reshape, bool/int32/uint16 casts, `bytes`/`zlib` tensor encodings, image
decoding, ragged sequences, nesting), giving what `tfds.as_numpy(builder.as_dataset(split))` gives, as torch
values: tensors, with images as uint8 `[C, H, W]` (videos `[T, C, H, W]`); Text as bytes; nested sequences as
`tfr_torch.RaggedTensor`.

Supported: FeaturesDict (nested), Tensor and Scalar (every integer, bool and float dtype, strings; static and
dynamic shapes; encodings none/bytes/zlib), ClassLabel (names from `*.labels.txt`), Text, Image (uint8; png, jpeg,
...), Video (frames as images), BBoxFeature, Audio (stored as samples), Sequence (fixed and variable length, of any
of these, nested). Anything else raises TFDSMetadataError naming the feature's key and type.

The tree itself (features.json parsed and checked): tfds/feature_tree.py; here, its compilation into a decoder.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional, cast

import numpy as np
import torch

from tfr_torch.decode.results import RaggedTensor
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, string
from tfr_torch.errors import DecodeError
from tfr_torch.tfds.feature_tree import _NUMPY, DictNode, FeatureNode, LeafNode, SequenceNode, Shape, parse_features
from tfr_torch.tfds.image_steps import decode_steps
from tfr_torch.tfds.metadata import TFDSInfo, TFDSMetadataError

__all__ = ["FeatureNode", "DictNode", "SequenceNode", "LeafNode", "parse_features", "TFDSDecoder"]

_TORCH_DECODE = {"bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                 "int64": torch.int64, "uint8": torch.uint8, "float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float32": torch.float32, "float64": torch.float64}
_WIDE_UNSIGNED = ("uint16", "uint32", "uint64")  # read as int64, converted after


# ----- wire fields and decoding ------------------------------------------------------------------------------------

def _torch_from_numpy(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array))


def _known(shape: Shape) -> tuple[int, ...]:
    """The dimensions of `shape` that are known (all of them, where the caller checked there is no None)."""
    return tuple(d for d in shape if d is not None)


@dataclass
class _Field:
    """One serialized tensor of a leaf: wire key, full shape (sequence dims first), dtype, sequence rank."""

    key: str
    shape: Shape
    dtype: str
    rank: int

    def wire_specs(self, where: str) -> dict[str, Any]:
        decode = string if self.dtype == "string" else _TORCH_DECODE.get(self.dtype, torch.int64)
        if self.rank >= 2:
            inner = self.shape[self.rank:]
            if None in inner:
                raise TFDSMetadataError(f"feature {self.key!r}: nested Sequence of a value with an unknown dimension "
                                        f"{inner} cannot be stored by TFDS", where)
            specs = {f"{self.key}/ragged_flat_values": FixedLenSequenceFeature(_known(inner), decode,
                                                                               allow_missing=True)}
            for j in range(self.rank - 1):
                specs[f"{self.key}/ragged_row_lengths_{j}"] = FixedLenSequenceFeature((), torch.int64,
                                                                                     allow_missing=True)
            return specs
        unknown = sum(d is None for d in self.shape)
        if unknown == 0:
            return {self.key: FixedLenFeature(_known(self.shape), decode)}
        if unknown == 1:
            return {self.key: FixedLenSequenceFeature(_known(self.shape), decode, allow_missing=True)}
        raise TFDSMetadataError(f"feature {self.key!r}: shape {self.shape} has several unknown dimensions; TFDS "
                                "stores such tensors only with encoding='bytes' or 'zlib'", where)

    def value(self, raw: Mapping[str, Any]) -> Any:
        """The field of one record: a tensor of its full shape, a list of bytes (nested like the shape), or for
        nested sequences (rank >= 2) a RaggedTensor."""
        if self.rank >= 2:
            values = raw[f"{self.key}/ragged_flat_values"]
            splits = []
            for j in range(self.rank - 1):
                lengths = raw[f"{self.key}/ragged_row_lengths_{j}"]
                splits.append(torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths, 0)]))
            return RaggedTensor(values, tuple(splits))
        value = raw[self.key]
        if isinstance(value, torch.Tensor) and sum(d is None for d in self.shape) == 1:
            value = value.reshape([-1 if d is None else d for d in self.shape])
        return value


class _LeafDecoder:
    """Decodes one leaf of the tree (and the Sequence dims above it) for one record, and collates a batch."""

    def __init__(self, key: str, leaf: LeafNode, seq: Shape, video: bool, decode_images: bool, where: str) -> None:
        self.key, self.leaf, self.seq, self.video = key, leaf, seq, video
        self.decode_images = decode_images
        self.decode_threads: Optional[int] = None  # set by TFDSDecoder
        self.rank = len(seq)
        t, shape, dtype = leaf.type, leaf.shape, leaf.dtype
        if t in ("Image",):
            if decode_images and dtype != "uint8":
                raise TFDSMetadataError(f"feature {key!r}: Image of dtype {dtype} cannot be decoded by tfr_torch "
                                        "(uint8 images only); pass decode_images=False to get the encoded bytes", where)
            self.fields = [_Field(key, seq, "string", self.rank)]
            self.mode = "image"
        elif t == "Text":
            self.fields = [_Field(key, seq, "string", self.rank)]
            self.mode = "text"
        elif leaf.encoding != "none":
            if dtype == "string":
                raise TFDSMetadataError(f"feature {key!r}: string Tensors cannot be encoded", where)
            if sum(d is None for d in shape) > 1:
                self.fields = [_Field(f"{key}/shape", seq + (len(shape),), "int32", self.rank),
                               _Field(f"{key}/value", seq, "string", self.rank)]
                self.mode = "encoded-dynamic"
            else:
                self.fields = [_Field(key, seq, "string", self.rank)]
                self.mode = "encoded"
        else:
            self.fields = [_Field(key, seq + shape, dtype, self.rank)]
            self.mode = "plain"
        if self.rank >= 2 and self.mode not in ("plain",):
            raise TFDSMetadataError(f"feature {key!r}: a nested Sequence of {t} with encoding or decoding steps is not "
                                    f"supported (supported there: plain Tensors, ClassLabel, BBoxFeature)", where)
        self.wire = {}
        for field in self.fields:
            self.wire.update(field.wire_specs(where))

    # -- one record --

    def decode(self, raw: Mapping[str, Any], name: Optional[str]) -> Any:
        values = [f.value(raw) for f in self.fields]
        if self.mode == "plain":
            value = values[0]
            if self.leaf.dtype in _WIDE_UNSIGNED:
                if isinstance(value, RaggedTensor):  # numeric, so its values are a tensor
                    value = RaggedTensor(_unsigned(cast(torch.Tensor, value.values), self.leaf.dtype),
                                         value.nested_row_splits)
                else:
                    value = _unsigned(value, self.leaf.dtype)
            return value
        if self.mode == "text":
            return values[0]
        if self.rank == 0:
            return self._element(values, name)
        if self.mode == "image" and self.decode_images:  # one Sequence of images: together, when they allow it
            steps = decode_steps(values[0], self.leaf.shape[2], self.decode_threads)
            if steps is not None:
                self._check_image(steps[0], name)  # (decode_steps gives images of one size: the first's)
                return steps
        # one Sequence level: decode each element
        items = [self._element([v[i] for v in values], name) for i in range(len(values[-1]))]
        if self.mode == "image" and not self.decode_images:
            return items
        return _stack(items, self._element_shape(), "uint8" if self.mode == "image" else self.leaf.dtype)

    def _element_shape(self) -> Shape:
        shape = self.leaf.shape
        if self.mode == "image":
            return (shape[2], shape[0], shape[1])
        return shape

    def _element(self, values: list[Any], name: Optional[str]) -> Any:
        leaf = self.leaf
        if self.mode == "image":
            data = values[0]
            if not self.decode_images:
                return data
            return self._check_image(_decode_image(data, leaf.shape[2], self.key, name), name)
        if self.mode == "encoded":
            return _from_bytes(values[0], leaf, None, self.key, name)
        if self.mode == "encoded-dynamic":
            return _from_bytes(values[1], leaf, [int(d) for d in values[0].tolist()], self.key, name)
        raise AssertionError(self.mode)

    def _check_image(self, image: torch.Tensor, name: Optional[str]) -> torch.Tensor:
        """The image, or DecodeError when its height or width is not the one features.json declares (TFDS:
        "Incompatible shapes")."""
        height, width = self.leaf.shape[0], self.leaf.shape[1]
        found = (int(image.shape[1]), int(image.shape[2]))
        if (height is not None and found[0] != height) or (width is not None and found[1] != width):
            label = f"{name} feature {self.key!r}" if name else f"feature {self.key!r}"
            declared = ", ".join("None" if d is None else str(d) for d in self.leaf.shape)
            raise DecodeError(f"{label}: image of height {found[0]} and width {found[1]}, but features.json declares "
                              f"shape ({declared})", key=self.key)
        return image

    # -- a batch --

    def output_shape(self) -> Optional[Shape]:
        """The static shape of one record's value (None where unknown), or None when it is not a tensor."""
        if (self.mode == "text" or (self.mode == "plain" and self.leaf.dtype == "string")  # strings: lists of bytes
                or (self.mode == "image" and not self.decode_images) or self.rank >= 2):
            return None
        return self.seq + self._element_shape()

    def collate(self, values: list[Any]) -> Any:
        shape = self.output_shape()
        if shape is None:
            if self.rank >= 2:
                return _ragged_batch(values)
            return values
        if None not in shape:
            return torch.stack(values) if values else values
        if shape[0] is None and None not in shape[1:]:
            return torch.nested.nested_tensor(values, layout=torch.jagged)
        return values


def _unsigned(value: torch.Tensor, dtype: str) -> torch.Tensor:
    array = value.numpy()
    if dtype == "uint64":
        return _torch_from_numpy(array.view(np.uint64))
    return _torch_from_numpy(array.astype(_NUMPY[dtype]))


def _from_bytes(data: bytes, leaf: LeafNode, dynamic: Optional[list[int]], key: str,
                name: Optional[str]) -> torch.Tensor:
    where = f"{name}: " if name else ""
    if leaf.encoding == "zlib":
        try:
            data = zlib.decompress(data)
        except zlib.error as exc:
            raise DecodeError(f"{where}feature {key!r}: its zlib-encoded tensor does not inflate: {exc}") from None
    np_dtype = np.dtype(_NUMPY[leaf.dtype]).newbyteorder("<")
    if len(data) % np_dtype.itemsize:
        raise DecodeError(f"{where}feature {key!r}: {len(data)} bytes is not a whole number of {leaf.dtype} values")
    array = np.frombuffer(data, dtype=np_dtype).astype(_NUMPY[leaf.dtype])
    shape = list(leaf.shape)
    if dynamic is not None:
        if len(dynamic) != len(shape):
            raise DecodeError(f"{where}feature {key!r}: its stored shape {dynamic} has {len(dynamic)} dimensions, "
                              f"expected {len(shape)}")
        shape = [d if d is not None else s for d, s in zip(leaf.shape, dynamic)]
    try:
        array = array.reshape([-1 if d is None else d for d in shape])
    except ValueError:
        raise DecodeError(f"{where}feature {key!r}: {array.size} {leaf.dtype} values do not fit the shape "
                          f"{tuple(shape)}") from None
    return _torch_from_numpy(array)


def _fast_dct_jpeg(data: bytes, channels: Optional[int]) -> Optional[torch.Tensor]:
    """A JPEG decoded as TFDS decodes it (TensorFlow's decode_image: libjpeg's fast integer inverse DCT, fancy
    upsampling, EXIF ignored) when simplejpeg is installed (the `tfds` extra); None otherwise, or for what it does
    not handle (CMYK, 2 or 4 channels asked for), which then goes through decode_image."""
    if data[:2] != b"\xff\xd8" or channels not in (None, 0, 1, 3):
        return None
    try:
        import simplejpeg
    except ImportError:
        return None
    try:
        space = simplejpeg.decode_jpeg_header(data)[2]
        if space not in ("Gray", "GRAY", "RGB", "YCbCr") and channels in (None, 0):
            return None
        gray = channels == 1 or (channels in (None, 0) and space.upper() == "GRAY")
        array = simplejpeg.decode_jpeg(data, colorspace="GRAY" if gray else "RGB", fastdct=True, fastupsample=False)
    except ValueError:
        return None  # decode_image reports it, with its own message
    array = array.reshape(array.shape[0], array.shape[1], -1)
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(array, -1, 0)))


def _decode_image(data: bytes, channels: Optional[int], key: str, name: Optional[str]) -> torch.Tensor:
    from tfr_torch import decode_image

    label = f"{name} feature {key!r}" if name else f"feature {key!r}"
    fast = _fast_dct_jpeg(data, channels)
    if fast is not None:
        return fast
    image = decode_image(data, name=label)
    if image.ndim != 3:
        raise DecodeError(f"{label}: decoded to shape {tuple(image.shape)}, expected [C, H, W]")
    return _channels(image, channels, label, png=data[:8] == b"\x89PNG\r\n\x1a\n")


def _channels(image: torch.Tensor, want: Optional[int], label: str, png: bool = False) -> torch.Tensor:
    """TensorFlow's decode_image(channels=want) conversions: gray is replicated, alpha dropped or set opaque, color
    turned to gray with ITU-R 601 weights (for a PNG, libpng's fixed-point ones: see _gray)."""
    have = image.shape[0]
    if want in (None, 0) or have == want:
        return image
    color = image[:1] if have in (1, 2) else image[:3]
    alpha = image[have - 1 :] if have in (2, 4) else None
    if want == 1:
        return color if color.shape[0] == 1 else _gray(color, png)
    if want == 2:
        gray = color if color.shape[0] == 1 else _gray(color, png)
        return torch.cat([gray, alpha if alpha is not None else torch.full_like(gray, 255)])
    rgb = color.expand(3, -1, -1).contiguous() if color.shape[0] == 1 else color
    if want == 3:
        return rgb.contiguous()
    if want == 4:
        return torch.cat([rgb, alpha if alpha is not None else torch.full_like(rgb[:1], 255)])
    raise DecodeError(f"{label}: cannot give {want} channels")


def _gray(rgb: torch.Tensor, png: bool = False) -> torch.Tensor:
    if png:  # TensorFlow's decode_png: libpng's png_set_rgb_to_gray(0.299, 0.587), weights in 1/32768, truncated;
        r, g, b = rgb.to(torch.int32)  # a gray pixel (r == g == b) kept as it is
        gray = torch.where((r == g) & (g == b), r, (9797 * r + 19234 * g + 3737 * b) >> 15)
        return gray.unsqueeze(0).to(torch.uint8)
    weights = torch.tensor([299, 587, 114], dtype=torch.int32).view(3, 1, 1)
    return ((rgb.to(torch.int32) * weights).sum(0, keepdim=True) + 500).div(1000, rounding_mode="floor").to(torch.uint8)


def _stack(items: list[Any], shape: Shape, dtype: str) -> Any:
    if not items:
        return _torch_from_numpy(np.zeros([0] + [d or 0 for d in shape], dtype=_NUMPY[dtype]))
    first = items[0].shape
    if all(item.shape == first for item in items):
        return torch.stack(items)
    return items  # elements of different sizes (TFDS cannot batch them either)


def _ragged_batch(values: list[Any]) -> Any:
    if not values:
        return values
    rows = torch.tensor([len(v) for v in values], dtype=torch.int64)
    outer = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(rows, 0)])
    splits = [outer]
    for level in range(values[0].ragged_rank):
        parts, base = [torch.zeros(1, dtype=torch.int64)], 0
        for v in values:
            s = v.nested_row_splits[level]
            parts.append(s[1:] + base)
            base += int(s[-1])
        splits.append(torch.cat(parts))
    data = [v.values for v in values]
    flat = torch.cat(data) if isinstance(data[0], torch.Tensor) else [x for d in data for x in d]
    return RaggedTensor(flat, tuple(splits))


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
