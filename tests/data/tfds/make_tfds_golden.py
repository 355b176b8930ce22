"""Build the golden TensorFlow Datasets directories under tests/data/tfds/ with real TFDS, and record what TFDS
decodes from them.

Run by hand, from the repository root, with a Python that has tensorflow-cpu and tensorflow-datasets
(TensorFlow 2.21 and TFDS 4.9.10 were used):

    /work/tfenv/bin/python tests/data/tfds/make_tfds_golden.py

It never imports tfr_torch. It deletes and rewrites:

* ``data/tfr_golden/1.0.0/``: a dataset built by a ``tfds.core.GeneratorBasedBuilder`` whose features cover every
  type tfr_torch reads (see ``FEATURES``): two splits (``train``: 23 examples, ``test``: 7, 3 shards each), with
  ``supervised_keys=("image", "label")``; ``dataset_info.json``, ``features.json`` and the ``*.labels.txt`` files are
  TFDS's own.
* ``data/tfr_golden/0.9.0/``: an older version with one feature (tfr_torch picks the latest version by default).
* ``values.json``: ``{split: [example, ...]}`` for "train" and "test": what
  ``tfds.as_numpy(builder.as_dataset(split, shuffle_files=False, read_config=ReadConfig(interleave_cycle_length=1)))``
  yields (files read one after another: the order tfr_torch reads them in). Encodings: an array is
  ``{"dtype", "shape", "b64"}`` (its little-endian bytes), bytes ``{"bytes": base64}``, a ragged tensor
  ``{"ragged": nested lists, "dtype"}``, a dict ``{"dict": {...}}``.
* ``splits.json``: for each split string, the ``id`` feature of every example TFDS yields for it (same read
  config), or the error TFDS raises; plus TFDS's own file instructions (file name, skip, take).
* ``supervised.json``: the first examples of ``as_supervised=True`` (image shape, label).
* ``jpeg_accurate.json``: the JPEG-encoded images (``image_jpeg`` and the JPEG ones of ``mixed``) of every example as
  ``tf.io.decode_jpeg(..., dct_method="INTEGER_ACCURATE")`` decodes them, with TFDS's channel count. TFDS decodes with
  TensorFlow's default, ``INTEGER_FAST`` (libjpeg's IFAST inverse DCT), which Pillow and torchvision do not offer:
  tfr_torch's pixels equal TensorFlow's accurate DCT exactly and TFDS's within a few levels. ``python
  make_tfds_golden.py jpeg`` rewrites this file alone from the committed shards.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import sys

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image as PILImage

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
NAMES = ["cat", "dog", "bird"]
OBJECT_NAMES = ["car", "person", "tree", "sign"]


def FEATURES():
    f = tfds.features
    return f.FeaturesDict({
        "id": f.Scalar(dtype=np.int64),
        "image": f.Image(),                                        # png, (None, None, 3)
        "image_jpeg": f.Image(encoding_format="jpeg"),
        "gray": f.Image(shape=(None, None, 1)),
        "fixed_image": f.Image(shape=(4, 4, 3)),
        "mixed": f.Image(shape=(None, None, 3)),                   # gray / RGBA PNGs, a gray JPEG: TFDS converts
        "label": f.ClassLabel(names=NAMES),
        "text": f.Text(),
        "mat": f.Tensor(shape=(3, 4), dtype=np.float32),
        "f64": f.Tensor(shape=(2,), dtype=np.float64),
        "f16": f.Tensor(shape=(2, 2), dtype=np.float16),
        "u8": f.Tensor(shape=(3,), dtype=np.uint8),
        "i16": f.Tensor(shape=(2,), dtype=np.int16),
        "dyn": f.Tensor(shape=(None, 2), dtype=np.int32),
        "dyn_late": f.Tensor(shape=(2, None), dtype=np.int64),
        "zlib2d": f.Tensor(shape=(None, None), dtype=np.float16, encoding="zlib"),
        "bytes_t": f.Tensor(shape=(2, 3), dtype=np.uint8, encoding="bytes"),
        "bytes_dyn": f.Tensor(shape=(None, 3), dtype=np.int32, encoding="bytes"),
        "flag": f.Scalar(dtype=np.bool_),
        "i32": f.Scalar(dtype=np.int32),
        "bbox": f.BBoxFeature(),
        "ints": f.Sequence(np.int64),
        "fixed_seq": f.Sequence(np.float32, length=3),
        "objects": f.Sequence({
            "bbox": f.BBoxFeature(),
            "label": f.ClassLabel(names=OBJECT_NAMES),
            "area": np.int32,
        }),
        "nested": {"a": np.int32, "b": {"c": f.Tensor(shape=(2,), dtype=np.uint16)}, "t": f.Text()},
        "ragged": f.Sequence(f.Sequence(np.int64)),
        "frames": f.Video(shape=(None, 3, 4, 3)),
        "audio": f.Audio(shape=(None,), dtype=np.int64, sample_rate=8000),
    })


def _png(array: np.ndarray, mode: str) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array, mode).save(out, "PNG")
    return out.getvalue()


def _jpeg(array: np.ndarray, mode: str) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array, mode).save(out, "JPEG", quality=90)
    return out.getvalue()


def example(i: int, rng: np.random.Generator) -> dict:
    h, w = 3 + i % 4, 4 + i % 3
    n = i % 4
    mixed_kind = i % 3
    if mixed_kind == 0:
        mixed = _png(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    elif mixed_kind == 1:
        mixed = _png(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA")
    else:
        mixed = _jpeg(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    return {
        "id": i,
        "image": rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
        "image_jpeg": rng.integers(0, 256, (w, h, 3), dtype=np.uint8),
        "gray": rng.integers(0, 256, (h, h, 1), dtype=np.uint8),
        "fixed_image": rng.integers(0, 256, (4, 4, 3), dtype=np.uint8),
        "mixed": mixed,
        "label": i % 3,
        "text": f"exemple n°{i}" if i % 5 else "",
        "mat": rng.standard_normal((3, 4)).astype(np.float32),
        "f64": np.array([1 / (i + 3), -i * 1e200], np.float64),
        "f16": rng.standard_normal((2, 2)).astype(np.float16),
        "u8": np.array([i, 255, 0], np.uint8),
        "i16": np.array([-32768 + i, 32767], np.int16),
        "dyn": np.arange(2 * n, dtype=np.int32).reshape(n, 2) - 3,
        "dyn_late": np.arange(2 * n, dtype=np.int64).reshape(2, n) * (1 << 40),
        "zlib2d": rng.standard_normal((n, (i % 3) + 1)).astype(np.float16),
        "bytes_t": rng.integers(0, 256, (2, 3), dtype=np.uint8),
        "bytes_dyn": np.arange(3 * n, dtype=np.int32).reshape(n, 3) * -7,
        "flag": bool(i % 2),
        "i32": np.int32(-(2**31) + i) if i % 2 else np.int32(2**31 - 1 - i),
        "bbox": tfds.features.BBox(0.1, 0.2, 0.5 + (i % 40) / 100, 0.75),
        "ints": list(range(i % 5)),
        "fixed_seq": [float(i), 0.5, -1.25],
        "objects": {
            "bbox": [tfds.features.BBox(0.01 * k, 0.02 * k, 0.5, 0.6 + 0.01 * k) for k in range(n)],
            "label": [(i + k) % 4 for k in range(n)],
            "area": [k * 100 - i for k in range(n)],
        },
        "nested": {"a": i * 3, "b": {"c": np.array([i, 65535], np.uint16)}, "t": "ünï" * (i % 2)},
        "ragged": [[j for j in range(k)] for k in range(i % 4)],
        "frames": rng.integers(0, 256, (1 + i % 3, 3, 4, 3), dtype=np.uint8),
        "audio": rng.integers(-1000, 1000, (i % 6,), dtype=np.int64),
    }


class TfrGolden(tfds.core.GeneratorBasedBuilder):
    """Every feature type tfr_torch reads, in two splits of several shards."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, description="tfr_torch golden dataset", features=FEATURES(),
                                     supervised_keys=("image", "label"), homepage="https://example.com/tfr_golden")

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 23), "test": self._generate_examples(100, 7)}

    def _generate_examples(self, start, count):
        for i in range(start, start + count):
            yield i, example(i, np.random.default_rng(i))


class TfrGoldenOld(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version("0.9.0")
    name = "tfr_golden"

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({"id": np.int64}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(3)}

    def _generate_examples(self, count):
        for i in range(count):
            yield i, {"id": i}


def encode(value):
    if isinstance(value, dict):
        return {"dict": {k: encode(v) for k, v in value.items()}}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
        return {"ragged": value.to_list(),
                "dtype": value.dtype.name if hasattr(value.dtype, "name") else str(value.dtype)}
    array = np.asarray(value)
    if array.dtype == object:
        return {"list": [encode(v) for v in array.tolist()]}
    return {"dtype": array.dtype.name, "shape": list(array.shape),
            "b64": base64.b64encode(
                np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()).decode()}


def read_config():
    return tfds.ReadConfig(interleave_cycle_length=1)


SPLITS = [
    "train", "test", "all", "train+test", "test + train", "train[:10%]", "train[10%:]", "train[33%:66%]",
    "train[:-33%]", "train[-5:]", "train[5:-5]", "test[1:3]", "test[3:1]", "test[:50%]+train[50%:]",
    "train[1shard]", "train[:2shard]", "train[-1shard:]", "train[12.5%:87.5%]", "train[50%:50%]", "train[:0]",
    "test[:1_0]", "train[4:4]", "train[:23]", "train[-23:]",
]
BAD_SPLITS = ["validation", "train[:24]", "train[-24:]", "train[:101%]", "all[:10%]", "train[1]", "train[::2]",
              "train[a:b]", ""]


def jpeg_reference() -> None:
    """jpeg_accurate.json, from the committed shards (read in TFDS's order, as values.json)."""
    builder = tfds.builder_from_directory(os.path.join(DATA, "tfr_golden", "1.0.0"))
    decoders = {"image_jpeg": tfds.decode.SkipDecoding(), "mixed": tfds.decode.SkipDecoding()}
    out = {}
    for split in ("train", "test"):
        ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read_config(), decoders=decoders)
        rows = []
        for ex in tfds.as_numpy(ds):
            row = {}
            for key in decoders:
                data = ex[key]
                if data[:2] == b"\xff\xd8":
                    row[key] = encode(tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE").numpy())
            rows.append(row)
        out[split] = rows
    with open(os.path.join(HERE, "jpeg_accurate.json"), "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")


def main() -> None:
    shutil.rmtree(DATA, ignore_errors=True)
    for builder_class in (TfrGoldenOld, TfrGolden):
        builder = builder_class(data_dir=DATA)
        shards = None if builder_class is TfrGoldenOld else 3
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=shards))
    shutil.rmtree(os.path.join(DATA, "downloads"), ignore_errors=True)
    builder = TfrGolden(data_dir=DATA)
    values = {}
    for split in ("train", "test"):
        ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read_config())
        values[split] = [encode(ex) for ex in tfds.as_numpy(ds)]
    with open(os.path.join(HERE, "values.json"), "w") as f:
        json.dump(values, f, indent=None, separators=(",", ":"))
        f.write("\n")
    splits = {}
    for spec in SPLITS + BAD_SPLITS:
        try:
            ds = builder.as_dataset(split=spec, shuffle_files=False, read_config=read_config())
            ids = [int(ex["id"]) for ex in tfds.as_numpy(ds)]
            instructions = [[os.path.basename(fi.filename), fi.skip, fi.take]
                            for fi in builder.info.splits[spec].file_instructions]
            splits[spec] = {"ids": ids, "file_instructions": instructions}
        except Exception as exc:  # noqa: BLE001 - record what TFDS says
            splits[spec] = {"error": f"{type(exc).__name__}: {exc}"}
    with open(os.path.join(HERE, "splits.json"), "w") as f:
        json.dump(splits, f, indent=1)
        f.write("\n")
    sup = builder.as_dataset(split="test", shuffle_files=False, read_config=read_config(), as_supervised=True)
    supervised = [{"image_shape": list(x.shape), "label": int(y)} for x, y in tfds.as_numpy(sup)]
    with open(os.path.join(HERE, "supervised.json"), "w") as f:
        json.dump({"test": supervised, "versions": {"tensorflow": tf.__version__, "tfds": tfds.__version__}}, f,
                  indent=1)
        f.write("\n")
    jpeg_reference()
    print("written under", HERE, file=sys.stderr)


if __name__ == "__main__":
    jpeg_reference() if sys.argv[1:] == ["jpeg"] else main()
