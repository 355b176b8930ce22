"""An audit of the prose claims of the documentation, each claim pinned by a test that exercises it.

Audited: README.md, docs/getting-started.md, docs/guides/records.md, decoding.md, from-tf-data.md,
compatibility.md, untrusted-input.md, compiled-core.md, cli.md and docs/limitations.md: stated defaults, stated
behaviours, quoted error messages, stated limits and constants, CLI flags, exit statuses and output formats, the
claims about TensorFlow 2.21 and the `tfrecord` package, and whether the limitations listed still hold. (The
pages' code blocks and quoted signatures are run and checked by tests/test_docs.py and
tests/test_docs_signatures.py; this file is about what the prose says.)

Found wrong, fixed in the docs (tests whose docstring starts "Fixed (docs)"):

- records.md said seek points are turned off by "`seek_span=`, `--seek-span`; 0/None"; `build_index(seek_span=0)`
  (and ShardedWriter) raise ValueError: in Python it is `seek_span=None`, on the command line `--seek-span 0`, and
  a span under 64 KiB is refused.
- decoding.md quoted the dtype-mismatch message without its ending: the message reads
  "... but int64 values were expected (data types don't match)".
- decoding.md's padding figures ("one record of 10**5 values among 1,000 short ones pads to a 762 MiB tensor from
  114 KB"): 762.9 MiB is a batch of 1,000 (999 short records), from 116 KB of input; 1,001 records make 764 MiB.
- getting-started.md said `make test-min` pins "the lowest versions pyproject.toml admits" for numpy and Pillow
  too: constraints/min.txt has numpy 1.23.5 (floor 1.23) and Pillow 9.3.0 (floor 9).
- compiled-core.md's layout table put `make_rlds_golden.py` and `rlds_values.json` in `tests/data/tfds/rlds/`;
  they are in `tests/data/tfds/`.

No code defect was found against what the pages promise (no xfail here).

Every other claim checked here was found true (see each test's docstring). The TensorFlow claims run in a subprocess
of the Python that TFR_TORCH_TF_PYTHON names (default /work/tfvenv/bin/python), skipped where it does not exist;
the `tfrecord` package's claims are skipped where that package is not installed.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
import zlib

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    CorruptRecordError,
    DecodeError,
    FixedLenFeature,
    FixedLenSequenceFeature,
    IndexMismatchError,
    RaggedFeature,
    RowLengths,
    SkippedRecordWarning,
    SparseFeature,
    TruncatedRecordError,
    ValueRowIds,
    VarLenFeature,
)
from tfr_torch.format.crc import masked_crc32c
from tfr_torch.tools.cli import main as cli_main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "/work/tfvenv/bin/python")
needs_tf = pytest.mark.skipif(not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow for the reference checks")
INT64 = {"x": FixedLenFeature([], torch.int64)}


# ------------------------------------------------------------------------------------------------------ helpers


def header(length: int) -> bytes:
    """A record header (length and its masked CRC-32C) claiming `length` data bytes."""
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", masked_crc32c(packed))


def write_raw(path, records, compression=None) -> bytes:
    with tfr_torch.TFRecordWriter(str(path), compression=compression) as writer:
        for record in records:
            writer.write(record)
    return open(path, "rb").read()


def write_ints(path, n: int, compression=None) -> None:
    with tfr_torch.TFRecordWriter(str(path), compression=compression) as writer:
        for i in range(n):
            writer.write_example({"x": i})


def cli(*args):
    """(exit status, stdout, stderr) of `tfr-torch ARGS` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main([str(a) for a in args])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def py(code: str, env_extra: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter of this venv with the checkout importable."""
    env = dict(os.environ, PYTHONPATH=ROOT, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


@pytest.fixture
def plain(tmp_path):
    """A plain file of five 20-byte records and its bytes."""
    path = tmp_path / "a.tfrecord"
    data = write_raw(path, [b"r%d" % i * 10 for i in range(5)])
    return path, data


# ------------------------------------------------------------------------------------------------------ README


def test_readme_format_layer_does_not_import_torch(tmp_path):
    """README.md / records.md: "the format layer does not even import torch" (it imports numpy, protobuf and
    crc32c): writing, reading, indexing and the Example codec leave torch out of sys.modules."""
    done = py("""
        import sys, tfr_torch.format as F
        with F.TFRecordWriter("f.tfrecord", compression="gzip") as w:
            w.write(F.encode_example({"a": 1, "b": [1.5], "c": "x"}))
        F.build_index("f.tfrecord")
        assert F.decode_example(next(iter(F.read_records("f.tfrecord"))))["a"].tolist() == [1]
        print("torch" in sys.modules)
    """, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_readme_the_tfrecord_package_claims(tmp_path, plain):
    """README.md's table on the `tfrecord` package: its writer writes plain files only (takes a path, no
    compression); it reads gzip but not zlib; it checks no CRC; its index tool fails on gzip; its dataset has no
    len(); MultiTFRecordDataset is endless by default."""
    pytest.importorskip("tfrecord")
    import inspect

    from tfrecord import reader, writer
    from tfrecord.tools import tfrecord2idx
    from tfrecord.torch.dataset import MultiTFRecordDataset
    from tfrecord.torch.dataset import TFRecordDataset as Theirs

    assert list(inspect.signature(writer.TFRecordWriter.__init__).parameters) == ["self", "data_path"]
    path, data = plain
    (tmp_path / "z.bin").write_bytes(zlib.compress(data))
    with pytest.raises(ValueError, match="gzip"):
        list(reader.tfrecord_iterator(str(tmp_path / "z.bin"), compression_type="zlib"))
    (tmp_path / "g.bin").write_bytes(gzip.compress(data))
    assert len(list(reader.tfrecord_iterator(str(tmp_path / "g.bin"), compression_type="gzip"))) == 5
    bad = bytearray(data)
    bad[12] ^= 1  # the first record's data: its CRC now fails
    (tmp_path / "c.bin").write_bytes(bytes(bad))
    assert len(list(reader.tfrecord_iterator(str(tmp_path / "c.bin")))) == 5  # read without a word
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tfrecord2idx.create_index(str(tmp_path / "g.bin"), str(tmp_path / "g.idx"))
    assert "Failed" in out.getvalue() and (tmp_path / "g.idx").read_text() == ""
    assert not hasattr(Theirs, "__len__")
    assert inspect.signature(MultiTFRecordDataset.__init__).parameters["infinite"].default is True


# ---------------------------------------------------------------------------------------------- getting-started


def test_getting_started_three_batches_of_96_distinct_records_shuffled(tmp_path, monkeypatch):
    """getting-started.md: "The 3 batches hold 96 different records in a shuffled order (the index allows a global
    shuffle); the 2 workers split the records between them, each record read by exactly one"."""
    from torch.utils.data import DataLoader

    monkeypatch.chdir(tmp_path)
    with tfr_torch.TFRecordWriter("train.tfrecord") as writer:
        for i in range(100):
            writer.write_example({"label": i % 10, "pixels": np.full(16, i, np.float32), "name": f"item {i}"})
    tfr_torch.build_index("train.tfrecord")
    spec = {"pixels": FixedLenFeature([16], torch.float32)}
    dataset = tfr_torch.TFRecordDataset("train.tfrecord", spec, index="auto", shuffle=True, batch_size=32,
                                        drop_last=True)
    batches = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert len(batches) == 3
    seen = [int(v) for b in batches for v in b["pixels"][:, 0]]
    assert len(seen) == 96 and len(set(seen)) == 96
    assert seen != sorted(seen)


# ------------------------------------------------------------------------------------------------------ records


def test_records_value_types_of_encode_example():
    """records.md, "Value types": bool/int and numpy bool/uint become int64_list; a uint64 above 2**63-1 is an
    error, not a wrap; float16/bfloat16 become float_list (float32); arrays are flattened row-major; an empty list
    is refused; None, complex, ragged nested lists and objects raise TypeError naming the key and the type."""
    decoded = tfr_torch.decode_example(tfr_torch.encode_example({
        "b": True, "u": np.array([7], np.uint8), "h": np.float16(1.5), "bf": torch.tensor([2.5], dtype=torch.bfloat16),
        "m": np.arange(6).reshape(2, 3), "top": np.array([2**63 - 1], np.uint64)}))
    assert decoded["b"].dtype == np.int64 and decoded["b"].tolist() == [1]
    assert decoded["u"].dtype == np.int64
    assert decoded["h"].dtype == np.float32 and decoded["bf"].tolist() == [2.5]
    assert decoded["m"].tolist() == [0, 1, 2, 3, 4, 5]
    assert decoded["top"].tolist() == [2**63 - 1]
    with pytest.raises(ValueError, match="'k'.*9223372036854775808"):
        tfr_torch.encode_example({"k": np.array([2**63], np.uint64)})
    with pytest.raises(TypeError, match="'k'.*empty list"):
        tfr_torch.encode_example({"k": []})
    for value, type_name in ((None, "NoneType"), (1j, "complex"), (object(), "object")):
        with pytest.raises(TypeError, match=f"'k'.*{type_name}"):
            tfr_torch.encode_example({"k": value})
    with pytest.raises(TypeError, match="'k'.*ragged"):
        tfr_torch.encode_example({"k": [[1, 2], [3]]})


def test_records_writer_is_atomic(tmp_path):
    """records.md / README.md: the writer's file "appears under its name only when closed successfully"; after an
    exception inside the `with` nothing is left under the name."""
    path = tmp_path / "w.tfrecord"
    writer = tfr_torch.TFRecordWriter(str(path))
    writer.write(b"a")
    assert not path.exists()
    writer.close()
    assert path.exists()
    with pytest.raises(RuntimeError), tfr_torch.TFRecordWriter(str(tmp_path / "x.tfrecord")) as writer:
        writer.write(b"a")
        raise RuntimeError
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.tfrecord"]


def test_records_reader_yields_fresh_bytes_and_detects_compression(tmp_path, plain):
    """records.md: read_records yields `bytes`, each a fresh object; `compression="auto"` uses the name (`.gz`,
    `.zz`/`.zlib`), otherwise the first bytes; multi-member gzip files are read to the end."""
    path, data = plain
    write_raw(tmp_path / "same.tfrecord", [b"same record"] * 2)
    first, second = tfr_torch.read_records(str(tmp_path / "same.tfrecord"))
    assert first == second and first is not second
    for name, payload, kind in (("n.gz", gzip.compress(data), "gzip"), ("n.zz", zlib.compress(data), "zlib"),
                                ("n.zlib", zlib.compress(data), "zlib"), ("n1.bin", gzip.compress(data), "gzip"),
                                ("n2.bin", zlib.compress(data), "zlib"), ("n3.bin", data, "none")):
        (tmp_path / name).write_bytes(payload)
        reader = tfr_torch.read_records(str(tmp_path / name))
        assert len(list(reader)) == 5 and reader.compression == kind, name
    (tmp_path / "m.gz").write_bytes(gzip.compress(data) + gzip.compress(data))
    assert len(list(tfr_torch.read_records(str(tmp_path / "m.gz")))) == 10


def test_records_bad_records_raise_skip_and_callable(tmp_path, plain):
    """records.md, "Bad records": "raise" stops after every record before the bad one; "skip" warns with
    SkippedRecordWarning and counts in reader.skipped; a callable receives each error instead of the warning;
    verify=False skips only the data CRC (the header CRC is always checked); a corrupt header in an uncompressed
    file: the reader scans forward and the region counts as one."""
    _, data = plain
    bad_data = bytearray(data)
    bad_data[36 + 12] ^= 1  # the second record's data
    (tmp_path / "d.tfrecord").write_bytes(bytes(bad_data))
    got = []
    with pytest.raises(CorruptRecordError) as info:
        for record in tfr_torch.read_records(str(tmp_path / "d.tfrecord")):
            got.append(record)
    assert got == [b"r0" * 10] and info.value.offset == 36
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = tfr_torch.read_records(str(tmp_path / "d.tfrecord"), on_error="skip")
        assert len(list(reader)) == 4 and reader.skipped == 1
    assert [w.category for w in caught] == [SkippedRecordWarning]
    assert tfr_torch.read_records(str(tmp_path / "d.tfrecord"), verify=False).__iter__().__next__() == b"r0" * 10
    assert len(list(tfr_torch.read_records(str(tmp_path / "d.tfrecord"), verify=False))) == 5
    bad_header = bytearray(data)
    bad_header[1] ^= 1  # the first record's length field
    (tmp_path / "h.tfrecord").write_bytes(bytes(bad_header))
    with pytest.raises(CorruptRecordError, match="header"):
        list(tfr_torch.read_records(str(tmp_path / "h.tfrecord"), verify=False))
    errors: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = tfr_torch.read_records(str(tmp_path / "h.tfrecord"), on_error=errors.append)
        records = list(reader)
    assert records == [b"r%d" % i * 10 for i in range(1, 5)] and reader.skipped == 1
    assert [type(e) for e in errors] == [CorruptRecordError] and caught == []


def test_records_paths_glob_characters_and_unknown_protocol(tmp_path, plain):
    """records.md: "an existing file's name is that file even when it holds glob characters (`data[1].tfrecord`)";
    "an unknown protocol a `ValueError`"; read_index checks the index against the file (IndexMismatchError)."""
    _, data = plain
    (tmp_path / "data[1].tfrecord").write_bytes(data)
    assert tfr_torch.expand_paths(str(tmp_path / "data[1].tfrecord")) == [str(tmp_path / "data[1].tfrecord")]
    with pytest.raises(ValueError, match="unknown protocol 'bogusproto'"):
        list(tfr_torch.read_records("bogusproto://bucket/x.tfrecord"))
    write_ints(tmp_path / "other.tfrecord", 3)
    tfr_torch.build_index(str(tmp_path / "other.tfrecord"))
    with pytest.raises(IndexMismatchError):
        tfr_torch.read_index(str(tmp_path / "other.tfrecord.idx"), str(tmp_path / "data[1].tfrecord"))


def test_records_seek_span_zero_is_refused_in_python(tmp_path):
    """Fixed (docs): records.md said seek points are turned off with "`seek_span=`, `--seek-span`; 0/None". In
    Python `seek_span=0` raises ValueError (a span must be at least 64 KiB, or None); None turns them off and
    removes those an earlier run left; 0 is the command line's spelling (`--seek-span 0`)."""
    path = tmp_path / "g.tfrecord.gz"
    write_ints(path, 10, "gzip")
    for bad in (0, 1 << 15):
        with pytest.raises(ValueError, match="at least 65536"):
            tfr_torch.build_index(str(path), seek_span=bad)
        with pytest.raises(ValueError, match="at least 65536"):
            tfr_torch.ShardedWriter(str(tmp_path / "out"), "n", compression="gzip", seek_span=bad)
    tfr_torch.build_index(str(path))
    assert os.path.exists(f"{path}.idx.seek")
    tfr_torch.build_index(str(path), seek_span=None)
    assert not os.path.exists(f"{path}.idx.seek")
    assert cli("index", path)[0] == 0 and os.path.exists(f"{path}.idx.seek")
    assert cli("index", path, "--seek-span", "0")[0] == 0 and not os.path.exists(f"{path}.idx.seek")
    page = open(os.path.join(ROOT, "docs", "guides", "records.md")).read()
    assert "0/None: none" not in page and "`seek_span=None` / `--seek-span 0`: none" in page


def test_records_seek_points_sidecar_format_and_random_access(tmp_path):
    """records.md, "Random access in GZIP / ZLIB files": the sidecar's 48-byte header (b"TFRSEEK1", u32 version 1,
    u32 compression 1 GZIP / 2 ZLIB, u64 span, u64 compressed file size, u64 decompressed size, u64 point count),
    a default span of 1 MiB; IndexedTFRecordDataset refuses a GZIP file without seek points, by name."""
    from tfr_torch.format.seek import DEFAULT_SPAN

    assert DEFAULT_SPAN == 1 << 20
    for compression, code in (("gzip", 1), ("zlib", 2)):
        path = tmp_path / f"s.{compression}.tfrecord"
        write_ints(path, 10, compression)
        tfr_torch.build_index(str(path), seek_span=None)
        with pytest.raises(ValueError, match=f"{path.name}.*seek points"):
            tfr_torch.IndexedTFRecordDataset(str(path), INT64)
        tfr_torch.build_index(str(path), seek_span=1 << 16)
        head = open(f"{path}.idx.seek", "rb").read()[:48]
        magic, version, kind, span, size, decompressed, points = struct.unpack("<8sIIQQQQ", head)
        framed = sum(12 + len(r) + 4 for r in tfr_torch.read_records(str(path)))
        assert (magic, version, kind, span) == (b"TFRSEEK1", 1, code, 1 << 16)
        assert size == os.path.getsize(path) and decompressed == framed and points >= 1
        dataset = tfr_torch.IndexedTFRecordDataset(str(path), INT64)
        assert len(dataset) == 10 and int(dataset[7]["x"]) == 7


# ------------------------------------------------------------------------------------------------------ decoding


def test_decoding_dtype_names_and_the_string_constant():
    """decoding.md: TensorFlow's names "float32", "int64", "string" work; a spec's dtype is tfr_torch.string
    whichever spelling ("string", "tf.string", "bytes", bytes, str), and it equals only itself (not "string");
    partitions are reachable as tfr_torch.RaggedFeature.RowLengths etc."""
    assert FixedLenFeature([], "float32").dtype == torch.float32
    assert FixedLenFeature([], "int64").dtype == torch.int64
    for spelling in ("string", "tf.string", "bytes", bytes, str):
        assert FixedLenFeature([], spelling).dtype is tfr_torch.string
    assert tfr_torch.string != "string" and tfr_torch.string == tfr_torch.string
    for name in ("RowLengths", "RowSplits", "RowStarts", "RowLimits", "ValueRowIds", "UniformRowLength"):
        assert getattr(RaggedFeature, name) is getattr(tfr_torch, name)


def test_decoding_narrowing_conversions():
    """decoding.md: int64 -> int32/int16/int8/uint8/bool and float32 -> float16/bfloat16/float64 convert; "an
    integer that does not fit raises DecodeError naming the key and the value"."""
    records = [tfr_torch.encode_example({"i": 1, "f": 0.5})]
    for dtype in (torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool):
        assert tfr_torch.parse_example(records, {"i": FixedLenFeature([], dtype)})["i"].dtype == dtype
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        assert tfr_torch.parse_example(records, {"f": FixedLenFeature([], dtype)})["f"].tolist() == [0.5]
    with pytest.raises(DecodeError, match="'v'.*300") as info:
        tfr_torch.parse_example([tfr_torch.encode_example({"v": 300})], {"v": FixedLenFeature([], torch.uint8)})
    assert info.value.key == "v"


def test_decoding_quoted_error_message_with_location():
    """Fixed (docs): decoding.md quoted `train.tfrecord:1234: feature 'label' in example 7 holds float values but
    int64 values were expected`; the message goes on with " (data types don't match)". A string name is shown as
    `example 7 (my name)`; the DecodeError carries .key, .index, .step (None here) and .path/.offset."""
    records = [tfr_torch.encode_example({"label": 1})] * 7 + [tfr_torch.encode_example({"label": 1.5})]
    names = [tfr_torch.RecordLocation("train.tfrecord", 1234)] * 8
    with pytest.raises(DecodeError) as info:
        tfr_torch.parse_example(records, {"label": FixedLenFeature([], torch.int64)}, example_names=names)
    assert str(info.value) == ("train.tfrecord:1234: feature 'label' in example 7 holds float values but int64 "
                               "values were expected (data types don't match)")
    assert (info.value.key, info.value.index, info.value.step) == ("label", 7, None)
    assert (info.value.path, info.value.offset) == ("train.tfrecord", 1234)
    page = " ".join(open(os.path.join(ROOT, "docs", "guides", "decoding.md")).read().split())
    assert f"`{info.value}`" in page
    with pytest.raises(DecodeError, match=r"in example 7 \(my name\) holds float"):
        tfr_torch.parse_example(records, {"label": FixedLenFeature([], torch.int64)},
                                example_names=[f"n{i}" for i in range(7)] + ["my name"])


def test_decoding_position_of_a_malformed_record():
    """untrusted-input.md / decoding.md: DecodeError's `.position` is the byte offset of the problem inside the
    record (here byte 1: a features message longer than what remains)."""
    with pytest.raises(DecodeError) as info:
        tfr_torch.decode_example(b"\x0a\x05\x0a\x03\x0a\x01")
    assert info.value.position == 1


def test_decoding_tensorflow_semantics_and_stricter_checks():
    """decoding.md: an empty FixedLen list is an error even with a default; FixedLenSequenceFeature in Example
    specs needs allow_missing=True; a context takes no FixedLenSequenceFeature; ragged partitions are always
    validated; SparseFeature per-example index/value count mismatches are errors; two specs may read one key, but
    not as two different dtypes."""
    empty = tfr_torch.encode_example({"v": np.array([], np.int64)})
    with pytest.raises(DecodeError, match="empty list.*even with a default_value"):
        tfr_torch.parse_example([empty], {"v": FixedLenFeature([], torch.int64, default_value=3)})
    with pytest.raises(ValueError, match="allow_missing=True"):
        tfr_torch.parse_example([empty], {"v": FixedLenSequenceFeature([], torch.int64)})
    with pytest.raises(TypeError, match="FixedLenSequenceFeature"):
        tfr_torch.SequenceFeatures(context={"v": FixedLenSequenceFeature([], torch.int64, allow_missing=True)})
    inconsistent = tfr_torch.encode_example({"v": [1, 2], "l": [5]})
    with pytest.raises(DecodeError, match="invalid partition RowLengths"):
        tfr_torch.parse_example([inconsistent], {"r": RaggedFeature(torch.int64, value_key="v",
                                                                      partitions=[RowLengths("l")])})
    sparse = [tfr_torch.encode_example({"idx": [0, 1], "val": [5]}),
              tfr_torch.encode_example({"idx": [0], "val": [6, 7]})]
    with pytest.raises(DecodeError, match="example 0 has 2 indices"):
        tfr_torch.parse_example(sparse, {"s": SparseFeature("idx", "val", torch.int64, 4)})
    record = tfr_torch.encode_example({"x": [1, 2, 3]})
    both = tfr_torch.parse_example([record], {"x": VarLenFeature(torch.int64),
                                              "r": RaggedFeature(torch.int64, value_key="x")})
    assert both["x"].to_dense().tolist() == [[1, 2, 3]]
    with pytest.raises(ValueError, match="reads key 'x' as int64 but 'r' reads it as float"):
        tfr_torch.parse_example([record], {"x": VarLenFeature(torch.int64),
                                           "r": RaggedFeature(torch.float32, value_key="x")})


def test_decoding_sequence_feature_of_shape_zero_decodes():
    """decoding.md: a FixedLenSequenceFeature of shape [0] (on which TensorFlow 2.21 stops with SIGFPE, checked in
    test_tensorflow_claims_crash) decodes in tfr_torch; a Feature with no kind inside a FeatureList decodes as None
    (limitations.md)."""
    from tfr_torch.format._proto import example_pb2

    message = example_pb2.SequenceExample()
    message.feature_lists.feature_list["s"].feature.add().int64_list.SetInParent()
    _, lists, lengths = tfr_torch.parse_sequence_example([message.SerializeToString()], None,
                                                         {"s": FixedLenSequenceFeature([0], torch.int64)})
    assert lists["s"].shape == (1, 1, 0) and lengths["s"].tolist() == [1]
    message = example_pb2.SequenceExample()
    message.feature_lists.feature_list["s"].feature.add()
    message.feature_lists.feature_list["s"].feature.add().int64_list.value.append(3)
    _, lists = tfr_torch.decode_sequence_example(message.SerializeToString())
    assert lists["s"][0] is None and lists["s"][1].tolist() == [3]


# ------------------------------------------------------------------------------------------------- from-tf-data


def test_from_tf_data_rows(tmp_path):
    """from-tf-data.md: `len(dataset)` without counts is "a TypeError saying so"; a glob skips side files (the
    index beside the shard); decode_raw's result is writable; decode_image gives [C, H, W];
    decode_json_example gives nested lists of bytes for a list."""
    from PIL import Image

    write_ints(tmp_path / "d-0.tfrecord", 4)
    with pytest.raises(TypeError, match="length of this TFRecordDataset is unknown.*index"):
        len(tfr_torch.TFRecordDataset(str(tmp_path / "d-0.tfrecord"), INT64))
    tfr_torch.build_index(str(tmp_path / "d-0.tfrecord"))
    assert [int(r["x"]) for r in tfr_torch.TFRecordDataset(str(tmp_path / "d-*"), INT64)] == [0, 1, 2, 3]
    raw = tfr_torch.decode_raw(b"\x01\x02\x03\x04", torch.uint8)
    raw[0] = 9
    assert raw.tolist() == [9, 2, 3, 4]
    buffer = io.BytesIO()
    Image.new("RGB", (5, 3)).save(buffer, "PNG")
    assert tuple(tfr_torch.decode_image(buffer.getvalue(), mode="RGB").shape) == (3, 3, 5)
    example = json.dumps({"features": {"feature": {"a": {"int64List": {"value": ["1"]}}}}})
    nested = tfr_torch.decode_json_example([[example], [example, example]])
    assert [[type(b) for b in row] for row in nested] == [[bytes], [bytes, bytes]]
    with pytest.raises(DecodeError, match="item 1"):
        tfr_torch.decode_json_example([example, "{bad"])


# ------------------------------------------------------------------------------------------------ compatibility


def test_compatibility_case_counts():
    """compatibility.md / compiled-core.md: 93 + 47 + 18 + 27 cases re-expressed from parsing_ops_test.py,
    parse_single_example_op_test.py, decode_raw_op_test.py and tf_record_test.py plus 31 decode_json_example edge
    cases (216 in all); 162 parse-family cases; 31 non-canonical Examples, recorded with TensorFlow 2.21.0."""
    golden = os.path.join(ROOT, "tests", "data", "golden")
    cases = json.load(open(os.path.join(golden, "tf_tests", "cases.json")))
    counts: dict[str, int] = {}
    for case in cases:
        key = os.path.basename(case["source"])
        counts[key] = counts.get(key, 0) + 1
    assert counts == {"parsing_ops_test.py": 93, "parse_single_example_op_test.py": 47, "decode_raw_op_test.py": 18,
                      "tf_record_test.py": 27, "extra": 31}
    assert all(c["api"] == "decode_json_example" for c in cases if c["source"] == "extra")
    assert len(json.load(open(os.path.join(golden, "parse", "cases.json")))) == 162
    strict = json.load(open(os.path.join(golden, "strict.json")))
    assert len(strict["cases"]) == 31 and strict["tensorflow"] == "2.21.0"


def test_compatibility_writer_use_after_close_and_subnormals_kept(tmp_path):
    """compatibility.md: TFRecordWriter use after close raises ValueError; decode_json_example keeps subnormal
    floats (TensorFlow flushes them to zero: test_tensorflow_claims)."""
    writer = tfr_torch.TFRecordWriter(str(tmp_path / "c.tfrecord"))
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"x")
    example = json.dumps({"features": {"feature": {"f": {"floatList": {"value": [1e-40]}}}}})
    value = tfr_torch.decode_example(tfr_torch.decode_json_example(example))["f"][0]
    assert value != 0 and value == np.float32(1e-40)


# ------------------------------------------------------------------------------------------------ untrusted input


def test_untrusted_lengths_checked_before_allocation(tmp_path):
    """untrusted-input.md: "A length field that claims more bytes than the file holds raises before anything is
    allocated"; MAX_RECORD_BYTES (1 GiB) bounds a record of a GZIP file; CorruptRecordError/TruncatedRecordError
    carry .path and .offset."""
    from tfr_torch.format.limits import MAX_RECORD_BYTES

    assert MAX_RECORD_BYTES == 1 << 30
    (tmp_path / "big.tfrecord").write_bytes(header(10**15) + b"x" * 100)
    (tmp_path / "big.gz").write_bytes(gzip.compress(header(MAX_RECORD_BYTES + 1) + b"x" * 100))
    tracemalloc.start()
    try:
        with pytest.raises(TruncatedRecordError) as info:
            list(tfr_torch.read_records(str(tmp_path / "big.tfrecord")))
        assert (info.value.path, info.value.offset) == (str(tmp_path / "big.tfrecord"), 0)
        with pytest.raises(tfr_torch.TFRecordError, match="MAX_RECORD_BYTES"):
            list(tfr_torch.read_records(str(tmp_path / "big.gz")))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_untrusted_what_tensorflow_accepts_silently_is_reported(tmp_path, plain):
    """untrusted-input.md: "The reader also reports what TensorFlow silently accepts: trailing bytes shorter than a
    record header, and data after the end of a ZLIB stream" (TensorFlow's side: test_tensorflow_claims)."""
    _, data = plain
    (tmp_path / "t.tfrecord").write_bytes(data + b"abc")
    with pytest.raises(TruncatedRecordError, match="3 trailing bytes"):
        list(tfr_torch.read_records(str(tmp_path / "t.tfrecord")))
    (tmp_path / "t.zlib").write_bytes(zlib.compress(data) + b"junk")
    with pytest.raises(CorruptRecordError, match="end of the ZLIB stream"):
        list(tfr_torch.read_records(str(tmp_path / "t.zlib")))


def test_untrusted_limits_table():
    """untrusted-input.md, the limits: parse_tensor's max_bytes default 256 MiB refuses a broadcast beyond it
    (a tensor stored in full is never refused); MAX_EMPTY_ROWS is 65,536 and a row id of 10**12 is refused."""
    from tfr_torch.decode.ragged import MAX_EMPTY_ROWS
    from tfr_torch.format._proto import tensor_pb2
    from tfr_torch.format.tensor import MAX_TENSOR_BYTES

    assert MAX_TENSOR_BYTES == 256 << 20 and MAX_EMPTY_ROWS == 65_536
    proto = tensor_pb2.TensorProto(dtype=1)  # DT_FLOAT
    proto.tensor_shape.dim.add().size = 1 << 28
    proto.float_val.append(1.0)
    with pytest.raises(DecodeError, match="max_bytes=268435456"):
        tfr_torch.parse_tensor(proto.SerializeToString())
    full = tfr_torch.serialize_tensor(torch.zeros(1 << 19))  # 2 MiB stored in full
    assert tfr_torch.parse_tensor(full, max_bytes=1 << 20).shape == (1 << 19,)
    record = tfr_torch.encode_example({"v": [1, 2], "rid": [0, 10**12]})
    with pytest.raises(DecodeError, match="MAX_EMPTY_ROWS"):
        tfr_torch.parse_example([record], {"r": RaggedFeature(torch.int64, value_key="v",
                                                                partitions=[ValueRowIds("rid")])})


def test_untrusted_error_from_a_dataloader_worker_keeps_class_and_attributes(tmp_path, plain):
    """untrusted-input.md: "An error raised in a DataLoader worker reaches the main process as the same class with
    all of these attributes"."""
    from torch.utils.data import DataLoader

    _, data = plain
    bad = bytearray(data)
    bad[36 + 12] ^= 1
    (tmp_path / "bad.tfrecord").write_bytes(bytes(bad))
    dataset = tfr_torch.TFRecordDataset(str(tmp_path / "bad.tfrecord"))
    with pytest.raises(CorruptRecordError) as info:
        list(DataLoader(dataset, batch_size=None, num_workers=1))
    assert (info.value.path, info.value.offset) == (str(tmp_path / "bad.tfrecord"), 36)


# ------------------------------------------------------------------------------------------------ compiled core


def test_compiled_core_backend_switches(tmp_path):
    """compiled-core.md: backend() says "native" or "python"; TFR_TORCH_NATIVE=0 starts on the reference and
    `python -m tfr_torch --version` prints the backend and why; set_backend switches at once and sets
    TFR_TORCH_NATIVE for workers started later; TFR_TORCH_INFLATE=zlib forces zlib; the file is read 128 KiB at
    a time and inflated in pieces of at most 1 MiB."""
    done = py("import tfr_torch; print(tfr_torch.backend())", {"TFR_TORCH_NATIVE": "0"})
    assert done.stdout.strip() == "python"
    version = subprocess.run([sys.executable, "-m", "tfr_torch", "--version"], capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=ROOT, TFR_TORCH_NATIVE="0"), timeout=120)
    assert "backend: python" in version.stdout and "TFR_TORCH_NATIVE=0" in version.stdout
    done = py("""
        import os, tfr_torch, tfr_torch.format.inflate as I
        before = tfr_torch.backend()
        previous = tfr_torch.set_backend("python")
        print(before, previous, tfr_torch.backend(), os.environ["TFR_TORCH_NATIVE"], I.INFLATE, I._READ, I._PIECE)
    """, {"TFR_TORCH_INFLATE": "zlib"})
    before, previous, now, env, inflate, read, piece = done.stdout.split()
    assert before in ("native", "python") and previous == before and now == "python" and env == "0"
    assert (inflate, int(read), int(piece)) == ("zlib", 128 << 10, 1 << 20)


def test_compiled_core_inflate_thread_refuses_a_forked_child(tmp_path):
    """compiled-core.md: with TFR_TORCH_INFLATE_THREAD=1, "a reader that started one refuses (RuntimeError) to go
    on in a forked child"; records are the same either way."""
    path = tmp_path / "t.gz"
    records = [os.urandom(64 << 10) for _ in range(64)]
    write_raw(path, records, "gzip")
    done = py(f"""
        import os, tfr_torch
        reader = iter(tfr_torch.read_records({str(path)!r}))
        first = next(reader)
        pid = os.fork()
        if pid == 0:
            try:
                list(reader)
            except RuntimeError as e:
                os._exit(0 if "forked" in str(e) else 2)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        rest = list(reader)
        print(os.waitstatus_to_exitcode(status), len(rest) + 1)
    """, {"TFR_TORCH_INFLATE_THREAD": "1"})
    assert done.stdout.split() == ["0", "64"], done.stderr


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_defaults_and_exit_statuses(tmp_path, plain):
    """cli.md: `head` prints 10 records by default; exit status 1 for a missing file or a pattern matching nothing
    (count going on with the next file); 2 with one `tfr-torch COMMAND: error:` line for --compression bogus,
    -n -1, a missing --out-dir, --tfds with --compression, --tfds-version without --tfds or not X.Y.Z, an unknown
    protocol, and a side file in the list; verify reports on stdout and goes on; nothing drawn on stderr in a
    pipe."""
    write_ints(tmp_path / "many.tfrecord", 12)
    rc, out, err = cli("head", tmp_path / "many.tfrecord")
    assert rc == 0 and len(out.splitlines()) == 10
    rc, out, err = cli("count", tmp_path / "missing.tfrecord", tmp_path / "many.tfrecord")
    assert rc == 1 and "12\t" in out and "missing.tfrecord" in err
    assert cli("count", tmp_path / "nomatch*.tfrecord")[0] == 1
    tfr_torch.build_index(str(tmp_path / "many.tfrecord"))
    for args in (("count", tmp_path / "many.tfrecord", "--compression", "bogus"),
                 ("head", tmp_path / "many.tfrecord", "-n", "-1"),
                 ("index", tmp_path / "many.tfrecord", "--out-dir", tmp_path / "nodir"),
                 ("reshard", tmp_path / "many.tfrecord", "--out", tmp_path / "o", "--tfds", "--compression", "gzip"),
                 ("reshard", tmp_path / "many.tfrecord", "--out", tmp_path / "o", "--tfds-version", "1.0.0"),
                 ("reshard", tmp_path / "many.tfrecord", "--out", tmp_path / "o", "--tfds", "--tfds-version", "1.0"),
                 ("count", "bogusproto://x/y.tfrecord"),
                 ("count", tmp_path / "many.tfrecord", tmp_path / "many.tfrecord.idx")):
        rc, out, err = cli(*args)
        assert rc == 2, args
        assert len(err.strip().splitlines()) == 1 and err.startswith(f"tfr-torch {args[0]}: error:"), (args, err)
    _, data = plain
    bad = bytearray(data)
    bad[12] ^= 1
    (tmp_path / "bad.tfrecord").write_bytes(bytes(bad))
    rc, out, err = cli("verify", tmp_path / "bad.tfrecord", tmp_path / "many.tfrecord")
    assert rc == 1 and err == ""
    assert out.splitlines()[0].startswith(f"{tmp_path / 'bad.tfrecord'}:0: ") and "OK, 12 records" in out
    assert cli("count", tmp_path / "many.tfrecord")[2] == ""


def test_cli_head_json_lines(tmp_path):
    """cli.md, `head`: {"file", "offset", "example": {key: {"int64": [...]}}}; keys sorted; bytes as UTF-8 text or
    {"base64": ...}; NaN and infinities as strings; int64 exactly past 2**53; bytes over 64 bytes and lists over 32
    values cut with "truncated": true and their "length" / "count"; feature lists over 32 steps as {"steps",
    "count", "truncated"}; "tensor" with dtype, shape, values; `--as example` on a serialize_tensor payload is a
    problem line (status 1); `--full` prints everything."""
    path = tmp_path / "h.tfrecord"
    with tfr_torch.TFRecordWriter(str(path)) as writer:
        writer.write_example({"z": [2**62 + 1], "b": [b"x" * 65, "h\u00e9".encode(), b"\xff"],
                              "f": np.array([0.1, np.nan, np.inf], np.float32), "long": np.arange(40)})
        writer.write_sequence_example({"c": 1}, {"s": [[i] for i in range(40)]})
        writer.write(tfr_torch.serialize_tensor(np.arange(6, dtype=np.int32).reshape(2, 3)))
    rc, out, _ = cli("head", path)
    example, sequence, tensor = map(json.loads, out.splitlines())
    assert rc == 0 and example["file"] == str(path) and example["offset"] == 0
    features = example["example"]
    assert list(features) == ["b", "f", "long", "z"]
    assert features["z"] == {"int64": [2**62 + 1]}
    assert features["b"]["bytes"][0] == {"text": "x" * 64, "length": 65, "truncated": True}
    assert features["b"]["bytes"][1:] == ["h\u00e9", {"base64": "/w=="}]
    assert features["f"] == {"float": [0.1, "NaN", "Infinity"]}
    assert features["long"] == {"int64": list(range(32)), "count": 40, "truncated": True}
    steps = sequence["sequence_example"]["feature_lists"]["s"]
    assert len(steps["steps"]) == 32 and steps["count"] == 40 and steps["truncated"] is True
    assert tensor["tensor"] == {"dtype": "int32", "shape": [2, 3], "values": [0, 1, 2, 3, 4, 5]}
    full = json.loads(cli("head", path, "--full")[1].splitlines()[0])["example"]
    assert full["long"] == {"int64": list(range(40))}
    rc, _, err = cli("head", path, "--as", "example")
    assert rc == 1 and "serialize_tensor" in err


def test_cli_head_escapes_where_stdout_is_not_utf8(tmp_path):
    """cli.md: "Each line is valid JSON in UTF-8 (with \\u escapes where stdout's encoding is not UTF-8 ...)"."""
    path = tmp_path / "u.tfrecord"
    with tfr_torch.TFRecordWriter(str(path)) as writer:
        writer.write_example({"t": "h\u00e9llo"})
    done = subprocess.run([sys.executable, "-m", "tfr_torch", "head", str(path)], capture_output=True,
                          env=dict(os.environ, PYTHONPATH=ROOT, PYTHONIOENCODING="ascii"), timeout=120)
    assert done.returncode == 0 and b"h\\u00e9llo" in done.stdout
    assert json.loads(done.stdout)["example"]["t"]["bytes"] == ["h\u00e9llo"]


@pytest.mark.parametrize("signum, status, word", [(signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGTERM, 143, "terminated")])
def test_cli_interrupted_and_terminated(tmp_path, signum, status, word):
    """cli.md: Ctrl-C stops a command with one line, `tfr-torch COMMAND: interrupted`, and status 130; SIGTERM the
    same with `terminated` and 143 (here `count` blocked on a FIFO)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    child = subprocess.Popen([sys.executable, "-m", "tfr_torch", "count", str(fifo)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        with open(fifo, "wb") as writer:  # returns once the command has opened the FIFO to read it
            writer.write(header(100))
            writer.flush()
            child.send_signal(signum)
            _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == status
    assert err.strip().splitlines() == [f"tfr-torch count: {word}"]


def test_cli_reshard(tmp_path):
    """cli.md, `reshard`: name and split from the input file name (`mnist-test.tfrecord-00000-of-00004` gives
    mnist and test); `--num-shards N` makes exactly N shards, the first ones one more where the count does not
    divide; more shards than records is an error; it refuses to write over its own input."""
    source = tmp_path / "in" / "mnist-test.tfrecord-00000-of-00004"
    source.parent.mkdir()
    write_ints(source, 10)
    rc, _, err = cli("reshard", source, "--out", tmp_path / "out", "--num-shards", "4", "-q")
    assert rc == 0, err
    shards = sorted(p for p in os.listdir(tmp_path / "out") if "-of-" in p and not p.endswith(".idx"))
    assert shards == [f"mnist-test.tfrecord-{i:05d}-of-00004" for i in range(4)]
    counts = [sum(1 for _ in tfr_torch.read_records(str(tmp_path / "out" / s))) for s in shards]
    assert counts == [3, 3, 2, 2]
    rc, _, err = cli("reshard", source, "--out", tmp_path / "out2", "--num-shards", "11", "-q")
    assert rc == 1 and "num_shards=11 but the inputs hold 10 record(s)" in err
    rc, _, err = cli("reshard", source, "--out", tmp_path / "in", "-q")
    assert rc == 2 and "write over their input" in err


def test_cli_inspect_compressed_pipe_bytes_unknown(tmp_path, plain):
    """cli.md, `inspect`: the bytes of a file; for a pipe the bytes read from it; `unknown` for a compressed
    pipe."""
    _, data = plain
    (tmp_path / "g.tfrecord.gz").write_bytes(gzip.compress(data))
    rc, out, _ = cli("inspect", tmp_path / "g.tfrecord.gz")
    assert rc == 0 and f"\t5\t{os.path.getsize(tmp_path / 'g.tfrecord.gz')}\tgzip" in out
    read_end, write_end = os.pipe()
    os.write(write_end, gzip.compress(data))
    os.close(write_end)
    try:
        rc, out, _ = cli("inspect", f"/dev/fd/{read_end}")
    finally:
        os.close(read_end)
    assert rc == 0 and "\t5\tunknown\tgzip" in out


# ------------------------------------------------------------------------------------------------ limitations


def test_limitations_still_hold(tmp_path):
    """limitations.md: TensorProto dtypes outside the common set (DT_QINT8) raise DecodeError; decode_image: CMYK
    becomes RGB, Pillow modes I and F raise DecodeError; a URL as CachedDataset's folder is refused."""
    from PIL import Image

    from tfr_torch.format._proto import tensor_pb2

    proto = tensor_pb2.TensorProto(dtype=11, tensor_content=b"\x01\x02")  # DT_QINT8
    proto.tensor_shape.dim.add().size = 2
    with pytest.raises(DecodeError, match="DT_QINT8"):
        tfr_torch.parse_tensor(proto.SerializeToString())
    buffer = io.BytesIO()
    Image.new("CMYK", (5, 3)).save(buffer, "JPEG")
    assert tuple(tfr_torch.decode_image(buffer.getvalue()).shape) == (3, 3, 5)
    for mode in ("I", "F"):
        buffer = io.BytesIO()
        Image.new(mode, (5, 3)).save(buffer, "TIFF")
        with pytest.raises(DecodeError, match=f"mode {mode}"):
            tfr_torch.decode_image(buffer.getvalue())
    write_ints(tmp_path / "c.tfrecord", 2)
    with pytest.raises(ValueError, match="local folder"):
        tfr_torch.CachedDataset(tfr_torch.TFRecordDataset(str(tmp_path / "c.tfrecord"), INT64), "s3://bucket/c")


# ------------------------------------------------------------------------------------------------ TensorFlow


_TF_SCRIPT = r"""
import gzip, io, json, os, sys, zlib
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np
import tensorflow as tf

folder = sys.argv[1]
data = open(os.path.join(folder, "plain.tfrecord"), "rb").read()
out = {}

def records(name, kind=""):
    return len([1 for _ in tf.data.TFRecordDataset(os.path.join(folder, name), compression_type=kind)])

def error(f):
    try:
        f()
        return None
    except Exception as e:
        return type(e).__name__ + ": " + str(e)

open(os.path.join(folder, "t.tfrecord"), "wb").write(data + b"abc")
open(os.path.join(folder, "t.zlib"), "wb").write(zlib.compress(data) + b"junk")
open(os.path.join(folder, "m.gz"), "wb").write(gzip.compress(data) + gzip.compress(data))
out["trailing"] = records("t.tfrecord")
out["zlib_trailing"] = records("t.zlib", "ZLIB")
out["multi_member"] = records("m.gz", "GZIP")

def example(**features):
    return tf.train.Example(features=tf.train.Features(feature={
        k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in features.items()})).SerializeToString()

empty = example(v=[])
out["empty_default"] = error(lambda: tf.io.parse_example(
    [empty], {"v": tf.io.FixedLenFeature([], tf.int64, default_value=3)}))
out["fls_allow_missing"] = error(lambda: tf.io.parse_example(
    [empty], {"v": tf.io.FixedLenSequenceFeature([], tf.int64)}))
out["context_fls"] = error(lambda: tf.io.parse_sequence_example(empty, context_features={
    "v": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True)}))
out["row_lengths_attr"] = tf.io.RaggedFeature.RowLengths.__name__
ragged = tf.io.parse_example([example(v=[1, 2], l=[5])], {"r": tf.io.RaggedFeature(
    tf.int64, value_key="v", partitions=[tf.io.RaggedFeature.RowLengths("l")])})["r"]
out["ragged_unvalidated"] = [s.numpy().tolist() for s in ragged.nested_row_splits]
sparse = tf.io.parse_example([example(idx=[0, 1], val=[5]), example(idx=[0], val=[6, 7])],
                             {"s": tf.io.SparseFeature("idx", "val", tf.int64, 4)})["s"]
out["sparse_batch_totals"] = sparse.values.numpy().tolist()
from PIL import Image
buffer = io.BytesIO(); Image.new("RGB", (5, 3)).save(buffer, "PNG")
out["decode_image_shape"] = tf.io.decode_image(buffer.getvalue(), channels=3).shape.as_list()
j = json.dumps({"features": {"feature": {"f": {"floatList": {"value": [1e-40]}}}}})
parsed = tf.train.Example.FromString(tf.io.decode_json_example(j).numpy())
out["json_subnormal"] = parsed.features.feature["f"].float_list.value[0]
for level in range(1, 10):
    for kind in ("GZIP", "ZLIB"):
        options = tf.io.TFRecordOptions(compression_type=kind, compression_level=level)
        with tf.io.TFRecordWriter(os.path.join(folder, f"tf-{kind}-{level}.tfrecord"), options) as w:
            for i in range(50):
                w.write(b"payload %d " % i * (i + 1))
sys.path.insert(0, sys.argv[2])
import tfr_torch
out["tfr_torch_next_to_tf"] = tfr_torch.decode_example(tfr_torch.encode_example({"a": 1}))["a"].tolist()
out["tfrecord_next_to_tf"] = error(lambda: __import__("tfrecord"))
print(json.dumps(out))
"""


@needs_tf
def test_tensorflow_claims(tmp_path, plain):
    """Claims about TensorFlow 2.21, checked in one TensorFlow subprocess:
    untrusted-input.md: TF silently accepts trailing bytes shorter than a header and data after a ZLIB stream;
    records.md: TF reads multi-member gzip files to the end; tfr_torch's writer is byte-identical to
    tf.io.TFRecordWriter with GZIP/ZLIB at levels 1-9; tfr_torch imports cleanly next to TensorFlow and the
    `tfrecord` package does not; decoding.md: an empty FixedLen list with a default is an error in TF, Example specs
    need allow_missing=True, a context refuses FixedLenSequenceFeature, RaggedFeature.RowLengths exists, TF builds
    inconsistent ragged tensors (validate=False) and checks SparseFeature counts by batch totals only;
    from-tf-data.md: tf.io.decode_image gives [H, W, C]; compatibility.md: TF's decode_json_example flushes
    subnormals to zero."""
    _, data = plain
    (tmp_path / "plain.tfrecord").write_bytes(data)
    done = subprocess.run([TF_PYTHON, "-c", _TF_SCRIPT, str(tmp_path), ROOT], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["trailing"], out["zlib_trailing"], out["multi_member"]) == (5, 5, 10)
    assert out["empty_default"].startswith("InvalidArgumentError")
    assert "FixedLenSequenceFeature requires allow_missing to be True" in out["fls_allow_missing"]
    assert out["context_fls"].startswith("ValueError") and "FixedLenSequenceFeature" in out["context_fls"]
    assert out["row_lengths_attr"] == "RowLengths"
    assert out["ragged_unvalidated"] == [[0, 1], [0, 5]]  # one row of 5 values over 2 values
    assert out["sparse_batch_totals"] == [5, 6, 7]
    assert out["decode_image_shape"] == [3, 5, 3]
    assert out["json_subnormal"] == 0.0
    assert out["tfr_torch_next_to_tf"] == [1]
    assert "duplicate symbol" in (out["tfrecord_next_to_tf"] or "imported cleanly")
    for level in range(1, 10):
        for kind in ("GZIP", "ZLIB"):
            mine = tmp_path / f"me-{kind}-{level}.tfrecord"
            with tfr_torch.TFRecordWriter(str(mine), compression=kind.lower(), compression_level=level) as writer:
                for i in range(50):
                    writer.write(b"payload %d " % i * (i + 1))
            assert mine.read_bytes() == (tmp_path / f"tf-{kind}-{level}.tfrecord").read_bytes(), (kind, level)


@needs_tf
def test_tensorflow_claims_crash(tmp_path):
    """decoding.md: "TensorFlow 2.21 stops with SIGFPE on a FixedLenSequenceFeature of shape [0]"."""
    script = textwrap.dedent("""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf
        message = tf.train.SequenceExample()
        message.feature_lists.feature_list["s"].feature.add().int64_list.SetInParent()
        tf.io.parse_sequence_example([message.SerializeToString()],
                                     sequence_features={"s": tf.io.FixedLenSequenceFeature([0], tf.int64)})
        print("no crash")
    """)
    done = subprocess.run([TF_PYTHON, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGFPE


# ------------------------------------------------------------------------------------------------ more claims


def test_getting_started_min_versions_are_not_all_the_floors():
    """Fixed (docs): getting-started.md said `make test-min` runs against "the lowest versions pyproject.toml admits
    for numpy, protobuf, crc32c, Pillow and tqdm"; constraints/min.txt pins protobuf, crc32c and tqdm at their
    floors but numpy 1.23.5 (floor 1.23) and Pillow 9.3.0 (floor 9). Also: TORCH_SPEC defaults to torch==2.13.0,
    `make fuzz` runs each harness 480 s (8 minutes) and `make fuzz-ci` 30 s."""
    import re

    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    floors = dict(re.findall(r'^\s*"(numpy|protobuf|crc32c|pillow|tqdm)>=([0-9.]+)"', pyproject, re.M))
    pins = dict(re.findall(r"^(numpy|protobuf|crc32c|pillow|tqdm)==([0-9.]+)$",
                           open(os.path.join(ROOT, "constraints", "min.txt")).read(), re.M))
    assert floors == {"numpy": "1.23", "protobuf": "4.25", "crc32c": "2.3", "pillow": "9", "tqdm": "4.60"}
    assert pins == {"numpy": "1.23.5", "protobuf": "4.25.0", "crc32c": "2.3", "pillow": "9.3.0", "tqdm": "4.60.0"}
    page = open(os.path.join(ROOT, "docs", "getting-started.md")).read()
    assert "numpy (1.23.5) and Pillow (9.3.0" in page
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    assert "TORCH_SPEC ?= torch==2.13.0" in makefile and "FUZZ_SECONDS ?= 480" in makefile
    assert "fuzz/run.py --seconds 30" in makefile


def test_from_tf_data_len_counts_batches_with_batch_size(tmp_path):
    """from-tf-data.md, `.cardinality()`: `len(dataset)` is the records, or the batches with `batch_size` (known
    from indexes with index="auto")."""
    write_ints(tmp_path / "b.tfrecord", 10)
    tfr_torch.build_index(str(tmp_path / "b.tfrecord"))
    path = str(tmp_path / "b.tfrecord")
    assert len(tfr_torch.TFRecordDataset(path, INT64, index="auto")) == 10
    assert len(tfr_torch.TFRecordDataset(path, INT64, index="auto", batch_size=3)) == 4
    assert len(tfr_torch.TFRecordDataset(path, INT64, index="auto", batch_size=3, drop_last=True)) == 3


def test_records_a_failed_gzip_stream_reports_what_was_skipped(tmp_path):
    """records.md, "Bad records": in a GZIP file a record whose data CRC fails is skipped alone (the stream goes
    on), a stream that fails costs an estimate of at least one record, and each error carries skipped_records,
    skipped_estimated, skipped_range and skipped_file_range; reader.skipped is their sum."""
    import random

    rng = random.Random(0)
    path = tmp_path / "g.tfrecord.gz"
    write_raw(path, [bytes(rng.getrandbits(8) for _ in range(1000)) for _ in range(200)], "gzip")
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    errors: list = []
    reader = tfr_torch.read_records(str(path), on_error=errors.append)
    records = list(reader)
    assert errors and all(isinstance(e, CorruptRecordError) for e in errors)
    assert all(e.skipped_records >= 1 for e in errors)
    assert reader.skipped == sum(e.skipped_records for e in errors)
    assert len(records) + sum(e.skipped_records for e in errors if not e.skipped_estimated) <= 200
    for error in errors:
        assert len(error.skipped_range) == 2
        assert error.skipped_file_range is None or len(error.skipped_file_range) == 2


def test_cli_schema_comment_and_partial_keys(tmp_path):
    """cli.md, `schema`: reads --max-records records spread over every file, says in a comment how many records of
    how many files it read, and marks the keys that not every record carries (they become VarLenFeature)."""
    with tfr_torch.TFRecordWriter(str(tmp_path / "s1.tfrecord")) as writer:
        for i in range(6):
            writer.write_example({"a": i, **({"b": [1.0]} if i % 2 else {})})
    with tfr_torch.TFRecordWriter(str(tmp_path / "s2.tfrecord")) as writer:
        for i in range(6):
            writer.write_example({"a": i, "b": [2.0]})
    rc, out, _ = cli("schema", tmp_path / "s1.tfrecord", tmp_path / "s2.tfrecord", "--max-records", "4")
    assert rc == 0 and "from 4 records of 2 files" in out
    assert "'a': tfr_torch.FixedLenFeature([], torch.int64)," in out
    assert "'b': tfr_torch.VarLenFeature(torch.float32),  # in 3 of 4 records read" in out


def test_limitations_tfds_writing_refuses_sparse_ragged_and_sequence_specs(tmp_path):
    """limitations.md: "Writing TFDS folders refuses sparse and ragged specs and SequenceExamples
    (`ShardedWriter(tfds=...)`...): features.json has no form for them" (SparseFeature, RaggedFeature and
    SequenceFeatures are refused by name; a VarLenFeature, which TFDS describes, is written)."""
    refused = ({"s": SparseFeature("i", "v", torch.int64, 4)}, {"r": RaggedFeature(torch.int64)},
               tfr_torch.SequenceFeatures(context={"x": FixedLenFeature([], torch.int64)},
                                          sequence={"q": FixedLenSequenceFeature([], torch.int64)}))
    for features, match in zip(refused, ("'s': a SparseFeature", "'r': a RaggedFeature", "SequenceExample")):
        with pytest.raises(ValueError, match=match):
            tfr_torch.ShardedWriter(str(tmp_path / "t"), "n", features=features, tfds={})
    with tfr_torch.ShardedWriter(str(tmp_path / "v"), "n", features={"x": VarLenFeature(torch.int64)},
                                 tfds={}) as writer:
        writer.write_example({"x": [1, 2]})
    assert any(name.endswith("features.json") for name in os.listdir(tmp_path / "v"))


@pytest.fixture
def bad_fifth(tmp_path):
    """Ten Examples {"x": i}, the data CRC of record 5 broken; the path."""
    path = tmp_path / "e.tfrecord"
    write_ints(path, 10)
    data = bytearray(path.read_bytes())
    size = len(data) // 10
    data[5 * size + 14] ^= 1
    path.write_bytes(bytes(data))
    return str(path)


def test_records_dataset_raises_after_every_batch_before(bad_fifth):
    """records.md: `on_error="raise"` stops "in a dataset with a `batch_size`, after every batch before the one
    that holds it"."""
    got = []
    with pytest.raises(CorruptRecordError):
        for batch in tfr_torch.TFRecordDataset(bad_fifth, INT64, batch_size=2):
            got.append(batch["x"].tolist())
    assert got == [[0, 1], [2, 3]]


def test_datasets_skip_warns_once_and_ranks_keep_their_count(bad_fifth):
    """records.md: counting files without an index says nothing of a bad record, "the reader that reads it warns
    ..., once"; limitations.md: with several ranks, `on_error="skip"` keeps every rank's count by repeating the
    first records of a reader that skipped some (with an index: a record seen twice in that epoch)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shares = [[int(r["x"]) for r in tfr_torch.TFRecordDataset(bad_fifth, INT64, on_error="skip", world_size=2,
                                                                   rank=rank)] for rank in range(2)]
    assert len([w for w in caught if issubclass(w.category, SkippedRecordWarning)]) == 1
    assert len(shares[0]) == len(shares[1]) and 5 not in shares[0] + shares[1]
    tfr_torch.build_index(bad_fifth)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedRecordWarning)
        shares = [[int(r["x"]) for r in tfr_torch.TFRecordDataset(bad_fifth, INT64, on_error="skip", world_size=2,
                                                                   rank=rank, index="auto")] for rank in range(2)]
    assert shares == [[0, 1, 2, 3, 4], [6, 7, 8, 9, 6]]


def test_untrusted_worker_error_keeps_skipped_attributes(bad_fifth):
    """untrusted-input.md: an error from a DataLoader worker keeps its attributes, "and the `skipped_*` ones of a
    skipped record that an `on_error` callable raised again"."""
    from torch.utils.data import DataLoader

    def again(error):
        raise error

    with pytest.raises(CorruptRecordError) as info:
        list(DataLoader(tfr_torch.TFRecordDataset(bad_fifth, INT64, on_error=again), batch_size=None, num_workers=1))
    error = info.value
    assert (error.path, error.skipped_records, error.skipped_estimated) == (bad_fifth, 1, False)
    assert error.skipped_range == (error.offset, error.offset + 30)


def test_records_pipe_is_read_as_a_stream_and_missing_protocol_package(plain):
    """records.md: "A pipe, FIFO or `/dev/stdin` is read as a stream to its end"; "A missing protocol package is an
    `ImportError` naming it" (gs:// without gcsfs)."""
    _, data = plain
    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    try:
        assert list(tfr_torch.read_records(f"/dev/fd/{read_end}")) == [b"r%d" % i * 10 for i in range(5)]
    finally:
        os.close(read_end)
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="gcsfs"):
            list(tfr_torch.read_records("gs://bucket/x.tfrecord"))
    else:
        pytest.skip("gcsfs is installed")


def test_compiled_core_both_backends_same_error_message():
    """compiled-core.md: "Both backends give the same values or the same error, message included" (a sample of
    decoding errors: dtype, conversion, count, missing, malformed, empty list, ragged, sparse, sequence shape)."""
    if not tfr_torch._native.available():
        pytest.skip("the compiled core is not built")
    enc = tfr_torch.encode_example
    cases = [
        ([enc({"label": 1})] * 3 + [enc({"label": 1.5})], {"label": FixedLenFeature([], torch.int64)}),
        ([enc({"v": 300})], {"v": FixedLenFeature([], torch.uint8)}),
        ([enc({"v": [1, 2]})], {"v": FixedLenFeature([3], torch.int64)}),
        ([enc({"w": 1})], {"v": FixedLenFeature([], torch.int64)}),
        ([b"\x0a\x05\x0a\x03\x0a\x01"], {"v": VarLenFeature(torch.int64)}),
        ([enc({"v": np.array([], np.int64)})], {"v": FixedLenFeature([], torch.int64, default_value=3)}),
        ([enc({"v": [1, 2], "l": [5]})], {"r": RaggedFeature(torch.int64, value_key="v",
                                                              partitions=[RowLengths("l")])}),
        ([enc({"idx": [0, 7], "val": [5, 6]})], {"s": SparseFeature("idx", "val", torch.int64, 4)}),
        ([enc({"v": [1, 2, 3]})], {"v": FixedLenSequenceFeature([2], torch.int64, allow_missing=True)}),
        ([enc({"v": "abc"})], {"v": FixedLenFeature([], torch.float32)}),
    ]
    previous = tfr_torch.backend()
    try:
        for records, spec in cases:
            names = [tfr_torch.RecordLocation("f.tfrecord", 10 * i) for i in range(len(records))]
            seen = []
            for backend in ("native", "python"):
                tfr_torch.set_backend(backend)
                with pytest.raises(DecodeError) as info:
                    tfr_torch.parse_example(records, spec, example_names=names)
                seen.append((str(info.value), info.value.key, info.value.index, info.value.position))
            assert seen[0] == seen[1]
    finally:
        tfr_torch.set_backend(previous)


def test_cli_inspect_summary(tmp_path):
    """cli.md, `inspect`: each file's records, bytes and compression; the record kinds; per feature its kind,
    dtype, records carrying it, values per record (min/mean/max) and value range, NaN counted apart, bytes as
    shortest and longest; feature lists per step; serialize_tensor records by dtype with shapes and range."""
    path = tmp_path / "i.tfrecord"
    with tfr_torch.TFRecordWriter(str(path)) as writer:
        writer.write_example({"b": [b"xy", b"x" * 65], "f": np.array([0.5, np.nan, 2.0], np.float32)})
        writer.write_sequence_example({"c": 1}, {"s": [[i] for i in range(4)]})
        writer.write(tfr_torch.serialize_tensor(np.arange(6, dtype=np.int32).reshape(2, 3)))
    rc, out, _ = cli("inspect", path)
    lines = out.splitlines()
    assert rc == 0 and f"{path}\t3\t{os.path.getsize(path)}\tnone" in lines
    assert ("records read: 3 (every record); tf.train.Example: 1, tf.train.SequenceExample: 1, serialize_tensor "
            "payload: 1") in lines
    assert "b\tbytes_list\tstring\t1\t2/2.00/2\t2 bytes\t65 bytes" in lines
    assert "f\tfloat_list\tfloat32\t1\t3/3.00/3\t0.5\t2\t1 NaN" in lines
    assert "s\tint64_list\tint64\t1\t4/4\t4\t1/1.00/1\t0\t3" in lines
    assert "int32\t1\t[2, 3]\t0\t5" in lines


def test_decoding_padding_cost_figures():
    """Fixed (docs): decoding.md said "one record of 10**5 values among 1,000 short ones pads to a 762 MiB tensor
    from 114 KB of input": 1,001 records pad to 764 MiB, and the 762.9 MiB of a batch of 1,000 (999 short records
    of 3 values) comes from 116 KB of input. Also: FixedLenSequenceFeature pads with `default_value`."""
    short = tfr_torch.encode_example({"v": np.arange(3)})
    records = [short] * 999 + [tfr_torch.encode_example({"v": np.arange(10**5) % 100})]
    assert sum(map(len, records)) == 116_007
    spec = {"v": FixedLenSequenceFeature([], torch.int64, allow_missing=True)}
    small = tfr_torch.parse_example(records[-3:], spec)["v"]  # the same rule on 3 records: [B, T_max], int64
    assert small.shape == (3, 10**5) and small.dtype == torch.int64
    assert round(1000 * 10**5 * small.element_size() / 2**20) == 763  # (not materialised: 763 MiB)
    page = " ".join(open(os.path.join(ROOT, "docs", "guides", "decoding.md")).read().split())
    assert "tensor of 763 MiB from 116 KB of input" in page
    spec = {"v": FixedLenSequenceFeature([], torch.int64, allow_missing=True, default_value=7)}
    pads = tfr_torch.parse_example([tfr_torch.encode_example({"v": [1]}), tfr_torch.encode_example({"v": [1, 2]})],
                                   spec)["v"]
    assert pads.tolist() == [[1, 7], [1, 2]]


def test_compiled_core_layout_paths_exist():
    """compiled-core.md, "Layout" (and the paths the other pages name): every file and folder it names exists.
    Fixed (docs): the RLDS row named `make_rlds_golden.py` and `rlds_values.json` beside `tests/data/tfds/rlds/`;
    they are in `tests/data/tfds/` (written by TFDS 4.9.10, as said)."""
    paths = """tfr_torch/_native/src tfr_torch/_native/src/seek.c tfr_torch/format/seek_inflate.py
        tfr_torch/format/seek.py tfr_torch/format/strict.py tfr_torch/format/compression.py
        tfr_torch/format/inflate.py tfr_torch/format/prefetch.py tfr_torch/format/shardset.py
        tfr_torch/format/options.py tfr_torch/decode/dtypes.py tfr_torch/decode/plan.py
        tfr_torch/decode/sequence_plan.py tfr_torch/decode/plan_inputs.py tfr_torch/decode/infer.py
        tfr_torch/decode/record_kinds.py tfr_torch/decode/spec_code.py tfr_torch/tensors.py
        tfr_torch/data/dataset.py tfr_torch/data/epoch_records.py tfr_torch/data/items.py
        tfr_torch/data/cache.py tfr_torch/data/cache_folder.py tfr_torch/data/mixed.py
        tfr_torch/data/mixed_state.py tfr_torch/data/indexes.py tfr_torch/data/reading.py
        tfr_torch/data/blocks.py tfr_torch/data/resumable.py tfr_torch/data/elastic.py
        tfr_torch/data/transport.py tfr_torch/data/slabs.py tfr_torch/data/receive.py tfr_torch/data/pipe.py
        tfr_torch/tools/convert.py tfr_torch/tools/convert_jobs.py tfr_torch/tools/convert_run.py
        tfr_torch/tools/inspection.py tfr_torch/tools/reshard.py tfr_torch/images/encode.py tfr_torch/hf
        tfr_torch/nodes tfr_torch/rlds tfr_torch/tfds protos/generate.py tests/data/make_golden.py
        tests/data/make_golden_strict.py tests/data/make_golden_parse.py tests/data/make_golden_tf_tests.py
        tests/data/tfds/make_tfds_golden.py tests/data/tfds/make_rlds_golden.py
        tests/data/tfds/rlds_values.json tests/data/tfds/rlds tests/test_tf_tests_golden.py
        tests/test_native.py tests/test_hostile.py tests/test_gpu_real.py tests/data/regressions
        fuzz/README.md fuzz/run.py benchmarks/run.py benchmarks/gpu_pipeline.py benchmarks/shuffle_spill.py
        benchmarks/compressed_random.py benchmarks/gil_features.py .github/workflows/wheels.yml
        constraints/test.txt constraints/min.txt examples/quickstart.py""".split()
    assert [p for p in paths if not os.path.exists(os.path.join(ROOT, p))] == []
    assert json.load(open(os.path.join(ROOT, "tests/data/tfds/rlds_values.json")))["versions"] == {"tfds": "4.9.10"}
    page = open(os.path.join(ROOT, "docs", "guides", "compiled-core.md")).read()
    assert "`tests/data/tfds/make_rlds_golden.py`, `tests/data/tfds/rlds_values.json`" in page
