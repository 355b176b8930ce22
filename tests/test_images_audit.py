"""An audit of the image family, adversarial and randomized (seeded): the JPEG structure check that runs before GPU
decoding against the CPU decoder on damaged, cut, progressive, restart-marker and gray JPEGs (it must refuse exactly
what the CPU path refuses among the JPEGs a GPU batch takes); lying headers; ImageTransform's modes, normalization and
crops against a straightforward reference; DecodeImages errors and crops in DataLoader workers; DeviceLoader's state
across epochs, resume with a background thread and workers, the end of an epoch and an abandoned iteration; a
lenient GPU decoder stand-in that must never get bytes the CPU path refuses."""

from __future__ import annotations

import gc
import io
import re
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader

from cuda_standin import pretend_cuda

import tfr_torch
from tfr_torch.errors import DecodeError
from tfr_torch.images import DecodeImages, DeviceLoader, ImageTransform, decode_image
from tfr_torch.images import _accel, _nvimgcodec
from tfr_torch.images import decode as decode_module
from tfr_torch.images import loader as loader_module
from tfr_torch.images._formats import sniff
from tfr_torch.images._jpeg import jpeg_problem

SPEC = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "label": tfr_torch.FixedLenFeature([], torch.int64)}


def noise_jpeg(width: int = 120, height: int = 90, *, seed: int = 7, gray: bool = False, **options) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width) if gray else (height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90, **options)
    return buf.getvalue()


def segments(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, marker, length) of each marker segment up to and including the first scan header."""
    out, pos = [], 2
    while True:
        marker, length = data[pos + 1], data[pos + 2] << 8 | data[pos + 3]
        out.append((pos, marker, length))
        if marker == 0xDA:
            return out
        pos += 2 + length


def first(data: bytes, marker: int) -> int:
    return next(pos for pos, m, _ in segments(data) if m == marker)


def put(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value):]


def cpu_decodes(data: bytes) -> bool:
    try:
        decode_image(data, "RGB", backend="pillow")
    except DecodeError:
        return False
    return True


def goes_to_a_gpu_decoder(data: bytes) -> bool:
    """Whether a GPU batch would hand these bytes to its decoder (after the structure check): a plain JPEG."""
    return decode_module._plain_jpeg(sniff(data))


BASES = {
    "baseline 4:2:0": lambda: noise_jpeg(),
    "baseline 4:4:4": lambda: noise_jpeg(subsampling=0),
    "baseline 4:2:2": lambda: noise_jpeg(subsampling=1),
    "gray": lambda: noise_jpeg(gray=True),
    "restart markers": lambda: noise_jpeg(restart_marker_blocks=3),
    "progressive": lambda: noise_jpeg(progressive=True),
    "gray progressive": lambda: noise_jpeg(gray=True, progressive=True),
}


def damaged(data: bytes, count: int, seed: int) -> list[bytes]:
    """Header damage: a byte replaced, a segment dropped or repeated, bytes inserted (up to the first scan's data)."""
    rng = np.random.default_rng(seed)
    parts = segments(data)
    end = parts[-1][0] + 2 + parts[-1][2]
    out = []
    for _ in range(count):
        kind = int(rng.integers(0, 6))
        if kind <= 2:
            at = int(rng.integers(2, end))
            out.append(put(data, at, bytes([int(rng.integers(0, 256))])))
        elif kind == 3:
            pos, _, length = parts[int(rng.integers(0, len(parts) - 1))]
            out.append(data[:pos] + data[pos + 2 + length:])
        elif kind == 4:
            pos, _, length = parts[int(rng.integers(0, len(parts) - 1))]
            where = parts[int(rng.integers(0, len(parts)))][0]
            out.append(data[:where] + data[pos: pos + 2 + length] + data[where:])
        else:
            at = int(rng.integers(2, end))
            out.append(data[:at] + bytes(rng.integers(0, 256, int(rng.integers(1, 4))).astype(np.uint8)) + data[at:])
    return out


# ---- the JPEG structure check against the CPU decoder ----------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(BASES))
def test_the_check_accepts_exactly_what_the_cpu_decoder_decodes_among_damaged_jpegs(kind):
    """A differential on header damage: of the JPEGs a GPU batch hands its decoder, the structure check accepts
    every one the CPU path decodes and refuses every one it refuses (no pixels from a lenient GPU decoder for bytes
    the CPU path rejects; no error for bytes it decodes)."""
    base = BASES[kind]()
    refused, disagreements = 0, []
    for data in damaged(base, 450, seed=sorted(BASES).index(kind)):
        if not goes_to_a_gpu_decoder(data):
            continue
        problem = jpeg_problem(data)
        refused += problem is not None
        if (problem is None) != cpu_decodes(data):
            disagreements.append((problem, data))
    assert refused > 40  # the damage reached the checks
    assert not disagreements, [problem for problem, _ in disagreements[:5]]


WRITER_OPTIONS = {
    "optimized tables": dict(optimize=True), "progressive, optimized": dict(progressive=True, optimize=True),
    "RGB colour space": dict(keep_rgb=True), "4:1:1": dict(subsampling="4:1:1"),
    "a comment holding an end-of-image marker": dict(comment=b"x \xff\xd9 y"),
    "a 70 kB ICC profile in several APP2 segments": dict(icc_profile=bytes(70000)),
    "quality 1": dict(quality=1), "quality 100": dict(quality=100),
    "progressive with restart markers": dict(progressive=True, restart_marker_rows=2),
}


@pytest.mark.parametrize("size", [(1, 1), (1000, 3), (17, 9)])
@pytest.mark.parametrize("options", sorted(WRITER_OPTIONS))
def test_the_check_accepts_every_kind_of_jpeg_pillow_writes(options, size):
    """The stricter checks above refuse nothing a common encoder writes: libjpeg's options through Pillow."""
    rng = np.random.default_rng(3)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(
        buf, "JPEG", **{"quality": 90, **WRITER_OPTIONS[options]})
    data = buf.getvalue()
    assert jpeg_problem(data) is None and cpu_decodes(data) and goes_to_a_gpu_decoder(data)


def scan_parameters(data: bytes, values: bytes) -> bytes:
    """`data` with its first scan's Ss, Se, Ah/Al replaced."""
    sos = first(data, 0xDA)
    return put(data, sos + 5 + 2 * data[sos + 4], values)


def sampling(data: bytes, component: int, value: int) -> bytes:
    return put(data, first(data, 0xC0) + 11 + 3 * component, bytes([value]))


def without_first_huffman_table(data: bytes) -> bytes:
    pos, _, length = next(s for s in segments(data) if s[1] == 0xC4)
    return data[:pos] + data[pos + 2 + length:]


def header_faults() -> dict[str, tuple[bytes, str]]:
    """JPEGs whose headers libjpeg refuses (checked below against the CPU path) and what the check says."""
    base, progressive = noise_jpeg(), noise_jpeg(progressive=True)
    sof, sos, psos = first(base, 0xC0), first(base, 0xDA), first(progressive, 0xDA)
    gray = noise_jpeg(gray=True)
    dht = [pos for pos, m, _ in segments(gray) if m == 0xC4][1]
    scan = (f"marker segment 0xffda at byte {psos}: a progressive scan of coefficients {{}} (libjpeg: DC scans 0-0, "
            f"AC scans of one component within 1-63, refinements of one bit, at most 13)")
    return {
        "fractional sampling": (sampling(base, 2, 0x31), f"marker segment 0xffc0 at byte {sof}: component 1's "
                                "sampling factors 2x2 do not divide the largest, 3x2 (libjpeg refuses fractional "
                                "sampling)"),
        "11 blocks per MCU": (sampling(base, 0, 0x33), f"marker segment 0xffda at byte {sos}: an interleaved scan "
                              f"of 11 or more blocks per MCU (libjpeg decodes at most 10)"),
        "16 blocks per MCU": (sampling(base, 2, 0x44), f"marker segment 0xffda at byte {sos}: an interleaved scan "
                              f"of 21 or more blocks per MCU (libjpeg decodes at most 10)"),
        "progressive DC scan to 1": (scan_parameters(progressive, b"\x00\x01\x00"),
                                     scan.format("0-1, bits 0-0, 3 component(s)")),
        "progressive AC scan of 3 components": (scan_parameters(progressive, b"\x01\x3f\x00"),
                                                scan.format("1-63, bits 0-0, 3 component(s)")),
        "progressive Ss after Se": (scan_parameters(progressive, b"\x05\x04\x00"),
                                    scan.format("5-4, bits 0-0, 3 component(s)")),
        "progressive Se 64": (scan_parameters(progressive, b"\x01\x40\x00"),
                              scan.format("1-64, bits 0-0, 3 component(s)")),
        "progressive Al 14": (scan_parameters(progressive, b"\x00\x00\x0e"),
                              scan.format("0-0, bits 0-14, 3 component(s)")),
        "progressive without its DC table": (without_first_huffman_table(progressive), (
            f"marker segment 0xffda at byte {psos - 28}: the scan uses DC Huffman table 0, which is not defined")),
        "sequential scan with a DC table of 9": (put(base, sos + 10, b"\x91\x11\x00"),
                                                 f"marker segment 0xffda at byte {sos}: the scan's component 3 uses "
                                                 f"Huffman table 9 (0-3)"),
        "DAC of an odd length": (put(gray, dht + 1, b"\xcc"),
                                 f"marker segment 0xffcc at byte {dht}: arithmetic conditioning of 179 bytes (pairs)"),
        "DAC with L over U": (gray[:dht] + b"\xff\xcc\x00\x06\x10\x05\x00\x12" + gray[dht:], (
            f"marker segment 0xffcc at byte {dht}: arithmetic conditioning table 0 with value 18 (0-15: L <= U; "
            f"16-31)")),
        "DAC of table 32": (gray[:dht] + b"\xff\xcc\x00\x04\x20\x05" + gray[dht:], (
            f"marker segment 0xffcc at byte {dht}: arithmetic conditioning table 32 with value 5 (0-15: L <= U; "
            f"16-31)")),
        "DRI of 181 bytes": (put(gray, dht + 1, b"\xdd"),
                             f"marker segment 0xffdd at byte {dht}: a restart interval of 179 bytes (2)"),
        "65501 pixels wide": (put(base, sof + 7, (65501).to_bytes(2, "big")), (
            f"marker segment 0xffc0 at byte {sof}: an image of 65501x90 pixels (libjpeg decodes at most 65500 a "
            f"side)")),
    }


@pytest.mark.parametrize("case", sorted(header_faults()))
def test_the_check_refuses_the_headers_libjpeg_refuses(case):
    """Header faults that the check let through (so a GPU batch could return pixels for them) while libjpeg, the CPU
    path, refuses them: each is refused with what is wrong and where, and the CPU path refuses it too."""
    data, message = header_faults()[case]
    assert jpeg_problem(data) == message
    assert not cpu_decodes(data)


def test_a_stuffed_zero_where_a_marker_is_expected_is_skipped_as_libjpeg_skips_it():
    """libjpeg's next_marker discards 0xFF 0x00 between segments (extraneous data, a warning), and the CPU path
    decodes the file: the check must not refuse it (a GPU batch would raise DecodeError for a decodable image)."""
    gray = noise_jpeg(gray=True)
    dht = [pos for pos, m, _ in segments(gray) if m == 0xC4][1]
    data = gray[:dht] + b"\xff\x00" + gray[dht:]
    assert cpu_decodes(data) and goes_to_a_gpu_decoder(data)
    assert jpeg_problem(data) is None
    assert torch.equal(decode_image(data), decode_image(gray))


@pytest.mark.parametrize("kind", ["restart markers", "progressive", "gray progressive"])
def test_every_cut_is_refused_by_the_check_and_the_cpu_path(kind):
    data = {"restart markers": lambda: noise_jpeg(48, 40, restart_marker_blocks=2),
            "progressive": lambda: noise_jpeg(48, 40, progressive=True, restart_marker_rows=1),
            "gray progressive": lambda: noise_jpeg(48, 40, gray=True, progressive=True)}[kind]()
    assert jpeg_problem(data) is None and cpu_decodes(data)
    assert [cut for cut in range(len(data)) if jpeg_problem(data[:cut]) is None] == []
    assert [cut for cut in range(0, len(data), 7) if cpu_decodes(data[:cut])] == []


@pytest.fixture
def lenient_gpu(monkeypatch):
    """A "cuda" device that is the CPU and an nvImageCodec stand-in that returns pixels for any bytes it is given
    (a lenient GPU decoder: zeros of the header's size); returns the list of batches it decoded."""
    pretend_cuda(monkeypatch)
    monkeypatch.setattr(_accel, "torchvision_io", lambda: None)
    monkeypatch.setattr(_accel, "torchcodec_decoders", lambda: None)
    monkeypatch.setattr(_nvimgcodec, "api", lambda: object())
    monkeypatch.setattr(loader_module, "streams_for", lambda device: loader_module.Streams())
    decoded: list[list[bytes]] = []

    def decode(backend, items, gray, device, regions=None, stream=None):
        decoded.append(list(items))
        return [torch.zeros((1 if gray else 3, sniff(d).height, sniff(d).width), dtype=torch.uint8) for d in items]

    monkeypatch.setattr(_accel, "decode_jpegs_gpu", decode)
    return decoded


def test_a_lenient_gpu_decoder_never_gets_a_jpeg_the_cpu_path_refuses(lenient_gpu, tmp_path):
    """DeviceLoader on a GPU with nvImageCodec named (progressive JPEGs go to the GPU then): a JPEG whose scan header
    libjpeg refuses is decoded on the CPU instead, whose DecodeError names its record: no GPU call, no pixels."""
    good, bad = noise_jpeg(64, 48, progressive=True), scan_parameters(noise_jpeg(64, 48, progressive=True),
                                                                       b"\x01\x3f\x00")
    assert not cpu_decodes(bad) and goes_to_a_gpu_decoder(bad)
    path = str(tmp_path / "gpu.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(4):
            writer.write_example({"image/encoded": bad if k == 2 else good, "label": k})
    data = tfr_torch.TFRecordDataset(path, SPEC, batch_size=2)
    loader = DeviceLoader(DataLoader(data, batch_size=None), "cuda", transform=ImageTransform(16, train=False),
                          backend="nvimgcodec", thread=False, prefetch=0)
    got = []
    # decoded on the CPU instead: the CPU path's own error
    with pytest.raises(DecodeError, match=r"^cannot decode image epoch 0, batch 1, item 0 \(\d+ bytes\): corrupt or "
                                          r"truncated JPEG: "):
        for batch in loader:
            got.append(batch["label"].tolist())
    assert got == [[0, 1]] and all(bad not in items for items in lenient_gpu)


# ---- lying headers ---------------------------------------------------------------------------------------------------

def test_headers_that_claim_huge_images_are_decode_errors():
    """A few hundred bytes claiming billions of pixels: refused by Pillow's decompression-bomb limit, as DecodeError
    naming the image (no allocation of the claimed size)."""
    base = noise_jpeg(16, 16)
    sof = first(base, 0xC0)
    huge_jpeg = put(base, sof + 5, (65500).to_bytes(2, "big") + (65500).to_bytes(2, "big"))
    png = io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    raw = png.getvalue()
    import zlib

    ihdr = (100000).to_bytes(4, "big") + (100000).to_bytes(4, "big") + raw[24:29]
    huge_png = raw[:16] + ihdr + zlib.crc32(b"IHDR" + ihdr).to_bytes(4, "big") + raw[33:]
    for name, data in (("huge.jpg", huge_jpeg), ("huge.png", huge_png)):
        with pytest.raises(DecodeError, match=rf"^cannot decode image {name} \({len(data)} bytes\): corrupt or "
                                              rf"truncated (JPEG|PNG): .*exceeds limit"):
            decode_image(data, name=name)


def huge_images() -> dict[str, bytes]:
    base = noise_jpeg(16, 16)
    sof = first(base, 0xC0)
    png = io.BytesIO()
    Image.new("RGB", (4, 4)).save(png, "PNG")
    raw = png.getvalue()
    import zlib

    ihdr = (100000).to_bytes(4, "big") + (100000).to_bytes(4, "big") + raw[24:29]
    lossy = bytearray(read_src("webp_lossy.webp"))  # a VP8 key frame: 14-bit width and height at 26-29
    assert lossy[12:16] == b"VP8 " and lossy[23:26] == b"\x9d\x01\x2a"
    lossy[26:30] = (16383).to_bytes(2, "little") * 2
    lossless = bytearray(read_src("webp_lossless_rgb.webp"))  # VP8L: width-1 and height-1, 14 bits each, at 21
    assert lossless[12:16] == b"VP8L" and lossless[20] == 0x2F
    bits = int.from_bytes(lossless[21:25], "little") & ~((1 << 28) - 1) | 16382 | 16382 << 14
    lossless[21:25] = bits.to_bytes(4, "little")
    canvas = bytearray(b"RIFF\x00\x00\x00\x00WEBPVP8X\x0a\x00\x00\x00" + bytes(4)
                       + (16383).to_bytes(3, "little") * 2)  # an extended WebP's canvas, width-1 and height-1
    canvas[4:8] = (len(canvas) - 8).to_bytes(4, "little")
    return {"huge.jpg": put(base, sof + 5, (65500).to_bytes(2, "big") + (65500).to_bytes(2, "big")),
            "huge.png": raw[:16] + ihdr + zlib.crc32(b"IHDR" + ihdr).to_bytes(4, "big") + raw[33:],
            "huge-lossy.webp": bytes(lossy), "huge-lossless.webp": bytes(lossless), "huge-canvas.webp": bytes(canvas)}


def read_src(name: str) -> bytes:
    import os

    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "images", "src", name), "rb") as f:
        return f.read()


def test_images_over_pillows_limit_go_to_pillow_whatever_decodes_the_rest(monkeypatch):
    """torchvision, TorchCodec and the GPU decoders have no decompression-bomb check: with torchvision installed,
    the huge JPEG above was decoded into the 12.9 GB its header claims (seen on a GPU machine). Images over
    MAX_IMAGE_PIXELS go to Pillow from every backend and device, so its check holds."""
    def refuse(*args, **kwargs):
        raise AssertionError("an image over Pillow's limit reached another decoder")

    monkeypatch.setattr(_accel, "torchvision_io", lambda: object())
    monkeypatch.setattr(_accel, "torchcodec_decoders", lambda: object())
    monkeypatch.setattr(_accel, "decode_cpu", refuse)
    monkeypatch.setattr(_accel, "decode_jpegs_gpu", refuse)
    images = huge_images()
    assert sniff(images["huge.jpg"]).area == 65500 * 65500 and sniff(images["huge.png"]).area == 100000 * 100000
    assert sniff(images["huge-lossy.webp"]).area == 16383 * 16383 == sniff(images["huge-lossless.webp"]).area
    assert sniff(images["huge-canvas.webp"]).area == 16384 * 16384
    for name, data in images.items():
        for backend in ("auto", "torchvision", "torchcodec"):
            for device in ("cpu", "cuda"):
                assert tfr_torch.images.choose_backend(data, backend, device) == "pillow", (name, backend, device)
            with pytest.raises(DecodeError, match=rf"^cannot decode image {name} .*exceeds limit"):
                decode_image(data, name=name, backend=backend)
    pretend_cuda(monkeypatch)
    with pytest.raises(DecodeError, match=r"^cannot decode image huge.jpg .*exceeds limit"):
        decode_image([images["huge.jpg"]], "RGB", device="cuda", backend="torchvision", name=["huge.jpg"])
    small = noise_jpeg(16, 16)  # under the limit, the installed decoder is chosen as before
    assert tfr_torch.images.choose_backend(small, "auto") == "torchvision"
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    assert tfr_torch.images.choose_backend(small, "auto") == "pillow"  # the limit is read at each call
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # Pillow's check turned off: so is ours
    assert tfr_torch.images.choose_backend(images["huge.jpg"], "auto") == "torchvision"


def gray_palette_gif(frames: int = 1, **options) -> bytes:
    """A GIF whose palette is the 256 grays in order: Pillow opens it as mode L, not P."""
    rows = np.tile(np.arange(256, dtype=np.uint8), (4, 1))
    images = [Image.fromarray(np.roll(rows, 7 * k, axis=1), "L") for k in range(frames)]
    buf = io.BytesIO()
    images[0].save(buf, "GIF", save_all=frames > 1, append_images=images[1:], optimize=False, **options)
    return buf.getvalue()


def test_a_gif_with_a_gray_palette_is_rgb_and_its_transparent_index_is_alpha():
    """The contract: GIF is RGB, its transparent index alpha in the *_ALPHA modes. A GIF with a gray palette (Pillow
    opens it as L) gave 1 channel in UNCHANGED (the converters' image/channels said 3) and an opaque alpha."""
    from tfr_torch.images.encode import image_info

    plain, keyed = gray_palette_gif(), gray_palette_gif(transparency=5)
    assert Image.open(io.BytesIO(plain)).mode == "L"
    values = torch.from_numpy(np.tile(np.arange(256, dtype=np.uint8), (4, 1)))
    for data in (plain, keyed):
        assert torch.equal(decode_image(data), values.expand(3, 4, 256))
        assert torch.equal(decode_image(data, "GRAY"), values[None])
        assert image_info(Image.open(io.BytesIO(data)), data)[2] == decode_image(data).shape[0] == 3
    alpha = decode_image(keyed, "RGB_ALPHA")[3]
    assert torch.equal(alpha, torch.where(values == 5, 0, 255).to(torch.uint8))
    assert torch.equal(decode_image(plain, "GRAY_ALPHA")[1], torch.full((4, 256), 255, dtype=torch.uint8))
    animated = decode_image(gray_palette_gif(3), all_frames=True)
    assert animated.shape == (3, 3, 4, 256)
    assert torch.equal(animated[2, 0], values.roll(14, dims=1))


# ---- ImageTransform --------------------------------------------------------------------------------------------------

def test_a_transform_whose_mean_and_std_do_not_fit_its_mode_is_refused_when_made():
    """ImageTransform(mode="GRAY") kept ImageNet's three means and failed at the first batch with torch's "output
    with shape [1, 16, 16] doesn't match the broadcast shape [3, 16, 16]"; now it is refused when made."""
    with pytest.raises(ValueError, match=r"^mean and std need one value per channel of mode 'GRAY' \(1\) or one for "
                                         r"all, got mean=\(0.485, 0.456, 0.406\), std=\(0.229, 0.224, 0.225\)$"):
        ImageTransform(16, mode="GRAY")
    with pytest.raises(ValueError, match=r"mode 'RGB_ALPHA' \(4\)"):
        ImageTransform(16, mode="RGB_ALPHA", train=False)
    with pytest.raises(ValueError, match=r"got mean=\(0.5, 0.5\), std=\(0.1,\)$"):
        ImageTransform(16, mean=(0.5, 0.5), std=(0.1,))
    with pytest.raises(ValueError, match=r"^mode must be one of "):
        ImageTransform(16, mode="CMYK")
    ImageTransform(16, mode="GRAY", mean=(0.5,), std=(0.25,))
    ImageTransform(16, mode="GRAY", dtype=torch.uint8, mean=None, std=None)
    ImageTransform(16, mean=(0.5,), std=(0.25,))  # one value for every channel


def rgb_jpeg(k: int) -> bytes:
    rng = np.random.default_rng(100 + k)
    height, width = 30 + 7 * (k % 4), 44 + 5 * (k % 3)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([(x * 6 + k) % 256, (y * 5) % 256, (x + y) % 256], -1) + rng.integers(0, 12, (height, width, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=92)
    return buf.getvalue()


def alpha_png(k: int) -> bytes:
    rng = np.random.default_rng(200 + k)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (26 + k, 35, 4), np.uint8), "RGBA").save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("mode, mean, std", [("GRAY", (0.5,), (0.25,)), ("RGB", (0.485, 0.456, 0.406),
                                                                          (0.229, 0.224, 0.225)),
                                             ("RGB_ALPHA", (0.4, 0.5, 0.6, 0.5), (0.2, 0.3, 0.25, 0.5)),
                                             ("RGB", None, None)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("channels_last", [True, False])
def test_batches_equal_a_straightforward_reference(mode, mean, std, dtype, channels_last):
    """Every mode, dtype and layout against decode_image, a crop, torch's antialiased resize, a flip and
    (x - mean * 255) * (1 / (std * 255)) (or x / 255) in float32, then the dtype: bit for bit (bfloat16 rounded to
    nearest even), and within float error of (x / 255 - mean) / std."""
    if dtype == torch.uint8 and mean is not None:
        mean = std = None
    items = [rgb_jpeg(0), alpha_png(1), rgb_jpeg(2), rgb_jpeg(3)]
    transform = ImageTransform(12, train=True, seed=9, mode=mode, mean=mean, std=std, dtype=dtype,
                               channels_last=channels_last)
    out = DecodeImages(transform, index="id")({"image/encoded": items, "id": torch.arange(40, 44)})["image/encoded"]
    channels = {"GRAY": 1, "RGB": 3, "RGB_ALPHA": 4}[mode]
    assert out.shape == (4, channels, 12, 12) and out.dtype == dtype
    assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    images = [decode_image(data, mode) for data in items]
    boxes, flips = transform.plan([tuple(image.shape[-2:]) for image in images], 0, 0, range(40, 44))
    for image, box, flip, got in zip(images, boxes, flips, out):
        top, left, h, w = (int(round(v)) for v in box)
        want = F.interpolate(image[None, :, top:top + h, left:left + w].contiguous(), size=(12, 12),
                             mode="bilinear", antialias=True)[0]
        want = want.flip(-1) if flip else want
        if dtype == torch.uint8:
            assert torch.equal(got, want)
            continue
        if mean is None:
            exact = want.float() * (1.0 / 255.0)
            loose = want.float() / 255.0
        else:
            m, s = torch.tensor(mean)[:, None, None], torch.tensor(std)[:, None, None]
            exact = (want.float() - m * 255.0) * (1.0 / (s * 255.0))
            loose = (want.float() / 255.0 - m) / s
        assert torch.equal(got, exact.to(dtype))
        assert torch.allclose(got.float(), loose, atol=1e-5 if dtype == torch.float32 else 2e-2)


def test_crops_of_tiny_and_extreme_images_stay_inside_them():
    """Random-resized-crop and centre-crop boxes of 1-pixel, very wide and very tall images lie inside the image and
    resize to the batch (no empty crop)."""
    sizes = [(1, 1), (1, 300), (300, 1), (2, 3), (5, 1000), (1000, 5), (7, 7)]
    for train in (True, False):
        transform = ImageTransform(8, train=train, seed=1, dtype=torch.uint8, mean=None, std=None)
        boxes, flips = transform.plan(sizes * 30, 3, 1, range(len(sizes) * 30))
        hw = np.array(sizes * 30, dtype=np.float64)
        assert (boxes[:, 2] > 0).all() and (boxes[:, 3] > 0).all()
        assert (np.round(boxes[:, 0]) >= 0).all() and (np.round(boxes[:, 1]) >= 0).all()
        assert (np.round(boxes[:, 0]) + np.round(boxes[:, 2]) <= hw[:, 0]).all()
        assert (np.round(boxes[:, 1]) + np.round(boxes[:, 3]) <= hw[:, 1]).all()
        g = torch.Generator().manual_seed(0)
        images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]
        out = transform.apply(images, boxes[: len(sizes)], flips[: len(sizes)])
        assert out.shape == (len(sizes), 3, 8, 8)


# ---- DecodeImages in DataLoader workers ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("audit") / "train.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(17):
            writer.write_example({"image/encoded": rgb_jpeg(k) if k % 5 else alpha_png(k), "label": k})
    tfr_torch.build_index(path, path + ".idx")
    return path


TRAIN = ImageTransform(16, train=True, seed=21, dtype=torch.uint8, mean=None, std=None)


def worker_crops(path: str, workers: int, epoch: int, batch_size: int) -> dict[int, torch.Tensor]:
    data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=batch_size, shuffle=True,
                                     transform=DecodeImages(TRAIN, index="label"))
    data.set_epoch(epoch)
    out = {}
    for batch in DataLoader(data, batch_size=None, num_workers=workers):
        for label, image in zip(batch["label"].tolist(), batch["image/encoded"]):
            assert label not in out
            out[label] = image.clone()
    return out


def reference_crops(path: str, epoch: int) -> dict[int, torch.Tensor]:
    records = {int(b["label"]): bytes(b["image/encoded"]) for b in tfr_torch.TFRecordDataset(path, SPEC)}
    out = {}
    for label, data in records.items():
        pixels = decode_image(data, "RGB")
        boxes, flips = TRAIN.plan([tuple(pixels.shape[-2:])], epoch, 0, [label])
        out[label] = TRAIN.apply([pixels], boxes, flips)[0]
    return out


def test_training_crops_in_workers_depend_only_on_seed_epoch_rank_and_record(shard):
    for epoch in (0, 2):
        want = reference_crops(shard, epoch)
        for workers, batch_size in ((1, 4), (2, 3)):
            got = worker_crops(shard, workers, epoch, batch_size)
            assert sorted(got) == list(range(17))
            assert all(torch.equal(got[k], want[k]) for k in want), (epoch, workers)
    assert all(torch.equal(a, b) for a, b in zip(worker_crops(shard, 0, 0, 5).values(),
                                                 [reference_crops(shard, 0)[k] for k in worker_crops(shard, 0, 0, 5)]))


def test_training_crops_without_workers_follow_the_epoch(shard):
    got, want = worker_crops(shard, 0, 2, 4), reference_crops(shard, 2)
    assert all(torch.equal(got[k], want[k]) for k in want)


def bad_shard(tmp_path) -> str:
    path = str(tmp_path / "bad.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(8):
            data = rgb_jpeg(k)
            writer.write_example({"image/encoded": data[: len(data) // 2] if k == 6 else data, "label": 100 + k})
    tfr_torch.build_index(path, path + ".idx")
    return path


def test_decode_images_names_a_bad_image_by_its_id_or_its_place(tmp_path):
    """Without names=, a bad image was "cannot decode image (N bytes)": no record named at all. In a DataLoader
    worker too (slow: about 5 s, torch's DataLoader waits that long for its workers to stop after a worker error)."""
    path = bad_shard(tmp_path)
    evaluation = ImageTransform(16, train=False)
    for transform, name, workers in ((DecodeImages(evaluation), "2 of a batch of 4", 0),
                                     (DecodeImages(evaluation, index="label"), "with label=106", 0),
                                     (DecodeImages(evaluation, index="label"), "with label=106", 2)):
        data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=transform)
        batches = iter(DataLoader(data, batch_size=None, num_workers=workers))
        with pytest.raises(DecodeError, match=rf"cannot decode image {name} \(\d+ bytes\): corrupt or truncated "
                                              r"JPEG: "):
            list(batches)
        del batches
    gc.collect()  # the workers' shutdown is paid here


def test_decode_images_names_a_bad_image_by_its_file_and_offset(tmp_path):
    path = bad_shard(tmp_path)
    data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4,
                                     transform=DecodeImages(ImageTransform(16, train=False)))
    with pytest.raises(DecodeError) as info:
        list(DataLoader(data, batch_size=None))
    message = str(info.value)
    assert path in message, message


# ---- DeviceLoader ----------------------------------------------------------------------------------------------------

def device_loader(path: str, *, thread: bool = False, prefetch: int = 2, workers: int = 0,
                  stateful: bool = False) -> DeviceLoader:
    data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=3, shuffle=True)
    if stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader

        inner = StatefulDataLoader(data, batch_size=None, num_workers=workers)
    else:
        inner = DataLoader(data, batch_size=None, num_workers=workers)
    return DeviceLoader(inner, "cpu", transform=TRAIN, thread=thread, prefetch=prefetch)


def run(loader) -> list[tuple[list[int], torch.Tensor]]:
    return [(b["label"].tolist(), b["image/encoded"].clone()) for b in loader]


def same(got, want) -> bool:
    return [g for g, _ in got] == [w for w, _ in want] and all(torch.equal(a, b) for (_, a), (_, b) in zip(got, want))


def test_a_checkpoint_taken_between_epochs_resumes_the_whole_next_epoch(shard):
    """for epoch ...: set_epoch(epoch); save a checkpoint; train. The state saved after set_epoch(1) said epoch 1
    with epoch 0's 17 samples and its spent loader state: resumed, epoch 1 gave no batch at all (and the dataset was
    back at epoch 0)."""
    loader = device_loader(shard)
    run(loader)
    loader.set_epoch(1)
    state = loader.state_dict()
    assert (state["epoch"], state["samples"], state["batches"]) == (1, 0, 0)
    want = run(loader)
    assert len(want) == 6
    again = device_loader(shard)
    again.load_state_dict(state)
    assert same(run(again), want) and again.loader.dataset.epoch == 1
    again = device_loader(shard)  # a state saved mid-epoch, then set_epoch of the same epoch: still resumed
    again.set_epoch(1)
    it = iter(again)
    next(it), next(it)
    state = again.state_dict()
    it.close()
    resumed = device_loader(shard)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert same(run(resumed), want[2:])
    resumed.set_epoch(2)  # another epoch: the old state is void
    assert resumed.state_dict()["samples"] == 0 and len(run(resumed)) == 6


@pytest.mark.parametrize("thread, prefetch", [(True, 3), (False, 1)])
def test_resume_mid_epoch_with_workers_gives_exactly_the_remaining_batches_and_crops(shard, thread, prefetch):
    pytest.importorskip("torchdata.stateful_dataloader")
    whole = device_loader(shard, stateful=True, workers=2)
    whole.set_epoch(3)
    want = run(whole)
    assert sorted(sum((labels for labels, _ in want), [])) == list(range(17))
    first = device_loader(shard, thread=thread, prefetch=prefetch, stateful=True, workers=2)
    first.set_epoch(3)
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()  # the batches handed out, not those prefetched
    assert (state["epoch"], state["samples"], state["batches"]) == (3, 12, 4)
    it.close()
    again = device_loader(shard, thread=thread, prefetch=prefetch, stateful=True, workers=2)
    again.load_state_dict(state)
    assert same(run(again), want[4:])


def loader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "tfr_torch DeviceLoader" and t.is_alive()}


def test_the_end_of_an_epoch_and_an_abandoned_iteration_leave_no_thread(shard):
    before = loader_threads()
    loader = device_loader(shard, thread=True, prefetch=2)
    want = run(loader)
    assert len(want) == 6 and len(loader) == 6 and loader_threads() == before
    assert same(run(loader), want)  # the next pass (same epoch) is the same epoch again
    it = iter(loader)
    next(it)
    del it  # abandoned without close(): collected, its thread stops
    gc.collect()
    deadline = threading.Event()
    for _ in range(200):
        if loader_threads() == before:
            break
        deadline.wait(0.05)
    assert loader_threads() == before
    state = loader.state_dict()
    assert (state["samples"], state["batches"]) == (3, 1)


def test_an_error_in_a_resumed_epoch_names_the_batch_by_its_place_in_the_epoch(tmp_path):
    path = bad_shard(tmp_path)  # record 6 is cut short
    before = loader_threads()

    def spec_loader() -> DeviceLoader:
        data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=2)
        return DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN, thread=True)

    first = spec_loader()
    it = iter(first)
    next(it)
    state = first.state_dict()
    it.close()
    again = spec_loader()
    again.load_state_dict(state)
    got = []
    with pytest.raises(DecodeError, match=r"^cannot decode image epoch 0, batch 3, item 0 \("):
        for batch in again:
            got.append(batch["label"].tolist())
    assert got == [[102, 103], [104, 105]]
    assert loader_threads() == before  # the thread ended with the error


def test_a_state_without_the_wrapped_loaders_position_is_refused_when_saved(shard):
    """A DataLoader with workers has no state_dict: DeviceLoader.state_dict() mid-epoch gave {"loader": None}, and
    loading it started the epoch over (its first batches again) with crops keyed from the saved sample count. It is
    a TypeError saying what the loader needs; before the first batch of an epoch a state needs no position."""
    loader = device_loader(shard, workers=1)
    assert loader.state_dict()["loader"] is None  # nothing handed out yet
    it = iter(loader)
    next(it)
    with pytest.raises(TypeError, match=r"^DeviceLoader.state_dict needs a loader with state_dict \(torchdata's "
                                        r"StatefulDataLoader\) or a DataLoader with num_workers=0"):
        loader.state_dict()
    it.close()


def test_single_records_are_refused_as_not_a_batch(tmp_path):
    """DecodeImages and DeviceLoader take batches; given one record's dict (a dataset without batch_size), the bytes
    of its image were read as a list of images (each byte value b as bytes(b): b zeros), and the error called the
    first "image 0 of a batch of 1028 (255 bytes): not a known image format"."""
    path = bad_shard(tmp_path)
    data = tfr_torch.TFRecordDataset(path, SPEC, transform=DecodeImages(ImageTransform(16, train=False)))
    with pytest.raises(TypeError, match=r"^DecodeImages decodes batches: 'image/encoded' is one image \(bytes\), not "
                                        r"a list of them; give the TFRecordDataset a batch_size$"):
        next(iter(DataLoader(data, batch_size=None)))
    records = DataLoader(tfr_torch.TFRecordDataset(path, SPEC), batch_size=None)
    with pytest.raises(TypeError, match=r"^DeviceLoader decodes batches: 'image/encoded' is one image \(bytes\), not "
                                        r"a list of them; batch the records \(TFRecordDataset's batch_size, or the "
                                        r"DataLoader's\)$"):
        next(iter(DeviceLoader(records, "cpu", transform=ImageTransform(16, train=False))))
    batches = DataLoader(tfr_torch.TFRecordDataset(path, SPEC), batch_size=4)  # batched by the DataLoader: fine
    assert next(iter(DeviceLoader(batches, "cpu", transform=ImageTransform(16, train=False), prefetch=0)))[
        "image/encoded"].shape == (4, 3, 16, 16)


def test_crops_follow_an_epoch_set_on_the_wrapped_dataset(shard):
    """dataset.set_epoch(3) (as DistributedSampler.set_epoch is called) shuffled for epoch 3, but DeviceLoader kept
    the epoch it read when made and keyed every epoch's crops by it: the same crops each epoch."""
    by_loader = device_loader(shard)
    by_loader.set_epoch(3)
    want = run(by_loader)
    by_dataset = device_loader(shard)
    by_dataset.loader.dataset.set_epoch(3)
    assert same(run(by_dataset), want) and by_dataset.epoch == 3 and by_dataset.state_dict()["epoch"] == 3


def test_a_name_that_is_not_utf8_names_the_bad_image_and_breaks_no_batch(tmp_path):
    """names= a bytes feature: every batch's names were decoded as UTF-8, so one file name that is not UTF-8 (a
    Latin-1 folder, say) failed every batch it was in with UnicodeDecodeError, good images included."""
    path = str(tmp_path / "names.tfrecord")
    spec = dict(SPEC, name=tfr_torch.FixedLenFeature([], tfr_torch.string))
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(4):
            data = rgb_jpeg(k)
            writer.write_example({"image/encoded": data[:100] if k == 3 else data, "label": k,
                                  "name": b"caf\xe9-%d.jpg" % k})
    evaluation = ImageTransform(16, train=False)
    data = tfr_torch.TFRecordDataset(path, spec, batch_size=2, transform=DecodeImages(evaluation, names="name"))
    batches = iter(DataLoader(data, batch_size=None))
    assert next(batches)["image/encoded"].shape == (2, 3, 16, 16)
    named = rf"^{re.escape(path)}:\d+: cannot decode image caf\\xe9-3.jpg \(100 bytes\)"  # its file and offset too
    with pytest.raises(DecodeError, match=named):
        next(batches)
    records = DataLoader(tfr_torch.TFRecordDataset(path, spec, batch_size=2), batch_size=None)
    loader = iter(DeviceLoader(records, "cpu", transform=evaluation, names="name", prefetch=0))
    assert next(loader)["image/encoded"].shape == (2, 3, 16, 16)
    with pytest.raises(DecodeError, match=r"^cannot decode image caf\\xe9-3.jpg \(100 bytes\)"):
        next(loader)


def test_a_batch_of_images_with_other_channel_counts_is_a_clear_error():
    """mode="UNCHANGED" with gray and colour JPEGs in one batch: the CPU resize broadcast a gray image into a colour
    batch when it came second and failed with torch's broadcast message when it came first; the GPU gather read a
    gray image's samples as 3 channels. Every way is now the same error, saying what to do."""
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 30), dtype=np.uint8)).save(buf, "JPEG")
    gray, colour = buf.getvalue(), rgb_jpeg(0)
    transform = ImageTransform(8, train=False, mode="UNCHANGED", dtype=torch.uint8, mean=None, std=None)
    message = (r"^image 1 of the batch has {} channel\(s\) where the first has {}: images of one batch need one read "
               r"mode \(ImageTransform's mode, e.g. 'RGB', the default, rather than 'UNCHANGED'\)$")
    for items, counts in (([colour, gray], (1, 3)), ([gray, colour], (3, 1)), ([colour, alpha_png(1)], (4, 3))):
        with pytest.raises(ValueError, match=message.format(*counts)):
            DecodeImages(transform)({"image/encoded": items})
        images = [decode_image(data) for data in items]
        boxes, flips = transform.plan([tuple(image.shape[-2:]) for image in images], 0, 0, [0, 1])
        for method in ("resize", "gather"):
            with pytest.raises(ValueError, match=message.format(*counts)):
                transform.apply(images, boxes, flips, method=method)
    assert DecodeImages(transform)({"image/encoded": [gray, gray]})["image/encoded"].shape == (2, 1, 8, 8)
