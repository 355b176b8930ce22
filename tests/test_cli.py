"""The tfr-torch command line: each command's output, exit status 1 for data problems and 2 (one line) for misuse.

Most tests call `main(argv)` in this process (quicker); a few run `python -m tfr_torch` in a subprocess, as users
run it (exit status through the interpreter, a broken pipe, progress on a terminal).
"""

import json
import os
import pty
import select
import subprocess
import sys

import numpy as np
import pytest

import tfr_torch
from tfr_torch.tools.cli import main


def run(*args):
    """(exit status, stdout, stderr) of `tfr-torch ARGS` run in this process."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:  # argparse: --help, usage errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "tfr_torch", *map(str, args)], capture_output=True, text=True,
                          **kwargs)


@pytest.fixture
def files(tmp_path, write_records):
    a = write_records(tmp_path / "a.tfrecord", [
        {"id": i, "name": f"n{i}", "x": np.array([0.5, np.nan], dtype=np.float32), "raw": b"\xff\x00"}
        for i in range(3)])
    b = write_records(tmp_path / "b.tfrecord.gz", [b"not an example \x00\x01"], "gzip")
    return a, b


# ------------------------------------------------------------------------------------------------- count


def test_count(files):
    a, b = files
    rc, out, err = run("count", a, b)
    assert (rc, err) == (0, "")
    assert out.splitlines() == [f"3\t{a}", f"1\t{b}", "4\ttotal"]


def test_count_with_glob(files, tmp_path):
    rc, out, _ = run("count", tmp_path / "*.tfrecord")
    assert rc == 0 and out.splitlines() == [f"3\t{files[0]}"]


def test_count_keeps_going_after_a_missing_file_and_exits_1(files, tmp_path):
    a, _ = files
    rc, out, err = run("count", tmp_path / "missing.tfrecord", a)
    assert rc == 1
    assert out.splitlines() == [f"3\t{a}", "3\ttotal"]
    assert err == f"{tmp_path / 'missing.tfrecord'}: No such file or directory\n"


def test_globs_skip_side_files_and_a_listed_side_file_is_misuse(tmp_path, write_records):
    from tfr_torch.tools.reshard import reshard

    src = write_records(tmp_path / "src.tfrecord", [tfr_torch.encode_example({"i": i}) for i in range(5)])
    shards = reshard([str(src)], str(tmp_path / "out"), name="set")  # a shard, its .idx, the sidecar
    rc, out, err = run("count", tmp_path / "out" / "*")
    assert (rc, err) == (0, "") and out.splitlines() == [f"5\t{shards[0]}"]
    rc, out, err = run("inspect", *sorted((tmp_path / "out").iterdir()))  # what the shell makes of out/*
    assert (rc, out) == (2, "")
    assert err == (f"tfr-torch inspect: error: {tmp_path}/out/set-train.tfr_torch.json is a tfr_torch sidecar (the "
                   "shards' spec and record counts), not a TFRecord file: leave it out of the list of files (glob "
                   "patterns skip such files) (see `tfr-torch inspect --help`)\n")


def test_a_glob_matching_nothing_is_a_data_problem(tmp_path):
    rc, out, err = run("count", tmp_path / "nothing-*.tfrecord")
    assert (rc, out) == (1, "")
    assert err == f"tfr-torch count: no files match {str(tmp_path / 'nothing-*.tfrecord')!r}\n"


# ----------------------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize("args, message", [
    (["count", "--compression", "bogus", "x"],
     "tfr-torch count: error: argument --compression: expected auto, none, gzip or zlib, got 'bogus' "
     "(see `tfr-torch count --help`)"),
    (["head", "-n", "-1", "x"],
     "tfr-torch head: error: argument -n: expected a number of records >= 0, got '-1' (see `tfr-torch head --help`)"),
    (["head", "-n", "ten", "x"],
     "tfr-torch head: error: argument -n: expected a number of records >= 0, got 'ten' (see `tfr-torch head --help`)"),
    (["schema", "--max-records", "0", "x"],
     "tfr-torch schema: error: argument --max-records: expected a number of records >= 1, got '0' "
     "(see `tfr-torch schema --help`)"),
    (["inspect", "--max-records", "-5", "x"],
     "tfr-torch inspect: error: argument --max-records: expected a number of records >= 1, got '-5' "
     "(see `tfr-torch inspect --help`)"),
    (["convert", "src", "out", "--name", "x", "--format", "jpeg", "--quality", "200"],
     "tfr-torch convert: error: argument --quality: expected a JPEG quality from 0 to 100, got '200' "
     "(see `tfr-torch convert --help`)"),
    (["convert", "src", "out", "--name", "x", "--workers", "0"],
     "tfr-torch convert: error: argument --workers: expected a number of processes >= 1, got '0' "
     "(see `tfr-torch convert --help`)"),
    (["convert", "src", "out", "--name", "a/b"],
     "tfr-torch convert: error: argument --name: expected a non-empty name without '/', got 'a/b' "
     "(see `tfr-torch convert --help`)"),
    (["reshard", "x", "--out", "o", "--shard-size", "big"],
     "tfr-torch reshard: error: argument --shard-size: shard size 'big': expected bytes as an int or a string like "
     "'128MB' or '64MiB' (see `tfr-torch reshard --help`)"),
    (["reshard", "x", "--out", "o", "--compression", "auto"],
     "tfr-torch reshard: error: argument --compression: expected none, gzip or zlib, got 'auto' "
     "(see `tfr-torch reshard --help`)"),
    (["frobnicate"], "tfr-torch: error: argument COMMAND: invalid choice: 'frobnicate' (choose from 'count', "
     "'index', 'verify', 'head', 'schema', 'inspect', 'convert', 'reshard') (see `tfr-torch --help`)"),
    (["count"], "tfr-torch count: error: the following arguments are required: FILE (see `tfr-torch count --help`)"),
])
def test_misuse_is_one_line_and_exit_status_2(args, message):
    rc, out, err = run(*args)
    assert (rc, out, err) == (2, "", message + "\n")


def test_misuse_exit_status_through_the_interpreter(files):
    result = cli("count", "--compression", "bogus", files[0])
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["tfr-torch count: error: argument --compression: expected auto, none, "
                                          "gzip or zlib, got 'bogus' (see `tfr-torch count --help`)"]


def test_quality_applies_to_jpeg_only(tmp_path):
    rc, _, err = run("convert", tmp_path, tmp_path / "o", "--name", "x", "--quality", "90")
    assert rc == 2
    assert err == ("tfr-torch convert: error: argument --quality: applies to --format jpeg only (got --format keep) "
                   "(see `tfr-torch convert --help`)\n")


def test_every_option_of_every_command_has_help():
    from tfr_torch.tools.cli import _parser  # no public handle on the parser

    parser = _parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(commands) == {"count", "index", "verify", "head", "schema", "inspect", "convert", "reshard"}
    for name, sub in commands.items():
        assert sub.description, name
        for action in sub._actions:
            assert action.help, (name, action.dest)
        text = " ".join(sub.format_help().split())
        assert "(default: None)" not in text and "(default: False)" not in text, name
        for action in sub._actions:
            if action.option_strings and action.default not in (None, False, "==SUPPRESS==") and action.dest != "help":
                # the formatter adds "(default: X)" unless the text already tells its default in its own words
                assert f"(default: {action.default})" in text or "default" in action.help, (name, action.dest)


@pytest.mark.parametrize("command", ["count", "index", "verify", "head", "schema", "inspect", "convert", "reshard"])
def test_help_exits_0(command):
    rc, out, _ = run(command, "--help")
    assert rc == 0 and out.startswith(f"usage: tfr-torch {command}")


# ------------------------------------------------------------------------------------------------- index


def test_index_writes_idx_files(files):
    a, _ = files
    rc, out, _ = run("index", a)
    assert rc == 0 and out.split() == [f"{a}.idx"]
    assert tfr_torch.read_index(f"{a}.idx", a).shape == (3, 2)


def test_index_out_dir(files, tmp_path):
    a, b = files
    (tmp_path / "idx").mkdir()
    rc, out, _ = run("index", a, b, "--out-dir", tmp_path / "idx")
    assert rc == 0 and out.split() == [f"{tmp_path}/idx/a.tfrecord.idx", f"{tmp_path}/idx/b.tfrecord.gz.idx"]
    assert tfr_torch.read_index(tmp_path / "idx" / "b.tfrecord.gz.idx", b).shape == (1, 2)


def test_index_out_dir_that_does_not_exist_names_it(files):
    rc, out, err = run("index", files[0], "--out-dir", "/missing/dir")
    assert (rc, out) == (2, "")
    assert err == ("tfr-torch index: error: argument --out-dir: no such folder: '/missing/dir' "
                   "(see `tfr-torch index --help`)\n")


def test_index_out_dir_refuses_two_files_with_one_name(files, tmp_path, write_records):
    a, _ = files
    (tmp_path / "sub").mkdir()
    other = write_records(tmp_path / "sub" / "a.tfrecord", [b"x"])
    rc, _, err = run("index", a, other, "--out-dir", tmp_path / "sub")
    assert rc == 2
    assert err.startswith(f"tfr-torch index: error: argument --out-dir: '{a}' and '{other}' would both write ")


def test_writer_into_a_missing_folder_names_the_path(files):
    with pytest.raises(FileNotFoundError) as raised:
        tfr_torch.TFRecordWriter("/missing/x.tfrecord")
    assert str(raised.value) == "cannot write '/missing/x.tfrecord': no such folder '/missing'"
    with pytest.raises(FileNotFoundError) as raised:  # every atomic output (here an index), not a temporary name
        tfr_torch.build_index(files[0], "/missing/x.idx")
    assert str(raised.value) == "cannot write '/missing/x.idx': no such folder '/missing'"


# ------------------------------------------------------------------------------------------------ verify


def test_verify_ok(files):
    a, b = files
    rc, out, err = run("verify", a, b)
    assert (rc, err) == (0, "")
    assert out.splitlines() == [f"{a}: OK, 3 records", f"{b}: OK, 1 records"]


def test_verify_reports_each_problem_with_path_and_offset(files):
    a, _ = files
    data = bytearray(a.read_bytes())
    size = len(data) // 3
    data[20] ^= 0xFF  # data byte of record 0
    data[size + 3] ^= 0x01  # length byte of record 1 (record 2 is found again after it)
    a.write_bytes(bytes(data) + b"\x00" * 5)
    rc, out, _ = run("verify", a)
    lines = out.splitlines()
    assert rc == 1 and len(lines) == 3, lines
    assert lines[0].startswith(f"{a}:0: corrupt record data")
    assert lines[1].startswith(f"{a}:{size}: corrupt record header")
    assert lines[2].startswith(f"{a}:{3 * size}: found 5 trailing bytes")


def test_verify_missing_file_is_exit_1(tmp_path):
    rc, out, _ = run("verify", tmp_path / "missing.tfrecord")
    assert (rc, out) == (1, f"{tmp_path / 'missing.tfrecord'}: No such file or directory\n")


# -------------------------------------------------------------------------------------------------- head


def test_head_prints_json_lines_with_file_and_offset_apart(files):
    a, _ = files
    rc, out, _ = run("head", "-n", 2, a)
    lines = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and len(lines) == 2
    assert lines[0] == {"file": str(a), "offset": 0, "example": {
        "id": {"int64": [0]}, "name": {"bytes": ["n0"]}, "raw": {"bytes": [{"base64": "/wA="}]},
        "x": {"float": [0.5, "NaN"]}}}
    assert lines[1]["offset"] == a.stat().st_size // 3
    assert list(lines[0]["example"]) == ["id", "name", "raw", "x"]  # sorted: the same order every run


def test_head_writes_floats_as_their_shortest_decimals(tmp_path, write_records):
    path = write_records(tmp_path / "f.tfrecord", [
        tfr_torch.encode_example({"x": np.float32([0.1, 1 / 3, np.inf])}),
        tfr_torch.serialize_tensor(np.array([0.1, np.nan], np.float32)),
        tfr_torch.serialize_tensor(np.array([0.1, 1 / 3], np.float64)),
        tfr_torch.serialize_tensor(np.array([0.1 + 2j], np.complex64)),
        tfr_torch.serialize_tensor(np.array([0.1], np.float16)),
    ])
    rc, out, _ = run("head", path)
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["example"] == {"x": {"float": [0.1, 0.33333334, "Infinity"]}}
    assert [line["tensor"]["values"] for line in lines[1:]] == [[0.1, "NaN"], [0.1, 1 / 3], [[0.1, 2.0]], [0.1]]


def test_head_zero_records_and_several_files(files):
    a, b = files
    assert run("head", "-n", 0, a, b) == (0, "", "")
    missing = a.parent / "missing.tfrecord"
    rc, out, err = run("head", "-n", 0, a, missing)  # nothing to show, but a missing file is an error still
    assert (rc, out) == (1, "") and str(missing) in err and "No such file" in err
    rc, out, _ = run("head", "-n", 1, a, b)
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(line["file"], line["offset"]) for line in lines] == [(str(a), 0), (str(b), 0)]
    assert lines[1]["raw"] == {"length": 17, "base64": "bm90IGFuIGV4YW1wbGUgAAE="}  # not an Example: raw


def test_head_raw(files):
    _, b = files
    rc, out, _ = run("head", "--as", "raw", b)
    assert json.loads(out) == {"file": str(b), "offset": 0, "raw": {"length": 17,
                                                                    "base64": "bm90IGFuIGV4YW1wbGUgAAE="}}


def test_head_guesses_tensors_and_sequence_examples(tmp_path, write_records):
    path = write_records(tmp_path / "t.tfrecord", [
        tfr_torch.serialize_tensor(np.arange(4, dtype=np.int32).reshape(2, 2)),
        tfr_torch.encode_sequence_example({"id": 7}, {"tok": [[1], [2, 3]]})])
    rc, out, _ = run("head", path)
    tensor, sequence = (json.loads(line) for line in out.splitlines())
    assert tensor["tensor"] == {"dtype": "int32", "shape": [2, 2], "values": [0, 1, 2, 3]}
    assert sequence["sequence_example"] == {"context": {"id": {"int64": [7]}},
                                            "feature_lists": {"tok": [{"int64": [1]}, {"int64": [2, 3]}]}}


def test_head_cuts_long_values_unless_full(tmp_path, write_records):
    text = "é" * 40  # 80 bytes: the cut at 64 bytes falls between two characters' bytes? no: after 32 of them
    odd = "a" + "é" * 40  # the cut falls inside a character: it is left out
    blob = bytes(range(256))
    path = write_records(tmp_path / "long.tfrecord", [tfr_torch.encode_example(
        {"text": text, "odd": odd, "blob": blob, "many": np.arange(100), "short": b"ok"})])
    rc, out, _ = run("head", path)
    example = json.loads(out)["example"]
    assert example["text"] == {"bytes": [{"text": "é" * 32, "length": 80, "truncated": True}]}
    assert example["odd"] == {"bytes": [{"text": "a" + "é" * 31, "length": 81, "truncated": True}]}
    assert example["blob"]["bytes"][0]["length"] == 256 and example["blob"]["bytes"][0]["truncated"] is True
    assert len(example["blob"]["bytes"][0]["base64"]) == 88  # 64 bytes
    assert example["many"] == {"int64": list(range(32)), "count": 100, "truncated": True}
    assert example["short"] == {"bytes": ["ok"]}
    rc, out, _ = run("head", "--full", path)
    example = json.loads(out)["example"]
    assert example["text"] == {"bytes": [text]} and example["many"] == {"int64": list(range(100))}
    assert example["blob"] == {"bytes": [{"base64": __import__("base64").b64encode(blob).decode()}]}


def test_head_as_example_on_something_else_is_a_data_problem(files):
    _, b = files
    rc, out, err = run("head", "--as", "example", b)
    assert rc == 1 and out == "" and err.startswith(f"{b}:0: ")


def test_head_into_a_closed_pipe_is_quiet(tmp_path, write_records):
    path = write_records(tmp_path / "many.tfrecord", [tfr_torch.encode_example({"i": i}) for i in range(20000)])
    proc = subprocess.Popen([sys.executable, "-m", "tfr_torch", "head", "-n", "20000", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(100)
    proc.stdout.close()  # as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait() == 0 and err == ""


# ------------------------------------------------------------------------------------------------ schema


def test_schema_samples_every_file_and_marks_partial_keys(tmp_path, write_records):
    write_records(tmp_path / "a.tfrecord", [tfr_torch.encode_example({"id": i}) for i in range(100)])
    write_records(tmp_path / "b.tfrecord",
                  [tfr_torch.encode_example({"id": i, "late": [1.0, 2.0]}) for i in range(100)])
    rc, out, err = run("schema", "--max-records", 10, tmp_path / "*.tfrecord")
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        "# Proposed from 10 records of 2 files (at most 5 from each; 0 read to the end).",
        "# VarLenFeature: the count of values varies, or some records lack the key (noted beside it).",
        "import torch", "", "import tfr_torch", "", "features = {",
        "    'id': tfr_torch.FixedLenFeature([], torch.int64),",
        "    'late': tfr_torch.VarLenFeature(torch.float32),  # in 5 of 10 records read",
        "}"]


def test_schema_reads_the_compression_it_is_given(tmp_path):
    path = tmp_path / "data.bin"  # a name that says nothing about its compression
    with tfr_torch.TFRecordWriter(path, compression="zlib") as w:
        w.write_example({"id": 1})
    rc, out, _ = run("schema", "--compression", "zlib", path)
    assert rc == 0 and "    'id': tfr_torch.FixedLenFeature([], torch.int64)," in out.splitlines()
    rc, out, err = run("schema", "--compression", "none", path)  # read as it is told: not a TFRecord file then
    assert (rc, out) == (1, "") and err.startswith(f"{path}:0: ")
    assert "pass --compression zlib (or auto)" in err and "compression='zlib'" not in err  # the CLI's own words


def test_schema_of_files_without_records(tmp_path, write_records):
    empty = write_records(tmp_path / "empty.tfrecord", [])
    assert run("schema", empty) == (1, "", f"tfr-torch schema: no records to propose a spec from: {empty} holds "
                                           "no records\n")
    assert run("schema", empty, empty)[2] == ("tfr-torch schema: no records to propose a spec from: 2 files hold no "
                                              "records\n")


def test_schema_of_tensor_records_says_what_they_are(tmp_path, write_records):
    path = write_records(tmp_path / "t.tfrecord", [tfr_torch.serialize_tensor(np.zeros((2, 3), np.float32))])
    rc, out, err = run("schema", path)
    assert (rc, out) == (1, "")
    assert err == (f"{path}:0: record 0 is a serialize_tensor payload (float32 [2, 3]), not a tf.train.Example: no "
                   "feature spec to propose; read such records with tfr_torch.parse_tensor(record, "
                   "dtype=torch.float32)\n")


# ----------------------------------------------------------------------------------------------- inspect


def _table(out, title):
    lines = out.splitlines()
    start = lines.index(title) + 2
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return {line.split("\t")[0]: line.split("\t")[1:] for line in lines[start:end]}


def test_inspect_value_ranges_nan_and_tensors(tmp_path, write_records):
    path = write_records(tmp_path / "mixed.tfrecord", [
        tfr_torch.encode_example({"label": 3, "score": np.float32([0.25, np.nan]), "jpeg": b"\xff" * 10}),
        tfr_torch.encode_example({"label": -2, "score": np.float32([1e9]), "jpeg": b"\xff" * 300}),
        tfr_torch.serialize_tensor(np.arange(6, dtype=np.int16).reshape(2, 3)),
        tfr_torch.serialize_tensor(np.arange(-3, 1, dtype=np.int16).reshape(4, 1)),
        tfr_torch.serialize_tensor(np.array([b"a", b"bcd"], dtype=object)),
    ])
    rc, out, err = run("inspect", path)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[:3] == ["file\trecords\tbytes\tcompression", f"{path}\t5\t{path.stat().st_size}\tnone", ""]
    assert lines[3] == ("records read: 5 (every record); serialize_tensor payload: 3, tf.train.Example: 2")
    features = _table(out, "features:")
    assert features == {"label": ["int64_list", "int64", "2", "1/1.00/1", "-2", "3"],
                        "score": ["float_list", "float32", "2", "1/1.50/2", "0.25", "1e+09", "1 NaN"],
                        "jpeg": ["bytes_list", "string", "2", "1/1.00/1", "10 bytes", "300 bytes"]}
    tensors = _table(out, "tensors (serialize_tensor payloads):")
    assert tensors == {"int16": ["2", "[2, 3] x1, [4, 1] x1", "-3", "5"], "string": ["1", "[2]", "1 bytes", "3 bytes"]}


def test_inspect_keeps_its_columns_for_keys_with_tabs_and_line_breaks(tmp_path, write_records):
    """Any string is a feature key: one with a tab or a line break broke the tab-separated table; it is shown
    escaped."""
    path = write_records(tmp_path / "keys.tfrecord", [tfr_torch.encode_example({"a\tb": 1, "line\nbreak": b"x"})])
    rc, out, err = run("inspect", path)
    assert (rc, err) == (0, "")
    assert _table(out, "features:") == {"a\\tb": ["int64_list", "int64", "1", "1/1.00/1", "1", "1"],
                                         "line\\nbreak": ["bytes_list", "string", "1", "1/1.00/1", "1 bytes",
                                                           "1 bytes"]}


def test_inspect_several_files_with_a_total_and_max_records(tmp_path, write_records):
    a = write_records(tmp_path / "a.tfrecord", [tfr_torch.encode_example({"i": i}) for i in range(5)])
    b = write_records(tmp_path / "b.tfrecord", [tfr_torch.encode_example({"i": 10 + i}) for i in range(5)])
    rc, out, _ = run("inspect", "--max-records", 2, a, b)
    lines = out.splitlines()
    assert lines[3] == f"total\t10\t{a.stat().st_size + b.stat().st_size}"
    assert lines[5] == "records read: 4 (at most 2 per file); tf.train.Example: 4"
    assert _table(out, "features:")["i"] == ["int64_list", "int64", "4", "1/1.00/1", "0", "11"]


def test_inspect_sequence_examples(tmp_path, write_records):
    path = write_records(tmp_path / "s.tfrecord", [tfr_torch.encode_sequence_example({"id": 1}, {"tok": [[1], [2, 3]]}),
                                                   tfr_torch.encode_sequence_example({"id": 2}, {"tok": [[9]]})])
    rc, out, _ = run("inspect", path)
    assert _table(out, "features (Examples, and SequenceExamples' context):")["id"][3:] == ["1/1.00/1", "1", "2"]
    lists = _table(out, "feature lists (SequenceExamples; values per step):")
    assert lists == {"tok": ["int64_list", "int64", "2", "1/2", "3", "1/1.33/2", "1", "9"]}


# ----------------------------------------------------------------------------------------------- reshard


def test_reshard_names_from_numbered_input_names(tmp_path, write_records):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        write_records(src / f"tut-{i:05d}-of-00004.tfrecord", [tfr_torch.encode_example({"i": i})])
    rc, out, err = run("reshard", src / "tut-*.tfrecord", "--out", tmp_path / "out", "-q")
    assert (rc, err) == (0, "")
    assert out.split() == [f"{tmp_path}/out/tut-train.tfrecord-00000-of-00001"]
    sidecar = json.loads((tmp_path / "out" / "tut-train.tfr_torch.json").read_text())
    assert (sidecar["name"], sidecar["split"], sidecar["records"]) == ("tut", "train", 4)
    rc, out, _ = run("reshard", src / "tut-*.tfrecord", "--out", tmp_path / "out2", "--name", "t", "--split", "val")
    assert out.split() == [f"{tmp_path}/out2/t-val.tfrecord-00000-of-00001"]


@pytest.mark.parametrize("names, expected", [
    (["tut-00000-of-00004.tfrecord", "tut-00001-of-00004.tfrecord"], ("tut", "train")),
    (["mnist-test.tfrecord-00000-of-00002", "mnist-test.tfrecord-00001-of-00002"], ("mnist", "test")),
    (["data/imagenet/train-00000-of-01024", "data/imagenet/train-00001-of-01024"], ("imagenet", "train")),
    (["cifar_validation.tfrecord.gz"], ("cifar", "validation")),
    (["shard-0.tfrecords", "shard-1.tfrecords"], ("shard", "train")),
    (["part_3_of_8.tfr"], ("part", "train")),
    (["a.tfrecord", "b.tfrecord"], ("data", "train")),
    (["events-x.tfrecord", "events-y.tfrecord"], ("events", "train")),
])
def test_reshard_names(names, expected):
    from tfr_torch.tools.reshard import reshard_names

    assert reshard_names(names) == expected
    assert reshard_names(names, "n", "s") == ("n", "s")


def test_reshard_refuses_to_overwrite_its_input(tmp_path, write_records):
    write_records(tmp_path / "x-train.tfrecord-00000-of-00001", [b"a"])
    rc, out, err = run("reshard", tmp_path / "x-train.tfrecord-00000-of-00001", "--out", tmp_path)
    assert (rc, out) == (2, "")
    assert err == (f"tfr-torch reshard: error: the new shards would write over their input "
                   f"'{tmp_path}/x-train.tfrecord-00000-of-00001' (same folder, name 'x' and split 'train'): choose "
                   "another output folder, --name or --split (see `tfr-torch reshard --help`)\n")


# ---------------------------------------------------------------------------------------------- progress


def _on_a_terminal(*args):
    """Run the CLI with stderr on a pseudo-terminal (stdout a pipe); return (exit status, stdout, terminal text)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "tfr_torch", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=slave, env=dict(os.environ, COLUMNS="100"))
    os.close(slave)
    screen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    out = proc.stdout.read().decode()
    rc = proc.wait()
    os.close(master)
    return rc, out, screen.decode(errors="replace")


def test_progress_is_drawn_on_a_terminal_only(files):
    a, b = files
    rc, out, screen = _on_a_terminal("count", a, b)
    assert rc == 0 and out.splitlines() == [f"3\t{a}", f"1\t{b}", "4\ttotal"]
    assert "count:" in screen and "records" in screen  # tqdm's bar
    rc, out, screen = _on_a_terminal("count", "-q", a)
    assert rc == 0 and screen == ""
    result = cli("count", a)  # stderr a pipe: nothing but problems
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.parametrize("command, label", [
    (["verify"], "verify:"), (["index"], "index:"), (["inspect"], "inspect:"),
    (["reshard", "--out", "new"], "a-train:"),
])
def test_long_commands_draw_progress_on_a_terminal(files, tmp_path, command, label):
    """Slow by nature: two fresh interpreters (one on a pseudo-terminal) import tfr_torch and run the command."""
    a, _ = files
    args = [command[0], a, *[tmp_path / x if x == "new" else x for x in command[1:]]]
    rc, _, screen = _on_a_terminal(*args)
    assert rc == 0 and label in screen and "100%" in screen, screen
    result = cli(*args[:2], *[tmp_path / "new2" if x == tmp_path / "new" else x for x in args[2:]])
    assert result.returncode == 0 and result.stderr == ""


def test_convert_draws_progress_on_a_terminal(tmp_path):
    """Slow by nature: converts a small image folder in a fresh interpreter on a pseudo-terminal, then again."""
    from PIL import Image

    for label in ("cat", "dog"):
        (tmp_path / "src" / label).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (4, 4), (i, 0, 0)).save(tmp_path / "src" / label / f"{i}.png")
    rc, out, screen = _on_a_terminal("convert", tmp_path / "src", tmp_path / "out", "--name", "pets", "--workers", 1)
    assert rc == 0 and out == f"{tmp_path}/out/pets-train.tfrecord-00000-of-00001\n"
    assert "pets-train:" in screen and "4/4" in screen, screen
