"""decode_image: one result contract on every decoder, checked against the golden corpus in tests/data/images/.

The corpus (tests/data/images/make_images.py) holds small images in every mode the contract covers and broken files;
its expected tensors were made once with Pillow (PNG: from the samples written; TensorFlow's decode_image agreed on
every PNG). Each test that names a decoder runs for every decoder installed: Pillow always, torchvision and TorchCodec
where they import (`make test-images` runs this file in a virtualenv with torch 2.14.1 + torchvision 0.29.1).
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuda_standin import pretend_cuda

import tfr_torch
from tfr_torch.errors import DecodeError
from tfr_torch.images import BACKENDS, MODES, choose_backend, decode_image, image_backends, normalize_mode

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "images")
MANIFEST = json.load(open(os.path.join(HERE, "manifest.json")))["files"]
GOOD = sorted(f for f, info in MANIFEST.items() if "error" not in info)
BROKEN = sorted(f for f, info in MANIFEST.items() if "error" in info)
INSTALLED = [name for name, version in image_backends().items() if version and name != "nvimgcodec"]
JPEG_TOLERANCE = 2  # libjpeg builds may round the inverse DCT differently; every decoder measured here was exact


def read(name: str) -> bytes:
    with open(os.path.join(HERE, "src", name), "rb") as f:
        return f.read()


def expected(name: str) -> dict:
    with np.load(os.path.join(HERE, "expected", name + ".npz")) as arrays:
        return {key: arrays[key] for key in arrays.files}


def cases() -> list:
    out = []
    for name in GOOD:
        for key in MANIFEST[name]["keys"]:
            out.append((name, key))
    return out


def call_for(key: str) -> tuple[str, dict]:
    """(mode, keyword arguments) that the expected tensor under `key` answers."""
    for suffix, kwargs in (("_uint16", {"dtype": torch.uint16}), ("_frames", {"all_frames": True}),
                           ("_exif", {"apply_exif_orientation": True})):
        if key.endswith(suffix):
            return key[: -len(suffix)], kwargs
    return key, {}


@pytest.fixture(params=["pillow", "torchvision", "torchcodec"])
def decoder(request):
    if request.param not in INSTALLED:
        pytest.skip(f"{request.param} is not installed (or does not import beside torch {torch.__version__})")
    return request.param


def assert_pixels(got: torch.Tensor, want: np.ndarray, name: str) -> None:
    assert tuple(got.shape) == want.shape, (name, tuple(got.shape), want.shape)
    assert got.is_contiguous()
    diff = np.abs(got.numpy().astype(np.int64) - want.astype(np.int64))
    tolerance = JPEG_TOLERANCE if name.endswith(".jpg") else 0
    assert diff.size == 0 or diff.max() <= tolerance, (name, int(diff.max()))


# ------------------------------------------------------------------------------------------------ the corpus


def test_corpus_files_are_the_ones_the_manifest_describes():
    assert len(GOOD) >= 50 and len(BROKEN) >= 10
    for name, info in MANIFEST.items():
        data = read(name)
        assert len(data) == info["bytes"] and hashlib.sha256(data).hexdigest() == info["sha256"], name


def test_tensorflow_agreed_on_every_png():
    """The PNG answers come from the samples written; TensorFlow's decode_image gave the same (manifest)."""
    pngs = [f for f in GOOD if f.endswith(".png")]
    assert len(pngs) == 24
    assert {MANIFEST[f]["tensorflow"] for f in pngs} == {"equal"}


@pytest.mark.parametrize("name,key", cases())
def test_every_decoder_reproduces_the_corpus(decoder, name, key):
    mode, kwargs = call_for(key)
    want = expected(name)[key]
    got = decode_image(read(name), mode, backend=decoder, **kwargs)
    assert got.dtype == kwargs.get("dtype", torch.uint8)
    assert_pixels(got, want, name)


@pytest.mark.parametrize("name", GOOD)
def test_float32_is_the_uint8_answer_over_255_and_uint16_is_it_shifted_left(decoder, name):
    data = read(name)
    eight = decode_image(data, backend=decoder)
    answers = expected(name)
    if "UNCHANGED_uint16" in answers:  # 16-bit images: the full samples, over 65535
        floats = decode_image(data, dtype=torch.float32, backend=decoder)
        torch.testing.assert_close(floats, torch.from_numpy(answers["UNCHANGED_uint16"].astype(np.float32)) / 65535.0)
        return
    floats = decode_image(data, dtype=torch.float32, backend=decoder)
    assert floats.dtype == torch.float32 and float(floats.min()) >= 0.0 and float(floats.max()) <= 1.0
    torch.testing.assert_close(floats, eight.float() / 255.0)
    wide = decode_image(data, dtype=torch.uint16, backend=decoder)
    assert wide.dtype == torch.uint16
    assert torch.equal(wide.to(torch.int32), eight.to(torch.int32) << 8)


def test_sixteen_bit_images_are_shifted_not_clipped():
    """16-bit gray was once clipped at 255 by convert("L"); the contract is >> 8 of the 16-bit value."""
    data = read("png_gray16.png")
    full = decode_image(data, dtype=torch.uint16, backend="pillow").to(torch.int32)
    assert int(full.max()) > 255
    assert torch.equal(decode_image(data, backend="pillow").to(torch.int32), full >> 8)


@pytest.mark.parametrize("name", ["png_pal4.png", "png_pal1_trns.png", "png_pillow_bilevel.png", "jpeg_cmyk.jpg",
                                  "gif_transparent.gif", "webp_lossless_rgba.webp", "tiff_cmyk.tiff"])
def test_the_common_disagreements_of_old_are_settled(decoder, name):
    """Palettes expanded (RGBA with tRNS), 1-bit as 0/255 gray, CMYK as RGB, GIF as RGB: on every decoder."""
    channels = {"png_pal4.png": 3, "png_pal1_trns.png": 4, "png_pillow_bilevel.png": 1, "jpeg_cmyk.jpg": 3,
                "gif_transparent.gif": 3, "webp_lossless_rgba.webp": 4, "tiff_cmyk.tiff": 3}[name]
    first = decode_image(read(name), backend=decoder)
    assert first.shape[0] == channels
    assert torch.equal(first, decode_image(read(name), backend=decoder))  # no uninitialised memory
    if name == "png_pillow_bilevel.png":
        assert set(first.unique().tolist()) <= {0, 255}


def test_animations_give_the_first_frame_unless_all_frames(decoder):
    for name in ("gif_animated.gif", "webp_animated.webp"):
        frames = decode_image(read(name), all_frames=True, backend=decoder)
        assert frames.ndim == 4 and frames.shape[0] >= 2
        assert torch.equal(decode_image(read(name), backend=decoder), frames[0])
    still = decode_image(read("png_rgb8.png"), all_frames=True, backend=decoder)
    assert still.shape == (1, 3, 11, 13)


def test_exif_orientation_only_when_asked(decoder):
    data = read("jpeg_exif6.jpg")
    plain = decode_image(data, backend=decoder)
    turned = decode_image(data, apply_exif_orientation=True, backend=decoder)
    assert plain.shape == (3, 17, 17) and turned.shape == (3, 17, 17)
    assert torch.equal(turned, torch.rot90(plain, -1, (1, 2)))


# ------------------------------------------------------------------------------------------------ broken input


PILLOW_MESSAGES = {
    "bad_empty.bin": "cannot decode image bad_empty.bin (0 bytes): it is empty",
    "bad_garbage.bin": "cannot decode image bad_garbage.bin (117 bytes): not a known image format (it starts with "
                       "b'this is ')",
    "bad_serialized_tensor.bin": "cannot decode image bad_serialized_tensor.bin (30 bytes): it is a serialize_tensor "
                                 "payload (image/format \"raw\"), not an encoded image; read it with "
                                 "tfr_torch.parse_tensor(data, torch.uint8)",
    "bad_truncated.jpg": "cannot decode image bad_truncated.jpg (525 bytes): corrupt or truncated JPEG: ",
    "bad_jpeg_no_scan.jpg": "cannot decode image bad_jpeg_no_scan.jpg (611 bytes): corrupt or truncated JPEG: ",
    "bad_truncated.png": "cannot decode image bad_truncated.png (262 bytes): corrupt or truncated PNG: ",
    "bad_idat_flip.png": "cannot decode image bad_idat_flip.png (393 bytes): corrupt or truncated PNG: ",
    "bad_idat_flip_crc_fixed.png": "cannot decode image bad_idat_flip_crc_fixed.png (393 bytes): corrupt or "
                                   "truncated PNG: ",
    "bad_truncated.gif": "cannot decode image bad_truncated.gif (85 bytes): corrupt or truncated GIF: ",
    "bad_truncated.webp": "cannot decode image bad_truncated.webp (55 bytes): corrupt or truncated WEBP: ",
}


@pytest.mark.parametrize("name", BROKEN)
def test_broken_images_raise_decode_error_naming_them(decoder, name):
    assert set(PILLOW_MESSAGES) == set(BROKEN)
    with pytest.raises(DecodeError) as info:
        decode_image(read(name), backend=decoder, name=name)
    message = str(info.value)
    want = PILLOW_MESSAGES[name]
    assert message == want if not want.endswith(": ") else message.startswith(want) and len(message) > len(want)


SWEEP = ["png_rgb8.png", "png_pal4_trns.png", "png_ga16.png", "jpeg_rgb420.jpg", "jpeg_gray.jpg", "gif_animated.gif",
         "webp_lossy.webp", "webp_lossless_rgba.webp", "bmp_pal8.bmp", "tiff_rgb.tiff"]


@pytest.mark.parametrize("name", SWEEP)
def test_every_truncation_and_byte_flip_gives_pixels_or_decode_error(decoder, name):
    """Nothing but DecodeError ever escapes, and whatever decodes has the image's shape (a flip in pixel data can
    decode to other pixels; the formats without a checksum cannot tell). Run in-process: a crash fails the run."""
    data = read(name)
    shape = tuple(expected(name)["UNCHANGED"].shape)
    variants = [data[:k] for k in range(len(data))]
    variants += [data[:k] + bytes([data[k] ^ 0xFF]) + data[k + 1:] for k in range(len(data))]
    decoded = 0
    for variant in variants:
        try:
            pixels = decode_image(variant, backend=decoder)
        except DecodeError as exc:
            assert str(exc).startswith(f"cannot decode image ({len(variant)} bytes): "), str(exc)
            continue
        decoded += 1
        assert pixels.dtype == torch.uint8 and pixels.ndim == 3 and 1 <= pixels.shape[0] <= 4
        if pixels.shape[1:] != shape[1:]:  # a flip in a size field: a consistent image of another size, or none
            assert pixels.numel() == pixels.shape[0] * pixels.shape[1] * pixels.shape[2]
    assert decoded < len(variants)


@st.composite
def pixel_arrays(draw):
    channels = draw(st.sampled_from([1, 2, 3, 4]))
    height, width = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    flat = draw(st.binary(min_size=channels * height * width, max_size=channels * height * width))
    return np.frombuffer(flat, np.uint8).reshape(height, width, channels)


def contract_modes(hwc: np.ndarray) -> dict:
    """The read modes by the contract's rules, in numpy: the reference the decoders are held to."""
    c = hwc.shape[-1]
    colour = hwc[..., :3] if c >= 3 else np.repeat(hwc[..., :1], 3, axis=-1)
    wide = colour.astype(np.int64)
    luma = ((wide[..., 0] * 19595 + wide[..., 1] * 38470 + wide[..., 2] * 7471 + 32768) >> 16).astype(np.uint8)
    gray = hwc[..., :1] if c <= 2 else luma[..., None]
    alpha = hwc[..., -1:] if c in (2, 4) else np.full(hwc.shape[:2] + (1,), 255, np.uint8)
    out = {"UNCHANGED": hwc, "GRAY": gray, "GRAY_ALPHA": np.concatenate([gray, alpha], -1), "RGB": colour,
           "RGB_ALPHA": np.concatenate([colour, alpha], -1)}
    return {k: np.ascontiguousarray(np.moveaxis(v, -1, 0)) for k, v in out.items()}


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(hwc=pixel_arrays())
def test_png_round_trip_in_every_mode(decoder, hwc):
    from PIL import Image

    buf = io.BytesIO()
    c = hwc.shape[-1]
    Image.fromarray(hwc[..., 0] if c == 1 else hwc, {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[c]).save(buf, "PNG")
    for mode, want in contract_modes(hwc).items():
        got = decode_image(buf.getvalue(), mode, backend=decoder)
        assert np.array_equal(got.numpy(), want), mode


def test_an_unnamed_image_is_described_by_its_size():
    with pytest.raises(DecodeError, match=r"^cannot decode image \(0 bytes\): it is empty$"):
        decode_image(b"")
    with pytest.raises(DecodeError, match=r"^cannot decode image \(0 bytes\): it is empty$"):
        decode_image(torch.empty(0, dtype=torch.uint8))


def test_a_list_names_the_bad_image_by_its_own_name():
    good, bad = read("png_rgb8.png"), read("bad_truncated.png")
    with pytest.raises(DecodeError, match=r"^cannot decode image shard-1.tfrecord:160 \(262 bytes\)"):
        decode_image([good, bad], name=["shard-1.tfrecord:0", "shard-1.tfrecord:160"])


CRASH_SCRIPT = """
import sys, tfr_torch
from tfr_torch.errors import DecodeError
data = open(sys.argv[1], "rb").read()
try:
    tfr_torch.decode_image(data, backend=sys.argv[2])
except DecodeError as exc:
    print("DecodeError:", exc)
"""


@pytest.mark.parametrize("name", ["bad_idat_flip.png", "bad_idat_flip_crc_fixed.png", "bad_truncated.png"])
@pytest.mark.parametrize("choice", ["auto", "pillow", "torchvision", "torchcodec"])
def test_a_corrupt_png_is_an_error_in_a_subprocess_never_a_signal(choice, name):
    """torchvision 0.29.1's decode_png kills the process (SIGSEGV) on corrupt pixel data: it never gets a PNG."""
    if choice not in ("auto", "pillow") and choice not in INSTALLED:
        pytest.skip(f"{choice} is not installed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, os.path.join(HERE, "src", name), choice],
                         capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, f"exit status {run.returncode} (a negative status is a signal): {run.stderr[-2000:]}"
    assert run.stdout.startswith(f"DecodeError: cannot decode image ({MANIFEST[name]['bytes']} bytes): corrupt or "
                                 f"truncated PNG: ")


# ------------------------------------------------------------------------------------------------ arguments


def test_modes_accept_torchvision_names_aliases_and_enums():
    assert MODES == ("UNCHANGED", "GRAY", "GRAY_ALPHA", "RGB", "RGB_ALPHA")
    assert [normalize_mode(m) for m in ("unchanged", "Gray", "RGBA", "L", "LA", "rgb_alpha")] == [
        "UNCHANGED", "GRAY", "RGB_ALPHA", "GRAY", "GRAY_ALPHA", "RGB_ALPHA"]
    import enum

    class ImageReadMode(enum.Enum):  # the shape of torchvision's and TorchCodec's enums
        UNCHANGED = 0
        GRAY = 1
        GRAY_ALPHA = 2
        RGB = 3
        RGB_ALPHA = 4

    assert decode_image(read("png_rgba8.png"), ImageReadMode.GRAY_ALPHA).shape == (2, 11, 13)
    with pytest.raises(ValueError) as info:
        decode_image(read("png_rgb8.png"), "CMYK")
    assert str(info.value) == ("mode must be one of UNCHANGED, GRAY, GRAY_ALPHA, RGB, RGB_ALPHA (a string or "
                               "torchvision's ImageReadMode), got 'CMYK'")


def test_torchvisions_own_enum_when_it_imports():
    if "torchvision" not in INSTALLED:
        pytest.skip("torchvision is not installed")
    from torchvision.io import ImageReadMode

    for member, channels in ((ImageReadMode.UNCHANGED, 4), (ImageReadMode.GRAY, 1), (ImageReadMode.GRAY_ALPHA, 2),
                             (ImageReadMode.RGB, 3), (ImageReadMode.RGB_ALPHA, 4)):
        assert decode_image(read("png_pal8_trns.png"), member).shape[0] == channels


def test_a_mixed_folder_collates_with_one_mode():
    names = ["png_gray8.png", "png_rgba8.png", "png_pal4_trns.png", "png_ga16.png", "bmp_rgb24.bmp",
             "tiff_rgba.tiff", "gif_transparent.gif"]
    batch = torch.stack(decode_image([read(n) for n in names], "RGB"))
    assert batch.shape == (7, 3, 11, 13) and batch.dtype == torch.uint8


def test_input_types():
    data = read("png_rgb8.png")
    want = decode_image(data)
    for value in (bytearray(data), memoryview(data), torch.frombuffer(bytearray(data), dtype=torch.uint8),
                  np.frombuffer(data, np.uint8)):
        assert torch.equal(decode_image(value), want)
    with pytest.raises(TypeError) as info:
        decode_image(torch.zeros(2, 3))
    assert str(info.value) == ("decode_image expects encoded image bytes (bytes, bytearray, memoryview or a 1-D uint8 "
                               "tensor), or a list of them, got a torch.float32 tensor of shape (2, 3)")
    with pytest.raises(TypeError, match="got str$"):
        decode_image("cat.jpg")
    with pytest.raises(ValueError, match=r"^name has 1 entries for 2 images$"):
        decode_image([data, data], name=["a"])
    with pytest.raises(ValueError, match=r"^dtype must be torch.uint8, torch.uint16 or torch.float32, got "
                                         r"torch.int64$"):
        decode_image(data, dtype=torch.int64)


def test_the_returned_tensor_is_the_callers_own():
    data = read("png_rgb8.png")
    first = decode_image(data)
    first.zero_()
    assert int(decode_image(data).sum()) > 0


# ------------------------------------------------------------------------------------------------ backends


def test_backend_names_and_what_is_installed(monkeypatch):
    assert BACKENDS == ("auto", "pillow", "torchcodec", "torchvision", "nvimgcodec")
    versions = image_backends()
    assert set(versions) == {"pillow", "torchcodec", "torchvision", "nvimgcodec"} and versions["pillow"]
    with pytest.raises(ValueError) as info:
        decode_image(read("png_rgb8.png"), backend="opencv")
    assert str(info.value) == ("backend must be one of auto, pillow, torchcodec, torchvision, nvimgcodec, got "
                               "'opencv'")
    if versions["nvimgcodec"] is None:
        with pytest.raises(ValueError, match=r"^image backend 'nvimgcodec' is not installed \(installed: pillow"):
            decode_image(read("png_rgb8.png"), backend="nvimgcodec")
    monkeypatch.setenv("TFR_TORCH_IMAGE_BACKEND", "pillow")
    assert choose_backend(read("jpeg_rgb420.jpg")) == "pillow"
    monkeypatch.setenv("TFR_TORCH_IMAGE_BACKEND", "bogus")
    with pytest.raises(ValueError, match="got 'bogus'"):
        decode_image(read("png_rgb8.png"))


@pytest.fixture
def fake_decoders(monkeypatch):
    """Make torchvision and TorchCodec look installed (routing only: nothing is decoded by them)."""
    from tfr_torch.images import _accel

    monkeypatch.setattr(_accel, "torchvision_io", lambda: object())
    monkeypatch.setattr(_accel, "torchcodec_decoders", lambda: object())
    monkeypatch.setattr(_accel, "nvimgcodec", lambda: None)
    return _accel


@pytest.mark.parametrize("name,auto,torchvision,torchcodec", [
    ("jpeg_rgb420.jpg", "torchvision", "torchvision", "torchcodec"),
    ("jpeg_gray.jpg", "torchvision", "torchvision", "torchcodec"),
    ("jpeg_exif6.jpg", "torchvision", "torchvision", "pillow"),  # TorchCodec would apply the rotation
    ("jpeg_cmyk.jpg", "pillow", "pillow", "pillow"),  # torchvision returns 255 - CMYK
    ("png_rgb8.png", "torchcodec", "pillow", "torchcodec"),  # torchvision's decode_png can crash the process
    ("png_pal4_trns.png", "torchcodec", "pillow", "torchcodec"),
    ("webp_lossy.webp", "torchcodec", "pillow", "torchcodec"),
    ("webp_animated.webp", "pillow", "pillow", "pillow"),
    ("gif_static.gif", "pillow", "pillow", "pillow"),
    ("bmp_rgb24.bmp", "pillow", "pillow", "pillow"),
    ("tiff_rgb.tiff", "pillow", "pillow", "pillow"),
    ("pgm_gray16.pgm", "pillow", "pillow", "pillow"),
])
def test_each_format_goes_only_to_a_decoder_that_meets_the_contract(fake_decoders, name, auto, torchvision,
                                                                      torchcodec):
    data = read(name)
    assert choose_backend(data) == auto
    assert choose_backend(data, backend="torchvision") == torchvision
    assert choose_backend(data, backend="torchcodec") == torchcodec
    assert choose_backend(data, backend="pillow") == "pillow"


def test_auto_is_pillow_when_nothing_else_imports(monkeypatch):
    from tfr_torch.images import _accel

    for finder in ("torchvision_io", "torchcodec_decoders", "nvimgcodec"):
        monkeypatch.setattr(_accel, finder, lambda: None)
    for name in GOOD:
        assert choose_backend(read(name)) == "pillow"
    assert choose_backend(read("jpeg_rgb420.jpg"), device="cuda") == "pillow"


def test_torchvision_decodes_without_its_deprecation_notice():
    if "torchvision" not in INSTALLED:
        pytest.skip("torchvision is not installed")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        decode_image(read("jpeg_rgb420.jpg"), backend="torchvision")


# ------------------------------------------------------------------------------------------------ GPU batches


@pytest.fixture
def fake_gpu(monkeypatch, fake_decoders):
    """A CUDA device that is the CPU, and a batched JPEG decoder that records its batches and decodes them with
    Pillow: the routing and the contract of device="cuda" checked on a machine without a GPU."""
    from PIL import Image

    calls = []

    def decode_jpegs_gpu(backend, items, gray, device, regions=None, stream=None):
        calls.append((backend, len(items), gray, device.type))
        out = []
        for data in items:
            if data == read("bad_truncated.jpg"):
                raise fake_decoders.AccelError("nvjpeg: bitstream error")
            img = Image.open(__import__("io").BytesIO(data))
            if gray:
                img.draft("L", img.size)
            array = np.asarray(img.convert("L" if gray else "RGB"))
            array = array[:, :, None] if array.ndim == 2 else array
            out.append(torch.from_numpy(array.copy()).permute(2, 0, 1))  # channels-last memory, as GPU decoders give
        return out

    monkeypatch.setattr(fake_decoders, "decode_jpegs_gpu", decode_jpegs_gpu)
    monkeypatch.setattr(fake_decoders, "torchcodec_decoders", lambda: None)
    from tfr_torch.images import _nvimgcodec

    monkeypatch.setattr(_nvimgcodec, "api", lambda: object())  # nvImageCodec "installed": the automatic GPU decoder
    pretend_cuda(monkeypatch)
    return calls


def test_a_list_of_jpegs_is_one_gpu_batch_and_the_rest_is_decoded_on_the_cpu(fake_gpu, fake_decoders, monkeypatch):
    monkeypatch.setattr(fake_decoders, "torchvision_io", lambda: None)  # Pillow decodes what the CPU gets
    names = ["jpeg_rgb420.jpg", "png_rgba8.png", "jpeg_rgb444.jpg", "jpeg_cmyk.jpg", "jpeg_gray.jpg",
             "jpeg_progressive.jpg"]
    out = decode_image([read(n) for n in names], "RGB", device="cuda")
    # a gray JPEG asked for as RGB: the same batch; the progressive one on the CPU (nvImageCodec: up to 3 levels off)
    assert fake_gpu == [("nvimgcodec", 3, False, "cuda")]
    for name, tensor in zip(names, out):
        assert_pixels(tensor, expected(name)["RGB"], name)


def test_gpu_batches_follow_the_backend_asked_for_and_the_modes(fake_gpu):
    names = ["jpeg_rgb420.jpg", "jpeg_gray.jpg", "jpeg_exif6.jpg"]
    out = decode_image([read(n) for n in names], "GRAY", device="cuda", backend="torchvision",
                       apply_exif_orientation=True)
    assert fake_gpu == [("torchvision", 3, True, "cuda")]
    assert_pixels(out[0], expected("jpeg_rgb420.jpg")["GRAY"], "jpeg_rgb420.jpg")
    assert_pixels(out[1], expected("jpeg_gray.jpg")["GRAY"], "jpeg_gray.jpg")
    assert out[2].shape == (1, 17, 17)
    single = decode_image(read("jpeg_rgb444.jpg"), "RGB_ALPHA", device="cuda")  # one image: a batch of one
    assert_pixels(single, expected("jpeg_rgb444.jpg")["RGB_ALPHA"], "jpeg_rgb444.jpg")


def test_a_bad_jpeg_in_a_gpu_batch_is_named_before_any_gpu_call(fake_gpu, monkeypatch):
    """The structure check finds it on the CPU, so it is decoded there instead: the CPU path's own error (Pillow's
    here), before any GPU call."""
    from tfr_torch.images import decode as decode_module

    monkeypatch.setattr(decode_module, "_CPU_ORDER", {})  # the CPU path by Pillow (the fake torchvision decodes none)
    items = [read("jpeg_rgb420.jpg"), read("bad_truncated.jpg"), read("jpeg_rgb444.jpg")]
    with pytest.raises(DecodeError) as info:
        decode_image(items, device="cuda", name=["a.tfrecord:0", "a.tfrecord:812", "a.tfrecord:1400"])
    with pytest.raises(DecodeError) as cpu:
        decode_image(items[1], name="a.tfrecord:812")
    assert str(info.value) == str(cpu.value)
    assert str(info.value).startswith("cannot decode image a.tfrecord:812 (525 bytes): corrupt or truncated JPEG: ")
    assert fake_gpu == []  # the structure check ran first, on the CPU


def test_a_batch_the_decoder_refuses_is_decoded_one_by_one_to_name_the_bad_image(fake_gpu, monkeypatch):
    from tfr_torch.images import _accel

    def refuse(backend, items, gray, device, regions=None, stream=None):
        fake_gpu.append(len(items))
        if any(d == read("jpeg_rgb444.jpg") for d in items):
            raise _accel.AccelError("nvjpeg: bitstream error")
        return [torch.zeros(3, 17, 17, dtype=torch.uint8) for _ in items]

    monkeypatch.setattr(_accel, "decode_jpegs_gpu", refuse)
    with pytest.raises(DecodeError) as info:
        decode_image([read("jpeg_rgb420.jpg"), read("jpeg_rgb444.jpg")], device="cuda", name=["a:0", "a:9"])
    assert str(info.value) == ("cannot decode image a:9 (869 bytes): corrupt or truncated JPEG: nvjpeg: bitstream "
                               "error")
    assert fake_gpu == [2, 1, 1]


def test_torchvision_decodes_on_the_gpu_only_when_named(fake_gpu, monkeypatch):
    """Its GPU decoder differs from the contract by up to 96 levels: "auto" decodes on the CPU instead."""
    from tfr_torch.images import _nvimgcodec

    monkeypatch.setattr(_nvimgcodec, "api", lambda: None)
    data = read("jpeg_rgb420.jpg")
    assert choose_backend(data, device="cuda") == "torchvision"  # on the CPU (the fake torchvision's CPU route)
    out = decode_image([data], "RGB", device="cuda", backend="pillow")
    assert fake_gpu == []
    decode_image([data], "RGB", device="cuda", backend="torchvision")
    assert fake_gpu == [("torchvision", 1, False, "cuda")]
    assert_pixels(out[0], expected("jpeg_rgb420.jpg")["RGB"], "jpeg_rgb420.jpg")


def test_cuda_without_a_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError) as info:
        decode_image([read("jpeg_rgb420.jpg")], device="cuda:1")
    assert str(info.value) == (f"device='cuda:1' but torch.cuda.is_available() is False (torch "
                               f"{torch.__version__})")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_gpu_batch_matches_the_cpu_contract():
    names = [n for n in GOOD if n.startswith("jpeg_") and n != "jpeg_cmyk.jpg"]
    out = decode_image([read(n) for n in names], "RGB", device="cuda")
    for name, tensor in zip(names, out):
        assert tensor.device.type == "cuda"
        diff = (tensor.cpu().to(torch.int32) - torch.from_numpy(expected(name)["RGB"]).to(torch.int32)).abs()
        assert int(diff.max()) <= JPEG_TOLERANCE, name  # the automatic GPU decoder meets the CPU contract


def test_decode_image_is_public_from_the_images_family_only():
    from tfr_torch.images import decode_image as home

    assert tfr_torch.decode_image is decode_image is home
    with pytest.raises(ImportError):  # the decode layer holds no image codec (the old shim is gone)
        importlib.import_module("tfr_torch.decode.images")


@pytest.mark.parametrize("dtype, what", [(np.int32, "mode I (32-bit integer pixels)"),
                                         (np.float32, "mode F (32-bit float pixels)")])
def test_32_bit_tiffs_are_refused_as_unsupported_not_as_corrupt(dtype, what):
    """A valid TIFF of 32-bit samples has no meaning in the 8/16-bit contract: the error says so, instead of calling
    the file corrupt or truncated."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.arange(16, dtype=dtype).reshape(4, 4)).save(buffer, "TIFF")
    with pytest.raises(tfr_torch.DecodeError) as info:
        tfr_torch.decode_image(buffer.getvalue())
    assert f"a TIFF of pixels that are not supported: Pillow {what} has no 8-bit image meaning" in str(info.value)
