"""An adversarial audit of the writing side: TFRecordWriter against TensorFlow's writer byte for byte, ShardedWriter
under random sizes, crashes (an exception, KeyboardInterrupt, kill -9 of a subprocess at every kind of point) and
resumption, reshard of random sets, the converters on odd inputs, and the `tfr-torch` commands on damaged files.

Every random case is seeded. The checks against TensorFlow run its writer and reader in a subprocess of the Python
that TFR_TORCH_TF_PYTHON names (as tests/test_sequence_audit.py does; TensorFlow need not have torch), one process
for many files, and are skipped without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import ShardedWriter, TFRecordWriter
from tfr_torch.tools.cli import main
from tfr_torch.tools.convert import convert_dataset, convert_image_folder
from tfr_torch.tools.reshard import reshard

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "")
needs_tf = pytest.mark.skipif(not TF_PYTHON or not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow for the reference checks")
OVERHEAD = 16  # a record's framing: 12 bytes of header, 4 of data CRC


# ------------------------------------------------------------------------------------------------ helpers


def random_records(rng: random.Random, n: int, big: bool = False) -> list[bytes]:
    """Records of varied sizes (empty ones, around the writer's 64 KiB framing threshold, and with `big` past
    TensorFlow's 256 KiB zlib buffer), random or repetitive (so that compression has work to do)."""
    out = []
    for _ in range(n):
        k = rng.random()
        if k < 0.05:
            size = 0
        elif k < 0.55:
            size = rng.randrange(1, 200)
        elif k < 0.85:
            size = rng.randrange(200, 5000)
        elif k < 0.95 or not big:
            size = rng.choice([65535, 65536, 65537, rng.randrange(5000, 90000)])
        else:
            size = rng.randrange(260_000, 700_000)
        out.append(rng.randbytes(size) if rng.random() < 0.5 else bytes([rng.randrange(3)]) * size)
    return out


def read_all(paths) -> list[bytes]:
    out: list[bytes] = []
    for path in paths:
        with tfr_torch.read_records(path) as reader:
            out.extend(reader)
    return out


def run_cli(*args) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `tfr-torch ARGS` in this process; an uncaught exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def files_under(folder) -> list[str]:
    """Every file below `folder`, relative to it (hidden temporary files included)."""
    found = []
    for root, _, names in os.walk(folder):
        found += [os.path.relpath(os.path.join(root, n), folder) for n in names]
    return sorted(found)


def check_set(out_dir, name, split, paths, data, compression=None, shard_size=None, per_shard=None):
    """A finished set: records once and in order, an index per shard equal to build_index's, the sidecar's counts
    and sizes those of the files, the rollover rule, and nothing else in the folder."""
    out_dir = str(out_dir)
    n = len(paths)
    assert paths == [os.path.join(out_dir, f"{name}-{split}.tfrecord-{i:05d}-of-{n:05d}") for i in range(n)]
    shards = [read_all([p]) for p in paths]
    assert [r for shard in shards for r in shard] == data
    assert all(shards), "an empty shard"
    with open(os.path.join(out_dir, f"{name}-{split}.tfr_torch.json")) as f:
        meta = json.load(f)
    assert meta["records"] == len(data)
    assert meta["compression"] == compression
    assert [s["file"] for s in meta["shards"]] == [os.path.basename(p) for p in paths]
    assert [s["records"] for s in meta["shards"]] == [len(s) for s in shards]
    assert [s["bytes"] for s in meta["shards"]] == [os.path.getsize(p) for p in paths]
    for path, shard in zip(paths, shards):
        offsets = np.cumsum([0] + [len(r) + OVERHEAD for r in shard])
        with open(path + ".idx") as f:
            assert f.read() == "".join(f"{o} {len(r) + OVERHEAD}\n" for o, r in zip(offsets, shard))
        assert len(tfr_torch.read_index(path + ".idx", path)) == len(shard)
    framed = [[len(r) + OVERHEAD for r in shard] for shard in shards]
    if per_shard is not None and shards:
        assert [len(s) for s in shards[:-1]] == [per_shard] * (n - 1) and 0 < len(shards[-1]) <= per_shard
    elif shard_size is not None:
        for i, sizes in enumerate(framed):
            assert sum(sizes) <= shard_size or len(sizes) == 1, (i, sizes, shard_size)
            if i + 1 < n:  # a shard is closed only when the next record would not fit
                assert sum(sizes) + framed[i + 1][0] > shard_size, (i, sizes, framed[i + 1][0], shard_size)
    expected = {f"{name}-{split}.tfr_torch.json"}
    for p in paths:
        expected |= {os.path.basename(p), os.path.basename(p) + ".idx"}
        if compression is not None and tfr_torch._native.core is not None:  # seek points: by the compiled core
            expected.add(os.path.basename(p) + ".idx.seek")
    assert set(files_under(out_dir)) == expected
    return meta


# ------------------------------------------------------------------------ TFRecordWriter against TensorFlow

_TF_SCRIPT = textwrap.dedent("""
    import hashlib, json, struct, sys
    import tensorflow as tf

    def records(path):
        data, pos, out = open(path, "rb").read(), 0, []
        while pos < len(data):
            (n,) = struct.unpack_from("<Q", data, pos)
            out.append(data[pos + 8 : pos + 8 + n])
            pos += 8 + n
        return out

    def bits(v):
        return "nan" if v != v else struct.unpack("<I", struct.pack("<f", v))[0]

    def feature(f):
        kind = f.WhichOneof("kind")
        if kind == "bytes_list":
            return ["bytes", [v.hex() for v in f.bytes_list.value]]
        if kind == "float_list":
            return ["float", [bits(v) for v in f.float_list.value]]
        if kind == "int64_list":
            return ["int64", list(f.int64_list.value)]
        return ["none"]

    def features(m):
        return {k: feature(v) for k, v in m.feature.items()}

    jobs, answers = json.load(open(sys.argv[1])), []
    for job in jobs:
        if job["op"] == "write":
            options = tf.io.TFRecordOptions(compression_type=job["type"], compression_level=job["level"])
            with tf.io.TFRecordWriter(job["out"], options) as writer:
                for i, record in enumerate(records(job["records"])):
                    writer.write(record)
                    if i in job["flush"]:
                        writer.flush()
            answers.append(None)
        elif job["op"] == "read":
            dataset = tf.data.TFRecordDataset(job["path"], compression_type=job["type"])
            answers.append([hashlib.sha256(r.numpy()).hexdigest() for r in dataset])
        elif job["op"] == "example":
            got = []
            for r in tf.data.TFRecordDataset(job["path"]):
                if job["kind"] == "example":
                    got.append(features(tf.train.Example.FromString(r.numpy()).features))
                else:
                    s = tf.train.SequenceExample.FromString(r.numpy())
                    got.append({"context": features(s.context),
                                "lists": {k: [feature(f) for f in v.feature]
                                          for k, v in s.feature_lists.feature_list.items()}})
            answers.append(got)
    json.dump(answers, open(sys.argv[2], "w"))
""")


def tensorflow(tmp_path, jobs: list[dict]) -> list:
    """Run `jobs` in TensorFlow (one subprocess): write files, read files (record digests), parse Examples."""
    script, spec, answers = tmp_path / "tf_jobs.py", tmp_path / "tf_jobs.json", tmp_path / "tf_answers.json"
    script.write_text(_TF_SCRIPT)
    spec.write_text(json.dumps(jobs))
    done = subprocess.run([TF_PYTHON, str(script), str(spec), str(answers)], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(answers.read_text())


def write_plain(path, records) -> None:
    """Records as 8-byte lengths and bytes: a neutral file for the TensorFlow script to read."""
    with open(path, "wb") as f:
        for r in records:
            f.write(struct.pack("<Q", len(r)) + r)


def digests(records) -> list[str]:
    return [hashlib.sha256(r).hexdigest() for r in records]


@needs_tf
def test_tensorflow_writes_the_same_bytes_for_every_compression_and_level(tmp_path):
    """Random records (empty, 64 KiB +-1, past TF's 256 KiB buffer) with flushes at random records, written by
    TensorFlow and by TFRecordWriter: the same bytes uncompressed and with GZIP/ZLIB at every level but 0 (TF's
    stored blocks follow its 256 KiB buffer, as the docs say); at level 0 each reads the other's file."""
    rng = random.Random(20261126)
    data = random_records(rng, 160, big=True)
    write_plain(tmp_path / "records.bin", data)
    jobs, ours = [], []
    for kind in ("", "GZIP", "ZLIB"):
        for level in ([None] if kind == "" else [None, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]):
            for n in (0, 1, len(data)):
                flush = sorted(rng.sample(range(n), min(n, 4))) if n > 1 and rng.random() < 0.6 else []
                sub = tmp_path / f"{kind or 'none'}-{level}-{n}"
                sub.mkdir()
                write_plain(sub / "records.bin", data[:n])
                jobs.append({"op": "write", "type": kind, "level": level, "records": str(sub / "records.bin"),
                             "flush": flush, "out": str(sub / "tf.tfrecord")})
                writer = TFRecordWriter(sub / "ours.tfrecord", compression=kind or None, compression_level=level)
                for i, record in enumerate(data[:n]):
                    writer.write(record if i % 3 else memoryview(bytearray(record)))
                    if i in flush:
                        writer.flush()
                writer.close()
                ours.append((sub, kind, level, n))
                if level == 0:  # TensorFlow reads ours
                    jobs.append({"op": "read", "path": str(sub / "ours.tfrecord"), "type": kind})
    answers = iter(tensorflow(tmp_path, jobs))
    for sub, kind, level, n in ours:
        assert next(answers) is None
        theirs, mine = (sub / "tf.tfrecord").read_bytes(), (sub / "ours.tfrecord").read_bytes()
        if level != 0:
            assert mine == theirs, (kind, level, n)
        else:
            assert next(answers) == digests(data[:n]), (kind, n)
        assert read_all([sub / "tf.tfrecord"]) == data[:n], (kind, level, n)


def _random_value(rng: random.Random):
    """(a value for encode_example, what TensorFlow's proto then holds, as the TF script writes it)."""
    kind = rng.choice(["int", "float", "bytes"])
    n = rng.choice([0, 1, 1, 2, 5, 40])
    if kind == "int":
        pool = [0, 1, -1, 2**63 - 1, -(2**63), 2**31, rng.randrange(-(2**63), 2**63)]
        values = [rng.choice(pool) for _ in range(n)]
        form = rng.choice(["array", "list", "scalar", "bool", "uint8"])
        if form == "scalar" and n == 1:
            return values[0], ["int64", values]
        if form == "bool":
            flags = [rng.random() < 0.5 for _ in range(n)]
            return np.array(flags, dtype=bool).reshape(-1, 1), ["int64", [int(f) for f in flags]]
        if form == "uint8":
            small = [rng.randrange(256) for _ in range(n)]
            return np.array(small, np.uint8), ["int64", small]
        if form == "list" and n:
            return values, ["int64", values]
        return np.array(values, np.int64), ["int64", values]
    if kind == "float":
        pool = [0.0, -0.0, 1.5, -2.25, float("inf"), float("-inf"), float("nan"), 3.4e38, 1e-45, rng.uniform(-1e6, 1e6)]
        values = np.array([rng.choice(pool) for _ in range(n)], np.float32)
        bits = ["nan" if math.isnan(v) else int(b) for v, b in zip(values, values.view(np.uint32))]
        if n == 1 and rng.random() < 0.3:
            return float(values[0]), ["float", bits]
        if n == 4 and rng.random() < 0.5:
            return torch.from_numpy(values.reshape(2, 2)), ["float", bits]
        return values, ["float", bits]
    items = [rng.choice([b"", rng.randbytes(rng.randrange(1, 30)), "é猫 text".encode()]) for _ in range(n)]
    if n == 1 and rng.random() < 0.5:
        try:
            return items[0].decode("utf-8"), ["bytes", [items[0].hex()]]
        except UnicodeDecodeError:
            return items[0], ["bytes", [items[0].hex()]]
    if not n:
        return [], None  # an empty list has no type: left out
    return items, ["bytes", [i.hex() for i in items]]


def _random_features(rng: random.Random) -> tuple[dict, dict]:
    keys = ["a", "image/encoded", "é", "with space", "x" * 40, "0", "k.1", "猫"]
    values, expected = {}, {}
    for key in rng.sample(keys, rng.randrange(0, len(keys))):
        value, form = _random_value(rng)
        if form is None:
            continue
        values[key], expected[key] = value, form
    return values, expected


@needs_tf
def test_tensorflow_reads_the_examples_and_sequence_examples_written(tmp_path):
    """Random Examples and SequenceExamples written with write_example / write_sequence_example (and ShardedWriter's)
    in every compression: TensorFlow reads each file and parses each record to exactly the values given."""
    rng = random.Random(7)
    examples = [_random_features(rng) for _ in range(120)]
    sequences = []
    for _ in range(60):
        context, context_form = _random_features(rng)
        lists, lists_form = {}, {}
        for key in rng.sample(["tokens", "frames", "words", "e"], rng.randrange(0, 4)):
            kind = rng.choice(["int64", "float", "bytes"])
            steps, forms = [], []
            for _ in range(rng.choice([0, 1, 3, 7])):
                n = rng.choice([1, 4] if kind == "bytes" else [0, 1, 4])  # an empty bytes step has no type
                if kind == "int64":
                    v = [rng.randrange(-(2**63), 2**63) for _ in range(n)]
                    steps.append(np.array(v, np.int64))
                    forms.append(["int64", v])
                elif kind == "float":
                    a = np.array([rng.uniform(-5, 5) for _ in range(n)], np.float32)
                    steps.append(a)
                    forms.append(["float", [int(b) for b in a.view(np.uint32)]])
                else:
                    b = [rng.randbytes(rng.randrange(0, 9)) for _ in range(n)]
                    steps.append(b)
                    forms.append(["bytes", [x.hex() for x in b]])
            lists[key], lists_form[key] = steps, forms
        sequences.append(((context, lists), {"context": context_form, "lists": lists_form}))
    jobs, expected = [], []
    for kind in (None, "gzip", "zlib"):
        path = tmp_path / f"examples-{kind}.tfrecord"
        with TFRecordWriter(path, compression=kind) as writer:
            for values, _ in examples:
                writer.write_example(values)
        plain = tmp_path / f"examples-{kind}.plain.tfrecord"
        with TFRecordWriter(plain) as writer:
            for record in read_all([path]):
                writer.write(record)
        jobs.append({"op": "example", "path": str(plain), "kind": "example"})
        jobs.append({"op": "read", "path": str(path), "type": (kind or "").upper()})
        expected += [[form for _, form in examples], digests(read_all([plain]))]
    with ShardedWriter(tmp_path / "seq", "seq", records_per_shard=1000) as writer:
        for (context, lists), _ in sequences:
            writer.write_sequence_example(context, lists)
    jobs.append({"op": "example", "path": writer.paths[0], "kind": "sequence"})
    expected.append([form for _, form in sequences])
    assert tensorflow(tmp_path, jobs) == expected


def test_writer_framing_matches_the_reference_for_random_records_and_flushes(tmp_path):
    """Without TensorFlow: the uncompressed file is each record framed as the format says, whatever mix of sizes
    and flushes (records pending in the writer's batch, large ones written directly); GZIP/ZLIB files inflate to it."""
    import zlib

    import crc32c

    def masked(data: bytes) -> bytes:
        c = crc32c.crc32c(data)
        return struct.pack("<I", (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)

    rng = random.Random(3)
    for trial in range(6):
        data = random_records(rng, rng.randrange(0, 80), big=trial % 2 == 0)
        reference = b"".join(struct.pack("<Q", len(r)) + masked(struct.pack("<Q", len(r))) + r + masked(r)
                             for r in data)
        for kind, wbits in ((None, None), ("gzip", 31), ("zlib", 15)):
            path = tmp_path / f"{trial}-{kind}.tfrecord"
            writer = TFRecordWriter(path, compression=kind)
            for record in data:
                writer.write(rng.choice([bytes, bytearray, memoryview])(record))
                if rng.random() < 0.1:
                    writer.flush()
            assert not path.exists()
            writer.close()
            raw = path.read_bytes()
            assert (raw if wbits is None else zlib.decompress(raw, wbits)) == reference, (trial, kind)


# ------------------------------------------------------------------------------------------- ShardedWriter


def test_sharded_writer_random_sets(tmp_path):
    """Random record sizes, shard sizes or records per shard, compressions and bytes-like types: every record once,
    in order; shards roll over exactly when the next record would not fit; indexes, sidecar and folder agree."""
    rng = random.Random(11)
    for trial in range(14):
        data = random_records(rng, rng.choice([0, 1, rng.randrange(2, 70)]))
        compression = rng.choice([None, None, "gzip", "zlib"])
        kwargs: dict = {"compression": compression}
        if rng.random() < 0.4:
            kwargs["records_per_shard"] = rng.randrange(1, 9)
        else:
            kwargs["shard_size"] = rng.choice([1, 17, 100, 1000, 5000, 70_000, "1MB"])
        out = tmp_path / f"set{trial}"
        with ShardedWriter(out, "ds", "train", **kwargs) as writer:
            for record in data:
                kind = rng.random()
                if kind < 0.2:
                    writer.write(bytearray(record))
                elif kind < 0.3:
                    writer.write(memoryview(record))
                elif kind < 0.4 and len(record) % 4 == 0:
                    writer.write(memoryview(np.frombuffer(record, np.uint32)))  # items of 4 bytes each
                else:
                    writer.write(record)
            assert writer.records == len(data)
        shard_size = tfr_torch.tools.shards.parse_size(kwargs["shard_size"]) if "shard_size" in kwargs else None
        check_set(out, "ds", "train", writer.paths, data, compression, shard_size, kwargs.get("records_per_shard"))


def test_a_memoryview_of_wider_items_is_indexed_by_its_bytes(tmp_path):
    """Defect: ShardedWriter counted a record's bytes with len(), which for a memoryview of int32 items is the item
    count: the index and the shard-size accounting were wrong (read_index refused the shard as stale)."""
    arrays = [np.arange(i, i + 10, dtype=np.int32) for i in range(5)]
    with ShardedWriter(tmp_path, "m", shard_size=200) as writer:
        for a in arrays:
            writer.write(memoryview(a))
    data = [a.tobytes() for a in arrays]
    check_set(tmp_path, "m", "train", writer.paths, data, shard_size=200)


def test_a_refused_record_leaves_no_empty_shard(tmp_path):
    """Defect: a record refused (not bytes) just when the open shard was full finished that shard and opened the
    next one first, so closing wrote an empty shard."""
    writer = ShardedWriter(tmp_path, "r", records_per_shard=2)
    writer.write(b"a")
    writer.write(b"b")
    for bad in ("text", 7, None, [b"x"]):
        with pytest.raises(TypeError, match=f"a record must be bytes-like, got {type(bad).__name__}"):
            writer.write(bad)
    check_set(tmp_path, "r", "train", writer.close(), [b"a", b"b"], per_shard=2)


def test_a_position_or_state_that_is_not_json_is_refused_before_anything_is_written(tmp_path):
    """Defect: a position the progress file cannot hold (a numpy int, as from np.arange) was taken, and failed
    later with json's "Object of type int64 is not JSON serializable" inside another record's write, when its
    shard was finished; a state that is not JSON raised after its record had been written (a retry wrote it twice)."""
    writer = ShardedWriter(tmp_path, "p", records_per_shard=2)
    writer.write(b"a", position=0)
    writer.write(b"b", position=1)
    for position, state in ((np.int64(2), None), (2, {"seen": {1, 2}}), (object(), {})):
        with pytest.raises(TypeError, match=re.escape("position and state must be JSON (ints, strings, lists, dicts")):
            writer.write(b"c", position=position, state=state)
    writer.write(b"c", position=2, state={"seen": [1, 2]})
    check_set(tmp_path, "p", "train", writer.close(), [b"a", b"b", b"c"], per_shard=2)


@pytest.mark.parametrize("kwargs, message", [
    ({"shard_size": "bogus"}, "shard size 'bogus'"),
    ({"shard_size": 0}, "shard size must be positive"),
    ({"records_per_shard": 0}, "records_per_shard must be a positive int"),
    ({"tfds": {"version": "x"}, "features": {}}, "a TFDS version is MAJOR.MINOR.PATCH"),
    ({"tfds": {}, "features": {}, "compression": "gzip"}, "TensorFlow Datasets reads uncompressed shards only"),
    ({"tfds": {"bogus": 1}, "features": {}}, "unknown key"),
    ({"compression": "lzma"}, "unknown compression"),
    ({"seek_span": 5}, "seek_span"),
])
def test_bad_arguments_are_refused_before_the_output_folder_is_made(tmp_path, kwargs, message):
    """Defect: ShardedWriter made its output folder before checking shard_size, records_per_shard and the tfds
    options, so a refused call (and `tfr-torch reshard --tfds --compression gzip`) left folders behind."""
    out = tmp_path / "new" / "out"
    with pytest.raises(ValueError, match=re.escape(message)):
        ShardedWriter(out, "ds", "train", **kwargs)
    assert not (tmp_path / "new").exists()


def test_closing_removes_the_unfinished_shards_of_an_interrupted_run(tmp_path):
    """Defect: a run that started over (resume=False) or resumed and then wrote fewer shards left the `.partial`
    shards and indexes of the interrupted run beside the finished set, for good."""
    rng = random.Random(5)
    data = random_records(rng, 30)
    writer = ShardedWriter(tmp_path, "ds", records_per_shard=2, compression="gzip")
    for i, record in enumerate(data[:19]):
        writer.write(record, position=i)
    writer.abort()  # 9 finished shards
    assert sum(n.endswith(".partial") for n in os.listdir(tmp_path)) == 9
    fresh = ShardedWriter(tmp_path, "ds", records_per_shard=2, compression="gzip")  # starts over
    for record in data[:5]:
        fresh.write(record)
    check_set(tmp_path, "ds", "train", fresh.close(), data[:5], "gzip", per_shard=2)

    writer = ShardedWriter(tmp_path, "ds", records_per_shard=3)
    for i, record in enumerate(data[:16]):
        writer.write(record, position=i)
    writer.abort()  # 5 finished shards
    with open(tmp_path / "ds-train.tfrecord-00001.partial", "ab") as f:
        f.write(b"damage")  # shards 1 on are not trusted: a resumed run rewrites them, from item 3
    resumed = ShardedWriter(tmp_path, "ds", records_per_shard=3, resume=True)
    assert resumed.resumed_position == 2
    for record in data[3:7]:
        resumed.write(record)
    check_set(tmp_path, "ds", "train", resumed.close(), data[:7], per_shard=3)


def test_closing_removes_the_unfinished_shards_of_an_interrupted_run_behind_a_url():
    """The same behind an fsspec URL (memory://): the finished set only."""
    pytest.importorskip("fsspec")
    from tfr_torch.format.folder import OutputFolder

    url = f"memory://audit-{random.Random(1).randrange(10**9)}/out"
    writer = ShardedWriter(url, "n", records_per_shard=2)
    for i in range(9):
        writer.write(b"%d" % i, position=i)
    writer.abort()
    assert sum(n.endswith(".partial") for n in OutputFolder(url).names()) == 4
    writer = ShardedWriter(url, "n", records_per_shard=2)
    for i in range(3):
        writer.write(b"%d" % i)
    paths = writer.close()
    assert read_all(paths) == [b"0", b"1", b"2"]
    assert sorted(OutputFolder(url).names()) == ["n-train.tfr_torch.json", "n-train.tfrecord-00000-of-00002",
                                                 "n-train.tfrecord-00000-of-00002.idx",
                                                 "n-train.tfrecord-00001-of-00002",
                                                 "n-train.tfrecord-00001-of-00002.idx"]


def test_an_interrupted_with_block_resumes_to_every_record_once(tmp_path):
    """An exception or KeyboardInterrupt at a random record inside `with ShardedWriter(...)`, then resume=True and
    going on from `resumed_position + 1`, any number of times: every record once, in order."""
    rng = random.Random(2)
    for trial in range(6):
        data = random_records(rng, rng.randrange(10, 60))
        kwargs = {"records_per_shard": rng.randrange(1, 6)} if trial % 2 else {"shard_size": rng.choice([300, 2000])}
        kwargs["compression"] = rng.choice([None, "zlib"])
        out = tmp_path / f"t{trial}"
        stops = sorted(rng.sample(range(len(data)), 3))
        for stop in stops + [None]:
            try:
                with ShardedWriter(out, "ds", resume=True, **kwargs) as writer:
                    start = 0 if writer.resumed_position is None else writer.resumed_position + 1
                    assert writer.records == start
                    for i in range(start, len(data)):
                        if i == stop:
                            raise rng.choice([KeyboardInterrupt, RuntimeError])("stop")
                        writer.write(data[i], position=i)
            except (KeyboardInterrupt, RuntimeError):
                assert stop is not None
        size = kwargs.get("shard_size")
        check_set(out, "ds", "train", writer.paths, data, kwargs["compression"], size, kwargs.get("records_per_shard"))


def _crashing_run(out: str, data: list[bytes], kill: dict, kwargs: dict, report: str) -> None:
    """A forked child: resume the set, write the rest of `data`, and SIGKILL itself before record `kill["n"]`, or
    just before the `kill["n"]`-th rename (inside a shard's finishing or close()), as a crash would."""
    import signal

    if kill["at"] == "rename":
        calls, replace = [0], os.replace

        def dying_replace(a, b):
            calls[0] += 1
            if calls[0] == kill["n"]:
                os.kill(os.getpid(), signal.SIGKILL)
            replace(a, b)

        os.replace = dying_replace
    writer = ShardedWriter(out, "ds", "train", resume=True, **kwargs)
    start = 0 if writer.resumed_position is None else writer.resumed_position + 1
    with open(report, "w") as f:
        f.write(f"{start} {writer.records}")
    for i in range(start, len(data)):
        if kill["at"] == "record" and i == kill["n"]:
            os.kill(os.getpid(), signal.SIGKILL)
        writer.write(data[i], position=i)
    writer.close()


@pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGKILL")
def test_kill_9_at_random_points_then_resume_gives_every_record_once(tmp_path):
    """A forked process writing a set is killed (SIGKILL) before a random record, or just before a random rename (a
    shard, its index, the progress file, close()'s moves and sidecar), several times; each run resumes from what
    the last one left. The finished set holds every record once, in order, with nothing else beside it (no
    unfinished shard, no temporary file of a killed write)."""
    import multiprocessing

    fork = multiprocessing.get_context("fork")
    rng = random.Random(9)
    for trial in range(10):
        data = random_records(rng, rng.randrange(25, 45))
        kwargs: dict = {"records_per_shard": rng.randrange(2, 5)} if trial % 2 == 0 else {"shard_size": 1500}
        kwargs["compression"] = [None, "gzip", "zlib"][trial % 3]
        out = tmp_path / f"out{trial}"
        kills = [{"at": "record", "n": rng.randrange(5, len(data))}, {"at": "rename", "n": rng.randrange(1, 12)},
                 {"at": "rename", "n": rng.randrange(1, 40)}, {"at": "rename", "n": rng.randrange(1, 40)},
                 {"at": "record", "n": len(data) - 1}, {"at": "none"}]
        starts = []
        for run, kill in enumerate(kills):
            report = tmp_path / f"report{trial}-{run}"
            child = fork.Process(target=_crashing_run, args=(str(out), data, kill, kwargs, str(report)))
            child.start()
            child.join()
            assert child.exitcode in (0, -9), (trial, kill, child.exitcode)
            start, records = map(int, report.read_text().split())
            assert start == records, (trial, kill)
            starts.append(start)
            if child.exitcode == 0:
                break
        assert child.exitcode == 0, (trial, kills)
        assert max(starts) > 0, "no run resumed: the test did not test resumption"
        paths = sorted(str(out / n) for n in os.listdir(out) if re.fullmatch(r"ds-train\.tfrecord-\d+-of-\d+", n))
        check_set(out, "ds", "train", paths, data, kwargs["compression"], kwargs.get("shard_size"),
                  kwargs.get("records_per_shard"))


# ------------------------------------------------------------------------------------------------ reshard


def _write_inputs(folder, rng, count, prefix="in"):
    folder.mkdir(parents=True, exist_ok=True)
    paths, data = [], []
    for i in range(count):
        kind = rng.choice([None, "gzip", "zlib"])
        suffix = {None: "", "gzip": ".gz", "zlib": ".zz"}[kind] if rng.random() < 0.5 else ""
        path = folder / f"{prefix}-{i:05d}-of-{count:05d}.tfrecord{suffix}"
        records = [tfr_torch.encode_example({"id": len(data) + j, "blob": rng.randbytes(rng.randrange(0, 600))})
                   for j in range(rng.choice([0, 1, rng.randrange(2, 40)]))]
        with TFRecordWriter(path, compression=kind) as writer:
            for record in records:
                writer.write(record)
        paths.append(str(path))
        data += records
    return paths, data


def test_reshard_random_sets_keeps_every_record_once_in_order(tmp_path):
    """Random input sets (each file any compression, some empty) to random shard sizes and output compressions,
    through the API and the CLI: the records of the inputs, once and in order; inputs untouched."""
    rng = random.Random(4)
    for trial in range(6):
        paths, data = _write_inputs(tmp_path / f"in{trial}", rng, rng.randrange(1, 5))
        before = {p: open(p, "rb").read() for p in paths}
        size = rng.choice([100, 700, 3000, 10**6])
        compression = rng.choice([None, "gzip", "zlib"])
        out = tmp_path / f"out{trial}"
        if trial % 2:
            made = reshard(paths, str(out), shard_size=size, compression=compression)
        else:
            rc, stdout, stderr = run_cli("reshard", *paths, "--out", out, "--shard-size", size, "-q",
                                         *(["--compression", compression] if compression else []))
            assert rc == 0 and stderr == "", stderr
            made = stdout.split()
        check_set(out, "in", "train", made, data, compression, size)
        assert before == {p: open(p, "rb").read() for p in paths}


def _damaged_copy(good: str, path, rng: random.Random) -> int:
    """A copy of uncompressed `good` with one record damaged (a flipped bit or a cut); the record's offset."""
    data = open(good, "rb").read()
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += struct.unpack_from("<Q", data, pos)[0] + OVERHEAD
    k = rng.randrange(len(offsets))
    start, end = offsets[k], offsets[k + 1] if k + 1 < len(offsets) else len(data)
    if rng.random() < 0.5:
        damaged = bytearray(data)
        damaged[rng.randrange(start, end)] ^= 1 << rng.randrange(8)
        open(path, "wb").write(bytes(damaged))
    else:
        open(path, "wb").write(data[: rng.randrange(start + 1, end)])
    return start


def test_a_refused_reshard_leaves_nothing_behind(tmp_path):
    """Defect: reshard stopped by a corrupt record (past the records read to infer the features) left its finished
    shards as `.partial` files, their indexes and a progress file in the output folder, though it never resumes.
    A set already there stays as it was."""
    rng = random.Random(6)
    with TFRecordWriter(tmp_path / "big.tfrecord") as writer:
        for i in range(2500):
            writer.write_example({"id": i, "pad": rng.randbytes(rng.randrange(0, 40))})
    data = open(tmp_path / "big.tfrecord", "rb").read()
    open(tmp_path / "cut.tfrecord", "wb").write(data[:-5])
    out = tmp_path / "out"
    earlier = reshard([str(tmp_path / "big.tfrecord")], str(out), name="cut", shard_size=50_000)
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}
    assert len(earlier) > 1
    for size in ("20KB", "30KB"):
        with pytest.raises(tfr_torch.TFRecordError, match="truncated record"):
            reshard([str(tmp_path / "cut.tfrecord")], str(out), shard_size=size)
        assert {n: (out / n).read_bytes() for n in files_under(out)} == before
        rc, stdout, stderr = run_cli("reshard", tmp_path / "cut.tfrecord", "--out", out, "--shard-size", size, "-q")
        assert rc == 1 and stdout == ""
        cut = re.escape(str(tmp_path / "cut.tfrecord"))
        assert re.fullmatch(rf"tfr-torch reshard: {cut}:\d+: truncated record.*\n", stderr)
        assert {n: (out / n).read_bytes() for n in files_under(out)} == before


def test_reshard_and_convert_with_tfds_and_compression_are_misuse(tmp_path, write_records):
    """Defect: `--tfds --compression gzip` (TFDS folders hold uncompressed shards) exited 1 as if the data were bad,
    after making the output folders; it is a misuse: exit 2, one line, nothing made."""
    path = write_records(tmp_path / "a.tfrecord", [{"id": 1}])
    (tmp_path / "images" / "cat").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "images" / "cat" / "a.png")
    for args in (["reshard", path, "--out", tmp_path / "out", "--tfds", "--compression", "gzip"],
                 ["convert", tmp_path / "images", tmp_path / "out", "--name", "x", "--tfds", "--compression",
                  "zlib", "-q"]):
        rc, stdout, stderr = run_cli(*args)
        assert rc == 2 and stdout == ""
        assert re.fullmatch(rf"tfr-torch {args[0]}: error: argument --compression: TensorFlow Datasets folders "
                            r"\(--tfds\) hold uncompressed shards, got --compression \w+ \(see .*\)\n", stderr)
        assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------- the CLI


def test_commands_on_randomly_damaged_files_name_the_file_and_the_record(tmp_path):
    """A flipped bit or a cut in a random record of random files: every reading command exits 1 with a
    `path:offset: problem` line naming the damaged record (count and index check header CRCs only), never a
    traceback, and index writes no index for a file it refuses."""
    rng = random.Random(8)
    for trial in range(8):
        good = tmp_path / f"good{trial}.tfrecord"
        with TFRecordWriter(good) as writer:
            for i in range(rng.randrange(1, 30)):
                writer.write_example({"id": i, "v": rng.randbytes(rng.randrange(0, 80))})
        bad = tmp_path / f"bad{trial}.tfrecord"
        offset = _damaged_copy(str(good), bad, rng)
        truncated = os.path.getsize(bad) < os.path.getsize(good)
        line = f"{bad}:{offset}: "
        for command in ("count", "verify", "index", "head", "schema", "inspect"):
            extra = ["-n", "1000"] if command == "head" else []
            rc, stdout, stderr = run_cli(command, good, bad, *extra)
            problem = [x for x in (stdout + stderr).splitlines() if x.startswith(f"{bad}:")]
            header_only = command in ("count", "index")
            if header_only and not problem:  # a flipped data bit: these do not check data CRCs
                assert rc == 0 and not truncated, (trial, command)
                continue
            assert rc == 1, (trial, command, stdout, stderr)
            assert problem and problem[0].startswith(line), (trial, command, problem, line)
            if command == "index":
                assert not os.path.exists(f"{bad}.idx")
                assert os.path.exists(f"{good}.idx")
        (tmp_path / f"good{trial}.tfrecord.idx").unlink()


@pytest.mark.parametrize("command", ["count", "verify", "index", "head", "schema", "inspect", "reshard"])
def test_commands_on_folders_missing_paths_and_empty_globs(tmp_path, command):
    """A folder, a missing path or a pattern matching nothing: exit 1, one line naming it, no traceback, nothing
    written."""
    (tmp_path / "folder").mkdir()
    extra = ["--out", tmp_path / "out"] if command == "reshard" else []
    for arg, says in ((tmp_path / "folder", "Is a directory"), (tmp_path / "missing.tfrecord", "No such file"),
                      (str(tmp_path / "none*.tfrecord"), "no files match")):
        rc, stdout, stderr = run_cli(command, arg, *extra)
        assert rc == 1, (command, arg, stdout, stderr)
        text = stdout + stderr
        assert str(arg) in text and says in text, (command, arg, text)
        assert len(stderr.splitlines()) <= 1 and "Traceback" not in text
        assert files_under(tmp_path) == [], files_under(tmp_path)


@pytest.mark.parametrize("command", ["count", "verify", "index", "head", "schema", "inspect", "reshard"])
def test_urls_without_their_package_or_protocol_are_one_line_not_a_traceback(tmp_path, command):
    """Defect: a URL whose fsspec package is not installed (gs:// without gcsfs, s3:// without s3fs) ended every
    command with an ImportError traceback, and one of an unknown protocol with a ValueError traceback. Now: the
    library's message on one line, exit 1 (a missing package) or 2 (a misuse)."""
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    extra = ["--out", tmp_path / "out"] if command == "reshard" else []
    rc, stdout, stderr = run_cli(command, "gs://tfr-torch-audit/x.tfrecord", *extra)
    assert (rc, stdout) == (1, "") and len(stderr.splitlines()) == 1, stderr
    assert re.fullmatch(rf"tfr-torch {command}: .*gs://tfr-torch-audit/x\.tfrecord.*(gcsfs|fsspec).*\n", stderr)
    if importlib.util.find_spec("fsspec") is not None:  # (without it, any URL is the missing package above)
        rc, stdout, stderr = run_cli(command, "nosuchprotocol://bucket/x.tfrecord", *extra)
        assert (rc, stdout) == (2, "") and len(stderr.splitlines()) == 1, stderr
        assert stderr.startswith(f"tfr-torch {command}: error: cannot open 'nosuchprotocol://bucket/x.tfrecord'")
    assert files_under(tmp_path) == []


def test_empty_files_are_zero_records_everywhere(tmp_path):
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert run_cli("count", empty)[:2] == (0, f"0\t{empty}\n")
    assert run_cli("verify", empty)[:2] == (0, f"{empty}: OK, 0 records\n")
    assert run_cli("head", empty)[:2] == (0, "")
    rc, stdout, _ = run_cli("reshard", empty, "--out", tmp_path / "out", "-q")
    assert rc == 0 and stdout == ""
    with open(tmp_path / "out" / "empty-train.tfr_torch.json") as f:
        assert json.load(f)["records"] == 0


# ----------------------------------------------------------------------------------------------- convert


class Items:
    """A map-style dataset of (image, target) items."""

    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


IMAGE = torch.zeros(3, 4, 4, dtype=torch.uint8)


@pytest.mark.parametrize("target, says", [
    (torch.tensor([0, 1]), "the target must be one class index, got a Tensor of shape (2,)"),
    (np.array([1, 2]), "the target must be one class index, got a ndarray of shape (2,)"),
    (2.7, "the target must be an integer class index (int64), got 2.7"),
    (torch.tensor(1.5), "the target must be an integer class index (int64), got 1.5"),
    (2**64, f"the target must be an integer class index (int64), got {2**64}"),
    (float("inf"), "the target must be an integer class index (int64), got inf"),
])
def test_convert_dataset_refuses_targets_that_are_not_one_class_index(tmp_path, target, says):
    """Defect: a multi-valued tensor target raised a bare RuntimeError that named no item (and on_error='skip' did
    not skip it), a fractional target was cut to an int (2.7 became class 2), and one past int64 raised from the
    encoder without the item. Each now names the item, and on_error='skip' skips it."""
    items = Items([(IMAGE, 0), (IMAGE, target), (IMAGE, 1)])
    with pytest.raises(tfr_torch.DecodeError, match=re.escape(f"item 1: cannot convert it: {says}")):
        convert_dataset(items, str(tmp_path / "a"), "d", image_format="png")
    with pytest.warns(UserWarning, match="skipped"):
        result = convert_dataset(items, str(tmp_path / "b"), "d", image_format="png", on_error="skip")
    assert result.skipped == [[1, f"item 1: cannot convert it: {says}"]]
    assert [tfr_torch.decode_example(r)["image/class/label"].tolist() for r in read_all(result.paths)] == [[0], [1]]


@pytest.mark.parametrize("target, label", [(3, 3), (np.int64(2), 2), (torch.tensor([4]), 4), (5.0, 5), (True, 1),
                                           (-1, -1), (np.float32(6), 6), (2**63 - 1, 2**63 - 1)])
def test_convert_dataset_takes_integral_targets(tmp_path, target, label):
    result = convert_dataset(Items([(IMAGE, target)]), str(tmp_path), "d", image_format="png")
    assert tfr_torch.decode_example(read_all(result.paths)[0])["image/class/label"].tolist() == [label]


def test_convert_dataset_of_no_items_is_an_empty_set(tmp_path):
    result = convert_dataset(Items([]), str(tmp_path), "d", image_format="png")
    assert result.paths == [] and result.records == 0
    with open(tmp_path / "d-train.tfr_torch.json") as f:
        assert json.load(f)["records"] == 0
    assert files_under(tmp_path) == ["d-train.tfr_torch.json"]


def _bytes_names_supported(tmp_path) -> bool:
    try:
        os.mkdir(os.path.join(os.fsencode(tmp_path), b"probe\xff"))
    except (OSError, UnicodeError):
        return False
    os.rmdir(os.path.join(os.fsencode(tmp_path), b"probe\xff"))
    return True


@pytest.mark.parametrize("tfds", [False, True])
def test_convert_image_folder_with_names_that_are_not_utf8(tmp_path, tfds):
    """Defect: a class folder or file whose name is not UTF-8 (kept by Python as surrogate escapes) stopped the
    conversion with a UnicodeEncodeError naming neither (with tfds=True after every image was converted). The
    records keep the names' bytes; UTF-8 names are stored as their UTF-8. With tfds=True such a class folder is
    refused before anything is written, naming it: its labels file would not be UTF-8 text, which neither TFDS
    nor tfr_torch reads (tests/test_convert_audit.py)."""
    if not _bytes_names_supported(tmp_path):
        pytest.skip("this file system takes only valid names")
    from PIL import Image

    src = os.fsencode(tmp_path / "src")
    names = [(b"d\xffg", b"x\xfe.png"), ("çat 猫".encode(), "ïmg 1.png".encode())]
    for folder, file in names:
        os.makedirs(os.path.join(src, folder))
        Image.new("RGB", (3, 2)).save(os.path.join(src, folder, file))
    if tfds:
        with pytest.raises(ValueError, match="has a name that is not UTF-8") as err:
            convert_image_folder(os.fsdecode(src), str(tmp_path / "out"), "u", tfds=tfds)
        assert repr(os.fsdecode(b"d\xffg"))[1:-1] in str(err.value) and not os.path.exists(tmp_path / "out")
        return
    result = convert_image_folder(os.fsdecode(src), str(tmp_path / "out"), "u", tfds=tfds)
    got = [tfr_torch.decode_example(r) for r in read_all(result.paths)]
    assert [(e["image/class/text"][0], e["image/filename"][0]) for e in got] == [
        (folder, folder + b"/" + file) for folder, file in sorted(names)]


# ------------------------------------------------------------------------------------------ head, inspect


def _mutants(rng: random.Random, n: int) -> list[bytes]:
    """Examples, SequenceExamples and tensors with random bytes changed or cut off, and a few exact ones."""
    bases = [tfr_torch.encode_example({"a": [1, 2], "b": b"xy", "c": np.float32([1.5, -2])}),
             tfr_torch.encode_sequence_example({"a": 1}, {"t": [[1], [2, 3]], "s": [[b"u"]]}),
             tfr_torch.serialize_tensor(np.arange(6, dtype=np.int32).reshape(2, 3)), b""]
    out = []
    for _ in range(n):
        record = bytearray(rng.choice(bases))
        for _ in range(rng.randrange(0, 4)):
            if record and rng.random() < 0.7:
                record[rng.randrange(len(record))] = rng.randrange(256)
            elif record:
                del record[rng.randrange(len(record)):]
        out.append(bytes(record))
    return out


def test_head_and_inspect_take_any_record(tmp_path):
    """Defects: `head` (auto) stopped with exit 1 at a record that its guess called an Example but the strict
    decoder refused (a map entry without a key, a broken Feature), though auto falls back to raw; `inspect` stopped
    at a malformed Feature with a message naming neither the file nor the record, though it notes malformed
    features in its table. Over 3000 mutated records: head prints every one, inspect reports, both exit 0."""
    rng = random.Random(12)
    records = _mutants(rng, 3000)
    path = tmp_path / "mutants.tfrecord"
    with TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    rc, stdout, stderr = run_cli("head", path, "-n", len(records))
    assert rc == 0 and stderr == ""
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert len(lines) == len(records)
    for line, record in zip(lines, records):
        if "raw" in line:
            assert base64_decode(line["raw"]["base64"]) == record[:64]
    rc, stdout, stderr = run_cli("inspect", path)
    assert rc == 0 and stderr == "", stderr
    assert f"{path}\t{len(records)}\t" in stdout and "malformed: feature " in stdout


def base64_decode(text: str) -> bytes:
    import base64

    return base64.b64decode(text)


def test_a_map_entry_without_a_key_is_shown_raw_by_head_and_refused_as_an_example(tmp_path, write_records):
    """`0a 02 0a 00`: an Example whose one feature map entry has no key (TensorFlow's parse_example refuses it)."""
    path = write_records(tmp_path / "nokey.tfrecord", [{"id": 1}, b"\x0a\x02\x0a\x00"])
    offset = len(tfr_torch.encode_example({"id": 1})) + OVERHEAD
    rc, stdout, stderr = run_cli("head", path)
    assert rc == 0 and stderr == ""
    assert json.loads(stdout.splitlines()[1]) == {"file": str(path), "offset": offset,
                                                 "raw": {"length": 4, "base64": "CgIKAA=="}}
    rc, stdout, stderr = run_cli("head", path, "--as", "example")
    assert rc == 1 and len(stdout.splitlines()) == 1
    assert stderr.startswith(f"{path}:{offset}: cannot parse 4 bytes as a tf.train.Example")


# ------------------------------------------------------------------------------------ TFDS folders, by TFDS


def _random_table(rng: random.Random):
    """A random spec (FixedLen of any shape, VarLen; int64, float32, string) and a row maker for it."""
    from tfr_torch import FixedLenFeature, VarLenFeature, string

    dtypes = {"int64": torch.int64, "float32": torch.float32, "string": string}
    spec, shapes = {}, {}
    for i in range(rng.randrange(1, 6)):
        key = rng.choice(["a", "b/c", "x_y", "id", "k9"]) + str(i)
        dtype = rng.choice(list(dtypes))
        shape = rng.choice([[], [rng.randrange(1, 4)], [2, rng.randrange(1, 3)], None])
        spec[key] = VarLenFeature(dtypes[dtype]) if shape is None else FixedLenFeature(shape, dtypes[dtype])
        shapes[key] = (dtype, shape)

    def row() -> dict:
        out: dict = {}
        for key, (dtype, shape) in shapes.items():
            n = math.prod(shape) if shape is not None else rng.randrange(0, 4)
            if dtype == "int64":
                out[key] = np.array([rng.randrange(-(2**63), 2**63) for _ in range(n)], np.int64)
            elif dtype == "float32":
                out[key] = np.array([rng.uniform(-1e3, 1e3) for _ in range(n)], np.float32)
            else:
                # no trailing NUL: TFDS hands string tensors over as numpy's fixed-width bytes, which drop them
                words = [bytes(rng.randrange(1, 256) for _ in range(rng.randrange(0, 5))) for _ in range(n)]
                out[key] = np.array(words, dtype=object) if n else np.array([], dtype=bytes)
            if shape is not None:
                out[key] = out[key].reshape(shape)
        return out

    return spec, row


def _tfds_value(value):
    if "bytes" in value:
        return base64_decode(value["bytes"])
    if "list" in value:
        return [_tfds_value(v) for v in value["list"]]
    match = re.fullmatch(r"bytes(\d+)", value["dtype"])  # TFDS gives string tensors as fixed-width numpy bytes
    if match:
        width = int(match.group(1)) // 8
        array = np.frombuffer(base64_decode(value["b64"]), f"S{width}") if width else np.full(value["shape"], b"")
        return np.asarray(array, dtype=object).reshape(value["shape"]).tolist()
    array = np.frombuffer(base64_decode(value["b64"]), np.dtype(value["dtype"]).newbyteorder("<"))
    return array.astype(value["dtype"]).reshape(value["shape"])


def _same_value(got, want) -> bool:
    if isinstance(want, np.ndarray) and want.dtype.kind in "OS":
        want = want.tolist() if want.ndim else want.item()
    if isinstance(got, np.ndarray):
        return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    return got == want


@needs_tf
def test_tensorflow_datasets_reads_random_tables_split_by_split(tmp_path):
    """Random specs and rows in random shardings, two splits each (one rewritten with another shard count), as
    ShardedWriter(tfds=...) writes them: TFDS's builder_from_directory gives every split's shard lengths and every
    row, in order, value for value."""
    rng = random.Random(21)
    folders, expected = [], {}
    for t in range(5):
        spec, row = _random_table(rng)
        folder = tmp_path / f"t{t}" / "1.0.0"
        rows = {}
        for split, again in (("train", False), ("test", False), ("test", True)):
            rows[split] = [row() for _ in range(rng.randrange(1, 12))]
            with ShardedWriter(folder, f"t{t}", split, records_per_shard=rng.randrange(1, 5), features=spec,
                               tfds={"description": "é" * again}) as writer:
                for r in rows[split]:
                    writer.write_example(r)
            counts = [len(read_all([p])) for p in writer.paths]
            expected[str(folder)] = {**expected.get(str(folder), {}), split: (counts, rows[split])}
        folders.append(folder)
    done = subprocess.run([TF_PYTHON, os.path.join(os.path.dirname(__file__), "data", "tfds", "load_with_tfds.py"),
                           *map(str, folders)], capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""})
    if done.returncode and "No module named 'tensorflow_datasets'" in done.stderr:
        pytest.skip("the TensorFlow Python has no tensorflow-datasets")
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    for folder, splits in expected.items():
        assert {k: v["shard_lengths"] for k, v in seen[folder]["splits"].items()} == {
            split: counts for split, (counts, _) in splits.items()}
        for split, (_, rows) in splits.items():
            got = [{k: _tfds_value(v) for k, v in item["dict"].items()} for item in seen[folder]["values"][split]]
            assert len(got) == len(rows)
            for g, w in zip(got, rows):
                assert set(g) == set(w) and all(_same_value(g[k], w[k]) for k in w), (folder, split, g, w)


def test_an_empty_split_is_refused_for_tensorflow_datasets(tmp_path):
    """Defect: ShardedWriter(tfds=...) closed with no records wrote a split with no shards into dataset_info.json,
    which TFDS cannot read ("Instruction [] corresponds to no data!"; its own writer refuses an empty split with
    "No examples were yielded."). Now closing refuses, and no metadata is written."""
    from tfr_torch import FixedLenFeature

    folder = tmp_path / "t" / "1.0.0"
    writer = ShardedWriter(folder, "t", "test", features={"a": FixedLenFeature([], torch.int64)}, tfds={})
    with pytest.raises(ValueError, match=re.escape("split 'test' of 't' has no records: TensorFlow Datasets cannot "
                                                   "read an empty split")):
        writer.close()
    writer.abort()
    assert files_under(tmp_path) == []
