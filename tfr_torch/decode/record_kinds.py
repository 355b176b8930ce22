"""What kind of message a serialized record holds (`record_kind`, `classify_record`): a tf.train.Example, a
SequenceExample, a `tf.io.serialize_tensor` payload or raw bytes, and why a record is not an Example, in the user's
terms. `infer_features` (decode/infer.py) and the `inspect` / `head` tools ask it; it needs only the format layer."""

from __future__ import annotations

from typing import Any, Final

from google.protobuf.message import DecodeError as _ProtoDecodeError

from tfr_torch.errors import DecodeError
from tfr_torch.format._proto import raw_example_pb2
from tfr_torch.format.options import RecordKind
from tfr_torch.format.strict import walk_example
from tfr_torch.format.tensor import TensorData, decode_tensor_proto

__all__ = ["EXAMPLE", "SEQUENCE_EXAMPLE", "TENSOR", "RAW", "record_kind", "classify_record"]

_parse_raw_example = raw_example_pb2.RawExample.FromString
_parse_raw_sequence = raw_example_pb2.RawSequenceExample.FromString

EXAMPLE: Final = "example"
SEQUENCE_EXAMPLE: Final = "sequence_example"
TENSOR: Final = "tensor"
RAW: Final = "raw"


def _tensor(record: bytes) -> TensorData | None:
    try:
        return decode_tensor_proto(record)
    except DecodeError:
        return None


def classify_record(record: bytes) -> tuple[RecordKind, Any]:
    """`record_kind` and what it parsed: ("example", {key: raw Feature bytes}), ("sequence_example", (context
    {key: raw Feature bytes}, {key: [raw Feature bytes of each step]})), ("tensor", TensorData) or ("raw", None)."""
    record = bytes(record)
    if not record:
        return EXAMPLE, {}
    try:
        message = _parse_raw_sequence(record)
    except _ProtoDecodeError:
        message = None
    if message is not None:
        if message.feature_lists.feature_list:
            lists = {key: list(value.feature) for key, value in message.feature_lists.feature_list.items()}
            return SEQUENCE_EXAMPLE, (dict(message.context.feature), lists)
        if message.HasField("context"):
            return EXAMPLE, dict(message.context.feature)
    tensor = _tensor(record)
    if tensor is not None:
        return TENSOR, tensor
    if message is not None and message.HasField("feature_lists"):
        # an empty feature_lists field (what SequenceExample(feature_lists=FeatureLists()) serializes to); a
        # TensorProto's shape parses as one too, hence after the tensor
        return SEQUENCE_EXAMPLE, (dict(message.context.feature), {})
    try:
        example = _parse_raw_example(record)
    except _ProtoDecodeError:
        return RAW, None
    return (EXAMPLE, dict(example.features.feature)) if example.HasField("features") else (RAW, None)


def record_kind(record: bytes) -> RecordKind:
    """What a serialized record holds: "example" (a tf.train.Example, also the empty record),
    "sequence_example" (a SequenceExample with feature lists, or an empty feature_lists field), "tensor" (a
    `tf.io.serialize_tensor` payload) or "raw" (none of them).

    A TensorProto parses as an empty Example (its fields have other wire types), so a non-empty record without
    an Example's `features` field is tried as a tensor before it is called an Example.

    >>> import numpy as np, tfr_torch
    >>> record_kind(tfr_torch.encode_example({"a": 1})), record_kind(tfr_torch.serialize_tensor(np.zeros(2)))
    ('example', 'tensor')
    """
    return classify_record(record)[0]


def _why_not_example(record: bytes) -> str:
    """Why a record that `classify_record` calls raw is not an Example, in the user's terms: what the Example
    walker finds wrong and at which byte of the record (a feature key that is not UTF-8, a length past the end,
    ...), never the name of the internal message type protobuf failed to parse."""
    try:
        parsed = _parse_raw_example(record)
    except _ProtoDecodeError as exc:
        try:
            walk_example(record)
        except DecodeError as err:  # "cannot parse N bytes as a tf.train.Example: byte 6 has a feature key ..."
            return err.message.partition(": ")[2] or err.message
        # the walker takes what protobuf refused: say what protobuf said, in TensorFlow's type names
        return f"protobuf cannot parse its {len(record)} bytes as one ({_tf_names(str(exc))})"
    if not parsed.HasField("features"):
        return f"its {len(record)} bytes hold no Features message"
    return f"its {len(record)} bytes do not parse as one"  # (not reached: classify_record would call it an Example)


def _tf_names(text: str) -> str:
    return (text.replace("tfr_torch_raw.RawSequenceExample", "tf.train.SequenceExample")
            .replace("tfr_torch_raw.RawExample", "tf.train.Example"))
