"""decode_image: encoded image bytes to a tensor by one contract, whichever decoder runs.

The contract (README, "Images"): uint8 [C, H, W]; C by `mode` with torchvision's ImageReadMode meanings; UNCHANGED
gives the image's own channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) with palettes expanded (RGBA when the palette
has transparency; a tRNS colour key of a gray or RGB PNG is not a channel), bit depths below 8 scaled to 0-255,
16-bit samples shifted right by 8 (or kept with dtype=torch.uint16, or scaled to [0, 1] with torch.float32), CMYK as
RGB; GIF as RGB (its transparent index is alpha in the *_ALPHA modes only); the first frame of an animation unless
all_frames=True; no EXIF rotation unless asked.

Decoders, per format (backend="auto"): torchvision for 8-bit gray/colour JPEG when it is installed, else TorchCodec
(for JPEGs without an EXIF rotation, which it would apply); TorchCodec for PNG and still WebP; Pillow for everything
else and whenever the others are absent. torchvision never
gets a PNG (its decoder crashes the process on corrupt PNG data) nor a CMYK JPEG (it returns inverted CMYK).

On a GPU (device="cuda"), "auto" uses only a decoder that meets the contract there (nvImageCodec: within 1 level of
the CPU result on baseline JPEGs; progressive ones, up to 3 levels off there, and the arithmetic-coded and
RGB-stored ones, not measured, are decoded on the CPU); torchvision's
GPU decoder (nvJPEG's own chroma upsampling: up to 96 levels off) and TorchCodec's (not measured yet) run only when
named. Every JPEG of a GPU batch has its structure checked on the CPU first (_jpeg.jpeg_problem): one that fails
is decoded on the CPU instead, which gives the contract's pixels or its DecodeError (the same as decode_image on the
CPU: a GPU decoder never sees bytes the CPU path may reject); an image the decoder reports as failed is a
DecodeError.
"""

from __future__ import annotations

import enum
import os
import warnings
from collections.abc import Sequence
from typing import Any, Optional, Union, cast, overload

import numpy as np
import torch

from tfr_torch.errors import DecodeError
from tfr_torch.format.location import ExampleName, location_of
from tfr_torch.images import _accel, _nvimgcodec, _pixels
from tfr_torch.images._formats import Header, looks_like_tensor_proto, sniff, sniff_many
from tfr_torch.images._jpeg import jpeg_problems
from tfr_torch.images._pillow import PillowError, UnsupportedPixels, decode_pillow, exif_orientation, padded_base

__all__ = ["decode_image", "image_backends", "choose_backend", "BACKENDS"]

BACKENDS = ("auto", "pillow", "torchcodec", "torchvision", "nvimgcodec")
"""The names `decode_image(backend=...)` and `TFR_TORCH_IMAGE_BACKEND` accept ("auto" picks per file)."""
ENV_BACKEND = "TFR_TORCH_IMAGE_BACKEND"
_GPU_ORDER = ("nvimgcodec", "torchcodec", "torchvision")  # the decoders that take GPU batches
# what backend="auto" may pick on a GPU: decoders measured within 2 levels of the CPU contract on the test corpus
# (tests/test_gpu_real.py; H100, 2026-11: nvImageCodec 0.6 and 0.9 within 1 level on baseline JPEGs but up to 3 on
# progressive ones, which "auto" therefore decodes on the CPU; torchvision up to 96 levels, 2-10% of pixels by > 8)
_GPU_AUTO = ("nvimgcodec",)
GPU_DIFFERENCE = {"nvimgcodec": "within 1 level of the CPU contract (baseline JPEGs; up to 3 on progressive ones, "
                                "which backend='auto' decodes on the CPU)",
                  "torchvision": "up to 96 levels off (2-10% of pixels by more than 8): nvJPEG's chroma upsampling",
                  "torchcodec": "not measured yet"}
# backend="auto" on the CPU, by format (benchmarks/image_decode.py): torchvision's decode_jpeg was the fastest exact
# JPEG decoder measured, TorchCodec the fastest for PNG and WebP; Pillow takes whatever neither may decode.
_CPU_ORDER = {"jpeg": ("torchvision", "torchcodec"), "png": ("torchcodec",), "webp": ("torchcodec",)}
Mode = Union[str, enum.Enum]
Data = Union[bytes, bytearray, memoryview, torch.Tensor]


def image_backends() -> dict[str, Optional[str]]:
    """The image decoders this process can use: {name: version, or None when it is not installed}.

    >>> tfr_torch.image_backends()  # doctest: +SKIP
    {'pillow': '13.0.0', 'torchcodec': None, 'torchvision': '0.29.1', 'nvimgcodec': None}
    """
    return _accel.versions()


_FINDERS = {"torchcodec": "torchcodec_decoders", "torchvision": "torchvision_io", "nvimgcodec": "nvimgcodec"}


def _available(name: str) -> bool:
    if name == "nvimgcodec":
        return _nvimgcodec.api() is not None
    return name == "pillow" or (name in _FINDERS and getattr(_accel, _FINDERS[name])() is not None)


def _plain_jpeg(header: Header) -> bool:
    return header.format == "jpeg" and header.components in (1, 3) and header.precision == 8


def _can(name: str, header: Header, all_frames: bool) -> bool:
    """Whether decoder `name` decodes this kind of file exactly as the contract says (on the CPU)."""
    if name == "pillow":
        return True
    if name == "torchvision":
        return _plain_jpeg(header)
    if name == "torchcodec":  # its decode_jpeg always applies the EXIF orientation: those JPEGs go elsewhere
        if header.animated:
            return False
        return (_plain_jpeg(header) and header.orientation == 1) or header.format in ("png", "webp")
    return False  # nvimgcodec: GPU batches only


def _resolve(backend: Optional[str]) -> str:
    name = os.environ.get(ENV_BACKEND, "auto") if backend is None else backend
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    if name == "nvimgcodec" and _accel.nvimgcodec() is not None and not _available(name):
        try:
            _nvimgcodec.detect(_accel.nvimgcodec())
        except _nvimgcodec.NvUnusable as exc:
            raise ValueError(f"image backend 'nvimgcodec' cannot decode: {exc}") from None
    if name != "auto" and not _available(name):
        raise ValueError(f"image backend {name!r} is not installed (installed: "
                         f"{', '.join(k for k, v in image_backends().items() if v)})")
    return name


def choose_backend(data: Data, backend: Optional[str] = None, device: Union[str, torch.device] = "cpu",
                   all_frames: bool = False) -> str:
    """The decoder decode_image would use for these bytes: "pillow", "torchcodec", "torchvision" or "nvimgcodec"."""
    return _choose(sniff(_as_bytes(data)), _resolve(backend), torch.device(device), all_frames)


def _over_pillow_limit(header: Header) -> bool:
    """An image whose header claims more pixels than Pillow's MAX_IMAGE_PIXELS. Every backend sends it to Pillow, so
    Pillow's decompression-bomb check holds whatever decodes the rest (a DecompressionBombWarning above the limit, a
    DecodeError above twice it): torchvision, TorchCodec and the GPU decoders would allocate what the header claims."""
    if header.area <= 0:
        return False
    image = _pillow_image or _import_pillow_image()  # not an import statement per image: a GPU batch has 256
    limit = image.MAX_IMAGE_PIXELS
    return limit is not None and header.area > limit


_pillow_image: Any = None


def _import_pillow_image() -> Any:
    global _pillow_image
    from PIL import Image

    _pillow_image = Image
    return Image


def _gpu_decoder(header: Header, backend: str) -> Optional[str]:
    """The decoder of this image in a GPU batch, or None: it is decoded on the CPU, then moved."""
    if _over_pillow_limit(header):
        return None
    # "auto" sends the GPU what its decoders were measured on: sequential Huffman-coded YCbCr or gray JPEGs;
    # progressive (up to 3 levels off), arithmetic-coded and RGB-stored ones are decoded on the CPU
    if not _plain_jpeg(header) or (backend == "auto" and (header.frame not in (0xC0, 0xC1) or header.rgb)):
        return None
    for name in _GPU_AUTO if backend == "auto" else (backend,):
        if name in _GPU_ORDER and _available(name) and (name != "torchcodec" or header.orientation == 1):
            return name
    return None


def _choose(header: Header, backend: str, device: torch.device, all_frames: bool) -> str:
    if device.type == "cuda":
        gpu = _gpu_decoder(header, backend)
        if gpu is not None:
            return gpu
    if _over_pillow_limit(header):
        return "pillow"
    order: tuple[str, ...] = _CPU_ORDER.get(header.format, ()) if backend == "auto" else (backend,)
    for name in order:
        if name not in ("pillow", "nvimgcodec") and _available(name) and _can(name, header, all_frames):
            return name
    return "pillow"


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, torch.Tensor) and data.dtype == torch.uint8 and data.ndim <= 1:
        return data.cpu().numpy().tobytes()
    if isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim <= 1:
        return data.tobytes()
    what = f"a {data.dtype} tensor of shape {tuple(data.shape)}" if isinstance(data, (torch.Tensor, np.ndarray)) \
        else type(data).__name__
    raise TypeError(f"decode_image expects encoded image bytes (bytes, bytearray, memoryview or a 1-D uint8 tensor), "
                    f"or a list of them, got {what}")


def _label(name: Optional[ExampleName], data: bytes) -> str:
    """How a message names an image: by its name, or (a RecordLocation, which the error carries) by its size."""
    if name and location_of(name)[0] is None:
        return f"image {name} ({len(data)} bytes)"
    return f"image ({len(data)} bytes)"


def _unreadable(data: bytes, name: Optional[ExampleName], header: Header, reason: str,
                unsupported: bool = False) -> DecodeError:
    path, offset = location_of(name)  # a RecordLocation name: the error says the record's file and offset
    label = _label(name, data)
    if not data:
        message = f"cannot decode {label}: it is empty"
    elif header.format == "unknown" and looks_like_tensor_proto(data):
        message = (f"cannot decode {label}: it is a serialize_tensor payload (image/format \"raw\"), not an encoded "
                   "image; read it with tfr_torch.parse_tensor(data, torch.uint8)")
    elif header.format == "unknown":
        message = f"cannot decode {label}: not a known image format (it starts with {data[:8]!r})"
    elif unsupported:
        message = f"cannot decode {label}: a {header.format.upper()} of pixels that are not supported: {reason}"
    else:
        message = f"cannot decode {label}: corrupt or truncated {header.format.upper()}: {reason}"
    return DecodeError(message, path, offset)


def _finish(pixels: torch.Tensor, depth: int, mode: str, dtype: torch.dtype, orientation: int,
            contiguous: bool = True) -> torch.Tensor:
    """The contract's last steps: 16 -> 8 bits (for uint8 output) before the mode, orientation, then dtype.
    `contiguous=False` (the image transforms) leaves a [C, H, W] view of [H, W, C] memory as it is: resizing reads
    it as channels_last without the copy."""
    if dtype == torch.uint8 and depth == 16:
        pixels, depth = (pixels >> 8).to(torch.uint8), 8
    pixels = _pixels.to_mode(pixels, mode, 255 if depth == 8 else 65535)
    pixels = _pixels.orient(pixels, orientation)
    pixels = _pixels.to_dtype(pixels, depth, dtype)
    return _contiguous(pixels) if contiguous else pixels


def _contiguous(pixels: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor. torchvision and TorchCodec hand back [C, H, W] views of [H, W, C] memory; on the CPU
    numpy's single-threaded copy makes them contiguous (torch's parallel copy of a small strided tensor costs
    tens of milliseconds on a busy machine)."""
    if pixels.is_contiguous():
        return pixels
    if pixels.device.type == "cpu":
        return torch.from_numpy(np.ascontiguousarray(pixels.numpy()))
    return pixels.contiguous()


def _decode_one(data: bytes, mode: str, dtype: torch.dtype, backend: str, all_frames: bool, exif: bool,
                name: Optional[ExampleName], contiguous: bool = True, header: Optional[Header] = None
                ) -> torch.Tensor:
    """One image by the contract; `header`: sniff(data) when the caller has it already."""
    header = sniff(data) if header is None else header
    if not data:
        raise _unreadable(data, name, header, "")
    gray = mode in ("GRAY", "GRAY_ALPHA") and _plain_jpeg(header)
    chosen = _choose(header, backend, torch.device("cpu"), all_frames)
    try:
        if chosen == "pillow":
            array, depth = decode_pillow(data, header, gray=gray, wide=dtype != torch.uint8, all_frames=all_frames)
            if contiguous:
                planar = np.ascontiguousarray(np.moveaxis(array, -1, -3))
                pixels = torch.from_numpy(planar if planar.flags.writeable else planar.copy())
            else:  # read only by the transforms: Pillow's own buffer, as a [C, H, W] view
                padded = padded_base(array)  # RGB in 4 bytes a pixel: a tensor over all 4, so a resize may read them
                tensor = _readonly_tensor(array) if padded is None else _readonly_tensor(padded)[..., :3]
                pixels = tensor.movedim(-1, -3)
        else:
            pixels, depth = _accel.decode_cpu(chosen, header.format, data, gray)
            if all_frames and pixels.ndim == 3:
                pixels = pixels[None]
            elif not all_frames and pixels.ndim == 4:
                pixels = pixels[0]
    except (PillowError, _accel.AccelError) as exc:
        raise _unreadable(data, name, header, str(exc), isinstance(exc, UnsupportedPixels)) from None
    if header.format == "gif" and mode == "UNCHANGED" and pixels.shape[-3] == 4:
        pixels = pixels[..., :3, :, :]  # GIF is RGB (as TensorFlow and torchvision give it); alpha only when asked
    orientation = 1
    if exif:
        orientation = header.orientation if header.format == "jpeg" else exif_orientation(data)
    return _finish(pixels, depth, mode, dtype, orientation, contiguous)


def _readonly_tensor(array: np.ndarray) -> torch.Tensor:
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():  # torch warns that it cannot protect a read-only array; nothing writes to it
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


def _decode_gpu_batch(items: list[bytes], names: list[Optional[str]], mode: str, dtype: torch.dtype, backend: str,
                      exif: bool, device: torch.device) -> list[torch.Tensor]:
    """Plain JPEGs in one GPU batch per decoder and colour kind; everything else on the CPU, then moved."""
    return [pixels for pixels, _ in decode_views(items, names, mode, dtype, backend, exif, device, contiguous=True)]


Region = tuple[int, int, int, int]  # top, left, bottom, right


def decode_views(items: Sequence[bytes], names: Sequence[Optional[ExampleName]], mode: str, dtype: torch.dtype,
                 backend: str, exif: bool, device: torch.device, regions: Optional[Sequence[Optional[Region]]] = None,
                 stream: Optional[int] = None, contiguous: bool = False, headers: Optional[Sequence[Header]] = None
                 ) -> list[tuple[torch.Tensor, tuple[int, int]]]:
    """(pixels [C, H, W], origin) per item on `device`, by the contract; `origin` (top, left) is where the pixels sit
    in the whole image: (0, 0) unless the decoder decoded only the item's region. With `contiguous=False` the pixels
    may be [C, H, W] views of [H, W, C] memory (for the image transforms). On a GPU, every JPEG of the batch has its
    structure checked before any of them is decoded; a bad one raises DecodeError naming it (a RecordLocation
    name sets the error's path and offset). `headers`: the items' sniff() results, when the caller has them."""
    headers = sniff_many(items) if headers is None else headers
    out: list[Optional[tuple[torch.Tensor, tuple[int, int]]]] = [None] * len(items)
    groups: dict[tuple[str, bool], list[int]] = {}
    wanted: list[tuple[int, str]] = []  # (item, its GPU decoder)
    chosen_for: dict[tuple[Any, ...], Optional[str]] = {}  # the choice by the header fields it depends on
    for k, header in enumerate(headers if device.type == "cuda" else ()):
        if _over_pillow_limit(header):
            continue
        kind = (header.format, header.components, header.precision, header.frame, header.rgb, header.orientation == 1)
        if kind not in chosen_for:
            chosen_for[kind] = _gpu_decoder(header, backend)
        chosen = chosen_for[kind]
        if chosen is not None:
            wanted.append((k, chosen))
    problems = jpeg_problems([items[k] for k, _ in wanted]) if wanted else []  # the whole batch at once
    for (k, chosen), problem in zip(wanted, problems):
        if problem is not None:  # the CPU decides it: the contract's pixels, or its DecodeError
            continue
        gray = mode in ("GRAY", "GRAY_ALPHA") or (mode == "UNCHANGED" and headers[k].components == 1)
        groups.setdefault((chosen, gray), []).append(k)
    on_gpu = {k for indices in groups.values() for k in indices}
    for k, data in enumerate(items):
        if k not in on_gpu:
            pixels = _decode_one(data, mode, dtype, backend, False, exif, names[k], contiguous)
            out[k] = (pixels.to(device) if device.type != "cpu" else pixels, (0, 0))
    for (chosen, gray), indices in groups.items():
        boxes = None if regions is None or exif else [regions[k] for k in indices]
        decoded: list[Optional[torch.Tensor]]
        try:
            decoded = _accel.decode_jpegs_gpu(chosen, [items[k] for k in indices], gray, device, boxes, stream)
        except _accel.AccelError:
            decoded = []
            for j, k in enumerate(indices):  # find the bad one, so the error names it
                try:
                    decoded.extend(_accel.decode_jpegs_gpu(chosen, [items[k]], gray, device,
                                                           None if boxes is None else [boxes[j]], stream))
                except _accel.AccelError as exc:
                    raise _unreadable(items[k], names[k], headers[k], str(exc)) from None
        for j, (k, result) in enumerate(zip(indices, decoded)):
            if result is None:
                raise _unreadable(items[k], names[k], headers[k], f"the GPU decoder ({chosen}) could not decode it")
            pixels, origin = result, (0, 0)
            if boxes is not None and boxes[j] is not None:
                top, left, bottom, right = boxes[j]  # type: ignore[misc]  # checked just above
                if tuple(pixels.shape[-2:]) == (bottom - top, right - left):
                    origin = (top, left)  # the decoder gave the region only
            out[k] = (_finish(pixels, 8, mode, dtype, headers[k].orientation if exif else 1, contiguous), origin)
    return out  # type: ignore[return-value]  # every slot was filled above


@overload
def decode_image(data: Data, mode: Mode = ..., *, device: Union[str, torch.device] = ..., dtype: torch.dtype = ...,
                 backend: Optional[str] = ..., all_frames: bool = ..., apply_exif_orientation: bool = ...,
                 name: Optional[str] = ...) -> torch.Tensor: ...


@overload
def decode_image(data: Sequence[Data], mode: Mode = ..., *, device: Union[str, torch.device] = ...,
                 dtype: torch.dtype = ..., backend: Optional[str] = ..., all_frames: bool = ...,
                 apply_exif_orientation: bool = ..., name: Union[str, Sequence[Optional[str]], None] = ...
                 ) -> list[torch.Tensor]: ...


def decode_image(data: Union[Data, Sequence[Data]], mode: Mode = "UNCHANGED", *,
                 device: Union[str, torch.device] = "cpu", dtype: torch.dtype = torch.uint8,
                 backend: Optional[str] = None, all_frames: bool = False, apply_exif_orientation: bool = False,
                 name: Union[str, Sequence[Optional[str]], None] = None) -> Union[torch.Tensor, list[torch.Tensor]]:
    """Decode an encoded image (JPEG, PNG, GIF, WebP, BMP, TIFF, PPM/PGM, ...) into a tensor [C, H, W].

    `mode` has torchvision's ImageReadMode meanings ("UNCHANGED", "GRAY", "GRAY_ALPHA", "RGB", "RGB_ALPHA"; the
    strings or torchvision's enum), so a folder mixing gray, RGBA and RGB files decodes to one shape with "RGB".
    `dtype`: torch.uint8 (16-bit samples shifted right by 8), torch.uint16 (full 16-bit samples; 8-bit ones shifted
    left by 8) or torch.float32 (in [0, 1]). `all_frames=True` gives every frame of an animation, [N, C, H, W].
    `apply_exif_orientation=True` rotates/flips as the EXIF orientation tag says. `backend`: "auto" (default, or
    the TFR_TORCH_IMAGE_BACKEND environment variable), "pillow", "torchcodec", "torchvision"; a backend is used
    only for the formats it decodes exactly as the contract says, Pillow for the rest (see image_backends()).

    A list of images gives a list of tensors; with `device="cuda"` its JPEGs are decoded in one batch on the GPU
    by nvImageCodec (any release from 0.5 on) when it is installed, by TorchCodec or torchvision only when named
    (their GPU decoders do not meet the contract: see GPU_DIFFERENCE), each JPEG's structure checked on the CPU
    first; the rest is decoded on the CPU, then moved. A corrupt, truncated or empty image raises DecodeError
    naming it (`name`: e.g. the record's "path:offset" or key; a list of names for a list).

    >>> image = decode_image(record["image/encoded"], "RGB")  # doctest: +SKIP
    """
    mode_name = _pixels.normalize_mode(mode)
    if dtype not in _pixels.DTYPES:
        raise ValueError(f"dtype must be torch.uint8, torch.uint16 or torch.float32, got {dtype!r}")
    chosen = _resolve(backend)
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():  # else a decoder's CUDA error would read as bad data
        raise ValueError(f"device={str(device)!r} but torch.cuda.is_available() is False (torch {torch.__version__})")
    if isinstance(data, (list, tuple)):
        if isinstance(name, (list, tuple)):
            if len(name) != len(data):
                raise ValueError(f"name has {len(name)} entries for {len(data)} images")
            names = list(name)
        else:
            names = [name] * len(data)
        items = [_as_bytes(d) for d in data]
        if device.type == "cuda" and not all_frames:
            return _decode_gpu_batch(items, names, mode_name, dtype, chosen, apply_exif_orientation, device)
        out = [_decode_one(d, mode_name, dtype, chosen, all_frames, apply_exif_orientation, n)
               for d, n in zip(items, names)]
        return [t.to(device) for t in out] if device.type != "cpu" else out
    if isinstance(name, (list, tuple)):
        raise TypeError("name must be a string for one image (a list of names goes with a list of images)")
    one_name = cast(Optional[str], name)  # one image's name (lists and tuples were refused just above)
    raw = _as_bytes(data)
    if device.type == "cuda" and not all_frames:
        return _decode_gpu_batch([raw], [one_name], mode_name, dtype, chosen, apply_exif_orientation, device)[0]
    tensor = _decode_one(raw, mode_name, dtype, chosen, all_frames, apply_exif_orientation, one_name)
    return tensor.to(device) if device.type != "cpu" else tensor
