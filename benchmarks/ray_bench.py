#!/usr/bin/env python3
"""Ray Data throughput: `tfr_torch.ray.read_tfrecords` + decode against Ray's own TensorFlow-based
`ray.data.read_tfrecords`, and image conversion with the local engine against `engine="ray"`.

    python benchmarks/ray_bench.py [--records 200000] [--shards 4] [--cpus 2] [--tf-python PATH] [--images 400]

- read: the tabular benchmark set of benchmarks/run.py (7 features, about 280 B per Example) in `--shards`
  indexed shards, read on a local Ray of `--cpus` CPUs into a materialized dataset (every block decoded and
  stored), best of `--repeat` after one warm-up. tfr_torch decodes with the spec (FixedLen and VarLen columns);
  Ray's reader decodes every feature its own way (one Python dict per record, through tf.train.Example). Ray's
  reader needs TensorFlow: it runs in `--tf-python` (a Python with tensorflow and ray[data]) as a subprocess of
  this script, on the same files; without it, its row is left out. It is given a tf_schema (every feature a
  list), without which it turns 1-value lists into scalars and fails on "tokens" (1 to 20 values per record).
- convert: `convert_image_folder(format="jpeg")` (decode, re-encode) of `--images` photo-like JPEGs with
  `workers=--cpus` local processes, and with `engine="ray"` on the same local Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

TF_READ = r"""
import json, sys, time, ray
files, cpus, repeat = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
ray.init(num_cpus=cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
ray.data.DataContext.get_current().enable_progress_bars = False
from tensorflow_metadata.proto.v0 import schema_pb2
schema = schema_pb2.Schema()  # without one, Ray makes 1-value lists scalars and fails on "tokens" (1 to 20 values)
for name, kind in [("id", "INT"), ("label", "INT"), ("f1", "FLOAT"), ("f2", "FLOAT"), ("emb", "FLOAT"),
                   ("tokens", "INT"), ("name", "BYTES")]:
    schema.feature.add(name=name, type=getattr(schema_pb2.FeatureType, kind))
times = []
for _ in range(repeat + 1):
    start = time.perf_counter()
    ds = ray.data.read_tfrecords(files, tf_schema=schema).materialize()
    rows = ds.count()
    times.append(time.perf_counter() - start)
print(json.dumps({"rows": rows, "seconds": min(times[1:]), "columns": ds.schema().names}))
"""


def make_tabular(folder: str, records: int, shards: int) -> list[str]:
    sys.path.insert(0, os.path.dirname(HERE))
    import tfr_torch
    from benchmarks.datasets import gen_tabular  # the tabular set of benchmarks/run.py

    marker = os.path.join(folder, f".complete-{records}-{shards}")
    paths = [os.path.join(folder, f"tabular-{i:02d}.tfrecord") for i in range(shards)]
    if os.path.exists(marker):
        return paths
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    per = -(-records // shards)
    records_iter = gen_tabular(records)
    for i, path in enumerate(paths):
        with tfr_torch.TFRecordWriter(path) as writer:
            for _ in range(min(per, records - i * per)):
                writer.write(next(records_iter))
        tfr_torch.build_index(path)
    open(marker, "w").close()
    return paths


def tabular_spec() -> dict:
    import torch

    import tfr_torch as t

    return {"id": t.FixedLenFeature([], torch.int64), "label": t.FixedLenFeature([], torch.int64),
            "f1": t.FixedLenFeature([], torch.float32), "f2": t.FixedLenFeature([], torch.float32),
            "emb": t.FixedLenFeature([32], torch.float32), "tokens": t.VarLenFeature(torch.int64),
            "name": t.FixedLenFeature([], t.string)}


def best(fn, repeat: int) -> tuple[float, object]:
    fn()  # warm-up: worker processes started, imports done
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--tf-python", default=None, help="a Python with tensorflow and ray[data] installed")
    parser.add_argument("--skip", nargs="*", default=[], choices=["read", "convert"])
    parser.add_argument("--data-dir", default=os.path.join(HERE, "data"))
    args = parser.parse_args()

    import ray

    import tfr_torch
    import tfr_torch.ray as tray

    print(f"# Ray Data, local Ray of {args.cpus} CPUs (machine: {os.cpu_count()} CPUs), ray {ray.__version__}, "
          f"tfr_torch {tfr_torch.__version__} (backend {tfr_torch.backend()}); "
          f"command: `python {' '.join(sys.argv)}`\n")
    ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    if "read" not in args.skip:
        paths = make_tabular(os.path.join(args.data_dir, "ray-tabular"), args.records, args.shards)
        print(f"read: {args.records:,} tabular Examples in {args.shards} indexed shards, "
              f"{sum(os.path.getsize(p) for p in paths) / 1e6:,.1f} MB\n")
        print("| reader | rows/s | seconds | vs Ray's |\n|---|---:|---:|---:|")
        spec = tabular_spec()
        t_ours, rows = best(lambda: tray.read_tfrecords(paths, spec).materialize().count(), args.repeat)
        assert rows == args.records, rows
        theirs = None
        if args.tf_python:
            out = subprocess.run([args.tf_python, "-c", TF_READ, json.dumps(paths), str(args.cpus), str(args.repeat)],
                                 capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(f"(Ray's read_tfrecords failed: {out.stderr.strip().splitlines()[-1:]})")
            else:
                theirs = json.loads(out.stdout.strip().splitlines()[-1])
                assert theirs["rows"] == args.records, theirs
        ratio = f"{theirs['seconds'] / t_ours:.1f}x" if theirs else "-"
        print(f"| `tfr_torch.ray.read_tfrecords(paths, spec)` | {args.records / t_ours:,.0f} | {t_ours:.2f} "
              f"| {ratio} |")
        if theirs:
            print(f"| `ray.data.read_tfrecords(paths, tf_schema=...)` (with TensorFlow) | "
                  f"{args.records / theirs['seconds']:,.0f} | {theirs['seconds']:.2f} | 1.0x |")
        print()
    if "convert" not in args.skip:
        sys.path.insert(0, HERE)
        from convert_bench import make_folder

        src = os.path.join(args.data_dir, f"images-{args.images}")
        mb = make_folder(src, args.images) / 1e6
        print(f"convert: {args.images} JPEGs (640x480, {mb:,.1f} MB) re-encoded as JPEG (format='jpeg')\n")
        print("| engine | images/s | seconds |\n|---|---:|---:|")
        with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
            for label, kwargs in ((f"local, workers={args.cpus}", {"workers": args.cpus}),
                                  (f"engine=\"ray\" ({args.cpus} CPUs)", {"engine": "ray"})):
                def convert(kwargs=kwargs) -> None:
                    out = os.path.join(tmp, "shards")
                    shutil.rmtree(out, ignore_errors=True)
                    tfr_torch.convert_image_folder(src, out, "bench", format="jpeg", resume=False, **kwargs)

                t, _ = best(convert, args.repeat)
                print(f"| {label} | {args.images / t:,.0f} | {t:.2f} |")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
