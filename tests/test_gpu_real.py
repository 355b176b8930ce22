"""GPU decoding and DeviceLoader on a real CUDA device (skipped without one; the same behaviours are tested on the
CPU with stand-ins in test_gpu_decode.py and test_image_loader.py).

The contract: the automatic GPU decoder's pixels are within 2 levels of the CPU result (the CPU decoders' own);
every JPEG the CPU path refuses is refused in a GPU batch too, as a DecodeError naming the record; a decoder named
explicitly (torchvision) may differ by more, and the figure is printed for the docs. Run with `-s` to see the
figures (benchmarks/gpu_check.sh does).
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.errors import DecodeError
from tfr_torch.images import DeviceLoader, ImageTransform, choose_backend, decode_image
from tfr_torch.images import _nvimgcodec, image_backends

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TOLERANCE = 2  # levels: the automatic GPU decoder against the CPU contract
SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "images", "src")


def photo(k: int, width: int = 500, height: int = 375, **save) -> bytes:
    """An ImageNet-like JPEG (gradients and noise), as benchmarks/gpu_pipeline.py makes them."""
    rng = np.random.default_rng(k)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([(x + 3 * k) % 256, (y * 2 + k) % 256, (x + y) % 256], -1)
    pixels = np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", **{"quality": 90, **save})
    return buf.getvalue()


def corpus() -> dict[str, bytes]:
    items = {f"photo{k}": photo(k) for k in range(6)}
    items["photo 4:4:4"] = photo(6, subsampling=0)
    items["photo 4:2:2"] = photo(7, subsampling=1)
    items["photo q75 odd size"] = photo(8, 333, 251, quality=75)
    items["photo progressive"] = photo(9, progressive=True)
    items["photo restart markers"] = photo(10, restart_marker_blocks=4) if _pillow_restarts() else photo(10)
    for name in sorted(os.listdir(SRC)):
        if name.startswith("jpeg_") and name != "jpeg_cmyk.jpg":
            with open(os.path.join(SRC, name), "rb") as f:
                items[name] = f.read()
    return items


def _pillow_restarts() -> bool:
    try:
        Image.new("RGB", (8, 8)).save(io.BytesIO(), "JPEG", restart_marker_blocks=1)
        return True
    except TypeError:
        return False


def difference(gpu: torch.Tensor, cpu: torch.Tensor) -> tuple[int, float]:
    diff = (gpu.cpu().to(torch.int32) - cpu.to(torch.int32)).abs()
    return int(diff.max()), float((diff > 8).float().mean())


def nvimgcodec_or_skip() -> None:
    if _nvimgcodec.api() is None:
        pytest.skip(f"nvImageCodec is not installed or not usable here ({image_backends()})")


@pytest.mark.parametrize("hardware", ["1", "0"])
@pytest.mark.parametrize("mode", ["RGB", "GRAY"])
def test_the_automatic_gpu_decoder_meets_the_cpu_contract(monkeypatch, hardware, mode):
    nvimgcodec_or_skip()
    monkeypatch.setenv(_nvimgcodec.ENV_HARDWARE, hardware)
    items = corpus()
    assert choose_backend(items["photo0"], device="cuda") == "nvimgcodec"
    print(f"\nnvImageCodec {_nvimgcodec.describe(0)}")
    gpu = decode_image(list(items.values()), mode, device="cuda")
    worst = {}
    for (name, data), pixels in zip(items.items(), gpu):
        cpu = decode_image(data, mode)
        assert pixels.device.type == "cuda" and pixels.shape == cpu.shape and pixels.dtype == torch.uint8, name
        worst[name] = difference(pixels, cpu)
    print(f"nvImageCodec (engines {'on' if hardware == '1' else 'off'}, {mode}) vs the CPU: {worst}")
    assert all(most <= TOLERANCE for most, _ in worst.values()), worst


def test_torchvision_on_the_gpu_runs_only_when_named_and_its_difference_is_printed():
    if not image_backends().get("torchvision"):
        pytest.skip("torchvision is not installed")
    items = corpus()
    assert choose_backend(items["photo0"], device="cuda") != "torchvision"
    gpu = decode_image(list(items.values()), "RGB", device="cuda", backend="torchvision")
    worst = {name: difference(pixels, decode_image(data, "RGB")) for (name, data), pixels in zip(items.items(), gpu)}
    print(f"\ntorchvision on the GPU vs the CPU (max levels, share of pixels off by > 8): {worst}")
    assert all(pixels.device.type == "cuda" for pixels in gpu)


def gpu_backends() -> list[str]:
    found = []
    if _nvimgcodec.api() is not None:
        found.append("nvimgcodec")
    if image_backends().get("torchvision"):
        found.append("torchvision")
    return found


@pytest.mark.parametrize("decoder", ["nvimgcodec", "torchvision"])
def test_a_cut_jpeg_in_a_gpu_batch_is_a_decode_error_naming_the_record(decoder):
    if decoder not in gpu_backends():
        pytest.skip(f"{decoder} is not usable here")
    good = photo(0)
    for cut in (len(good) // 10, len(good) // 3, len(good) // 2, len(good) * 9 // 10, len(good) - 2, len(good) - 1):
        with pytest.raises(DecodeError, match=r"^cannot decode image shard.tfrecord:77 \("):
            decode_image([good, good[:cut], good], "RGB", device="cuda", backend=decoder,
                         name=["shard.tfrecord:0", "shard.tfrecord:77", "shard.tfrecord:99"])


def mutations(data: bytes, count: int, seed: int) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        kind = k % 5
        at = int(rng.integers(2, len(data) - 2))
        if kind == 0:
            out.append((f"cut at {at}", data[:at]))
        elif kind == 1:
            flipped = bytearray(data)
            flipped[at] ^= 1 << int(rng.integers(0, 8))
            out.append((f"bit flip at {at}", bytes(flipped)))
        elif kind == 2:
            out.append((f"8 zero bytes at {at}", data[:at] + bytes(8) + data[at + 8:]))
        elif kind == 3:
            out.append((f"end-of-image inserted at {at}", data[:at] + b"\xff\xd9" + data[at:]))
        else:
            header = int(rng.integers(2, min(len(data), 700)))  # inside the marker segments
            flipped = bytearray(data)
            flipped[header] = int(rng.integers(0, 256))
            out.append((f"header byte {header} set to {flipped[header]}", bytes(flipped)))
    return out


@pytest.mark.parametrize("decoder", ["nvimgcodec", "torchvision"])
def test_no_gpu_decoder_returns_pixels_for_bytes_the_cpu_path_refuses(decoder):
    if decoder not in gpu_backends():
        pytest.skip(f"{decoder} is not usable here")
    silent, unclear, both = [], [], 0
    for what, data in mutations(photo(1), 300, seed=5) + mutations(photo(2, progressive=True), 100, seed=6):
        try:
            decode_image(data, "RGB")
            cpu_refused = False
        except DecodeError:
            cpu_refused = True
        try:
            decode_image([data], "RGB", device="cuda", backend=decoder, name=["r:1"])
            gpu_refused = False
        except DecodeError as exc:
            gpu_refused = True
            assert str(exc).startswith("cannot decode image r:1 ("), exc
        except Exception as exc:  # noqa: BLE001  # anything but DecodeError is a defect: collected, reported
            unclear.append((what, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        both += cpu_refused and gpu_refused
        if cpu_refused and not gpu_refused:
            silent.append(what)
    print(f"\n{decoder}: {both} refused by both; silent: {silent[:20]}; unclear errors: {unclear[:5]}")
    assert not silent and not unclear


def shard(tmp_path, count: int = 40) -> str:
    path = str(tmp_path / "train.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(count):
            writer.write_example({"image/encoded": photo(k % 8, 200 + 7 * (k % 5), 160 + 5 * (k % 3)), "label": k})
    tfr_torch.build_index(path, path + ".idx")
    return path


SPEC = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "label": tfr_torch.FixedLenFeature([], torch.int64)}
RAW = ImageTransform(64, train=True, dtype=torch.uint8, mean=None, std=None, seed=3)


def batches(path: str, device: str, transform: ImageTransform, **kwargs) -> list[dict]:
    data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=8, shuffle=True)
    return [{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
            for b in DeviceLoader(DataLoader(data, batch_size=None, pin_memory=device == "cuda"), device,
                                  transform=transform, **kwargs)]


def test_device_loader_crops_on_the_gpu_as_on_the_cpu(tmp_path):
    """The same crops (seed, epoch, rank, index) on both devices; the pixels within the decoders' tolerance plus one
    level of rounding (the CPU reference uses the GPU's bilinear gather, so only decoding differs)."""
    nvimgcodec_or_skip()
    path = shard(tmp_path)
    on_gpu = batches(path, "cuda", RAW)
    whole = ImageTransform(64, train=True, dtype=torch.uint8, mean=None, std=None, seed=3)
    data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=8, shuffle=True)
    first = 0
    for got, batch in zip(on_gpu, DataLoader(data, batch_size=None)):
        assert got["label"].tolist() == batch["label"].tolist()
        pixels = [decode_image(bytes(d), "RGB") for d in batch["image/encoded"]]
        boxes, flips = whole.plan([tuple(p.shape[-2:]) for p in pixels], 0, 0, range(first, first + len(pixels)))
        want = whole.apply(pixels, boxes, flips, method="gather")
        first += len(pixels)
        most = int((got["image/encoded"].to(torch.int32) - want.to(torch.int32)).abs().max())
        assert most <= TOLERANCE + 1, most


def test_region_decoding_gives_the_pixels_of_the_whole_image(tmp_path, monkeypatch):
    nvimgcodec_or_skip()
    print(f"\nregion decoding: {_nvimgcodec.api().region or 'none in this release'}")
    path = shard(tmp_path)
    regions = batches(path, "cuda", RAW, regions=True)
    monkeypatch.setattr(_nvimgcodec, "_source", lambda nv, data, region: data)  # whole images
    wholes = batches(path, "cuda", RAW, regions=True)
    worst = max(int((a["image/encoded"].to(torch.int32) - b["image/encoded"].to(torch.int32)).abs().max())
                for a, b in zip(regions, wholes))
    print(f"region vs whole image: at most {worst} levels")
    assert worst <= TOLERANCE


def test_device_loader_hands_out_training_batches_on_the_gpu(tmp_path):
    nvimgcodec_or_skip()
    path = shard(tmp_path)
    data = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=8, shuffle=True)
    loader = DeviceLoader(DataLoader(data, batch_size=None, num_workers=2, pin_memory=True), "cuda",
                          transform=ImageTransform(64, train=True, dtype=torch.bfloat16))
    assert loader.thread
    seen = []
    for batch in loader:
        images = batch["image/encoded"]
        assert images.device.type == "cuda" and images.dtype == torch.bfloat16 and images.shape[1:] == (3, 64, 64)
        assert images.is_contiguous(memory_format=torch.channels_last)
        assert batch["label"].device.type == "cuda"
        assert bool(torch.isfinite(images.float()).all())
        seen += batch["label"].tolist()
    assert sorted(seen) == list(range(40))
    threaded = batches(path, "cuda", RAW, thread=True)
    inline = batches(path, "cuda", RAW, thread=False)
    for a, b in zip(threaded, inline):
        assert torch.equal(a["image/encoded"], b["image/encoded"])


def test_a_bad_jpeg_through_the_device_loader_names_its_record(tmp_path):
    nvimgcodec_or_skip()
    path = str(tmp_path / "bad.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(12):
            data = photo(k, 120, 90)
            writer.write_example({"image/encoded": data[: len(data) // 3] if k == 9 else data, "label": k,
                                  "name": f"img{k}.jpg"})
    spec = dict(SPEC, name=tfr_torch.FixedLenFeature([], tfr_torch.string))
    data = tfr_torch.TFRecordDataset(path, spec, batch_size=4)
    with pytest.raises(DecodeError, match=r"^cannot decode image img9.jpg \("):
        list(DeviceLoader(DataLoader(data, batch_size=None), "cuda", transform=RAW, names="name"))


def test_the_batched_gather_on_the_gpu_does_not_synchronize():
    """The training transforms of a batch queue their work on the stream and return: no blocking copy, no wait for
    the stream to drain (torch's sync debug mode turns each into an error), and the same pixels as the CPU's gather."""
    device = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    sizes = [(375, 500), (333, 251), (64, 80)] * 4
    cpu = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1) for h, w in sizes]
    gpu = [image.permute(1, 2, 0).to(device).permute(2, 0, 1) for image in cpu]
    transform = ImageTransform(224, train=True, dtype=torch.bfloat16)
    boxes, flips = transform.plan(sizes, 0, 0, range(len(sizes)))
    transform.apply(gpu, boxes, flips)  # the normalization's constants are made once per device, blocking
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = transform.apply(gpu, boxes, flips)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    want = transform.apply(cpu, boxes, flips, method="gather")
    assert out.shape == want.shape and out.dtype == want.dtype == torch.bfloat16
    assert (out.cpu().float() - want.float()).abs().max() <= 0.016  # one bfloat16 step near 2 at most
