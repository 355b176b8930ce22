"""Adversarial audit of `tfr-torch reshard` / `tfr_torch.tools.reshard.reshard`.

Beyond the existing tests (random sets in test_write_audit, names in test_cli, Ctrl-C / SIGTERM, URLs, TFDS
metadata), this checks against a simple model (the concatenation of the inputs' records, in argument order):
zero-byte and zero-record inputs of every compression mixed with a glob, read back through every reader
(`read_index` + `check_index`, seek points, `TFRecordDataset(index="auto")`, `IndexedTFRecordDataset`, a glob of
the output folder); the shard-size rule exactly at its boundaries and with records larger than a shard; corrupt
and truncated inputs past finished shards (the `path:offset:` line, nothing left); output folders that are the
input folder (by another name, through a symbolic link, a TFDS root with --tfds) or already hold a set; the
--tfds folder read by tfr_torch.tfds; unusual file names; and a many-file TFDS-named input.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading

import pytest

import tfr_torch
from tfr_torch import IndexedTFRecordDataset, TFRecordDataset, TFRecordWriter
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.reader import RecordReader
from tfr_torch.tools.cli import main
from tfr_torch.tools.reshard import reshard

NATIVE = tfr_torch._native.available()


def run(*args) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `tfr-torch ARGS`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def write(path, records, compression=None) -> str:
    with TFRecordWriter(path, compression=compression) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def records_of(path) -> list[bytes]:
    with RecordReader(str(path)) as reader:
        return [bytes(r) for r in reader]


def snapshot(folder) -> dict[str, bytes]:
    found = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            found[os.path.relpath(p, folder)] = open(p, "rb").read()
    return found


def check_output_set(out, name, split, made, expected, compression=None):
    """The model: `made` are out/NAME-SPLIT shards holding `expected`, once and in order, each with an index
    check_index accepts (and seek points when compressed), read back the same by every reader."""
    n = len(made)
    assert made == [f"{out}/{name}-{split}.tfrecord-{i:05d}-of-{n:05d}" for i in range(n)]
    assert [r for p in made for r in records_of(p)] == expected
    for path in made:
        index = tfr_torch.read_index(path + ".idx", path)
        tfr_torch.check_index(index, path)
        assert len(index) == len(records_of(path)) > 0
        assert os.path.exists(path + ".idx.seek") == (compression is not None and NATIVE)
    meta = json.loads(open(f"{out}/{name}-{split}.tfr_torch.json").read())
    assert (meta["records"], meta["compression"], len(meta["shards"])) == (len(expected), compression, n)
    if expected:
        assert [bytes(r) for r in TFRecordDataset(made, index="auto")] == expected
        pattern = f"{out}/{name}-{split}.tfrecord-*"  # a pattern skips the side files
        assert [bytes(r) for r in TFRecordDataset(pattern, index="auto")] == expected
        indexed = IndexedTFRecordDataset(made)
        assert len(indexed) == len(expected)
        assert [bytes(indexed[i]) for i in reversed(range(len(expected)))] == expected[::-1]


# ----------------------------------------------------------------------------------- every record once, in order


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_mixed_inputs_with_empty_files_and_a_glob_every_output_compression(tmp_path, compression):
    src = tmp_path / "src"
    src.mkdir()
    a = [os.urandom(n) for n in (0, 1, 300, 5000, 17)]
    b = [b"b%d" % i for i in range(40)]
    c = [b"" for _ in range(3)]  # empty records are records
    paths = [write(src / "p-a.tfrecord", a),
             str(src / "zero-bytes.tfrecord"),
             write(src / "p-b.tfrecord.gz", b, "gzip"),
             write(src / "p-none.tfrecord.gz", [], "gzip"),  # a valid, empty GZIP stream
             write(src / "p-c.zz", c, "zlib"),
             write(src / "p-zlib-unnamed.tfrecord", [b"z"], "zlib")]  # compression from the first bytes
    open(paths[1], "wb").close()
    sub = tmp_path / "more"
    sub.mkdir()
    globbed = [write(sub / f"m-{i:03d}.tfrecord", [b"m%d-%d" % (i, j) for j in range(i)]) for i in (2, 0, 1)]
    expected = a + b + c + [b"z"] + [r for p in sorted(globbed) for r in records_of(p)]
    before = snapshot(tmp_path)
    rc, out, err = run("reshard", *paths, sub / "m-*.tfrecord", "--out", tmp_path / "out", "--shard-size", "2KB",
                       "--name", "mix", "-q", *(["--compression", compression] if compression else []))
    assert (rc, err) == (0, "")
    check_output_set(tmp_path / "out", "mix", "train", out.split(), expected, compression)
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("out/")} == before


def test_only_empty_inputs_give_an_empty_set(tmp_path):
    empty = str(tmp_path / "e.tfrecord")
    open(empty, "wb").close()
    rc, out, err = run("reshard", empty, write(tmp_path / "f.tfrecord.gz", [], "gzip"), "--out", tmp_path / "out",
                       "--name", "e", "-q")
    assert (rc, out, err) == (0, "", "")
    assert json.loads((tmp_path / "out" / "e-train.tfr_torch.json").read_text())["records"] == 0
    assert sorted(os.listdir(tmp_path / "out")) == ["e-train.tfr_torch.json"]


def test_tfds_output_of_only_empty_inputs_says_there_are_no_records(tmp_path):
    # Fixed: with --tfds, inputs without a record were refused as "its records are not tf.train.Examples tfr_torch
    # can describe" (there are none to describe); it is the empty split TensorFlow Datasets cannot read.
    empty = str(tmp_path / "e.tfrecord")
    open(empty, "wb").close()
    rc, out, err = run("reshard", empty, "--out", tmp_path / "tf", "--name", "e", "--tfds", "-q")
    assert (rc, out) == (1, "")
    assert err == ("tfr-torch reshard: split 'train' of 'e' has no records: TensorFlow Datasets cannot read an empty "
                   "split (its own writer refuses one: 'No examples were yielded.')\n")
    assert snapshot(tmp_path / "tf") == {}


def test_many_tfds_named_shards_into_few(tmp_path):
    """200 shards of one set (sidecar and all, as reshard or convert made them) into a handful: the sidecar's name
    and split, every record once in shard order, the spec kept."""
    rows = [{"id": i, "pad": b"x" * (i % 50)} for i in range(200)]
    tiny = reshard([write(tmp_path / "rows.tfrecord", [tfr_torch.encode_example(r) for r in rows])],
                   str(tmp_path / "many"), name="big", split="validation", shard_size=1)  # one record a shard
    assert len(tiny) == 200
    rc, out, err = run("reshard", tmp_path / "many" / "big-validation.tfrecord-*", "--out", tmp_path / "few",
                       "--shard-size", "3KB", "-q")
    assert (rc, err) == (0, "")
    expected = [tfr_torch.encode_example(r) for r in rows]
    check_output_set(tmp_path / "few", "big", "validation", out.split(), expected)
    assert len(out.split()) > 2
    meta = json.loads((tmp_path / "few" / "big-validation.tfr_torch.json").read_text())
    assert set(meta["features"]) == {"id", "pad"}
    assert [int(x["id"]) for x in TFRecordDataset(out.split(), "auto")] == list(range(200))


# ------------------------------------------------------------------------------------------------- shard sizes


@pytest.mark.parametrize("size, counts", [(99, [1] * 10), (100, [1] * 10), (199, [1] * 10), (200, [2] * 5),
                                          (201, [2] * 5), (999, [9, 1]), (1000, [10]), (10**9, [10])])
def test_shard_size_counts_framed_bytes_and_its_boundary_is_inclusive(tmp_path, size, counts):
    records = [bytes([i]) * (100 - OVERHEAD) for i in range(10)]  # 100 bytes each, framed
    made = reshard([write(tmp_path / "a.tfrecord", records)], str(tmp_path / "o"), shard_size=size)
    assert [len(records_of(p)) for p in made] == counts
    assert all(os.path.getsize(p) <= max(size, 100) for p in made)
    check_output_set(tmp_path / "o", "a", "train", made, records)


def test_records_larger_than_a_shard_get_one_shard_each(tmp_path):
    records = [b"s", os.urandom(5000), b"t", b"u", os.urandom(3000), os.urandom(3000), b"v"]
    made = reshard([write(tmp_path / "a.tfrecord.gz", records, "gzip")], str(tmp_path / "o"), shard_size="1KB",
                   compression="zlib")
    assert [len(records_of(p)) for p in made] == [1, 1, 2, 1, 1, 1]
    check_output_set(tmp_path / "o", "a", "train", made, records, "zlib")


# ------------------------------------------------------------------------------------ corrupt and truncated inputs


def _corruptions(tmp_path):
    good = [os.urandom(60) for _ in range(200)]
    plain = write(tmp_path / "good.tfrecord", good)
    data = open(plain, "rb").read()
    flipped = bytearray(data)
    flipped[150 * (60 + OVERHEAD) + 20] ^= 1
    gz = open(write(tmp_path / "good.tfrecord.gz", good, "gzip"), "rb").read()
    cases = {"flip.tfrecord": (bytes(flipped), 150 * (60 + OVERHEAD), "corrupt record data"),
             "cut.tfrecord": (data[:-7], 199 * (60 + OVERHEAD), "truncated record"),
             "cut.tfrecord.gz": (gz[: len(gz) * 3 // 4], None, "the GZIP stream ends before its end marker")}
    for name, (content, offset, problem) in cases.items():
        open(tmp_path / name, "wb").write(content)
        yield str(tmp_path / name), offset, problem


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_damaged_input_after_finished_shards_exits_1_naming_path_and_offset_and_leaves_nothing(tmp_path,
                                                                                                compression):
    first = write(tmp_path / "first.tfrecord", [b"ok" * 100] * 30)
    for path, offset, problem in _corruptions(tmp_path):
        out = tmp_path / ("out-" + os.path.basename(path))
        rc, stdout, stderr = run("reshard", first, path, "--out", out, "--name", "d", "--shard-size", "1KB", "-q",
                                 *(["--compression", compression] if compression else []))
        assert rc == 1 and stdout == ""
        at = str(offset) if offset is not None else r"\d+"
        assert re.fullmatch(rf"tfr-torch reshard: {re.escape(path)}:{at}: {problem}[^\n]*\n", stderr), stderr
        assert snapshot(out) == {}  # no shard, index, sidecar, progress file or temporary file


# --------------------------------------------------------------------------------------------- output folders


def test_the_input_folder_as_output_under_another_name_keeps_the_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    records = [b"r%d" % i for i in range(50)]
    made = reshard([write(tmp_path / "x-train.tfrecord-00000-of-00001", records)], ".", name="x", split="copy",
                   shard_size=200)
    assert records_of(tmp_path / "x-train.tfrecord-00000-of-00001") == records
    check_output_set(".", "x", "copy", made, records)
    rc, out, err = run("reshard", "x-train.tfrecord-00000-of-00001", "--out", "./", "--shard-size", 300)
    assert rc == 2 and out == "" and "would write over their input" in err


def test_an_output_folder_that_links_to_the_input_folder_is_refused(tmp_path):
    # Fixed: the clash check compared spellings of the folders, not the folders: `--out LINK`, a symbolic link to
    # the input's folder, with the input's name and split, deleted the input shards (an earlier set with another
    # count, to the new set) instead of refusing.
    (tmp_path / "in").mkdir()
    inputs = [write(tmp_path / "in" / f"x-train.tfrecord-{i:05d}-of-00002", [b"a%d" % i, b"b%d" % i]) for i in range(2)]
    os.symlink(tmp_path / "in", tmp_path / "link")
    before = snapshot(tmp_path / "in")
    rc, out, err = run("reshard", *inputs, "--out", tmp_path / "link", "--shard-size", 1, "-q")
    assert (rc, out) == (2, "")
    assert err.startswith(f"tfr-torch reshard: error: the new shards would write over their input '{inputs[0]}'")
    assert snapshot(tmp_path / "in") == before
    with pytest.raises(ValueError, match="would write over their input"):
        reshard(inputs, str(tmp_path / "link"), shard_size=1)
    assert snapshot(tmp_path / "in") == before


def test_tfds_output_into_the_root_that_holds_the_input_is_refused(tmp_path):
    # Fixed: with --tfds the shards go to OUT/NAME/VERSION/, but the clash check looked in OUT: resharding a TFDS
    # folder's split into its own root (--out data for data/ds/1.0.0/ds-train.*) deleted the input shards.
    folder = tmp_path / "data" / "ds" / "1.0.0"
    rows = [tfr_torch.encode_example({"id": i}) for i in range(12)]
    reshard([write(tmp_path / "rows.tfrecord", rows)], str(tmp_path / "data"), name="ds", shard_size=100, tfds=True)
    inputs = sorted(str(p) for p in folder.glob("ds-train.tfrecord-*[0-9]"))
    assert len(inputs) > 1
    before = snapshot(tmp_path / "data")
    rc, out, err = run("reshard", *inputs, "--out", tmp_path / "data", "--tfds", "-q")
    assert (rc, out) == (2, "")
    assert err.startswith(f"tfr-torch reshard: error: the new shards would write over their input '{inputs[0]}'")
    assert snapshot(tmp_path / "data") == before
    with pytest.raises(ValueError, match="would write over their input"):
        reshard(inputs, str(tmp_path / "data"), tfds=True)
    assert snapshot(tmp_path / "data") == before
    # another version, or another split, is another set: fine
    rc, out, err = run("reshard", *inputs, "--out", tmp_path / "data", "--tfds", "--tfds-version", "1.0.1", "-q")
    assert (rc, err) == (0, "") and snapshot(tmp_path / "data").items() >= before.items()
    assert [int(x["id"]) for x in TFRecordDataset(tmp_path / "data" / "ds" / "1.0.1", split="train")] == list(range(12))


def test_an_earlier_set_in_the_output_folder_is_replaced_without_stale_files(tmp_path):
    records = [os.urandom(100) for _ in range(30)]
    src = write(tmp_path / "s.tfrecord", records)
    out = tmp_path / "out"
    other = reshard([src], str(out), name="other", shard_size=1000)  # another set: kept
    kept = {k: v for k, v in snapshot(out).items()}
    reshard([src], str(out), shard_size=500, compression="gzip")
    made = reshard([src], str(out), shard_size=10**6)  # fewer shards, no compression
    check_output_set(out, "s", "train", made, records)
    assert set(snapshot(out)) == set(kept) | {os.path.basename(p) + s for p in made for s in ("", ".idx")} | {
        "s-train.tfr_torch.json"}
    assert {k: v for k, v in snapshot(out).items() if k in kept} == kept
    assert [bytes(r) for r in TFRecordDataset(other, index="auto")] == records
    # the same count again, now compressed, then not: no stale seek points beside the uncompressed shard
    made = reshard([src], str(out), shard_size=10**6, compression="zlib")
    check_output_set(out, "s", "train", made, records, "zlib")
    made = reshard([src], str(out), shard_size=10**6)
    check_output_set(out, "s", "train", made, records)


# ------------------------------------------------------------------------------------------------ --tfds output


def test_tfds_output_is_read_back_by_tfr_torch_tfds(tmp_path):
    from tfr_torch.tfds import read_info

    rows = [{"id": i, "name": b"n%d" % i, "v": [float(i), 0.5]} for i in range(40)]
    src = write(tmp_path / "rows-test.tfrecord.gz", [tfr_torch.encode_example(r) for r in rows], "gzip")
    rc, out, err = run("reshard", src, "--out", tmp_path / "tf", "--tfds", "--shard-size", "500", "-q")
    assert (rc, err) == (0, "")
    folder = tmp_path / "tf" / "rows" / "1.0.0"
    assert out.split() == [str(folder / f"rows-test.tfrecord-{i:05d}-of-{len(out.split()):05d}")
                           for i in range(len(out.split()))]
    info = read_info(folder)
    assert info.splits["test"].num_examples == 40 and info.splits["test"].num_shards == len(out.split()) > 1
    got = list(TFRecordDataset(tmp_path / "tf" / "rows", split="test"))
    assert [int(x["id"]) for x in got] == list(range(40))
    assert [bytes(x["name"]) if not isinstance(x["name"], str) else x["name"].encode() for x in got] == [
        r["name"] for r in rows]


# ------------------------------------------------------------------------------------------------- file names


def test_unusual_file_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = ["with space.tfrecord", "ünïcödé.tfrecord", "-dash.tfrecord", "data[1].tfrecord", "q'uote\".tfrecord"]
    expected = []
    for i, name in enumerate(names):
        expected += [b"%d-%d" % (i, j) for j in range(i + 1)]
        write(tmp_path / name, expected[-(i + 1):])
    rc, out, err = run("reshard", *[f"./{n}" for n in names], "--out", "sp ace/ü", "--name", "ü n", "--split",
                       "tr-ain", "--shard-size", 30, "-q")
    assert (rc, err) == (0, "")
    check_output_set("sp ace/ü", "ü n", "tr-ain", out.splitlines(), expected)


def test_a_folder_as_input_is_one_line_and_status_1(tmp_path):
    (tmp_path / "in").mkdir()
    write(tmp_path / "in" / "a.tfrecord", [b"a"])
    rc, out, err = run("reshard", tmp_path / "in", "--out", tmp_path / "out", "-q")
    assert (rc, out) == (1, "")
    assert err == f"tfr-torch reshard: {tmp_path / 'in'}: Is a directory\n"
    assert snapshot(tmp_path / "out") == {}


@contextlib.contextmanager
def pipe_of(path):
    """`/dev/fd/N`: a pipe that a thread fills with the bytes of `path`, as the shell's `<(cat path)` is."""
    read_end, write_end = os.pipe()

    def fill():
        with open(write_end, "wb") as f, contextlib.suppress(BrokenPipeError):
            f.write(open(path, "rb").read())

    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    try:
        yield f"/dev/fd/{read_end}"
    finally:
        os.close(read_end)
        thread.join(10)


@pytest.mark.skipif(not os.path.isdir("/dev/fd"), reason="needs /dev/fd")
def test_a_pipe_as_input_loses_no_record(tmp_path):
    # Fixed: the features were inferred by reading records of every input before the copy read them again: a pipe
    # (`<(cat f)`) lost the records the inference read (all 100 of a small file, 2000-odd of 5000), exit status 0.
    examples = [tfr_torch.encode_example({"id": i}) for i in range(3000)]
    small = [tfr_torch.encode_example({"small": i}) for i in range(100)]
    write(tmp_path / "ex.tfrecord", examples)
    gz = write(tmp_path / "small.tfrecord.gz", small, "gzip")
    with pipe_of(tmp_path / "ex.tfrecord") as ex_pipe, pipe_of(gz) as small_pipe:
        rc, out, err = run("reshard", ex_pipe, gz, small_pipe, "--out", tmp_path / "out", "--name", "p",
                           "--shard-size", "40KB", "-q")
    assert (rc, err) == (0, "")
    check_output_set(tmp_path / "out", "p", "train", out.split(), examples + small + small)
    with pipe_of(tmp_path / "ex.tfrecord") as ex_pipe:
        rc, out, err = run("reshard", ex_pipe, "--out", tmp_path / "tf", "--name", "p", "--tfds", "-q")
    assert (rc, out) == (1, "")
    assert err == (f"tfr-torch reshard: tfds=True needs the records' features, read from the records before they are "
                   f"copied: {ex_pipe!r} is a pipe, which can be read only once; write it to a file first\n")
    assert not (tmp_path / "tf").exists()


@pytest.mark.parametrize("option", ["--name", "--split"])
@pytest.mark.parametrize("value", [".", ".."])
def test_dot_names_are_a_misuse(tmp_path, option, value):
    # Fixed: `--name ..` was accepted, and with --tfds (OUT/NAME/VERSION/) wrote the TensorFlow Datasets folder
    # outside OUT, into OUT's parent.
    (tmp_path / "out").mkdir()
    src = write(tmp_path / "e.tfrecord", [tfr_torch.encode_example({"a": 1})])
    rc, out, err = run("reshard", src, "--out", tmp_path / "out", option, value, "--tfds", "-q")
    assert (rc, out) == (2, "")
    assert err == (f"tfr-torch reshard: error: argument {option}: expected a name, not the folder '{value}' (see "
                   "`tfr-torch reshard --help`)\n")
    assert sorted(os.listdir(tmp_path)) == ["e.tfrecord", "out"] and os.listdir(tmp_path / "out") == []


def test_ctrl_c_while_the_set_is_published_leaves_nothing(monkeypatch, tmp_path):
    # Fixed: reshard called ShardedWriter.close() (which finishes the last shard, builds its seek points and renames
    # the set) outside its clean-up: Ctrl-C or SIGTERM there left every finished `.partial` shard, its index and
    # seek points and the progress file behind for good, though reshard never resumes.
    from tfr_torch.tools import shards

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(shards, "publish_set", interrupted)
    src = write(tmp_path / "a.tfrecord", [os.urandom(400) for _ in range(10)])
    rc, out, err = run("reshard", src, "--out", tmp_path / "out", "--shard-size", "1500", "--compression", "gzip")
    assert (rc, out, err) == (130, "", "tfr-torch reshard: interrupted\n")
    assert snapshot(tmp_path / "out") == {}


def test_ctrl_c_while_the_last_shard_is_finished_leaves_nothing(monkeypatch, tmp_path):
    # Fixed: ShardedWriter._finish_shard let go of the shard's writer before the shard was in its finished list, so
    # an interrupt while its index or seek points were written left its .partial files (abort() knew nothing of it)
    from tfr_torch.tools import shards

    calls = []
    build = shards.build_seek_points

    def interrupted(*args, **kwargs):
        calls.append(args)
        if len(calls) == 3:  # the last shard's, built by close()
            raise KeyboardInterrupt
        return build(*args, **kwargs)

    monkeypatch.setattr(shards, "build_seek_points", interrupted)
    src = write(tmp_path / "a.tfrecord", [os.urandom(400) for _ in range(10)])
    rc, out, err = run("reshard", src, "--out", tmp_path / "out", "--shard-size", "1500", "--compression", "gzip")
    assert (rc, out, err) == (130, "", "tfr-torch reshard: interrupted\n")
    assert len(calls) == 3
    assert sorted(snapshot(tmp_path / "out")) == []
