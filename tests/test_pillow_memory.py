"""Pillow without its Python overheads (tfr_torch/images/_pillow.py): decoded pixels read without np.asarray's copy
(_memory_view, padded_base) and resized from their 4 bytes a pixel (transforms._with_padding): the same values as
the copying path, the memory alive as long as a view of it, the copy wherever Pillow does not export the memory;
plain JPEGs decoded without Image.open's marker walk (_decode_plain_jpeg): the same pixels, the same errors."""

from __future__ import annotations

import gc
import io

import numpy as np
import pytest
import torch
from PIL import Image

from tfr_torch.images import DecodeImages, ImageTransform, decode_image
from tfr_torch.images import _pillow
from tfr_torch.images._formats import sniff
from tfr_torch.images.transforms import _resize_each, _with_padding

EXPORTS = hasattr(Image.Image, "__arrow_c_array__")  # Pillow >= 11.2
needs_export = pytest.mark.skipif(not EXPORTS, reason="this Pillow does not export image memory (before 11.2)")


def jpeg(width: int = 53, height: int = 37, seed: int = 0, quality: int = 90) -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x * 5 + seed) % 256, (y * 7) % 256, (x + y) % 256], -1)
    pixels = np.clip(base + rng.integers(-15, 16, base.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=quality)
    return out.getvalue()


@needs_export
@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA"])
def test_memory_view_is_the_image(mode: str) -> None:
    rng = np.random.default_rng(1)
    image = Image.fromarray(rng.integers(0, 256, (37, 53, 4), dtype=np.uint8), "RGBA").convert(mode)
    view = _pillow._memory_view(image)
    assert view is not None
    np.testing.assert_array_equal(view, np.asarray(image))
    assert view.flags.writeable  # torch takes it without a warning (the image is dropped after decoding)
    assert (_pillow.padded_base(view) is not None) == (mode == "RGB")


@needs_export
def test_view_outlives_the_image() -> None:
    data = jpeg(500, 375)
    expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    array, depth = _pillow.decode_pillow(data, sniff(data), gray=False, wide=False, all_frames=False)
    assert depth == 8 and isinstance(array.base.base, _pillow._Exported)  # a view, not a copy
    gc.collect()
    others = [Image.new("RGB", (500, 375), (k, 255 - k, 7)) for k in range(40)]  # reuse any memory freed early
    np.testing.assert_array_equal(array, expected)
    del others


def test_copy_where_pillow_does_not_export(monkeypatch: pytest.MonkeyPatch) -> None:
    data = jpeg()
    monkeypatch.delattr(Image.Image, "__arrow_c_array__", raising=False)
    array, _ = _pillow.decode_pillow(data, sniff(data), gray=False, wide=False, all_frames=False)
    assert array.flags.c_contiguous and _pillow.padded_base(array) is None
    np.testing.assert_array_equal(array, np.asarray(Image.open(io.BytesIO(data)).convert("RGB")))


@needs_export
def test_no_view_of_an_image_in_several_blocks() -> None:
    before = Image.core.get_block_size()
    Image.core.set_block_size(4096)  # every row a block of its own: not exportable as one array
    try:
        image = Image.new("RGB", (300, 200), (1, 2, 3))
        assert _pillow._memory_view(image) is None
        assert _pillow._pixels(image, view=True)[0].flags.c_contiguous  # the copy instead
    finally:
        Image.core.set_block_size(before)


@needs_export
def test_layouts_not_checked_are_not_viewed(monkeypatch: pytest.MonkeyPatch) -> None:
    image = Image.new("RGB", (20, 10), (9, 8, 7))
    real = _pillow._ArrowSchema

    class Odd(real):  # a schema that says something else than "+w:4" of "C"
        @classmethod
        def from_address(cls, address: int) -> object:
            schema = real.from_address(address)
            return type("S", (), {"format": b"+w:3", "n_children": schema.n_children,
                                  "children": schema.children})()

    monkeypatch.setattr(_pillow, "_ArrowSchema", Odd)
    assert _pillow._memory_view(image) is None


def test_user_images_are_copied() -> None:
    """as_pixels reads a caller's PIL image: never a view of memory the caller may change later."""
    image = Image.new("RGB", (8, 4), (10, 20, 30))
    array, _ = _pillow._pixels(image)
    image.putpixel((0, 0), (0, 0, 0))
    assert array[0, 0].tolist() == [10, 20, 30]


def test_with_padding_only_where_the_storage_holds_it() -> None:
    padded = torch.arange(2 * 3 * 4, dtype=torch.uint8).reshape(1, 2, 3, 4)  # [1, H, W, 4]
    crop = padded[..., :3].permute(0, 3, 1, 2)  # [1, 3, H, W], 4 bytes a pixel
    wide = _with_padding(crop)
    assert wide.shape == (1, 4, 2, 3) and torch.equal(wide, padded.permute(0, 3, 1, 2))
    tight = torch.from_numpy(padded.numpy()[..., :3]).permute(0, 3, 1, 2)  # storage ends at the last 3rd byte
    assert _with_padding(tight) is tight
    packed = torch.zeros(1, 2, 3, 3, dtype=torch.uint8).permute(0, 3, 1, 2)
    assert _with_padding(packed) is packed


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("train", [False, True])
def test_resize_from_pillow_memory_matches_the_packed_copy(channels_last: bool, train: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    items = [jpeg(120 + 7 * k, 90 + 5 * k, seed=k) for k in range(5)]
    transform = ImageTransform(32, train=train, dtype=torch.uint8, channels_last=channels_last)
    batch = {"image/encoded": items, "id": torch.arange(5)}
    decoder = DecodeImages(transform, index="id" if train else None)
    viewed = decoder(batch)["image/encoded"]
    monkeypatch.setattr(_pillow, "_memory_view", lambda image: None)  # np.asarray's packed copy
    copied = decoder(batch)["image/encoded"]
    assert viewed.shape == (5, 3, 32, 32)
    assert torch.equal(viewed, copied)


def test_resize_each_of_padded_and_packed_views() -> None:
    """The 4-channel resize of a padded crop gives the 3-channel resize's pixels, not the padding's."""
    rng = np.random.default_rng(3)
    padded = torch.from_numpy(rng.integers(0, 256, (40, 60, 4), dtype=np.uint8))
    padded[..., 3] = 255  # padding unlike the pixels
    view = padded[..., :3].movedim(-1, -3)
    packed = view.contiguous()
    transform = ImageTransform(24, train=False, dtype=torch.uint8)
    box = np.array([3.0, 5.0, 30.0, 40.0])
    a = _resize_each(iter([(view, box, True)]), 1, transform)
    b = _resize_each(iter([(packed, box, True)]), 1, transform)
    assert torch.equal(a, b)


def test_decode_image_values_unchanged() -> None:
    data = jpeg(64, 48, seed=5)
    expected = torch.from_numpy(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).copy()).permute(2, 0, 1)
    got = decode_image(data, "RGB")
    assert got.is_contiguous() and torch.equal(got, expected)
    gray = decode_image(data, "GRAY")
    assert gray.shape == (1, 48, 64) and gray.is_contiguous()


# ---- plain JPEGs decoded by Pillow's libjpeg decoder without Image.open's marker walk (_pillow._decode_plain_jpeg)


def _saved(image: Image.Image, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", **options)
    return out.getvalue()


def _opened(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        image.load()
        return np.asarray(image)


PLAIN = {
    "baseline 4:2:0": lambda img: _saved(img, quality=90),
    "baseline 4:4:4": lambda img: _saved(img, quality=95, subsampling=0),
    "progressive": lambda img: _saved(img, quality=85, progressive=True),
    "optimized": lambda img: _saved(img, quality=75, optimize=True),
    "gray": lambda img: _saved(img.convert("L"), quality=90),
}


@pytest.mark.parametrize("kind", sorted(PLAIN))
def test_plain_jpeg_decodes_as_image_open_does(kind: str) -> None:
    rng = np.random.default_rng(7)
    data = PLAIN[kind](Image.fromarray(rng.integers(0, 256, (45, 67, 3), dtype=np.uint8)))
    header = sniff(data)
    direct = _pillow._decode_plain_jpeg(data, header)
    assert direct is not None, "a plain JPEG takes the direct path"
    expected = _opened(data)
    np.testing.assert_array_equal(direct[0][..., 0] if expected.ndim == 2 else direct[0], expected)
    array, depth = _pillow.decode_pillow(data, header, gray=False, wide=False, all_frames=False)
    assert depth == 8 and array.shape[:2] == (45, 67)


def test_jpegs_that_are_not_plain_are_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    cmyk = _saved(Image.new("CMYK", (20, 10), (10, 200, 30, 40)))
    assert sniff(cmyk).components == 4 and _pillow._decode_plain_jpeg(cmyk, sniff(cmyk)) is None
    big = jpeg(64, 64)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # Image.open then warns or refuses, as Pillow does
    assert _pillow._decode_plain_jpeg(big, sniff(big)) is None


@pytest.mark.parametrize("cut", [0.3, 0.7, 0.95])
def test_broken_jpegs_fail_as_before(cut: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JPEG the direct decoder cannot finish goes to Image.open, whose error the contract words: the message is
    the one the path without the direct decoder gives."""
    from tfr_torch.errors import DecodeError

    data = jpeg(90, 70)
    broken = data[: int(len(data) * cut)]
    assert _pillow._decode_plain_jpeg(broken, sniff(broken)) is None
    with pytest.raises(DecodeError) as direct:
        decode_image(broken, "RGB")
    monkeypatch.setattr(_pillow, "_decode_plain_jpeg", lambda data, header: None)
    with pytest.raises(DecodeError) as opened:
        decode_image(broken, "RGB")
    assert str(direct.value) == str(opened.value)


def test_with_padding_needs_channels_innermost() -> None:
    """Planes 4 bytes apart (channel stride not 1) are not pixels with padding: left as they are."""
    planes = torch.zeros(1, 3, 2, 12, dtype=torch.uint8)[..., ::4]  # [1, 3, 2, 3], column stride 4, planar
    assert planes.stride(3) == 4 and planes.stride(1) != 1
    assert _with_padding(planes) is planes


# ---- Pillow releases before 10/11 (pyproject allows pillow>=9; checked by hand with 9.5: tests/test_images.py passes)


def test_sixteen_bit_gray_png_as_pillow_9_opens_it() -> None:
    """Pillow < 10 opens a 16-bit gray PNG in mode "I" (32-bit): read as 16-bit samples, not refused."""
    image = Image.fromarray(np.array([[0, 257, 65535]], dtype=np.int32), "I")
    image.format = "PNG"
    array, depth = _pillow._pixels(image)
    assert depth == 16 and array[..., 0].tolist() == [[0, 257, 65535]]
    image.format = "TIFF"  # a 32-bit integer image of another format keeps being refused
    with pytest.raises(_pillow.PillowError, match="32-bit integer"):
        _pillow._pixels(image)


def test_retiled_keeps_the_tile_type() -> None:
    from PIL import ImageFile

    plain = ("zip", (0, 0, 4, 4), 33, "RGB;16B")
    assert _pillow._retiled(plain, "RGB;16L") == ("zip", (0, 0, 4, 4), 33, "RGB;16L")
    named_type = getattr(ImageFile, "_Tile", None)
    if named_type is not None:  # Pillow >= 11
        named = named_type("zip", (0, 0, 4, 4), 33, "RGB;16B")
        again = _pillow._retiled(named, "RGB;16L")
        assert type(again) is named_type and again.args == "RGB;16L"
