"""The converters' side of the image contract: what decode_image will return for stored bytes (height, width,
channels), dataset items (PIL images, uint8 / float tensors, numpy arrays) as pixels, and pixels re-encoded."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from tfr_torch.images._formats import sniff
from tfr_torch.images._pillow import PillowError, _pixels
from tfr_torch.images._pixels import normalize_mode, to_mode

__all__ = ["image_info", "as_pixels", "encode_pixels", "check_mode_for_format"]

_OWN_CHANNELS = {"1": 1, "L": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "I;16N": 1, "LA": 2, "La": 2, "RGB": 3,
                 "CMYK": 3, "YCbCr": 3, "RGBX": 3, "RGBA": 4, "RGBa": 4, "PA": 4}
_MODE_CHANNELS = {"GRAY": 1, "GRAY_ALPHA": 2, "RGB": 3, "RGB_ALPHA": 4}


def image_info(img: Any, data: bytes, mode: str = "UNCHANGED") -> tuple[int, int, int]:
    """(height, width, channels) of what decode_image(data, mode) returns, from an opened (not decoded) PIL image
    of those bytes: the header only."""
    width, height = img.size
    if mode != "UNCHANGED":
        return height, width, _MODE_CHANNELS[mode]
    header = sniff(data)
    if header.format == "png" and header.color_type == 4:
        return height, width, 2  # Pillow opens 16-bit gray+alpha as RGBA
    if header.format == "gif":
        return height, width, 3  # decode_image gives GIF as RGB; its transparency is alpha only when asked
    if img.mode == "P":
        return height, width, 4 if "transparency" in img.info else 3
    if img.mode == "I" and img.format in ("PPM", "PNG"):  # 16-bit gray (a PNG's, before Pillow 10)
        return height, width, 1
    if img.mode not in _OWN_CHANNELS:
        raise ValueError(f"Pillow mode {img.mode} has no 8-bit image meaning")
    return height, width, _OWN_CHANNELS[img.mode]


def check_mode_for_format(mode: str | None, fmt: str) -> str:
    """The read mode's name, refusing combinations that cannot be stored (alpha in JPEG, any mode with "keep")."""
    name = normalize_mode(mode if mode is not None else "UNCHANGED")
    if fmt == "keep" and name != "UNCHANGED":
        raise ValueError(f"mode={name!r} needs a format that re-encodes the pixels (jpeg, png or raw); format 'keep' "
                         f"stores the files as they are")
    if fmt == "jpeg" and name in ("GRAY_ALPHA", "RGB_ALPHA"):
        raise ValueError(f"JPEG has no alpha channel: mode={name!r} needs format 'png' or 'raw'")
    return name


def as_pixels(image: Any, mode: str = "UNCHANGED") -> torch.Tensor:
    """A dataset item's image as uint8 [C, H, W] in `mode`: a PIL image (mapped as decode_image maps decoded
    files), a uint8 tensor [C, H, W] / [H, W], a float tensor in [0, 1] (what ToTensor() makes; times 255 and
    truncated, as torchvision's ToPILImage does), or a uint8 numpy array [H, W, C] / [H, W]; C is 1 to 4."""
    from PIL import Image

    if isinstance(image, Image.Image):
        image.load()
        try:
            array, depth = _pixels(image)
        except PillowError as exc:
            raise TypeError(f"cannot convert this PIL image: {exc}") from None
        pixels = torch.from_numpy(np.ascontiguousarray(np.moveaxis(array, -1, 0)).copy())
        if depth == 16:
            pixels = (pixels >> 8).to(torch.uint8)
    elif isinstance(image, torch.Tensor):
        pixels = _tensor_pixels(image)
    elif isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise TypeError(f"a numpy image must be uint8 [H, W, C] or [H, W], got {image.dtype} {image.shape}")
        array = image[:, :, None] if image.ndim == 2 else image
        pixels = torch.from_numpy(np.ascontiguousarray(np.moveaxis(array, -1, 0)).copy())
    else:
        raise TypeError(f"an image must be a PIL image, a uint8 or float tensor [C, H, W] or a uint8 numpy array "
                        f"[H, W, C], got {type(image).__name__}")
    if not 1 <= pixels.shape[0] <= 4:
        raise TypeError(f"an image must have 1 to 4 channels, got {pixels.shape[0]} (shape {tuple(pixels.shape)})")
    return to_mode(pixels, mode, 255).contiguous()


def _tensor_pixels(image: torch.Tensor) -> torch.Tensor:
    if image.ndim not in (2, 3):
        raise TypeError(f"a tensor image must be [C, H, W] or [H, W], got {image.dtype} {tuple(image.shape)}")
    image = image.detach().cpu()
    if image.ndim == 2:
        image = image[None]
    if image.dtype == torch.uint8:
        return image.contiguous()
    if image.is_floating_point():
        low, high = (float(image.min()), float(image.max())) if image.numel() else (0.0, 0.0)
        if not (0.0 <= low and high <= 1.0):  # NaN fails both
            raise ValueError(f"a float tensor image must hold values in [0, 1] (what ToTensor() makes), got values "
                             f"from {low} to {high}")
        return image.mul(255).to(torch.uint8).contiguous()  # torchvision's ToPILImage: pic.mul(255).byte()
    raise TypeError(f"a tensor image must be uint8 or float in [0, 1], got {image.dtype} {tuple(image.shape)}")


def encode_pixels(pixels: torch.Tensor, fmt: str, quality: int) -> tuple[bytes, int]:
    """uint8 [C, H, W] as PNG or JPEG bytes, and the channels stored (JPEG drops alpha: gray+alpha -> gray,
    RGBA -> RGB)."""
    from PIL import Image

    if fmt == "jpeg" and pixels.shape[0] in (2, 4):
        pixels = pixels[: pixels.shape[0] - 1]
    array = pixels.permute(1, 2, 0).numpy()
    img = Image.fromarray(np.ascontiguousarray(array[:, :, 0] if array.shape[2] == 1 else array),
                          {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[array.shape[2]])
    out = io.BytesIO()
    if fmt == "jpeg":
        img.save(out, "JPEG", quality=quality)
    else:
        img.save(out, "PNG")
    return out.getvalue(), pixels.shape[0]
