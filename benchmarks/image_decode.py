"""Image decoding speed per decoder, as decode_image runs it (one image at a time, one thread).

    python benchmarks/image_decode.py [--size 256] [--count 200]

Makes `count` synthetic images (a smooth gradient plus noise, so the codecs have realistic work) as JPEG (quality 90,
4:2:0), PNG RGB and lossy WebP, then decodes each set with every decoder that is installed (backend="pillow",
"torchvision", "torchcodec"), mode "RGB". Prints images/s and MB/s of encoded input. A decoder that does not take a
format (torchvision: PNG, WebP) is routed to Pillow by decode_image; such rows are marked "(routed to pillow)".
"""

from __future__ import annotations

import argparse
import io
import time
import warnings

import numpy as np
from PIL import Image

import tfr_torch
from tfr_torch.images import choose_backend


def make(size: int, count: int, fmt: str) -> list[bytes]:
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:size, 0:size]
    out = []
    for k in range(count):
        base = np.stack([(x + k) % 256, (y * 2 + k) % 256, (x + y) % 256], -1)
        pixels = np.clip(base + rng.integers(-12, 13, base.shape), 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        kwargs = {"JPEG": {"quality": 90}, "PNG": {}, "WEBP": {"quality": 80}}[fmt]
        Image.fromarray(pixels).save(buf, fmt, **kwargs)
        out.append(buf.getvalue())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=256, help="image side in pixels (default 256)")
    parser.add_argument("--count", type=int, default=200, help="images per format (default 200)")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DeprecationWarning)
    installed = [name for name, version in tfr_torch.image_backends().items() if version and name != "nvimgcodec"]
    print(f"decoders: {tfr_torch.image_backends()}; {args.count} images of {args.size}x{args.size} per format")
    print("format\tdecoder\timages/s\tMB/s")
    for fmt in ("JPEG", "PNG", "WEBP"):
        images = make(args.size, args.count, fmt)
        megabytes = sum(map(len, images)) / 1e6
        for name in installed:
            routed = choose_backend(images[0], backend=name)
            tfr_torch.decode_image(images[:5], "RGB", backend=name)  # warm up
            start = time.perf_counter()
            for data in images:
                tfr_torch.decode_image(data, "RGB", backend=name)
            seconds = time.perf_counter() - start
            note = "" if routed == name else f" (routed to {routed})"
            print(f"{fmt}\t{name}{note}\t{len(images) / seconds:,.0f}\t{megabytes / seconds:,.1f}")


if __name__ == "__main__":
    main()
