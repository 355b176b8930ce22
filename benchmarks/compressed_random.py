"""A random-order epoch over a GZIP file through its seek points, beside a sequential pass over the same file.

    python benchmarks/compressed_random.py [--records-kb 16,128,512] [--total-mb 48] [--spans-kb 1024,256]
        [--group-mb 64] [--repeat 3] [--engines auto] [--from-start]

For each record size, writes a GZIP TFRecord file of about `--total-mb` decompressed MB (records half random
bytes, half repeated ones: about 2:1 compressible, like serialized Examples of features and images), then times,
in the steady state (one untimed warm-up run of each, then the best of `--repeat`):

- sequential: `for record in read_records(path)` (every record, one inflation pass);
- random: every record once in a seeded random order through `RecordFile(path).read(offset, size)` (what the
  global shuffle of TFRecordDataset and IndexedTFRecordDataset do), with seek points every `--spans-kb` KiB of
  output (build_index(seek_span=...)): each read inflates from the last point before the record;
- grouped: the same order, read `--group-mb` MB of records at a time through `RecordFile.read_many` (what the
  global shuffle does with max_group_bytes, and IndexedTFRecordDataset with a batch): each group's records sorted
  by offset and inflated in one pass over the intervals they touch, yielded in the order asked;
- each with the inflaters of `--engines` restarting at the points (comma-separated; auto: the one the library
  picks, restart_engine(); native: the compiled core's zlib, which every read through seek points used before
  zlib-ng's did; zlib-ng; zlib); the sequential pass inflates with the reader's library (zlib-ng when installed);
- with --from-start, before seek points: one `read_records(path, start=offset, end=offset + size)` per record (an
  inflation from the start of the file each), timed on 20 records and scaled to the epoch.

Ratios: random time over sequential time. The sidecar's size is printed as a share of the compressed file's.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time
from unittest import mock

import numpy as np

import tfr_torch
from tfr_torch.data.reading import group_bounds
from tfr_torch.format import seek
from tfr_torch.format.inflate import INFLATE
from tfr_torch.format.record_file import RecordFile


def _write(path: str, record_bytes: int, total: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    n = max(total // record_bytes, 1)
    with tfr_torch.TFRecordWriter(path, compression="gzip") as w:
        for i in range(n):
            half = record_bytes // 2
            w.write(rng.integers(0, 256, half, dtype=np.uint8).tobytes() + bytes([i % 251]) * (record_bytes - half))
    return n


def _best(fn, repeat: int, warm_up: bool = True) -> float:
    if warm_up:  # untimed: the file in the page cache, the allocator's pools filled
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _sequential(path: str) -> None:
    for _ in tfr_torch.read_records(path):
        pass


def _random(path: str, index: np.ndarray, order: np.ndarray) -> None:
    with RecordFile(path) as f:
        for i in order.tolist():
            f.read(int(index[i, 0]), int(index[i, 1]))


def _grouped(path: str, index: np.ndarray, order: np.ndarray, group_bytes: int) -> None:
    with RecordFile(path) as f:
        for start, stop in group_bounds(index[order, 1], group_bytes):
            at = order[start:stop]
            for _ in f.read_many(index[at, 0], index[at, 1]):
                pass


def _from_start(path: str, index: np.ndarray, order: np.ndarray) -> None:
    for i in order.tolist():
        offset, size = int(index[i, 0]), int(index[i, 1])
        for _ in tfr_torch.read_records(path, start=offset, end=offset + size):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records-kb", default="16,128,512", help="record sizes in KiB, comma-separated")
    parser.add_argument("--total-mb", type=int, default=48, help="decompressed MB per file")
    parser.add_argument("--spans-kb", default="1024,256", help="seek point spans in KiB, comma-separated")
    parser.add_argument("--group-mb", type=int, default=64, help="decompressed MB of records per group")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engines", default="auto",
                        help="inflaters that restart at seek points, comma-separated: auto, native, zlib-ng, zlib")
    parser.add_argument("--from-start", action="store_true", help="also time the reads before seek points")
    args = parser.parse_args()
    engines = [seek.restart_engine() if e == "auto" else e for e in args.engines.split(",")]
    if "zlib-ng" in engines and INFLATE != "zlib-ng":
        parser.error("--engines zlib-ng: zlib-ng is not installed (pip install tfr_torch[fast-gzip]) or is turned off")
    if "native" in engines and tfr_torch.backend() != "native":
        parser.error("--engines native: the compiled core is not built")
    if not set(engines) <= {"native", "zlib-ng", "zlib"}:
        parser.error(f"--engines: expected auto, native, zlib-ng or zlib, got {args.engines!r}")
    print(f"backend: {tfr_torch.backend()}; sequential reads inflate with {INFLATE}; GZIP files of ~{args.total_mb} "
          f"MB decompressed; groups of {args.group_mb} MB; a warm-up run, then the best of {args.repeat}")
    print(f"{'record':>8} {'span':>8} {'restart':>8} {'sequential':>11} {'random':>9} {'ratio':>6} {'grouped':>9} "
          f"{'ratio':>6} {'sidecar':>8}" + (f" {'before (est.)':>14} {'ratio':>7}" if args.from_start else ""))
    with tempfile.TemporaryDirectory() as tmp:
        for kb in (int(v) for v in args.records_kb.split(",")):
            path = os.path.join(tmp, f"r{kb}.tfrecord.gz")
            n = _write(path, kb << 10, args.total_mb << 20)
            order = np.random.default_rng(1).permutation(n)
            sequential = _best(functools.partial(_sequential, path), args.repeat)
            index = tfr_torch.read_index(tfr_torch.build_index(path, seek_span=None), path)
            before = None
            if args.from_start:
                sample = order[:20]
                before = _best(functools.partial(_from_start, path, index, sample), 1, False) * n / len(sample)
            for span in (int(v) for v in args.spans_kb.split(",")):
                tfr_torch.build_index(path, seek_span=span << 10)
                share = os.path.getsize(path + ".idx.seek") / os.path.getsize(path)
                for engine in engines:
                    with mock.patch.object(seek, "restart_engine", lambda engine=engine: engine):
                        random_time = _best(functools.partial(_random, path, index, order), args.repeat)
                        grouped = _best(functools.partial(_grouped, path, index, order, args.group_mb << 20),
                                        args.repeat)
                    print(f"{kb:>6}KB {span:>6}KB {engine:>8} {sequential:>10.3f}s {random_time:>8.3f}s "
                          f"{random_time / sequential:>5.2f}x {grouped:>8.3f}s {grouped / sequential:>5.2f}x "
                          f"{share:>7.1%}" + (f" {before:>13.1f}s {before / sequential:>6.0f}x" if before else ""),
                          flush=True)


if __name__ == "__main__":
    main()
