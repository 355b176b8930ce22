"""Write the seed corpus of every fuzz target into fuzz/corpus/<target>/ (deterministic; run again after a change
to the targets' input layout): `python fuzz/make_corpus.py`.

Seeds are small valid inputs plus the non-canonical encodings of issues 14 and 16, so that the fuzzer starts from
inputs that reach deep into each decoder instead of spending its time discovering the wire format.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import struct
import sys
import zlib

import numpy as np
import torch

import tfr_torch
from tfr_torch.format.wire import encode_varint

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
TFDS = os.path.join(os.path.dirname(HERE), "tests", "data", "tfds", "data", "tfr_golden", "1.0.0")


def ld(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + encode_varint(len(payload)) + payload


def length_prefixed(data: bytes) -> bytes:
    return struct.pack("<H", len(data)) + data


def examples() -> list[bytes]:
    f1 = b"\x1a\x03\x0a\x01\x01"
    entry = lambda value: ld(0x0A, ld(0x0A, b"x") + ld(0x12, value))
    odd = [
        ld(0x0A, entry(f1) + entry(b"\x1a\x03\x0a\x01\x02")),  # duplicate key
        ld(0x0A, ld(0x0A, ld(0x0A, b"x") + ld(0x12, f1) + ld(0x12, f1))),  # value twice
        ld(0x0A, entry(f1 + b"\x23" * 5 + b"\x24" * 5)),  # groups inside a Feature
        ld(0x0A, entry(b"\x1a\x05\x0a\x01\x01\x10\x03")),  # packed run + unknown field
        ld(0x0A, entry(b"\x1a\x04\x08\x01\x08\x02")),  # unpacked int64
        ld(0x0A, entry(b"\x12\x0a\x0d\x00\x00\x80\x3f\x0d\x00\x00\x00\x40")),  # unpacked floats
        ld(0x0A, entry(b"")) + b"\x10\x01",  # kind-less Feature, unknown Example field
        ld(0x0A, entry(b"\x1a\x0b\x0a\x09" + b"\xff" * 8 + b"\x01")),  # 9-byte varint
    ]
    return [
        tfr_torch.encode_example({"x": 1}),
        tfr_torch.encode_example({"x": [1, -2, 2**40], "y": [0.5, -1.0], "z": [b"abc", b""]}),
        tfr_torch.encode_example({"x": np.array([], dtype=np.int64), "y": np.array([], dtype=np.float32)}),
        tfr_torch.encode_example({f"k{i}": i for i in range(20)}),
        b"",
        *odd,
    ]


def sequence_examples() -> list[bytes]:
    return [
        tfr_torch.encode_sequence_example({"id": 7}, {"tokens": [[1, 2], [3]], "words": [b"a", b"bc"]}),
        tfr_torch.encode_sequence_example(None, {"f": [[0.5], [1.5, 2.5]]}),
        tfr_torch.encode_sequence_example({"c": [b"x", b"y"]}, None),
        b"",
    ]


def parse_example_inputs() -> list[bytes]:
    """<spec set byte><record count byte><length-prefixed records ...><last record>."""
    records = [
        tfr_torch.encode_example({"i": [1, 2], "f": 0.5, "s": b"abc"}),
        tfr_torch.encode_example({"i": [1, 2, 3, 4], "f": [1.0, 2.0, 3.0, 4.0], "s": [b"a", b"b"],
                                  "idx": [0, 3], "idx2": [1, 2], "len": [1, 3], "splits": [0, 1, 2],
                                  "ids": [0, 1], "starts": [0, 2], "limits": [1, 4]}),
        tfr_torch.encode_example({"i": [7, 8], "f": [0.0, 1.0], "idx": [7, 1], "idx2": [3, 0], "len": [2],
                                  "splits": [0, 2], "s": [b"q"], "ids": [0], "starts": [0], "limits": [2]}),
        tfr_torch.encode_example({"other": 1}),
    ]
    out = []
    for spec in range(6):
        out.append(bytes([spec, 0]) + records[1])
        out.append(bytes([spec, 2]) + length_prefixed(records[0]) + length_prefixed(records[2]) + records[3])
    return out


def tensors() -> list[bytes]:
    out = [tfr_torch.serialize_tensor(t) for t in (
        torch.arange(6, dtype=torch.int64).reshape(2, 3), torch.tensor(1.5), torch.zeros(0, 3),
        torch.tensor([True, False]), torch.ones(2, 2, dtype=torch.bfloat16), torch.tensor([1 + 2j]),
        torch.tensor([1, 2, 65535], dtype=torch.uint16), torch.tensor([0.5], dtype=torch.float16))]
    out.append(tfr_torch.serialize_tensor(np.array([[b"a", b"bc"], [b"", b"d"]], dtype=object)))
    dims = lambda *sizes: ld(0x12, b"".join(ld(0x12, b"\x08" + encode_varint(d) if d else b"") for d in sizes))
    out.append(b"\x08\x02" + dims(2, 3) + b"\x31" + struct.pack("<d", 1.5))  # one double_val broadcast
    out.append(b"\x08\x03" + dims(4) + b"\x38\x05\x38\x06")  # int_val
    out.append(b"\x08\x07" + dims(3) + ld(0x42, b"s"))  # one string_val broadcast
    return out


def tfrecord_file(records: list[bytes]) -> bytes:
    path = os.path.join(CORPUS, ".tmp.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    with open(path, "rb") as f:
        data = f.read()
    os.remove(path)
    return data


def framing_inputs() -> list[bytes]:
    """<mode byte: 0 plain, 1 gzip file, 2 zlib file, 3 gzip of the rest, 4 zlib of the rest><bytes>."""
    plain = tfrecord_file([b"", b"a", b"hello" * 10, bytes(300)])
    one = tfrecord_file([b"x" * 20])
    return [
        b"\x00" + plain, b"\x00" + one, b"\x00" + one[:-3], b"\x00" + one[:5] + b"\xff" + one[6:] + one,
        b"\x01" + gzip.compress(plain, 6), b"\x02" + zlib.compress(plain, 6), b"\x03" + plain, b"\x04" + one,
        b"\x01" + gzip.compress(one) + gzip.compress(one),
    ]


def index_inputs() -> list[bytes]:
    sizes = [16 + i * 7 for i in range(5)]
    offsets = np.cumsum([0] + sizes[:-1]).tolist()
    good = "".join(f"{o} {s}\n" for o, s in zip(offsets, sizes)).encode()
    return [good, good[:-6], b"0 16\n16 23\n", b"", b"0 16\n17 23\n", b"0 99999999999999999999\n"]


def tfds_inputs() -> list[bytes]:
    with open(os.path.join(TFDS, "dataset_info.json"), "rb") as f:
        info = f.read()
    with open(os.path.join(TFDS, "features.json"), "rb") as f:
        features = f.read()
    return [length_prefixed(split) + length_prefixed(info) + features
            for split in (b"train", b"train[:50%]+test", b"test[1:-1]", b"train[:10%]")]


def jpeg_inputs() -> list[bytes]:
    """Small JPEGs as encoders write them: baseline 4:2:0, 4:4:4, progressive, gray, with restart markers."""
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)
    out = []
    for options in ({}, {"subsampling": 0}, {"progressive": True}, {"restart_marker_blocks": 1}, {"gray": True}):
        image = Image.fromarray(pixels).convert("L") if options.pop("gray", False) else Image.fromarray(pixels)
        buf = io.BytesIO()
        image.save(buf, "JPEG", quality=75, **options)
        out.append(buf.getvalue())
    return out


def png_inputs() -> list[bytes]:
    """Seeds of fuzz/targets.py's target_png, whose input seeds a generator of mutations of real PNGs."""
    return [bytes([k]) for k in range(4)]


SEEDS = {
    "example": examples,
    "sequence_example": sequence_examples,
    "parse_example": parse_example_inputs,
    "tensor": tensors,
    "framing": framing_inputs,
    "index": index_inputs,
    "tfds": tfds_inputs,
    "jpeg": jpeg_inputs,
    "png": png_inputs,
}


def main(only: list[str] | None = None) -> None:
    for target, make in SEEDS.items():
        if only and target not in only:
            continue
        folder = os.path.join(CORPUS, target)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        for data in make():
            name = hashlib.sha1(data).hexdigest()[:16]
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(os.listdir(folder))} seeds", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
