"""One image of a TFDS Image feature (or a Video frame) decoded as TFDS decodes it, TensorFlow-free: a JPEG through
simplejpeg with TensorFlow's settings when it can, else `tfr_torch.decode_image`, then TensorFlow's channel
conversions (`decode_image(channels=...)`). Whole Sequences of images: tfds/image_steps.py.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from tfr_torch.errors import DecodeError


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
