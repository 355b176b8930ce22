"""The result contract, applied in torch on any device: read modes, 16-bit scaling, EXIF orientation, dtype.

Every decoder hands over the image's own channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) as an integer tensor
[..., C, H, W] of 8-bit or 16-bit samples; what a user asked for is made from that here, once, so that every decoder
gives the same pixels.
"""

from __future__ import annotations

import enum
from typing import Any, Union

import torch

__all__ = ["MODES", "normalize_mode", "to_mode", "orient", "to_dtype", "luma"]

MODES = ("UNCHANGED", "GRAY", "GRAY_ALPHA", "RGB", "RGB_ALPHA")
"""The read modes of `decode_image` (torchvision's `ImageReadMode` names; "L", "LA", "RGBA" are accepted too)."""
_ALIASES = {"RGBA": "RGB_ALPHA", "L": "GRAY", "LA": "GRAY_ALPHA"}
_CHANNELS = {"GRAY": 1, "GRAY_ALPHA": 2, "RGB": 3, "RGB_ALPHA": 4}
DTYPES = (torch.uint8, torch.uint16, torch.float32)


def normalize_mode(mode: Union[str, enum.Enum, Any]) -> str:
    """The read mode's name: "UNCHANGED", "GRAY", "GRAY_ALPHA", "RGB" or "RGB_ALPHA", from that string (any case;
    "RGBA", "L" and "LA" are accepted as torchvision and Pillow spell them) or from torchvision's / torchcodec's
    ImageReadMode enum."""
    name = mode.name if isinstance(mode, enum.Enum) else mode
    if isinstance(name, str):
        key = name.upper()
        key = _ALIASES.get(key, key)
        if key in MODES:
            return key
    raise ValueError(f"mode must be one of {', '.join(MODES)} (a string or torchvision's ImageReadMode), got {mode!r}")


def luma(rgb: torch.Tensor) -> torch.Tensor:
    """ITU-R 601-2 luma of [..., 3, H, W] samples, rounded as Pillow's convert("L") rounds it:
    (19595 R + 38470 G + 7471 B + 32768) >> 16."""
    wide = rgb.to(torch.int64)
    y = (wide[..., 0, :, :] * 19595 + wide[..., 1, :, :] * 38470 + wide[..., 2, :, :] * 7471 + 32768) >> 16
    return y.to(rgb.dtype).unsqueeze(-3)


def to_mode(pixels: torch.Tensor, mode: str, top: int) -> torch.Tensor:
    """The image's own channels [..., C, H, W] in `mode` (`top`: the opaque alpha value, 255 or 65535). Gray
    becomes RGB by repeating it, colour becomes gray by its luma, alpha is dropped or added (opaque)."""
    channels = pixels.shape[-3]
    if mode == "UNCHANGED" or _CHANNELS[mode] == channels:
        return pixels
    if channels in (1, 2):
        intensity = pixels[..., :1, :, :]
        colour = intensity.expand(*pixels.shape[:-3], 3, *pixels.shape[-2:])
    else:
        colour = pixels[..., :3, :, :]
        intensity = luma(colour) if mode in ("GRAY", "GRAY_ALPHA") else colour
    base = intensity if mode in ("GRAY", "GRAY_ALPHA") else colour
    if mode in ("GRAY", "RGB"):
        return base.contiguous()
    if channels in (2, 4):
        alpha = pixels[..., -1:, :, :]
    else:
        alpha = torch.full((*pixels.shape[:-3], 1, *pixels.shape[-2:]), top, dtype=pixels.dtype, device=pixels.device)
    return torch.cat([base, alpha], dim=-3)


def orient(pixels: torch.Tensor, orientation: int) -> torch.Tensor:
    """Apply an EXIF orientation (1-8) as Pillow's ImageOps.exif_transpose does, to [..., H, W]."""
    if orientation == 2:
        return pixels.flip(-1)
    if orientation == 3:
        return pixels.flip(-2, -1)
    if orientation == 4:
        return pixels.flip(-2)
    if orientation == 5:
        return pixels.transpose(-2, -1).contiguous()
    if orientation == 6:
        return torch.rot90(pixels, -1, (-2, -1)).contiguous()
    if orientation == 7:
        return pixels.transpose(-2, -1).flip(-2, -1)
    if orientation == 8:
        return torch.rot90(pixels, 1, (-2, -1)).contiguous()
    return pixels


def to_dtype(pixels: torch.Tensor, depth: int, dtype: torch.dtype) -> torch.Tensor:
    """Samples of `depth` bits (8: uint8 values, 16: int32 values) as `dtype`: uint8 (16-bit shifted right by 8),
    uint16 (8-bit shifted left by 8, as TensorFlow's convert_image_dtype and torchvision's to_dtype scale it), or
    float32 in [0, 1] (divided by 255 or 65535)."""
    if dtype == torch.float32:
        return pixels.to(torch.float32) / (255.0 if depth == 8 else 65535.0)
    if dtype == torch.uint16:
        wide = pixels.to(torch.int32) << 8 if depth == 8 else pixels.to(torch.int32)
        return wide.to(torch.uint16)
    if depth == 16:
        return (pixels >> 8).to(torch.uint8)
    return pixels if pixels.dtype == torch.uint8 else pixels.to(torch.uint8)
