"""TFRecord files in `torchdata.nodes` pipelines: `TFRecordNode` (a source node that reads a rank's share of the
records, resumable through `state_dict`) and `ExampleDecoder` (a picklable map function for `Mapper` /
`ParallelMapper`: records or batches of records to decoded dicts).

Install with `pip install 'tfr_torch[nodes]'` (torchdata >= 0.10). The rest of tfr_torch never imports this package.

>>> from torchdata.nodes import Batcher, Loader, ParallelMapper, Prefetcher   # doctest: +SKIP
>>> node = tfr_torch.nodes.TFRecordNode("train-*.tfrecord", shuffle=True)     # doctest: +SKIP
>>> loader = Loader(Prefetcher(ParallelMapper(Batcher(node, 256), tfr_torch.nodes.ExampleDecoder(spec),
...                                           num_workers=4, method="thread"), prefetch_factor=2))
"""

from __future__ import annotations

try:
    import torchdata.nodes  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without torchdata
    raise ImportError("tfr_torch.nodes needs torchdata's nodes: pip install 'tfr_torch[nodes]' "
                      "(or 'torchdata>=0.10')") from exc

from tfr_torch.nodes.decode import ExampleDecoder
from tfr_torch.nodes.reader import TFRecordNode

__all__ = ["ExampleDecoder", "TFRecordNode"]
