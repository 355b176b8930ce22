"""Audit of the `tfr-torch` command line (tfr_torch/tools/cli*.py, inspection.py, progress.py).

What is checked, beyond tests/test_cli.py: exit status (0 ok, 1 a data problem with one `path:offset: problem`
line each, 2 a misuse) of every reading command on empty, zero-record, truncated (uncompressed, GZIP, ZLIB),
corrupt and non-TFRecord files; data on stdout and problems on stderr; `head`'s JSON lines strictly valid and
faithful (int64 past 2**53, NaN and infinities, every serialize_tensor dtype, non-UTF-8 bytes); `schema`'s Python
runs and its spec parses the files; `inspect`'s numbers against a count of our own, across its chunks, and its
memory with large records; `index` idempotent and accepted by `read_index` / `check_index`, and its stale seek
points; `verify` reporting every bad record at its offset, as it finds it; Ctrl-C (exit 130, no half-written index,
no shards left by reshard); file names with spaces, colons, unicode, tabs, glob characters and bytes that are not
UTF-8, on UTF-8 and ASCII stdouts; `--tfds-version` checks; `convert`'s skipped images under -q.

Tests that failed before their fix carry a `# Fixed:` comment saying what the defect was.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import struct
import subprocess
import sys
import tracemalloc
import zlib

import numpy as np
import pytest

import tfr_torch
from tfr_torch.tools.cli import main

OVERHEAD = 16  # a record's framing: 8-byte length, 4-byte length CRC, 4-byte data CRC


def run(*args):
    """(exit status, stdout, stderr) of `tfr-torch ARGS` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:  # argparse: --help, usage errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def strict_json(line):
    """json.loads that refuses NaN / Infinity literals (not JSON)."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(line, parse_constant=refuse)


def offsets_of(data: bytes) -> list[int]:
    """The offset of each record of uncompressed TFRecord bytes."""
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += struct.unpack_from("<Q", data, pos)[0] + OVERHEAD
    return offsets


@pytest.fixture
def examples(tmp_path, write_records):
    """Five Examples, uncompressed, GZIP and ZLIB."""
    records = [{"id": i, "name": f"n{i}", "x": np.array([0.5, i], np.float32)} for i in range(5)]
    return {c: write_records(str(tmp_path / f"ok{suffix}"), records, c)
            for c, suffix in ((None, ".tfrecord"), ("gzip", ".tfrecord.gz"), ("zlib", ".tfrecord.zz"))}


# ------------------------------------------------------------------------------------ exit status and streams


def test_every_reading_command_on_bad_inputs_is_one_problem_line_and_status_1(tmp_path, examples):
    """Truncated (mid-file, uncompressed / GZIP / ZLIB), a text file, a JPEG: exit 1, one `path:offset: ` line,
    nothing on stdout but verify's report, never a traceback; empty and zero-record files are 0 records."""
    plain, gz, zz = (open(examples[c], "rb").read() for c in (None, "gzip", "zlib"))
    bad = {
        "cut.tfrecord": (plain[:-3], offsets_of(plain)[-1]),
        "cut.tfrecord.gz": (gz[: len(gz) // 2], None),
        "cut.tfrecord.zz": (zz[: len(zz) // 2], None),
        "notes.txt": (b"hello, this is not a TFRecord file\n" * 4, 0),
        "photo.jpg": (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(256)), 0),
    }
    for name, (data, offset) in bad.items():
        path = str(tmp_path / name)
        open(path, "wb").write(data)
        for command in ("count", "verify", "index", "head", "schema", "inspect"):
            rc, out, err = run(command, path)
            report = out if command == "verify" else err
            assert rc == 1, (name, command, out, err)
            lines = report.splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"{path}:"), (name, command, report)
            if offset is not None:
                assert lines[0].startswith(f"{path}:{offset}: "), (name, command, lines)
            if command == "head":  # the records before the damage are shown
                shown = [strict_json(line)["offset"] for line in out.splitlines()]
                assert shown == [o for o in offsets_of(plain) if offset is None or o < offset][:len(shown)]
            elif command != "verify":
                assert out == "", (name, command, out)
            assert "Traceback" not in out + err
        assert not os.path.exists(path + ".idx")
    empty = str(tmp_path / "empty.tfrecord")
    open(empty, "wb").close()
    zero = tfr_torch.TFRecordWriter(str(tmp_path / "zero.tfrecord.gz"), compression="gzip")
    zero.close()
    for path in (empty, str(tmp_path / "zero.tfrecord.gz")):
        assert run("count", path) == (0, f"0\t{path}\n", "")
        assert run("verify", path) == (0, f"{path}: OK, 0 records\n", "")
        assert run("head", path) == (0, "", "")
        rc, out, err = run("inspect", path)
        assert (rc, err) == (0, "") and "records read: 0 (every record); none" in out
        rc, out, err = run("schema", path)
        assert (rc, out) == (1, "") and err == f"tfr-torch schema: no records to propose a spec from: {path} holds " \
                                               "no records\n"


@pytest.mark.parametrize("spelling, ok", [("GZIP", True), ("Gzip", True), ("auto", True), ("AUTO", True),
                                          ("gz", False), ("deflate", False)])
def test_compression_spellings(examples, spelling, ok):
    rc, out, err = run("count", "--compression", spelling, examples["gzip"])
    if ok:
        assert (rc, out, err) == (0, f"5\t{examples['gzip']}\n", "")
    else:
        assert (rc, out) == (2, "") and err == (
            f"tfr-torch count: error: argument --compression: expected auto, none, gzip or zlib, got {spelling!r} "
            "(see `tfr-torch count --help`)\n")


def test_a_wrong_compression_names_the_right_one(examples):
    rc, out, err = run("count", "--compression", "none", examples["gzip"])
    assert (rc, out) == (1, "")
    assert err.startswith(f"{examples['gzip']}:0: not a TFRecord file as read (uncompressed): it starts like "
                          "GZIP-compressed data; pass --compression gzip (or auto)")


def test_paths_with_spaces_colons_and_unicode(tmp_path, write_records):
    path = write_records(str(tmp_path / "my data: ünïcode 日本.tfrecord"), [{"i": 1}, {"i": 2}])
    assert run("count", path) == (0, f"2\t{path}\n", "")
    rc, out, _ = run("head", "-n", 1, path)
    assert rc == 0 and strict_json(out)["file"] == path
    rc, out, _ = run("index", path)
    assert (rc, out) == (0, f"{path}.idx\n")
    tfr_torch.check_index(tfr_torch.read_index(path + ".idx", path), path)


@pytest.mark.skipif(sys.platform == "win32", reason="file names that are not UTF-8 are a POSIX matter")
def test_file_names_that_are_not_utf8_or_not_in_the_output_encoding(tmp_path, write_records):
    # Fixed: in a UTF-8 locale (stdout's errors "strict"), any command printing a file name that is not UTF-8
    # ended in "error: 'utf-8' codec can't encode character '\udcff'" with status 2, a misuse; head, in a C.UTF-8
    # locale, wrote the name's raw byte inside its JSON (not UTF-8: json.loads failed); on an ASCII stdout, head
    # failed on any non-ASCII key or text.
    name = os.fsdecode(b"bad\xff name.tfrecord")
    path = write_records(os.path.join(str(tmp_path), name), [{"k\u00e9": b"\xc3\xa9"}])
    for encoding in ("utf-8", "ascii"):
        env = dict(os.environ, PYTHONIOENCODING=encoding)
        count = subprocess.run([sys.executable, "-m", "tfr_torch", "count", path], capture_output=True, env=env)
        assert (count.returncode, count.stdout, count.stderr) == (0, b"1\t" + os.fsencode(path) + b"\n", b"")
        head = subprocess.run([sys.executable, "-m", "tfr_torch", "head", path], capture_output=True, env=env)
        assert (head.returncode, head.stderr) == (0, b"")
        line = strict_json(head.stdout.decode(encoding))
        assert line["file"] == path and line["example"] == {"k\u00e9": {"bytes": ["\u00e9"]}}


# ------------------------------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_while_the_arguments_are_parsed_is_one_line_and_status_130(monkeypatch, tmp_path, examples):
    # Fixed: a Ctrl-C while argparse ran (reshard's --shard-size parser imports the writer and torch, a second
    # or so) ended in a KeyboardInterrupt traceback and death by SIGINT instead of one line and status 130.
    import tfr_torch.tools.shards as shards

    def interrupted(value):
        raise KeyboardInterrupt

    monkeypatch.setattr(shards, "parse_size", interrupted)
    rc, out, err = run("reshard", examples[None], "--out", tmp_path / "out", "--shard-size", "1MB")
    assert (rc, out, err) == (130, "", "tfr-torch: interrupted\n")
    assert not (tmp_path / "out").exists()


def test_sigint_during_index_exits_130_and_leaves_no_half_written_index(tmp_path, write_records):
    """A real SIGINT, sent once the first of many index runs has printed its line: status 130, one line on
    stderr, and beside the file only a complete index and complete seek points (no temporary files)."""
    path = write_records(str(tmp_path / "m.tfrecord.gz"),
                         [{"id": i, "v": np.arange(20, dtype=np.float32)} for i in range(5000)], "gzip")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "tfr_torch", "index", *[path] * 400], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline() == f"{path}.idx\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "tfr-torch index: interrupted\n", (proc.returncode, err)
    left = sorted(os.listdir(tmp_path))
    assert set(left) <= {"m.tfrecord.gz", "m.tfrecord.gz.idx", "m.tfrecord.gz.idx.seek"}, left
    tfr_torch.check_index(tfr_torch.read_index(path + ".idx", path), path)
    assert len(tfr_torch.read_index(path + ".idx", path)) == 5000


def test_ctrl_c_during_reshard_leaves_no_shards(monkeypatch, tmp_path, write_records):
    """Ctrl-C after some records were written into the new shards: status 130, one line, and nothing left in the
    output folder (reshard never resumes, so its finished shards would be left behind for good)."""
    from tfr_torch.tools.progress import Progress

    path = write_records(str(tmp_path / "in.tfrecord"), [{"i": i, "pad": b"x" * 100} for i in range(200)])
    update = Progress.update
    calls = []

    def interrupted(self, items=1, nbytes=0):
        calls.append(items)
        if len(calls) == 150:  # some shards finished, one being written
            raise KeyboardInterrupt
        update(self, items, nbytes)

    monkeypatch.setattr(Progress, "update", interrupted)
    rc, out, err = run("reshard", path, "--out", tmp_path / "out", "--shard-size", "2KB")
    assert (rc, out, err) == (130, "", "tfr-torch reshard: interrupted\n")
    assert len(calls) == 150 and os.listdir(tmp_path / "out") == []


# --------------------------------------------------------------------------------------------------- head


def test_head_goes_on_with_the_next_file_after_a_bad_one(tmp_path, examples, write_records):
    # Fixed: head stopped at the first file it could not read (missing, corrupt, not what --as says): the files
    # after it were never shown, unlike count, index and verify, which report each problem and go on.
    missing = str(tmp_path / "missing.tfrecord")
    raw = write_records(str(tmp_path / "raw.tfrecord"), [b"\x00\x01 not an Example"])
    plain, gz = examples[None], examples["gzip"]
    rc, out, err = run("head", "-n", 1, plain, missing, raw, gz, "--as", "example")
    assert rc == 1
    assert [strict_json(line)["file"] for line in out.splitlines()] == [plain, gz]
    assert err.splitlines() == [f"{missing}: No such file or directory",
                                f"{raw}:0: cannot parse 17 bytes as a tf.train.Example: byte 0 has an invalid field "
                                "tag 0x0 (field 0, wire type 0)"]


def test_head_n_0_reads_nothing_but_refuses_what_it_cannot_open(tmp_path, examples):
    # Fixed: `head -n 0 FOLDER` exited 0, though `head -n 1 FOLDER` and a missing file are status 1.
    folder = tmp_path / "folder"
    folder.mkdir()
    assert run("head", "-n", 0, examples[None], examples["gzip"]) == (0, "", "")
    rc, out, err = run("head", "-n", 0, folder, examples[None])
    assert (rc, out, err) == (1, "", f"{folder}: Is a directory\n")


def test_head_json_is_strict_and_faithful_for_examples(tmp_path, write_records):
    ints = np.array([2**62 + 1, -2**63, 2**53 + 1, 2**63 - 1], np.int64)
    floats = np.array([np.nan, np.inf, -np.inf, 1e-45, 3.4e38, 0.1, -0.0], np.float32)
    blobs = [b"\xff\xfe", "日本\x00\t".encode(), b""]
    path = write_records(str(tmp_path / "e.tfrecord"), [{"i": ints, "f": floats, "b": blobs}])
    rc, out, err = run("head", path)
    assert (rc, err) == (0, "")
    example = strict_json(out)["example"]
    assert example["i"] == {"int64": ints.tolist()}  # exact past 2**53
    shown = example["f"]["float"]
    assert shown[:3] == ["NaN", "Infinity", "-Infinity"]
    assert np.array_equal(np.array(shown[3:], np.float32), floats[3:])  # shortest decimals that round-trip
    assert str(shown[-1]) == "-0.0"
    assert example["b"] == {"bytes": [{"base64": base64.b64encode(b"\xff\xfe").decode()}, "日本\x00\t", ""]}


def test_head_json_is_strict_and_faithful_for_every_tensor_dtype(tmp_path, write_records):
    import torch

    tensors = [
        np.array([np.nan, np.inf, -np.inf, 0.1], np.float32), np.array([np.nan, 1e308, 5e-324], np.float64),
        np.array([np.inf, 0.1, 65504], np.float16), np.array([complex(np.nan, -np.inf), 1 + 2j], np.complex64),
        np.array([complex(0.1, 3)], np.complex128), np.array([2**64 - 1], np.uint64), np.array([-2**63], np.int64),
        np.array([-128, 127], np.int8), np.array([255], np.uint8), np.array([True, False]),
        np.array([2**32 - 1], np.uint32), np.array([-2**31], np.int32), np.array([65535], np.uint16),
        np.array([-32768], np.int16), torch.tensor([1.5, float("nan")], dtype=torch.bfloat16),
        np.array([b"\xff\x00", "é".encode()], dtype=object),
    ]
    path = write_records(str(tmp_path / "t.tfrecord"), [tfr_torch.serialize_tensor(t) for t in tensors])
    rc, out, err = run("head", "-n", 100, path)
    assert (rc, err) == (0, "")
    lines = [strict_json(line)["tensor"] for line in out.splitlines()]
    assert [t["dtype"] for t in lines] == ["float32", "float64", "float16", "complex64", "complex128", "uint64",
                                           "int64", "int8", "uint8", "bool", "uint32", "int32", "uint16", "int16",
                                           "bfloat16", "string"]
    assert lines[0]["values"] == ["NaN", "Infinity", "-Infinity", 0.1]
    assert lines[1]["values"] == ["NaN", 1e308, 5e-324]
    assert np.array_equal(np.array([float(v) for v in lines[2]["values"]], np.float16), tensors[2])
    assert lines[3]["values"] == [["NaN", "-Infinity"], [1.0, 2.0]]
    assert lines[5]["values"] == [2**64 - 1] and lines[6]["values"] == [-2**63]
    assert lines[9]["values"] == [True, False]
    assert lines[14]["values"] == [1.5, "NaN"]
    assert lines[15]["values"] == [{"base64": "/wA="}, "é"]


def test_head_offsets_are_where_each_record_starts(examples):
    plain = open(examples[None], "rb").read()
    for compression, path in examples.items():  # compressed files: offsets in the decompressed stream
        rc, out, _ = run("head", path)
        assert rc == 0
        assert [strict_json(line)["offset"] for line in out.splitlines()] == offsets_of(plain), compression


def test_output_into_a_closed_pipe_is_quiet_for_every_command(tmp_path, write_records):
    """`tfr-torch COMMAND ... | head -c 1`: the reader goes away early; status 0 and nothing on stderr."""
    path = write_records(str(tmp_path / "a.tfrecord"), [{"i": i} for i in range(2000)])
    for command in (["count"], ["verify"], ["head", "-n", "5000"]):
        proc = subprocess.Popen([sys.executable, "-m", "tfr_torch", *command, *[path] * 300],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.read(1)
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert (proc.wait(), err) == (0, ""), command


# ------------------------------------------------------------------------------------------------- schema


def test_schema_prints_python_whose_spec_parses_the_files(tmp_path, write_records):
    a = write_records(str(tmp_path / "a.tfrecord"), [
        {"id": i, "v": np.arange(3, dtype=np.float32), "tag": [b"x", b"y", b"z"][: i % 3 + 1], "k\tey": b"\xff"}
        for i in range(20)])
    b = write_records(str(tmp_path / "b.tfrecord"), [{"id": 7, "v": np.zeros(3, np.float32), "late": [1, 2]}])
    seq = write_records(str(tmp_path / "s.tfrecord"), [tfr_torch.encode_sequence_example(
        {"label": i}, {"frames": [np.array([1.0, 2.0], np.float32)] * (i + 1), "tok": [[i], [i, i]]})
        for i in range(4)])
    for paths in ([a, b], [seq]):
        rc, out, err = run("schema", *paths)
        assert (rc, err) == (0, "")
        namespace: dict = {}
        exec(out, namespace)
        features = namespace["features"]
        records = [r for p in paths for r in tfr_torch.read_records(p)]
        if isinstance(features, tfr_torch.SequenceFeatures):
            context, lists, _ = tfr_torch.parse_sequence_example(records, features.context, features.sequence)
            assert context["label"].tolist() == [0, 1, 2, 3]
        else:
            parsed = tfr_torch.parse_example(records, features)
            assert parsed["id"].tolist() == list(range(20)) + [7]


# ------------------------------------------------------------------------------------------------ inspect


def test_inspect_numbers_match_a_count_of_our_own_across_its_chunks(tmp_path):
    rng = np.random.default_rng(1)
    path = str(tmp_path / "i.tfrecord")
    a_values, b_values, s_lengths = [], [], []
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(2500):  # more than one chunk of records
            a = rng.normal(size=int(rng.integers(0, 5))).astype(np.float32)
            if i == 1500:
                a = np.array([np.nan, 7.5], np.float32)
            features = {"a": a}
            if i % 3 == 0:
                features["b"] = np.array([i, -i * 1000], np.int64)
                b_values.append(features["b"])
            if i % 7 == 0:
                features["s"] = [b"x" * (i % 50)]
                s_lengths.append(i % 50)
            a_values.append(a)
            writer.write_example(features)
    rc, out, err = run("inspect", path)
    assert (rc, err) == (0, "")
    rows = {line.split("\t")[0]: line.split("\t") for line in out.splitlines()}
    assert rows[path] == [path, "2500", str(os.path.getsize(path)), "none"]
    values = np.concatenate(a_values)
    finite = values[~np.isnan(values)]
    counts = [len(v) for v in a_values]
    assert rows["a"] == ["a", "float_list", "float32", "2500", f"{min(counts)}/{np.mean(counts):.2f}/{max(counts)}",
                         f"{float(finite.min()):.7g}", "7.5", "1 NaN"]
    b = np.concatenate(b_values)
    assert rows["b"] == ["b", "int64_list", "int64", str(len(b_values)), "2/2.00/2", str(b.min()), str(b.max())]
    assert rows["s"] == ["s", "bytes_list", "string", str(len(s_lengths)), "1/1.00/1", f"{min(s_lengths)} bytes",
                         f"{max(s_lengths)} bytes"]


def test_inspect_file_names_with_tabs_and_line_breaks_keep_the_table(tmp_path, write_records):
    # Fixed: a file name holding a tab made inspect's total line fail ("error: invalid literal for int()", exit 2,
    # no report), and one holding a line break split its row in two.
    tab = write_records(str(tmp_path / "a\tb.tfrecord"), [{"i": 1}, {"i": 2}])
    newline = write_records(str(tmp_path / "c\nd.tfrecord"), [{"i": 3}])
    rc, out, err = run("inspect", tab, newline)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[:4] == ["file\trecords\tbytes\tcompression",
                         f"{tmp_path}/a\\tb.tfrecord\t2\t{os.path.getsize(tab)}\tnone",
                         f"{tmp_path}/c\\nd.tfrecord\t1\t{os.path.getsize(newline)}\tnone",
                         f"total\t3\t{os.path.getsize(tab) + os.path.getsize(newline)}"]


def test_inspect_a_pattern_that_matches_nothing_is_named_as_the_command(tmp_path):
    # Fixed: inspect alone said "no files match ..." without the `tfr-torch inspect:` the other commands give.
    rc, out, err = run("inspect", str(tmp_path / "none*.tfrecord"))
    assert (rc, out, err) == (1, "", f"tfr-torch inspect: no files match '{tmp_path}/none*.tfrecord'\n")


def test_inspect_holds_a_bounded_number_of_bytes_of_large_records(tmp_path):
    # Fixed: inspect held the features of 1024 records at a time whatever their size: 1 MiB images made that
    # 1 GiB (here 97 MiB for 48 MiB of records); now it also decodes what it holds once the records add up to
    # 8 MiB.
    path = str(tmp_path / "big.tfrecord")
    blob = os.urandom(1 << 20)
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(48):
            writer.write_example({"id": i, "image": blob})
    tracemalloc.start()
    try:
        rc, out, err = run("inspect", path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (rc, err) == (0, "") and "image\tbytes_list\tstring\t48\t1/1.00/1\t1048576 bytes" in out
    assert peak < 32 << 20, peak  # 48 MiB of records read


def test_inspect_scalar_string_tensors(tmp_path, write_records):
    # Fixed: a serialize_tensor payload of a scalar string (tf.io.serialize_tensor(tf.constant(b"hello"))) ended
    # inspect in a numpy UFuncTypeError traceback (the min of a bytes array).
    path = write_records(str(tmp_path / "s.tfrecord"), [
        tfr_torch.serialize_tensor(np.array(b"hello", dtype=object)),
        tfr_torch.serialize_tensor(np.array([[b"a", b"bcd"]], dtype=object)),
        tfr_torch.serialize_tensor(np.array(3.5, dtype=np.float32))])
    rc, out, err = run("inspect", path)
    assert (rc, err) == (0, "")
    assert out.splitlines()[-3:] == ["dtype\trecords\tshape\tmin\tmax", "float32\t1\t[]\t3.5\t3.5",
                                     "string\t2\t[] x1, [1, 2] x1\t1 bytes\t5 bytes"]


def test_inspect_head_and_schema_on_mutated_records_never_end_in_a_traceback(tmp_path, write_records):
    """Records with random bytes changed, cut or inserted (Examples, SequenceExamples, tensors): status 0 or 1."""
    # Fixed: one such record, a string tensor made a scalar, ended inspect in a numpy traceback (as above).
    import random

    rng = random.Random(5)
    seeds = [
        tfr_torch.encode_example({"a": np.arange(5), "b": np.float32([1.5, np.nan]), "c": [b"x", b"yy"]}),
        tfr_torch.encode_sequence_example({"l": 3}, {"f": [np.float32([1, 2])] * 3, "t": [[1], [2, 3]]}),
        tfr_torch.serialize_tensor(np.arange(12, dtype=np.int32).reshape(3, 4)),
        tfr_torch.serialize_tensor(np.array([b"ab", b"c"], dtype=object)),
    ]

    def mutate(record):
        data = bytearray(record)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(data) + 1)
            if rng.random() < 0.5 and at < len(data):
                data[at] = rng.randrange(256)
            elif rng.random() < 0.5:
                del data[at:at + rng.randrange(1, 4)]
            else:
                data.insert(at, rng.randrange(256))
        return bytes(data)

    for trial in range(60):
        path = write_records(str(tmp_path / f"{trial}.tfrecord"),
                             [mutate(rng.choice(seeds)) for _ in range(rng.randrange(1, 5))])
        for command in (["head"], ["inspect"], ["schema"], ["head", "--as", "sequence"], ["head", "--as", "tensor"]):
            rc, out, err = run(*command, path)
            assert rc in (0, 1) and "Traceback" not in err, (trial, command, rc, err)
            for line in out.splitlines() if command[0] == "head" else []:
                strict_json(line)


# -------------------------------------------------------------------------------------------- index, verify


def test_index_is_idempotent_and_accepted_by_read_index_and_check_index(examples):
    for path in examples.values():
        rc, out, err = run("index", path)
        assert (rc, out, err) == (0, f"{path}.idx\n", "")
        first = open(path + ".idx", "rb").read()
        assert run("index", path)[0] == 0 and open(path + ".idx", "rb").read() == first
        index = tfr_torch.read_index(path + ".idx", path)
        tfr_torch.check_index(index, path)
        assert len(index) == 5


def test_index_seek_span_0_removes_stale_seek_points(tmp_path, write_records):
    # Fixed: `index --seek-span 0` after the file changed left the earlier run's <file>.idx.seek beside the new
    # index; IndexedTFRecordDataset then refused the file ("the seek points were built for a file of N bytes").
    path = str(tmp_path / "a.tfrecord.gz")
    write_records(path, [{"i": i} for i in range(3)], "gzip")
    assert run("index", path)[0] == 0
    if not os.path.exists(path + ".idx.seek"):  # the pure-Python backend builds no seek points: an older run's
        open(path + ".idx.seek", "wb").write(b"stale")
    write_records(path, [{"i": i} for i in range(500)], "gzip")  # the file changes
    assert run("index", "--seek-span", 0, path) == (0, f"{path}.idx\n", "")
    assert not os.path.exists(path + ".idx.seek")
    with pytest.raises(ValueError, match="has no seek points"):  # not "built for a file of ... bytes"
        tfr_torch.IndexedTFRecordDataset(path)
    assert len(tfr_torch.read_index(path + ".idx", path)) == 500


def test_verify_reports_every_bad_record_at_its_offset(tmp_path, examples):
    plain = open(examples[None], "rb").read()
    offsets = offsets_of(plain)
    damaged = bytearray(plain)
    damaged[offsets[0] + 20] ^= 0xFF  # data of record 0
    damaged[offsets[2] + 13] ^= 0x01  # data of record 2
    damaged[offsets[3] + 3] ^= 0x40  # length of record 3 (its header CRC fails)
    files = {"d.tfrecord": bytes(damaged), "d.tfrecord.zz": zlib.compress(bytes(damaged))}
    for name, data in files.items():
        path = str(tmp_path / name)
        open(path, "wb").write(data)
        rc, out, err = run("verify", path)
        assert (rc, err) == (1, "")
        lines = out.splitlines()
        assert [line.split(": ")[0] for line in lines] == [f"{path}:{offsets[0]}", f"{path}:{offsets[2]}",
                                                            f"{path}:{offsets[3]}"], lines
        assert "corrupt record data" in lines[0] and "corrupt record header" in lines[2]
        assert run("verify", "-q", examples[None]) == (0, "", "")


def test_verify_reports_each_problem_as_it_is_found(monkeypatch, tmp_path, write_records):
    # Fixed: verify kept every problem of a file in a list and printed them when the file was done: on a long
    # file, nothing for hours (and memory growing with the problems).
    from tfr_torch.tools.progress import Progress

    path = write_records(str(tmp_path / "a.tfrecord"), [{"i": i} for i in range(3000)])
    data = bytearray(open(path, "rb").read())
    data[OVERHEAD - 4 + 2] ^= 0xFF  # the data of record 0
    open(path, "wb").write(bytes(data))
    out = io.StringIO()
    seen_at_first_update = []
    update = Progress.update

    def spy(self, items=1, nbytes=0):
        if not seen_at_first_update:
            seen_at_first_update.append(out.getvalue())
        update(self, items, nbytes)

    monkeypatch.setattr(Progress, "update", spy)
    with contextlib.redirect_stdout(out):
        assert main(["verify", path]) == 1
    assert seen_at_first_update[0].startswith(f"{path}:0: corrupt record data")
    assert out.getvalue().splitlines() == seen_at_first_update[0].splitlines()


# --------------------------------------------------------------------------------------- FILE arguments


def test_existing_names_with_glob_characters_are_those_files(tmp_path, write_records):
    # Fixed: a file named data[1].tfrecord (as the shell's own expansion passes it) was taken as a pattern: "no
    # files match", or, with a data1.tfrecord beside it, that other file was read instead.
    literal = write_records(str(tmp_path / "data[1].tfrecord"), [{"i": 1}])
    write_records(str(tmp_path / "data1.tfrecord"), [{"i": 1}, {"i": 2}])
    question = write_records(str(tmp_path / "what?.tfrecord"), [{"i": 1}] * 3)
    write_records(str(tmp_path / "whatX.tfrecord"), [{"i": 1}] * 4)
    assert run("count", literal, question) == (0, f"1\t{literal}\n3\t{question}\n4\ttotal\n", "")
    assert run("verify", literal) == (0, f"{literal}: OK, 1 records\n", "")
    rc, out, _ = run("head", literal)
    assert rc == 0 and strict_json(out)["file"] == literal
    rc, out, _ = run("inspect", literal)
    assert rc == 0 and f"{literal}\t1\t" in out
    rc, out, _ = run("schema", literal)
    assert rc == 0 and "# Proposed from all 1 records of 1 file." in out
    assert run("index", literal) == (0, f"{literal}.idx\n", "")
    rc, out, err = run("count", f"{literal}.idx")  # named, a side file is a misuse, as without glob characters
    assert (rc, out) == (2, "") and err.startswith(f"tfr-torch count: error: {literal}.idx is a TFRecord index")
    rc, out, _ = run("count", str(tmp_path / "data[12].tfrecord"))  # a pattern that names no file: still a pattern
    assert (rc, out) == (0, f"2\t{tmp_path}/data1.tfrecord\n")


# ------------------------------------------------------------------------------------------------ convert


@pytest.mark.parametrize("args, says", [
    (["--tfds", "--tfds-version", "bogus"],
     "argument --tfds-version: expected a version MAJOR.MINOR.PATCH such as 1.0.0, got 'bogus'"),
    (["--tfds", "--tfds-version", "1.0"],
     "argument --tfds-version: expected a version MAJOR.MINOR.PATCH such as 1.0.0, got '1.0'"),
    (["--tfds-version", "2.0.0"], "argument --tfds-version: applies to --tfds only (a TensorFlow Datasets folder)"),
])
def test_a_bad_or_idle_tfds_version_is_a_misuse(tmp_path, examples, args, says):
    # Fixed: `--tfds-version bogus` was a data problem (status 1, after the output folder was made), and
    # `--tfds-version` without `--tfds` was silently ignored.
    for command in (["reshard", examples[None], "--out"], ["convert", tmp_path, "--name", "t"]):
        rc, out, err = run(*command, tmp_path / "out", *args)
        assert (rc, out) == (2, "")
        assert err == f"tfr-torch {command[0]}: error: {says} (see `tfr-torch {command[0]} --help`)\n"
        assert not (tmp_path / "out").exists()


def test_convert_lists_skipped_images_on_one_line_each_under_q(tmp_path):
    # Fixed: with --on-error skip -q, each skipped image came out as a Python warning: two lines naming a source
    # line of cli_write.py ("cli_write.py:31: UserWarning: skipped: ..." and the code of that line).
    from PIL import Image

    for label in ("cat", "dog"):
        (tmp_path / "src" / label).mkdir(parents=True)
        Image.new("RGB", (4, 4), (10, 20, 30)).save(tmp_path / "src" / label / "a.png")
    broken = tmp_path / "src" / "dog" / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 not a JPEG")
    rc, out, err = run("convert", tmp_path / "src", tmp_path / "out", "--name", "t", "--on-error", "skip", "-q",
                       "--workers", 1)
    assert rc == 0 and out == f"{tmp_path / 'out'}/t-train.tfrecord-00000-of-00001\n"
    assert err == f"tfr-torch convert: skipped: {broken}: not an image Pillow can identify\n"
