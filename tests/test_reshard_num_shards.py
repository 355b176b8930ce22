"""`reshard(num_shards=N)` / `tfr-torch reshard --num-shards N`: exactly N shards of equal record counts (the first
ones one more where the count does not divide), every record once, in order, byte for byte; refused where it cannot
be done (more shards than records, a pipe, both --num-shards and --shard-size). And `ShardedWriter.finish_shard`,
which cuts them."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

import tfr_torch
from tfr_torch.tools import reshard as reshard_module
from tfr_torch.tools.cli import main
from tfr_torch.tools.reshard import reshard
from tfr_torch.tools.shards import ShardedWriter


def _inputs(folder, sizes=(3, 13, 23)) -> tuple[list[str], list[bytes]]:
    paths, records = [], []
    for k, n in enumerate(sizes):
        path = str(folder / (f"in-{k}.tfrecord" + (".gz" if k == 1 else "")))
        with tfr_torch.TFRecordWriter(path, compression="GZIP" if k == 1 else None) as writer:
            for i in range(n):
                record = tfr_torch.encode_example({"id": 100 * k + i, "pad": b"p" * (i % 5)})
                writer.write(record)
                records.append(record)
        paths.append(path)
    return paths, records


def _read(paths: list[str]) -> list[list[bytes]]:
    return [list(tfr_torch.read_records(p)) for p in paths]


@pytest.mark.parametrize("num_shards,counts", [(1, [39]), (4, [10, 10, 10, 9]), (5, [8, 8, 8, 8, 7]),
                                               (39, [1] * 39)])
def test_exactly_n_shards_of_equal_counts_every_record_in_order(tmp_path, num_shards, counts):
    paths, records = _inputs(tmp_path)
    out = reshard(paths, str(tmp_path / "out"), num_shards=num_shards, compression="gzip")
    assert len(out) == num_shards and out[-1].endswith(f"-of-{num_shards:05d}")
    shards = _read(out)
    assert [len(s) for s in shards] == counts
    assert [r for s in shards for r in s] == records
    sidecar = json.loads((tmp_path / "out" / "in-train.tfr_torch.json").read_text())
    assert [s["records"] for s in sidecar["shards"]] == counts
    for path in out:  # each shard's index (and seek points) describe it
        assert len(tfr_torch.read_index(path + ".idx", path)) == len(list(tfr_torch.read_records(path)))
    assert len(list(tfr_torch.IndexedTFRecordDataset(out))) == 39


def _cli(*args) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `tfr-torch ARGS` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def test_the_command_line(tmp_path):
    paths, records = _inputs(tmp_path)
    rc, out, err = _cli("reshard", *paths, "--out", tmp_path / "o", "--num-shards", "3", "-q")
    assert rc == 0, err
    assert [len(s) for s in _read(out.split())] == [13, 13, 13]
    assert [r for s in _read(out.split()) for r in s] == records
    rc, _, err = _cli("reshard", *paths, "--out", tmp_path / "o2", "--num-shards", "3", "--shard-size", "1MB")
    assert rc == 2 and "not allowed with argument --num-shards" in err
    rc, _, err = _cli("reshard", *paths, "--out", tmp_path / "o3", "--num-shards", "0")
    assert rc == 2 and "--num-shards" in err
    rc, _, err = _cli("reshard", *paths, "--out", tmp_path / "o4", "--num-shards", "40", "-q")
    assert rc == 1 and "num_shards=40 but the inputs hold 39 record(s)" in err
    assert not os.path.exists(tmp_path / "o4") or not [n for n in os.listdir(tmp_path / "o4") if "tfrecord" in n]


@pytest.mark.parametrize("value", [0, -1, True, 2.0, "3"])
def test_num_shards_is_checked(tmp_path, value):
    paths, _ = _inputs(tmp_path)
    with pytest.raises(ValueError, match="num_shards must be a positive int"):
        reshard(paths, str(tmp_path / "out"), num_shards=value)


def test_a_pipe_is_refused(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    paths, _ = _inputs(tmp_path)
    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is a pipe, which can be read only once"):
        reshard([paths[0], fifo], str(tmp_path / "out"), num_shards=2)


def test_inputs_that_change_between_the_count_and_the_copy_write_no_set(tmp_path, monkeypatch):
    paths, _ = _inputs(tmp_path)
    monkeypatch.setattr(reshard_module, "_cuts", lambda paths, n: [20, 20])  # as if they held 40 when counted
    with pytest.raises(ValueError, match="held 40 records when counted and 39 when copied"):
        reshard(paths, str(tmp_path / "out"), num_shards=2)
    assert [n for n in os.listdir(tmp_path / "out") if "tfrecord" in n or n.endswith(".json")] == []


def test_tfds_output_with_num_shards(tmp_path):
    paths, records = _inputs(tmp_path)
    out = reshard(paths, str(tmp_path / "tfds"), num_shards=2, name="ds", tfds=True)
    info = json.loads((tmp_path / "tfds" / "ds" / "1.0.0" / "dataset_info.json").read_text())
    split = info["splits"][0]
    assert split["shardLengths"] == ["20", "19"]
    assert [r for s in _read(out) for r in s] == records


def test_finish_shard_cuts_where_asked(tmp_path):
    with ShardedWriter(str(tmp_path), "cut", "train", shard_size="1GB") as writer:
        writer.finish_shard()  # no shard open yet: nothing to do
        for i in range(7):
            writer.write(b"r%d" % i)
            if i in (0, 4):
                writer.finish_shard()
                writer.finish_shard()  # right after a cut: nothing more
    assert [len(s) for s in _read(writer.paths)] == [1, 4, 2]
    assert [r for s in _read(writer.paths) for r in s] == [b"r%d" % i for i in range(7)]
    with pytest.raises(ValueError, match="finish_shard on a closed ShardedWriter"):
        writer.finish_shard()
