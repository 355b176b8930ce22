"""Generate the golden image corpus under tests/data/images/.

Run by hand, from the repository root, with a Python that has Pillow, numpy and (for the cross-checks) real
TensorFlow (tensorflow-cpu 2.21 and Pillow 13.0 were used):

    <venv with tensorflow-cpu>/bin/python tests/data/images/make_images.py

It never imports tfr_torch. It writes:

* ``src/<name>.<ext>``: small images (9-17 px a side) in every mode the decode contract covers: PNG gray 1/2/4/8/16-bit
  (with and without a tRNS colour key), RGB 8/16-bit (with and without tRNS), gray+alpha and RGBA 8/16-bit, palette
  1/2/4/8-bit with and without tRNS (full and short), Pillow's own palette and bilevel PNGs; JPEG 4:2:0, 4:2:2,
  4:4:4, grayscale, CMYK, progressive, odd sizes, EXIF orientations 1-8; GIF static, transparent and animated; WebP
  lossless RGB/RGBA, lossy and animated; BMP 24-bit, 32-bit, 8-bit palette and 1-bit; TIFF RGB, RGBA, CMYK and 16-bit
  gray; PPM, PGM and 16-bit PGM; and broken files (empty, garbage, truncated JPEG/PNG/GIF/WebP, a PNG with a flipped
  byte in its pixel data with the chunk CRC left wrong and with it fixed, a JPEG header with no scan, a
  serialize_tensor payload). PNGs are written byte by byte here (every filter type, exact samples), the rest with
  Pillow.
* ``expected/<name>.npz``: the tensors tfr_torch's ``decode_image`` must return, uint8 [C, H, W] (animations
  [N, C, H, W]) under the keys ``UNCHANGED``, ``GRAY``, ``GRAY_ALPHA``, ``RGB``, ``RGB_ALPHA``; for 16-bit images also
  ``UNCHANGED_uint16`` (the full samples); for animations ``UNCHANGED_frames``; for EXIF-rotated files
  ``UNCHANGED_exif`` (orientation applied).
* ``manifest.json``: per file its format, size, sha256, the keys of its expected tensors, and which decoder defined
  each answer (``first principles`` for PNG: the samples written, scaled as the PNG spec says; ``pillow``;
  ``tensorflow`` where TensorFlow's tf.io.decode_image was checked to agree), and for the broken files the error
  class expected.

The contract (README, "Decoding images"): UNCHANGED gives the image's own channels (1 gray, 2 gray+alpha, 3 RGB, 4
RGBA) with palettes expanded (RGBA when a tRNS chunk gives any transparency), a tRNS colour key of a gray/RGB PNG
not a channel (TensorFlow leaves it out too), bit depths below 8 scaled to 0-255, 16-bit samples shifted right by 8,
CMYK converted to RGB; GIF is RGB
(as TensorFlow and torchvision give it), its transparent index an alpha channel in the *_ALPHA modes. GRAY of a colour
image is ITU-R 601-2 luma, (19595 R + 38470 G + 7471 B + 32768) >> 16 (Pillow's "L"), except for JPEG, where GRAY is
the decoder's own luminance channel (libjpeg's, as TensorFlow's decode_jpeg(channels=1) and torchvision give it).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "src")
EXPECTED = os.path.join(HERE, "expected")
MODES = ("UNCHANGED", "GRAY", "GRAY_ALPHA", "RGB", "RGB_ALPHA")
H, W = 11, 13  # odd sizes catch stride and chroma-upsampling edge cases


# ------------------------------------------------------------------------------------------------ pixels


def gradient(h: int, w: int, channels: int, seed: int, depth: int = 8) -> np.ndarray:
    """[H, W, C] samples in [0, 2**depth): a gradient with noise (so JPEG has work to do), every channel different."""
    rng = np.random.default_rng(seed)
    top = 2**depth - 1
    y, x = np.mgrid[0:h, 0:w]
    planes = []
    for c in range(channels):
        base = (x * (c + 1) * top // max(w - 1, 1) + y * (channels - c) * top // max(h - 1, 1)) // 2
        planes.append(base + rng.integers(-top // 10, top // 10 + 1, (h, w)))
    return np.clip(np.stack(planes, axis=-1), 0, top).astype(np.uint16 if depth > 8 else np.uint8)


# ------------------------------------------------------------------------------------------------ PNG bytes


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def _pack_row(samples: np.ndarray, depth: int) -> bytes:
    """One row of samples (flat, in pixel order) as PNG stores them: MSB first below 8 bits, big-endian at 16."""
    if depth == 16:
        return samples.astype(">u2").tobytes()
    if depth == 8:
        return samples.astype(np.uint8).tobytes()
    per_byte = 8 // depth
    padded = np.zeros(-(-len(samples) // per_byte) * per_byte, np.uint8)
    padded[: len(samples)] = samples
    packed = np.zeros(len(padded) // per_byte, np.uint8)
    for k in range(per_byte):
        packed |= (padded[k::per_byte] << (8 - depth * (k + 1))).astype(np.uint8)
    return packed.tobytes()


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def _filter(row: bytes, prior: bytes, kind: int, bpp: int) -> bytes:
    """PNG filter `kind` (0 None, 1 Sub, 2 Up, 3 Average, 4 Paeth) applied to one row."""
    out = bytearray(len(row))
    for i, x in enumerate(row):
        a = row[i - bpp] if i >= bpp else 0
        b = prior[i] if prior else 0
        c = prior[i - bpp] if prior and i >= bpp else 0
        pred = (0, a, b, (a + b) // 2, _paeth(a, b, c))[kind]
        out[i] = (x - pred) & 0xFF
    return bytes(out)


def png_bytes(samples: np.ndarray, depth: int, color_type: int, palette: np.ndarray | None = None,
              trns: bytes | None = None, extra: tuple = ()) -> bytes:
    """A PNG holding exactly these samples ([H, W, C]), each row with another filter type."""
    h, w, c = samples.shape
    bpp = max(1, c * depth // 8)
    raw, prior = bytearray(), b""
    for y in range(h):
        row = _pack_row(samples[y].reshape(-1), depth)
        kind = y % 5
        raw += bytes([kind]) + _filter(row, prior, kind, bpp)
        prior = row
    out = b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0))
    if palette is not None:
        out += _chunk(b"PLTE", palette.astype(np.uint8).tobytes())
    if trns is not None:
        out += _chunk(b"tRNS", trns)
    for kind, body in extra:
        out += _chunk(kind, body)
    return out + _chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + _chunk(b"IEND", b"")


def scale_to_8(samples: np.ndarray, depth: int) -> np.ndarray:
    """The PNG spec's scaling to 8 bits: v * 255 / (2**depth - 1) below 8 bits; v >> 8 at 16 (the contract)."""
    if depth == 16:
        return (samples.astype(np.uint16) >> 8).astype(np.uint8)
    return (samples.astype(np.uint32) * 255 // (2**depth - 1)).astype(np.uint8)


def luma(rgb: np.ndarray) -> np.ndarray:
    """ITU-R 601-2 luma as Pillow's convert("L") computes it, on [..., 3] samples of any depth."""
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    return ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(rgb.dtype)


def all_modes(unchanged: np.ndarray, alpha_max: int = 255, gray: np.ndarray | None = None) -> dict:
    """Every mode from the UNCHANGED [H, W, C] pixels, by the contract's rules (`gray`: a decoder's own gray)."""
    c = unchanged.shape[-1]
    dtype = unchanged.dtype
    colour = unchanged[..., :3] if c >= 3 else np.repeat(unchanged[..., :1], 3, axis=-1)
    alpha = unchanged[..., -1:] if c in (2, 4) else np.full(unchanged.shape[:-1] + (1,), alpha_max, dtype)
    if gray is None:
        gray = unchanged[..., :1] if c <= 2 else luma(colour)[..., None]
    out = {"UNCHANGED": unchanged, "GRAY": gray, "GRAY_ALPHA": np.concatenate([gray, alpha], -1),
           "RGB": colour, "RGB_ALPHA": np.concatenate([colour, alpha], -1)}
    return {k: np.ascontiguousarray(np.moveaxis(v, -1, -3)) for k, v in out.items()}  # [.., C, H, W]


# ------------------------------------------------------------------------------------------------ sources


def pil_bytes(img: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **kwargs)
    return out.getvalue()


def exif_bytes(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def png_sources() -> dict:
    """name -> (bytes, expected UNCHANGED [H, W, C] as written, 16-bit samples or None, alpha key [H, W] or None)."""
    out = {}
    for depth in (1, 2, 4, 8, 16):
        g = gradient(H, W, 1, depth, depth)
        out[f"png_gray{depth}"] = (png_bytes(g, depth, 0), scale_to_8(g, depth), g if depth == 16 else None, None)
    for depth in (8, 16):
        rgb, ga, rgba = gradient(H, W, 3, 20 + depth, depth), gradient(H, W, 2, 30 + depth, depth), \
            gradient(H, W, 4, 40 + depth, depth)
        wide = depth == 16
        out[f"png_rgb{depth}"] = (png_bytes(rgb, depth, 2), scale_to_8(rgb, depth), rgb if wide else None, None)
        out[f"png_ga{depth}"] = (png_bytes(ga, depth, 4), scale_to_8(ga, depth), ga if wide else None, None)
        out[f"png_rgba{depth}"] = (png_bytes(rgba, depth, 6), scale_to_8(rgba, depth), rgba if wide else None, None)
    # tRNS colour keys on gray / RGB: a transparency key, not a channel (TensorFlow leaves it out too)
    g = gradient(H, W, 1, 50)
    key = int(g[3, 4, 0])
    out["png_gray8_trns"] = (png_bytes(g, 8, 0, trns=struct.pack(">H", key)), g, None, g[..., 0] == key)
    g16 = gradient(H, W, 1, 51, 16)
    key16 = int(g16[2, 2, 0])
    out["png_gray16_trns"] = (png_bytes(g16, 16, 0, trns=struct.pack(">H", key16)), scale_to_8(g16, 16), g16,
                              g16[..., 0] == key16)
    rgb = gradient(H, W, 3, 52)
    rgb[5:7, 2:9] = (10, 200, 30)
    out["png_rgb8_trns"] = (png_bytes(rgb, 8, 2, trns=struct.pack(">HHH", 10, 200, 30)), rgb, None,
                            np.all(rgb == (10, 200, 30), axis=-1))
    # palettes: indices into a palette, optionally with per-entry alpha (tRNS, possibly shorter than the palette)
    for depth in (1, 2, 4, 8):
        n = 2**depth
        palette = gradient(1, n, 3, 60 + depth)[0] if n > 1 else np.array([[9, 99, 199]], np.uint8)
        idx = gradient(H, W, 1, 70 + depth, depth)
        out[f"png_pal{depth}"] = (png_bytes(idx, depth, 3, palette), palette[idx[..., 0]], None, None)
        alphas = np.array([(37 * i + 11) % 256 for i in range(n)], np.uint8)
        short = max(1, n // 2)  # entries past the tRNS chunk are opaque
        alpha = np.concatenate([alphas[:short], np.full(n - short, 255, np.uint8)])
        out[f"png_pal{depth}_trns"] = (png_bytes(idx, depth, 3, palette, trns=alphas[:short].tobytes()),
                                       np.concatenate([palette[idx[..., 0]], alpha[idx[..., 0]][..., None]], -1),
                                       None, None)
    # what Pillow writes in practice: 16 colours as a 4-bit palette, bilevel images as 1-bit gray
    rgb = gradient(H, W, 3, 80)
    p = Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=16)
    data = pil_bytes(p, "PNG")
    assert data[24] == 4, "Pillow was expected to write a 4-bit palette"
    out["png_pillow_pal16"] = (data, np.array(p.convert("RGB")), None, None)
    bilevel = Image.fromarray(rgb[..., 0]).convert("1")
    out["png_pillow_bilevel"] = (pil_bytes(bilevel, "PNG"), np.array(bilevel.convert("L"))[..., None], None, None)
    return out


def jpeg_sources() -> dict:
    """name -> (bytes, orientation); expected pixels come from the decoders."""
    rgb = Image.fromarray(gradient(H + 6, W + 4, 3, 90))
    gray = Image.fromarray(gradient(H + 6, W + 4, 1, 91)[..., 0])
    cmyk = Image.fromarray(gradient(H + 6, W + 4, 4, 92), "CMYK")
    out = {
        "jpeg_rgb420": (pil_bytes(rgb, "JPEG", quality=90, subsampling=2), 1),
        "jpeg_rgb422": (pil_bytes(rgb, "JPEG", quality=90, subsampling=1), 1),
        "jpeg_rgb444": (pil_bytes(rgb, "JPEG", quality=90, subsampling=0), 1),
        "jpeg_odd420": (pil_bytes(Image.fromarray(gradient(9, 15, 3, 93)), "JPEG", quality=85, subsampling=2), 1),
        "jpeg_progressive": (pil_bytes(rgb, "JPEG", quality=90, progressive=True), 1),
        "jpeg_gray": (pil_bytes(gray, "JPEG", quality=90), 1),
        "jpeg_cmyk": (pil_bytes(cmyk, "JPEG", quality=95), 1),
    }
    for orientation in range(1, 9):
        out[f"jpeg_exif{orientation}"] = (pil_bytes(rgb, "JPEG", quality=90, exif=exif_bytes(orientation)),
                                          orientation)
    return out


def gif_sources() -> dict:
    rgb = gradient(H, W, 3, 100)
    p = Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=16)
    key = int(np.array(p)[4, 5])
    frames = [Image.fromarray(gradient(H, W, 3, 101 + i)).convert("P", palette=Image.ADAPTIVE, colors=8)
              for i in range(3)]
    animated = io.BytesIO()
    frames[0].save(animated, "GIF", save_all=True, append_images=frames[1:], duration=50, loop=0, disposal=1)
    return {"gif_static": pil_bytes(p, "GIF"), "gif_transparent": pil_bytes(p, "GIF", transparency=key),
            "gif_animated": animated.getvalue()}


def other_sources() -> dict:
    rgb = Image.fromarray(gradient(H, W, 3, 110))
    rgba = Image.fromarray(gradient(H, W, 4, 111), "RGBA")
    gray = Image.fromarray(gradient(H, W, 1, 112)[..., 0])
    gray16 = Image.fromarray(gradient(H, W, 1, 113, 16)[..., 0])
    webp_anim = io.BytesIO()
    rgb.save(webp_anim, "WEBP", save_all=True, append_images=[Image.fromarray(gradient(H, W, 3, 114))],
             lossless=True, duration=50)
    return {
        "webp_lossless_rgb.webp": pil_bytes(rgb, "WEBP", lossless=True),
        "webp_lossless_rgba.webp": pil_bytes(rgba, "WEBP", lossless=True),
        "webp_lossy.webp": pil_bytes(rgb, "WEBP", quality=80),
        "webp_animated.webp": webp_anim.getvalue(),
        "bmp_rgb24.bmp": pil_bytes(rgb, "BMP"),
        "bmp_rgb32.bmp": pil_bytes(rgba, "BMP"),
        "bmp_pal8.bmp": pil_bytes(rgb.convert("P", palette=Image.ADAPTIVE, colors=50), "BMP"),
        "bmp_1bit.bmp": pil_bytes(gray.convert("1"), "BMP"),
        "tiff_rgb.tiff": pil_bytes(rgb, "TIFF"),
        "tiff_rgba.tiff": pil_bytes(rgba, "TIFF", compression="tiff_deflate"),
        "tiff_cmyk.tiff": pil_bytes(rgb.convert("CMYK"), "TIFF"),
        "tiff_gray16.tiff": pil_bytes(gray16, "TIFF"),
        "ppm_rgb.ppm": pil_bytes(rgb, "PPM"),
        "pgm_gray.pgm": pil_bytes(gray, "PPM"),
        "pgm_gray16.pgm": pil_bytes(gray16, "PPM"),
    }


def broken_sources(good: dict) -> dict:
    """name -> (bytes, error kind): files every decoder must refuse with DecodeError."""
    png = bytearray(good["png_rgb8.png"])
    idat = png.find(b"IDAT")
    (length,) = struct.unpack(">I", png[idat - 4 : idat])
    flipped = bytearray(png)
    flipped[idat + 4 + length // 2] ^= 0x5A  # inside the zlib stream: the chunk CRC is now wrong
    fixed = bytearray(flipped)  # the same flip with the chunk CRC recomputed: only zlib / the filters can tell
    fixed[idat + 4 + length : idat + 8 + length] = struct.pack(">I", zlib.crc32(bytes(fixed[idat : idat + 4 + length])))
    jpeg = good["jpeg_rgb420.jpg"]
    sos = jpeg.find(b"\xff\xda")
    tensor = b"\x08\x04\x12\x0c\x12\x02\x08\x03\x12\x02\x08\x02\x12\x02\x08\x02\x22\x0c" + bytes(range(12))
    return {
        "bad_empty.bin": (b"", "empty"),
        "bad_garbage.bin": (b"this is not an image at all, just text\n" * 3, "unknown"),
        "bad_serialized_tensor.bin": (tensor, "tensor"),
        "bad_truncated.jpg": (jpeg[: len(jpeg) * 2 // 3], "corrupt"),
        "bad_jpeg_no_scan.jpg": (jpeg[:sos] + b"\xff\xd9", "corrupt"),
        "bad_truncated.png": (bytes(png[: len(png) * 2 // 3]), "corrupt"),
        "bad_idat_flip.png": (bytes(flipped), "corrupt"),
        "bad_idat_flip_crc_fixed.png": (bytes(fixed), "corrupt"),
        "bad_truncated.gif": (good["gif_static.gif"][: len(good["gif_static.gif"]) // 2], "corrupt"),
        "bad_truncated.webp": (good["webp_lossy.webp"][: len(good["webp_lossy.webp"]) // 2], "corrupt"),
    }


# ------------------------------------------------------------------------------------------------ answers


def pillow_unchanged(data: bytes) -> np.ndarray:
    """[H, W, C] uint8 by the contract, from Pillow (for formats whose answer Pillow defines)."""
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        mode = img.mode
        if mode == "P":
            img = img.convert("RGBA" if "transparency" in img.info else "RGB")
        elif mode in ("1", "CMYK", "YCbCr"):
            img = img.convert({"1": "L", "CMYK": "RGB", "YCbCr": "RGB"}[mode])
        elif mode in ("I;16", "I;16B", "I;16L", "I"):
            return (np.asarray(img).astype(np.int64) >> 8).astype(np.uint8)[..., None]
        array = np.asarray(img)
        if data[:8] == b"\x89PNG\r\n\x1a\n" and data[24:26] == b"\x10\x04":
            array = array[..., [0, 3]]  # Pillow opens 16-bit gray+alpha as RGBA of high bytes: L is R, A is A
    return array[..., None] if array.ndim == 2 else array


def pillow_frames(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        frames = []
        for k in range(img.n_frames):
            img.seek(k)
            frames.append(np.asarray(img.convert("RGBA" if "transparency" in img.info or img.mode == "RGBA"
                                                 else "RGB")))
    channels = max(f.shape[-1] for f in frames)
    frames = [f if f.shape[-1] == channels else np.concatenate([f, np.full(f.shape[:2] + (1,), 255, np.uint8)], -1)
              for f in frames]
    return np.stack(frames)


def jpeg_luminance(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        img.draft("L", img.size)
        return np.asarray(img.convert("L"))[..., None]


def exif_transposed(unchanged: np.ndarray, orientation: int) -> np.ndarray:
    from PIL import ImageOps

    img = Image.fromarray(unchanged)
    img.getexif()[0x0112] = orientation
    info = img.getexif()
    info[0x0112] = orientation
    img.info["exif"] = info.tobytes()
    return np.asarray(ImageOps.exif_transpose(img))


def tf_check(data: bytes, expected: np.ndarray, wide: np.ndarray | None = None) -> str:
    """What TensorFlow's tf.io.decode_image(channels=0) says about these bytes next to the expected answer."""
    try:
        import tensorflow as tf
    except ImportError:
        return "not checked (no TensorFlow)"
    try:
        got = tf.io.decode_image(data, channels=0, dtype=tf.uint16 if wide is not None else tf.uint8,
                                 expand_animations=False).numpy()
    except Exception as exc:  # noqa: BLE001 - reported in the manifest, whatever TF raises
        return f"TensorFlow refuses it: {type(exc).__name__}"
    want = wide if wide is not None else expected
    if got.shape != want.shape:
        return f"TensorFlow gives shape {list(got.shape)}, the contract {list(want.shape)}"
    diff = int(np.abs(got.astype(np.int64) - want.astype(np.int64)).max()) if got.size else 0
    return "equal" if diff == 0 else f"max abs difference {diff}"


def main() -> None:
    for folder in (SRC, EXPECTED):
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
    import PIL

    manifest: dict = {"pillow": PIL.__version__, "files": {}}
    good: dict = {}
    answers: dict = {}

    for name, (data, unchanged, wide, _key) in png_sources().items():
        file = name + ".png"
        good[file] = data
        arrays = all_modes(unchanged)
        if wide is not None:
            arrays["UNCHANGED_uint16"] = np.ascontiguousarray(np.moveaxis(wide.astype(np.uint16), -1, -3))
        pil = pillow_unchanged(data)
        assert np.array_equal(pil, unchanged), f"{file}: Pillow disagrees with the samples written"
        answers[file] = (arrays, "first principles (the samples written; Pillow agrees)",
                         tf_check(data, unchanged, wide))

    for name, (data, orientation) in jpeg_sources().items():
        file = name + ".jpg"
        good[file] = data
        unchanged = pillow_unchanged(data)
        gray = jpeg_luminance(data) if b"Adobe" not in data[:200] or unchanged.shape[-1] == 1 else None
        if name == "jpeg_cmyk":
            gray = None
        arrays = all_modes(unchanged, gray=gray)
        if orientation != 1:
            arrays["UNCHANGED_exif"] = np.ascontiguousarray(
                np.moveaxis(exif_transposed(unchanged, orientation), -1, -3))
        answers[file] = (arrays, "pillow (libjpeg-turbo)", tf_check(data, unchanged))

    for name, data in gif_sources().items():
        file = name + ".gif"
        good[file] = data
        frames = pillow_frames(data)
        first = frames[0]
        arrays = all_modes(first[..., :3])
        if first.shape[-1] == 4:  # the transparent index: alpha in the *_ALPHA modes, never in UNCHANGED
            alpha = np.ascontiguousarray(np.moveaxis(first[..., 3:], -1, -3))
            arrays["GRAY_ALPHA"] = np.concatenate([arrays["GRAY"], alpha], 0)
            arrays["RGB_ALPHA"] = np.concatenate([arrays["RGB"], alpha], 0)
        if len(frames) > 1:
            arrays["UNCHANGED_frames"] = np.ascontiguousarray(np.moveaxis(frames[..., :3], -1, -3))
        answers[file] = (arrays, "pillow", tf_check(data, first[..., :3]))

    for file, data in other_sources().items():
        good[file] = data
        frames_needed = "animated" in file
        unchanged = pillow_unchanged(data)
        arrays = all_modes(unchanged)
        if file == "pgm_gray16.pgm" or file == "tiff_gray16.tiff":
            with Image.open(io.BytesIO(data)) as img:
                arrays["UNCHANGED_uint16"] = np.asarray(img).astype(np.uint16)[None]
        if frames_needed:
            arrays["UNCHANGED_frames"] = np.ascontiguousarray(np.moveaxis(pillow_frames(data), -1, -3))
        answers[file] = (arrays, "pillow", tf_check(data, unchanged))

    for file, data in good.items():
        with open(os.path.join(SRC, file), "wb") as f:
            f.write(data)
    for file, (arrays, source, tf_note) in answers.items():
        np.savez_compressed(os.path.join(EXPECTED, file + ".npz"), **arrays)
        manifest["files"][file] = {"bytes": len(good[file]), "sha256": hashlib.sha256(good[file]).hexdigest(),
                                   "keys": sorted(arrays), "shape": list(arrays["UNCHANGED"].shape),
                                   "defined_by": source, "tensorflow": tf_note}
    for file, (data, kind) in broken_sources(good).items():
        with open(os.path.join(SRC, file), "wb") as f:
            f.write(data)
        manifest["files"][file] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "error": kind}
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(manifest['files'])} files in {SRC}", file=sys.stderr)


if __name__ == "__main__":
    main()
