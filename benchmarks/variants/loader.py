"""The DataLoader workload: 2 workers over 16 KiB Examples, beside tf.data's AUTOTUNE pipeline."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from benchmarks.registry import Ctx, variant, workload
from benchmarks.report import Row, fmt_int
from benchmarks.system import proc_status_kb
from benchmarks.variants.tfdata import import_tf

# ---- loader-16k: one epoch through a DataLoader with 2 workers / a tf.data AUTOTUNE pipeline

LOADER_WORKERS = 2
# TFR_BENCH_LOADER_BATCH=64 for the batches-of-64 rows
LOADER_BATCH = int(os.environ.get("TFR_BENCH_LOADER_BATCH", "256"))
SHUFFLE_BUFFER = 10_000
workload("loader-16k", "example-16k", "one pass of a DataLoader (2 workers) or tf.data pipeline over 16 KiB "
         f"Examples, decoded in batches of {LOADER_BATCH}", "loader", parallel=True,
         targets={"tensorflow": (1.5, "a tfr_torch DataLoader at least 1.5× TensorFlow's AUTOTUNE pipeline")})


_PEAK_EVERY = 16  # batches between two readings of the workers' peak memory


def _loader_pass(loader: Any, count: Callable[[Any], int], metrics: dict[str, float]) -> int:
    """One epoch of a DataLoader with worker processes; records the largest worker's peak RSS and the main process's
    RSS at the start of the pass, in MB (10^6 bytes). A worker's peak (VmHWM, a high-water mark) is read every
    `_PEAK_EVERY` batches and once more after the pass while the workers live (persistent workers: exact): reading
    /proc after every batch cost the main process about 2 µs per 16 KB record in batches of 64, a third of its
    own work, which the TensorFlow rows do not pay."""
    import multiprocessing

    main_kb = proc_status_kb(os.getpid(), "VmRSS")
    it = iter(loader)  # starts (forks) the workers, or wakes persistent ones
    pids = [p.pid for p in multiprocessing.active_children()]
    peak_kb = 0
    n = 0

    def sample() -> None:
        nonlocal peak_kb
        for pid in pids:
            peak_kb = max(peak_kb, proc_status_kb(pid, "VmHWM") or 0)

    for batches, batch in enumerate(it, 1):
        n += count(batch)
        if batches % _PEAK_EVERY == 1:  # from the first batch on: workers forked for this pass leave with it
            sample()
    sample()  # workers that stay (persistent_workers=True) still have their peak; gone ones read as nothing
    if peak_kb and main_kb:
        metrics["worker_peak_rss_mb"] = peak_kb * 1024 / 1e6
        metrics["main_rss_at_fork_mb"] = main_kb * 1024 / 1e6
    return n


LOADER_SPEC_NOTE = (f"tfr_torch.TFRecordDataset(path, spec, index='auto', batch_size={LOADER_BATCH}) in "
                    f"DataLoader(batch_size=None, num_workers={LOADER_WORKERS}, persistent_workers=True): indexed, "
                    f"so the workers split the file by record ranges; each worker decodes whole batches "
                    f"(parse_example) and sends them through its reused shared-memory slab; data arrives as a list "
                    f"of bytes, label as an int64 [{LOADER_BATCH}] tensor. The workers start in the warm-up pass and "
                    f"stay (as in training, epoch after epoch)")
PERSISTENT = "persistent_workers=True"


def _loader_spec() -> dict[str, Any]:
    import torch

    import tfr_torch

    return {"data": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "label": tfr_torch.FixedLenFeature([], torch.int64)}


def _collating_loader(ctx: Ctx, dataset: Any) -> Callable[[], int]:
    """A pass of DataLoader(batch_size=LOADER_BATCH) over a per-item dataset of the loader spec."""
    import torch

    loader = torch.utils.data.DataLoader(dataset, batch_size=LOADER_BATCH, num_workers=LOADER_WORKERS,
                                         persistent_workers=True)
    return lambda: _loader_pass(loader, lambda batch: len(batch["label"]), ctx.metrics)


def _tfr_loader(ctx: Ctx, features: bool, persistent: bool = True, **options: Any) -> Callable[[], int]:
    import torch

    import tfr_torch

    spec = _loader_spec() if features else None
    if options.get("index") == "auto":
        tfr_torch.build_index(ctx.path)  # <file>.idx, untimed
    dataset = tfr_torch.TFRecordDataset(ctx.path, spec, batch_size=LOADER_BATCH, **options)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=LOADER_WORKERS,
                                         persistent_workers=persistent)

    def count(batch: Any) -> int:
        return len(batch["label"]) if features else len(batch)

    def run() -> int:
        return _loader_pass(loader, count, ctx.metrics)

    return run


@variant("loader-16k", "tfr_torch", "loader",
         f"DataLoader(TFRecordDataset(path, spec, index='auto', batch_size={LOADER_BATCH}), batch_size=None, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})", "decoded", note=LOADER_SPEC_NOTE)
def _tfr_loader_decoded(ctx: Ctx) -> Callable[[], int]:
    return _tfr_loader(ctx, True, index="auto")


def _fresh_workers_line(row: Row, rows: list[Row]) -> str:
    tf = next((r for r in rows if r.workload == row.workload and r.library == "tensorflow" and r.records_per_s),
              None)
    text = (f"with the {LOADER_WORKERS} workers forked inside every timed pass (persistent_workers=False), "
            f"{fmt_int(row.records_per_s or 0.0)} records/s")
    if tf is not None and row.records_per_s and tf.records_per_s:
        text += f" = {row.records_per_s / tf.records_per_s:.2f}× TensorFlow's AUTOTUNE pipeline"
    return text + (" (each new worker pays its start and its first batches' page faults: ~20% of a pass over "
                   "these 20,000 records, nothing over an epoch of millions)")


@variant("loader-16k", "tfr_torch", "fresh",
         f"DataLoader(TFRecordDataset(path, spec, index='auto', batch_size={LOADER_BATCH}), batch_size=None, "
         f"num_workers={LOADER_WORKERS})  [workers forked every pass]", "decoded-fresh",
         note="as the first row, but the DataLoader forks its workers in every pass (persistent_workers=False)",
         summary=_fresh_workers_line)
def _tfr_loader_fresh(ctx: Ctx) -> Callable[[], int]:
    return _tfr_loader(ctx, True, persistent=False, index="auto")


@variant("loader-16k", "tfr_torch", "raw",
         f"DataLoader(TFRecordDataset(path, None, index='auto', batch_size={LOADER_BATCH}), batch_size=None, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})  [raw bytes]", "raw",
         note=f"raw bytes mode: each batch is a list of {LOADER_BATCH} record payloads (serialized Examples), nothing "
              "decoded")
def _tfr_loader_raw(ctx: Ctx) -> Callable[[], int]:
    return _tfr_loader(ctx, False, index="auto")


@variant("loader-16k", "tfr_torch", "records",
         f"DataLoader(TFRecordDataset(path, spec, index='auto'), batch_size={LOADER_BATCH}, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})  [per record, collated]", "decoded-record",
         note="per-record items (the tfrecord package's style): each worker yields one dict per Example (decoded "
              "32 at a time, a row each) and the DataLoader's default collate batches them in the worker")
def _tfr_loader_records(ctx: Ctx) -> Callable[[], int]:
    import tfr_torch

    tfr_torch.build_index(ctx.path)  # untimed
    return _collating_loader(ctx, tfr_torch.TFRecordDataset(ctx.path, _loader_spec(), index="auto"))


@variant("loader-16k", "tfr_torch", "map",
         f"DataLoader(IndexedTFRecordDataset(path, spec), batch_size={LOADER_BATCH}, num_workers={LOADER_WORKERS}, "
         f"{PERSISTENT})  [map-style]", "decoded-map",
         note="map-style: every item read by its offset (os.pread), in index order (a DistributedSampler or "
              f"shuffle=True would read the same way, in another order); DataLoader fetches {LOADER_BATCH} indices at "
              "a time "
              "(__getitems__), decoded together")
def _tfr_loader_map(ctx: Ctx) -> Callable[[], int]:
    import tfr_torch

    tfr_torch.build_index(ctx.path)  # untimed
    return _collating_loader(ctx, tfr_torch.IndexedTFRecordDataset(ctx.path, _loader_spec()))


def _shuffle_memory_line(row: Row, rows: list[Row]) -> str:
    m = row.metrics or {}
    if "worker_peak_rss_mb" not in m:
        return "peak memory of a worker with a 10,000-record shuffle buffer of 16 KB records: not measured (no /proc)"
    text = (f"peak memory of a worker with a {SHUFFLE_BUFFER:,}-record shuffle buffer of 16 KB records: "
            f"{m['worker_peak_rss_mb']:,.0f} MB (peak RSS, VmHWM, of the larger of {LOADER_WORKERS} workers; the main "
            f"process had {m['main_rss_at_fork_mb']:,.0f} MB resident")
    plain = next((r for r in rows if r.workload == row.workload and r.library == "tfr_torch"
                  and r.key == "loader" and (r.metrics or {}).get("worker_peak_rss_mb")), None)
    if plain is not None and plain.metrics:
        peak = plain.metrics["worker_peak_rss_mb"]
        text += f"; a worker of the indexed, unshuffled DataLoader peaks at {peak:,.0f} MB"
    return text + ")"


@variant("loader-16k", "tfr_torch", "shuffle",
         f"DataLoader(TFRecordDataset(path, spec, shuffle=True, shuffle_buffer={SHUFFLE_BUFFER:_}, "
         f"batch_size={LOADER_BATCH}), batch_size=None, num_workers={LOADER_WORKERS}, {PERSISTENT})  [no index]",
         "shuffle",
         note=f"no index: with one file for {LOADER_WORKERS} workers each worker first counts the file's records "
              f"(a header scan; its warning is silenced here), then reads its half through a "
              f"{SHUFFLE_BUFFER:,}-record shuffle buffer, which holds all of its 10,000 records at once; "
              "its peak memory is in the summary",
         summary=_shuffle_memory_line)
def _tfr_loader_shuffle(ctx: Ctx) -> Callable[[], int]:
    import warnings

    warnings.filterwarnings("ignore", message="counting the records")  # inherited by the forked workers
    return _tfr_loader(ctx, True, index=None, shuffle=True, shuffle_buffer=SHUFFLE_BUFFER)


@variant("loader-16k", "tfrecord", "loader",
         f"DataLoader(tfrecord.torch.TFRecordDataset(path, index_path, description), batch_size={LOADER_BATCH}, "
         f"num_workers={LOADER_WORKERS}, {PERSISTENT})", "decoded",
         note="index from tfrecord.tools.tfrecord2idx.create_index (needed to split the file between workers); every "
              "record is parsed on its own (protobuf Example, a bytes copy of data, a numpy array for label) and "
              f"the DataLoader's default collate builds each batch in the worker: data a list of bytes, label an "
              f"int64 [{LOADER_BATCH}, 1] tensor; no CRC check")
def _tfrecord_loader(ctx: Ctx) -> Callable[[], int]:
    import torch
    from tfrecord.tools.tfrecord2idx import create_index
    from tfrecord.torch.dataset import TFRecordDataset

    index_path = ctx.path + ".tfrecord-pkg.idx"
    create_index(ctx.path, index_path)  # untimed
    dataset = TFRecordDataset(ctx.path, index_path, {"data": "byte", "label": "int"})
    loader = torch.utils.data.DataLoader(dataset, batch_size=LOADER_BATCH, num_workers=LOADER_WORKERS,
                                         persistent_workers=True)

    def run() -> int:
        return _loader_pass(loader, lambda batch: len(batch["label"]), ctx.metrics)

    return run


@variant("loader-16k", "tensorflow", "autotune",
         f"TFRecordDataset(path).batch({LOADER_BATCH}).map(parse_example, AUTOTUNE).prefetch(AUTOTUNE)"
         ".as_numpy_iterator()", "decoded",
         note="tf.data with its default threading (AUTOTUNE: all cores), tf.io.parse_example per batch in the map; "
              "data arrives as an object array of bytes, label as an int64 array; TF checks every CRC")
def _tf_loader(ctx: Ctx) -> Callable[[], int]:
    tf = import_tf()
    spec = {"data": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64)}
    ds = (tf.data.TFRecordDataset(ctx.path).batch(LOADER_BATCH)
          .map(lambda x: tf.io.parse_example(x, spec), num_parallel_calls=tf.data.AUTOTUNE)
          .prefetch(tf.data.AUTOTUNE))

    def run() -> int:
        n = 0
        for batch in ds.as_numpy_iterator():
            n += len(batch["label"])
        return n

    return run

