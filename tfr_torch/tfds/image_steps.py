"""The images of one record's Sequence (an RLDS episode's steps, a Video's frames) decoded together: straight into
one `[T, H, W, C]` uint8 array, then one copy to `[T, C, H, W]`, in a small thread pool where that pays.

Only the common, exactly reproducible cases take this path: 8-bit JPEGs through simplejpeg with the settings of
image_decode.py's per-image path (libjpeg's fast integer inverse DCT, fancy upsampling: TFDS's pixels) and 8-bit
RGB / gray / RGBA PNGs, every image of the sequence the size of the first. Anything else (another format or mode, a
size that changes, bytes that fail to decode) makes `decode_steps` return None, and the caller decodes image by
image as before, with its exact errors.

PNGs: the compiled core decodes a whole chunk of the sequence in one call (`png_decode_many`: zlib and the PNG
filters in C, no Python per image) when every image is a plain one (not interlaced, CRCs right, no chunk that could
change Pillow's answer, such as tRNS); it refuses anything else, and then Pillow decodes the sequence image by image
(the reference: PNG is lossless, so both give the same pixels; with the pure-Python backend Pillow always does).
Pillow's per-image Python work (~20 us a 32x32 PNG) was most of an RLDS episode's decoding.

Threads: simplejpeg, Pillow's decoders and the core release the GIL while they run, so a sequence split in
contiguous chunks decodes on several cores. The pool is created on first use, holds at most `cpus - 1` threads (the
calling thread takes a chunk too), and is not used inside DataLoader workers, which already run one per core.
`threads`: None for that default (or the `TFR_TORCH_DECODE_THREADS` environment variable's number), 0 or 1 for no
pool.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional

import numpy as np
import torch
from torch.utils.data import get_worker_info

from tfr_torch import _native

__all__ = ["decode_steps", "decode_threads"]

_PNG = b"\x89PNG\r\n\x1a\n"
_PNG_MODES = {(0, 1): "L", (2, 3): "RGB", (6, 4): "RGBA"}  # (IHDR colour type, channels asked for) -> Pillow mode
_MAX_THREADS = 8
_MIN_BYTES_PER_THREAD = 1 << 18  # smaller chunks decode faster than a thread hand-off costs (on a busy machine)
_ENV = "TFR_TORCH_DECODE_THREADS"

_pool: Optional[ThreadPoolExecutor] = None
_pool_pid = -1
_pool_size = 0
_pool_lock = threading.Lock()

Decoder = Callable[[bytes, np.ndarray], bool]  # one image into its [H, W, C] row of the output
Chunk = Callable[[Sequence[bytes], np.ndarray], bool]  # images [start:stop] into out[start:stop] at once


def decode_threads(threads: Optional[int]) -> int:
    """How many threads (the caller's included) decode one sequence: `threads` when given; else the
    TFR_TORCH_DECODE_THREADS variable, else the CPUs this process may use (at most 8); always 1 inside a
    DataLoader worker when not given."""
    if threads is not None:
        return max(1, int(threads))
    env = os.environ.get(_ENV, "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"{_ENV} must be an integer (threads; 0 or 1: no pool), got {env!r}") from None
    if get_worker_info() is not None:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return min(cpus, _MAX_THREADS)


def _executor(workers: int) -> ThreadPoolExecutor:
    """The shared pool (re-made in a forked child, whose copy has no threads behind it)."""
    global _pool, _pool_pid, _pool_size
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid() or _pool_size < workers:
            if _pool is not None and _pool_pid == os.getpid():
                _pool.shutdown(wait=False)  # its queued work still runs; new work goes to the larger pool
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tfr_torch-decode")
            _pool_pid, _pool_size = os.getpid(), workers
        return _pool


def _jpeg(gray: bool) -> Optional[Decoder]:
    try:
        import simplejpeg
    except ImportError:
        return None
    space = "GRAY" if gray else "RGB"

    def decode(data: bytes, row: np.ndarray) -> bool:
        if data[:2] != b"\xff\xd8":
            return False
        try:
            array = simplejpeg.decode_jpeg(data, colorspace=space, fastdct=True, fastupsample=False, buffer=row)
        except ValueError:
            return False
        return bool(array.shape == row.shape)

    return decode


def _png(mode: str) -> Decoder:
    """Pillow's PNG reader as Image.open picks it for PNG bytes (its decompression-bomb check is _plan's size
    check: every image has the first one's size); tobytes() are the bytes np.asarray(img) would wrap."""
    from PIL import Image, PngImagePlugin

    errors = (OSError, ValueError, SyntaxError, EOFError, IndexError, TypeError, Image.DecompressionBombError)

    def decode(data: bytes, row: np.ndarray) -> bool:
        try:
            with PngImagePlugin.PngImageFile(io.BytesIO(data)) as img:
                if img.mode != mode or img.size != (row.shape[1], row.shape[0]):
                    return False
                img.load()
                pixels = img.tobytes()
        except errors:
            return False
        if len(pixels) != row.size:
            return False
        row.reshape(-1)[:] = np.frombuffer(pixels, dtype=np.uint8)
        return True

    return decode


def _png_chunk(height: int, width: int, colour: int) -> Optional[Chunk]:
    """The compiled core's decoder of a chunk of PNGs, or None (pure-Python backend, or built without zlib)."""
    core = _native.core
    if core is None or not hasattr(core, "png_decode_many"):
        return None
    decode_many = core.png_decode_many

    def chunk(items: Sequence[bytes], out: np.ndarray) -> bool:
        failed, _reason = decode_many(items, out, width, height, colour)
        return bool(failed < 0)

    return chunk


def _plan(first: bytes, channels: Optional[int]) -> Optional[tuple[Decoder, int, int, Optional[Chunk]]]:
    """(decoder, height, width, chunk decoder or None) for a sequence whose first image is `first`, or None
    (image by image)."""
    if channels not in (1, 3, 4) or not isinstance(first, bytes):
        return None
    if first[:2] == b"\xff\xd8" and channels in (1, 3):
        decoder = _jpeg(channels == 1)
        if decoder is None:
            return None
        try:
            import simplejpeg

            height, width = simplejpeg.decode_jpeg_header(first)[:2]
        except ValueError:
            return None
        return decoder, int(height), int(width), None
    if first[:8] == _PNG and first[12:16] == b"IHDR" and len(first) >= 26 and first[24] == 8:
        mode = _PNG_MODES.get((first[25], channels))
        height, width = int.from_bytes(first[20:24], "big"), int.from_bytes(first[16:20], "big")
        if mode is None or not _pillow_size_ok(height * width):
            return None
        return _png(mode), height, width, _png_chunk(height, width, first[25])
    return None


def _pillow_size_ok(pixels: int) -> bool:
    """Under Pillow's decompression-bomb limit (larger images take the per-image path: its warning or error)."""
    from PIL import Image

    return Image.MAX_IMAGE_PIXELS is None or pixels <= Image.MAX_IMAGE_PIXELS


def _run(decoder: Decoder, chunk: Optional[Chunk], items: Sequence[bytes], out: np.ndarray, start: int,
         stop: int) -> bool:
    """Images [start:stop] decoded into out[start:stop]: in one call of `chunk` when it takes them all, else (or
    when it refuses one) one `decoder` call each."""
    if chunk is not None and chunk(items[start:stop], out[start:stop]):
        return True
    for i in range(start, stop):
        if not decoder(items[i], out[i]):
            return False
    return True


def decode_steps(items: Sequence[bytes], channels: Optional[int], threads: Optional[int] = None
                 ) -> Optional[torch.Tensor]:
    """uint8 `[T, C, H, W]` for T encoded images of one format and size, or None where the per-image path must
    decode them (see the module doc); `channels` as the Image feature says (1, 3 or 4 here)."""
    if not items:
        return None
    plan = _plan(items[0], channels)
    if plan is None:
        return None
    decoder, height, width, chunk = plan
    assert channels is not None  # _plan gave a plan only for 1, 3 or 4
    if height < 1 or width < 1 or len(items) * height * width * channels > 1 << 34:
        return None
    out = np.empty((len(items), height, width, channels), dtype=np.uint8)
    per_image = height * width * channels
    n = min(decode_threads(threads), len(items), max(1, len(items) * per_image // _MIN_BYTES_PER_THREAD))
    if n <= 1:
        ok = _run(decoder, chunk, items, out, 0, len(items))
    else:
        bounds = [len(items) * k // n for k in range(n + 1)]
        pool = _executor(n - 1)
        futures: list[Future[bool]] = [pool.submit(_run, decoder, chunk, items, out, bounds[k], bounds[k + 1])
                                       for k in range(1, n)]
        ok = _run(decoder, chunk, items, out, bounds[0], bounds[1])
        ok = all([f.result() for f in futures]) and ok
    if not ok:
        return None
    return torch.from_numpy(np.ascontiguousarray(out.transpose(0, 3, 1, 2)))
