"""nvImageCodec, whichever release from 0.5 on is installed: what it offers is looked up, never assumed.

Releases differ in names and shapes: the RGB colour spec is `ColorSpec.RGB` up to 0.8 and `ColorSpec.SRGB` in 0.9;
`Decoder(...)` takes `backends=` and `options=` in some releases and not others, and a backend kind that the
machine lacks fails at construction ("Could not create decoder. Code: 7"); `decode` takes `cuda_stream=` or not;
an image it cannot decode is a `None` in the result list (or an exception for the whole batch); images may come back
in host memory when a CPU backend decoded them. `api()` finds all of that once per process, and `decode_batch`
hands back [C, H, W] uint8 tensors on the device, or None for each image the decoder refused.

Decoders: the hardware JPEG engines first (`BackendKind.HW_GPU_ONLY`: no SM time taken from training), where one
can be created; every image they refuse (progressive JPEGs, for one) goes to a general decoder. Both ask for
libjpeg-turbo's chroma upsampling (`:fancy_upsampling=1`, ignored where unknown) so that pixels meet the CPU contract.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

__all__ = ["NvApi", "api", "describe", "decode_batch", "NvUnusable"]

OPTIONS = ":fancy_upsampling=1"


class NvUnusable(Exception):
    """The installed nvImageCodec lacks something decoding needs; the message says what it has instead."""


@dataclass(frozen=True, eq=False)  # hashed by identity: one per process, a key of the caches below
class NvApi:
    """What the installed nvImageCodec offers. `rgb` / `gray`: its ColorSpec members; `hw_kind`: the hardware
    backend kind (None when it has none); `region`: how it decodes a region of interest ("decode_source",
    "code_stream" or "" for none); `version`: its own version string."""

    module: Any
    version: str
    rgb: Any
    gray: Any
    hw_kind: Any
    region: str


def _member(enum: Any, *names: str) -> Any:
    for name in names:
        value = getattr(enum, name, None)
        if value is not None:
            return value
    return None


def _members(enum: Any) -> str:
    names = [n for n in dir(enum) if n.isupper() and not n.startswith("_")]
    return ", ".join(names) or "none"


def detect(nvi: Any) -> NvApi:
    """The NvApi of module `nvi` (nvidia.nvimgcodec or a stand-in of the same shape). Raises NvUnusable."""
    color = getattr(nvi, "ColorSpec", None)
    rgb = _member(color, "RGB", "SRGB")
    gray = _member(color, "GRAY", "Y")
    if rgb is None or gray is None:
        raise NvUnusable(f"nvImageCodec {_version(nvi)} has no RGB/SRGB and GRAY colour specs (ColorSpec has: "
                         f"{_members(color)})")
    kinds = getattr(nvi, "BackendKind", None)
    hw_kind = _member(kinds, "HW_GPU_ONLY") if hasattr(nvi, "Backend") else None
    if hasattr(nvi, "DecodeSource") and hasattr(nvi, "Region"):
        region = "decode_source"
    elif hasattr(nvi, "CodeStream") and hasattr(nvi, "Region"):
        region = "code_stream"
    else:
        region = ""
    return NvApi(nvi, _version(nvi), rgb, gray, hw_kind, region)


def _version(nvi: Any) -> str:
    return str(getattr(nvi, "__version__", "unknown"))


@functools.lru_cache(maxsize=1)
def api() -> Optional[NvApi]:
    """The installed nvImageCodec's NvApi, or None when it does not import or lacks what decoding needs."""
    from tfr_torch.images import _accel

    nvi = _accel.nvimgcodec()
    if nvi is None:
        return None
    try:
        return detect(nvi)
    except NvUnusable:
        return None


def _make(nvi: Any, device_id: int, backends: Optional[list[Any]]) -> Any:
    """Decoder(...) with the keywords this release accepts: with options, then without (TypeError: unknown)."""
    kwargs: dict[str, Any] = {"device_id": device_id}
    if backends is not None:
        kwargs["backends"] = backends
    try:
        return nvi.Decoder(options=OPTIONS, **kwargs)
    except TypeError:
        return nvi.Decoder(**kwargs)


@dataclass
class Decoders:
    """The hardware decoder (None where it cannot be created) and the general one, for one device."""

    hardware: Any
    general: Any
    hardware_error: str


ENV_HARDWARE = "TFR_TORCH_JPEG_HARDWARE"
"""Set to 0 to keep nvImageCodec off the GPU's hardware JPEG engines (e.g. when video decoding needs them)."""


def decoders(nv: NvApi, device_id: int) -> Decoders:
    return _decoders(nv, device_id, os.environ.get(ENV_HARDWARE, "1").strip() != "0")


@functools.lru_cache(maxsize=8)
def _decoders(nv: NvApi, device_id: int, use_hardware: bool = True) -> Decoders:
    hardware, why = None, "this nvImageCodec has no BackendKind.HW_GPU_ONLY"
    if not use_hardware:
        why = f"{ENV_HARDWARE}=0"
    elif nv.hw_kind is not None:
        try:
            hardware = _make(nv.module, device_id, [nv.module.Backend(nv.hw_kind)])
            why = ""
        except (RuntimeError, TypeError, ValueError) as exc:  # e.g. "Could not create decoder. Code: 7"
            why = f"BackendKind.HW_GPU_ONLY could not be created: {str(exc).strip() or type(exc).__name__}"
    return Decoders(hardware, _make(nv.module, device_id, None), why)


def describe(device_id: int = 0) -> dict[str, Any]:
    """What decoding on `device_id` uses: {"version", "colour": RGB's name, "hardware": bool, "why_not",
    "region"} (empty when nvImageCodec is absent)."""
    nv = api()
    if nv is None:
        return {}
    found = decoders(nv, device_id)
    return {"version": nv.version, "colour": getattr(nv.rgb, "name", str(nv.rgb)),
            "hardware": found.hardware is not None, "why_not": found.hardware_error, "region": nv.region}


@functools.lru_cache(maxsize=8)
def _params(nv: NvApi, gray: bool) -> Any:
    spec = nv.gray if gray else nv.rgb
    for kwargs in ({"color_spec": spec, "apply_exif_orientation": False, "allow_any_depth": False},
                   {"color_spec": spec, "apply_exif_orientation": False}, {"color_spec": spec}):
        try:
            return nv.module.DecodeParams(**kwargs)
        except TypeError:
            continue
    raise NvUnusable(f"nvImageCodec {nv.version}'s DecodeParams takes no color_spec")


def _source(nv: NvApi, data: bytes, region: Optional[tuple[int, int, int, int]]) -> Any:
    """The decoder's input for `data`, limited to `region` (top, left, bottom, right) where the release can."""
    if region is None or not nv.region:
        return data
    top, left, bottom, right = region
    box = nv.module.Region(top, left, bottom, right)
    if nv.region == "decode_source":
        return nv.module.DecodeSource(data, region=box)
    stream = nv.module.CodeStream(data)
    sub = getattr(stream, "get_sub_code_stream", None) or stream.getSubCodeStream  # 0.6: camelCase
    return sub(region=box)


def _run(nv: NvApi, decoder: Any, sources: list[Any], gray: bool, stream: Optional[int]) -> list[Any]:
    params = _params(nv, gray)
    if stream is not None:
        try:
            return list(decoder.decode(sources, params=params, cuda_stream=stream))
        except TypeError:
            pass
    return list(decoder.decode(sources, params=params))


def _tensor(image: Any, device: torch.device) -> torch.Tensor:
    """[C, H, W] uint8 on `device` from one decoded image (device memory through __cuda_array_interface__, host
    memory through the array interface)."""
    kind = str(getattr(image, "buffer_kind", ""))
    if "HOST" in kind.upper() and hasattr(image, "cuda"):
        image = image.cuda()
    hwc = torch.as_tensor(image)
    if hwc.device != device:
        hwc = hwc.to(device)
    hwc = hwc if hwc.ndim == 3 else hwc[:, :, None]
    return hwc.permute(2, 0, 1)  # a view of [H, W, C] memory, as torchvision's decoders give it


def decode_batch(nv: NvApi, items: Sequence[bytes], gray: bool, device: torch.device,
                 regions: Optional[Sequence[Optional[tuple[int, int, int, int]]]] = None,
                 stream: Optional[int] = None) -> list[Optional[torch.Tensor]]:
    """Decode `items` (checked JPEGs) on `device`: a tensor per item, None for one no decoder would decode. With
    `regions`, an item whose region was decoded gives that region only (its shape says so: the caller crops an
    image that came back whole). `stream`: the CUDA stream to decode on (its handle), by default torch's current
    stream of `device`, so that torch's work on the pixels is ordered after the decode (nvImageCodec's own default,
    0, is the legacy default stream, which torch's non-blocking streams do not wait for). "cuda" without an index
    is the current device. Exceptions of the decoder (RuntimeError, ValueError) propagate."""
    if device.index is None:  # torch's meaning of "cuda", not GPU 0
        device = torch.device(device.type, torch.cuda.current_device())
    if stream is None:
        stream = int(torch.cuda.current_stream(device).cuda_stream)
    found = decoders(nv, device.index if device.index is not None else 0)
    count = len(items)
    boxes = list(regions) if regions is not None else [None] * count
    out: list[Optional[torch.Tensor]] = [None] * count
    todo = list(range(count))
    for decoder in (found.hardware, found.general):
        if decoder is None or not todo:
            continue
        try:
            sources = [_source(nv, items[k], boxes[k]) for k in todo]
        except (RuntimeError, TypeError, ValueError, AttributeError):  # no region in this release: whole images
            sources = [items[k] for k in todo]
        try:
            results = _run(nv, decoder, sources, gray, stream)
        except (RuntimeError, ValueError):
            if decoder is found.general:
                raise
            continue  # the hardware decoder refused the batch: all of it goes to the general one
        if len(results) != len(todo):
            raise RuntimeError(f"nvImageCodec returned {len(results)} images for a batch of {len(todo)}")
        for k, image in zip(todo, results):
            if image is not None:
                out[k] = _tensor(image, device)
        todo = [k for k in todo if out[k] is None]
    return out
