"""Helpers for the TensorFlow golden-file tests (tests/data/golden/, made by tests/data/make_golden.py).

They turn tfr_torch's decoded values into the JSON encoding the goldens use, so that a test compares plain
Python values and a mismatch prints readably:

  int64 / int* / uint*   -> ints             float32 -> uint32 bit patterns
  float16 / bfloat16     -> uint16 bits      float64 -> uint64 bits
  complex64 / complex128 -> [real_bits, imag_bits] (uint32 / uint64)
  bool -> True/False                          bytes   -> lowercase hex

Floats are compared by bit pattern, so NaN payloads and -0.0 are exact. Nothing here imports tfr_torch:
the golden files are split into records by `split_records`, an independent minimal framing parser.
"""

from __future__ import annotations

import hashlib
import json
import struct
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

GOLDEN = Path(__file__).parent / "data" / "golden"

# TensorFlow dtype name -> torch dtype, for every dtype in tensors.json / tensor_protos.json.
TORCH_DTYPES = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}


def golden(name: str) -> Path:
    return GOLDEN / name


@cache
def load_json(name: str) -> Any:
    with open(golden(name), encoding="utf-8") as f:
        return json.load(f)


def manifest() -> dict:
    return load_json("manifest.json")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def split_records(data: bytes) -> list[bytes]:
    """Split an uncompressed TFRecord file into its records (no CRC checks: the goldens are TF's own)."""
    records, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + 12 + length + 4
        if end > len(data):
            raise ValueError(f"golden file truncated at {pos}")
        records.append(data[pos + 12 : pos + 12 + length])
        pos = end
    return records


@cache
def golden_records(name: str) -> tuple[bytes, ...]:
    """The records of an uncompressed golden file, split independently of tfr_torch."""
    return tuple(split_records(golden(name).read_bytes()))


def framed_index(records) -> list[tuple[int, int]]:
    """(offset, framed size) of each record in an uncompressed file holding `records`."""
    out, offset = [], 0
    for r in records:
        out.append((offset, 12 + len(r) + 4))
        offset += 12 + len(r) + 4
    return out


# ---------------------------------------------------------------------------------------------- Examples


def feature_json(value: Any) -> dict:
    """One decoded feature value (float32 array, int64 array or list of bytes) as {"kind", "values"}.

    Raises AssertionError if the value is not exactly one of the three documented types.
    """
    if isinstance(value, np.ndarray):
        assert value.ndim == 1, f"feature arrays must be 1-D, got shape {value.shape}"
        if value.dtype == np.float32:
            return {"kind": "float", "values": value.view(np.uint32).tolist()}
        if value.dtype == np.int64:
            return {"kind": "int64", "values": value.tolist()}
        raise AssertionError(f"feature array of dtype {value.dtype}: expected float32 or int64")
    if isinstance(value, list):
        assert all(type(v) is bytes for v in value), f"bytes feature holds {[type(v).__name__ for v in value]}"
        return {"kind": "bytes", "values": [v.hex() for v in value]}
    raise AssertionError(f"feature value of type {type(value).__name__}: expected ndarray or list of bytes")


def features_json(features: dict) -> dict:
    assert all(type(k) is str for k in features), list(features)
    return {key: feature_json(value) for key, value in features.items()}


def sequence_json(context: dict, feature_lists: dict) -> dict:
    assert all(type(k) is str for k in feature_lists), list(feature_lists)
    assert all(isinstance(steps, list) for steps in feature_lists.values())
    return {
        "context": features_json(context),
        "feature_lists": {
            key: [None if step is None else feature_json(step) for step in steps]
            for key, steps in feature_lists.items()
        },
    }


# ----------------------------------------------------------------------------------------------- Tensors


def tensor_values(t: torch.Tensor, dtype: str) -> list:
    """A numeric torch tensor's values, flat row-major, in the golden JSON encoding."""
    if dtype in ("float16", "bfloat16"):
        return (t.contiguous().view(torch.int16).reshape(-1).numpy().view(np.uint16)).tolist()
    arr = t.contiguous().reshape(-1).numpy()
    if dtype == "float32":
        return arr.view(np.uint32).tolist()
    if dtype == "float64":
        return arr.view(np.uint64).tolist()
    if dtype == "complex64":
        return arr.view(np.uint32).reshape(-1, 2).tolist()
    if dtype == "complex128":
        return arr.view(np.uint64).reshape(-1, 2).tolist()
    return arr.tolist()


def nested_strings(value: Any, shape: list[int]) -> list[bytes]:
    """Check that `value` is bytes (shape []) or nested lists of bytes shaped like `shape`; return it flat."""
    if not shape:
        assert type(value) is bytes, f"expected bytes, got {type(value).__name__}"
        return [value]
    assert isinstance(value, list), f"expected a list of length {shape[0]}, got {type(value).__name__}"
    assert len(value) == shape[0], f"expected a list of length {shape[0]}, got {len(value)}"
    flat: list[bytes] = []
    for item in value:
        flat.extend(nested_strings(item, shape[1:]))
    return flat


def other_dtype(dtype: str) -> str:
    """A dtype name that is not `dtype` (for the type-mismatch tests)."""
    return "int64" if dtype == "float32" else "float32"
