"""The compiled core's pixel kernels beside the torch operations they replace, per resized image.

    python benchmarks/pixel_kernels.py [--size 224] [--repeat 200] [--rounds 5]

What ImageTransform does with each resized crop on the CPU (tfr_torch.images.transforms: _planes_into,
_normalized_into): the resize's RGB pixels at 4 bytes a pixel (its channels_last output, padding byte included)
written into the batch as uint8 planes, or normalized by the ImageNet mean/std into float32 or bfloat16 planes
([C, H, W]) or channels_last pixels, plain or flipped left to right. Each row times the kernel (`tfr_torch` column)
and torch's own way to the same values (`torch` column: a strided copy, or .to(float32), the subtraction and
multiplication, .to(dtype) and the copy into the batch, flip() where flipped), best of --rounds rounds of --repeat
calls, in microseconds per image, one thread; the two give the same bytes (checked before timing).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfr_torch import _native  # noqa: E402
from tfr_torch.images import ImageTransform  # noqa: E402


def best_us(call: Callable[[], object], repeat: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best * 1e6


def row(dtype: torch.dtype, channels_last: bool, flip: bool, pixels4: torch.Tensor, sub: bytes, mul: bytes,
        args: argparse.Namespace) -> str:
    """One row: the kernel and torch's way to the same bytes, checked equal, then timed."""
    core = _native.core
    n = int(pixels4.shape[0])
    source = pixels4.numpy().reshape(-1)
    rgb = pixels4[..., :3]  # [H, W, 3] view, 4 bytes a pixel
    mean, inv = (torch.from_numpy(np.frombuffer(b, np.float32).copy()) for b in (sub, mul))
    target = torch.empty((n, n, 3) if channels_last else (3, n, n), dtype=dtype)
    out = target.view(torch.int16).numpy() if dtype == torch.bfloat16 else target.numpy()

    def kernel() -> None:
        if dtype == torch.uint8:
            core.planes_from_pixels(out, source, n, n, 3, 4, 4 * n, flip)
        else:
            core.normalize_pixels(out, dtype == torch.bfloat16, channels_last, source, n, n, 3, 4, 4 * n, flip, sub,
                                  mul)

    def reference() -> None:
        values = rgb.flip(1) if flip else rgb
        if dtype != torch.uint8:
            values = ((values.to(torch.float32) - mean) * inv).to(dtype)
        target.copy_(values if channels_last else values.permute(2, 0, 1))

    def raw(t: torch.Tensor) -> torch.Tensor:
        return t.view(torch.int16) if dtype == torch.bfloat16 else t.view(torch.uint8)

    reference()
    want = target.clone()
    kernel()
    layout = f"{str(dtype).split('.')[-1]} {'channels_last' if channels_last else 'planes'}"
    if not torch.equal(raw(target), raw(want)):
        sys.exit(f"the kernel and torch differ: {layout}, flip={flip}")
    ours, theirs = best_us(kernel, args.repeat, args.rounds), best_us(reference, args.repeat, args.rounds)
    return f"{layout}\t{'yes' if flip else 'no'}\t{ours:.0f}\t{theirs:.0f}\t{theirs / ours:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if _native.core is None:
        sys.exit("the compiled core is not built (python setup.py build_ext --inplace)")
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    pixels4 = torch.from_numpy(rng.integers(0, 256, (args.size, args.size, 4), dtype=np.uint8))  # the resize's output
    sub, mul = ImageTransform(args.size, dtype=torch.float32)._factors(3)  # ImageNet's mean and std
    print(f"# {args.size} x {args.size} RGB, microseconds per image (best of {args.rounds} x {args.repeat}); "
          f"torch {torch.__version__}")
    print("layout\tflip\ttfr_torch\ttorch\tratio")
    for dtype in (torch.uint8, torch.float32, torch.bfloat16):
        for channels_last in ((False,) if dtype == torch.uint8 else (False, True)):
            for flip in (False, True):
                print(row(dtype, channels_last, flip, pixels4, sub, mul, args), flush=True)


if __name__ == "__main__":
    main()
