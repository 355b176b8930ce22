"""TFRecord files on Ray Data without TensorFlow: `read_tfrecords` (a Datasource), `write_tfrecords` (a Datasink).

Install with `pip install 'tfr_torch[ray]'`. The rest of tfr_torch never imports this package (or Ray).

>>> import tfr_torch.ray  # doctest: +SKIP
>>> ds = tfr_torch.ray.read_tfrecords("data/train-*.tfrecord", features=spec)
>>> tfr_torch.ray.write_tfrecords(ds.map_batches(preprocess), "out/", "mydata", "train", shard_size="128MB")
"""

from __future__ import annotations

try:
    import ray.data  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without ray
    raise ImportError("tfr_torch.ray needs Ray Data: pip install 'tfr_torch[ray]' (or 'ray[data]')") from exc

from tfr_torch.ray.datasink import TFRecordDatasink, write_tfrecords
from tfr_torch.ray.datasource import TFRecordDatasource, read_tfrecords

__all__ = ["TFRecordDatasource", "TFRecordDatasink", "read_tfrecords", "write_tfrecords"]
