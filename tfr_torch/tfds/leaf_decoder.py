"""One leaf of a TFDS feature tree (and the Sequence dimensions above it) as a decoder: the wire specs of the
tensors TFDS's serializer wrote for it, and the steps TFDS's decoders take after parsing (reshape, bool / wide
unsigned casts, `bytes`/`zlib` tensor encodings, image decoding, ragged sequences), for one record and for a batch.
The tree's dicts and the decoder built from them: tfds/features.py; one image: tfds/image_decode.py.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, cast

import numpy as np
import torch

from tfr_torch.decode.results import RaggedTensor
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, string
from tfr_torch.errors import DecodeError
from tfr_torch.tfds.feature_tree import _NUMPY, LeafNode, Shape
from tfr_torch.tfds.image_decode import _decode_image
from tfr_torch.tfds.image_steps import decode_steps
from tfr_torch.tfds.metadata import TFDSMetadataError

_TORCH_DECODE = {"bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32,
                 "int64": torch.int64, "uint8": torch.uint8, "float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float32": torch.float32, "float64": torch.float64}
_WIDE_UNSIGNED = ("uint16", "uint32", "uint64")  # read as int64, converted after

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
