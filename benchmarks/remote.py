"""Reading TFRecords from S3 under latency, beside local disk (issue 25, part 3).

    python benchmarks/remote.py [--records 32000] [--shards 16] [--workers 4] [--batch-sizes 64 256]
                                [--delays 0.02 0.05] [--epochs 2] [--no-cache-shuffled]

Writes `--records` records of 16 KiB into `--shards` files (with indexes) on local disk and into a bucket of
moto's S3 server on the loopback interface, reached through benchmarks/latency_proxy.py, which waits `delay`
seconds before forwarding each request (20 ms and 50 ms: a round trip to a distant object store). The server and
the proxies run in a process of their own (`S3Server`), as an object store is not in the reader's process.

Every row is the same loader a user runs: `DataLoader(TFRecordDataset(files, index="auto", shuffle=...,
batch_size=B), batch_size=None, num_workers=W, persistent_workers=True)` over raw records, for B in
`--batch-sizes`. Each loader runs one warm-up epoch (workers started, S3 clients made; not timed), then
`--epochs` timed epochs (`set_epoch` each); the rate is their records over their time: the steady state of a
training job. Rows:

- local disk, in order and shuffled through the index (a global shuffle: each record read by offset);
- S3, in order, no cache: every epoch reads every byte from S3 (`RemoteOptions()`: 8 MiB blocks, 4 ahead);
- S3 with a block cache (`RemoteOptions(cache_dir=...)`), in order and shuffled: warm (filled by the warm-up
  epoch: later epochs read local disk and make only the HEAD requests that open files), and shuffled with the
  cache emptied before each timed epoch (cold: every block fetched once in the epoch timed);
- the server alone: every block of the files fetched with 16 range requests at once and nothing else running
  (no reader, no cache): what a read without a cache, or with a cold one, can reach on this machine;
- with `--no-cache-shuffled`, S3 shuffled without a cache (one range request per record, nearby ones merged):
  bound by how many requests per second the server answers.

The ratio is the row's rate over the local rate of the same order and batch size. On a small machine the server,
the proxies and the readers share the cores: what a row reaches then also depends on how much CPU moto spends per
request (it copies the whole object for each range request).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

for _name, _value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                      "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ.setdefault(_name, _value)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fsspec  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import tfr_torch  # noqa: E402
from benchmarks.latency_proxy import S3Server  # noqa: E402
from tfr_torch.format.remote import RemoteOptions  # noqa: E402

BUCKET = "tfr-bench"


def write_shards(folder: str, records: int, shards: int) -> list[str]:
    rng = __import__("numpy").random.default_rng(0)
    payload = rng.bytes(16384 + 4096)
    paths = []
    per = records // shards
    for s in range(shards):
        path = f"{folder}/part-{s:03d}.tfrecord"
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(per):
                start = (s * per + i) % 4096
                writer.write(payload[start : start + 16384])
        tfr_torch.build_index(path)
        paths.append(path)
    return paths


def empty(folder: str) -> None:
    """Remove every block of a cache folder (the workers keep using the folder)."""
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


def steady_rate(pattern: str, shuffle: bool, workers: int, batch: int, epochs: int, remote: RemoteOptions | None,
                before_epoch: Callable[[], None] = lambda: None) -> tuple[float, float]:
    """(records per second over the timed epochs, seconds to make the dataset). One untimed warm-up epoch
    first."""
    start = time.perf_counter()
    dataset = tfr_torch.TFRecordDataset(pattern, index="auto", shuffle=shuffle, seed=1, batch_size=batch,
                                        remote=remote)
    made = time.perf_counter() - start
    loader = DataLoader(dataset, batch_size=None, num_workers=workers, persistent_workers=True)
    records, seconds = 0, 0.0
    for epoch in range(epochs + 1):
        dataset.set_epoch(epoch)
        if epoch:
            before_epoch()
        start = time.perf_counter()
        n = sum(len(batch_) for batch_ in loader)
        if epoch:  # epoch 0 is the warm-up
            records += n
            seconds += time.perf_counter() - start
    del loader  # its workers exit
    return records / seconds, made


def server_ceiling(folder: str, records: int, block: int = 8 << 20, threads: int = 16) -> float:
    """Records per second that the server (through the proxy) hands over when nothing else runs: every block of
    the files fetched by `threads` range requests at once, no reader, no cache; the best of 2 passes. What a cold
    or cacheless read can reach at most here."""
    from concurrent.futures import ThreadPoolExecutor

    fs = fsspec.filesystem("s3")
    files = [(f["name"], int(f["size"])) for f in fs.ls(folder, detail=True) if f["name"].endswith(".tfrecord")]
    ranges = [(name, start, min(start + block, size)) for name, size in files for start in range(0, size, block)]
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(2):
            start = time.perf_counter()
            list(pool.map(lambda r: fs.cat_file(r[0], start=r[1], end=r[2]), ranges))
            best = min(best, time.perf_counter() - start)
    return records / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=32000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--delays", type=float, nargs="+", default=[0.02, 0.05])
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs after the warm-up epoch")
    parser.add_argument("--no-cache-shuffled", action="store_true",
                        help="also time S3 shuffled without a cache (slow: one request per record)")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="tfr-remote-bench-")
    rows: list[tuple[str, str, dict[int, float], dict[int, float]]] = []
    made: dict[str, list[float]] = {}
    try:
        with S3Server(args.delays) as server:
            local = write_shards(work, args.records, args.shards)
            fs = fsspec.filesystem("s3", endpoint_url=server.direct, skip_instance_cache=True)
            fs.mkdir(BUCKET)
            for path in local:
                for name in (path, path + ".idx"):
                    fs.put_file(name, f"{BUCKET}/{os.path.basename(name)}")

            def measure(source: str, order: str, pattern: str, shuffle: bool, remote: RemoteOptions | None,
                        reference: str | None, before: Callable[[], None] = lambda: None) -> None:
                rates = {}
                for batch in args.batch_sizes:
                    rates[batch], seconds = steady_rate(pattern, shuffle, args.workers, batch, args.epochs, remote,
                                                        before)
                    made.setdefault(source, []).append(seconds)
                    print(f"  {source} | {order} | batch {batch}: {rates[batch]:,.0f} records/s", file=sys.stderr)
                base = rates if reference is None else next(r for s, o, r, _ in rows if (s, o) == (
                    "local disk", reference))
                rows.append((source, order, rates, base))

            measure("local disk", "in order", f"{work}/part-*.tfrecord", False, None, None)
            measure("local disk", "shuffled (index)", f"{work}/part-*.tfrecord", True, None, None)
            for delay in args.delays:
                fsspec.config.conf["s3"] = {"endpoint_url": server.proxies[delay]}
                fsspec.filesystem("s3").clear_instance_cache()
                url = f"s3://{BUCKET}/part-*.tfrecord"
                source = f"S3 +{delay * 1000:.0f} ms/request"
                cache = tempfile.mkdtemp(prefix="cache-", dir=work)
                cached = RemoteOptions(cache_dir=cache)
                measure(source, "in order, no cache", url, False, RemoteOptions(), "in order")
                measure(source, "in order, block cache (warm)", url, False, cached, "in order")
                empty(cache)
                measure(source, "shuffled (index), block cache (warm)", url, True, cached, "shuffled (index)")
                measure(source, "shuffled (index), block cache (cold)", url, True, cached, "shuffled (index)",
                        lambda cache=cache: empty(cache))  # type: ignore[misc]
                ceiling = server_ceiling(url.rsplit("/", 1)[0], args.records)
                rows.append((source, "the server alone: every 8 MiB block, 16 range requests at once",
                             dict.fromkeys(args.batch_sizes, ceiling), next(r for s, o, r, _ in rows if (
                                 s, o) == ("local disk", "in order"))))
                print(f"  {source} | the server alone: {ceiling:,.0f} records/s", file=sys.stderr)
                if args.no_cache_shuffled:
                    measure(source, "shuffled (index), no cache", url, True, RemoteOptions(), "shuffled (index)")
                shutil.rmtree(cache, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    batches = args.batch_sizes
    print(f"{args.records} records of 16 KiB in {args.shards} shards, DataLoader(num_workers={args.workers}, "
          f"persistent_workers=True), raw records; rates over {args.epochs} epoch(s) after a warm-up epoch\n")
    print("| source | order | " + " | ".join(f"batch {b}: records/s | vs local" for b in batches) + " |")
    print("|---|---|" + "---:|---:|" * len(batches))
    for source, order, rates, base in rows:
        cells = " | ".join(f"{rates[b]:,.0f} | {rates[b] / base[b]:.2f}" for b in batches)
        print(f"| {source} | {order} | {cells} |")
    remote = [t for s, times in made.items() if s.startswith("S3") for t in times]
    print(f"\nmaking the dataset (glob, {args.shards} indexes read and checked), not in the rates: local at most "
          f"{max(made['local disk']):.2f} s, S3 at most {max(remote):.2f} s")


if __name__ == "__main__":
    main()
