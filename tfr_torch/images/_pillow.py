"""The Pillow decoder: every format Pillow reads, to the image's own channels at 8 or 16 bits.

Pillow's modes are mapped to the contract here: bilevel and 2/4-bit gray scaled to 0-255, palettes expanded (RGBA
when the palette has transparency; a GIF's gray palette, which Pillow opens as L, too), 16-bit gray kept at 16
bits, 16-bit RGB/RGBA/gray+alpha PNGs read at full depth when asked (Pillow itself keeps only their high bytes),
CMYK and YCbCr converted to RGB.
"""

from __future__ import annotations

import ctypes
import io
import struct
from typing import Any

import numpy as np

from tfr_torch.images._formats import Header

__all__ = ["decode_pillow", "PillowError", "exif_orientation", "padded_base"]

_AS_IS = ("L", "LA", "RGB", "RGBA")
_CONVERT = {"1": "L", "CMYK": "RGB", "YCbCr": "RGB", "RGBX": "RGB", "RGBa": "RGBA", "La": "LA", "PA": "RGBA"}
_SIXTEEN = ("I;16", "I;16B", "I;16L", "I;16N")


class PillowError(Exception):
    """Pillow could not decode the bytes; the message says why."""


class UnsupportedPixels(PillowError):
    """Pillow decoded the bytes to pixels the contract has no meaning for (32-bit integer or float samples)."""


def _open(data: bytes) -> Any:
    from PIL import Image

    return Image.open(io.BytesIO(data))


def _pixels(img: Any, view: bool = False) -> tuple[np.ndarray, int]:
    """[H, W, C] samples and their depth (8 or 16) of one loaded frame. `view`: the image is ours and is dropped
    after this (a decoded one), so an 8-bit L, RGB or RGBA image may come back as a view of Pillow's own memory (see
    _memory_view) instead of np.asarray's copy."""
    mode = img.mode
    if mode == "P" or (mode == "L" and img.format == "GIF"):  # Pillow opens a GIF with a gray palette as L
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif mode in _CONVERT:
        img = img.convert(_CONVERT[mode])
    elif mode in _SIXTEEN or (mode == "I" and img.format in ("PPM", "PNG")):
        # 16-bit samples: Pillow scales PPM's maxval to 16 bits, and before Pillow 10 gives 16-bit gray PNGs as "I"
        return np.asarray(img).astype(np.int32)[:, :, None], 16
    elif mode not in _AS_IS:
        raise UnsupportedPixels(f"Pillow mode {mode} ({_describe(mode)}) has no 8-bit image meaning")
    array = _memory_view(img) if view and img.mode in _VIEWS else None
    if array is None:
        array = np.asarray(img)
    return (array[:, :, None] if array.ndim == 2 else array), 8


# ---- Pillow's pixel memory without a copy

# Pillow keeps 8-bit L images one byte a pixel and RGB / RGBA four (RGB's fourth byte is padding); np.asarray
# copies them out (tobytes), which is a tenth of decoding a JPEG. Pillow 11.2+ exports an image held in one block
# through the Arrow C data interface (a stable ABI): RGB/RGBA as fixed-size lists of 4 uint8 ("+w:4" of "C"), L
# as uint8 ("C"); the exported array keeps the memory alive until released (the capsule's destructor releases it).
_VIEWS = {"L": 1, "RGB": 3, "RGBA": 4}


class _ArrowSchema(ctypes.Structure):
    pass


_ArrowSchema._fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_char_p),
                         ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64),
                         ("children", ctypes.POINTER(ctypes.POINTER(_ArrowSchema))),
                         ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p),
                         ("private_data", ctypes.c_void_p)]


class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = [("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
                        ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64),
                        ("buffers", ctypes.POINTER(ctypes.c_void_p)),
                        ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
                        ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p),
                        ("private_data", ctypes.c_void_p)]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _Exported:
    """The base of a numpy array over exported pixel memory: it holds the capsules, so the memory lives as long as
    the array (and anything viewing it) does."""

    __slots__ = ("__array_interface__", "_capsules")

    def __init__(self, interface: dict[str, Any], capsules: tuple[Any, Any]) -> None:
        self.__array_interface__ = interface
        self._capsules = capsules


def _memory_view(img: Any) -> np.ndarray | None:
    """A [H, W] (L) or [H, W, C] (RGB, RGBA) view of a loaded image's own memory, or None where Pillow
    does not export it (before 11.2, or an image not held in one block) or exports a layout not checked here."""
    export = getattr(img, "__arrow_c_array__", None)
    if export is None:
        return None
    width, height = img.size
    channels = _VIEWS[img.mode]
    try:
        schema_capsule, array_capsule = export()
        schema = _ArrowSchema.from_address(_capsule_pointer(schema_capsule, b"arrow_schema"))
        array = _ArrowArray.from_address(_capsule_pointer(array_capsule, b"arrow_array"))
    except (ValueError, TypeError, AttributeError):  # "Image rows are not contiguous in memory", or no block
        return None
    if array.length != width * height or array.offset != 0 or array.null_count not in (0, -1):
        return None
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    if channels == 1:
        if schema.format != b"C" or array.n_buffers != 2 or array.n_children != 0:
            return None
        data, shape, strides = array.buffers[1], (height, width), (width, 1)
    else:
        if schema.format != b"+w:4" or schema.n_children != 1 or schema.children[0].contents.format != b"C" \
                or array.n_children != 1:
            return None
        values = array.children[0].contents
        if values.n_buffers != 2 or values.offset != 0 or values.length != 4 * width * height:
            return None
        data, shape, strides = values.buffers[1], (height, width, 4), (4 * width, 4, 1)
    if not data or not width or not height:
        return None
    # writable: the image is the caller's own and dropped after (torch warns about read-only arrays, and silencing
    # that warning per image costs more than the copy saved)
    interface = {"version": 3, "shape": shape, "strides": strides, "typestr": "|u1", "data": (data, False)}
    pixels = np.asarray(_Exported(interface, (schema_capsule, array_capsule)))
    # RGB: the first 3 of each pixel's 4 bytes, a view whose base (the 4 bytes a pixel) padded_base finds
    return pixels[:, :, :channels] if channels == 3 else pixels


def padded_base(array: np.ndarray) -> np.ndarray | None:
    """The [H, W, 4] memory behind an RGB view of _memory_view (a resize may read the 4 bytes of each pixel as they
    lie, and drop the padding after it), else None."""
    base = array.base
    if (array.ndim == 3 and array.shape[2] == 3 and isinstance(base, np.ndarray) and base.ndim == 3
            and base.shape == (*array.shape[:2], 4) and base.strides == array.strides
            and isinstance(base.base, _Exported) and base.ctypes.data == array.ctypes.data):
        return base
    return None


def _describe(mode: str) -> str:
    return {"I": "32-bit integer pixels", "F": "32-bit float pixels", "LAB": "CIE L*a*b* colour",
            "HSV": "HSV colour"}.get(mode, "an unsupported pixel layout")


def _wide_png(data: bytes, header: Header) -> np.ndarray | None:
    """A 16-bit RGB / RGBA / gray+alpha PNG at full depth, int32 [H, W, C]; None when its layout is unexpected.

    Pillow reads these with rawmodes that keep the high byte of each sample. The same file read with the
    little-endian rawmode gives the low bytes (the unfiltering does not depend on the rawmode); a gray+alpha file
    read as 8-bit RGBA (same 4 bytes a pixel) gives its raw big-endian bytes."""
    img = _open(data)
    if len(img.tile) != 1:
        return None
    tile = tuple(img.tile[0])  # (decoder, extents, offset, args): a named tuple from Pillow 11, a tuple before
    args = tile[3] if len(tile) == 4 else None
    if not isinstance(args, str):
        return None
    if header.color_type == 4:
        img.tile = [_retiled(img.tile[0], "RGBA")]
        raw = np.asarray(img).astype(np.int32)
        return np.stack([raw[..., 0] << 8 | raw[..., 1], raw[..., 2] << 8 | raw[..., 3]], axis=-1)
    if not args.endswith(";16B"):
        return None
    high = np.asarray(img).astype(np.int32)
    again = _open(data)
    again.tile = [_retiled(again.tile[0], args.replace(";16B", ";16L"))]
    return high << 8 | np.asarray(again).astype(np.int32)


def _retiled(tile: Any, args: str) -> Any:
    """`tile` with its decoder arguments replaced, of the type Pillow gave it (ImageFile._Tile, or a tuple)."""
    replace = getattr(tile, "_replace", None)
    return replace(args=args) if replace is not None else (*tuple(tile)[:3], args)


def _decode_plain_jpeg(data: bytes, header: Header) -> tuple[np.ndarray, int] | None:
    """A plain JPEG (8-bit samples, 1 or 3 components, Huffman-coded, sequential or progressive) decoded by
    Pillow's libjpeg decoder straight from the bytes at the frame size the header gives: Image.open's marker walk
    in Python (~40 us an image) is skipped, while the decoder and its settings are the ones Image.open's load uses
    (mode and rawmode L or RGB, libjpeg's own colour space), so the pixels are the same. None for anything else,
    an image over Pillow's MAX_IMAGE_PIXELS, or a decoder error: the caller opens it the usual way, which words
    the error (or warns about the size) as Pillow does."""
    from PIL import Image

    if header.frame not in (0xC0, 0xC1, 0xC2) or header.precision != 8 or header.components not in (1, 3):
        return None
    width, height, limit = header.width, header.height, Image.MAX_IMAGE_PIXELS
    if width <= 0 or height <= 0 or (limit is not None and width * height > limit):
        return None
    mode = "L" if header.components == 1 else "RGB"
    try:
        image = Image.frombytes(mode, (width, height), data, "jpeg", mode, "")
    except (ValueError, OSError):  # "not enough image data", "cannot decode image data", a libjpeg error
        return None
    return _pixels(image, view=True)


def decode_pillow(data: bytes, header: Header, *, gray: bool, wide: bool, all_frames: bool) -> tuple[np.ndarray, int]:
    """([H, W, C] or, with all_frames, [N, H, W, C] samples, depth). `gray`: decode a JPEG's luminance only;
    `wide`: keep 16-bit samples. Raises PillowError."""
    from PIL import Image, UnidentifiedImageError

    try:
        if wide and header.format == "png" and header.bit_depth == 16 and header.color_type in (2, 4, 6):
            array = _wide_png(data, header)
            if array is not None:
                return (array[None] if all_frames else array), 16
        if not all_frames and not gray:
            direct = _decode_plain_jpeg(data, header)
            if direct is not None:
                return direct
        with _open(data) as img:
            if gray and img.format == "JPEG" and img.mode in ("L", "RGB"):
                img.draft("L", img.size)  # libjpeg's own luminance output, at full size
            if header.format == "png" and header.color_type == 4 and header.bit_depth == 16:
                img.load()  # Pillow gives 16-bit gray+alpha as RGBA of high bytes: keep L and A
                array = np.asarray(img)[:, :, [0, 3]]
                return (array[None] if all_frames else array), 8
            if not all_frames:
                img.load()
                return _pixels(img, view=True)
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
