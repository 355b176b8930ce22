"""tfr_torch.tfds.image_steps: the images of one record's Sequence decoded together (RLDS episodes' steps) give the
pixels that decoding them one by one gives, or step aside (None) so the per-image path decodes them."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset

import tfr_torch
from tfr_torch.tfds.image_steps import decode_steps, decode_threads

simplejpeg = pytest.importorskip("simplejpeg")
GOLDEN = Path(__file__).parent / "data" / "tfds" / "rlds" / "rlds_golden" / "1.0.0"  # test_tfds_rlds.py's folder


def encoded(array, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    (array if isinstance(array, Image.Image) else Image.fromarray(array)).save(out, fmt, **kwargs)
    return out.getvalue()


def pictures(n: int, h: int, w: int, c: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 3) % 256, (y * 2) % 256, (x + y) % 256, (x * y) % 256], -1)[:, :, :c]
    return [np.clip(base + rng.integers(-20, 21, (h, w, c)), 0, 255).astype(np.uint8).squeeze() for _ in range(n)]


def one_by_one_jpeg(data: bytes, gray: bool) -> torch.Tensor:
    """TFDS's JPEG pixels, as the per-image path gives them: fast integer IDCT, fancy upsampling."""
    array = simplejpeg.decode_jpeg(data, colorspace="GRAY" if gray else "RGB", fastdct=True, fastupsample=False)
    return torch.from_numpy(np.ascontiguousarray(array.reshape(*array.shape[:2], -1).transpose(2, 0, 1)))


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("channels", [1, 3])
def test_jpegs_equal_the_per_image_pixels(threads, channels):
    # 12 images of 160x160x3 (~900 KB decoded): with 4 threads, the sequence is cut in 3 chunks
    items = [encoded(a, "JPEG", quality=85) for a in pictures(12, 160, 160, 3)]
    got = decode_steps(items, channels, threads)
    want = torch.stack([one_by_one_jpeg(d, channels == 1) for d in items])
    assert got is not None and got.dtype == torch.uint8 and got.is_contiguous()
    assert got.shape == (12, channels, 160, 160) and torch.equal(got, want)


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_pngs_equal_decode_image(threads, channels):
    items = [encoded(a, "PNG") for a in pictures(12, 150, 170, channels, seed=channels)]
    got = decode_steps(items, channels, threads)
    want = torch.stack([tfr_torch.decode_image(d) for d in items])
    assert got is not None and got.shape == (12, channels, 150, 170) and torch.equal(got, want)


def test_cmyk_jpegs_as_the_per_image_path_gives_them():
    items = [encoded(Image.fromarray(p).convert("CMYK"), "JPEG") for p in pictures(2, 8, 8, 3)]
    got = decode_steps(items, 3)
    assert got is not None and torch.equal(got, torch.stack([one_by_one_jpeg(d, False) for d in items]))


def test_png_with_a_transparent_colour_keeps_its_channels():
    items = [encoded(a, "PNG", transparency=(5, 5, 5)) for a in pictures(3, 8, 9, 3)]
    got = decode_steps(items, 3)
    assert got is not None and torch.equal(got, torch.stack([tfr_torch.decode_image(d) for d in items]))


@pytest.mark.parametrize("case", ["sizes", "formats", "corrupt", "palette", "channels", "16-bit", "empty"])
def test_what_it_leaves_to_the_per_image_path(case):
    jpegs = [encoded(a, "JPEG") for a in pictures(3, 16, 20, 3)]
    items: list[bytes] = jpegs
    channels = 3
    if case == "sizes":
        items = jpegs[:2] + [encoded(pictures(1, 16, 21, 3)[0], "JPEG")]
    elif case == "formats":
        items = jpegs[:2] + [encoded(pictures(1, 16, 20, 3)[0], "PNG")]
    elif case == "corrupt":
        items = jpegs[:2] + [jpegs[2][: len(jpegs[2]) // 2]]
    elif case == "palette":
        items = [encoded(a, "PNG") for a in (Image.fromarray(p).convert("P") for p in pictures(2, 8, 8, 3))]
    elif case == "channels":
        channels = 2
    elif case == "16-bit":
        items = [encoded(np.full((4, 4), 300, np.uint16), "PNG")]
        channels = 1
    elif case == "empty":
        items = []
    assert decode_steps(items, channels) is None


def test_decode_threads_default_and_override(monkeypatch):
    monkeypatch.delenv("TFR_TORCH_DECODE_THREADS", raising=False)
    assert 1 <= decode_threads(None) <= 8
    assert decode_threads(0) == 1 and decode_threads(3) == 3
    monkeypatch.setenv("TFR_TORCH_DECODE_THREADS", "2")
    assert decode_threads(None) == 2
    monkeypatch.setenv("TFR_TORCH_DECODE_THREADS", "many")
    with pytest.raises(ValueError, match=r"TFR_TORCH_DECODE_THREADS must be an integer \(threads; 0 or 1: no pool\), "
                                         r"got 'many'"):
        decode_threads(None)


class _ThreadsInWorker(IterableDataset):
    def __iter__(self):
        yield decode_threads(None)


def test_no_pool_inside_dataloader_workers(monkeypatch):
    monkeypatch.delenv("TFR_TORCH_DECODE_THREADS", raising=False)
    assert list(DataLoader(_ThreadsInWorker(), batch_size=None, num_workers=1)) == [1]


def test_decoder_option_is_checked():
    info = tfr_torch.tfds.read_info(GOLDEN)
    with pytest.raises(ValueError, match=r"decode_threads must be None or an int >= 0, got -1"):
        tfr_torch.tfds.TFDSDecoder(info, decode_threads=-1)


@pytest.mark.filterwarnings("ignore:.*have no index:UserWarning")
def test_episodes_equal_with_and_without_threads():
    info = tfr_torch.tfds.read_info(GOLDEN)
    runs = [list(tfr_torch.TFRecordDataset(GOLDEN, split="train", features=tfr_torch.tfds.TFDSDecoder(
        info, decode_threads=n))) for n in (0, 4)]
    assert len(runs[0]) == len(runs[1]) > 0
    for a, b in zip(*runs):
        for key in ("image", "wrist_image"):
            x, y = a["steps"]["observation"][key], b["steps"]["observation"][key]
            assert isinstance(x, torch.Tensor) and torch.equal(x, y)
