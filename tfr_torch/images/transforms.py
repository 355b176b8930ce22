"""The usual ImageNet-style transforms on a batch of decoded images, on the CPU or a GPU, with random choices that
are a pure function of (seed, epoch, rank, sample index): a resumed run sees the same crops.

Training: random-resized-crop (torchvision's algorithm: 10 tries of an area in `scale` and an aspect ratio in
`ratio`, else the centre crop), horizontal flip, resize to `size`; evaluation: resize the shorter side to `resize`,
centre crop `size`. Then float32 / bfloat16 normalized by `mean` / `std` (or uint8 kept), channels_last.

Each crop is one box (top, left, height, width, in pixels of the whole image) resized to `size` x `size`:
- on the CPU, per image with torch's bilinear antialiased resize: the crop of a decoder's [C, H, W] view of
  [H, W, C] memory (no copy of the whole image) copied to the channels_last rows that torch's uint8 resize reads
  without unpacking, each result converted and written in place in the batch (no batch-sized temporaries);
- on a GPU, for the whole batch at once: the images laid end to end in one buffer and a bilinear gather with each
  image's offset and box (a few kernels a batch instead of several per image; no antialiasing).

>>> t = ImageTransform(size=224, train=True, seed=0)
>>> boxes, flips = t.plan([(375, 500)], epoch=0, rank=0, indices=[0])
>>> boxes.shape, flips.shape
((1, 4), (1,))
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from tfr_torch import _native
from tfr_torch.data.transport import slab_tensor as _slab_tensor
from tfr_torch.images import _pixels

__all__ = ["ImageTransform", "IMAGENET_MEAN", "IMAGENET_STD", "uniforms"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
"""The per-channel mean of ImageNet's RGB pixels in [0, 1], `ImageTransform`'s default `mean`."""
IMAGENET_STD = (0.229, 0.224, 0.225)
"""The per-channel standard deviation of ImageNet's RGB pixels in [0, 1], `ImageTransform`'s default `std`."""
_TRIES = 10  # torchvision's RandomResizedCrop tries this many boxes before it takes the centre crop
_DRAWS = 2 * _TRIES + 3  # area and ratio per try, then top, left and the flip
_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def uniforms(seed: int, epoch: int, rank: int, indices: Sequence[int], draws: int) -> np.ndarray:
    """[len(indices), draws] floats in [0, 1), a pure function of (seed, epoch, rank, index, draw): the random
    choices of one sample do not depend on the batch it arrives in, the worker that read it, or a resume."""
    with np.errstate(over="ignore"):
        key = np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64)
        for part in (epoch, rank):
            key = _mix(key ^ np.uint64(part & 0xFFFFFFFFFFFFFFFF) + np.uint64(0x9E3779B97F4A7C15))
        keys = _mix(key ^ np.asarray(indices, dtype=np.uint64))[:, None]
        steps = np.arange(1, draws + 1, dtype=np.uint64)[None, :] * np.uint64(0x9E3779B97F4A7C15)
        bits = _mix(keys + steps)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class ImageTransform:
    """Training (`train=True`: random-resized-crop, flip) or evaluation (resize `resize`, centre crop) transforms
    to `size` x `size`; `mean`/`std` normalize in [0, 1] units (None: no normalization); `dtype` torch.float32,
    torch.bfloat16 or torch.uint8 (0-255, not normalized); `channels_last` memory; `mode` the decode mode."""

    size: int = 224
    train: bool = True
    resize: int = 256
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip: bool = True
    mean: Optional[tuple[float, ...]] = IMAGENET_MEAN
    std: Optional[tuple[float, ...]] = IMAGENET_STD
    dtype: torch.dtype = torch.float32
    channels_last: bool = True
    seed: int = 0
    mode: str = "RGB"

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"size must be a positive int (pixels), got {self.size!r}")
        if not isinstance(self.resize, int) or self.resize < self.size:
            raise ValueError(f"resize must be an int >= size ({self.size}), got {self.resize!r}")
        if not (0 < self.scale[0] <= self.scale[1] <= 1):
            raise ValueError(f"scale must be (low, high) with 0 < low <= high <= 1, got {self.scale!r}")
        if not (0 < self.ratio[0] <= self.ratio[1]):
            raise ValueError(f"ratio must be (low, high) with 0 < low <= high, got {self.ratio!r}")
        if self.dtype not in (torch.float32, torch.bfloat16, torch.uint8):
            raise ValueError(f"dtype must be torch.float32, torch.bfloat16 or torch.uint8, got {self.dtype!r}")
        if (self.mean is None) != (self.std is None):
            raise ValueError("mean and std go together: give both or neither")
        channels = _pixels._CHANNELS.get(_pixels.normalize_mode(self.mode))  # None: UNCHANGED
        if self.dtype != torch.uint8 and self.mean is not None and self.std is not None and (  # uint8: not used
                len(self.mean) != len(self.std) or len(self.mean) not in (1, channels or len(self.mean))):
            raise ValueError(f"mean and std need one value per channel of mode {self.mode!r} ({channels}) or one for "
                             f"all, got mean={self.mean!r}, std={self.std!r}")

    def plan(self, sizes: Sequence[tuple[int, int]], epoch: int, rank: int, indices: Sequence[int]
             ) -> tuple[np.ndarray, np.ndarray]:
        """(boxes [N, 4] float64 (top, left, height, width), flips [N] bool) for images of `sizes` (height,
        width), samples `indices` of `epoch` on `rank`."""
        hw = np.asarray(sizes, dtype=np.float64).reshape(-1, 2)
        n = len(hw)
        flips = np.zeros(n, dtype=bool)
        if not self.train:  # shorter side to `resize`, the centre `size` x `size`: a box of size / scale pixels
            side = self.size * hw.min(axis=1) / self.resize
            boxes = np.stack([(hw[:, 0] - side) / 2, (hw[:, 1] - side) / 2, side, side], axis=1)
            return boxes, flips
        u = uniforms(self.seed, epoch, rank, indices, _DRAWS)
        height, width = hw[:, 0], hw[:, 1]
        area = height * width
        lo, hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        chosen = np.zeros((n, 2))
        found = np.zeros(n, dtype=bool)
        for t in range(_TRIES):
            target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[:, 2 * t])
            aspect = np.exp(lo + (hi - lo) * u[:, 2 * t + 1])
            w = np.round(np.sqrt(target * aspect))
            h = np.round(np.sqrt(target / aspect))
            ok = ~found & (w > 0) & (w <= width) & (h > 0) & (h <= height)
            chosen[ok] = np.stack([h, w], axis=1)[ok]
            found |= ok
        in_ratio = width / height  # the fallback: the centre crop at the nearest allowed ratio
        fw = np.where(in_ratio < self.ratio[0], width, np.where(in_ratio > self.ratio[1],
                                                                 np.round(height * self.ratio[1]), width))
        fh = np.where(in_ratio < self.ratio[0], np.round(width / self.ratio[0]), height)
        h = np.where(found, chosen[:, 0], fh)
        w = np.where(found, chosen[:, 1], fw)
        top = np.where(found, np.floor(u[:, -3] * (height - h + 1)), (height - h) // 2)
        left = np.where(found, np.floor(u[:, -2] * (width - w + 1)), (width - w) // 2)
        if self.flip:
            flips = u[:, -1] < 0.5
        return np.stack([top, left, h, w], axis=1), flips

    def apply(self, images: Sequence[torch.Tensor], boxes: np.ndarray, flips: np.ndarray,
              method: str = "auto") -> torch.Tensor:
        """The batch [N, C, size, size] of `images` ([C, H, W] uint8 each, views of [H, W, C] memory welcome)
        cropped to `boxes`, flipped where `flips`, resized, converted. `method`: "auto" (CPU: "resize", GPU:
        "gather"), "resize" (per image, antialiased) or "gather" (the whole batch at once, bilinear)."""
        if not images:
            raise ValueError("apply needs at least one image")
        channels = [int(image.shape[0]) for image in images]
        odd = next((k for k, c in enumerate(channels) if c != channels[0]), None)
        if odd is not None:  # the gather would read one image's samples as another's channels
            raise ValueError(_mixed_channels(odd, channels[odd], channels[0]))
        device = images[0].device
        if method == "auto":
            method = "gather" if device.type == "cuda" else "resize"
        if method == "gather":
            return self._convert(_gather(images, boxes, flips, self.size))  # float32 [N, size, size, C] first
        if method == "resize":
            return _resize_each(zip(images, boxes, flips), len(images), self)
        raise ValueError(f"method must be 'auto', 'resize' or 'gather', got {method!r}")

    def _convert(self, nhwc: torch.Tensor) -> torch.Tensor:
        nchw = self._values(nhwc).permute(0, 3, 1, 2)  # channels_last memory already
        return nchw if self.channels_last else nchw.contiguous()

    def _factors(self, channels: int) -> Optional[tuple[bytes, bytes]]:
        """The float32 (sub, mul) per channel that _values' arithmetic uses, as bytes for the compiled kernel
        (normalize_pixels): (v - mean * 255) * (1 / (std * 255)), or (v - 0) * (1 / 255); None where they do not
        apply value by value (a mean or std of another length than `channels`: _values broadcasts those)."""
        normalized = self.mean is not None and self.std is not None
        return _factors_of(self.mean if normalized else None, self.std if normalized else None, channels)

    def _values(self, pixels: torch.Tensor) -> torch.Tensor:
        """`pixels` [..., C] (uint8, or float32 in 0-255) as `dtype`: rounded and clamped to uint8, or normalized by
        `mean` / `std` (else scaled to [0, 1]) as floats; same layout."""
        if self.dtype == torch.uint8:
            if pixels.dtype != torch.uint8:
                pixels = pixels.round_().clamp_(0, 255).to(torch.uint8)
            return pixels
        pixels = pixels.to(torch.float32) if pixels.dtype != torch.float32 else pixels
        if self.mean is not None and self.std is not None:
            mean, inv = _normalizer(tuple(self.mean), tuple(self.std), pixels.device)
            pixels = (pixels - mean) * inv
        else:
            pixels = pixels * (1.0 / 255.0)
        return pixels.to(self.dtype)


@functools.lru_cache(maxsize=64)
def _normalizer(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean * 255, 1 / (std * 255)) as float32 tensors on `device`, made once per device: made afresh for each
    batch, torch.tensor(..., device="cuda") was a blocking copy, which waits for the stream to drain (float32
    arithmetic on the CPU, bit for bit what the GPU's IEEE multiply and divide give)."""
    mean_t = torch.tensor(mean, dtype=torch.float32) * 255.0
    inv_t = 1.0 / (torch.tensor(std, dtype=torch.float32) * 255.0)
    if device.type == "cpu":
        return mean_t, inv_t
    return mean_t.to(device), inv_t.to(device)  # blocking, once: the constants are ready on every stream after it


@functools.lru_cache(maxsize=64)
def _factors_of(mean: Optional[tuple[float, ...]], std: Optional[tuple[float, ...]],
                channels: int) -> Optional[tuple[bytes, bytes]]:
    """ImageTransform._factors, made once (torch's arithmetic on the constants, so they are _values' own)."""
    if mean is not None and std is not None:
        if len(mean) != channels or len(std) != channels:
            return None
        sub = torch.tensor(mean) * 255.0
        mul = 1.0 / (torch.tensor(std) * 255.0)
    else:
        sub = torch.zeros(channels)
        mul = torch.full((channels,), 1.0 / 255.0)
    return sub.numpy().tobytes(), mul.numpy().tobytes()


def _resize_each(crops: Iterable[tuple[torch.Tensor, np.ndarray, bool]], count: int, transform: ImageTransform,
                 shared: bool = False) -> torch.Tensor:
    """The batch [count, C, size, size] of `transform`'s dtype and layout: each (image, box, flip) of `crops` cut to
    its box, resized (bilinear, antialiased), flipped, converted and written in place, one image at a time.

    `crops` may be a generator that decodes each image when asked: only one decoded image is alive at a time, its
    memory reused (and still in the cache) for the next; floats are made per image too (a batch of 256 converted at
    once went through three 154 MB float32 temporaries). A crop of [H, W, C] memory (a decoder's [C, H, W] view) is
    copied to channels_last rows first: torch's uint8 antialiased resize reads 3 or 4 channels_last-contiguous
    channels as they are and gives channels_last pixels, where any other layout costs it an unpacking copy of the
    crop and a [C, H, W] result (measured on a 328-pixel crop of 500 x 375 to 224: 7 us for the copy, 55 us less
    resizing, 58 us less writing into a channels_last batch). `shared`: the batch is made in shared memory (see
    _batch_buffer), so handing it to the main process copies nothing (a private batch of 256 x 3 x 224 x 224 uint8
    costs a 38 MB copy there, about 25 ms)."""
    with _one_thread():
        return _resize_into(crops, count, transform, shared)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch's intra-op threads off while one image at a time is worked on: each per-image copy or conversion (150K
    values) would be a parallel region of its own, and on a busy machine one of them waits for a descheduled thread
    (measured on the shared 2-core VM at load ~7: a 3.6 us copy averaged 2 ms with 2 threads). DataLoader workers
    run with one thread already; this covers decoding in the main process."""
    threads = torch.get_num_threads()
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _resize_into(crops: Iterable[tuple[torch.Tensor, np.ndarray, bool]], count: int, transform: ImageTransform,
                 shared: bool) -> torch.Tensor:
    size = transform.size
    out: Optional[torch.Tensor] = None
    for k, (image, box, flip) in enumerate(crops):
        top, left, h, w = map(int, np.rint(box).tolist())  # halves to even as round(), 20 us less than 4 round()s
        top, left = max(top, 0), max(left, 0)
        crop = image[:, top: top + max(h, 1), left: left + max(w, 1)].unsqueeze(0)
        if crop.dtype != torch.uint8:
            crop = crop.to(torch.uint8)
        channels = crop.shape[1]
        if out is not None and channels != out.shape[1]:
            raise ValueError(_mixed_channels(k, channels, out.shape[1]))
        if crop.stride(1) == 1:  # channels innermost: contiguous channels_last rows for the resize
            crop = _with_padding(crop).contiguous(memory_format=torch.channels_last)
        pixels = F.interpolate(crop, size=(size, size), mode="bilinear", antialias=True, align_corners=False)[0]
        pixels = pixels[:channels]
        if out is None:
            out = _batch_buffer((count, channels, size, size), transform.dtype, pixels.device,
                                transform.channels_last, shared)
        if _planes_into(out[k], pixels, flip) or _normalized_into(out[k], pixels, flip, transform):
            continue
        if flip:
            pixels = pixels.flip(-1)
        if transform.dtype != torch.uint8:
            pixels = transform._values(pixels.permute(1, 2, 0)).permute(2, 0, 1)
        out[k].copy_(pixels)
    if out is None:
        raise ValueError("_resize_each needs at least one image")
    return out


def _mixed_channels(k: int, channels: int, first: int) -> str:
    return (f"image {k} of the batch has {channels} channel(s) where the first has {first}: images of one batch "
            f"need one read mode (ImageTransform's mode, e.g. 'RGB', the default, rather than 'UNCHANGED')")


def _planes_into(target: torch.Tensor, pixels: torch.Tensor, flip: bool) -> bool:
    """Write uint8 `pixels` [C, H, W] with channels innermost (the resize's channels_last result, or 3 of its 4
    channels), flipped left to right when `flip`, into the contiguous uint8 [C, H, W] `target` by the compiled
    core's plane kernel (torch's strided copy of an image is 4x slower, flip another copy); False (nothing written)
    where the layouts are others or there is no compiled core: the caller copies."""
    core = _native.core
    if (core is None or target.dtype != torch.uint8 or pixels.dtype != torch.uint8 or target.device.type != "cpu"
            or pixels.device.type != "cpu" or not target.is_contiguous() or pixels.dim() != 3
            or target.shape != pixels.shape or pixels.stride(0) != 1):
        return False
    c, h, w = pixels.shape
    source = _pixel_bytes(pixels)
    if source is None:
        return False
    core.planes_from_pixels(target.numpy(), source, h, w, c, pixels.stride(2), pixels.stride(1), flip)
    return True


def _pixel_bytes(pixels: torch.Tensor) -> Optional[np.ndarray]:
    """The bytes uint8 `pixels` [C, H, W] (channels innermost: stride 1 between channels) lie in, from the first,
    as the pixel kernels take them (rows `stride(1)` apart, pixels `stride(2)`); None where the layout is not one
    they take (pixels closer than their channels, rows backwards) or runs past the storage."""
    c, h, w = pixels.shape
    row, step = pixels.stride(1), pixels.stride(2)
    if step < c or row < 0:
        return None
    extent = (h - 1) * row + (w - 1) * step + c if h and w else 0
    if pixels.storage_offset() + extent > pixels.untyped_storage().nbytes():
        return None
    source: np.ndarray = pixels.as_strided((extent,), (1,)).numpy()
    return source


def _normalized_into(target: torch.Tensor, pixels: torch.Tensor, flip: bool, transform: ImageTransform) -> bool:
    """Write uint8 `pixels` [C, H, W] with channels innermost, flipped when `flip`, normalized as
    `transform._values` makes them (float32 or bfloat16, the same values bit for bit: one float32 subtraction and
    multiplication per value, bfloat16 rounded to nearest even), into `target` [C, H, W] (planes, or channels_last
    pixels) by the compiled core's kernel: one pass where torch takes a conversion, two arithmetic passes, a
    rounding and a strided copy (~4 of a 224 x 224 image's 5 extra copies of the float path). False (nothing
    written) for other layouts or dtypes, or without the compiled core: the caller converts with torch."""
    core = _native.core
    if (core is None or target.dtype not in (torch.float32, torch.bfloat16) or transform.dtype != target.dtype
            or pixels.dtype != torch.uint8 or target.device.type != "cpu" or pixels.device.type != "cpu"
            or pixels.dim() != 3 or target.shape != pixels.shape or pixels.stride(0) != 1):
        return False
    c, h, w = pixels.shape
    if target.is_contiguous():
        interleaved = False
    elif target.permute(1, 2, 0).is_contiguous():
        interleaved = True
    else:
        return False
    factors = transform._factors(c)
    source = _pixel_bytes(pixels)
    if factors is None or source is None:
        return False
    memory = target if not interleaved else target.permute(1, 2, 0)
    out = memory.view(torch.int16).numpy() if target.dtype == torch.bfloat16 else memory.numpy()
    core.normalize_pixels(out, target.dtype == torch.bfloat16, interleaved, source, h, w, c, pixels.stride(2),
                          pixels.stride(1), flip, *factors)
    return True


def _with_padding(crop: torch.Tensor) -> torch.Tensor:
    """A [1, 3, h, w] crop of RGB pixels stored 4 bytes apart (Pillow's memory) as [1, 4, h, w], padding included,
    where its storage holds the padding: its rows are then copied as they lie (a strided 3-of-4 copy costs torch
    six times as much) and the resize's 4-channel path reads them; the caller drops the 4th channel after."""
    n, c, h, w = crop.shape
    if c != 3 or crop.stride(1) != 1 or crop.stride(3) != 4 or crop.dtype != torch.uint8 or n != 1:
        return crop
    strides = (crop.stride(0), 1, crop.stride(2), 4)
    end = crop.storage_offset() + (h - 1) * crop.stride(2) + (w - 1) * 4 + 3  # the last pixel's padding byte
    if end >= crop.untyped_storage().nbytes():
        return crop
    return crop.as_strided((1, 4, h, w), strides)


def _batch_buffer(shape: tuple[int, int, int, int], dtype: torch.dtype, device: torch.device, channels_last: bool,
                  shared: bool) -> torch.Tensor:
    """An uninitialized [N, C, H, W] tensor (channels_last memory or contiguous). When `shared` (on the CPU, in a
    DataLoader worker): in a slab of the worker's transport where the batch will travel through it (see
    transport.slab_tensor: sent without a copy, the slab reused), else in new shared memory, as torch's
    default_collate makes a worker's batches."""
    n, c, h, w = shape
    order = (n, h, w, c) if channels_last else shape
    lent = _slab_tensor(order, dtype) if shared and device.type == "cpu" else None
    if lent is not None:  # in a TFRecordDataset's worker: in a slab its transport sends without a copy
        memory = lent
    elif shared and device.type == "cpu":
        storage = torch.UntypedStorage._new_shared(math.prod(order) * dtype.itemsize)
        memory = torch.empty(0, dtype=dtype).set_(storage).view(order)
    else:
        memory = torch.empty(order, dtype=dtype, device=device)
    return memory.permute(0, 3, 1, 2) if channels_last else memory


def _geometry(images: Sequence[torch.Tensor], boxes: np.ndarray, flips: np.ndarray, device: torch.device
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(heights, widths, starts: int64; boxes: float32 [N, 4]; flips: bool) on `device`, made on the host and sent in
    one non-blocking copy. torch.tensor(..., device="cuda") is a blocking copy: torch waits for the stream to drain
    after it (cudaStreamSynchronize), so four of them a batch held the loader's thread until the GPU work queued
    before them was done; a non-blocking copy from pageable memory is staged by the driver at once, no wait."""
    sizes = np.array([(im.shape[1], im.shape[2]) for im in images], dtype=np.int64).reshape(-1, 2)
    areas = sizes[:, 0] * sizes[:, 1]
    table = np.empty((len(images), 8), dtype=np.float64)  # exact: every value is an integer below 2**53 or a float32
    table[:, 0:2] = sizes
    table[:, 2] = np.cumsum(areas) - areas
    table[:, 3] = np.asarray(flips, dtype=bool)
    table[:, 4:8] = np.asarray(boxes, dtype=np.float32)
    host = torch.from_numpy(table)
    moved = host if device.type == "cpu" else host.to(device, non_blocking=True)
    whole = moved[:, 0:3].long()
    return whole[:, 0], whole[:, 1], whole[:, 2], moved[:, 4:8].float(), moved[:, 3] != 0


def _gather(images: Sequence[torch.Tensor], boxes: np.ndarray, flips: np.ndarray, size: int) -> torch.Tensor:
    """Bilinear crop + resize of every image at once: [N, size, size, C] float32 (align_corners=False sampling,
    clamped to each box, as resizing the crop would sample it)."""
    device = images[0].device
    channels = images[0].shape[0]
    flat = torch.cat([im.permute(1, 2, 0).reshape(-1, channels) for im in images])  # pixels end to end
    heights, widths, starts, box, flipped = _geometry(images, boxes, flips, device)
    top, left, h, w = box[:, 0:1], box[:, 1:2], box[:, 2:3], box[:, 3:4]
    grid = torch.arange(size, device=device, dtype=torch.float32)[None, :] + 0.5
    ys = (top + grid * h / size - 0.5).clamp_(min=top.clamp(min=0), max=(top + h - 1).clamp(max=heights[:, None] - 1))
    cols = grid.expand(len(images), size)
    cols = torch.where(flipped[:, None], size - cols, cols)
    xs = (left + cols * w / size - 0.5).clamp_(min=left.clamp(min=0),
                                              max=(left + w - 1).clamp(max=widths[:, None] - 1))
    y0 = ys.floor()
    x0 = xs.floor()
    wy = (ys - y0)[:, :, None, None]
    wx = (xs - x0)[:, None, :, None]
    y0l, x0l = y0.long(), x0.long()
    y1l = torch.minimum(y0l + 1, heights[:, None] - 1)
    x1l = torch.minimum(x0l + 1, widths[:, None] - 1)
    rows0 = (starts[:, None] + y0l * widths[:, None])[:, :, None]
    rows1 = (starts[:, None] + y1l * widths[:, None])[:, :, None]
    cols0, cols1 = x0l[:, None, :], x1l[:, None, :]

    def pick(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        return flat[(rows + cols).reshape(-1)].reshape(len(images), size, size, channels).to(torch.float32)

    top_row = pick(rows0, cols0) * (1 - wx) + pick(rows0, cols1) * wx
    bottom_row = pick(rows1, cols0) * (1 - wx) + pick(rows1, cols1) * wx
    return top_row * (1 - wy) + bottom_row * wy
