"""decode_image: encoded image bytes (JPEG, PNG, ...) to a uint8 tensor [C, H, W]."""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from typing import Any, Union

import numpy as np
import torch

from tfr_torch.errors import DecodeError

__all__ = ["decode_image", "normalize_mode"]


@functools.lru_cache(maxsize=1)
def _torchvision_io() -> Any:
    """torchvision.io when torchvision imports and works (its wheels must match torch), else None."""
    try:
        import torchvision.io as tvio

        tvio.decode_image  # noqa: B018 - the attribute exists from torchvision 0.8
        return tvio
    except (ImportError, RuntimeError, OSError, AttributeError):  # a torchvision built for another torch
        return None


def _pillow(data: bytes, name: str | None) -> torch.Tensor:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            array = np.array(normalize_mode(img))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise DecodeError(f"cannot decode {_what(name)} ({len(data)} bytes): {exc}") from None
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def normalize_mode(img: Any) -> Any:
    """The image in the mode decoders give: L, LA, RGB and RGBA stay; palette images become RGB (RGBA with
    transparency); everything else RGB."""
    if img.mode in ("L", "LA", "RGB", "RGBA"):
        return img
    if img.mode == "P":
        return img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode in ("I;16", "I", "F"):
        return img.convert("L")
    return img.convert("RGBA" if "A" in img.getbands() else "RGB")


def _what(name: str | None) -> str:
    return f"image {name}" if name else "image"


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, torch.Tensor) and data.dtype == torch.uint8:
        return data.numpy().tobytes()
    raise TypeError(f"decode_image expects encoded image bytes, got {type(data).__name__}")


def decode_image(data: Union[bytes, Sequence[bytes]], device: Union[str, torch.device] = "cpu",
                 name: Union[str, Sequence[str], None] = None) -> Union[torch.Tensor, list[torch.Tensor]]:
    """Decode an encoded image (JPEG, PNG, BMP, GIF, WebP, ...) into a uint8 tensor [C, H, W].

    Uses torchvision.io when torchvision is installed and works, Pillow otherwise (same pixels for PNG; JPEG
    decoders may differ by a unit in a few pixels). A list of images gives a list of tensors; with
    `device="cuda"` and torchvision, JPEGs are decoded in one batch on the GPU (nvjpeg). A corrupt image raises
    DecodeError naming it (`name`: e.g. the record's "path:offset" or the key).

    >>> image = decode_image(record["image/encoded"][0])  # doctest: +SKIP
    """
    device = torch.device(device)
    if isinstance(data, (list, tuple)):
        names = list(name) if isinstance(name, (list, tuple)) else [name] * len(data)
        items = [_as_bytes(d) for d in data]
        tvio = _torchvision_io()
        if device.type == "cuda" and tvio is not None and all(d[:2] == b"\xff\xd8" for d in items):
            tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in items]
            try:
                return list(tvio.decode_jpeg(tensors, device=device))
            except RuntimeError as exc:
                raise DecodeError(f"cannot decode a batch of {len(items)} JPEGs on {device}: {exc}") from None
        return [decode_image(d, device, n) for d, n in zip(items, names)]
    raw = _as_bytes(data)
    tvio = _torchvision_io()
    if tvio is not None:
        try:
            tensor = tvio.decode_image(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
        except RuntimeError as exc:
            raise DecodeError(f"cannot decode {_what(name)} ({len(raw)} bytes): {exc}") from None
    else:
        tensor = _pillow(raw, name)
    return tensor.to(device) if device.type != "cpu" else tensor
