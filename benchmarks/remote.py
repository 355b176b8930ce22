"""Reading TFRecords from S3 under latency, beside local disk (issue 25, part 3).

    python benchmarks/remote.py [--records 8000] [--shards 16] [--workers 4] [--delays 0.02 0.05] [--repeat 2]

Writes `--records` records of 16 KiB into `--shards` files (with indexes) on local disk and into a bucket of an
S3-protocol server on the loopback interface (moto's ThreadedMotoServer), reached through benchmarks/
latency_proxy.py, which waits `delay` seconds before forwarding each request (20 ms and 50 ms: a round trip to a
distant object store). Times one epoch of `DataLoader(TFRecordDataset(..., index="auto", batch_size=256),
batch_size=None, num_workers=W)` (raw records), best of `--repeat`:

- local files, in order and shuffled through the index;
- the same from S3, in order (`RemoteOptions()` defaults but 2 MiB blocks: each shard is 8 MB), and shuffled
  through the index with a fresh (cold) block cache per pass (`cache_dir=`: every block fetched once, in the
  epoch timed) and without a cache (each record's range fetched, nearby ones merged, 256 records announced ahead).

The ratio is the row's rate over the local rate of the same order. On a 2-core machine the server, the proxy and
the readers share the cores: the local rate is CPU-bound, and what remote reading adds is waiting, which requests
in flight overlap.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(256 << 20))  # objects in memory, not temp files
for _name, _value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                      "AWS_DEFAULT_REGION": "us-east-1"}.items():
    os.environ.setdefault(_name, _value)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fsspec  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import tfr_torch  # noqa: E402
from benchmarks.latency_proxy import LatencyProxy  # noqa: E402
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


OPEN_TIMES: list[tuple[str, float]] = []


def epoch(pattern: str, shuffle: bool, workers: int, remote: RemoteOptions | None) -> float:
    """Records per second over one epoch (workers started inside the timing, as a first epoch starts them). The
    dataset is made before (listing, indexes read one by one: see OPEN_TIMES, printed apart)."""
    start = time.perf_counter()
    dataset = tfr_torch.TFRecordDataset(pattern, index="auto", shuffle=shuffle, seed=1, batch_size=256,
                                        remote=remote)
    OPEN_TIMES.append((pattern, time.perf_counter() - start))
    start = time.perf_counter()
    n = 0
    for batch in DataLoader(dataset, batch_size=None, num_workers=workers):
        n += len(batch)
    return n / (time.perf_counter() - start)


def best(repeat: int, run) -> float:  # type: ignore[no-untyped-def]
    return max(run() for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=8000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--delays", type=float, nargs="+", default=[0.02, 0.05])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import ThreadedMotoServer

    work = tempfile.mkdtemp(prefix="tfr-remote-bench-")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        local = write_shards(work, args.records, args.shards)
        fs = fsspec.filesystem("s3", endpoint_url=f"http://{host}:{port}")
        fs.mkdir(BUCKET)
        for path in local:
            for name in (path, path + ".idx"):
                fs.put_file(name, f"{BUCKET}/{os.path.basename(name)}")
        rows = []
        for shuffle in (False, True):
            rate = best(args.repeat, functools.partial(epoch, f"{work}/part-*.tfrecord", shuffle, args.workers, None))
            rows.append(("local disk", "shuffled (index)" if shuffle else "in order", rate, rate))
        base = {"in order": rows[0][2], "shuffled (index)": rows[1][2]}
        for delay in args.delays:
            with LatencyProxy(host, port, delay) as proxy:
                fsspec.config.conf["s3"] = {"endpoint_url": proxy.url}
                fsspec.filesystem("s3").clear_instance_cache()
                url = f"s3://{BUCKET}/part-*.tfrecord"
                plain = RemoteOptions(block_size=2 << 20)
                rate = best(args.repeat, functools.partial(epoch, url, False, args.workers, plain))
                rows.append((f"S3 +{delay * 1000:.0f} ms/request", "in order", rate, base["in order"]))

                def cold_cache(url: str = url) -> float:
                    folder = tempfile.mkdtemp(prefix="cache-", dir=work)
                    try:
                        return epoch(url, True, args.workers, RemoteOptions(block_size=2 << 20, cache_dir=folder))
                    finally:
                        shutil.rmtree(folder, ignore_errors=True)

                rate = best(args.repeat, cold_cache)
                rows.append((f"S3 +{delay * 1000:.0f} ms/request", "shuffled (index), cold block cache", rate,
                             base["shuffled (index)"]))
                rate = best(1, functools.partial(epoch, url, True, args.workers, plain))
                rows.append((f"S3 +{delay * 1000:.0f} ms/request", "shuffled (index), no cache", rate,
                             base["shuffled (index)"]))
        print(f"{args.records} records of 16 KiB in {args.shards} shards, DataLoader(num_workers={args.workers}), "
              f"batches of 256, best of {args.repeat}\n")
        print("| source | order | records/s | vs local |")
        print("|---|---|---:|---:|")
        for source, order, rate, ref in rows:
            print(f"| {source} | {order} | {rate:,.0f} | {rate / ref:.2f} |")
        local_open = max(t for p, t in OPEN_TIMES if not p.startswith("s3://"))
        remote_open = max(t for p, t in OPEN_TIMES if p.startswith("s3://"))
        print(f"\nmaking the dataset (glob, {args.shards} indexes, sizes), not in the rates above: local at most "
              f"{local_open:.2f} s, S3 at most {remote_open:.2f} s (the indexes are read one after another)")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
