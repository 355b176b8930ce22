"""Where decode_image(device="cuda") and DeviceLoader spend a batch's time on a GPU: a diagnostic beside
benchmarks/gpu_pipeline.py (which measures rates), for the next GPU run.

    python benchmarks/gpu_profile.py [--images 2048] [--batch 256]

Prints ms per batch of: the JPEG structure check alone, nvImageCodec's decode call alone (hardware engines and
CUDA decoder), the same with the results wrapped as tensors, decode_image on the GPU (nvImageCodec and
torchvision), then cProfile's top entries for decode_image and for DeviceLoader (whole images and crop regions,
prepared in the calling thread so that the profile sees the work). Needs CUDA (and nvImageCodec for its rows).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tfr_torch  # noqa: E402
from benchmarks import gpu_pipeline  # noqa: E402
from tfr_torch.images import DeviceLoader, ImageTransform, _nvimgcodec, decode_image  # noqa: E402
from tfr_torch.images._jpeg import jpeg_problem  # noqa: E402


def top(profile: cProfile.Profile, count: int = 22) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(count)
    return out.getvalue()[-6000:]


def per_batch(label: str, batches: list[list[bytes]], call: Callable[[list[bytes]], Any], rounds: int = 8) -> None:
    call(batches[0])
    torch.cuda.synchronize()
    start = time.perf_counter()
    for k in range(rounds):
        call(batches[k % len(batches)])
    torch.cuda.synchronize()
    ms = (time.perf_counter() - start) / rounds * 1e3
    print(f"{label}: {ms:.1f} ms per batch of {len(batches[0])} ({len(batches[0]) / ms * 1e3:,.0f} images/s)",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to profile")
        return
    device = torch.device("cuda")
    folder = tempfile.mkdtemp()
    paths = gpu_pipeline.make_shards(folder, args.images, 8, 500, 375)
    raw = tfr_torch.TFRecordDataset(paths, gpu_pipeline.SPEC, index="auto", batch_size=args.batch, shuffle=True)
    batches = [list(b["image/encoded"]) for _, b in zip(range(4), torch.utils.data.DataLoader(raw, batch_size=None))]
    per_batch("jpeg_problem on each image", batches, lambda items: [jpeg_problem(d) for d in items])
    nv = _nvimgcodec.api()
    if nv is not None:
        found = _nvimgcodec.decoders(nv, 0)
        params = _nvimgcodec._params(nv, False)
        if found.hardware is not None:
            per_batch("nvImageCodec decode call, hardware engines", batches,
                      lambda items: found.hardware.decode(items, params=params))
        per_batch("nvImageCodec decode call, CUDA decoder", batches,
                  lambda items: found.general.decode(items, params=params))
        per_batch("_nvimgcodec.decode_batch (decode + tensors)", batches,
                  lambda items: _nvimgcodec.decode_batch(nv, items, False, device))
        per_batch("decode_image(device='cuda'), nvImageCodec", batches,
                  lambda items: decode_image(items, "RGB", device=device))
    if tfr_torch.image_backends().get("torchvision"):
        per_batch("decode_image(device='cuda', backend='torchvision')", batches,
                  lambda items: decode_image(items, "RGB", device=device, backend="torchvision"))
    profile = cProfile.Profile()
    profile.enable()
    for k in range(6):
        decode_image(batches[k % len(batches)], "RGB", device=device)
    torch.cuda.synchronize()
    profile.disable()
    print("== decode_image profile\n" + top(profile))
    train = ImageTransform(224, train=True, dtype=torch.bfloat16)
    for regions in (False, True):
        inner = torch.utils.data.DataLoader(raw, batch_size=None, num_workers=4, pin_memory=True,
                                            persistent_workers=True)
        loader = iter(gpu_pipeline.forever(DeviceLoader(inner, device, transform=train, thread=False,
                                                        regions=regions)))
        for _ in range(3):
            next(loader)
        torch.cuda.synchronize()
        profile = cProfile.Profile()
        profile.enable()
        start = time.perf_counter()
        for _ in range(6):
            next(loader)
        torch.cuda.synchronize()
        profile.disable()
        rate = 6 * args.batch / (time.perf_counter() - start)
        print(f"== DeviceLoader in the calling thread, regions={regions}: {rate:,.0f} images/s\n" + top(profile, 30))


if __name__ == "__main__":
    main()
