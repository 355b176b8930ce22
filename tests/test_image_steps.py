"""tfr_torch.tfds.image_steps: the images of one record's Sequence decoded together (RLDS episodes' steps) give the
pixels that decoding them one by one gives, or step aside (None) so the per-image path decodes them."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, IterableDataset

import tfr_torch
from tfr_torch import _native
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


# ----- PNGs through the compiled core (png_decode_many) against Pillow, the reference ----------------------------

def png_chunk(kind: bytes, body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")


def raw_png(h: int, w: int, colour: int, seed: int, idat_pieces: int = 1, extra: tuple[bytes, ...] = ()) -> bytes:
    """A PNG of random filtered rows: every row a random filter type (0-4) and random bytes, so the decoders must
    agree on each filter's arithmetic (whatever image it gives); the zlib stream cut into `idat_pieces` IDATs."""
    rng = np.random.default_rng(seed)
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
    rows = [bytes([int(rng.integers(0, 5))]) + rng.integers(0, 256, w * channels, dtype=np.uint8).tobytes()
            for _ in range(h)]
    stream = zlib.compress(b"".join(rows), int(rng.integers(0, 10)))
    cuts = np.linspace(0, len(stream), idat_pieces + 1).astype(int)
    header = png_chunk(b"IHDR", w.to_bytes(4, "big") + h.to_bytes(4, "big") + bytes([8, colour, 0, 0, 0]))
    idats = b"".join(png_chunk(b"IDAT", stream[a:b]) for a, b in zip(cuts[:-1], cuts[1:]))
    return b"\x89PNG\r\n\x1a\n" + header + b"".join(extra) + idats + png_chunk(b"IEND", b"")


def pillow_pixels(items: list[bytes]) -> torch.Tensor:
    return torch.stack([tfr_torch.decode_image(d) for d in items])


def both_backends(items: list[bytes], channels: int):
    previous = tfr_torch.set_backend("python")
    try:
        reference = decode_steps(items, channels, 1)
    finally:
        tfr_torch.set_backend(previous)
    return decode_steps(items, channels, 1), reference


needs_core = pytest.mark.skipif(not hasattr(getattr(_native, "_compiled", None), "png_decode_many"),
                                reason="the compiled core (with zlib) is not built")


@needs_core
@pytest.mark.parametrize("colour, channels", [(0, 1), (2, 3), (6, 4)])
@pytest.mark.parametrize("pieces", [1, 3])
def test_png_kernel_equals_pillow_on_every_filter(colour, channels, pieces):
    items = [raw_png(9, 13, colour, seed, pieces) for seed in range(8)]
    gamma = png_chunk(b"gAMA", (45455).to_bytes(4, "big"))  # a chunk that changes nothing Pillow gives
    items.append(raw_png(9, 13, colour, 99, pieces, (gamma,)))
    core = _native._compiled
    out = np.zeros((len(items), 9, 13, channels), np.uint8)
    assert core.png_decode_many(items, out, 13, 9, colour) == (-1, 0)
    got, reference = both_backends(items, channels)
    want = pillow_pixels(items)
    assert torch.equal(torch.from_numpy(out).permute(0, 3, 1, 2), want)
    assert got is not None and reference is not None and torch.equal(got, want) and torch.equal(reference, want)


@needs_core
def test_png_kernel_refuses_what_pillow_may_read_otherwise():
    core = _native._compiled
    plain = raw_png(4, 5, 2, 0)
    trns = raw_png(4, 5, 2, 0, extra=(png_chunk(b"tRNS", b"\x00\x01\x00\x02\x00\x03"),))
    text = raw_png(4, 5, 2, 0, extra=(png_chunk(b"tEXt", b"k\x00v"),))
    size = (5).to_bytes(4, "big") + (4).to_bytes(4, "big")
    interlaced = plain.replace(png_chunk(b"IHDR", size + bytes([8, 2, 0, 0, 0])),
                               png_chunk(b"IHDR", size + bytes([8, 2, 0, 0, 1])))
    bad_crc = plain[:-5] + bytes([plain[-5] ^ 1]) + plain[-4:]
    for i, (data, reason) in enumerate([(trns, 4), (text, 4), (interlaced, 2), (bad_crc, 3), (plain + b"\x00", 4),
                                        ("not bytes", 1)]):
        out = np.zeros((2, 4, 5, 3), np.uint8)
        assert core.png_decode_many([plain, data], out, 5, 4, 2) == (1, reason), i
    with pytest.raises(ValueError, match="do not fill"):
        core.png_decode_many([plain], np.zeros(10, np.uint8), 5, 4, 2)
    # refused by the core, the sequence still decodes through Pillow, as the pure-Python backend decodes it
    got, reference = both_backends([plain, trns, text], 3)
    assert got is not None and torch.equal(got, reference) and torch.equal(got, pillow_pixels([plain, trns, text]))


@needs_core
def test_png_kernel_is_never_more_lenient_than_pillow():
    """Every byte of a small PNG changed, and every truncation: the sequence decodes through the core exactly as
    it decodes with the pure-Python backend (same pixels, or None for both: the per-image path's errors)."""
    good = raw_png(3, 4, 2, 5, idat_pieces=2)
    cases = [good[:k] for k in range(len(good))]
    cases += [good[:k] + bytes([good[k] ^ flip]) + good[k + 1 :] for k in range(len(good)) for flip in (1, 0x80)]
    for k, data in enumerate(cases):
        got, reference = both_backends([good, data], 3)
        assert (got is None) == (reference is None), k
        assert got is None or torch.equal(got, reference), k
