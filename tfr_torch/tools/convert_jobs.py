"""Encoding one item of a conversion into its tf.train.Example (the feature keys: tools/convert.py): `_FolderJob`
reads an image file of a folder, `_DatasetJob` takes an (image, target) item of a map-style dataset. Each is a
picklable callable of the item's index that returns the record or why it failed, so worker processes and Ray tasks
(tools/convert_run.py) run it the same way."""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from typing import Any, Optional

import torch

from tfr_torch.errors import DecodeError
from tfr_torch.format.example import encode_example
from tfr_torch.images.encode import as_pixels, encode_pixels, image_info

# What encoding one item gives: (its index, the serialized Example or None when it failed, bytes read, why it failed)
_Item = tuple[int, Optional[bytes], int, Optional[str]]


def _pil_format(name: str | None) -> str:
    return (name or "unknown").lower().replace("mpo", "jpeg")


def _check_decodes(img: Any) -> None:
    """Decode fully (JPEGs at reduced scale, which still reads every byte) to catch truncated files."""
    if img.format == "JPEG":
        img.draft(img.mode, (max(img.size[0] // 8, 1), max(img.size[1] // 8, 1)))
    img.load()


def _image_example(encoded: bytes, fmt: str, height: int, width: int, channels: int, label: int, text: str | bytes,
                   filename: str | bytes | None) -> bytes:
    features = {"image/encoded": encoded, "image/format": fmt, "image/height": height, "image/width": width,
                "image/channels": channels, "image/class/label": label, "image/class/text": text}
    if filename is not None:
        features["image/filename"] = filename
    return encode_example(features)


class _FolderJob:
    """Encodes item i of an image folder (picklable: runs in worker processes)."""

    def __init__(self, root: str, items: list[tuple[str, int]], classes: list[str], fmt: str, quality: int,
                 check: bool, mode: str = "UNCHANGED") -> None:
        self.root, self.items, self.classes = root, items, classes
        self.fmt, self.quality, self.check, self.mode = fmt, quality, check, mode
        # a relative item path is resolved against the cwd where the folder was listed, not the one of the process
        # that runs the job (a Ray worker elsewhere on the cluster, or in a runtime_env working_dir)
        self.cwd = os.getcwd() if items and not os.path.isabs(items[0][0]) else ""

    def __call__(self, i: int) -> tuple[int, bytes | None, int, str | None]:
        from PIL import Image, UnidentifiedImageError

        path, label = self.items[i]  # as listed (the messages name it so); opened and stored by its full path
        full = os.path.join(self.cwd, path)
        rel = os.path.relpath(full, self.root)
        try:
            with open(full, "rb") as f:
                data = f.read()
            if self.fmt == "keep":
                with Image.open(io.BytesIO(data)) as img:
                    fmt = _pil_format(img.format)
                    height, width, channels = image_info(img, data)  # before the check's draft() shrinks it
                    if self.check:
                        _check_decodes(img)
                encoded = data
            else:
                from tfr_torch.images import decode_image

                pixels = decode_image(data, self.mode, backend="pillow", name=path)
                encoded, fmt, channels = _reencode(pixels, self.fmt, self.quality)
                height, width = pixels.shape[-2:]
        except UnidentifiedImageError:
            return i, None, 0, f"{path}: not an image Pillow can identify"
        except DecodeError as exc:
            return i, None, 0, f"{path}: cannot read the image: {str(exc).split(': ', 1)[-1]}"
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            return i, None, 0, f"{path}: cannot read the image: {exc}"
        # os.fsencode: a name that is not UTF-8 (kept by Python as surrogate escapes) is stored as its bytes on disk
        record = _image_example(encoded, fmt, int(height), int(width), channels, label,
                                os.fsencode(self.classes[label]), os.fsencode(rel))
        return i, record, len(data), None


def _reencode(pixels: torch.Tensor, fmt: str, quality: int) -> tuple[bytes, str, int]:
    """uint8 [C, H, W] pixels stored as `fmt`: (encoded bytes, format name, channels decode_image will return)."""
    if fmt == "raw":
        from tfr_torch.tensors import serialize_tensor

        return serialize_tensor(pixels.contiguous()), "raw", int(pixels.shape[0])
    encoded, channels = encode_pixels(pixels, fmt, quality)
    return encoded, fmt, channels


def _label_of(target: Any) -> int:
    """A dataset item's target as its class index: an int, an integral float, or a tensor / array holding one
    such value. ValueError for anything that would be cut to fit (2.7, several values, past int64)."""
    if hasattr(target, "item") and hasattr(target, "shape"):
        if math.prod(target.shape) != 1:
            raise ValueError(f"the target must be one class index, got a {type(target).__name__} of shape "
                             f"{tuple(target.shape)}")
        target = target.item()
    try:
        label: int | None = int(target)  # None, "cat": TypeError / ValueError
    except OverflowError:  # an infinite float
        label = None
    if label is None or (label != target and not isinstance(target, str)) or not -(2**63) <= label < 2**63:
        raise ValueError(f"the target must be an integer class index (int64), got {target!r}")
    return label


class _DatasetJob:
    """Encodes item i of a map-style dataset of (image, target)."""

    def __init__(self, dataset: Any, classes: Sequence[str] | None, fmt: str, quality: int,
                 mode: str = "UNCHANGED") -> None:
        self.dataset, self.classes, self.fmt, self.quality, self.mode = dataset, classes, fmt, quality, mode

    def __call__(self, i: int) -> tuple[int, bytes | None, int, str | None]:
        from PIL import Image

        try:
            image, target = self.dataset[i]
            label = _label_of(target)
            pixels = as_pixels(image, self.mode)
            encoded, fmt, channels = _reencode(pixels, "png" if self.fmt == "keep" else self.fmt, self.quality)
        except (OSError, ValueError, TypeError, SyntaxError, Image.DecompressionBombError) as exc:
            return i, None, 0, f"item {i}: cannot convert it: {exc}"
        text = str(self.classes[label]) if self.classes is not None and 0 <= label < len(self.classes) else str(label)
        height, width = int(pixels.shape[-2]), int(pixels.shape[-1])
        record = _image_example(encoded, fmt, height, width, channels, label, text, None)
        return i, record, len(encoded), None
