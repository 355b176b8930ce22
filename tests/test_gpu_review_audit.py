"""From a review of the code that runs only on a GPU, read against torch's and nvImageCodec's own code (no GPU
here: a "cuda" device that is the CPU, tests/cuda_standin.py, and nvImageCodec stand-ins of test_gpu_decode.py).
Each test failed before its fix."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch
from torch.utils.data import DataLoader

from cuda_standin import pretend_cuda
from test_gpu_decode import RELEASES, fake_nvimgcodec, gpu, noisy_jpeg  # noqa: F401  # gpu: the fixture

import tfr_torch
from tfr_torch.images import DeviceLoader, ImageTransform, decode_image
from tfr_torch.images import loader as loader_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "label": tfr_torch.FixedLenFeature([], torch.int64)}
TRAIN = ImageTransform(16, train=True, dtype=torch.uint8, seed=2)


@pytest.fixture
def shard(tmp_path) -> str:
    path = str(tmp_path / "s.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(6):
            writer.write_example({"image/encoded": noisy_jpeg(40 + 4 * k, 32), "label": k})
    return path


def recording(release: str = "0.7"):
    """A stand-in nvImageCodec whose decoders record their device_id and each decode's cuda_stream."""
    nvi = fake_nvimgcodec(release, **RELEASES.get(release, {}))
    made, streams = [], []
    base = nvi.Decoder

    class Decoder(base):  # type: ignore[misc, valid-type]
        def __init__(self, device_id=0, **kwargs):
            made.append(device_id)
            super().__init__(device_id, **kwargs)

        def decode(self, items, params=None, **rest):
            streams.append(rest.get("cuda_stream", "not given"))
            return super().decode(items, params, **rest)

    nvi.Decoder = Decoder
    return nvi, made, streams


def test_a_device_loader_on_cuda_without_an_index_runs_its_thread(shard, monkeypatch):
    """Fixed: DeviceLoader(loader, "cuda") (the usual spelling, and gpu_pipeline.py's) called
    torch.cuda.set_device(torch.device("cuda")) in its background thread, which torch refuses ("Expected a
    torch.device with a specified index or an integer, but got:cuda", torch/cuda/__init__.py set_device ->
    torch/_utils.py _get_device_index with optional=False): every threaded loader on a GPU raised ValueError at its
    first batch. The thread now takes the current device's index (a DDP rank's torch.cuda.set_device)."""
    pretend_cuda(monkeypatch)
    monkeypatch.setattr(loader_module, "streams_for", lambda device: loader_module.Streams())
    monkeypatch.setattr(loader_module, "decode_views", lambda items, *args, **kwargs: [
        (decode_image(d, "RGB"), (0, 0)) for d in items])
    seen: list = []
    real = torch.cuda.set_device

    def set_device(device):
        real(device)
        seen.append((torch.cuda.current_device(), threading.get_ident()))

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    torch.cuda.set_device(1)  # the training loop's device (a DDP rank's)
    data = tfr_torch.TFRecordDataset(shard, SPEC, batch_size=2)
    loader = DeviceLoader(DataLoader(data, batch_size=None), "cuda", transform=TRAIN)
    assert loader.thread
    labels = [b["label"].tolist() for b in loader]
    assert labels == [[0, 1], [2, 3], [4, 5]]
    assert seen[-1][0] == 1 and seen[-1][1] != threading.get_ident()  # the thread runs on the loop's device


def test_nvimgcodec_decodes_on_the_current_device_for_cuda_without_an_index(gpu):
    """Fixed: decode_image(..., device="cuda") and DeviceLoader(..., "cuda") made nvImageCodec's decoders with
    device_id 0 (`device.index or 0`) whatever the current device was: under DDP (torch.cuda.set_device(rank))
    every rank decoded on GPU 0, with a CUDA stream of its own GPU. The index of "cuda" is now the current
    device's, as torch's own "cuda" means (nvImageCodec's Decoder defaults to the current device too:
    device_id=NVIMGCODEC_DEVICE_CURRENT, python/decoder.cpp)."""
    nvi, made, _ = recording()
    gpu(nvi)
    torch.cuda.set_device(1)
    decode_image([noisy_jpeg()], "RGB", device="cuda")
    assert made and set(made) == {1}


def test_decode_image_on_a_gpu_decodes_on_torchs_current_stream(gpu, monkeypatch):
    """Fixed: decode_image(list, device="cuda") called nvImageCodec's decode without cuda_stream, so it decoded
    on the legacy default stream (cuda_stream=0, python/decoder.cpp) and its image memory was allocated and freed
    there (cudaMallocAsync / cudaFreeAsync on that stream, src/imgproc/device_buffer.cpp). torch's streams are
    created non-blocking: under `with torch.cuda.stream(s):` torch read the pixels on s with nothing ordering them
    after the decode. The decode now runs on torch's current stream."""
    import types

    nvi, _, streams = recording()
    gpu(nvi)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: types.SimpleNamespace(cuda_stream=4242))
    decode_image([noisy_jpeg(), noisy_jpeg(48, 40)], "RGB", device="cuda")
    assert streams and set(streams) == {4242}


def test_the_benchmarks_timing_survives_a_loader_shorter_than_its_warm_up():
    """Fixed: benchmarks/gpu_pipeline.py's timed() took 3 warm-up batches with next(), so a row over fewer batches
    (`--images 256`, the default --batch 256: one batch an epoch) ended the whole run with StopIteration; the row
    is now reported as not measured (None) and the run goes on."""
    sys.path.insert(0, ROOT)
    from benchmarks import gpu_pipeline

    assert gpu_pipeline.timed(iter([[1, 2]] * 2), len, 0.01, lambda: None) is None
    rate = gpu_pipeline.timed(iter([[1, 2]] * 6), len, 10.0, lambda: None)
    assert rate is not None and rate > 0


@pytest.mark.parametrize("mode", ["L", "RGB"])
def test_a_device_loader_without_a_transform_hands_out_torchs_memory_not_the_decoders(shard, monkeypatch, mode):
    """Fixed: DeviceLoader(..., "cuda", transform=None) handed out a gray image decoded by nvImageCodec as the
    decoder's own memory (a [1, H, W] view of [H, W, 1] is contiguous, so nothing copied it). That memory is freed
    on the side stream when the tensor goes (cudaFreeAsync, nvImageCodec's device_buffer.cpp), ordered after
    nothing the training stream does, and record_stream only covers torch's own allocations: the next decode
    could overwrite pixels a training kernel still reads. Every decoded image handed out is now a copy made on the
    side stream (RGB ones were copies already: [C, H, W] views of [H, W, C] memory made contiguous)."""
    pretend_cuda(monkeypatch)
    monkeypatch.setattr(loader_module, "streams_for", lambda device: loader_module.Streams())
    given: list[torch.Tensor] = []

    def decode_views(items, names, mode, dtype, backend, frames, device, regions, stream, contiguous=True,
                     headers=None):
        out = []
        for d in items:
            hwc = decode_image(d, mode).permute(1, 2, 0).contiguous()  # as a GPU decoder lays its memory out
            given.append(hwc)
            view = hwc.permute(2, 0, 1)
            out.append((view.contiguous() if contiguous else view, (0, 0)))  # (a gray view is contiguous)
        return out

    monkeypatch.setattr(loader_module, "decode_views", decode_views)
    data = tfr_torch.TFRecordDataset(shard, SPEC, batch_size=3)
    loader = DeviceLoader(DataLoader(data, batch_size=None), "cuda", transform=None, thread=False,
                          names=None)
    loader.mode = mode
    images = [image for batch in loader for image in batch["image/encoded"]]
    assert len(images) == len(given) == 6
    for image, mine in zip(images, given):
        assert image.is_contiguous() and torch.equal(image, mine.permute(2, 0, 1))
        assert image.untyped_storage().data_ptr() != mine.untyped_storage().data_ptr()  # Fixed: gray, the same
