"""tfr_torch: TensorFlow's TFRecord files, Examples and tensors for PyTorch, without TensorFlow.

Names resolve lazily, so `import tfr_torch` stays light and the format functions (reading, writing,
Examples, indexes) never import torch; `serialize_tensor` / `parse_tensor` load it on first use.

>>> import tfr_torch
>>> with tfr_torch.TFRecordWriter("data.tfrecord") as writer:  # doctest: +SKIP
...     writer.write_example({"label": 1, "text": "hello"})
>>> [tfr_torch.decode_example(r) for r in tfr_torch.read_records("data.tfrecord")]  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tfr_torch._lazy import lazy_exports
from tfr_torch._version import __version__

_EXPORTS = {
    # format layer (no torch)
    "TFRecordWriter": "tfr_torch.format.writer",
    "RecordReader": "tfr_torch.format.reader",
    "read_records": "tfr_torch.format.reader",
    "encode_example": "tfr_torch.format.example",
    "decode_example": "tfr_torch.format.example",
    "encode_sequence_example": "tfr_torch.format.example",
    "decode_sequence_example": "tfr_torch.format.example",
    "decode_json_example": "tfr_torch.format.json_example",
    "build_index": "tfr_torch.format.index",
    "read_index": "tfr_torch.format.index",
    "check_index": "tfr_torch.format.index",
    "expand_paths": "tfr_torch.format.paths",
    "backend": "tfr_torch._native",
    "set_backend": "tfr_torch._native",
    "TFRecordError": "tfr_torch.errors",
    "CorruptRecordError": "tfr_torch.errors",
    "TruncatedRecordError": "tfr_torch.errors",
    "DecodeError": "tfr_torch.errors",
    "IndexMismatchError": "tfr_torch.errors",
    "SkippedRecordWarning": "tfr_torch.errors",
    "RecordLocation": "tfr_torch.format.location",
    "RemoteOptions": "tfr_torch.format.remote_options",
    # torch edge
    "serialize_tensor": "tfr_torch.tensors",
    "parse_tensor": "tfr_torch.tensors",
    "string": "tfr_torch.decode.specs",
    # decode layer
    "FixedLenFeature": "tfr_torch.decode.specs",
    "VarLenFeature": "tfr_torch.decode.specs",
    "SparseFeature": "tfr_torch.decode.specs",
    "RaggedFeature": "tfr_torch.decode.specs",
    "FixedLenSequenceFeature": "tfr_torch.decode.specs",
    "RowLengths": "tfr_torch.decode.specs",
    "RowSplits": "tfr_torch.decode.specs",
    "RowStarts": "tfr_torch.decode.specs",
    "RowLimits": "tfr_torch.decode.specs",
    "ValueRowIds": "tfr_torch.decode.specs",
    "SequenceFeatures": "tfr_torch.decode.sequence_features",
    "UniformRowLength": "tfr_torch.decode.specs",
    "parse_example": "tfr_torch.decode.parse",
    "parse_single_example": "tfr_torch.decode.parse",
    "parse_sequence_example": "tfr_torch.decode.parse",
    "parse_single_sequence_example": "tfr_torch.decode.parse",
    "compile_features": "tfr_torch.decode.plan",
    "ExamplePlan": "tfr_torch.decode.plan",
    "RaggedTensor": "tfr_torch.decode.results",
    "SparseBytes": "tfr_torch.decode.results",
    "to_padded": "tfr_torch.decode.results",
    "infer_features": "tfr_torch.decode.infer",
    # torch layer
    "TFRecordDataset": "tfr_torch.data.dataset",
    "IndexedTFRecordDataset": "tfr_torch.data.indexed",
    "CachedDataset": "tfr_torch.data.cache",
    "MixedDataset": "tfr_torch.data.mixed",
    "elastic_state": "tfr_torch.data.elastic",
    "ElasticDistributedSampler": "tfr_torch.data.sampler",
    "decode_raw": "tfr_torch.decode.raw",
    "decode_image": "tfr_torch.images",
    "image_backends": "tfr_torch.images",
    # tools
    "ShardedWriter": "tfr_torch.tools.shards",
    "convert_image_folder": "tfr_torch.tools.convert",
    "convert_dataset": "tfr_torch.tools.convert",
    "ConversionResult": "tfr_torch.tools.convert",
}

# written out (not computed) so that type checkers see the re-exports; a test keeps it equal to _EXPORTS
__all__ = ["__version__", "CachedDataset", "ConversionResult", "CorruptRecordError", "DecodeError",
    "ElasticDistributedSampler", "ExamplePlan", "FixedLenFeature",
    "FixedLenSequenceFeature", "IndexMismatchError", "IndexedTFRecordDataset", "MixedDataset", "RaggedFeature",
    "RaggedTensor",
    "RecordLocation", "RecordReader", "RemoteOptions", "RowLengths", "RowLimits", "RowSplits", "RowStarts",
    "SequenceFeatures",
    "ShardedWriter",
    "SkippedRecordWarning",
    "SparseBytes", "SparseFeature", "TFRecordDataset", "TFRecordError", "TFRecordWriter", "TruncatedRecordError",
    "UniformRowLength", "ValueRowIds", "VarLenFeature", "backend", "build_index", "check_index", "compile_features",
    "convert_dataset", "convert_image_folder", "decode_example", "decode_image", "decode_json_example", "decode_raw",
    "decode_sequence_example", "elastic_state", "encode_example", "encode_sequence_example", "expand_paths",
    "image_backends",
    "infer_features", "parse_example", "parse_sequence_example", "parse_single_example",
    "parse_single_sequence_example", "parse_tensor", "read_index", "read_records", "serialize_tensor", "set_backend",
    "string", "to_padded"]

if TYPE_CHECKING:  # pragma: no cover
    from tfr_torch.errors import (
        CorruptRecordError,
        DecodeError,
        IndexMismatchError,
        SkippedRecordWarning,
        TFRecordError,
        TruncatedRecordError,
    )
    from tfr_torch.format.example import (
        decode_example,
        decode_sequence_example,
        encode_example,
        encode_sequence_example,
    )
    from tfr_torch.format.json_example import decode_json_example
    from tfr_torch.format.index import build_index, check_index, read_index
    from tfr_torch.format.location import RecordLocation
    from tfr_torch.format.remote_options import RemoteOptions
    from tfr_torch.format.paths import expand_paths
    from tfr_torch._native import backend, set_backend
    from tfr_torch.format.reader import RecordReader, read_records
    from tfr_torch.format.writer import TFRecordWriter
    from tfr_torch.data.dataset import TFRecordDataset
    from tfr_torch.data.indexed import IndexedTFRecordDataset
    from tfr_torch.data.cache import CachedDataset
    from tfr_torch.data.mixed import MixedDataset
    from tfr_torch.data.elastic import elastic_state
    from tfr_torch.data.sampler import ElasticDistributedSampler
    from tfr_torch.decode.raw import decode_raw
    from tfr_torch.images import decode_image, image_backends
    from tfr_torch.decode.infer import infer_features
    from tfr_torch.decode.parse import (
        parse_example,
        parse_sequence_example,
        parse_single_example,
        parse_single_sequence_example,
    )
    from tfr_torch.decode.plan import ExamplePlan, compile_features
    from tfr_torch.decode.results import RaggedTensor, SparseBytes, to_padded
    from tfr_torch.decode.sequence_features import SequenceFeatures
    from tfr_torch.decode.specs import (
        FixedLenFeature,
        FixedLenSequenceFeature,
        RaggedFeature,
        RowLengths,
        RowLimits,
        RowSplits,
        RowStarts,
        SparseFeature,
        UniformRowLength,
        ValueRowIds,
        VarLenFeature,
        string,
    )
    from tfr_torch.tensors import parse_tensor, serialize_tensor
    from tfr_torch.tools.convert import ConversionResult, convert_dataset, convert_image_folder
    from tfr_torch.tools.shards import ShardedWriter


# the subpackages, imported on first access (`import tfr_torch; tfr_torch.tfds.read_info(...)`), never by
# `import tfr_torch` itself: the optional families (tfds, rlds, ray, nodes, hf, images, tools) load only when used
_SUBPACKAGES = frozenset({"data", "decode", "format", "hf", "images", "nodes", "ray", "rlds", "tfds", "tools"})


__getattr__ = lazy_exports("tfr_torch", _EXPORTS, globals(), _SUBPACKAGES)


def __dir__() -> list[str]:
    return __all__
