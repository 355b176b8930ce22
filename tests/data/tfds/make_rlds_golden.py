"""Build small RLDS-shaped TensorFlow Datasets folders (robot episodes: a ``steps`` feature of type
``tfds.features.Dataset`` plus ``episode_metadata``) with real TFDS, in the metadata layouts TFDS has written over
its versions, and record what TFDS decodes from each.

Run by hand, from the repository root, with a Python that has tensorflow-cpu and tensorflow-datasets
(TensorFlow 2.21 and TFDS 4.9.10 were used):

    /work/tfvenv/bin/python tests/data/tfds/make_rlds_golden.py

It never imports tfr_torch. It deletes and rewrites ``rlds/`` and ``rlds_values.json`` beside it:

* ``rlds/rlds_golden/1.0.0/``: built by a ``tfds.core.GeneratorBasedBuilder`` (``RldsGolden``) with the features of
  an Open X-Embodiment episode: ``steps`` (a ``Dataset`` of observation images (JPEG and PNG) and state, action,
  reward, discount, is_first / is_last / is_terminal, language_instruction (Text) and language_embedding) and
  ``episode_metadata`` (file_path, episode_id). Two splits: ``train`` (7 episodes) and ``test`` (3), 3 shards each;
  metadata as TFDS 4.9 writes it (features.json in its proto form: ``pythonClassName`` entries).
* ``rlds/rlds_legacy/1.0.0/``: the same shards under another name, with the metadata older TFDS releases wrote:
  features.json in the ``{"type": ..., "content": ...}`` form of TFDS < 4.6 (``Sequence``/``Dataset`` content
  ``{"feature": ..., "length": null}``, FeaturesDict content its children, Tensor content ``{"shape": [...],
  "dtype": ...}``), and dataset_info.json as TFDS 4.0-4.4 wrote it (no ``fileFormat`` nor ``filepathTemplate``,
  ``numShards`` and ``statistics`` in each split, ``supervisedKeys`` as ``{"input", "output"}``).
* ``rlds/rlds_nested/0.1.0/``: a ``Dataset`` deeper in the tree (``episode/steps``) whose steps hold a ``Sequence``
  (a ragged value per episode) and a nested dict, an empty episode, 12 episodes in 8 shards (the public Open
  X-Embodiment release has hundreds of shards per split) and dataset_info.json fields as that release has them
  (``releaseNotes``, ``citation``, ``moduleName``).

Every rewritten folder is loaded back with ``tfds.builder_from_directory`` and must give TFDS's values of the
folder it was made from: the old layouts are ones TFDS itself reads.

``rlds_values.json``: ``{folder: {split: [episode, ...]}}`` with what ``tfds.as_numpy(builder.as_dataset(split,
shuffle_files=False, read_config=ReadConfig(interleave_cycle_length=1)))`` yields, the ``Dataset`` feature as the
list of its step dicts (``{"dataset": [step, ...]}``), other values encoded as in make_tfds_golden.py; and
``{"splits": {folder: {split string: [episode_id, ...] or the error TFDS raises}}}``.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys

import numpy as np
import tensorflow_datasets as tfds
from PIL import Image as PILImage

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tfds_golden import encode as encode_value  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "rlds")
SPLITS = ["train", "test", "all", "train+test", "train[:50%]", "train[50%:]", "train[1:]", "train[:-2]",
          "test[1:2]", "train[1shard]", "train[-1shard:]", "test[:34%]", "train[2:3]+test[:1]"]
NESTED_SPLITS = ["train", "train[:25%]", "train[3:9]", "train[-1:]", "train[7shard]"]


def STEP_FEATURES():
    f = tfds.features
    return {
        "observation": f.FeaturesDict({
            "image": f.Image(shape=(8, 10, 3), encoding_format="jpeg", doc="Main camera RGB."),
            "wrist_image": f.Image(shape=(4, 6, 3), encoding_format="png"),
            "state": f.Tensor(shape=(5,), dtype=np.float32, doc="Joint positions and gripper."),
        }),
        "action": f.Tensor(shape=(4,), dtype=np.float32),
        "reward": f.Scalar(dtype=np.float32),
        "discount": f.Scalar(dtype=np.float32),
        "is_first": f.Scalar(dtype=np.bool_),
        "is_last": f.Scalar(dtype=np.bool_),
        "is_terminal": f.Scalar(dtype=np.bool_),
        "language_instruction": f.Text(),
        "language_embedding": f.Tensor(shape=(6,), dtype=np.float32),
    }


def FEATURES():
    f = tfds.features
    return f.FeaturesDict({
        "steps": f.Dataset(STEP_FEATURES()),
        "episode_metadata": f.FeaturesDict({
            "file_path": f.Text(),
            "episode_id": f.Scalar(dtype=np.int64),
        }),
    })


def _jpeg(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array, "RGB").save(out, "JPEG", quality=85)
    return out.getvalue()


INSTRUCTIONS = ["pick up the red block", "open the drawer", "", "place the can in the sink ünï"]


def episode(i: int) -> dict:
    rng = np.random.default_rng(1000 + i)
    n = 2 + (i * 5) % 7  # 2..8 steps
    text = INSTRUCTIONS[i % len(INSTRUCTIONS)]
    steps = []
    for t in range(n):
        steps.append({
            "observation": {
                "image": _jpeg(rng.integers(0, 256, (8, 10, 3), dtype=np.uint8)),
                "wrist_image": rng.integers(0, 256, (4, 6, 3), dtype=np.uint8),
                "state": rng.standard_normal(5).astype(np.float32),
            },
            "action": rng.standard_normal(4).astype(np.float32),
            "reward": np.float32(1.0 if t == n - 1 else 0.0),
            "discount": np.float32(1.0),
            "is_first": t == 0,
            "is_last": t == n - 1,
            "is_terminal": t == n - 1 and i % 2 == 0,
            "language_instruction": text,
            "language_embedding": rng.standard_normal(6).astype(np.float32),
        })
    return {"steps": steps,
            "episode_metadata": {"file_path": f"/data/raw/episode_{i}.npy", "episode_id": i}}


class RldsGolden(tfds.core.GeneratorBasedBuilder):
    """RLDS episodes shaped as the Open X-Embodiment datasets."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, description="tfr_torch RLDS golden dataset", features=FEATURES(),
                                     homepage="https://example.com/rlds_golden")

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, 7), "test": self._generate_examples(100, 3)}

    def _generate_examples(self, start, count):
        for i in range(start, start + count):
            yield i, episode(i)


def NESTED_FEATURES():
    f = tfds.features
    return f.FeaturesDict({
        "episode": f.FeaturesDict({
            "steps": f.Dataset({
                "obs": {"state": f.Tensor(shape=(2,), dtype=np.float64),
                        "depth": f.Tensor(shape=(2, 3), dtype=np.uint16)},
                "contacts": f.Sequence(f.Tensor(shape=(2,), dtype=np.float32)),
                "action": f.Tensor(shape=(3,), dtype=np.float32),
                "is_last": np.bool_,
                "note": f.Text(),
            }),
            "id": np.int64,
        }),
        "episode_metadata": {"file_path": f.Text()},
    })


def nested_episode(i: int) -> dict:
    rng = np.random.default_rng(2000 + i)
    n = 0 if i == 4 else 1 + i % 4  # episode 4 has no step
    steps = [{
        "obs": {"state": rng.standard_normal(2), "depth": rng.integers(0, 65536, (2, 3), dtype=np.uint16)},
        "contacts": rng.standard_normal(((t + i) % 3, 2)).astype(np.float32),
        "action": rng.standard_normal(3).astype(np.float32),
        "is_last": t == n - 1,
        "note": f"step {t}",
    } for t in range(n)]
    return {"episode": {"steps": steps, "id": i}, "episode_metadata": {"file_path": f"ep{i}.h5"}}


class RldsNested(tfds.core.GeneratorBasedBuilder):
    """A Dataset below the top level, with a ragged value per episode, in many shards."""

    VERSION = tfds.core.Version("0.1.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, description="tfr_torch nested RLDS golden dataset",
                                     features=NESTED_FEATURES(), citation="@misc{tfr_torch}")

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(12)}

    def _generate_examples(self, count):
        for i in range(count):
            yield i, nested_episode(i)


# ----- older metadata layouts ---------------------------------------------------------------------------------------

def _dims(shape: dict) -> list:
    return [int(d) for d in shape.get("dimensions", [])]


def legacy_feature(entry: dict) -> dict:
    """A features.json entry of TFDS 4.9's proto form as TFDS < 4.6 wrote it ({"type", "content"})."""
    cls = entry["pythonClassName"]
    kind = cls.rsplit(".", 1)[-1]
    if kind == "FeaturesDict":
        content = {k: legacy_feature(v) for k, v in entry["featuresDict"]["features"].items()}
    elif kind in ("Sequence", "Dataset"):
        length = int(entry["sequence"].get("length", "-1"))
        content = {"feature": legacy_feature(entry["sequence"]["feature"]), "length": None if length == -1 else length}
    elif kind in ("Tensor", "Scalar"):  # Scalar came with TFDS 4.6: before, a Tensor of shape []
        cls = "tensorflow_datasets.core.features.tensor_feature.Tensor"
        t = entry["tensor"]
        content = {"shape": _dims(t.get("shape", {})), "dtype": t["dtype"], "encoding": t.get("encoding", "none")}
    elif kind == "Image":
        t = entry["image"]
        content = {"shape": _dims(t["shape"]), "dtype": t["dtype"], "encoding_format": t.get("encodingFormat")}
    elif kind == "Text":
        content = {}
    else:
        raise ValueError(f"no legacy form written for {kind}")
    return {"type": cls, "content": content}


def legacy_info(info: dict, name: str) -> dict:
    """dataset_info.json as TFDS 4.0-4.4 wrote it."""
    splits = []
    for s in info["splits"]:
        n = sum(int(x) for x in s["shardLengths"])
        splits.append({"name": s["name"], "numBytes": s["numBytes"], "numShards": str(len(s["shardLengths"])),
                       "shardLengths": s["shardLengths"],
                       "statistics": {"numExamples": str(n), "features": []}})
    return {"citation": "", "description": info["description"], "location": info.get("location", {}),
            "moduleName": "rlds_legacy.rlds_legacy", "name": name, "splits": splits, "version": info["version"],
            "releaseNotes": {"1.0.0": "Initial release."}}


def oxe_info(info: dict) -> dict:
    """dataset_info.json with the fields of the public Open X-Embodiment release (TFDS 4.9.2 era)."""
    out = {k: info[k] for k in ("citation", "description", "fileFormat", "moduleName", "name", "splits", "version")
           if k in info}
    out["releaseNotes"] = {"0.1.0": "Initial release."}
    return out


def copy_layout(src: str, name: str, features: dict, info: dict) -> str:
    version = os.path.basename(src)
    dst = os.path.join(DATA, name, version)
    os.makedirs(dst)
    old = os.path.basename(os.path.dirname(src))
    for entry in sorted(os.listdir(src)):
        if ".tfrecord-" in entry:
            shutil.copy(os.path.join(src, entry), os.path.join(dst, entry.replace(old + "-", name + "-", 1)))
    with open(os.path.join(dst, "features.json"), "w") as f:
        json.dump(features, f, indent=2)
        f.write("\n")
    with open(os.path.join(dst, "dataset_info.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return dst


# ----- what TFDS yields ------------------------------------------------------------------------------------------

def encode(value):
    if isinstance(value, dict):
        return {"dict": {k: encode(v) for k, v in value.items()}}
    if hasattr(value, "__iter__") and not isinstance(value, (bytes, str, np.ndarray)) and not np.isscalar(value):
        return {"dataset": [encode(step) for step in value]}  # a nested tf.data.Dataset, as numpy
    return encode_value(value)


def read_config():
    return tfds.ReadConfig(interleave_cycle_length=1)


def values_of(folder: str) -> dict:
    builder = tfds.builder_from_directory(folder)
    out = {}
    for split in builder.info.splits:
        ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read_config())
        out[split] = [encode(ex) for ex in tfds.as_numpy(ds)]
    return out


def split_ids(folder: str, specs: list[str], id_of) -> dict:
    builder = tfds.builder_from_directory(folder)
    out = {}
    for spec in specs:
        try:
            ds = builder.as_dataset(split=spec, shuffle_files=False, read_config=read_config())
            out[spec] = [int(id_of(ex)) for ex in tfds.as_numpy(ds)]
        except Exception as exc:  # noqa: BLE001 - record what TFDS says
            out[spec] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def main() -> None:
    shutil.rmtree(DATA, ignore_errors=True)
    RldsGolden(data_dir=DATA).download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=3))
    RldsNested(data_dir=DATA).download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=8))
    shutil.rmtree(os.path.join(DATA, "downloads"), ignore_errors=True)
    golden = os.path.join(DATA, "rlds_golden", "1.0.0")
    nested = os.path.join(DATA, "rlds_nested", "0.1.0")
    with open(os.path.join(golden, "features.json")) as f:
        features = json.load(f)
    with open(os.path.join(golden, "dataset_info.json")) as f:
        info = json.load(f)
    legacy = copy_layout(golden, "rlds_legacy", legacy_feature(features), legacy_info(info, "rlds_legacy"))
    with open(os.path.join(nested, "dataset_info.json")) as f:
        nested_info = json.load(f)
    with open(os.path.join(nested, "dataset_info.json"), "w") as f:
        json.dump(oxe_info(nested_info), f, indent=2)
        f.write("\n")

    values = {"rlds_golden/1.0.0": values_of(golden), "rlds_nested/0.1.0": values_of(nested)}
    if values_of(legacy) != values["rlds_golden/1.0.0"]:
        raise SystemExit("TFDS reads the legacy layout differently from the one it was made from")
    values["splits"] = {
        "rlds_golden/1.0.0": split_ids(golden, SPLITS, lambda ex: ex["episode_metadata"]["episode_id"]),
        "rlds_nested/0.1.0": split_ids(nested, NESTED_SPLITS, lambda ex: ex["episode"]["id"]),
    }
    values["versions"] = {"tfds": tfds.__version__}
    with open(os.path.join(HERE, "rlds_values.json"), "w") as f:
        json.dump(values, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("written under", DATA, file=sys.stderr)


if __name__ == "__main__":
    main()
