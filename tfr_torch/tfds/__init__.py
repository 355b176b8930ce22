"""TensorFlow Datasets both ways, without TensorFlow: read a TFDS dataset folder (metadata, split syntax, feature
decoding) and write the metadata that lets `tfds.builder_from_directory` load shards tfr_torch wrote.

The datasets use this family when given a TFDS folder:

>>> ds = tfr_torch.TFRecordDataset("~/tensorflow_datasets/mnist", split="train[:10%]")   # doctest: +SKIP

Names resolve lazily: `read_info` and the split functions never import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TFDSInfo": "tfr_torch.tfds.metadata",
    "SplitInfo": "tfr_torch.tfds.metadata",
    "TFDSMetadataError": "tfr_torch.tfds.metadata",
    "read_info": "tfr_torch.tfds.metadata",
    "find_version_dir": "tfr_torch.tfds.metadata",
    "is_tfds_dir": "tfr_torch.tfds.metadata",
    "parse_split": "tfr_torch.tfds.splits",
    "resolve_split": "tfr_torch.tfds.splits",
    "ShardRead": "tfr_torch.tfds.splits",
    "SplitSlice": "tfr_torch.tfds.splits",
    "TFDSDecoder": "tfr_torch.tfds.features",
    "parse_features": "tfr_torch.tfds.features",
    "describe": "tfr_torch.tfds.inspection",
    "write_metadata": "tfr_torch.tfds.write",
    "features_from_spec": "tfr_torch.tfds.write",
    "image_features": "tfr_torch.tfds.write",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tfr_torch.tfds' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
