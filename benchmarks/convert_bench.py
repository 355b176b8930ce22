#!/usr/bin/env python3
"""Conversion throughput: `tfr-torch convert --format keep` of an image folder, beside a plain copy of it.

    python benchmarks/convert_bench.py [--images 2000] [--workers 1 2] [--data-dir benchmarks/data]

Makes a folder of JPEG photos-like images (smooth gradients plus noise, 640x480, about 60-100 KB each) in 10
class folders once, then times (best of --repeat, page cache warm): `shutil.copytree` of the folder, and
`tfr_torch.convert_image_folder(..., format="keep")` with each worker count, with and without the decode check.
MB/s are megabytes (10**6) of image files read.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import tfr_torch  # noqa: E402


def make_folder(root: str, images: int) -> int:
    from PIL import Image

    marker = os.path.join(root, f".complete-{images}")
    if os.path.exists(marker):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:480, 0:640]
    for i in range(images):
        folder = os.path.join(root, f"class{i % 10:02d}")
        os.makedirs(folder, exist_ok=True)
        base = (x * (i % 7 + 1) / 8 + y * (i % 5 + 1) / 6) % 256
        pixels = np.stack([base, np.roll(base, 50 + i, 1), 255 - base], axis=2) + rng.normal(0, 12, (480, 640, 3))
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(os.path.join(folder, f"{i:06d}.jpg"), quality=90)
    open(marker, "w").close()
    return make_folder(root, images)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    args = parser.parse_args()
    src = os.path.join(args.data_dir, f"images-{args.images}")
    total = make_folder(src, args.images)
    mb = total / 1e6
    print(f"# conversion: {args.images} JPEGs, {mb:,.1f} MB, {os.cpu_count()} CPUs; command: "
          f"`python {' '.join(sys.argv)}`\n")
    print("| what | seconds | MB/s | vs copy |\n|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        def copy() -> None:
            target = os.path.join(tmp, "copy")
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(src, target)

        t_copy = best(copy, args.repeat)
        print(f"| `shutil.copytree` (plain copy) | {t_copy:.2f} | {mb / t_copy:,.0f} | 1.00 |")
        for check in (True, False):
            for workers in args.workers:
                def convert() -> None:
                    out = os.path.join(tmp, "shards")
                    shutil.rmtree(out, ignore_errors=True)
                    tfr_torch.convert_image_folder(src, out, "bench", "train", format="keep", workers=workers,
                                                   check=check, resume=False)

                t = best(convert, args.repeat)
                flag = "" if check else " --no-check"
                print(f"| `tfr-torch convert --format keep --workers {workers}{flag}` | {t:.2f} | {mb / t:,.0f} | "
                      f"{t_copy / t:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
