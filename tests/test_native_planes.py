"""The compiled core's pixel kernels (pixels.c) and their use by the image transforms: planes_from_pixels
(transforms._planes_into), interleaved pixels into [C, H, W] planes, flipped or not, the same bytes as torch's copy
(the pure-Python path); normalize_pixels (transforms._normalized_into), the same pixels as normalized float32 or
bfloat16 planes or pixels, the same values bit for bit as torch's arithmetic; for every layout, every extent
checked before a byte is read or written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import _native
from tfr_torch.images import ImageTransform
from tfr_torch.images.transforms import _normalized_into, _planes_into, _resize_each

needs_core = pytest.mark.skipif(not _native.available(), reason="the compiled core is not built")


def reference(pixels: np.ndarray, flip: bool) -> np.ndarray:
    """[H, W, C] interleaved -> [C, H, W] planes, by numpy."""
    planes = np.moveaxis(pixels, -1, 0)
    return np.ascontiguousarray(planes[:, :, ::-1] if flip else planes)


@needs_core
@given(h=st.integers(0, 9), w=st.integers(0, 40), c=st.integers(1, 4), pad=st.integers(0, 3),
       gap=st.integers(0, 5), flip=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_planes_match_numpy_for_every_layout(h: int, w: int, c: int, pad: int, gap: int, flip: bool,
                                             seed: int) -> None:
    step, rng = c + pad, np.random.default_rng(seed)
    row = w * step + gap
    memory = rng.integers(0, 256, max(h * row, 1), dtype=np.uint8)
    # the pixels: row y starts at y * row, pixel x at x * step, its channels after it
    view = np.lib.stride_tricks.as_strided(memory, (h, w, c), (row, step, 1))
    extent = (h - 1) * row + (w - 1) * step + c if h and w else 0
    out = np.full((c, h, w), 7, np.uint8)
    # a copy of exactly the extent: under ASan a read past it (a last pixel's padding byte) is an error
    _native.core.planes_from_pixels(out, memory[:extent].copy(), h, w, c, step, row, flip)
    np.testing.assert_array_equal(out, reference(view, flip))


@needs_core
def test_rgb_in_four_bytes_a_pixel() -> None:
    """The vectorized 3-of-4 path (the resize's 4-channel output), on an image wide enough to use it."""
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (37, 301, 4), dtype=np.uint8)
    for flip in (False, True):
        out = np.empty((3, 37, 301), np.uint8)
        _native.core.planes_from_pixels(out, pixels.reshape(-1), 37, 301, 3, 4, 301 * 4, flip)
        np.testing.assert_array_equal(out, reference(pixels[..., :3], flip))


@needs_core
@pytest.mark.parametrize("h, w, c, step, row, out_len, in_len, why", [
    (4, 4, 3, 4, 16, 48, 62, "pixels one byte short (3 * 16 + 3 * 4 + 3 = 63 needed)"),
    (4, 4, 3, 4, 16, 47, 64, "planes one byte short"),
    (4, 4, 3, 4, 16, 49, 64, "planes one byte long"),
    (4, 4, 3, 2, 16, 48, 64, "step below the channels"),
    (-1, 4, 3, 4, 16, 0, 64, "negative height"),
    (4, 4, 0, 4, 16, 0, 64, "no channels"),
    (2**40, 2**40, 3, 4, 2**60, 48, 64, "extent past memory"),
])
def test_extents_are_checked(h: int, w: int, c: int, step: int, row: int, out_len: int, in_len: int,
                             why: str) -> None:
    out, pixels = np.zeros(out_len, np.uint8), np.zeros(in_len, np.uint8)
    with pytest.raises(ValueError, match="planes_from_pixels"):
        _native.core.planes_from_pixels(out, pixels, h, w, c, step, row, False)
    assert not out.any()


@needs_core
def test_planes_need_a_writable_target() -> None:
    with pytest.raises((BufferError, TypeError)):
        _native.core.planes_from_pixels(bytes(12), bytes(16), 2, 2, 3, 4, 8, False)


@needs_core
def test_planes_into_takes_only_the_layouts_it_knows() -> None:
    padded = torch.arange(5 * 6 * 4, dtype=torch.uint8).reshape(1, 5, 6, 4).permute(0, 3, 1, 2)[0]  # [4, 5, 6]
    pixels = padded[:3]
    target = torch.zeros(3, 5, 6, dtype=torch.uint8)
    assert _planes_into(target, pixels, True) and torch.equal(target, pixels.flip(-1))
    assert not _planes_into(torch.zeros(3, 5, 6), pixels, False)  # float target: the caller converts
    assert not _planes_into(torch.zeros(3, 6, 5, dtype=torch.uint8).transpose(1, 2), pixels, False)  # not planes
    assert not _planes_into(target, pixels.contiguous(), False)  # planes already: the caller's copy is a memcpy


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dtype, normalized", [(torch.uint8, False), (torch.float32, True), (torch.float32, False),
                                               (torch.bfloat16, True), (torch.bfloat16, False)])
def test_resize_each_same_bytes_on_both_backends(channels_last: bool, dtype: torch.dtype, normalized: bool,
                                                 backend: str) -> None:
    """Training transforms (flips) into a batch: the compiled pixel kernels and torch's copy and arithmetic give
    the same bytes."""
    rng = np.random.default_rng(11)
    images = [torch.from_numpy(rng.integers(0, 256, (40 + k, 50 - k, 4), dtype=np.uint8))[..., :3].movedim(-1, 0)
              for k in range(6)]
    boxes = [np.array([1.0 + k, 2.0, 30.0, 33.0 - k]) for k in range(6)]
    transform = ImageTransform(20, train=True, dtype=dtype, channels_last=channels_last,
                               **({} if normalized else {"mean": None, "std": None}))
    got = _resize_each(zip(images, boxes, [k % 2 == 0 for k in range(6)]), 6, transform)
    with_python = tfr_torch.set_backend("python")
    try:
        expected = _resize_each(zip(images, boxes, [k % 2 == 0 for k in range(6)]), 6, transform)
    finally:
        tfr_torch.set_backend(with_python)
    assert got.shape == (6, 3, 20, 20) and got.dtype == dtype
    assert torch.equal(got, expected)


@needs_core
def test_exact_extent_is_enough() -> None:
    out = np.zeros(48, np.uint8)
    _native.core.planes_from_pixels(out, np.arange(63, dtype=np.uint8), 4, 4, 3, 4, 16, False)
    assert out[:4].tolist() == [0, 4, 8, 12] and out[-1] == 62


@needs_core
@pytest.mark.parametrize("h, w", [(0, 5), (5, 0), (0, 0)])
def test_empty_images_write_nothing(h: int, w: int) -> None:
    """No pixel: nothing read, nothing written (the 3-of-4 path's last-pixel index must not wrap around)."""
    out = np.zeros(0, np.uint8)
    _native.core.planes_from_pixels(out, np.zeros(0, np.uint8), h, w, 3, 4, 4 * w, True)
    _native.core.planes_from_pixels(out, np.zeros(0, np.uint8), h, w, 3, 4, 4 * w, False)


# ----- normalize_pixels: uint8 pixels to normalized float32 / bfloat16, as ImageTransform._values computes them


def _torch_normalized(view: np.ndarray, flip: bool, dtype: torch.dtype, sub: np.ndarray, mul: np.ndarray,
                      interleaved: bool) -> np.ndarray:
    """What torch's arithmetic gives (the pure-Python path): (float32(v) - sub) * mul, then the dtype."""
    pixels = torch.from_numpy((view[:, ::-1] if flip else view).copy()).to(torch.float32)
    values = ((pixels - torch.from_numpy(sub)) * torch.from_numpy(mul)).to(dtype)  # [H, W, C]
    values = values if interleaved else values.permute(2, 0, 1).contiguous()
    return (values.view(torch.int16) if dtype == torch.bfloat16 else values).numpy()


@needs_core
@given(h=st.integers(0, 7), w=st.integers(0, 40), c=st.integers(1, 4), pad=st.integers(0, 2),
       gap=st.integers(0, 5), flip=st.booleans(), interleaved=st.booleans(), bf16=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_normalized_values_match_torch_bit_for_bit(h: int, w: int, c: int, pad: int, gap: int, flip: bool,
                                                   interleaved: bool, bf16: bool, seed: int) -> None:
    step, rng = c + pad, np.random.default_rng(seed)
    row = w * step + gap
    memory = rng.integers(0, 256, max(h * row, 1), dtype=np.uint8)
    view = np.lib.stride_tricks.as_strided(memory, (h, w, c), (row, step, 1))
    extent = (h - 1) * row + (w - 1) * step + c if h and w else 0
    sub = (rng.random(c, dtype=np.float32) * 255).astype(np.float32)
    mul = (rng.random(c, dtype=np.float32) * 0.05 + 0.001).astype(np.float32)
    dtype = torch.bfloat16 if bf16 else torch.float32
    out = np.full(c * h * w, 7, np.int16 if bf16 else np.float32)
    _native.core.normalize_pixels(out, bf16, interleaved, memory[:extent].copy(), h, w, c, step, row, flip,
                                  sub.tobytes(), mul.tobytes())
    want = _torch_normalized(view, flip, dtype, sub, mul, interleaved).reshape(-1)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


@needs_core
def test_normalized_rgb_in_four_bytes_a_pixel_wide_and_with_imagenet_factors() -> None:
    """The unrolled 3-of-4 path on a wide image with the default ImageNet factors, every pixel value."""
    pixels = np.arange(41 * 256 * 4, dtype=np.int64).reshape(41, 256, 4).astype(np.uint8)
    sub, mul = (np.frombuffer(b, np.float32).copy() for b in ImageTransform(224)._factors(3))
    for bf16 in (False, True):
        for interleaved in (False, True):
            for flip in (False, True):
                out = np.empty(3 * 41 * 256, np.int16 if bf16 else np.float32)
                _native.core.normalize_pixels(out, bf16, interleaved, pixels.reshape(-1), 41, 256, 3, 4, 256 * 4,
                                              flip, sub.tobytes(), mul.tobytes())
                want = _torch_normalized(pixels[..., :3], flip, torch.bfloat16 if bf16 else torch.float32, sub, mul,
                                         interleaved).reshape(-1)
                np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


@needs_core
@pytest.mark.parametrize("w", [257, 258, 513, 600])
def test_normalized_rows_wider_than_the_kernels_chunk(w: int) -> None:
    """bfloat16 rows go through float32 in chunks of 256 pixels (backwards when flipped): rows of one chunk and a
    pixel or more, and of several, give torch's values bit for bit, in every layout, and the padding byte of each
    row's last pixel (past the pixels' extent in the last row) is never needed."""
    rng = np.random.default_rng(w)
    h, row = 5, w * 4 + 3
    memory = rng.integers(0, 256, h * row, dtype=np.uint8)
    extent = (h - 1) * row + (w - 1) * 4 + 3
    view = np.lib.stride_tricks.as_strided(memory, (h, w, 3), (row, 4, 1))
    sub, mul = (np.frombuffer(b, np.float32).copy() for b in ImageTransform(224)._factors(3))
    for bf16 in (False, True):
        for interleaved in (False, True):
            for flip in (False, True):
                out = np.full(3 * h * w, 7, np.int16 if bf16 else np.float32)
                _native.core.normalize_pixels(out, bf16, interleaved, memory[:extent].copy(), h, w, 3, 4, row, flip,
                                              sub.tobytes(), mul.tobytes())
                want = _torch_normalized(view, flip, torch.bfloat16 if bf16 else torch.float32, sub, mul,
                                         interleaved).reshape(-1)
                np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


@needs_core
@pytest.mark.parametrize("h, w, c, step, row, out_len, in_len, factors, why", [
    (4, 4, 3, 4, 16, 48, 62, 3, "pixels one byte short (3 * 16 + 3 * 4 + 3 = 63 needed)"),
    (4, 4, 3, 4, 16, 47, 64, 3, "output one value short"),
    (4, 4, 3, 4, 16, 49, 64, 3, "output one value long"),
    (4, 4, 3, 2, 16, 48, 64, 3, "step below the channels"),
    (4, 4, 3, 4, 16, 48, 64, 2, "factors for 2 channels, not 3"),
    (1, 1, 17, 17, 17, 17, 17, 17, "more channels than the kernel takes"),
    (2**40, 2**40, 3, 4, 2**60, 48, 64, 3, "extent past memory"),
])
def test_normalize_extents_are_checked(h: int, w: int, c: int, step: int, row: int, out_len: int, in_len: int,
                                       factors: int, why: str) -> None:
    out, pixels = np.zeros(out_len, np.float32), np.zeros(in_len, np.uint8)
    factor = np.ones(factors, np.float32).tobytes()
    with pytest.raises(ValueError, match="normalize_pixels"):
        _native.core.normalize_pixels(out, False, False, pixels, h, w, c, step, row, False, factor, factor)
    assert not out.any()


@needs_core
@pytest.mark.parametrize("h, w", [(0, 5), (5, 0), (0, 0)])
def test_normalize_empty_images_write_nothing(h: int, w: int) -> None:
    factor = np.ones(3, np.float32).tobytes()
    for bf16 in (False, True):
        for flip in (False, True):
            _native.core.normalize_pixels(np.zeros(0, np.float32), bf16, False, np.zeros(0, np.uint8), h, w, 3, 4,
                                          4 * w, flip, factor, factor)


@needs_core
def test_normalized_into_takes_only_what_it_computes_as_values_does() -> None:
    padded = torch.arange(5 * 6 * 4, dtype=torch.uint8).reshape(1, 5, 6, 4).permute(0, 3, 1, 2)[0]  # [4, 5, 6]
    pixels = padded[:3]
    transform = ImageTransform(6, dtype=torch.float32)
    want = transform._values(pixels.flip(-1).permute(1, 2, 0)).permute(2, 0, 1)
    target = torch.zeros(3, 5, 6)
    assert _normalized_into(target, pixels, True, transform) and torch.equal(target, want)
    cl = torch.zeros(5, 6, 3).permute(2, 0, 1)  # channels_last memory
    assert _normalized_into(cl, pixels, True, transform) and torch.equal(cl, want)
    gray = ImageTransform(6, dtype=torch.float32, mean=(0.5,), std=(0.25,))  # broadcast by _values: not here
    assert not _normalized_into(target, pixels, False, gray)
    assert not _normalized_into(torch.zeros(3, 5, 6, dtype=torch.bfloat16), pixels, False, transform)  # dtypes
    assert not _normalized_into(torch.zeros(3, 6, 5).transpose(1, 2), pixels, False, transform)  # neither layout


@needs_core
def test_the_kernel_benchmark_runs_and_checks_its_rows_against_torch() -> None:
    """benchmarks/pixel_kernels.py with tiny sizes: every layout, dtype and flip, each checked equal to torch's bytes
    before it is timed (no timing asserted)."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, os.path.join(root, "benchmarks", "pixel_kernels.py"), "--size", "37",
                           "--repeat", "2", "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split("\t") for line in proc.stdout.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [(layout, flip) for layout in (
        "uint8 planes", "float32 planes", "float32 channels_last", "bfloat16 planes", "bfloat16 channels_last")
        for flip in ("no", "yes")]
