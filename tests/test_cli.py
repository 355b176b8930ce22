"""The tfr-torch command line, run as `python -m tfr_torch` in a subprocess (as users run it)."""

import json
import subprocess
import sys

import numpy as np
import pytest

import tfr_torch


def cli(*args, check_rc=None):
    result = subprocess.run([sys.executable, "-m", "tfr_torch", *map(str, args)], capture_output=True, text=True)
    if check_rc is not None:
        assert result.returncode == check_rc, (result.stdout, result.stderr)
    return result


@pytest.fixture
def files(tmp_path):
    a, b = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord.gz"
    with tfr_torch.TFRecordWriter(a) as w:
        for i in range(3):
            w.write_example({"id": i, "name": f"n{i}", "x": np.array([0.5, np.nan], dtype=np.float32),
                             "raw": b"\xff\x00"})
    with tfr_torch.TFRecordWriter(b, compression="gzip") as w:
        w.write(b"not an example \x00\x01")
    return a, b


def test_count(files):
    a, b = files
    out = cli("count", a, b, check_rc=0).stdout.splitlines()
    assert out == [f"3\t{a}", f"1\t{b}", "4\ttotal"]


def test_count_with_glob(files, tmp_path):
    out = cli("count", tmp_path / "*.tfrecord", check_rc=0).stdout.splitlines()
    assert out == [f"3\t{files[0]}"]


def test_index_writes_idx_files(files):
    a, _ = files
    out = cli("index", a, check_rc=0).stdout.split()
    assert out == [f"{a}.idx"]
    assert tfr_torch.read_index(f"{a}.idx", a).shape == (3, 2)


def test_verify_ok(files):
    a, b = files
    out = cli("verify", a, b, check_rc=0).stdout.splitlines()
    assert out == [f"{a}: OK, 3 records", f"{b}: OK, 1 records"]


def test_verify_reports_each_problem_with_path_and_offset(files):
    a, _ = files
    data = bytearray(a.read_bytes())
    size = len(data) // 3
    data[20] ^= 0xFF  # data byte of record 0
    data[size + 3] ^= 0x01  # length byte of record 1 (record 2 is found again after it)
    a.write_bytes(bytes(data) + b"\x00" * 5)
    result = cli("verify", a, check_rc=1)
    lines = result.stdout.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].startswith(f"{a}:0: corrupt record data")
    assert lines[1].startswith(f"{a}:{size}: corrupt record header")
    assert lines[2].startswith(f"{a}:{3 * size}: found 5 trailing bytes")


def test_verify_missing_file_is_exit_1(tmp_path):
    result = cli("verify", tmp_path / "missing.tfrecord", check_rc=1)
    assert "missing.tfrecord" in result.stdout + result.stderr


def test_head_prints_json_lines(files):
    a, _ = files
    lines = cli("head", "-n", 2, a, check_rc=0).stdout.splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first == {"id": {"int64": [0]}, "name": {"bytes": ["n0"]}, "x": {"float": [0.5, "NaN"]},
                     "raw": {"bytes": [{"base64": "/wA="}]}}


def test_head_raw_and_fallback(files):
    _, b = files
    (line,) = cli("head", "--as", "raw", b, check_rc=0).stdout.splitlines()
    assert json.loads(line) == {"offset": 0, "length": 17, "base64": "bm90IGFuIGV4YW1wbGUgAAE="}


def test_head_tensor(tmp_path):
    path = tmp_path / "t.tfrecord"
    with tfr_torch.TFRecordWriter(path) as w:
        w.write(tfr_torch.serialize_tensor(np.arange(4, dtype=np.int32).reshape(2, 2)))
    (line,) = cli("head", "--as", "tensor", path, check_rc=0).stdout.splitlines()
    assert json.loads(line) == {"dtype": "int32", "shape": [2, 2], "values": [0, 1, 2, 3]}


def test_bad_usage_exits_2():
    assert cli("frobnicate").returncode == 2
    assert cli("count").returncode == 2
