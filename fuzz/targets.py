"""Fuzz targets: one function per decoder, each taking arbitrary bytes.

A target may raise only tfr_torch's own errors (TFRecordError and its subclasses: DecodeError, CorruptRecordError,
TruncatedRecordError, IndexMismatchError, TFDSMetadataError); anything else (IndexError, MemoryError,
OverflowError, numpy's ValueError, an AssertionError from a cross-check, a hang, a huge allocation) is a finding.
Cross-checks assert "one answer per record": parse_example's batched and single paths, decode_example, and the
pure-Python and compiled backends must agree value for value or error for error.

The targets need no atheris: tests/test_hostile.py replays every crashing input kept under
tests/data/regressions/ through them. fuzz/fuzz.py runs one under atheris; fuzz/run.py runs them all.
"""

from __future__ import annotations

import atexit
import gzip
import hashlib
import io
import math
import os
import shutil
import tempfile
import zlib
from collections.abc import Callable

import numpy as np
import torch

import tfr_torch
from tfr_torch import _native
from tfr_torch.errors import TFRecordError
from tfr_torch.format import strict
from tfr_torch.format.index import read_index
from tfr_torch.format.reader import HEADER_SIZE, read_records
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.tensor import decode_tensor_proto
from tfr_torch.format.writer import TFRecordWriter
from tfr_torch.images import _formats, _jpeg
from tfr_torch.tfds.features import parse_features
from tfr_torch.tfds.metadata import read_info
from tfr_torch.tfds.splits import resolve_split

__all__ = ["TARGETS", "Bytes"]

_SCRATCH = tempfile.mkdtemp(prefix="tfr_torch_fuzz_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)


class Bytes:
    """Carves typed values out of the fuzz input, front to back (atheris's FuzzedDataProvider, minus atheris)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        self.pos += 1
        return self.data[self.pos - 1]

    def chunk(self, limit: int) -> bytes:
        """A two-byte little-endian length (at most `limit`), then that many bytes."""
        size = min(self.byte() | self.byte() << 8, limit)
        out = self.data[self.pos : self.pos + size]
        self.pos += len(out)
        return out

    def rest(self) -> bytes:
        out = self.data[self.pos :]
        self.pos = len(self.data)
        return out


def _scratch(name: str, data: bytes) -> str:
    path = os.path.join(_SCRATCH, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _plain(value) -> object:
    """A decoded value as comparable Python data (NaNs made equal to each other)."""
    if isinstance(value, torch.Tensor):
        if value.is_sparse:
            value = value.coalesce()
            return ("sparse", _plain(value.indices()), _plain(value.values()), tuple(value.shape))
        if value.is_nested:
            return ("nested", [_plain(row) for row in value.unbind()])
        value = value.numpy() if value.dtype != torch.bfloat16 else value.float().numpy()
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, _plain(value.tolist()))
    if isinstance(value, float):
        return "nan" if math.isnan(value) else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "nested_row_splits"):
        return ("ragged", _plain(value.values), [_plain(s) for s in value.nested_row_splits])
    if hasattr(value, "_asdict"):
        return _plain(value._asdict())
    return value


def _outcome(call: Callable[[], object]) -> tuple[str, object]:
    """("ok", the values) or ("error", the error's class and message): backends must agree down to the message."""
    try:
        return "ok", _plain(call())
    except TFRecordError as exc:
        return "error", f"{type(exc).__name__}: {exc}"


def _on_both_backends(call: Callable[[], object]) -> tuple[str, object]:
    """Run `call` on the pure-Python backend and (when built) the compiled one; both must give the same answer."""
    if not _native.available():
        return _outcome(call)
    previous = tfr_torch.backend()
    try:
        tfr_torch.set_backend("python")
        reference = _outcome(call)
        tfr_torch.set_backend("native")
        compiled = _outcome(call)
    finally:
        tfr_torch.set_backend(previous)
    assert reference == compiled, f"python and native backends disagree:\n{reference!r}\n{compiled!r}"
    return reference


# ------------------------------------------------------------------------------------------------ Example

_DTYPE_OF = {"int64": torch.int64, "float": torch.float32, "bytes": tfr_torch.string}


def target_example(data: bytes) -> None:
    """decode_example, and parse_example (single and batched) asked for every key it found, must agree."""
    if _outcome(lambda: tfr_torch.decode_example(data))[0] == "error":
        spec = _loose_spec(data)
        single = _on_both_backends(lambda: tfr_torch.parse_example([data], spec))
        batched = _on_both_backends(lambda: tfr_torch.parse_example([data, data], spec))
        if _outcome(lambda: strict.example_features(data))[0] == "error":  # the record itself breaks a rule
            assert single[0] == batched[0] == "error", "parse_example accepted a record decode_example refuses"
        return
    decoded = tfr_torch.decode_example(data)
    if not decoded:
        return
    spec = {}
    for key, values in decoded.items():
        kind = "bytes" if isinstance(values, list) else "float" if values.dtype == np.float32 else "int64"
        spec[key] = tfr_torch.VarLenFeature(_DTYPE_OF[kind])
    single = _on_both_backends(lambda: tfr_torch.parse_single_example(data, spec))
    batched = _on_both_backends(lambda: tfr_torch.parse_example([data, data], spec))
    assert single[0] == batched[0] == "ok", (f"decode_example accepted a record parse_example refuses: {single} "
                                             f"{batched}")
    for key, values in decoded.items():
        got = tfr_torch.parse_single_example(data, spec)[key]
        if isinstance(got, tfr_torch.SparseBytes):
            got = list(got.values)
        elif isinstance(got, torch.Tensor):
            got = got.coalesce().values().tolist() if got.is_sparse else got.tolist()
        want = list(values) if isinstance(values, list) else values.tolist()
        assert _plain(got) == _plain(want), f"feature {key!r}: decode_example {want!r} != parse_example {got!r}"


def _loose_spec(data: bytes) -> dict:
    """A VarLenFeature for every key protobuf finds in the record (its kind as protobuf reads it), or one key."""
    from google.protobuf.message import DecodeError as ProtoDecodeError

    from tfr_torch.format._proto import example_pb2

    try:
        features = example_pb2.Example.FromString(data).features.feature
        kinds = {key: f.WhichOneof("kind") for key, f in features.items()}
    except (ProtoDecodeError, RecursionError):
        kinds = {}
    dtypes = {"int64_list": torch.int64, "float_list": torch.float32, "bytes_list": tfr_torch.string}
    spec = {key: tfr_torch.VarLenFeature(dtypes.get(kind, torch.int64)) for key, kind in kinds.items()}
    return spec or {"x": tfr_torch.VarLenFeature(torch.int64)}


def target_sequence_example(data: bytes) -> None:
    """decode_sequence_example and parse_single_sequence_example with a spec for every key it found."""
    outcome = _outcome(lambda: tfr_torch.decode_sequence_example(data))
    if outcome[0] == "error":
        return
    context, lists = tfr_torch.decode_sequence_example(data)
    context_spec = {}
    for key, values in context.items():
        kind = "bytes" if isinstance(values, list) else "float" if values.dtype == np.float32 else "int64"
        context_spec[key] = tfr_torch.VarLenFeature(_DTYPE_OF[kind])
    sequence_spec = {}
    for key, steps in lists.items():
        kinds = {("bytes" if isinstance(v, list) else "float" if v.dtype == np.float32 else "int64")
                 for v in steps if v is not None}
        if len(kinds) == 1:
            sequence_spec[key] = tfr_torch.RaggedFeature(_DTYPE_OF[kinds.pop()])
    if not context_spec and not sequence_spec:
        return
    _on_both_backends(lambda: tfr_torch.parse_single_sequence_example(data, context_spec, sequence_spec))
    _on_both_backends(lambda: tfr_torch.parse_sequence_example([data, data], context_spec, sequence_spec))


# Every spec kind parse_example has, on keys the seed corpus fills (fuzz/make_corpus.py).
_SPECS: list[dict] = [
    {"i": tfr_torch.FixedLenFeature([2], torch.int64, default_value=[0, 0]),
     "f": tfr_torch.FixedLenFeature([], torch.float32, default_value=0.0),
     "s": tfr_torch.FixedLenFeature([], tfr_torch.string, default_value=b"")},
    {"i": tfr_torch.VarLenFeature(torch.int64), "f": tfr_torch.VarLenFeature(torch.float32),
     "s": tfr_torch.VarLenFeature(tfr_torch.string)},
    {"sp": tfr_torch.SparseFeature("idx", "f", torch.float32, 8),
     "sp2": tfr_torch.SparseFeature(["idx", "idx2"], "i", torch.int64, [8, 4])},
    {"r1": tfr_torch.RaggedFeature(torch.int64, value_key="i", partitions=[tfr_torch.RowLengths("len")]),
     "r2": tfr_torch.RaggedFeature(torch.float32, value_key="f",
                                   partitions=[tfr_torch.RowSplits("splits"), tfr_torch.UniformRowLength(2)]),
     "r3": tfr_torch.RaggedFeature(tfr_torch.string, value_key="s", partitions=[tfr_torch.ValueRowIds("ids")])},
    {"r4": tfr_torch.RaggedFeature(torch.int64, value_key="i", partitions=[tfr_torch.RowStarts("starts")]),
     "r5": tfr_torch.RaggedFeature(torch.float32, value_key="f", partitions=[tfr_torch.RowLimits("limits")],
                                   validate=True),
     "s": tfr_torch.RaggedFeature(tfr_torch.string)},
    {"i": tfr_torch.FixedLenSequenceFeature([2], torch.int64, allow_missing=True),
     "f": tfr_torch.FixedLenSequenceFeature([], torch.float32, allow_missing=True, default_value=-1.0)},
]


def target_parse_example(data: bytes) -> None:
    """parse_example of 1-4 records with one of the spec sets: the batch must fail exactly when one of its records
    fails alone, and both backends must agree."""
    source = Bytes(data)
    spec = _SPECS[source.byte() % len(_SPECS)]
    count = 1 + source.byte() % 4
    records = [source.chunk(2048) for _ in range(count - 1)] + [source.rest()]
    batch = _on_both_backends(lambda: tfr_torch.parse_example(records, spec))
    singles = [_on_both_backends(lambda r=r: tfr_torch.parse_single_example(r, spec)) for r in records]
    assert (batch[0] == "error") == any(kind == "error" for kind, _ in singles), \
        f"parse_example of the batch gives {batch[0]}, the records alone {[kind for kind, _ in singles]}"


# ------------------------------------------------------------------------------------------------ TensorProto

def target_tensor(data: bytes) -> None:
    """parse_tensor (default max_bytes); a tensor it returns serializes back to one that parses the same."""
    try:
        decoded = decode_tensor_proto(data)
    except TFRecordError:
        return
    if decoded.dtype == 7:  # strings: nested lists
        return
    tensor = tfr_torch.parse_tensor(data)
    again = tfr_torch.parse_tensor(tfr_torch.serialize_tensor(tensor))
    assert tfr_torch.serialize_tensor(again) == tfr_torch.serialize_tensor(tensor)


# ------------------------------------------------------------------------------------------------ framing

def _read_all(path: str, compression: str | None, on_error: str) -> list[bytes]:
    with read_records(path, compression, on_error=on_error) as records:
        return list(records)


def target_framing(data: bytes) -> None:
    """read_records over the input as a plain, GZIP or ZLIB file, or over its bytes compressed (to fuzz the
    framing inside a stream); raising and skipping; both backends agree; skip never raises."""
    import warnings

    mode = data[0] % 5 if data else 0
    body = data[1:]
    if mode == 0:
        path, compression = _scratch("plain.tfrecord", body), None
    elif mode == 1:
        path, compression = _scratch("raw.gz", body), "gzip"
    elif mode == 2:
        path, compression = _scratch("raw.zz", body), "zlib"
    elif mode == 3:
        path, compression = _scratch("packed.gz", gzip.compress(body, 1)), "gzip"
    else:
        path, compression = _scratch("packed.zz", zlib.compress(body, 1)), "zlib"
    strict_read = _on_both_backends(lambda: _read_all(path, compression, "raise"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        skipped = _on_both_backends(lambda: _read_all(path, compression, "skip"))
    assert skipped[0] == "ok", f"on_error='skip' raised {skipped[1]}"
    if strict_read[0] == "ok":
        assert strict_read == skipped, "a file read whole without errors gave other records under on_error='skip'"
    if mode == 0:  # random access by the offsets of the records the sequential reader found
        records = skipped[1]
        if strict_read[0] == "ok" and records:
            with RecordFile(path) as file:
                offset = 0
                for record in tfr_torch.read_records(path, None):
                    assert file.read(offset) == record
                    offset += len(record) + HEADER_SIZE + 4


# ------------------------------------------------------------------------------------------------ index files

_INDEXED = None


def _indexed_file() -> str:
    global _INDEXED
    if _INDEXED is None:
        _INDEXED = os.path.join(_SCRATCH, "indexed.tfrecord")
        with TFRecordWriter(_INDEXED) as writer:
            for i in range(5):
                writer.write(bytes([i]) * (i * 7))
    return _INDEXED


def target_index(data: bytes) -> None:
    """read_index of arbitrary text against a real 5-record file; every row it accepts reads a record."""
    index_path = _scratch("fuzz.idx", data)
    path = _indexed_file()
    try:
        index = read_index(index_path, path)
    except TFRecordError:
        return
    with RecordFile(path) as file:
        for offset, size in index.tolist():
            try:
                file.read(offset, size)
            except TFRecordError:
                pass


# ------------------------------------------------------------------------------------------------ TFDS metadata

def target_tfds(data: bytes) -> None:
    """A TFDS version folder whose dataset_info.json and features.json come from the input; read_info,
    parse_features and a split string from the input may raise only TFDSMetadataError (a bad split string is
    the caller's ValueError)."""
    source = Bytes(data)
    split = source.chunk(64).decode("utf-8", "replace") or "train"
    info_json = source.chunk(4096)
    features_json = source.rest()
    folder = os.path.join(_SCRATCH, "tfds", "fuzzset", "1.0.0")
    os.makedirs(folder, exist_ok=True)
    _scratch("tfds/fuzzset/1.0.0/dataset_info.json", info_json)
    _scratch("tfds/fuzzset/1.0.0/features.json", features_json)
    try:
        info = read_info(folder)
        parse_features(info.features, "features.json", info.class_names)
    except TFRecordError:
        return
    try:
        resolve_split(split, {name: s.shard_lengths for name, s in info.splits.items()})
    except TFRecordError:
        pass
    except ValueError as exc:  # the caller's split string: an argument error, not a data error
        assert "split" in str(exc), f"split {split!r}: {exc}"


# ------------------------------------------------------------------------------------------------ JPEG structure


def target_jpeg(data: bytes) -> None:
    """The structure check GPU batches go through (tfr_torch/images/_jpeg.py) on hostile bytes: it answers None or a
    message, never raises; both backends (the compiled marker scan, the reference regex) give the same answer, and
    the scan itself agrees from a few starts."""
    _on_both_backends(lambda: _jpeg.jpeg_problem(data))
    if _native.core is not None:
        for start in {min(2, len(data)), len(data) // 2, max(len(data) - 3, 0), len(data)}:
            match = _jpeg._NEXT_MARKER.search(data, start)
            assert _native.core.jpeg_next_marker(data, start) == (-1 if match is None else match.start()), start
        # the compiled check and header read of GPU batches agree with the references
        assert _native.core.jpeg_sound_many([data]) == (b"\x01" if _jpeg.jpeg_problem(data) is None else b"\x00")
        found = _native.core.jpeg_headers_many([data])[0]
        if data[:3] == b"\xff\xd8\xff":
            h = _formats._jpeg(data)
            assert found == (h.components, h.precision, h.orientation, h.height, h.width, h.frame, h.rgb), found
        else:
            assert found is None


# ------------------------------------------------------------------------------------------------ PNG kernel

_PNG_CHANNELS = {0: 1, 2: 3, 6: 4}
_PIL_MODE = {1: "L", 3: "RGB", 4: "RGBA"}


def _png_seeds() -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(1)
    out = []
    for mode, shape, level in (("L", (5, 7), 6), ("RGB", (6, 4, 3), 1), ("RGBA", (3, 3, 4), 9), ("RGB", (9, 8, 3), 0)):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(buf, "PNG", compress_level=level)
        out.append(buf.getvalue())
    return out


_PNG_SEEDS: list[bytes] = []


def _with_crcs(png: bytes) -> bytes:
    """`png` with every chunk's CRC made right (where the chunk lengths hold), so mutations reach zlib and the
    filters instead of stopping at the CRC check."""
    out, pos = bytearray(png), 8
    while pos + 12 <= len(out):
        length = int.from_bytes(out[pos: pos + 4], "big")
        end = pos + 8 + length
        if end + 4 > len(out):
            break
        out[end: end + 4] = zlib.crc32(bytes(out[pos + 4: end])).to_bytes(4, "big")
        pos = end + 4
    return bytes(out)


def target_png(data: bytes) -> None:
    """The compiled core's PNG kernel (RLDS image steps) on hostile PNGs: it refuses, or it decodes exactly the
    pixels Pillow (the reference) decodes; never more lenient than Pillow. The kernel is C, so no coverage reaches
    libFuzzer: the input seeds a generator of mutations of a real PNG (bytes overwritten, a cut, CRCs made right
    again so that the mutations reach zlib and the filters)."""
    core = _native.core
    if core is None or not hasattr(core, "png_decode_many"):
        return
    if not _PNG_SEEDS:
        _PNG_SEEDS.extend(_png_seeds())
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(data).digest()[:8], "little"))
    png = bytearray(_PNG_SEEDS[int(rng.integers(len(_PNG_SEEDS)))])
    for _ in range(int(rng.integers(1, 6))):
        png[int(rng.integers(8, len(png)))] = int(rng.integers(256))
    if rng.random() < 0.2:
        del png[int(rng.integers(8, len(png))):]
    mutated = _with_crcs(bytes(png)) if rng.random() < 0.7 else bytes(png)
    width, height, colour = 4, 3, 2
    if len(mutated) >= 26 and mutated[12:16] == b"IHDR":  # the size and colour the input claims, within bounds
        claimed = (int.from_bytes(mutated[16:20], "big"), int.from_bytes(mutated[20:24], "big"), mutated[25])
        if 0 < claimed[0] <= 64 and 0 < claimed[1] <= 64 and claimed[2] in _PNG_CHANNELS:
            width, height, colour = claimed
    channels = _PNG_CHANNELS[colour]
    out = np.zeros((1, height, width, channels), np.uint8)
    failed, _reason = core.png_decode_many([mutated], out, width, height, colour)
    if failed >= 0:
        return
    from PIL import Image

    image = Image.open(io.BytesIO(mutated))
    image.load()  # the kernel decoded it: Pillow must too
    assert image.mode == _PIL_MODE[channels] and image.size == (width, height), (image.mode, image.size)
    expected = np.asarray(image).reshape(height, width, channels)
    assert np.array_equal(out[0], expected), "the PNG kernel and Pillow disagree"


TARGETS: dict[str, Callable[[bytes], None]] = {
    "example": target_example,
    "sequence_example": target_sequence_example,
    "parse_example": target_parse_example,
    "tensor": target_tensor,
    "framing": target_framing,
    "index": target_index,
    "tfds": target_tfds,
    "jpeg": target_jpeg,
    "png": target_png,
}
