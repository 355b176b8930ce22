"""Load TFDS dataset folders with real TensorFlow Datasets and print, as one JSON document, what TFDS sees: its
metadata (splits, shard counts, supervised keys, class names, the feature tree) and every example it yields.

tests/test_tfds_write.py runs it on folders tfr_torch wrote, with a Python that has tensorflow and
tensorflow-datasets (the test's own, or the one named by the TFR_TORCH_TF_PYTHON environment variable):

    python tests/data/tfds/load_with_tfds.py FOLDER...

It never imports tfr_torch. Values are encoded as in make_tfds_golden.py (arrays as dtype/shape/base64).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def load(folder: str) -> dict:
    import tensorflow_datasets as tfds

    from make_tfds_golden import encode

    builder = tfds.builder_from_directory(folder)
    info = builder.info
    class_names = {}
    for key, feature in info.features.items():
        if isinstance(feature, tfds.features.ClassLabel):
            class_names[key] = list(feature.names)
    out = {
        "name": info.name,
        "version": str(info.version),
        "splits": {name: {"num_examples": s.num_examples, "num_shards": s.num_shards,
                          "shard_lengths": list(s.shard_lengths)} for name, s in info.splits.items()},
        "supervised_keys": list(info.supervised_keys) if info.supervised_keys else None,
        "class_names": class_names,
        "features": repr(info.features),
        "values": {},
    }
    read_config = tfds.ReadConfig(interleave_cycle_length=1)
    for split in info.splits:
        ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read_config)
        out["values"][split] = [encode(example) for example in tfds.as_numpy(ds)]
    if info.supervised_keys:
        split = next(iter(info.splits))
        ds = builder.as_dataset(split=split, shuffle_files=False, read_config=read_config, as_supervised=True)
        out["supervised"] = [[encode(x), encode(y)] for x, y in tfds.as_numpy(ds)]
    return out


def main(folders: list[str]) -> None:
    json.dump({folder: load(folder) for folder in folders}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
