"""GPU decoding on a machine without a GPU: nvImageCodec stand-ins shaped like its releases 0.5, 0.7 and 0.9, the
JPEG structure check that runs before any GPU call, and the automatic choice of a decoder that meets the contract.

The stand-ins decode with Pillow (so their pixels are the contract's) and differ where the releases differ: the RGB
colour spec's name (RGB up to 0.8, SRGB in 0.9), the Decoder's keywords, whether the hardware backend can be created,
and None in the result list for an image they cannot decode. A "cuda" device is the CPU here (Tensor.to is patched).
"""

from __future__ import annotations

import enum
import io
import os
import types

import numpy as np
import pytest
import torch
from PIL import Image

from cuda_standin import pretend_cuda

from tfr_torch.errors import DecodeError
from tfr_torch.images import choose_backend, decode_image
from tfr_torch.images import _accel, _nvimgcodec

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "images")


def read(name: str) -> bytes:
    with open(os.path.join(HERE, "src", name), "rb") as f:
        return f.read()


def expected_rgb(name: str) -> np.ndarray:
    with np.load(os.path.join(HERE, "expected", name + ".npz")) as arrays:
        return arrays["RGB"]


def noisy_jpeg(width: int = 96, height: int = 64, progressive: bool = False) -> bytes:
    rng = np.random.default_rng(7)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90,
                                                                                 progressive=progressive)
    return buf.getvalue()


def fake_nvimgcodec(version: str, colours: tuple[str, ...] = ("RGB", "GRAY"), *, options: bool = True,
                    hardware: bool = True, stream: bool = True, exif_keyword: bool = True,
                    region: str = "") -> types.SimpleNamespace:
    """A module shaped like nvidia.nvimgcodec `version`; `.log` records what was created and decoded."""
    log: dict[str, list] = {"created": [], "decoded": []}
    colour = enum.Enum("ColorSpec", {name: k for k, name in enumerate(("UNCHANGED", *colours))})
    kinds = enum.Enum("BackendKind", "CPU_ONLY GPU_ONLY HYBRID_CPU_GPU HW_GPU_ONLY")

    class DecodeParams:
        def __init__(self, color_spec, apply_exif_orientation=False, **rest):
            if rest and not exif_keyword:  # 0.5: no allow_any_depth
                raise TypeError(f"unexpected keywords {sorted(rest)}")
            self.color_spec = color_spec

    class Decoder:
        def __init__(self, device_id=0, backends=None, **rest):
            if rest and not options:
                raise TypeError("__init__(): incompatible constructor arguments")
            self.hw = backends is not None and any(b[1] is kinds.HW_GPU_ONLY for b in backends)
            if self.hw and not hardware:
                raise RuntimeError("Could not create decoder. Code: 7")
            log["created"].append(("hw" if self.hw else "general", sorted(rest)))

        def _decode(self, data, params):
            box = None
            if isinstance(data, CodeStream):
                data, box = data.data, data.region
            try:
                img = Image.open(io.BytesIO(data))
                if box is not None:
                    img = img.crop((box.left, box.top, box.right, box.bottom))
                if self.hw and img.info.get("progressive"):
                    return None  # the hardware engines take baseline JPEGs only
                gray = params.color_spec.name == "GRAY"
                img.load()
                return np.array(img.convert("L" if gray else "RGB"))
            except OSError:
                return None

        def decode(self, items, params=None, **rest):
            if rest and not stream:
                raise TypeError("decode(): incompatible function arguments")
            log["decoded"].append(("hw" if self.hw else "general", len(items)))
            return [self._decode(d, params) for d in items]

    class Region:
        def __init__(self, top, left, bottom, right):
            self.top, self.left, self.bottom, self.right = top, left, bottom, right

    class CodeStream:
        def __init__(self, data, region=None):
            self.data, self.region = data, region

        def _sub(self, region=None):
            log["regions"].append((region.top, region.left, region.bottom, region.right))
            return CodeStream(self.data, region)

    if region == "get_sub_code_stream":
        CodeStream.get_sub_code_stream = CodeStream._sub
    elif region == "getSubCodeStream":
        CodeStream.getSubCodeStream = CodeStream._sub
    extra = {"CodeStream": CodeStream, "Region": Region} if region else {}
    log["regions"] = []
    return types.SimpleNamespace(**extra, __version__=version, ColorSpec=colour, BackendKind=kinds,
                                 DecodeParams=DecodeParams,
                                 Decoder=Decoder, Backend=lambda kind: ("backend", kind), log=log)


RELEASES = {
    "0.5": dict(options=False, stream=False, exif_keyword=False),
    "0.7": dict(),
    "0.9": dict(colours=("SRGB", "GRAY"), hardware=False),  # GPU_ONLY could not be created on the H200 either
}


def clear_caches() -> None:
    for cached in (_nvimgcodec.api, _nvimgcodec._decoders, _nvimgcodec._params):
        cached.cache_clear()


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device that is the CPU; returns a function that installs a stand-in nvImageCodec."""
    pretend_cuda(monkeypatch)
    monkeypatch.setattr(_accel, "torchvision_io", lambda: None)
    monkeypatch.setattr(_accel, "torchcodec_decoders", lambda: None)

    def install(module):
        monkeypatch.setattr(_accel, "nvimgcodec", lambda: module)
        clear_caches()
        return module

    yield install
    clear_caches()


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_release_decodes_a_gpu_batch_by_the_contract(gpu, release):
    nvi = gpu(fake_nvimgcodec(release, **RELEASES[release]))
    names = ["jpeg_rgb420.jpg", "jpeg_rgb444.jpg", "jpeg_gray.jpg", "jpeg_progressive.jpg", "png_rgb8.png"]
    out = decode_image([read(n) for n in names], "RGB", device="cuda")
    for name, pixels in zip(names, out):
        assert pixels.is_contiguous() and pixels.dtype == torch.uint8
        diff = np.abs(pixels.numpy().astype(int) - expected_rgb(name).astype(int))
        assert diff.max() <= 2, (release, name)
    api = _nvimgcodec.api()
    assert api is not None and api.rgb.name == ("SRGB" if release == "0.9" else "RGB")
    info = _nvimgcodec.describe(0)
    assert info["hardware"] is (release != "0.9")
    # "auto" decodes the progressive JPEG on the CPU (nvImageCodec was up to 3 levels off on those)
    if release == "0.9":
        assert info["why_not"] == "BackendKind.HW_GPU_ONLY could not be created: Could not create decoder. Code: 7"
        assert nvi.log["decoded"] == [("general", 3)]
    else:
        assert nvi.log["decoded"] == [("hw", 3)]
        # named, nvImageCodec takes it: the hardware decoder first, the general one for what it refused
        decode_image([read("jpeg_progressive.jpg")], "RGB", device="cuda", backend="nvimgcodec")
        assert nvi.log["decoded"][1:] == [("hw", 1), ("general", 1)]
    options = [] if release == "0.5" else ["options"]
    assert all(rest == options for _, rest in nvi.log["created"])


def test_auto_decodes_rgb_stored_and_arithmetic_coded_jpegs_on_the_cpu(gpu):
    """The GPU decoders were measured on sequential Huffman-coded YCbCr and gray JPEGs: a JPEG stored as RGB (an
    Adobe marker, transform 0) or arithmetic-coded goes to the CPU in an "auto" GPU batch (libjpeg decodes both);
    named, the GPU decoder is asked."""
    from tfr_torch.images._formats import sniff
    from tfr_torch.images.decode import _gpu_decoder

    nvi = gpu(fake_nvimgcodec("0.9", **RELEASES["0.9"]))
    image = Image.fromarray(np.random.default_rng(4).integers(0, 256, (24, 32, 3), dtype=np.uint8))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", keep_rgb=True, quality=95)
    stored_rgb = buffer.getvalue()
    assert sniff(stored_rgb).rgb and not sniff(read("jpeg_rgb420.jpg")).rgb
    out = decode_image([read("jpeg_rgb420.jpg"), stored_rgb], "RGB", device="cuda")
    assert nvi.log["decoded"] == [("general", 1)]  # the plain one only
    assert torch.equal(out[1], decode_image(stored_rgb, "RGB"))
    plain = read("jpeg_rgb420.jpg")
    at = plain.index(b"\xff\xc0")
    arithmetic = plain[:at] + b"\xff\xc9" + plain[at + 2:]  # the frame marker of an arithmetic-coded JPEG
    assert _gpu_decoder(sniff(arithmetic), "auto") is None and _gpu_decoder(sniff(plain), "auto") is not None
    assert _gpu_decoder(sniff(stored_rgb), "nvimgcodec") == "nvimgcodec"


def test_a_jpeg_the_structure_check_refuses_but_the_cpu_decodes_gets_the_cpu_pixels(gpu):
    """The check refuses a JPEG whose end-of-image marker is zeroed; libjpeg decodes some of those (a warning):
    such a JPEG is decoded on the CPU, so a GPU batch gives what decode_image gives on the CPU (pixels here), never
    an error the CPU path would not raise, and the GPU decoder never sees it."""
    from tfr_torch.images._jpeg import jpeg_problem

    nvi = gpu(fake_nvimgcodec("0.9", **RELEASES["0.9"]))

    def zeroed(seed: int) -> bytes:
        image = Image.fromarray(np.random.default_rng(seed).integers(0, 255, (16, 16, 3), dtype=np.uint8))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG")
        return buffer.getvalue()[:-2] + b"\x00\x00"

    def cpu_decodes(data: bytes) -> bool:
        try:
            decode_image(data, "RGB")
            return True
        except DecodeError:
            return False

    zeroed = next(z for z in map(zeroed, range(40)) if cpu_decodes(z))  # some are, some are not (1 in 4 or so)
    assert jpeg_problem(zeroed) is not None
    cpu = decode_image(zeroed, "RGB")
    out = decode_image([read("jpeg_rgb420.jpg"), zeroed], "RGB", device="cuda")
    assert torch.equal(out[1], cpu) and nvi.log["decoded"] == [("general", 1)]


def test_a_release_without_an_rgb_colour_spec_is_named_and_auto_decodes_on_the_cpu(gpu):
    gpu(fake_nvimgcodec("0.10", colours=("BGR", "GRAY")))
    with pytest.raises(ValueError) as info:
        decode_image([read("jpeg_rgb420.jpg")], device="cuda", backend="nvimgcodec")
    assert str(info.value) == ("image backend 'nvimgcodec' cannot decode: nvImageCodec 0.10 has no RGB/SRGB and GRAY "
                               "colour specs (ColorSpec has: BGR, GRAY, UNCHANGED)")
    assert choose_backend(read("jpeg_rgb420.jpg"), device="cuda") == "pillow"
    out = decode_image([read("jpeg_rgb420.jpg")], "RGB", device="cuda")
    assert np.abs(out[0].numpy().astype(int) - expected_rgb("jpeg_rgb420.jpg").astype(int)).max() <= 2


def test_an_image_the_decoder_returns_as_none_is_a_decode_error(gpu, monkeypatch):
    nvi = gpu(fake_nvimgcodec("0.9", **RELEASES["0.9"]))
    monkeypatch.setattr(nvi.Decoder, "_decode", lambda self, data, params: None)
    with pytest.raises(DecodeError) as info:
        decode_image([read("jpeg_rgb420.jpg")], device="cuda", name="train.tfrecord:4096")
    assert str(info.value) == ("cannot decode image train.tfrecord:4096 (788 bytes): corrupt or truncated JPEG: the "
                               "GPU decoder (nvimgcodec) could not decode it")


def broken_jpegs() -> dict[str, bytes]:
    data = noisy_jpeg()
    dqt = data.index(b"\xff\xdb")
    out = {f"cut at {k}/3": data[: len(data) * k // 3] for k in (1, 2)}
    out["no EOI"] = data[:-2]
    out["DQT length 1"] = data[: dqt + 2] + b"\x00\x01" + data[dqt + 4:]
    out["DQT length past the end"] = data[: dqt + 2] + b"\xff\xf0" + data[dqt + 4:]
    progressive = noisy_jpeg(progressive=True)
    out["progressive cut at 2/3"] = progressive[: len(progressive) * 2 // 3]
    return out


@pytest.mark.parametrize("kind", sorted(broken_jpegs()))
def test_a_broken_jpeg_in_a_gpu_batch_is_named_before_any_gpu_call(gpu, kind):
    nvi = gpu(fake_nvimgcodec("0.9", **RELEASES["0.9"]))
    bad = broken_jpegs()[kind]
    with pytest.raises(DecodeError) as info:
        decode_image([noisy_jpeg(), bad], device="cuda", name=["s.tfrecord:0", "s.tfrecord:9000"])
    assert str(info.value).startswith(f"cannot decode image s.tfrecord:9000 ({len(bad)} bytes): corrupt or truncated "
                                      "JPEG: ")
    assert nvi.log["decoded"] == []
    with pytest.raises(DecodeError):  # the CPU contract rejects the same bytes
        decode_image(bad, backend="pillow")


def test_the_structure_check_messages(backend):
    from tfr_torch.images._jpeg import jpeg_problem

    data = noisy_jpeg()
    for name in ("jpeg_rgb420.jpg", "jpeg_progressive.jpg", "jpeg_gray.jpg", "jpeg_exif6.jpg", "jpeg_cmyk.jpg"):
        assert jpeg_problem(read(name)) is None, name
    assert jpeg_problem(data) is None and jpeg_problem(noisy_jpeg(progressive=True)) is None
    sos = data.index(b"\xff\xda")
    assert jpeg_problem(data[:-2]) == f"no end-of-image marker: the data ends inside the scan that starts at byte {sos}"
    assert jpeg_problem(data[:300]) is not None
    assert jpeg_problem(b"\x89PNG") == "no start-of-image marker (it starts with b'\\x89P')"
    dqt = data.index(b"\xff\xdb")
    assert jpeg_problem(data[: dqt + 2] + b"\x00\x01" + data[dqt + 4:]) == (
        f"marker segment 0xffdb at byte {dqt} has length 1 (at least 2)")
    assert jpeg_problem(read("bad_jpeg_no_scan.jpg")) == "end-of-image marker at byte 609 before any scan"


def test_truncation_at_every_offset_is_caught_by_the_structure_check(backend):
    from tfr_torch.images._jpeg import jpeg_problem

    data = read("jpeg_rgb420.jpg")
    assert all(jpeg_problem(data[:cut]) is not None for cut in range(len(data)))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_gpu_refuses_a_cut_jpeg():
    data = noisy_jpeg(500, 375)
    with pytest.raises(DecodeError, match=r"^cannot decode image r:1 "):
        decode_image([data, data[: len(data) // 3]], device="cuda", name=["r:0", "r:1"])


def test_the_hardware_engines_can_be_turned_off(gpu, monkeypatch):
    nvi = gpu(fake_nvimgcodec("0.7"))
    monkeypatch.setenv(_nvimgcodec.ENV_HARDWARE, "0")
    out = decode_image([read("jpeg_rgb420.jpg"), read("jpeg_rgb444.jpg")], "RGB", device="cuda")
    assert len(out) == 2 and nvi.log["decoded"] == [("general", 2)]
    assert _nvimgcodec.describe(0)["why_not"] == "TFR_TORCH_JPEG_HARDWARE=0"
    monkeypatch.setenv(_nvimgcodec.ENV_HARDWARE, "1")
    decode_image([read("jpeg_rgb420.jpg")], "RGB", device="cuda")
    assert nvi.log["decoded"][-1] == ("hw", 1)


@pytest.mark.parametrize("release, region", [("0.5", ""), ("0.6", "getSubCodeStream"), ("0.9", "get_sub_code_stream")])
def test_the_device_loader_decodes_only_each_crop_region_where_the_release_can(gpu, tmp_path, monkeypatch, release,
                                                                           region):
    import tfr_torch
    from torch.utils.data import DataLoader

    from tfr_torch.images import DeviceLoader, ImageTransform
    from tfr_torch.images import loader as loader_module

    monkeypatch.setattr(loader_module, "streams_for", lambda device: loader_module.Streams())
    settings = dict(RELEASES.get(release, {}), region=region)
    nvi = gpu(fake_nvimgcodec(release, **settings))
    path = str(tmp_path / "r.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(6):
            writer.write_example({"image/encoded": noisy_jpeg(96 + 8 * k, 64 + 4 * k), "label": k})
    spec = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "label": tfr_torch.FixedLenFeature([], torch.int64)}
    transform = ImageTransform(24, train=True, dtype=torch.uint8, mean=None, std=None, seed=4)
    data = tfr_torch.TFRecordDataset(path, spec, batch_size=3)
    got = [b["image/encoded"] for b in DeviceLoader(DataLoader(data, batch_size=None), "cuda:0", transform=transform,
                                                   thread=False, regions=True)]
    assert len(nvi.log["regions"]) == (6 if region else 0)
    first = 0
    for batch, images in zip(DataLoader(data, batch_size=None), got):  # the same crops from whole images
        pixels = [decode_image(bytes(d), "RGB") for d in batch["image/encoded"]]
        boxes, flips = transform.plan([tuple(p.shape[-2:]) for p in pixels], 0, 0, range(first, first + 3))
        first += 3
        assert torch.equal(images, transform.apply(pixels, boxes, flips))


def segments(data: bytes) -> dict[int, int]:
    """{marker: byte offset of its first segment} up to the scan."""
    found, pos = {}, 2
    while data[pos + 1] != 0xDA:
        found.setdefault(data[pos + 1], pos)
        pos += 2 + (data[pos + 2] << 8 | data[pos + 3])
    found[0xDA] = pos
    return found


def test_the_structure_check_refuses_the_tables_libjpeg_refuses(backend):
    """GPU decoders took these header faults, which libjpeg (the CPU path) refuses: checked before any GPU call."""
    from tfr_torch.images._jpeg import jpeg_problem

    data = noisy_jpeg()
    at = segments(data)
    dht, sof, sos = at[0xC4], at[0xC0], at[0xDA]
    assert data[dht + 4] == 0x00  # the first Huffman table is DC table 0, its symbols after 16 counts

    def put(offset: int, value: int) -> bytes:
        return data[:offset] + bytes([value]) + data[offset + 1:]

    assert jpeg_problem(put(dht + 4 + 17, 200)) == (
        f"marker segment 0xffda at byte {sos}: the scan uses DC Huffman table 0, which has a symbol over 15")
    counts = bytearray(data[dht + 5: dht + 21])
    donor = next(j for j in range(1, 16) if counts[j] >= 2)
    counts[0], counts[donor] = counts[0] + 2, counts[donor] - 2  # two codes of 1 bit: one would be all ones
    assert jpeg_problem(data[:dht + 5] + bytes(counts) + data[dht + 21:]) == (
        f"marker segment 0xffda at byte {sos}: the scan uses DC Huffman table 0, which has more codes of 1 bits "
        f"than fit")
    assert jpeg_problem(put(sof + 4, 9)) == (
        f"marker segment 0xffc0 at byte {sof}: a sample precision of 9 bits (8 or 12)")
    assert jpeg_problem(put(sof + 11, 0x50)) == (
        f"marker segment 0xffc0 at byte {sof}: component 1 has sampling factors 5x0 (1-4 each)")
    assert jpeg_problem(put(sos + 6, 0x33)) == (
        f"marker segment 0xffda at byte {sos}: the scan uses DC Huffman table 3, which is not defined")
    assert jpeg_problem(put(sos + 5, 9)) == (
        f"marker segment 0xffda at byte {sos}: the scan's component 9 is not a component of the frame, or is named "
        f"twice")
    assert jpeg_problem(put(at[0xE0] + 1, 0xF3)) == f"unexpected marker 0xfff3 at byte {at[0xE0]}"
    assert jpeg_problem(data[:sof] + data[sof: sos] + data[sof:]).startswith("a second frame header at byte")
    # bytes that are not a marker where one is expected: libjpeg skips them (a warning), and so does the check
    padded = data[:sos] + b"junk" + data[sos:]
    assert jpeg_problem(padded) is None
    decode_image(padded)


def mutated(data: bytes, count: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        at = int(rng.integers(2, min(len(data) - 1, 700) if k % 2 else len(data) - 1))
        flipped = bytearray(data)
        flipped[at] = int(rng.integers(0, 256)) if k % 3 else flipped[at] ^ 1 << int(rng.integers(0, 8))
        out.append(bytes(flipped))
    return out


def test_the_structure_check_never_refuses_a_jpeg_the_cpu_path_decodes(backend):
    """A differential against the CPU decoder on mutated JPEGs (headers mostly): whatever the check refuses, the
    CPU path refuses too; so a GPU batch refuses no image that the CPU path would decode."""
    from tfr_torch.images._jpeg import jpeg_problem

    refused = 0
    for data in mutated(noisy_jpeg(120, 90), 500, 1) + mutated(noisy_jpeg(120, 90, progressive=True), 500, 2):
        if jpeg_problem(data) is None:
            continue
        refused += 1
        with pytest.raises(DecodeError):
            decode_image(data, "RGB")
    assert refused > 50  # the mutations reached the checks


def test_the_native_marker_scan_matches_the_reference():
    """A differential of tfr_torch._native's jpeg_next_marker against the regular expression, on JPEG-like bytes
    dense in 0xFF (stuffed zeros, restart markers, fill bytes, markers) and on real scans, from every start."""
    from tfr_torch import _native
    from tfr_torch.images import _jpeg

    if _native.core is None:
        pytest.skip(f"the compiled core is not built here ({_native.import_error})")
    rng = np.random.default_rng(3)
    alphabet = np.array([0xFF, 0x00, 0xD0, 0xD7, 0xD8, 0xD9, 0xC4, 0x12, 0xFE], dtype=np.uint8)
    samples = [bytes(rng.choice(alphabet, size=int(rng.integers(0, 40)))) for _ in range(400)]
    samples += [noisy_jpeg(), noisy_jpeg(progressive=True), read("jpeg_rgb420.jpg"), b"", b"\xff", b"\xff\xff"]
    for data in samples:
        for start in range(len(data) + 1):
            match = _jpeg._NEXT_MARKER.search(data, start)
            assert _native.core.jpeg_next_marker(data, start) == (-1 if match is None else match.start()), (data, start)
    with pytest.raises(ValueError, match="start 5 outside 3 bytes"):
        _native.core.jpeg_next_marker(b"abc", 5)


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, marker, length) of each marker segment before the first scan's data."""
    out, pos = [], 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker, length = data[pos + 1], data[pos + 2] << 8 | data[pos + 3]
        out.append((pos, marker, length))
        if marker == 0xDA:
            break
        pos += 2 + length
    return out


def _structure_variants(data: bytes, seed: int, count: int = 900) -> list[bytes]:
    """JPEG-shaped inputs that reach each check of the structure walk: header bytes set to values near every limit
    (sampling factors, table ids, precisions, counts, coefficient ranges), frame markers swapped for other frame
    kinds, segments inserted before the scan (DRI, DAC, DNL, COM, APPn, unknown, standalone markers, stuffed zeros,
    fill bytes, junk), segments dropped or doubled, and cuts at every header byte."""
    rng = np.random.default_rng(seed)
    values = [0, 1, 2, 3, 4, 5, 8, 9, 11, 12, 13, 14, 15, 16, 17, 0x11, 0x12, 0x14, 0x21, 0x22, 0x24, 0x33, 0x41, 0x42,
              0x44, 0x45, 0x50, 0x63, 0x64, 0x80, 0xF0, 0xFE, 0xFF]
    segments = _segments(data)
    sos = segments[-1][0]
    out = [data[:cut] for cut in range(sos + 12)]
    for _ in range(count):
        pos, marker, length = segments[int(rng.integers(len(segments)))]
        body = bytearray(data)
        for _ in range(int(rng.integers(1, 3))):
            at = pos + 4 + int(rng.integers(max(1, min(length - 2, 48))))
            body[min(at, len(body) - 1)] = values[int(rng.integers(len(values)))]
        out.append(bytes(body))
    for pos, marker, length in segments:
        seg = data[pos: pos + 2 + length]
        out.append(data[:pos] + data[pos + 2 + length:])  # dropped
        out.append(data[:pos] + seg + seg + data[pos + 2 + length:])  # doubled
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            for other in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC9, 0xCA, 0xCB, 0xCD):
                out.append(data[:pos + 1] + bytes([other]) + data[pos + 2:])
    inserts = [b"\xff\xdd\x00\x04\x00\x10", b"\xff\xdd\x00\x05\x00\x10\x00", b"\xff\xdd\x00\x03\x00",
               b"\xff\xcc\x00\x04\x01\x10", b"\xff\xcc\x00\x04\x01\x01", b"\xff\xcc\x00\x04\x10\x05",
               b"\xff\xcc\x00\x04\x20\x05", b"\xff\xcc\x00\x03\x01", b"\xff\xdc\x00\x04\x00\x40",
               b"\xff\xfe\x00\x05abc", b"\xff\xe5\x00\x02", b"\xff\xf0\x00\x02", b"\xff\x01", b"\xff\xd3", b"\xff\x00",
               b"\xff\xff\xff", b"junk", b"\xff", b"\x00\xff\x00", b"\xff\xd9", b"\xff\xd8",
               b"\xff\xc4\x00\x13\x05" + bytes(16), b"\xff\xc4\x00\x14\x00\x01" + bytes(15) + b"\x10",
               b"\xff\xc4\x00\x14\x10\x01" + bytes(15) + b"\x10", b"\xff\xc4\x00\x15\x00\x03" + bytes(15) + b"\x01\x02",
               b"\xff\xc4\x00\x13\x02" + bytes(16), b"\xff\xdb\x00\x43\x04" + bytes(64), b"\xff\xdb\x00\x83\x10" +
               bytes(128), b"\xff\xdb\x00\x44\x00" + bytes(65),
               b"\xff\xc4\x00\x15\x00\x02" + bytes(15) + b"\x00\x01",  # DC table 0: two codes of 1 bit
               b"\xff\xc4\x00\x15\x11\x01\x01" + bytes(14) + b"\x00\x01",  # AC table 1, sound
               b"\xff\xc4\x00\x16\x10\x00\x03" + bytes(14) + b"\x00\x01\x02"]  # AC table 0: 3 codes of 2 bits
    for pos, marker, length in segments:
        if marker in (0xC0, 0xC1, 0xC2):  # the frame's sides at and past libjpeg's limit, and zero
            for side in (0, 1, 65500, 65501, 65535):
                for at in (pos + 5, pos + 7):
                    out.append(data[:at] + side.to_bytes(2, "big") + data[at + 2:])
    for pos, _, _ in segments:
        for extra in inserts:
            out.append(data[:pos] + extra + data[pos:])
    end = len(data) - 2
    for extra in inserts:  # between the scan and the end of image
        out.append(data[:end] + extra + data[end:])
    return out


def test_native_jpeg_sound_many_agrees_with_the_reference_check():
    """A differential of the compiled structure check (jpeg_sound_many: the whole batch with the GIL released)
    against jpeg_problem, the reference, on sound JPEGs of every kind in the test corpus and thousands of variants
    that reach each of its checks: the compiled check finds sound exactly what the reference answers None for.
    jpeg_problems words each refused item as the reference does, on both backends."""
    from tfr_torch import _native
    from tfr_torch.images import _jpeg

    if _native.core is None:
        pytest.skip(f"the compiled core is not built here ({_native.import_error})")
    sources = [read(name) for name in sorted(os.listdir(os.path.join(HERE, "src"))) if name.endswith(".jpg")]
    sources += [noisy_jpeg(), noisy_jpeg(120, 90, progressive=True), noisy_jpeg(33, 17)]
    gray = io.BytesIO()
    Image.fromarray(np.arange(48 * 40, dtype=np.uint8).reshape(40, 48)).save(gray, "JPEG", quality=75)
    sources.append(gray.getvalue())
    inputs = list(sources) + list(broken_jpegs().values())
    for k, source in enumerate(sources):
        inputs += _structure_variants(source, k, 300 if k > 3 else 900)
        inputs += mutated(source, 150, 100 + k)
    flags = _native.core.jpeg_sound_many(inputs)
    reference = [_jpeg.jpeg_problem(data) for data in inputs]
    mismatched = [(data, problem) for data, flag, problem in zip(inputs, flags, reference) if flag != (problem is None)]
    assert not mismatched, mismatched[:3]
    assert 0.05 < sum(flags) / len(flags) < 0.95  # both answers are common: the variants reach the checks
    assert _jpeg.jpeg_problems(inputs[:400]) == reference[:400]
    previous = _native.set_backend("python")
    try:
        assert _jpeg.jpeg_problems(inputs[:400]) == reference[:400]
    finally:
        _native.set_backend(previous)
    # items that are not bytes are left to the reference (bytearray, memoryview), an empty batch is empty
    sound = noisy_jpeg()
    assert _native.core.jpeg_sound_many([bytearray(sound), memoryview(sound), None, sound]) == b"\x00\x00\x00\x01"
    assert _native.core.jpeg_sound_many([]) == b"" and _jpeg.jpeg_problems([]) == []
    with pytest.raises(TypeError):
        _native.core.jpeg_sound_many(5)


def _exif_variants(data: bytes, seed: int) -> list[bytes]:
    """A JPEG with an EXIF block (APP1) whose TIFF structure is bent: byte order, IFD offsets, entry counts, tag
    kinds and orientation values set near their limits, and the block cut at every length."""
    rng = np.random.default_rng(seed)
    at = data.find(b"Exif\x00\x00")
    if at < 0:
        return []
    out = []
    tiff = at + 6
    for _ in range(300):
        body = bytearray(data)
        for _ in range(int(rng.integers(1, 3))):
            where = tiff + int(rng.integers(0, 40))
            body[where] = int(rng.choice([0, 1, 2, 3, 8, 9, 0x12, 0x2A, 0x49, 0x4D, 0xFF, int(rng.integers(256))]))
        out.append(bytes(body))
    length = data[at - 2] << 8 | data[at - 1]
    for cut in range(0, length - 2, 3):  # the APP1 segment's declared length shortened (the block cut)
        out.append(data[:at - 2] + (cut + 2).to_bytes(2, "big") + data[at: at + cut] + data[at - 2 + length:])
    return out


def test_native_jpeg_headers_many_agrees_with_the_reference_sniff():
    """A differential of the compiled header read (jpeg_headers_many, the GIL released once a batch) against
    _formats._jpeg, the reference, on the corpus's JPEGs (EXIF orientations, CMYK with an Adobe marker, gray,
    progressive) and the structure and EXIF variants; sniff_many gives sniff's Header for every item on both
    backends (PNGs and other bytes go to sniff)."""
    from tfr_torch import _native
    from tfr_torch.images import _formats

    if _native.core is None:
        pytest.skip(f"the compiled core is not built here ({_native.import_error})")
    names = sorted(os.listdir(os.path.join(HERE, "src")))
    sources = [read(name) for name in names if name.endswith(".jpg")]
    sound = noisy_jpeg()
    app0, sof = sound.index(b"\xff\xe0"), sound.index(b"\xff\xc0")
    no_jfif = sound[:app0] + sound[app0 + 2 + (sound[app0 + 2] << 8 | sound[app0 + 3]):]
    at = no_jfif.index(b"\xff\xc0") + 10  # the first component id
    stored_rgb = (no_jfif[:at] + b"R" + no_jfif[at + 1: at + 3] + b"G" + no_jfif[at + 4: at + 6] + b"B"
                  + no_jfif[at + 7:])
    adobe = [no_jfif[:2] + b"\xff\xee\x00\x0eAdobe\x00\x64\x00\x00\x00\x00" + bytes([t]) + no_jfif[2:]
             for t in (0, 1, 2)]
    sources += [stored_rgb, no_jfif, *adobe, sound[:sof + 12]]
    inputs = list(sources)
    for k, source in enumerate(sources):
        inputs += _structure_variants(source, 50 + k, 200) + mutated(source, 100, 200 + k) + _exif_variants(source, k)
    found = _native.core.jpeg_headers_many(inputs)
    mismatched = []
    for data, got in zip(inputs, found):
        if data[:3] != b"\xff\xd8\xff":
            assert got is None
            continue
        h = _formats._jpeg(data)
        if got != (h.components, h.precision, h.orientation, h.height, h.width, h.frame, h.rgb):
            mismatched.append((data, got, h))
    assert not mismatched, mismatched[:2]
    orientations = {h[2] for h in found if h is not None}
    assert orientations >= set(range(1, 9)) and any(h is not None and h[6] for h in found)  # the inputs vary
    others = [read(name) for name in names if not name.endswith(".jpg")][:8] + [b"", b"\xff\xd8", b"x" * 9]
    batch = inputs[:300] + others + [bytearray(sources[0])]
    assert _formats.sniff_many(batch) == [_formats.sniff(d) for d in batch]
    previous = _native.set_backend("python")
    try:
        assert _formats.sniff_many(batch) == [_formats.sniff(d) for d in batch]
    finally:
        _native.set_backend(previous)
    assert _native.core.jpeg_headers_many([]) == []
    with pytest.raises(TypeError):
        _native.core.jpeg_headers_many(3)
