"""Write tests/data/golden/strict.json: TensorFlow's two answers for non-canonical tf.train.Example encodings.

For each hand-made record, what `tf.io.parse_example([record], {"x": VarLenFeature(dtype)})` returns (or its
error) and what `tf.train.Example.FromString(record)` holds for "x". tests/test_hostile.py checks tfr_torch's rule
against them with no TensorFlow installed: a record is accepted exactly where both readers accept it with the
same values (and then with those values), refused everywhere else.

Run with TensorFlow 2.21 (tensorflow-cpu==2.21.0): `<venv with tensorflow>/bin/python tests/data/make_golden_strict.py`.
"""

from __future__ import annotations

import json
import os
import re
import struct

import tensorflow as tf

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden", "strict.json")


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def ld(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


K = ld(0x0A, b"x")
F1 = ld(0x1A, ld(0x0A, b"\x01"))  # Feature int64_list [1]
F2 = ld(0x1A, ld(0x0A, b"\x02"))
FL1 = ld(0x12, ld(0x0A, struct.pack("<f", 1.0)))  # Feature float_list [1.0]


def example(*entries: bytes, tail: bytes = b"") -> bytes:
    return ld(0x0A, b"".join(ld(0x0A, e) for e in entries)) + tail


def groups(field: int, depth: int) -> bytes:
    return bytes([field << 3 | 3]) * depth + bytes([field << 3 | 4]) * depth


CASES = {  # name -> (record, dtype of "x")
    "canonical": (example(K + ld(0x12, F1)), "int64"),
    "value_twice": (example(K + ld(0x12, F1) + ld(0x12, F2)), "int64"),
    "value_twice_float_then_int": (example(K + ld(0x12, FL1) + ld(0x12, F2)), "int64"),
    "key_twice": (example(K + K + ld(0x12, F1)), "int64"),
    "key_only": (example(K), "int64"),
    "entry_unknown_field": (example(K + ld(0x12, F1) + b"\x18\x01"), "int64"),
    "value_before_key": (example(ld(0x12, F1) + K), "int64"),
    "duplicate_keys": (example(K + ld(0x12, F1), K + ld(0x12, F2)), "int64"),
    "two_features_messages": (example(K + ld(0x12, F1)) + example(K + ld(0x12, F2)), "int64"),
    "feature_groups_1": (example(K + ld(0x12, F1 + groups(4, 1))), "int64"),
    "feature_groups_100": (example(K + ld(0x12, F1 + groups(4, 100))), "int64"),
    "feature_group_first": (example(K + ld(0x12, groups(4, 1) + F1)), "int64"),
    "int64_list_groups_100": (example(K + ld(0x12, ld(0x1A, ld(0x0A, b"\x01") + groups(4, 100)))), "int64"),
    "example_group_after_features": (example(K + ld(0x12, F1), tail=groups(5, 1)), "int64"),
    "features_group": (ld(0x0A, ld(0x0A, K + ld(0x12, F1)) + groups(4, 1)), "int64"),
    "example_unknown_fields": (example(K + ld(0x12, F1), tail=b"\x10\x05" + ld(0x1A, b"junk")), "int64"),
    "feature_two_int64_lists": (example(K + ld(0x12, F1 + F2)), "int64"),
    "feature_int64_then_float": (example(K + ld(0x12, F1 + FL1)), "int64"),
    "packed_then_unpacked": (example(K + ld(0x12, ld(0x1A, ld(0x0A, b"\x01") + b"\x08\x02"))), "int64"),
    "unpacked_then_packed": (example(K + ld(0x12, ld(0x1A, b"\x08\x01" + ld(0x0A, b"\x02")))), "int64"),
    "unpacked_only": (example(K + ld(0x12, ld(0x1A, b"\x08\x01\x08\x02"))), "int64"),
    "packed_then_unknown": (example(K + ld(0x12, ld(0x1A, ld(0x0A, b"\x01") + b"\x10\x03"))), "int64"),
    "feature_unknown_first": (example(K + ld(0x12, b"\x20\x01" + F1)), "int64"),
    "feature_list_then_unknown": (example(K + ld(0x12, F1 + b"\x20\x07")), "int64"),
    "float_run_5_bytes": (example(K + ld(0x12, ld(0x12, ld(0x0A, b"\x00\x00\x80\x3f\x00")))), "float32"),
    "float_unpacked": (example(K + ld(0x12, ld(0x12, b"\x0d" + struct.pack("<f", 1.0)))), "float32"),
    "varint_11_bytes": (example(K + ld(0x12, ld(0x1A, ld(0x0A, b"\xff" * 10 + b"\x01")))), "int64"),
    "varint_10_bytes_7f": (example(K + ld(0x12, ld(0x1A, ld(0x0A, b"\xff" * 9 + b"\x7f")))), "int64"),
    "run_ends_inside_varint": (example(K + ld(0x12, ld(0x1A, ld(0x0A, b"\x01\x80")))), "int64"),
    "kindless_feature": (example(K + ld(0x12, b"")), "int64"),
    "empty_int64_list": (example(K + ld(0x12, ld(0x1A, b""))), "int64"),
}


def tf_parse(record: bytes, dtype: str) -> dict:
    spec = {"x": tf.io.VarLenFeature(getattr(tf, dtype))}
    try:
        values = tf.io.parse_example([record], spec)["x"].values.numpy().tolist()
        return {"kind": {"int64": "int64_list", "float32": "float_list"}[dtype], "values": values}
    except tf.errors.InvalidArgumentError as exc:
        return {"error": re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", exc.message).split("\n")[0][:200]}


def from_string(record: bytes) -> dict:
    try:
        features = tf.train.Example.FromString(record).features.feature
    except Exception as exc:  # protobuf's DecodeError
        return {"error": str(exc)[:200]}
    if "x" not in features:
        return {"kind": None, "values": []}
    feature = features["x"]
    kind = feature.WhichOneof("kind")
    return {"kind": kind, "values": list(getattr(feature, kind).value) if kind else []}


def main() -> None:
    out = {}
    for name, (record, dtype) in CASES.items():
        out[name] = {"record": record.hex(), "dtype": dtype, "parse_example": tf_parse(record, dtype),
                     "from_string": from_string(record)}
    with open(OUT, "w") as f:
        json.dump({"tensorflow": tf.__version__, "cases": out}, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(out)} cases to {OUT}")


if __name__ == "__main__":
    main()
