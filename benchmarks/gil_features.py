"""How long `parse_example` holds the GIL per batch, as a function of the number of features.

    python benchmarks/gil_features.py [--features 4,16,64] [--kinds scalar,vector,mixed] [--batch 256]
        [--batches 200] [--repeat 5]

For each spec (FixedLen int64/float32 scalars; FixedLen float32 [8] vectors; the same with VarLen int64 and bytes
features mixed in), encodes `--batches` batches of `--batch` Examples, then decodes them with
`tfr_torch.parse_example` on the compiled core, one thread, and prints per batch (the best of `--repeat` passes,
after one warm-up pass): the wall time, the time the kernel ran without the GIL (the core's own clock,
`_core.decode_free_ns()`, read around the pass) and the difference: the time the batch held the GIL (reading the
records' pointers, making the result's objects, and all the Python around them). What held the GIL is what limits
decoding from several threads. CPU time of the pass is printed beside the wall time: on a shared machine a pass
whose CPU time is well under its wall time was preempted, and its figures are high.

Beside it, `held before`: the same batches through a plan that makes every FixedLenFeature from its own view of
the arena (how parse_example did it before the kernel's dense block, issue 26: DenseBlock.MIN_GROUP past any
group), passes of the two alternating.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

import tfr_torch
from tfr_torch import _native
from tfr_torch.decode.dense import DenseBlock
from tfr_torch.decode.plan import ExamplePlan


def make_spec(n: int, kind: str) -> dict[str, object]:
    """`n` features: half int64 and half float32 FixedLen scalars ("scalar"), float32 [8] vectors ("vector"),
    or the scalars with every fourth feature a VarLen int64 and every eighth a FixedLen bytes ("mixed")."""
    spec: dict[str, object] = {}
    for i in range(n):
        if kind == "vector":
            spec[f"v{i}"] = tfr_torch.FixedLenFeature([8], torch.float32)
        elif kind == "mixed" and i % 8 == 7:
            spec[f"s{i}"] = tfr_torch.FixedLenFeature([], tfr_torch.string)
        elif kind == "mixed" and i % 4 == 3:
            spec[f"t{i}"] = tfr_torch.VarLenFeature(torch.int64)
        elif i % 2:
            spec[f"f{i}"] = tfr_torch.FixedLenFeature([], torch.float32)
        else:
            spec[f"i{i}"] = tfr_torch.FixedLenFeature([], torch.int64)
    return spec


def make_records(spec: dict[str, object], count: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    records = []
    for r in range(count):
        example: dict[str, object] = {}
        for key in spec:
            if key[0] == "v":
                example[key] = rng.random(8, dtype=np.float32).tolist()
            elif key[0] == "s":
                example[key] = f"value-{r}".encode()
            elif key[0] == "t":
                example[key] = rng.integers(0, 1000, int(rng.integers(1, 6))).tolist()
            elif key[0] == "f":
                example[key] = float(rng.random())
            else:
                example[key] = int(rng.integers(0, 1 << 40))
        records.append(tfr_torch.encode_example(example))
    return records


def column_plan(spec: dict[str, object]) -> ExamplePlan:
    """A plan that makes each FixedLenFeature from its own view of the arena (no dense block)."""
    saved = DenseBlock.MIN_GROUP
    DenseBlock.MIN_GROUP = sys.maxsize
    try:
        return ExamplePlan(spec)
    finally:
        DenseBlock.MIN_GROUP = saved


def one_pass(batches: list[list[bytes]], plan: ExamplePlan) -> tuple[float, float, float]:
    """(wall, cpu, GIL-free) seconds of one pass over the batches."""
    core = _native.core
    free0, cpu0, wall0 = core.decode_free_ns(), time.thread_time(), time.perf_counter()
    for batch in batches:
        plan.parse(batch)
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    return wall, cpu, (core.decode_free_ns() - free0) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--features", default="4,16,64")
    parser.add_argument("--kinds", default="scalar,vector,mixed")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if _native.core is None or not hasattr(_native.core, "decode_free_ns"):
        raise SystemExit("needs the compiled core (TFR_TORCH_NATIVE unset, the extension built)")
    print(f"parse_example, batches of {args.batch}, {args.batches} batches a pass, best of {args.repeat} "
          f"(us per batch)")
    print(f"{'spec':>8} {'features':>8} {'wall':>8} {'cpu':>8} {'GIL-free':>9} {'GIL held':>9} {'held/feature':>12} "
          f"{'held before':>11}")
    for kind in args.kinds.split(","):
        for n in map(int, args.features.split(",")):
            spec = make_spec(n, kind)
            records = make_records(spec, args.batch * 8)
            batches = [records[(i % 8) * args.batch:(i % 8 + 1) * args.batch] for i in range(args.batches)]
            plan, before = ExamplePlan(spec), column_plan(spec)
            one_pass(batches, plan)  # warm-up: the kernels made
            one_pass(batches, before)
            passes, passes_before = [], []
            for _ in range(args.repeat):
                passes.append(one_pass(batches, plan))
                passes_before.append(one_pass(batches, before))
            wall, cpu, free = min(passes, key=lambda p: p[0] - p[2])
            per = 1e6 / len(batches)
            held = (wall - free) * per
            held_before = min(p[0] - p[2] for p in passes_before) * per
            print(f"{kind:>8} {n:>8} {wall * per:>8.1f} {cpu * per:>8.1f} {free * per:>9.1f} {held:>9.1f} "
                  f"{held / n:>12.2f} {held_before:>11.1f}")


if __name__ == "__main__":
    main()
