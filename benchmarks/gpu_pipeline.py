"""Image pipelines feeding a GPU (issue 23): the rows of ../shared/reference/gpu.md's table, in under 3 minutes.

    python benchmarks/gpu_pipeline.py [--images 8192] [--epoch-images 131072] [--workers N] [--batch 256]
                                      [--seconds 10] [--rounds 3] [--cpu-only] [--only KEY,KEY...] [--prefetch 2]
                                      [--switch-interval S] [--json out.json]

Synthetic ImageNet-like JPEGs (500x375, quality 90) in indexed shards; every pipeline decodes, resizes to 256 and
centre-crops 224 into uint8 batches (the ImageTransform(224, train=False, dtype=uint8) of tfr_torch.images):
- cpu rows (always): tfr_torch with DecodeImages in DataLoader workers, shuffled via the index and not; the
  `tfrecord` package (when installed) with the same decode_image and the same transform per record, same workers,
  reading its shards over and over (infinite=True: no epoch ends at all). The three are measured in --rounds
  interleaved rounds of --seconds / --rounds each, each round starting with the next row (a machine's slow minute
  falls on all of them, not on one, and no row always follows the same one); each row is the median of its rounds,
  each round printed as measured, and the ratios are of those medians;
- gpu rows (with CUDA, skipped otherwise): decode_image(list, device="cuda") with each GPU decoder installed,
  DeviceLoader alone (training transforms, bfloat16 channels_last), the ResNet-50 step alone (bf16 autocast,
  channels_last; torchvision.models.resnet50 when it imports, else a labelled stand-in conv net), and the step fed
  by DeviceLoader and by CPU decoding in workers.
--only measures the rows of those keys alone (KEYS below; the step alone is measured whenever a fed row is, for its
share). --prefetch is DeviceLoader's depth; --switch-interval sets sys.setswitchinterval (how long a Python thread
holds the GIL before another may take it; 0.005 by default) for a look at the GIL shared by a loader thread and the
training loop. Each row runs for about --seconds after its warm-up (the batches its workers hand over at once when
they start or resume), epoch after epoch of one loader whose workers persist; images/s are printed and written to
--json.

Steady state, as in training: the --images records are written once and the shards are listed again under other
names (symbolic links) until an epoch holds --epoch-images records, so a row times the middle of an epoch rather than
its ends. A short epoch is dominated by them: its batches go to the workers in turn, so 32 batches on 15 workers take
three batch-times, the first two workers making a third batch while the other 13 wait (71% of the CPUs busy over the
epoch), and a DeviceLoader drains its prefetch at each end. An ImageNet epoch is 5,005 batches: its ends are 0.3% of it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tfr_torch  # noqa: E402
from tfr_torch.images import DecodeImages, DeviceLoader, ImageTransform, decode_image  # noqa: E402

EVAL = ImageTransform(224, train=False, dtype=torch.uint8, channels_last=False)
_END = object()
SPEC = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "image/class/label": tfr_torch.FixedLenFeature([], torch.int64)}


def make_shards(folder: str, count: int, shards: int, width: int, height: int) -> list[str]:
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    paths = [os.path.join(folder, f"train-{s:05d}.tfrecord") for s in range(shards)]
    writers = [tfr_torch.TFRecordWriter(p) for p in paths]
    encoded: list[bytes] = []  # at most 1,024 distinct images, repeated (decoding costs the same; making them less)
    for k in range(count):
        if k < 1024:
            base = np.stack([(x + 3 * k) % 256, (y * 2 + k) % 256, (x + y) % 256], -1)
            pixels = np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, "JPEG", quality=90)
            encoded.append(buf.getvalue())
        writers[k % shards].write_example({"image/encoded": encoded[k % len(encoded)],
                                           "image/class/label": k % 1000})
    for writer, path in zip(writers, paths):
        writer.close()
        tfr_torch.build_index(path, path + ".idx")
    return paths


def listed(paths: list[str], records: int, epoch: int) -> list[str]:
    """`paths` (`records` records in all, each with its index beside it) listed again under other names, symbolic
    links to the same files, until the list holds at least `epoch` records: a long epoch without its bytes on disk
    twice (the page cache holds them once). At most MAX_LISTED files."""
    repeats = max(1, min(-(-epoch // max(records, 1)), MAX_LISTED // max(len(paths), 1)))
    listing = list(paths)
    for r in range(1, repeats):
        for path in paths:
            twin = f"{path[: -len('.tfrecord')]}-r{r:03d}.tfrecord"
            os.symlink(path, twin)
            os.symlink(path + ".idx", twin + ".idx")
            listing.append(twin)
    print(f"# an epoch: {records * repeats:,} records, the {len(paths)} shards listed {repeats} time(s)", flush=True)
    return listing


MAX_LISTED = 256  # files in the long epoch's listing: a shuffle keeps them open (its budget: half of `ulimit -n`)


def timed(batches: Iterable[Any], count: Callable[[Any], int], seconds: float, sync: Callable[[], None],
          warmup: int = 3) -> float | None:
    """images/s over about `seconds`, after `warmup` batches (start-up: forks, allocations, kernel choices; for a
    DataLoader with workers, the batches they hand over at once as they start or resume); None (not measured) when
    the batches end before the warm-up does (--images too few for --batch)."""
    it = iter(batches)
    for _ in range(warmup):
        if next(it, _END) is _END:
            break
    sync()
    start, images = time.perf_counter(), 0
    for batch in it:
        images += count(batch)
        if time.perf_counter() - start > seconds:
            break
    sync()
    if not images:
        print(f"# more than {warmup} batches needed, fewer given: raise --images or lower --batch", flush=True)
        return None
    return images / (time.perf_counter() - start)


def tfrecord_loader(paths: list[str], args: argparse.Namespace) -> Iterable[Any] | None:
    """The `tfrecord` package's pipeline over the distinct shards `paths`, read over and over (its steady state),
    or None where it is not installed."""
    try:
        from tfrecord.torch.dataset import MultiTFRecordDataset
    except ImportError:
        return None

    def one(record: dict) -> torch.Tensor:
        pixels = decode_image(bytes(record["image/encoded"]), "RGB")
        boxes, flips = EVAL.plan([tuple(pixels.shape[-2:])], 0, 0, [0])
        return EVAL.apply([pixels], boxes, flips)[0]

    pattern = os.path.join(os.path.dirname(paths[0]), "{}.tfrecord")
    splits = {os.path.basename(p)[: -len(".tfrecord")]: 1.0 / len(paths) for p in paths}
    dataset = MultiTFRecordDataset(pattern, pattern + ".idx", splits, {"image/encoded": "byte"},
                                   transform=one, infinite=True)
    return iter(torch.utils.data.DataLoader(dataset, batch_size=args.batch, num_workers=args.workers,
                                            persistent_workers=args.workers > 0))


def cpu_rows(paths: list[str], listing: list[str], args: argparse.Namespace) -> dict[str, float | None]:
    """The CPU rows, measured in interleaved rounds: `paths` the distinct shards, `listing` the long epoch's."""
    pipelines: dict[str, tuple[Iterable[Any], Callable[[Any], int]]] = {}
    for shuffle in (True, False):
        if not wanted(args, "cpu-shuffled" if shuffle else "cpu-in-order"):
            continue
        dataset = tfr_torch.TFRecordDataset(listing, SPEC, index="auto", batch_size=args.batch, shuffle=shuffle,
                                            transform=DecodeImages(EVAL))
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=args.workers,
                                             persistent_workers=args.workers > 0)
        name = f"tfr_torch, DecodeImages in {args.workers} workers, {'shuffled' if shuffle else 'in order'}"
        pipelines[name] = (iter(forever(loader)), lambda b: len(b["image/class/label"]))
    if wanted(args, "tfrecord"):
        name = f"tfrecord package, same decode_image + transform per record, {args.workers} workers"
        theirs = tfrecord_loader(paths, args)
        if theirs is not None:
            pipelines[name] = (theirs, len)
    rounds: dict[str, list[float]] = {name: [] for name in pipelines}
    if wanted(args, "tfrecord") and theirs is None:
        rounds[f"{name} (not installed)"] = []
    warmup = 3 + 2 * args.workers  # what the workers prefetched while another row ran, and their start together
    names = list(pipelines)
    for r in range(args.rounds):
        # each round starts with the next row: a row that follows another meets that one's workers finishing the
        # batches they had begun (up to 2 a worker), so no row is always the one after the slowest
        for name in names[r % len(names):] + names[: r % len(names)]:
            batches, count = pipelines[name]
            rate = timed(batches, count, args.seconds / args.rounds, lambda: None, warmup)
            if rate is not None:
                rounds[name].append(rate)
            print(f"# round {r + 1}/{args.rounds}: {name}\t{'-' if rate is None else f'{rate:,.0f}'} images/s",
                  flush=True)
    rows: dict[str, float | None] = Rows()
    for name, rates in rounds.items():
        rows[name] = float(np.median(rates)) if rates else None
    ROUNDS.update({name: rates for name, rates in rounds.items()})
    return rows


ROUNDS: dict[str, list[float]] = {}  # each CPU row's rounds, for --json


KEYS = ("cpu-shuffled", "cpu-in-order", "tfrecord", "decode-nvimgcodec", "decode-torchvision", "wrapped-alone",
        "loader-alone", "loader-alone-regions", "step", "fed-loader", "fed-loader-caller", "fed-loader-engines-off",
        "fed-cpu", "fed-cpu-nice")


def wanted(args: argparse.Namespace, key: str) -> bool:
    """Whether the row(s) of `key` (one of KEYS) are measured in this run (--only)."""
    return args.only is None or key in args.only


def resnet50() -> tuple[torch.nn.Module, str]:
    try:
        import torchvision

        return torchvision.models.resnet50(), "ResNet-50 (torchvision)"
    except (ImportError, RuntimeError, AttributeError):
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 256, 3, 2, 1),
                                  torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                  torch.nn.Linear(256, 1000))
        return net, "STAND-IN conv net (torchvision does not import): not ResNet-50"


class Hardware:
    """TFR_TORCH_JPEG_HARDWARE set to `on` for a block (nvImageCodec's hardware JPEG engines, or not)."""

    def __init__(self, on: bool) -> None:
        self.on, self.before = on, None

    def __enter__(self) -> None:
        self.before = os.environ.get("TFR_TORCH_JPEG_HARDWARE")
        os.environ["TFR_TORCH_JPEG_HARDWARE"] = "1" if self.on else "0"

    def __exit__(self, *exc: Any) -> None:
        if self.before is None:
            os.environ.pop("TFR_TORCH_JPEG_HARDWARE", None)
        else:
            os.environ["TFR_TORCH_JPEG_HARDWARE"] = self.before


class Rows(dict):
    """Rows that print as they are measured (a run cut short still shows what it measured)."""

    def __setitem__(self, key: str, value: float | None) -> None:
        super().__setitem__(key, value)
        print(f"{key}\t{'-' if value is None else f'{value:,.0f}'} images/s", flush=True)


def forever(loader: Any) -> Iterable[Any]:
    """Epoch after epoch of one loader (its persistent workers stay)."""
    while True:
        yield from loader


LOADER_WARMUP = 3 + 2 * 4  # the DeviceLoader rows' 4 workers: their first batches, handed over at once


def gpu_rows(paths: list[str], args: argparse.Namespace) -> dict[str, float | None]:
    from tfr_torch.images import _nvimgcodec

    device = torch.device("cuda")
    rows: dict[str, float | None] = Rows()
    sync = torch.cuda.synchronize
    raw = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", batch_size=args.batch, shuffle=True)
    batches = [b["image/encoded"] for _, b in zip(range(8), torch.utils.data.DataLoader(raw, batch_size=None))]
    installed = tfr_torch.image_backends()
    print(f"# nvImageCodec: {_nvimgcodec.describe(0)}", flush=True)

    def decode_row(name: str, backend: str) -> None:
        try:
            rows[name] = timed((decode_image(list(b), "RGB", device=device, backend=backend)
                                for _ in range(1000) for b in batches), len, args.seconds, sync)
        except (ValueError, RuntimeError, tfr_torch.DecodeError) as exc:
            rows[f"{name}: {type(exc).__name__}: {str(exc)[:120]}"] = None

    if installed.get("nvimgcodec") and wanted(args, "decode-nvimgcodec"):
        with Hardware(True):
            decode_row("decode_image(list, device='cuda'): nvImageCodec, hardware JPEG engines", "nvimgcodec")
        with Hardware(False):
            decode_row("decode_image(list, device='cuda'): nvImageCodec, CUDA decoder (engines off)", "nvimgcodec")
    if installed.get("torchvision") and wanted(args, "decode-torchvision"):
        decode_row("decode_image(list, device='cuda', backend='torchvision')", "torchvision")
        import torchvision.io as tvio

        tensors = [[torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in b] for b in batches]
        rows["torchvision.io.decode_jpeg(device='cuda') directly"] = timed(
            (tvio.decode_jpeg(t, device=device) for _ in range(1000) for t in tensors), len, args.seconds, sync)
    train = ImageTransform(224, train=True, dtype=torch.bfloat16)

    def device_loader(thread: bool, regions: bool = False) -> DeviceLoader:
        dataset = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", batch_size=args.batch, shuffle=True)
        inner = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=4, pin_memory=True,
                                            persistent_workers=True)
        return DeviceLoader(inner, device, transform=train, thread=thread, regions=regions, prefetch=args.prefetch)

    if wanted(args, "wrapped-alone"):
        raw_loader = torch.utils.data.DataLoader(  # what the loader below is fed: its ceiling
            tfr_torch.TFRecordDataset(paths, SPEC, index="auto", batch_size=args.batch, shuffle=True),
            batch_size=None, num_workers=4, pin_memory=True, persistent_workers=True)
        rows["the wrapped DataLoader alone: 4 workers hand over encoded JPEGs (no decoding)"] = timed(
            forever(raw_loader), lambda b: len(b["image/class/label"]), args.seconds, lambda: None, LOADER_WARMUP)
        del raw_loader
    variants = [("thread", True, True, "fed-loader"), ("training loop's thread", False, True, "fed-loader-caller"),
                ("thread, engines off", True, False, "fed-loader-engines-off")]
    for label, thread, hardware, _ in variants:
        if not wanted(args, "loader-alone"):
            break
        with Hardware(hardware):
            rows[f"DeviceLoader alone, 4 workers ({label}; training transforms, bf16 channels_last)"] = timed(
                forever(device_loader(thread)), lambda b: len(b["image/class/label"]), args.seconds, sync,
                LOADER_WARMUP)
    if tfr_torch.image_backends().get("nvimgcodec") and wanted(args, "loader-alone-regions"):
        rows["DeviceLoader alone, 4 workers (thread, crop regions decoded: regions=True)"] = timed(
            forever(device_loader(True, regions=True)), lambda b: len(b["image/class/label"]), args.seconds, sync,
            LOADER_WARMUP)
    fed = [key for key in ("fed-loader", "fed-loader-caller", "fed-loader-engines-off", "fed-cpu", "fed-cpu-nice")
           if wanted(args, key)]
    if not fed and not wanted(args, "step"):
        return rows
    model, label = resnet50()
    model = model.to(device).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(images: torch.Tensor, labels: torch.Tensor) -> int:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return int(images.shape[0])

    fixed = torch.randn(args.batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (args.batch,), device=device)
    alone = timed((step(fixed, labels) for _ in range(10**6)), lambda n: n, args.seconds, sync)
    rows[f"{label} step alone (bf16 autocast, channels_last)"] = alone
    for name, thread, hardware, key in variants:
        if key not in fed:
            continue
        with Hardware(hardware):
            rate = timed((step(b["image/encoded"], b["image/class/label"]) for b in forever(device_loader(thread))),
                         lambda n: n, args.seconds, sync, LOADER_WARMUP)
        rows[f"{label} fed by DeviceLoader, 4 workers ({name}): {share(rate, alone)} of the step alone"] = rate
    cpu = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", batch_size=args.batch, shuffle=True,
                                    transform=DecodeImages(EVAL))
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255

    def cpu_fed(batch: dict) -> int:
        images = batch["image/encoded"].to(device, non_blocking=True).to(memory_format=torch.channels_last)
        return step((images.float() - mean) / std, batch["image/class/label"].to(device, non_blocking=True))

    if "fed-cpu" in fed:
        cpu_loader = torch.utils.data.DataLoader(cpu, batch_size=None, num_workers=args.workers, pin_memory=True,
                                                 persistent_workers=True)
        rate = timed((cpu_fed(b) for b in forever(cpu_loader)), lambda n: n, args.seconds, sync,
                     3 + 2 * args.workers)
        rows[f"{label} fed by CPU decoding in {args.workers} workers: {share(rate, alone)} of the step alone"] = rate
        del cpu_loader
    if "fed-cpu-nice" in fed:
        cpu_loader = torch.utils.data.DataLoader(cpu, batch_size=None, num_workers=args.workers, pin_memory=True,
                                                 persistent_workers=True, worker_init_fn=lower_priority)
        rate = timed((cpu_fed(b) for b in forever(cpu_loader)), lambda n: n, args.seconds, sync,
                     3 + 2 * args.workers)
        rows[f"{label} fed by CPU decoding in {args.workers} workers at nice 10: {share(rate, alone)} of the step "
             f"alone"] = rate
    return rows


def ratio_lines(rows: dict[str, float | None]) -> dict[str, float]:
    """The CPU rows' ratios (of their medians): tfr_torch over the `tfrecord` package, shuffled over in order."""
    def rate(prefix: str) -> float | None:
        return next((v for k, v in rows.items() if k.startswith(prefix) and v), None)

    shuffled = next((v for k, v in rows.items() if k.startswith("tfr_torch") and k.endswith("shuffled") and v), None)
    in_order = next((v for k, v in rows.items() if k.startswith("tfr_torch") and k.endswith("in order") and v), None)
    theirs = rate("tfrecord package")
    out: dict[str, float] = {}
    if shuffled and theirs:
        out["tfr_torch shuffled / tfrecord package"] = shuffled / theirs
    if in_order and theirs:
        out["tfr_torch in order / tfrecord package"] = in_order / theirs
    if shuffled and in_order:
        out["tfr_torch shuffled / in order"] = shuffled / in_order
    return out


def share(rate: float | None, alone: float | None) -> str:
    """`rate` as a percentage of `alone` ("-%" where either was not measured)."""
    return f"{100 * rate / alone:.1f}%" if rate is not None and alone else "-%"


def lower_priority(worker: int) -> None:
    """A DataLoader worker_init_fn: the workers yield the CPU to the training loop's own thread."""
    os.nice(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8192, help="distinct records written")
    parser.add_argument("--epoch-images", type=int, default=131072,
                        help="records in an epoch: the shards listed again (symbolic links) until there are as many")
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--width", type=int, default=500)
    parser.add_argument("--height", type=int, default=375)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the CPU rows")
    parser.add_argument("--cpu-only", action="store_true", help="the CPU rows only (also without CUDA)")
    parser.add_argument("--only", type=lambda text: set(text.split(",")), default=None,
                        help=f"comma-separated row keys: {', '.join(KEYS)}")
    parser.add_argument("--prefetch", type=int, default=2, help="DeviceLoader's prefetch depth")
    parser.add_argument("--switch-interval", type=float, default=None, help="sys.setswitchinterval for the run")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    unknown = (args.only or set()) - set(KEYS)
    if unknown:
        parser.error(f"unknown --only keys {sorted(unknown)}; the keys: {', '.join(KEYS)}")
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    torch.set_num_threads(1)
    gpu = torch.cuda.is_available() and not args.cpu_only
    args.only = sorted(args.only) if args.only is not None else None  # JSON-friendly; `in` works on lists too
    report: dict[str, Any] = {"machine": platform.node(), "cpus": os.cpu_count(), "torch": torch.__version__,
                              "decoders": tfr_torch.image_backends(), "args": vars(args),
                              "gpu": torch.cuda.get_device_name() if gpu else None}
    print(f"# {report}")
    with tempfile.TemporaryDirectory() as folder:
        paths = make_shards(folder, args.images, args.shards, args.width, args.height)
        listing = listed(paths, args.images, args.epoch_images)
        rows = cpu_rows(paths, listing, args)
        if gpu:
            rows.update(gpu_rows(listing, args))
        else:
            print("# no CUDA device (or --cpu-only): the GPU rows are not run")
    report["rows"] = rows
    report["rounds"] = ROUNDS
    ratios = ratio_lines(rows)
    report["ratios"] = ratios
    for name, rate in rows.items():
        print(f"{name}\t{'-' if rate is None else f'{rate:,.0f}'} images/s")
    for name, ratio in ratios.items():
        print(f"{name}\t{ratio:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
