"""The Pillow decoder: every format Pillow reads, to the image's own channels at 8 or 16 bits.

Pillow's modes are mapped to the contract here: bilevel and 2/4-bit gray scaled to 0-255, palettes expanded (RGBA
when the palette has transparency), 16-bit gray kept at 16 bits, 16-bit RGB/RGBA/gray+alpha PNGs read at full depth
when asked (Pillow itself keeps only their high bytes), CMYK and YCbCr converted to RGB.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np

from tfr_torch.images._formats import Header

__all__ = ["decode_pillow", "PillowError", "exif_orientation"]

_AS_IS = ("L", "LA", "RGB", "RGBA")
_CONVERT = {"1": "L", "CMYK": "RGB", "YCbCr": "RGB", "RGBX": "RGB", "RGBa": "RGBA", "La": "LA", "PA": "RGBA"}
_SIXTEEN = ("I;16", "I;16B", "I;16L", "I;16N")


class PillowError(Exception):
    """Pillow could not decode the bytes; the message says why."""


def _open(data: bytes) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(data))


def _pixels(img: Any) -> tuple[np.ndarray, int]:
    """[H, W, C] samples and their depth (8 or 16) of one loaded frame."""
    mode = img.mode
    if mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif mode in _CONVERT:
        img = img.convert(_CONVERT[mode])
    elif mode in _SIXTEEN or (mode == "I" and img.format == "PPM"):  # Pillow scales PPM's maxval to 16 bits
        return np.asarray(img).astype(np.int32)[:, :, None], 16
    elif mode not in _AS_IS:
        raise PillowError(f"Pillow mode {mode} ({_describe(mode)}) has no 8-bit image meaning")
    array = np.asarray(img)
    return (array[:, :, None] if array.ndim == 2 else array), 8


def _describe(mode: str) -> str:
    return {"I": "32-bit integer pixels", "F": "32-bit float pixels", "LAB": "CIE L*a*b* colour",
            "HSV": "HSV colour"}.get(mode, "an unsupported pixel layout")


def _wide_png(data: bytes, header: Header) -> np.ndarray | None:
    """A 16-bit RGB / RGBA / gray+alpha PNG at full depth, int32 [H, W, C]; None when its layout is unexpected.

    Pillow reads these with rawmodes that keep the high byte of each sample. The same file read with the
    little-endian rawmode gives the low bytes (the unfiltering does not depend on the rawmode); a gray+alpha file
    read as 8-bit RGBA (same 4 bytes a pixel) gives its raw big-endian bytes."""
    img = _open(data)
    if len(img.tile) != 1 or not isinstance(img.tile[0].args, str):
        return None
    tile = img.tile[0]
    if header.color_type == 4:
        img.tile = [tile._replace(args="RGBA")]
        raw = np.asarray(img).astype(np.int32)
        return np.stack([raw[..., 0] << 8 | raw[..., 1], raw[..., 2] << 8 | raw[..., 3]], axis=-1)
    if not tile.args.endswith(";16B"):
        return None
    high = np.asarray(img).astype(np.int32)
    again = _open(data)
    again.tile = [tile._replace(args=tile.args.replace(";16B", ";16L"))]
    return high << 8 | np.asarray(again).astype(np.int32)


def decode_pillow(data: bytes, header: Header, *, gray: bool, wide: bool, all_frames: bool) -> tuple[np.ndarray, int]:
    """([H, W, C] or, with all_frames, [N, H, W, C] samples, depth). `gray`: decode a JPEG's luminance only;
    `wide`: keep 16-bit samples. Raises PillowError."""
    from PIL import Image, UnidentifiedImageError

    try:
        if wide and header.format == "png" and header.bit_depth == 16 and header.color_type in (2, 4, 6):
            array = _wide_png(data, header)
            if array is not None:
                return (array[None] if all_frames else array), 16
        with _open(data) as img:
            if gray and img.format == "JPEG" and img.mode in ("L", "RGB"):
                img.draft("L", img.size)  # libjpeg's own luminance output, at full size
            if header.format == "png" and header.color_type == 4 and header.bit_depth == 16:
                img.load()  # Pillow gives 16-bit gray+alpha as RGBA of high bytes: keep L and A
                array = np.asarray(img)[:, :, [0, 3]]
                return (array[None] if all_frames else array), 8
            if not all_frames:
                img.load()
                return _pixels(img)
            frames = []
            for k in range(getattr(img, "n_frames", 1)):
                img.seek(k)
                img.load()
                frames.append(_pixels(img))
    except UnidentifiedImageError:
        raise PillowError("not an image format Pillow can identify") from None
    except (OSError, ValueError, SyntaxError, EOFError, IndexError, TypeError, Image.DecompressionBombError) as exc:
        raise PillowError(str(exc) or type(exc).__name__) from None
    channels = max(f.shape[-1] for f, _ in frames)
    out = []
    for array, _ in frames:
        if array.shape[-1] == 3 and channels == 4:  # another frame has transparency: every frame gets alpha
            array = np.concatenate([array, np.full(array.shape[:2] + (1,), 255, array.dtype)], axis=-1)
        elif array.shape[-1] != channels:
            raise PillowError(f"its frames have {array.shape[-1]} and {channels} channels")
        out.append(array)
    return np.stack(out), frames[0][1]


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation tag (1-8) Pillow reads from the file's metadata, 1 when absent or unreadable."""
    try:
        with _open(data) as img:
            value = img.getexif().get(0x0112, 1)
    except (OSError, ValueError, SyntaxError, EOFError, IndexError, KeyError, TypeError, struct.error):
        return 1  # metadata that Pillow cannot read means no orientation, never a failed decode
    return value if isinstance(value, int) and 1 <= value <= 8 else 1
