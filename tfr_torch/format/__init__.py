"""The format layer: TFRecord framing, CRC, compression, index files, and Example / SequenceExample /
TensorProto wire encoding. Depends on numpy, protobuf and crc32c only; never imports torch, so tools that
need neither TensorFlow nor torch can use it."""

from tfr_torch.format.compression import detect_compression, normalize_compression
from tfr_torch.format.crc import crc32c, masked_crc32c, unmask_crc32c
from tfr_torch.format.example import decode_example, decode_sequence_example, encode_example, encode_sequence_example
from tfr_torch.format.index import build_index, check_index, read_index, scan_index
from tfr_torch.format.paths import expand_paths
from tfr_torch.format.reader import RecordReader, read_records
from tfr_torch.format.tensor import TensorData, decode_tensor_proto, encode_tensor_proto
from tfr_torch.format.writer import TFRecordWriter, frame_record

__all__ = [
    "RecordReader",
    "TFRecordWriter",
    "TensorData",
    "build_index",
    "check_index",
    "crc32c",
    "decode_example",
    "decode_sequence_example",
    "decode_tensor_proto",
    "detect_compression",
    "encode_example",
    "encode_sequence_example",
    "encode_tensor_proto",
    "expand_paths",
    "frame_record",
    "masked_crc32c",
    "normalize_compression",
    "read_index",
    "read_records",
    "scan_index",
    "unmask_crc32c",
]
