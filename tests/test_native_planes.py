"""The compiled core's plane kernel (pixels.c: planes_from_pixels) and its use by the image transforms
(transforms._planes_into): interleaved pixels into [C, H, W] planes, flipped or not, the same bytes as torch's copy
(the pure-Python path) for every layout, every extent checked before a byte is read or written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import _native
from tfr_torch.images import ImageTransform
from tfr_torch.images.transforms import _planes_into, _resize_each

needs_core = pytest.mark.skipif(not _native.available(), reason="the compiled core is not built")


def reference(pixels: np.ndarray, flip: bool) -> np.ndarray:
    """[H, W, C] interleaved -> [C, H, W] planes, by numpy."""
    planes = np.moveaxis(pixels, -1, 0)
    return np.ascontiguousarray(planes[:, :, ::-1] if flip else planes)


@needs_core
@given(h=st.integers(0, 9), w=st.integers(0, 9), c=st.integers(1, 4), pad=st.integers(0, 3),
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
    _native.core.planes_from_pixels(out, memory[:extent], h, w, c, step, row, flip)
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
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_resize_each_same_bytes_on_both_backends(channels_last: bool, dtype: torch.dtype, backend: str) -> None:
    """Training transforms (flips) into a batch: the compiled plane kernel and torch's copy give the same bytes."""
    rng = np.random.default_rng(11)
    images = [torch.from_numpy(rng.integers(0, 256, (40 + k, 50 - k, 4), dtype=np.uint8))[..., :3].movedim(-1, 0)
              for k in range(6)]
    boxes = [np.array([1.0 + k, 2.0, 30.0, 33.0 - k]) for k in range(6)]
    transform = ImageTransform(20, train=True, dtype=dtype, channels_last=channels_last)
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
