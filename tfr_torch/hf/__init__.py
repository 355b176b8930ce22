"""TFRecord data and Hugging Face `datasets`, both ways, without TensorFlow: `load` reads TFRecord files,
ShardedWriter folders and TFDS folders as `datasets.Dataset` / `IterableDataset` with real `datasets.Features`
(`Image`, `ClassLabel`, `List`, `Array2D`-`Array5D`, `Value`); `write` writes a `Dataset` / `DatasetDict` as
sharded TFRecords with a sidecar or TFDS metadata, which TensorFlow, TFDS and tfr_torch read.

Install with `pip install 'tfr_torch[hf]'`. The rest of tfr_torch never imports this package (or `datasets`).

>>> ds = tfr_torch.hf.load("~/tensorflow_datasets/mnist", split="train")     # doctest: +SKIP
>>> tfr_torch.hf.write(ds, "out/", "mnist")                                   # doctest: +SKIP
"""

from __future__ import annotations

try:
    import datasets  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without datasets
    raise ImportError("tfr_torch.hf needs Hugging Face datasets: pip install 'tfr_torch[hf]' (or 'datasets')") from exc

from tfr_torch.hf.features import features_from_spec, features_from_tfds, spec_from_features
from tfr_torch.hf.load import load
from tfr_torch.hf.write import tfds_features, write

__all__ = ["features_from_spec", "features_from_tfds", "load", "spec_from_features", "tfds_features", "write"]
