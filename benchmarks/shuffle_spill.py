"""The global shuffle of a GZIP file many times `max_group_bytes`: in groups, through a spill file, and a sequential
pass over the same file.

    python benchmarks/shuffle_spill.py [--total-mb 200] [--records-kb 1] [--group-mb 64] [--repeat 3] [--dir DIR]

Writes a GZIP TFRecord file of about `--total-mb` decompressed MB (records of `--records-kb` KB, Examples of an id
and random bytes of 50 values: about 1.4:1 compressible) with its index and seek points, then times, in the steady
state (one untimed warm-up run of each, then rounds of the three in turn; the best of `--repeat` of each):

- sequential: `TFRecordDataset(path, index="auto")`, every record in the file's order (one inflation pass);
- grouped: `TFRecordDataset(..., shuffle=True, max_group_bytes=G, spill_dir=False)`: each group of the shuffled
  order inflates the seek intervals its records touch (about every interval, for small records);
- spilled: the same order with `spill_dir=True` (the default): one sequential pass writes the records into an
  unnamed temporary file in the system's temporary folder (or `--dir`), read back group by group.

Ratios: each time over the sequential one. The three read every record once; the two shuffles in the same order.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import tfr_torch


def _write(path: str, record_bytes: int, total: int) -> int:
    rng = np.random.default_rng(0)
    n = max(total // record_bytes, 1)
    with tfr_torch.TFRecordWriter(path, compression="GZIP") as writer:
        for i in range(n):
            writer.write(tfr_torch.encode_example({"id": i, "x": rng.integers(0, 50, record_bytes,
                                                                                dtype=np.uint8).tobytes()}))
    tfr_torch.build_index(path)
    return n


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total-mb", type=float, default=200)
    parser.add_argument("--records-kb", type=float, default=1)
    parser.add_argument("--group-mb", type=float, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the file and the spill go (default: a temporary folder)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        path = os.path.join(work, "data.tfrecord.gz")
        n = _write(path, int(args.records_kb * 1024), int(args.total_mb * 1e6))
        group = int(args.group_mb * (1 << 20))
        runs = {
            "sequential": dict(shuffle=False),
            "grouped": dict(shuffle=True, max_group_bytes=group, spill_dir=False),
            "spilled": dict(shuffle=True, max_group_bytes=group, spill_dir=work),
        }

        def epoch(options: dict) -> float:
            start = time.perf_counter()
            count = sum(1 for _ in tfr_torch.TFRecordDataset(path, index="auto", **options))
            took = time.perf_counter() - start
            assert count == n, (count, n)
            return took

        for options in runs.values():  # untimed: the file in the page cache
            epoch(options)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeat):
            for name, options in runs.items():
                times[name].append(epoch(options))
        size = os.path.getsize(path)
    best = {name: min(values) for name, values in times.items()}
    print(f"{n:,} records of {args.records_kb:g} KB, {args.total_mb:g} MB decompressed, {size / 1e6:.0f} MB GZIP, "
          f"groups of {args.group_mb:g} MB; best of {args.repeat}")
    for name, took in best.items():
        print(f"  {name:<10} {took:7.2f} s  {n / took:12,.0f} records/s  {took / best['sequential']:5.2f}x sequential "
              f"(all: {', '.join(f'{t:.2f}' for t in times[name])})")
    return best


if __name__ == "__main__":
    main()
