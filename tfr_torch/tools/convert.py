"""Convert image folders and torchvision-style datasets into sharded TFRecord files.

Feature keys are the ones TensorFlow's image pipelines use (TF-Slim / tensorflow/models' build_image_data.py,
read by many TF input functions):

| key | type | value |
|---|---|---|
| `image/encoded` | bytes | the encoded image (the file's bytes with "keep"); "raw": a serialized uint8 [C, H, W] |
| `image/format` | bytes | b"jpeg", b"png", ... or b"raw" |
| `image/height`, `image/width`, `image/channels` | int64 | the size of what `decode_image(encoded, mode)` returns |
| `image/class/label` | int64 | the class index (ImageFolder's sorted class order) |
| `image/class/text` | bytes | the class name (folder name, or dataset.classes[label]) |
| `image/filename` | bytes | the source path relative to the folder (image folders only) |
"""

from __future__ import annotations

import hashlib
import logging
import numbers
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tfr_torch.decode.specs import FixedLenFeature, string
from tfr_torch.errors import DecodeError
from tfr_torch.format.options import Compression, OnErrorPolicy, check_compression, check_on_error_policy
from tfr_torch.images.encode import check_mode_for_format
from tfr_torch.tools.convert_jobs import _DatasetJob, _FolderJob, _Item
from tfr_torch.tools.convert_run import _run
from tfr_torch.tools.progress import Progress
from tfr_torch.tools.shards import ShardedWriter

__all__ = ["IMAGE_FEATURES", "IMG_EXTENSIONS", "ConversionResult", "convert_image_folder", "convert_dataset",
           "find_classes", "image_folder_items"]

log = logging.getLogger(__name__)

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's
FORMATS = ("keep", "jpeg", "png", "raw")

IMAGE_FEATURES = {
    "image/encoded": FixedLenFeature([], string),
    "image/format": FixedLenFeature([], string),
    "image/height": FixedLenFeature([], torch.int64),
    "image/width": FixedLenFeature([], torch.int64),
    "image/channels": FixedLenFeature([], torch.int64),
    "image/class/label": FixedLenFeature([], torch.int64),
    "image/class/text": FixedLenFeature([], string),
}


@dataclass
class ConversionResult:
    """What a conversion did: `paths` (the shards), `records`, `skipped` ([item, reason] pairs), `seconds`,
    `bytes_in` (bytes of input read), `resumed_from` (the first item converted by this run)."""

    paths: list[str]
    records: int
    skipped: list[list[Any]]
    seconds: float
    bytes_in: int
    resumed_from: int


def find_classes(root: str) -> tuple[list[str], dict[str, int]]:
    """Class folders sorted by name, as torchvision's ImageFolder sorts them."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"no class folders in {root!r}: expected {root}/<class>/<image files>")
    return classes, {name: i for i, name in enumerate(classes)}


def image_folder_items(root: str, allow_empty: bool = False) -> tuple[list[tuple[str, int]], list[str]]:
    """(path, label) of every image, in ImageFolder's order (class by class, files sorted), and the classes.

    A class folder with no image file is an error naming it, as in torchvision's ImageFolder; `allow_empty=True`
    keeps its class (its label is used by no record)."""
    classes, class_to_idx = find_classes(root)
    items = []
    empty = []
    for name in classes:
        found = 0
        for folder, _, files in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for file in sorted(files):
                if file.lower().endswith(IMG_EXTENSIONS):
                    items.append((os.path.join(folder, file), class_to_idx[name]))
                    found += 1
        if not found:
            empty.append(os.path.join(root, name))
    if empty and not allow_empty:
        raise FileNotFoundError(f"no image files in the class folder(s) {', '.join(repr(e) for e in empty)} "
                                f"(extensions: {' '.join(IMG_EXTENSIONS)}); pass allow_empty=True (--allow-empty) to "
                                "keep such classes with no images, as torchvision's ImageFolder(allow_empty=True) "
                                "does")
    return items, classes


def _check_workers(workers: Any) -> int:
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or int(workers) < 1:
        raise ValueError(f"workers must be a positive int (the number of encoding processes), got {workers!r}")
    return int(workers)


def _check_quality(quality: Any) -> int:
    if isinstance(quality, bool) or not isinstance(quality, numbers.Integral) or not 0 <= int(quality) <= 100:
        raise ValueError(f"quality must be a JPEG quality, an int from 0 to 100, got {quality!r}")
    return int(quality)


def _check_utf8_classes(root: str, classes: Sequence[str]) -> None:
    """A TFDS folder holds the class names as UTF-8 text (`<feature>.labels.txt`): a folder name that is not UTF-8
    (kept by Python as surrogate escapes) would make a folder that neither TFDS nor tfr_torch can read."""
    for name in classes:
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"the class folder {os.path.join(root, name)!r} has a name that is not UTF-8 "
                             f"({os.fsencode(name)!r}): a TensorFlow Datasets folder keeps class names as UTF-8 text "
                             "(<feature>.labels.txt); rename the folder, or convert without tfds=True (--tfds)"
                             ) from None


def _listing_digest(root: str, items: Sequence[tuple[str, int]], classes: Sequence[str]) -> str:
    """A digest of the classes and of every (file relative to the folder, label): a folder whose listing changed
    (a file added and another removed, a class folder added) must not resume an interrupted run's shards, whose
    records were made from the old listing (they would miss files, repeat removed ones or carry other labels)."""
    digest = hashlib.sha256()
    for name in classes:
        digest.update(os.fsencode(name) + b"\0")
    prefix = len(os.path.join(root, ""))  # image_folder_items' paths are os.path.join(root, class, ...)
    for path, label in items:
        digest.update(b"\1" + os.fsencode(path[prefix:]) + b"\0" + str(label).encode())
    return digest.hexdigest()


def _convert(job: Callable[[int], _Item], count: int, out_dir: str, name: str, split: str, *, shard_size: Any,
             records_per_shard: int | None, compression: Compression, workers: int, on_error: OnErrorPolicy,
             resume: bool,
             progress: bool, image: dict[str, Any], settings: dict[str, Any], tfds_version: str | None = None,
             engine: str = "local",
             address: str | None = None) -> ConversionResult:
    check_on_error_policy(on_error)
    check_compression(compression)
    if engine not in ("local", "ray"):
        raise ValueError(f'engine must be "local" or "ray", got {engine!r}')
    if address is not None and engine != "ray":
        raise ValueError(f'address={address!r} names a Ray cluster: it needs engine="ray"')
    workers = _check_workers(workers)

    def say(message: str, always: bool = False) -> None:
        """On screen (stderr) with progress=True; otherwise to the log (skipped images: as warnings too)."""
        if progress:
            sys.stderr.write(message + "\n")
        elif always:
            warnings.warn(message, stacklevel=4)
        else:
            log.info(message)

    features = dict(IMAGE_FEATURES)
    if image.get("filenames"):
        features["image/filename"] = FixedLenFeature([], string)
    tfds = None
    if tfds_version is not None:  # a TFDS dataset folder: <out>/<name>/<version>/, with TFDS's metadata
        from tfr_torch.tfds.write import image_features

        out_dir = f"{out_dir.rstrip('/')}/{name}/{tfds_version}"
        classes = image.get("classes")
        tfds = {"version": tfds_version, "supervised_keys": ("image/encoded", "image/class/label"),
                "features": image_features(features, len(classes) if classes else None, image["encoding"]),
                "class_names": {"image.class.label": classes} if classes else None}
    writer = ShardedWriter(out_dir, name, split, shard_size, compression, records_per_shard=records_per_shard,
                           features=features, image=image, resume=resume, settings=settings, tfds=tfds)
    start = 0
    skipped: list[list[Any]] = []  # [item, reason] pairs
    if writer.resumed_position is not None:
        start = int(writer.resumed_position) + 1
        skipped = list(writer.resumed_state.get("skipped", []))
        say(f"resuming: keeping the finished shard(s) of an interrupted run ({writer.records} records); converting "
            f"items {start} to {count - 1}", always=True)
    meter = Progress(count - start, f"{name}-{split}: ", enabled=progress)
    try:
        _run(job, count, writer, workers, on_error, meter, start, skipped, engine, address)
        if count and writer.records == 0:  # on_error="skip" skipped every item: no data set, an error
            raise DecodeError(f"every one of the {count} items was skipped, so nothing was written; the first: "
                              f"{skipped[0][1] if skipped else 'none'}")
    except BaseException:
        writer.abort()
        raise
    paths = writer.close()
    seconds = meter.done()
    result = ConversionResult(paths=paths, records=writer.records, skipped=skipped, seconds=seconds,
                              bytes_in=meter.bytes, resumed_from=start)
    say(f"converted {meter.items - (len(skipped) - len(writer.resumed_state.get('skipped', [])))} items into "
        f"{len(paths)} shard(s) ({result.records} records in all), skipped {len(skipped)}, read "
        f"{meter.bytes / 1e6:,.1f} MB in {seconds:,.1f} s ({meter.bytes / 1e6 / max(seconds, 1e-9):,.1f} MB/s)")
    for _, reason in skipped:
        say(f"skipped: {reason}", always=True)
    return result


def convert_image_folder(src_dir: str, out_dir: str, name: str, split: str = "train", *, format: str = "keep",
                         quality: int = 95, shard_size: Any = "128MB", records_per_shard: int | None = None,
                         compression: Compression = None, workers: int = 1, on_error: OnErrorPolicy = "raise",
                         check: bool = True, resume: bool = True, progress: bool = False, tfds: bool = False,
                         version: str = "1.0.0", engine: str = "local", address: str | None = None,
                         mode: Any = "UNCHANGED", allow_empty: bool = False) -> ConversionResult:
    """Convert a folder of class subfolders (torchvision's ImageFolder layout) into sharded TFRecords.

    Labels follow ImageFolder (classes sorted by folder name). `format="keep"` stores the original file bytes
    (checked to decode unless `check=False`); "jpeg"/"png" re-encode, "raw" stores a uint8 [C, H, W] tensor with
    serialize_tensor. Output is deterministic whatever `workers` is; an interrupted run resumes after its last
    finished shard (`resume=True`). A broken image stops the conversion with its path (`on_error="raise"`) or
    is skipped and counted (`"skip"`). See the module docstring for the feature keys. `tfds=True` writes a
    TensorFlow Datasets folder `out_dir/name/version/` (dataset_info.json, features.json, class names) instead of the
    sidecar: `tfds.builder_from_directory` loads it, and so does `TFRecordDataset(folder, split=...)`.
    `engine="ray"` encodes the images in Ray tasks (the running Ray session, or the cluster at `address`; the folder
    must be readable at the same path on every node) instead of `workers` local processes: same output, byte for byte.
    `mode` (with "jpeg", "png" or "raw"): the pixels stored, with decode_image's read modes ("RGB" makes a folder
    of gray, palette and RGBA files all 3-channel; JPEG takes no alpha). A class folder with no images is an error
    naming it, as in torchvision's ImageFolder, unless `allow_empty=True`. `image/height`, `image/width` and
    `image/channels` always describe what `decode_image` returns for the stored bytes.

    >>> convert_image_folder("photos/", "out/", "photos", "train", workers=4)  # doctest: +SKIP
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    check_on_error_policy(on_error)  # before the folder is listed
    check_compression(compression)
    quality = _check_quality(quality)
    workers = _check_workers(workers)
    mode = check_mode_for_format(mode, format)
    items, classes = image_folder_items(src_dir, allow_empty=allow_empty)
    if tfds:
        _check_utf8_classes(src_dir, classes)
    job = _FolderJob(os.path.abspath(src_dir), items, classes, format, quality, check, mode)
    if format == "keep" and not check and engine == "local":
        workers = 1  # nothing to compute: copying bytes in one process beats shipping them between processes
    image = {"encoding": format, "key": "image/encoded", "label_key": "image/class/label", "classes": classes,
             "filenames": True}
    settings = {"source": os.path.abspath(src_dir), "items": len(items), "format": format, "quality": quality,
                "listing": _listing_digest(src_dir, items, classes)}
    if mode != "UNCHANGED":
        image["mode"] = settings["mode"] = mode
    return _convert(job, len(items), out_dir, name, split, shard_size=shard_size, records_per_shard=records_per_shard,
                    compression=compression, workers=workers, on_error=on_error, resume=resume, progress=progress,
                    image=image, settings=settings, tfds_version=version if tfds else None, engine=engine,
                    address=address)


def convert_dataset(dataset: Any, out_dir: str, name: str, split: str = "train", image_format: str = "jpeg",
                    quality: int = 95, *, shard_size: Any = "128MB", records_per_shard: int | None = None,
                    compression: Compression = None, workers: int = 1, on_error: OnErrorPolicy = "raise",
                    classes: Sequence[str] | None = None, resume: bool = True, progress: bool = False,
                    tfds: bool = False, version: str = "1.0.0", engine: str = "local",
                    address: str | None = None, mode: Any = "UNCHANGED") -> ConversionResult:
    """Convert a map-style dataset of `(image, target)` items (torchvision's CIFAR10, MNIST, ImageFolder, ...)
    into sharded TFRecords. Images may be PIL images, uint8 tensors [C, H, W] / [H, W], float tensors in [0, 1]
    (what ToTensor() makes: times 255 and truncated to uint8, as torchvision's ToPILImage does) or uint8 numpy
    arrays [H, W, C] / [H, W], with 1 to 4 channels; `mode` converts them with decode_image's read modes ("RGB",
    "GRAY", ...; JPEG takes no alpha). `image_format` "jpeg" (at `quality`), "png" (lossless) or "raw"
    (serialize_tensor of uint8 [C, H, W]). With on_error="skip", a run that skips every item is an error.
    Class names come from `classes` or `dataset.classes` when present. `engine="ray"` encodes the items in Ray
    tasks (the dataset object is shipped to the cluster once; `address` names a cluster) instead of `workers` local
    processes: same output, byte for byte.

    >>> convert_dataset(torchvision.datasets.CIFAR10("data", download=True), "out/", "cifar10", "train",
    ...                 image_format="png", workers=4)  # doctest: +SKIP
    """
    if image_format not in ("jpeg", "png", "raw"):
        raise ValueError(f"image_format must be 'jpeg', 'png' or 'raw', got {image_format!r}")
    check_on_error_policy(on_error)
    check_compression(compression)
    quality = _check_quality(quality)
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise TypeError(f"convert_dataset needs a map-style dataset (with __getitem__ and __len__), got "
                        f"{type(dataset).__name__}")
    mode = check_mode_for_format(mode, image_format)
    classes = list(classes) if classes is not None else (list(dataset.classes) if hasattr(dataset, "classes") else None)
    job = _DatasetJob(dataset, classes, image_format, quality, mode)
    image = {"encoding": image_format, "key": "image/encoded", "label_key": "image/class/label", "classes": classes}
    settings = {"source": type(dataset).__name__, "items": len(dataset), "format": image_format, "quality": quality}
    if mode != "UNCHANGED":
        image["mode"] = settings["mode"] = mode
    return _convert(job, len(dataset), out_dir, name, split, shard_size=shard_size,
                    records_per_shard=records_per_shard, compression=compression, workers=workers,
                    on_error=on_error, resume=resume, progress=progress, image=image, settings=settings,
                    tfds_version=version if tfds else None, engine=engine, address=address)
