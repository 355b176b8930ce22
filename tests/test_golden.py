"""Parity with real TensorFlow 2.21: golden files written by tests/data/make_golden.py (see its docstring for
what each file holds) and read here without TensorFlow.

Values are compared in the goldens' JSON encoding (tests/golden_util.py): floats by bit pattern, so NaN and
-0.0 are exact; bytes as hex.
"""

from __future__ import annotations

import re
import shutil
import zlib

import numpy as np
import pytest
import torch

import tfr_torch
from golden_util import (
    TORCH_DTYPES,
    features_json,
    framed_index,
    golden,
    golden_records,
    load_json,
    manifest,
    nested_strings,
    other_dtype,
    sequence_json,
    sha256,
    tensor_values,
)

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core

EXAMPLES = load_json("examples.json")
SEQUENCE_EXAMPLES = load_json("sequence_examples.json")
TENSORS = load_json("tensors.json")
TENSOR_PROTOS = load_json("tensor_protos.json")

# (golden file, TF's compression type, TF's compression level) for the examples in every compression.
EXAMPLE_FILES = [
    (name, info["compression_type"], info["compression_level"])
    for name, info in sorted(manifest()["files"].items())
    if name.startswith("examples") and name.endswith(".tfrecord")
]
DETECTED = {"": "none", "GZIP": "gzip", "ZLIB": "zlib"}


def _ids(entries, key="description"):
    return [f"{i:02d}-{e[key]}" for i, e in enumerate(entries)]


def _read_all(path, *args, **kwargs) -> tuple[list[bytes], tfr_torch.RecordReader]:
    with tfr_torch.read_records(path, *args, **kwargs) as reader:
        records = list(reader)
    return records, reader


def _names(text: str, dtype: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(dtype)}(?![\w])", text) is not None


# ------------------------------------------------------------------------------------- golden sanity


def test_manifest_matches_golden_files():
    """The goldens on disk are the ones the manifest describes (guards against a stale or partial copy)."""
    files = manifest()["files"]
    assert len(EXAMPLE_FILES) == 7
    for name, info in files.items():
        data = golden(name).read_bytes()
        assert len(data) == info["size"], name
        assert sha256(data) == info["sha256"], name
        if "records" in info and not info["compression_type"]:
            assert len(golden_records(name)) == info["records"], name
    payload_sha = manifest()["examples_payload_sha256"]
    assert [sha256(r) for r in golden_records("examples.tfrecord")] == payload_sha
    assert len(EXAMPLES) == len(payload_sha)
    assert len(SEQUENCE_EXAMPLES) == len(golden_records("sequence_examples.tfrecord"))
    assert len(TENSORS) == len(golden_records("tensors.tfrecord"))
    assert len(TENSOR_PROTOS) == len(golden_records("tensor_protos.tfrecord"))


# ------------------------------------------------------------------------------- 1. Examples: decoding


@pytest.mark.parametrize("i", range(len(EXAMPLES)), ids=_ids(EXAMPLES))
def test_example_decodes_like_tensorflow(i):
    entry = EXAMPLES[i]
    decoded = tfr_torch.decode_example(golden_records("examples.tfrecord")[i])
    assert isinstance(decoded, dict)
    for key in entry["kindless"]:
        assert key not in decoded, f"feature {key!r} has no kind set: it must be left out"
    assert features_json(decoded) == entry["features"]


def _compression_spellings(ctype):
    if not ctype:
        return ["auto", None, "", "none"]
    return ["auto", ctype, ctype.lower()]


@pytest.mark.parametrize(
    "name, compression",
    [(name, c) for name, ctype, _ in EXAMPLE_FILES for c in _compression_spellings(ctype)],
)
def test_example_files_read_in_every_compression(name, compression):
    ctype = manifest()["files"][name]["compression_type"]
    records, reader = _read_all(golden(name), compression)
    assert reader.compression == DETECTED[ctype]
    assert reader.records == manifest()["files"][name]["records"] == len(EXAMPLES)
    assert reader.skipped == 0
    assert [sha256(r) for r in records] == manifest()["examples_payload_sha256"]
    assert records == list(golden_records("examples.tfrecord"))
    for entry, record in zip(EXAMPLES, records):
        decoded = tfr_torch.decode_example(record)
        assert all(key not in decoded for key in entry["kindless"]), entry["description"]
        assert features_json(decoded) == entry["features"], entry["description"]


@pytest.mark.parametrize("name", ["empty.tfrecord", "empty-record.tfrecord", "one-record.tfrecord"])
def test_trivial_files_read(name):
    records, reader = _read_all(golden(name))
    assert reader.compression == "none"
    assert records == list(golden_records(name))
    assert reader.records == manifest()["files"][name]["records"]
    if name == "empty-record.tfrecord":
        assert records == [b""]
    if name == "one-record.tfrecord":
        assert records == [golden_records("examples.tfrecord")[0]]
        assert features_json(tfr_torch.decode_example(records[0])) == EXAMPLES[0]["features"]


# -------------------------------------------------------------------------- 2. Writer: byte identity


def _writer_cases():
    cases = []
    for name, ctype, level in EXAMPLE_FILES:
        spellings = [None, ""] if not ctype else [ctype.lower(), ctype]
        cases += [(name, c, level) for c in spellings]
    return cases


@pytest.mark.parametrize("name, compression, level", _writer_cases())
def test_writer_matches_tensorflow_bytes(tmp_path, name, compression, level):
    out = tmp_path / "out.tfrecord"
    with tfr_torch.TFRecordWriter(out, compression=compression, compression_level=level) as writer:
        for record in golden_records("examples.tfrecord"):
            writer.write(record)
    assert out.read_bytes() == golden(name).read_bytes()


@pytest.mark.parametrize("name", ["empty.tfrecord", "empty-record.tfrecord", "one-record.tfrecord"])
def test_writer_matches_tensorflow_bytes_trivial_files(tmp_path, name):
    out = tmp_path / "out.tfrecord"
    with tfr_torch.TFRecordWriter(str(out)) as writer:
        for record in golden_records(name):
            writer.write(record)
    expected = golden(name).read_bytes()
    assert out.read_bytes() == expected
    if name == "empty.tfrecord":
        assert expected == b""
    if name == "empty-record.tfrecord":
        assert expected == bytes.fromhex("0000000000000000" "29039807" "d8ea82a2")


def _large_payload() -> bytes:
    spec = manifest()["large_record"]
    n = spec["length"]
    assert n == 17_000_000
    payload = (bytes(range(256)) * (n // 256 + 1))[:n]
    assert sha256(payload) == spec["sha256"]
    return payload


def test_writer_matches_tensorflow_bytes_large_gzip_record(tmp_path):
    out = tmp_path / "large.tfrecord"
    with tfr_torch.TFRecordWriter(out, compression="gzip") as writer:
        writer.write(_large_payload())
    assert out.read_bytes() == golden("large-gzip.tfrecord").read_bytes()


def test_large_gzip_record_reads():
    spec = manifest()["large_record"]
    records, reader = _read_all(golden("large-gzip.tfrecord"))
    assert reader.compression == "gzip"
    assert len(records) == 1
    assert len(records[0]) == spec["length"]
    assert sha256(records[0]) == spec["sha256"]


# ------------------------------------------------------------------------------ 3. Examples: re-encoding


@pytest.mark.parametrize("i", range(len(EXAMPLES)), ids=_ids(EXAMPLES))
def test_example_reencodes_to_same_values(i):
    decoded = tfr_torch.decode_example(golden_records("examples.tfrecord")[i])
    reencoded = tfr_torch.encode_example(decoded)
    assert isinstance(reencoded, bytes)
    assert features_json(tfr_torch.decode_example(reencoded)) == EXAMPLES[i]["features"]


# ------------------------------------------------------------------------------------ 4. SequenceExamples


@pytest.mark.parametrize("i", range(len(SEQUENCE_EXAMPLES)), ids=_ids(SEQUENCE_EXAMPLES))
def test_sequence_example_decodes_like_tensorflow(i):
    entry = SEQUENCE_EXAMPLES[i]
    context, feature_lists = tfr_torch.decode_sequence_example(golden_records("sequence_examples.tfrecord")[i])
    assert sequence_json(context, feature_lists) == {
        "context": entry["context"], "feature_lists": entry["feature_lists"]}


@pytest.mark.parametrize("i", range(len(SEQUENCE_EXAMPLES)), ids=_ids(SEQUENCE_EXAMPLES))
def test_sequence_example_reencodes_to_same_values(i):
    entry = SEQUENCE_EXAMPLES[i]
    context, feature_lists = tfr_torch.decode_sequence_example(golden_records("sequence_examples.tfrecord")[i])
    reencoded = tfr_torch.encode_sequence_example(context, feature_lists)
    assert sequence_json(*tfr_torch.decode_sequence_example(reencoded)) == {
        "context": entry["context"], "feature_lists": entry["feature_lists"]}


def test_sequence_example_file_reads():
    records, reader = _read_all(golden("sequence_examples.tfrecord"))
    assert reader.compression == "none"
    assert records == list(golden_records("sequence_examples.tfrecord"))


# ------------------------------------------------------------------------------------------- 5. Tensors


def _check_parsed(parsed, entry):
    """`parsed` (what parse_tensor returned) holds exactly the dtype, shape and values of a golden entry."""
    dtype, shape = entry["dtype"], entry["shape"]
    if dtype == "string":
        flat = nested_strings(parsed, shape)
        assert [v.hex() for v in flat] == entry["values"]
        return
    assert isinstance(parsed, torch.Tensor), type(parsed)
    assert parsed.dtype == TORCH_DTYPES[dtype]
    assert list(parsed.shape) == shape
    assert tensor_values(parsed, dtype) == entry["values"]


def _string_array(parsed, shape) -> np.ndarray:
    return np.array(nested_strings(parsed, shape), dtype=object).reshape(shape)


def test_tensor_file_reads():
    records, reader = _read_all(golden("tensors.tfrecord"))
    assert reader.compression == "none"
    assert records == list(golden_records("tensors.tfrecord"))


@pytest.mark.parametrize("i", range(len(TENSORS)), ids=_ids(TENSORS))
def test_parse_tensor_like_tensorflow(i):
    _check_parsed(tfr_torch.parse_tensor(golden_records("tensors.tfrecord")[i]), TENSORS[i])


@pytest.mark.parametrize("i", range(len(TENSORS)), ids=_ids(TENSORS))
def test_serialize_tensor_matches_tensorflow_bytes(i):
    entry, record = TENSORS[i], golden_records("tensors.tfrecord")[i]
    parsed = tfr_torch.parse_tensor(record)
    if entry["dtype"] == "string":
        assert tfr_torch.serialize_tensor(_string_array(parsed, entry["shape"])) == record
    else:
        assert tfr_torch.serialize_tensor(parsed) == record
        if entry["dtype"] != "bfloat16":  # numpy has no bfloat16
            assert tfr_torch.serialize_tensor(parsed.numpy()) == record


@pytest.mark.parametrize("i", range(len(TENSORS)), ids=_ids(TENSORS))
def test_parse_tensor_with_matching_dtype(i):
    entry, record = TENSORS[i], golden_records("tensors.tfrecord")[i]
    dtype = entry["dtype"]
    spellings = [dtype, tfr_torch.string if dtype == "string" else TORCH_DTYPES[dtype]]
    for spelling in spellings:
        _check_parsed(tfr_torch.parse_tensor(record, dtype=spelling), entry)


@pytest.mark.parametrize("i", range(len(TENSORS)), ids=_ids(TENSORS))
def test_parse_tensor_with_wrong_dtype_raises(i):
    entry, record = TENSORS[i], golden_records("tensors.tfrecord")[i]
    dtype, wrong = entry["dtype"], other_dtype(entry["dtype"])
    wrongs = [(wrong, wrong), (TORCH_DTYPES[wrong], wrong)]
    wrongs.append(("string", "string") if dtype != "string" else (torch.int64, "int64"))
    for spelling, wrong_name in wrongs:
        with pytest.raises(tfr_torch.DecodeError) as info:
            tfr_torch.parse_tensor(record, dtype=spelling)
        message = str(info.value)
        assert _names(message, dtype), f"{message!r} does not name the stored dtype {dtype}"
        assert _names(message, wrong_name), f"{message!r} does not name the requested dtype {wrong_name}"


def test_tensor_protos_file_reads():
    records, reader = _read_all(golden("tensor_protos.tfrecord"))
    assert records == list(golden_records("tensor_protos.tfrecord"))
    assert records == [bytes.fromhex(e["proto_hex"]) for e in TENSOR_PROTOS]


@pytest.mark.parametrize("i", range(len(TENSOR_PROTOS)), ids=_ids(TENSOR_PROTOS, "case"))
def test_parse_tensor_val_forms_like_tensorflow(i):
    entry = TENSOR_PROTOS[i]
    record = golden_records("tensor_protos.tfrecord")[i]
    assert record == bytes.fromhex(entry["proto_hex"])
    _check_parsed(tfr_torch.parse_tensor(record), entry)
    _check_parsed(tfr_torch.parse_tensor(record, dtype=entry["dtype"]), entry)


# --------------------------------------------------------------------------------------------- 6. Index

INDEXED = ["examples.tfrecord", "one-record.tfrecord", "empty-record.tfrecord", "empty.tfrecord"]


@pytest.mark.parametrize("name", INDEXED)
def test_build_index_matches_tfrecord_package(tmp_path, name):
    copy = tmp_path / name
    shutil.copyfile(golden(name), copy)
    result = tfr_torch.build_index(copy)
    assert str(result) == str(copy) + ".idx"
    assert (tmp_path / (name + ".idx")).read_bytes() == golden(name + ".idx").read_bytes()

    custom = tmp_path / "custom.idx"
    assert str(tfr_torch.build_index(str(copy), str(custom))) == str(custom)
    assert custom.read_bytes() == golden(name + ".idx").read_bytes()


@pytest.mark.parametrize("name", INDEXED)
def test_read_index_of_tfrecord_package_index(name):
    records = golden_records(name)
    expected = np.array(framed_index(records), dtype=np.int64).reshape(-1, 2)
    for index in (tfr_torch.read_index(golden(name + ".idx")),
                  tfr_torch.read_index(golden(name + ".idx"), golden(name))):
        assert isinstance(index, np.ndarray)
        assert index.dtype == np.int64
        assert index.shape == (len(records), 2)
        np.testing.assert_array_equal(index, expected)


@pytest.mark.parametrize("name", INDEXED)
def test_read_each_record_by_index_offset(name):
    records = golden_records(name)
    index = tfr_torch.read_index(golden(name + ".idx"), golden(name))
    assert len(index) == len(records)
    for i, (offset, size) in enumerate(index.tolist()):
        got, _ = _read_all(golden(name), start=offset, end=offset + size)
        assert got == [records[i]], f"record {i} at offset {offset}"
        rest, _ = _read_all(golden(name), start=offset)
        assert rest == list(records[i:]), f"records from {i} at offset {offset}"


@pytest.mark.parametrize("name", ["examples-gzip.tfrecord", "examples-zlib.tfrecord"])
def test_index_of_compressed_file_uses_decompressed_offsets(tmp_path, name):
    copy = tmp_path / name
    shutil.copyfile(golden(name), copy)
    idx = tfr_torch.build_index(copy)
    assert (tmp_path / (name + ".idx")).read_bytes() == golden("examples.tfrecord.idx").read_bytes()
    index = tfr_torch.read_index(idx, copy)
    np.testing.assert_array_equal(index, tfr_torch.read_index(golden("examples.tfrecord.idx")))

    records = golden_records("examples.tfrecord")
    for i, (offset, size) in enumerate(index.tolist()):
        got, reader = _read_all(copy, start=offset, end=offset + size)
        assert reader.compression == name.split("-")[1].split(".")[0]
        assert got == [records[i]], f"record {i} at decompressed offset {offset}"


# ----------------------------------------------------------------------------- TF's compression settings


@pytest.mark.parametrize("name, ctype, level", [c for c in EXAMPLE_FILES if c[1]])
def test_golden_compressed_files_are_tf_deflate_settings(name, ctype, level):
    """Documents why byte identity is possible: TF's streams are zlib with memLevel 9 (see the format notes)."""
    wbits = 31 if ctype == "GZIP" else 15
    z = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION if level is None else level, zlib.DEFLATED, wbits, 9, 0)
    raw = golden("examples.tfrecord").read_bytes()
    assert z.compress(raw) + z.flush() == golden(name).read_bytes()
