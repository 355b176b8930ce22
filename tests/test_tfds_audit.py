"""Audit of reading TFDS folders (tfr_torch/tfds/ and the TFDS paths of the datasets) against real TFDS.

- values: a dataset that real TFDS prepares in a temporary folder (a GeneratorBasedBuilder, no download) with the
  feature kinds the golden dataset of test_tfds.py lacks (string Tensors of every shape, bool / int8 / uint16 /
  uint32 / float16 tensors, images whose stored channels differ from the declared ones, JPEG and fixed-length
  videos, stereo and float Audio, Sequences of dicts, of Text, of strings, of images, of BBoxes, nested Sequences,
  nested dicts, ClassLabel without names) read record by record, in batches, through DataLoader workers and by
  IndexedTFRecordDataset, every value equal to what `tfds.as_numpy` yields; the class names TFDS gives;
- splits: a few hundred seeded random split strings (percent, negative, shard, underscore boundaries, sums, spaces)
  over splits of 7 uneven shards, each selecting TFDS's example ids in TFDS's order, or refused where TFDS refuses;
- DataLoader workers x ranks over sliced splits: every record of the split exactly once (pad=False: the remainder
  dropped; pad=True: every record at least once);
- hostile dataset_info.json (shard lengths too high, too low, swapped, fractional; wrong numBytes, file template,
  shard count; extra files): a TFDSMetadataError or TFRecordError naming the file, never records lost or repeated;
- a corrupt record under on_error="skip": the slices keep TFDS's boundaries (no record moves to the next slice).

The TFDS-prepared folders are built once per module by one subprocess in the Python that TFR_TORCH_TF_PYTHON names
(a virtualenv with tensorflow and tensorflow-datasets; these tests are skipped without it). The tests marked
`# Fixed:` failed before the fix of a defect this audit found; each has a TensorFlow-free twin where one is cheap.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import io
import itertools
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.tfds import TFDSDecoder, TFDSMetadataError, read_info

pytestmark = pytest.mark.filterwarnings("ignore:.*have no index:UserWarning",
                                        "ignore:counting the records:UserWarning")

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "")
needs_tf = pytest.mark.skipif(not TF_PYTHON or not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow-datasets for the reference "
                                     "checks")
GOLDEN = Path(__file__).parent / "data" / "tfds" / "data" / "tfr_golden" / "1.0.0"
ID = {"id": tfr_torch.FixedLenFeature([], torch.int64)}

# ----- the TFDS builders (run by TF_PYTHON: OUT, then a JSON file of split strings) ---------------------------------

_BUILD = r'''
import base64, io, json, os, shutil, sys
import numpy as np
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import tensorflow_datasets as tfds
from PIL import Image as PILImage

OUT = sys.argv[1]
f = tfds.features

def png(a, mode):
    if mode == "LA":
        img = PILImage.fromarray(np.ascontiguousarray(a[..., 0]), "L")
        img.putalpha(PILImage.fromarray(np.ascontiguousarray(a[..., 1]), "L"))
    else:
        img = PILImage.fromarray(a, mode)
    b = io.BytesIO(); img.save(b, "PNG"); return b.getvalue()

def jpeg(a, mode):
    b = io.BytesIO(); PILImage.fromarray(a, mode).save(b, "JPEG", quality=85); return b.getvalue()

def features():
    return f.FeaturesDict({
        "id": f.Scalar(dtype=np.int64),
        "rgba": f.Image(shape=(None, None, 4)),
        "gray_jpeg": f.Image(shape=(None, None, 1), encoding_format="jpeg"),
        "fixed_gray": f.Image(shape=(5, 7, 1)),
        "rgb_from_gray": f.Image(shape=(None, None, 3)),
        "video": f.Video(shape=(3, 4, 6, 3)),
        "seq_mixed": f.Sequence(f.Image(shape=(3, 4, 3))),
        "seq_gray": f.Sequence(f.Image(shape=(3, 4, 1))),
        "pal": f.Image(shape=(None, None, 3)),
        "pal_gray": f.Image(shape=(None, None, 1)),
        "png16": f.Image(shape=(None, None, 1)),
        "la_rgba": f.Image(shape=(None, None, 4)),
        "gray_from_rgb": f.Image(shape=(None, None, 1)),
        "gray_from_jpeg": f.Image(shape=(None, None, 1), encoding_format="jpeg"),
        "rgba_from_rgb": f.Image(shape=(None, None, 4)),
        "video_jpeg": f.Video(shape=(None, 8, 8, 3), encoding_format="jpeg"),
        "video_dyn": f.Video(shape=(None, 2, 3, 1)),
        "label_n": f.ClassLabel(num_classes=5),
        "text": f.Text(),
        "b3": f.Tensor(shape=(3,), dtype=np.bool_),
        "bdyn": f.Tensor(shape=(None,), dtype=np.bool_),
        "i8": f.Tensor(shape=(2,), dtype=np.int8),
        "u16": f.Tensor(shape=(2,), dtype=np.uint16),
        "u32": f.Tensor(shape=(2,), dtype=np.uint32),
        "i64": f.Tensor(shape=(2,), dtype=np.int64),
        "f16dyn": f.Tensor(shape=(None,), dtype=np.float16),
        "f64s": f.Scalar(dtype=np.float64),
        "empty_dim": f.Tensor(shape=(0, 3), dtype=np.float32),
        "s2": f.Tensor(shape=(2,), dtype=np.str_),
        "sdyn": f.Tensor(shape=(None,), dtype=np.str_),
        "s_scalar": f.Scalar(dtype=np.str_),
        "s22": f.Tensor(shape=(2, 2), dtype=np.str_),
        "s_dyn2": f.Tensor(shape=(None, 2), dtype=np.str_),
        "seq_s2": f.Sequence(f.Tensor(shape=(2,), dtype=np.str_)),
        "seq_str": f.Sequence(np.str_),
        "dyn3": f.Tensor(shape=(None, 2, 2), dtype=np.float32),
        "bytes2d": f.Tensor(shape=(None, None), dtype=np.int16, encoding="bytes"),
        "zlib3": f.Tensor(shape=(2, None, 3), dtype=np.uint8, encoding="zlib"),
        "zlib_bool": f.Tensor(shape=(None,), dtype=np.bool_, encoding="zlib"),
        "audio2": f.Audio(shape=(None, 2), dtype=np.int16, sample_rate=100),
        "audio_f": f.Audio(shape=(None,), dtype=np.float32, sample_rate=100),
        "seq_dict": f.Sequence({"a": np.int32, "v": f.Tensor(shape=(2,), dtype=np.float32),
                                "lbl": f.ClassLabel(names=["x", "y", "z"]), "txt": f.Text(),
                                "flag": np.bool_}),
        "seq_fixed": f.Sequence(f.Tensor(shape=(2,), dtype=np.int64), length=3),
        "seq_text": f.Sequence(f.Text()),
        "seq_img": f.Sequence(f.Image(shape=(4, 4, 3))),
        "seq_seq_f": f.Sequence(f.Sequence(np.float32)),
        "seq_seq_u16": f.Sequence(f.Sequence(f.Tensor(shape=(2,), dtype=np.uint16))),
        "seq_bbox": f.Sequence(f.BBoxFeature()),
        "seq_label": f.Sequence(f.ClassLabel(names=["p", "q"])),
        "nested": {"inner": {"x": np.float32, "lbl": f.ClassLabel(names=["a", "b"])},
                   "y": f.Text(), "seq": f.Sequence({"k": np.int64})},
    })


def palette(a, transparent):
    img = PILImage.fromarray(a, "RGB").quantize(colors=7)
    b = io.BytesIO()
    if transparent:
        img.save(b, "PNG", transparency=2)
    else:
        img.save(b, "PNG")
    return b.getvalue()


def png16(a):
    b = io.BytesIO(); PILImage.fromarray(a.astype(np.uint16)).save(b, "PNG"); return b.getvalue()


def mixed_png(kind, rng, h, w):
    if kind == 0: return png(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    if kind == 1: return png(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA")
    if kind == 2: return png(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    if kind == 3: return jpeg(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
    if kind == 4: return palette(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), False)
    return png(rng.integers(0, 256, (h, w, 2), dtype=np.uint8), "LA")


def example(i, rng):
    n = i % 4
    h, w = 2 + i % 3, 3 + i % 4
    return {
        "id": i,
        "rgba": rng.integers(0, 256, (h, w, 4), dtype=np.uint8),
        "gray_jpeg": jpeg(rng.integers(0, 256, (w, h), dtype=np.uint8), "L"),
        "fixed_gray": rng.integers(0, 256, (5, 7, 1), dtype=np.uint8),
        "rgb_from_gray": png(rng.integers(0, 256, (h, w), dtype=np.uint8), "L") if i % 2 else
                         png(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA"),
        "video": rng.integers(0, 256, (3, 4, 6, 3), dtype=np.uint8),
        "seq_mixed": [mixed_png((i + k) % 6, rng, 3, 4) for k in range(n + 1)],
        "seq_gray": [png(rng.integers(0, 256, (3, 4, 3), dtype=np.uint8), "RGB") for k in range(n)],
        "pal": palette(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), bool(i % 2)),
        "pal_gray": palette(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), bool(i % 2)),
        "png16": png16(rng.integers(0, 65536, (h, w))),
        "la_rgba": png(rng.integers(0, 256, (h, w, 2), dtype=np.uint8), "LA"),
        "gray_from_rgb": png(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB") if i % 2 else
                         png(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA"),
        "gray_from_jpeg": jpeg(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB"),
        "rgba_from_rgb": png(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB") if i % 2 else
                         png(rng.integers(0, 256, (h, w), dtype=np.uint8), "L"),
        "video_jpeg": rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8),
        "video_dyn": rng.integers(0, 256, (n, 2, 3, 1), dtype=np.uint8),
        "label_n": i % 5,
        "text": "" if i % 3 == 0 else "t\u00e9xt %d" % i,
        "b3": np.array([i % 2 == 0, True, False]),
        "bdyn": np.array([bool(k % 2) for k in range(n)], dtype=np.bool_),
        "i8": np.array([-128 + i, 127], np.int8),
        "u16": np.array([65535, i], np.uint16),
        "u32": np.array([4294967295 - i, i], np.uint32),
        "i64": np.array([-(2**63) + i, 2**63 - 1 - i], np.int64),
        "f16dyn": rng.standard_normal(n).astype(np.float16),
        "f64s": float(i) / 7.0,
        "empty_dim": np.zeros((0, 3), np.float32),
        "s2": np.array(["a%d" % i, ""], dtype=object),
        "sdyn": np.array(["z" * k for k in range(n)], dtype=object),
        "s_scalar": "s%d" % i,
        "s22": np.array([["a", "b%d" % i], ["", "d"]], dtype=object),
        "s_dyn2": np.array([["r%d" % k, "c"] for k in range(n)], dtype=object).reshape(n, 2),
        "seq_s2": [["x%d" % k, "y"] for k in range(n)],
        "seq_str": ["u" * k for k in range(n)],
        "dyn3": rng.standard_normal((n, 2, 2)).astype(np.float32),
        "bytes2d": rng.integers(-30000, 30000, (n, i % 3), dtype=np.int16),
        "zlib3": rng.integers(0, 256, (2, n, 3), dtype=np.uint8),
        "zlib_bool": np.array([bool(k % 3) for k in range(n + 1)]),
        "audio2": rng.integers(-2000, 2000, (i % 5, 2), dtype=np.int16),
        "audio_f": rng.standard_normal(i % 5).astype(np.float32),
        "seq_dict": {"a": [k - i for k in range(n)], "v": rng.standard_normal((n, 2)).astype(np.float32),
                     "lbl": [k % 3 for k in range(n)], "txt": ["w%d" % k for k in range(n)],
                     "flag": [bool(k % 2) for k in range(n)]},
        "seq_fixed": np.arange(6, dtype=np.int64).reshape(3, 2) * i,
        "seq_text": ["q" * k for k in range(n)],
        "seq_img": rng.integers(0, 256, (n, 4, 4, 3), dtype=np.uint8),
        "seq_seq_f": [[float(k) / 3 for k in range(j)] for j in range(n)],
        "seq_seq_u16": [[[65535 - k, k] for k in range(j)] for j in range(n)],
        "seq_bbox": [f.BBox(0.1, 0.1 * k / 4, 0.5, 0.6) for k in range(n)],
        "seq_label": [k % 2 for k in range(n)],
        "nested": {"inner": {"x": i * 0.5, "lbl": i % 2}, "y": "y%d" % i, "seq": {"k": list(range(n))}},
    }


class AuditAll(tfds.core.GeneratorBasedBuilder):
    VERSION = tfds.core.Version("1.0.0")
    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=features(), supervised_keys=("rgba", "label_n"))
    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 13), "test": self._generate_examples(100, 5)}
    def _generate_examples(self, start, count):
        for i in range(start, start + count):
            yield i, example(i, np.random.default_rng(i))


class AuditIds(tfds.core.GeneratorBasedBuilder):
    """Only ids: for split parity."""
    VERSION = tfds.core.Version("1.0.0")
    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=f.FeaturesDict({"id": np.int64}))
    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 157), "test": self._generate_examples(1000, 23),
                "small": self._generate_examples(2000, 7)}
    def _generate_examples(self, start, count):
        for i in range(start, start + count):
            yield i, {"id": i}


def encode(value):
    if isinstance(value, dict):
        return {"dict": {k: encode(v) for k, v in value.items()}}
    if isinstance(value, bytes):
        return {"bytes": base64.b64encode(value).decode()}
    if isinstance(value, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
        return {"ragged": value.to_list()}
    array = np.asarray(value)
    if array.dtype == object:
        def b64(x):
            return [b64(y) for y in x] if isinstance(x, list) else base64.b64encode(x).decode()
        return {"strings": b64(array.tolist()), "shape": list(array.shape)}
    little = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
    return {"dtype": array.dtype.name, "shape": list(array.shape), "b64": base64.b64encode(little.tobytes()).decode()}


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    rc = tfds.ReadConfig(interleave_cycle_length=1)
    result = {}
    b = AuditAll(data_dir=OUT)
    b.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=3))
    result["values"] = {s: [encode(ex) for ex in tfds.as_numpy(b.as_dataset(split=s, shuffle_files=False,
                                                                            read_config=rc))]
                        for s in ("train", "test")}
    ids = AuditIds(data_dir=OUT)
    ids.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=7))
    specs = json.load(open(sys.argv[2]))
    out = {}
    for spec in specs:
        try:
            ds = ids.as_dataset(split=spec, shuffle_files=False, read_config=rc)
            out[spec] = {"ids": [int(x["id"]) for x in tfds.as_numpy(ds)]}
        except Exception as exc:
            out[spec] = {"error": f"{type(exc).__name__}: {exc}"}
    result["splits"] = out
    from tensorflow_datasets.core import splits as tfds_splits
    infos = list(ids.info.splits.values())
    sizes = {s.name: s.num_examples for s in infos}
    for spec, value in out.items():  # TFDS reads a reversed slice inside one shard as "to the shard's end"
        try:
            absolute = tfds_splits._make_absolute_instructions(infos, spec)
        except Exception:
            continue
        value["reversed"] = any((a.from_ or 0) > (sizes[a.splitname] if a.to is None else a.to) for a in absolute)
    loaded = tfds.builder_from_directory(os.path.join(OUT, "audit_all", "1.0.0")).info.features
    result["class_names"] = {"label_n": loaded["label_n"].names,
                             "seq_dict/lbl": loaded["seq_dict"].feature["lbl"].names,
                             "seq_label": loaded["seq_label"].feature.names,
                             "nested/inner/lbl": loaded["nested"]["inner"]["lbl"].names}
    shutil.rmtree(os.path.join(OUT, "downloads"), ignore_errors=True)
    with open(os.path.join(OUT, "result.json"), "w") as fh:
        json.dump(result, fh)

main()
'''


def _split_strings(seed=7, n=300):
    """Seeded random split strings over audit_ids' splits (train: 157 examples, test: 23, small: 7; 7 shards each)."""
    rng = random.Random(seed)
    names = {"train": 157, "test": 23, "small": 7}

    def bound(total):
        return rng.choice([
            str(rng.randint(0, total + 1)),  # (every choice draws: the strings depend on the seed alone)
            str(-rng.randint(1, total + 1)),
            f"{rng.randint(-100, 100)}%",
            f"{rng.choice([12.5, 33.3, 66.6, 0.5, 99.5, 50.0, -12.5, 2.5, 37.5, 0.01])}%",
            "",
            f"{rng.randint(-7, 7)}shard",
            f"{rng.randint(0, 9)}_{rng.randint(0, 9)}",
        ])
    out = ["train[10%:20%]", "train[-7:]", "train[:33%]+test[5:9]", "train[25%:75%](pct1_dropremainder)",
           "all", "small", "test[1shard]", "test[-1shard]", "train[3shard:]", "train[:-2shard]", "test[:0shard]",
           "train[0shard:0shard]", "small[2shard]+small[2shard]", " train + test ", "train[0.5%:1.5%]",
           "test[-0%:]", "test[-0:]", "train[:-0]", "test[4.5%:]"]
    while len(out) < n:
        terms = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            name = rng.choice(list(names))
            form = rng.random()
            if form < 0.15:
                terms.append(name)
            elif form < 0.3:
                terms.append(f"{name}[{rng.randint(0, 7)}shard]")
            else:
                a, b = bound(names[name]), bound(names[name])
                if a.endswith("shard") != b.endswith("shard") and a and b:
                    b = ""
                terms.append(f"{name}[{a}:{b}]")
        out.append(rng.choice(["+", " + ", "+ "]).join(terms))
    return list(dict.fromkeys(out))



@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The folders real TFDS prepared (audit_all, audit_ids) and what TFDS yields from them (result.json)."""
    if not TF_PYTHON or not os.path.exists(TF_PYTHON):
        pytest.skip("set TFR_TORCH_TF_PYTHON to a Python with tensorflow-datasets")
    root = tmp_path_factory.mktemp("tfds_audit")
    script, specs = root / "build.py", root / "specs.json"
    script.write_text(_BUILD)
    specs.write_text(json.dumps(_split_strings()))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([TF_PYTHON, str(script), str(root / "data"), str(specs)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    data = root / "data"
    return data, json.loads((data / "result.json").read_text())


# ----- comparing with tfds.as_numpy -------------------------------------------------------------------------------

IMAGES = {"rgba", "gray_jpeg", "fixed_gray", "rgb_from_gray", "gray_from_rgb", "gray_from_jpeg", "rgba_from_rgb", "pal",
          "pal_gray", "png16", "la_rgba"}
# [T, C, H, W] here, [T, H, W, C] in TFDS
FRAMES = {"video", "video_dyn", "seq_img", "video_jpeg", "seq_mixed", "seq_gray"}


def _expected(value):
    if "dict" in value:
        return {k: _expected(v) for k, v in value["dict"].items()}
    if "bytes" in value:
        return base64.b64decode(value["bytes"])
    if "ragged" in value:
        return ("ragged", value["ragged"])
    if "strings" in value:
        def strings(x):
            return [strings(y) for y in x] if isinstance(x, list) else base64.b64decode(x)
        return ("strings", strings(value["strings"]))
    dtype = np.dtype(value["dtype"]).newbyteorder("<")
    return np.frombuffer(base64.b64decode(value["b64"]), dtype=dtype).astype(value["dtype"]).reshape(value["shape"])


def _differences(got, want, key, out):
    """Append (key, what differs) for every leaf of `got` that is not TFDS's `want`."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(want):
            out.append((key, f"keys {sorted(got) if isinstance(got, dict) else type(got)} != {sorted(want)}"))
            return
        for k in want:
            _differences(got[k], want[k], f"{key}/{k}", out)
    elif isinstance(want, bytes):
        if got != want:
            out.append((key, f"{got!r} != {want!r}"))
    elif isinstance(want, tuple):  # ragged values, or string arrays as nested lists of bytes
        value = got.to_list() if isinstance(got, tfr_torch.RaggedTensor) else got
        if want[0] == "ragged" and not isinstance(got, tfr_torch.RaggedTensor):
            out.append((key, f"{type(got).__name__}, not a RaggedTensor"))
        elif value != want[1]:
            out.append((key, f"{value!r} != {want[1]!r}"))
    else:
        if not isinstance(got, torch.Tensor):
            out.append((key, f"{type(got).__name__}, not a tensor"))
            return
        top = key.split("/")[1]
        got = got.permute(1, 2, 0) if top in IMAGES else got.permute(0, 2, 3, 1) if top in FRAMES else got
        if (str(got.dtype) != f"torch.{want.dtype.name}" or tuple(got.shape) != want.shape
                or not np.array_equal(got.numpy(), want)):
            out.append((key, f"{got.dtype} {tuple(got.shape)} {got.flatten()[:8].tolist()} != {want.dtype} "
                             f"{want.shape} {want.flatten()[:8].tolist()}"))


def _assert_tfds_values(rows, values, where):
    assert len(rows) == len(values), where
    problems = []
    for i, (row, value) in enumerate(zip(rows, values)):
        _differences(row, _expected(value), f"{where}[{i}]", problems)
    assert not problems, problems[:10]


def _unbatch(batch, n):
    """The n records of a batch, as iter_rows gives them."""
    if isinstance(batch, dict):
        parts = {k: _unbatch(v, n) for k, v in batch.items()}
        return [{k: parts[k][i] for k in parts} for i in range(n)]
    if isinstance(batch, tfr_torch.RaggedTensor):
        return batch.to_list()
    if isinstance(batch, torch.Tensor):
        return list(batch.unbind())
    assert isinstance(batch, list) and len(batch) == n, (type(batch), n)
    return batch


def _same(a, b, key):
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), key
        for k in a:
            _same(a[k], b[k], f"{key}/{k}")
    elif isinstance(a, tfr_torch.RaggedTensor) or isinstance(b, tfr_torch.RaggedTensor):
        def plain(x):
            return x.to_list() if isinstance(x, tfr_torch.RaggedTensor) else x
        assert plain(a) == plain(b), key
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key
    else:
        assert a == b, key


# ----- values: every feature kind, as TFDS yields it -----------------------------------------------------------------

@needs_tf
@pytest.mark.parametrize("split", ["train", "test"])
def test_every_value_equals_what_tfds_yields(prepared, split, backend):
    # Fixed: an Image declared with 1 channel whose PNGs are RGB / RGBA came out 1 level off TFDS's pixels in
    # about half the pixels (ITU-R 601 rounded, where TensorFlow's decode_png has libpng truncate 15-bit weights)
    data, result = prepared
    rows = list(tfr_torch.TFRecordDataset(data / "audit_all", split=split))
    _assert_tfds_values(rows, result["values"][split], split)


@needs_tf
@pytest.mark.parametrize("batch_size,num_workers", [(1, 0), (4, 0), (13, 0), (4, 2)])
def test_batches_hold_the_rows(prepared, batch_size, num_workers):
    # Fixed: a string Tensor with an unknown dimension (Tensor(shape=(None,), dtype=tf.string)) made every batch
    # fail with "TypeError: new(): invalid data type 'bytes'" (collate tried a nested tensor of bytes)
    data, _ = prepared
    rows = {int(r["id"]): r for r in tfr_torch.TFRecordDataset(data / "audit_all", split="train")}
    ds = tfr_torch.TFRecordDataset(data / "audit_all", split="train", batch_size=batch_size)
    got = []
    for batch in DataLoader(ds, batch_size=None, num_workers=num_workers):
        got += _unbatch(batch, len(batch["id"]))
    assert sorted(int(r["id"]) for r in got) == sorted(rows)
    for row in got:
        _same(row, rows[int(row["id"])], f"record {int(row['id'])}")


@needs_tf
def test_indexed_dataset_and_encoded_images(prepared):
    data, result = prepared
    ds = tfr_torch.IndexedTFRecordDataset(data / "audit_all", split="test", index=None)
    _assert_tfds_values([ds[i] for i in range(len(ds))], result["values"]["test"], "indexed test")
    decoder = TFDSDecoder(read_info(data / "audit_all"), decode_images=False)
    rows = list(tfr_torch.TFRecordDataset(data / "audit_all", decoder, split="test"))
    for row, value in zip(rows, result["values"]["test"]):
        want = _expected(value)
        assert isinstance(row["gray_jpeg"], bytes) and row["gray_jpeg"][:2] == b"\xff\xd8"
        assert len(row["video_jpeg"]) == want["video_jpeg"].shape[0]  # one encoded frame each
        assert all(isinstance(f, bytes) for f in row["video_jpeg"])
        assert int(row["id"]) == int(want["id"])


@needs_tf
def test_class_names_are_tfds_names(prepared):
    # Fixed: a ClassLabel(num_classes=5) declared without names had no class names (ds.tfds.classes was None), where
    # TFDS names its classes "0" to "4" (as the guide shows for MNIST)
    data, result = prepared
    ds = tfr_torch.TFRecordDataset(data / "audit_all", split="train")
    assert ds.tfds.class_names() == result["class_names"]
    assert ds.tfds.classes == ds.classes == result["class_names"]["label_n"] == ["0", "1", "2", "3", "4"]
    first = next(iter(tfr_torch.TFRecordDataset(data / "audit_all", split="train", as_supervised=True)))
    assert first[0].shape[0] == 4 and first[1].dtype == torch.int64


# ----- split strings: TFDS's examples, in TFDS's order ----------------------------------------------------------------

@needs_tf
def test_random_split_strings_select_tfds_examples(prepared):
    data, result = prepared
    checked = refused = 0
    for spec, want in result["splits"].items():
        if want.get("reversed"):
            # TFDS reads a reversed slice ([6:5]) inside one shard as a take of -1 ("to the shard's end"): its
            # own bug; tfr_torch reads nothing for that term
            continue
        if "error" in want:
            with pytest.raises(ValueError) as info:
                tfr_torch.TFRecordDataset(data / "audit_ids", ID, split=spec)
            assert repr(spec) in str(info.value), (spec, str(info.value))
            refused += 1
            continue
        got = [int(x["id"]) for x in tfr_torch.TFRecordDataset(data / "audit_ids", ID, split=spec)]
        assert got == want["ids"], spec
        indexed = tfr_torch.IndexedTFRecordDataset(data / "audit_ids", ID, split=spec, index=None)
        assert len(indexed) == len(want["ids"]), spec
        checked += 1
    assert checked >= 120 and refused >= 40, (checked, refused)  # (150 and 64 with seed 7)


@needs_tf
def test_reversed_slices_read_nothing_of_that_term(prepared):
    """Where TFDS's reversed slice inside one shard yields records past its end, tfr_torch refuses the string
    (when nothing else is selected) or leaves that term out."""
    data, result = prepared
    reversed_specs = [s for s, v in result["splits"].items() if v.get("reversed")]
    assert reversed_specs
    with pytest.raises(ValueError, match=r"split 'test\[6:5\]' selects no example"):
        tfr_torch.TFRecordDataset(data / "audit_ids", ID, split="test[6:5]")
    both = [int(x["id"]) for x in tfr_torch.TFRecordDataset(data / "audit_ids", ID, split="test[6:5]+small")]
    assert both == result["splits"]["small"]["ids"]


# ----- DataLoader workers x ranks: each record exactly once ---------------------------------------------------------

@needs_tf
@pytest.mark.parametrize("split", ["train[10%:20%]", "train[-7:]", "train[:33%]+test[5:9]"])
@pytest.mark.parametrize("indexed", [False, True])
def test_workers_and_ranks_read_a_sliced_split_once(prepared, split, indexed, tmp_path):
    """Every rank yields its quota, no record twice (pad=False) and every record of the split at least once
    (pad=True), for 1-3 ranks x 0 or 2 DataLoader workers x shuffle x pad x batching: slow (48 DataLoader passes,
    the ones with workers starting processes)."""
    data, result = prepared
    folder = tmp_path / "audit_ids" / "1.0.0"
    shutil.copytree(data / "audit_ids" / "1.0.0", folder)
    if indexed:
        for shard in folder.glob("*.tfrecord-*"):
            tfr_torch.build_index(str(shard))
    want = result["splits"][split]["ids"]
    for world, workers, shuffle, pad, batch in itertools.product((1, 2, 3), (0, 2), (False, True), (False, True),
                                                                  (None, 4)):
        per_rank = []
        for rank in range(world):
            ds = tfr_torch.TFRecordDataset(folder, ID, split=split, rank=rank, world_size=world, shuffle=shuffle,
                                           seed=11, pad=pad, batch_size=batch, index="auto" if indexed else None)
            ids = [int(i) for b in DataLoader(ds, batch_size=None, num_workers=workers) for i in b["id"].reshape(-1)]
            per_rank.append(ids)
        where = (split, world, workers, shuffle, pad, batch)
        quota = -(-len(want) // world) if pad else len(want) // world
        assert [len(ids) for ids in per_rank] == [quota] * world, where
        counts = collections.Counter(i for ids in per_rank for i in ids)
        assert set(counts) <= set(want), where
        if pad:
            assert set(counts) == set(want) and sum(counts.values()) - len(want) == quota * world - len(want), where
        else:
            assert max(counts.values()) == 1, where
        if world == 1 and workers == 0 and not shuffle:
            assert per_rank[0] == want, where


# ----- hostile dataset_info.json --------------------------------------------------------------------------------------

def _edited(source, tmp_path, edit):
    folder = tmp_path / "audit_ids" / "1.0.0"
    shutil.copytree(source, folder)
    path = folder / "dataset_info.json"
    info = json.loads(path.read_text())
    edit(folder, next(s for s in info["splits"] if s["name"] == "train"))
    path.write_text(json.dumps(info))
    return folder


def _read_both(folder, split="train"):
    streamed = [int(x["id"]) for x in tfr_torch.TFRecordDataset(folder, ID, split=split)]
    indexed = tfr_torch.IndexedTFRecordDataset(folder, ID, split=split, index=None)
    return streamed, [int(indexed[i]["id"]) for i in range(len(indexed))]


def _no_warning():
    return contextlib.nullcontext()


def _shard(folder, i):
    return str(folder / f"audit_ids-train.tfrecord-{i:05d}-of-00007")


@needs_tf
@pytest.mark.parametrize("keep_bytes", [True, False])
@pytest.mark.parametrize("delta", [2, -2])
def test_shard_length_off_is_named(prepared, tmp_path, keep_bytes, delta):
    """A shard length that says 2 more or 2 fewer records than the shard holds: with numBytes, found when the
    dataset is made; without it, when the shard is read (TFRecordDataset) or by the index (IndexedTFRecordDataset)."""
    data, _ = prepared

    def edit(folder, split):
        split["shardLengths"][1] = str(int(split["shardLengths"][1]) + delta)
        if not keep_bytes:
            del split["numBytes"]

    folder = _edited(data / "audit_ids" / "1.0.0", tmp_path, edit)
    info = f"{folder}/dataset_info.json"
    message = f"{_shard(folder, 1)}: shard holds 23 records but {info} says {23 + delta} (shardLengths of "
    with pytest.raises(TFDSMetadataError) as error:
        tfr_torch.IndexedTFRecordDataset(folder, ID, split="train", index=None)
    assert str(error.value).startswith(message)
    if keep_bytes:
        with pytest.raises(TFDSMetadataError) as error:
            tfr_torch.TFRecordDataset(folder, ID, split="train")
        assert str(error.value) == message + "split 'train')"
    else:
        with pytest.raises(tfr_torch.TFRecordError) as error:
            list(tfr_torch.TFRecordDataset(folder, ID, split="train"))
        assert str(error.value).startswith(_shard(folder, 1) + ":")
        assert "the split's record count" in str(error.value)


@needs_tf
def test_shard_lengths_swapped_are_found(prepared, tmp_path):
    data, _ = prepared

    def edit(folder, split):
        lengths = split["shardLengths"]
        lengths[0], lengths[1] = lengths[1], lengths[0]  # 22, 23 -> 23, 22: the same total, the same numBytes

    folder = _edited(data / "audit_ids" / "1.0.0", tmp_path, edit)
    with pytest.raises(TFDSMetadataError, match="shard holds 22 records but .* says 23"):
        tfr_torch.IndexedTFRecordDataset(folder, ID, split="train", index=None)
    for split in ("train", "train[20:23]"):
        with pytest.raises(tfr_torch.TFRecordError) as error:
            list(tfr_torch.TFRecordDataset(folder, ID, split=split))
        assert str(error.value).startswith(_shard(folder, 0) + ":") and "the file ends after 22 records" in str(
            error.value)


@needs_tf
@pytest.mark.parametrize("case", ["template", "fewer", "empty_shard"])
def test_shard_files_that_do_not_exist_are_named(prepared, tmp_path, case):
    data, _ = prepared

    def edit(folder, split):
        if case == "template":
            split["filepathTemplate"] = "{DATASET}-{SPLIT}.tfrecord-{SHARD_X_OF_Y}.gz"
        elif case == "fewer":
            split["shardLengths"] = split["shardLengths"][:6]
        else:
            split["shardLengths"].insert(1, "0")

    folder = _edited(data / "audit_ids" / "1.0.0", tmp_path, edit)
    n = {"template": 7, "fewer": 6, "empty_shard": 8}[case]
    first = f"{folder}/audit_ids-train.tfrecord-00000-of-{n:05d}" + (".gz" if case == "template" else "")
    for cls in (tfr_torch.TFRecordDataset, tfr_torch.IndexedTFRecordDataset):
        with pytest.raises(TFDSMetadataError) as error:
            cls(folder, ID, split="train[:5]")
        assert str(error.value) == (f"{first}: shard missing: {folder}/dataset_info.json lists {n} shard(s) for "
                                    "split 'train'")


@needs_tf
def test_what_the_metadata_does_not_list_is_not_read(prepared, tmp_path):
    """A leftover shard of another sharding beside the listed ones, a wrong numBytes (the shards are then counted),
    a wrong numShards and version: the 157 records, once each."""
    data, result = prepared

    def edit(folder, split):
        shutil.copy(_shard(folder, 0), folder / "audit_ids-train.tfrecord-00007-of-00008")
        split["numBytes"] = str(int(split["numBytes"]) + 5)
        split["numShards"] = "3"

    folder = _edited(data / "audit_ids" / "1.0.0", tmp_path, edit)
    streamed, indexed = _read_both(folder)
    assert streamed == indexed == result["splits"]["train"]["ids"] if "train" in result["splits"] else len(streamed)
    assert sorted(streamed) == list(range(157))


@needs_tf
def test_fractional_shard_length_refused(prepared, tmp_path):
    # Fixed: shardLengths [22.7, ...] read as 22 (int() truncates); TFDS's proto JSON parser refuses it
    data, _ = prepared
    folder = _edited(data / "audit_ids" / "1.0.0", tmp_path,
                     lambda folder, split: split["shardLengths"].__setitem__(0, 22.7))
    with pytest.raises(TFDSMetadataError) as error:
        tfr_torch.TFRecordDataset(folder, ID, split="train")
    assert str(error.value) == (f"{folder}/dataset_info.json: split 'train': shardLengths[0] must be an integer, "
                                "got 22.7")


# ----- TensorFlow-free twins of the fixes -------------------------------------------------------------------------

_FEATURES = "tensorflow_datasets.core.features."


def _tensor(dims, dtype):
    return {"pythonClassName": _FEATURES + "tensor_feature.Tensor",
            "tensor": {"shape": {"dimensions": [str(d) for d in dims]}, "dtype": dtype, "encoding": "none"}}


def _write(folder, features, examples):
    tree = {"pythonClassName": _FEATURES + "features_dict.FeaturesDict", "featuresDict": {"features": features}}
    with tfr_torch.ShardedWriter(folder, "twin", "train", records_per_shard=3, tfds={"features": tree}) as writer:
        for example in examples:
            writer.write_example(example)


def test_string_tensor_with_an_unknown_dimension_batches(tmp_path):
    # Fixed: batch_size= with a Tensor(shape=(None,), dtype=tf.string) raised "TypeError: new(): invalid data type
    # 'bytes'"; a batch holds each record's list of bytes, as a Text feature's batch does
    folder = tmp_path / "twin" / "1.0.0"
    words = [[b"a" * k for k in range(i % 3)] for i in range(7)]
    pairs = [[b"p%d" % i, b"q"] for i in range(7)]
    _write(folder, {"id": _tensor([], "int64"), "words": _tensor([-1], "string"),
                    "seq": {"pythonClassName": _FEATURES + "sequence_feature.Sequence",
                            "sequence": {"feature": _tensor([2], "string"), "length": "2"}}},
           [{"id": i, "words": words[i] or np.array([], dtype=bytes), "seq": pairs[i] * 2} for i in range(7)])
    rows = list(tfr_torch.TFRecordDataset(folder, split="train"))
    assert [r["words"] for r in rows] == words and [r["seq"] for r in rows] == [[p, p] for p in pairs]
    batches = list(tfr_torch.TFRecordDataset(folder, split="train", batch_size=3))
    assert [w for b in batches for w in b["words"]] == words
    assert [s for b in batches for s in b["seq"]] == [[p, p] for p in pairs]


def test_class_label_without_names_is_named_as_tfds_names_it(tmp_path):
    # Fixed: ds.tfds.classes was None for a ClassLabel(num_classes=N) without names; TFDS's names: "0" to "N-1"
    folder = tmp_path / "tfr_golden" / "1.0.0"
    shutil.copytree(GOLDEN, folder)
    (folder / "label.labels.txt").unlink()
    ds = tfr_torch.TFRecordDataset(folder, split="test")
    assert ds.tfds.classes == ds.classes == ["0", "1", "2"]
    assert ds.tfds.class_names()["label"] == ["0", "1", "2"]


def test_fractional_or_boolean_shard_lengths_refused(tmp_path):
    folder = tmp_path / "tfr_golden" / "1.0.0"
    shutil.copytree(GOLDEN, folder)
    path = folder / "dataset_info.json"
    original = json.loads(path.read_text())
    for bad in (7.5, True):
        info = json.loads(json.dumps(original))
        info["splits"][0]["shardLengths"][0] = bad
        path.write_text(json.dumps(info))
        with pytest.raises(TFDSMetadataError) as error:
            read_info(folder)
        name = info["splits"][0]["name"]
        assert str(error.value) == f"{path}: split {name!r}: shardLengths[0] must be an integer, got {bad!r}"
    info = json.loads(json.dumps(original))
    info["splits"][0]["shardLengths"] = [float(n) for n in info["splits"][0]["shardLengths"]]  # 8.0: an integer
    path.write_text(json.dumps(info))
    assert read_info(folder).splits[info["splits"][0]["name"]].shard_lengths == tuple(
        int(n) for n in original["splits"][0]["shardLengths"])


# TensorFlow 2.21's decode_image(channels=1) of these pixels, stored as an RGB and an RGBA PNG (ITU-R 601 rounded
# would give 150 for pure green; libpng truncates)
_PIXELS = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [10, 200, 30], [123, 45, 67], [1, 2, 3], [250, 251, 252],
           [77, 77, 77]]
_TF_GRAY = [76, 149, 29, 123, 70, 1, 250, 77]


def _png(array, mode):
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, "PNG")
    return out.getvalue()


def test_color_png_in_a_gray_image_feature_is_tensorflows_gray(tmp_path, backend):
    # Fixed: 1 level off TensorFlow's pixels (ITU-R 601 rounded instead of libpng's truncated fixed-point weights)
    rgb = np.array([_PIXELS], np.uint8)
    rgba = np.concatenate([rgb, np.arange(0, 256, 32, dtype=np.uint8).reshape(1, 8, 1)], -1)
    folder = tmp_path / "twin" / "1.0.0"
    image = {"pythonClassName": _FEATURES + "image_feature.Image",
             "image": {"shape": {"dimensions": ["-1", "-1", "1"]}, "dtype": "uint8", "encodingFormat": "png"}}
    _write(folder, {"image": image}, [{"image": _png(rgb, "RGB")}, {"image": _png(rgba, "RGBA")}])
    for row in tfr_torch.TFRecordDataset(folder, split="train"):
        assert row["image"].shape == (1, 1, 8) and row["image"].flatten().tolist() == _TF_GRAY


def _corrupt_data_crc(shard, record):
    """Flip the last byte (of the data CRC) of record number `record` of an uncompressed shard."""
    data = bytearray(Path(shard).read_bytes())
    offset = 0
    for _ in range(record):
        offset += 16 + int.from_bytes(data[offset : offset + 8], "little")
    offset += 16 + int.from_bytes(data[offset : offset + 8], "little")
    data[offset - 1] ^= 0xFF
    Path(shard).write_bytes(bytes(data))


@pytest.mark.filterwarnings("ignore::tfr_torch.SkippedRecordWarning")  # (in the workers; pytest.warns sees its own)
@pytest.mark.parametrize("workers", [0, 2])
def test_skipped_record_keeps_slice_boundaries(tmp_path, workers):
    # Fixed: under on_error="skip", a record skipped in a shard without index moved the slice's window by one:
    # "train[:4]" took the first record of "train[4:]" (which lost it): a record leaked across a train / validation
    # cut. TFDS counts slices by position (shardLengths): the skipped record is a position, not a gap.
    folder = tmp_path / "twin" / "1.0.0"
    _write(folder, {"id": _tensor([], "int64")}, [{"id": i} for i in range(9)])  # 3 shards of 3
    _corrupt_data_crc(folder / "twin-train.tfrecord-00001-of-00003", 0)  # record 3
    got = {}
    for split in ("train[:4]", "train[4:]", "train[2:5]", "train"):
        ds = tfr_torch.TFRecordDataset(folder, ID, split=split, on_error="skip")
        with pytest.warns(tfr_torch.SkippedRecordWarning, match="twin-train.tfrecord-00001-of-00003:0") if (
                split != "train[4:]" and not workers) else _no_warning():  # (workers warn in their processes)
            got[split] = sorted(int(i) for x in DataLoader(ds, batch_size=None, num_workers=workers)
                                for i in x["id"].reshape(-1))
    assert got == {"train[:4]": [0, 1, 2], "train[4:]": [4, 5, 6, 7, 8], "train[2:5]": [2, 4],
                   "train": [0, 1, 2, 4, 5, 6, 7, 8]}


def test_slice_inside_a_shard_with_a_corrupt_header_is_refused_under_skip(tmp_path):
    """A corrupt length header hides where the records after it start: their positions, and so the slice, cannot
    be known; the error names the shard and the offset (a whole shard is still read, skipping it)."""
    folder = tmp_path / "twin" / "1.0.0"
    _write(folder, {"id": _tensor([], "int64")}, [{"id": i} for i in range(9)])
    shard = folder / "twin-train.tfrecord-00001-of-00003"
    data = bytearray(shard.read_bytes())
    data[2] ^= 0xFF  # the length of record 3
    shard.write_bytes(bytes(data))
    with pytest.raises(tfr_torch.TFRecordError, match=f"^{shard}:0: corrupt record header"):
        tfr_torch.TFRecordDataset(folder, ID, split="train[4:]", on_error="skip")
    with pytest.warns(tfr_torch.SkippedRecordWarning):
        assert [int(x["id"]) for x in tfr_torch.TFRecordDataset(folder, ID, split="train[6:]", on_error="skip")] == [
            6, 7, 8]
        whole = [int(x["id"]) for x in tfr_torch.TFRecordDataset(folder, ID, split="train", on_error="skip")]
    assert set(whole) <= set(range(9)) and {0, 1, 2, 6, 7, 8} <= set(whole)


@needs_tf
def test_skipped_record_keeps_tfds_slices(prepared, tmp_path):
    """The same over shards real TFDS wrote: train[:10] and train[10:30] under on_error="skip" are TFDS's
    examples less the corrupt one."""
    data, result = prepared
    folder = tmp_path / "audit_ids" / "1.0.0"
    shutil.copytree(data / "audit_ids" / "1.0.0", folder)
    _corrupt_data_crc(_shard(folder, 0), 3)
    clean = [int(x["id"]) for x in tfr_torch.TFRecordDataset(data / "audit_ids", ID, split="train[:30]")]
    for split, want in (("train[:10]", clean[:3] + clean[4:10]), ("train[10:30]", clean[10:30])):
        with pytest.warns(tfr_torch.SkippedRecordWarning) if split == "train[:10]" else _no_warning():
            got = [int(x["id"]) for x in tfr_torch.TFRecordDataset(folder, ID, split=split, on_error="skip")]
        assert got == want, split
