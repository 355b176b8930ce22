"""TensorFlow Datasets both ways, without TensorFlow: read a TFDS dataset folder (metadata, split syntax, feature
decoding) and write the metadata that lets `tfds.builder_from_directory` load shards tfr_torch wrote.

The datasets use this family when given a TFDS folder:

>>> ds = tfr_torch.TFRecordDataset("~/tensorflow_datasets/mnist", split="train[:10%]")   # doctest: +SKIP

Names resolve lazily: `read_info` and the split functions never import torch.
"""

from __future__ import annotations

from tfr_torch._lazy import lazy_exports

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


__getattr__ = lazy_exports("tfr_torch.tfds", _EXPORTS, globals())


def __dir__() -> list[str]:
    return __all__
