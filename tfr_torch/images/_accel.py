"""Optional faster decoders: TorchCodec, torchvision.io and nvImageCodec, each used only where it is exact and safe.

Each is found once per process (an import that fails, or a torchvision built for another torch, means "absent").
They get only the files the contract lets them decode (see ROUTES in tfr_torch.images.decode); their errors become
PillowError-like AccelError messages that the caller turns into DecodeError naming the image.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import torch

__all__ = ["AccelError", "torchvision_io", "torchcodec_decoders", "nvimgcodec", "decode_cpu", "decode_jpegs_gpu",
           "versions"]


class AccelError(Exception):
    """A faster decoder refused the bytes; the message is its own."""


@functools.lru_cache(maxsize=1)
def torchvision_io() -> Any:
    """torchvision.io when torchvision imports and works beside this torch, else None."""
    try:
        import torchvision.io as tvio

        tvio.decode_jpeg  # noqa: B018
        tvio.ImageReadMode  # noqa: B018
    except (ImportError, RuntimeError, OSError, AttributeError):  # e.g. a torchvision built for another torch
        return None
    return tvio


def _quiet_torchvision() -> warnings.catch_warnings:
    """torchvision 0.29 warns on every decode that its image decoding moves to TorchCodec; tfr_torch chooses the
    decoder per call (and uses TorchCodec where it is installed and exact), so the notice says nothing to its users."""
    quiet = warnings.catch_warnings()
    quiet.__enter__()
    warnings.filterwarnings("ignore", message="The image decoding and encoding capabilities of TorchVision",
                            category=DeprecationWarning)
    return quiet


_QUIETED = threading.local()  # .on: this thread decodes inside quiet_torchvision()


@contextlib.contextmanager
def quiet_torchvision() -> Iterator[None]:
    """A batch's decodes under one filter of torchvision's notice instead of one filter each (entering and leaving
    warnings.catch_warnings costs ~25 us, a few percent of a 500 x 375 JPEG's decoding)."""
    if getattr(_QUIETED, "on", False):
        yield
        return
    quiet = _quiet_torchvision()
    _QUIETED.on = True
    try:
        yield
    finally:
        _QUIETED.on = False
        quiet.__exit__(None, None, None)


@functools.lru_cache(maxsize=1)
def torchcodec_decoders() -> Any:
    """torchcodec.decoders when TorchCodec (0.16 or later: image decoders) imports, else None."""
    try:
        import torchcodec.decoders as tcd

        tcd.decode_jpeg  # noqa: B018
        tcd.decode_png  # noqa: B018
    except (ImportError, RuntimeError, OSError, AttributeError):
        return None
    return tcd


@functools.lru_cache(maxsize=1)
def nvimgcodec() -> Any:
    """nvidia.nvimgcodec (nvImageCodec, GPU batches) when it imports, else None."""
    try:
        from nvidia import nvimgcodec as nvi

        nvi.Decoder  # noqa: B018
    except (ImportError, RuntimeError, OSError, AttributeError):
        return None
    return nvi


def versions() -> dict[str, str | None]:
    """{decoder: version or None when absent}."""
    from importlib.metadata import PackageNotFoundError, version

    def find(module: Any, *dists: str) -> str | None:
        if module is None:
            return None
        for dist in dists:
            try:
                return version(dist)
            except PackageNotFoundError:
                continue
        return getattr(module, "__version__", "unknown")

    import PIL

    return {"pillow": PIL.__version__, "torchcodec": find(torchcodec_decoders(), "torchcodec"),
            "torchvision": find(torchvision_io(), "torchvision"),
            "nvimgcodec": find(nvimgcodec(), "nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12",
                               "nvidia-nvimgcodec-cu11")}


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _widen(pixels: torch.Tensor) -> tuple[torch.Tensor, int]:
    if pixels.dtype == torch.uint16:
        return pixels.to(torch.int32), 16
    return pixels, 8


def decode_cpu(backend: str, fmt: str, data: bytes, gray: bool) -> tuple[torch.Tensor, int]:
    """(pixels [C, H, W], depth) of one image by `backend` ("torchcodec" or "torchvision") on the CPU.
    `gray`: a JPEG decoded to its luminance only."""
    mode = "GRAY" if gray else "UNCHANGED"
    try:
        if backend == "torchcodec":
            tcd = torchcodec_decoders()
            decode = {"jpeg": tcd.decode_jpeg, "png": tcd.decode_png, "webp": tcd.decode_webp}[fmt]
            return _widen(decode(_tensor(data), mode=mode, output_dtype="auto" if fmt == "png" else torch.uint8))
        tvio = torchvision_io()
        with quiet_torchvision():
            return tvio.decode_jpeg(_tensor(data), mode=getattr(tvio.ImageReadMode, mode)), 8
    except (RuntimeError, ValueError) as exc:
        raise AccelError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from None


def decode_jpegs_gpu(backend: str, items: Sequence[bytes], gray: bool, device: torch.device,
                     regions: Optional[Sequence[Optional[tuple[int, int, int, int]]]] = None,
                     stream: Optional[int] = None) -> list[Optional[torch.Tensor]]:
    """JPEGs (8-bit, gray or YCbCr, structure already checked) decoded in one batch on a CUDA device: [1 or 3, H,
    W] uint8 each (views of [H, W, C] memory where the decoder gives that), the luminance only when `gray`; None
    for an image the decoder refused. `regions` (top, left, bottom, right): nvImageCodec may decode only that
    region (the shape of the result says whether it did). Raises AccelError for the whole batch."""
    try:
        if backend == "nvimgcodec":
            from tfr_torch.images import _nvimgcodec

            nv = _nvimgcodec.api()
            if nv is None:
                raise AccelError("nvImageCodec is not usable here")
            return _nvimgcodec.decode_batch(nv, items, gray, device, regions, stream)
        tensors = [_tensor(d) for d in items]
        if backend == "torchcodec":
            return list(torchcodec_decoders().decode_jpeg(tensors, mode="GRAY" if gray else "RGB", device=device))
        tvio = torchvision_io()
        mode = tvio.ImageReadMode.GRAY if gray else tvio.ImageReadMode.RGB
        quiet = _quiet_torchvision()
        try:
            return list(tvio.decode_jpeg(tensors, mode=mode, device=device))
        finally:
            quiet.__exit__(None, None, None)
    except (RuntimeError, ValueError) as exc:
        raise AccelError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from None
