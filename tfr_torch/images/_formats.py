"""What an encoded image is, read from its first bytes and headers only (no pixels decoded, no torch).

The decoders are chosen per format from this: a faster decoder only gets the kinds of file it decodes exactly as
the contract says (8-bit gray/RGB JPEG, still WebP, PNG), everything else goes to Pillow. EXIF orientation is read
here too, so every decoder applies the same one.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from tfr_torch import _native

__all__ = ["Header", "sniff", "sniff_many", "looks_like_tensor_proto"]

_PNG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Header:
    """`format`: "jpeg", "png", "gif", "webp", "bmp", "tiff", "ppm" or "unknown". `components`/`precision`: a
    JPEG's colour components and sample bits (0 when no frame header was found). `color_type`/`bit_depth`: a
    PNG's IHDR fields. `animated`: an animated WebP/PNG/GIF. `orientation`: the EXIF orientation tag (1-8) of a
    JPEG, 1 when absent or not a JPEG."""

    format: str
    components: int = 0
    precision: int = 0
    color_type: int = -1
    bit_depth: int = 0
    animated: bool = False
    orientation: int = 1
    height: int = 0  # a JPEG's frame size (0 when no frame header was found): the image transforms plan crops by it
    width: int = 0
    frame: int = 0  # a JPEG's start-of-frame marker (0xC0 baseline, 0xC2 progressive, ...; 0 when none was found)
    rgb: bool = False  # a 3-component JPEG stored as RGB, not YCbCr (libjpeg's rule: an Adobe marker, or R G B ids)
    area: int = 0  # width x height as the file's header claims it (a JPEG's frame, a PNG's IHDR, a WebP's first
    # chunk; 0 when not read)

    @property
    def progressive(self) -> bool:
        """A progressive JPEG (SOF2, SOF6, SOF10, SOF14)."""
        return self.frame in (0xC2, 0xC6, 0xCA, 0xCE)


def sniff(data: bytes) -> Header:
    """The Header of encoded image bytes (format "unknown" for anything not recognised)."""
    if data[:3] == b"\xff\xd8\xff":
        return _jpeg(data)
    if data[:8] == _PNG:
        return _png(data)
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return Header("gif", animated=data.count(b"\x00\x2c") > 1)  # a rough hint only; Pillow counts frames
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return Header("webp", animated=data[12:16] == b"VP8X" and len(data) > 20 and bool(data[20] & 0x02),
                      area=_webp_area(data))
    if data[:2] == b"BM":
        return Header("bmp")
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return Header("tiff")
    if data[:2] in (b"P1", b"P2", b"P3", b"P4", b"P5", b"P6"):
        return Header("ppm")
    return Header("unknown")


def sniff_many(items: Sequence[bytes]) -> list[Header]:
    """sniff of each item. With the compiled core, the JPEGs' headers are read at once with the GIL released
    (jpeg_headers_many: _jpeg's reading, in C), the rest by sniff: a GPU batch's host work holds the GIL for less
    beside a training loop's own Python."""
    core = _native.core
    read = getattr(core, "jpeg_headers_many", None) if core is not None else None
    if read is None:
        return [sniff(data) for data in items]
    return [sniff(data) if found is None else Header("jpeg", components=found[0], precision=found[1],
                                                      orientation=found[2], height=found[3], width=found[4],
                                                      frame=found[5], rgb=found[6], area=found[3] * found[4])
            for data, found in zip(items, read(items))]


def _webp_area(data: bytes) -> int:
    """Width x height as a WebP's first chunk claims it (the VP8X canvas, a VP8 key frame's or a VP8L image's
    size); 0 when the chunk is cut short or not one of those."""
    kind = data[12:16]
    if kind == b"VP8X" and len(data) >= 30:
        return (1 + int.from_bytes(data[24:27], "little")) * (1 + int.from_bytes(data[27:30], "little"))
    if kind == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        return (int.from_bytes(data[26:28], "little") & 0x3FFF) * (int.from_bytes(data[28:30], "little") & 0x3FFF)
    if kind == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return ((bits & 0x3FFF) + 1) * (((bits >> 14) & 0x3FFF) + 1)
    return 0


def _png(data: bytes) -> Header:
    if len(data) < 33 or data[12:16] != b"IHDR":
        return Header("png")
    bit_depth, color_type = data[24], data[25]
    width, height = struct.unpack(">II", data[16:24])
    animated = False
    pos = 8
    while pos + 8 <= len(data):  # chunk walk up to the first IDAT: an acTL chunk before it makes an APNG
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"acTL":
            animated = True
        if kind in (b"IDAT", b"IEND"):
            break
        pos += 12 + length
    return Header("png", color_type=color_type, bit_depth=bit_depth, animated=animated, area=width * height)


def _jpeg(data: bytes) -> Header:
    """Walk the JPEG markers up to the first frame header (SOFn: ITU T.81 B.2.2) or the scan."""
    pos, components, precision, orientation, height, width, frame = 2, 0, 0, 1, 0, 0, 0
    jfif, adobe, ids = False, -1, b""  # what says its colour space (jdapimin.c default_decompress_parms)
    end = len(data)
    while pos + 4 <= end:
        if data[pos] != 0xFF:
            break
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # SOI, TEM, RSTn: no length
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        segment = data[pos + 4 : pos + 2 + length]
        if marker == 0xE1 and segment[:6] == b"Exif\x00\x00" and orientation == 1:
            orientation = _exif_orientation(segment[6:])
        if marker == 0xE0 and segment[:5] == b"JFIF\x00":
            jfif = True
        if marker == 0xEE and segment[:5] == b"Adobe" and len(segment) >= 12:
            adobe = segment[11]
        start_of_frame = (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF)
        if marker in start_of_frame and len(segment) >= 6:
            precision, components, frame = segment[0], segment[5], marker
            height, width = segment[1] << 8 | segment[2], segment[3] << 8 | segment[4]
            ids = bytes(segment[6 : 6 + 3 * components : 3])
        if marker in (0xDA, 0xD9):  # start of scan / end of image: no more headers
            break
        pos += 2 + length
    rgb = components == 3 and not jfif and (adobe == 0 if adobe >= 0 else ids == b"RGB")
    return Header("jpeg", components=components, precision=precision, orientation=orientation, height=height,
                  width=width, frame=frame, rgb=rgb, area=width * height)


def _exif_orientation(tiff: bytes) -> int:
    """Tag 0x0112 of IFD0 of a TIFF-structured EXIF block (1 when absent or malformed)."""
    if tiff[:4] not in (b"II*\x00", b"MM\x00*") or len(tiff) < 8:
        return 1
    order = "<" if tiff[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", tiff[4:8])
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack(order + "H", tiff[ifd : ifd + 2])
    for k in range(count):
        entry = ifd + 2 + 12 * k
        if entry + 12 > len(tiff):
            return 1
        tag, kind = struct.unpack(order + "HH", tiff[entry : entry + 4])
        if tag == 0x0112 and kind == 3:  # SHORT
            (value,) = struct.unpack(order + "H", tiff[entry + 8 : entry + 10])
            return value if 1 <= value <= 8 else 1
    return 1


def looks_like_tensor_proto(data: bytes) -> bool:
    """Bytes that start like tf.io.serialize_tensor's output (TensorProto: field 1 dtype, then field 2 shape)."""
    return len(data) > 3 and data[0] == 0x08 and 1 <= data[1] <= 30 and data[2] == 0x12
