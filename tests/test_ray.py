"""tfr_torch.ray on a real local Ray cluster (2 CPUs, started and stopped here): reading TFRecords into Ray Data
(raw and decoded, split over tasks by record ranges), writing a Ray Dataset as the shards ShardedWriter makes,
and image conversion with engine="ray". Run them alone with `pytest -m ray`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RowLengths,
    SparseFeature,
    VarLenFeature,
    string,
)

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import tfr_torch.ray as tray  # noqa: E402
from tfr_torch.tools.cli import main as cli  # noqa: E402

pytestmark = pytest.mark.ray

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "golden")
TFDS_GOLDEN = os.path.join(os.path.dirname(__file__), "data", "tfds", "data", "tfr_golden")

SPEC = {
    "id": FixedLenFeature([], torch.int64),
    "x": FixedLenFeature([2, 3], torch.float32),
    "v": VarLenFeature(torch.int64),
    "s": FixedLenFeature([], string),
}


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module: 2 CPUs, no dashboard; rows come back in the files' order."""
    if ray.is_initialized():
        ray.shutdown()
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init sets its own, which ray.shutdown leaves (see ray/convert.py)
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    context = ray.data.DataContext.get_current()
    before = context.enable_progress_bars, context.execution_options.preserve_order
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    yield
    context.enable_progress_bars, context.execution_options.preserve_order = before
    ray.shutdown()
    signal.signal(signal.SIGTERM, sigterm)


def example(i: int) -> dict:
    return {"id": i, "x": np.arange(6, dtype=np.float32).reshape(2, 3) + i, "v": np.arange(i % 4, dtype=np.int64),
            "s": f"row {i}".encode()}


@pytest.fixture
def write_file(write_records):
    """write_file(path, n, index=True, compression=None) -> path: n rows made by example(i), indexed by default."""
    def write(path: str, n: int, index: bool = True, compression: str | None = None) -> str:
        return write_records(path, [example(i) for i in range(n)], compression, index=index)
    return write


def rows_of(ds) -> list[dict]:
    return list(ds.iter_rows())


def table_of(ds):
    import pyarrow as pa

    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def dir_bytes(folder: str) -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


# ----- reading: raw records ---------------------------------------------------------------------------------------


GOLDEN_FILES = ["examples.tfrecord", "examples-gzip.tfrecord", "examples-zlib-9.tfrecord", "large-gzip.tfrecord",
                "sequence_examples.tfrecord", "tensors.tfrecord", "empty-record.tfrecord", "empty.tfrecord"]


def test_raw_records_of_tensorflow_files_equal_read_records():
    paths = [os.path.join(GOLDEN, name) for name in GOLDEN_FILES]
    ds = tray.read_tfrecords(paths)
    got = [row["bytes"] for row in rows_of(ds)]
    want = [record for path in paths for record in tfr_torch.read_records(path)]
    assert len(want) > 100
    assert got == want
    assert ds.schema().names == ["bytes"]


def test_raw_records_of_one_file_split_into_record_ranges(tmp_path, write_file):
    path = write_file(str(tmp_path / "big.tfrecord"), 5000)
    source = tray.TFRecordDatasource(path)
    tasks = source.get_read_tasks(4)
    assert [t.metadata.num_rows for t in tasks] == [1250] * 4  # counts from the index: no pass over the data
    assert source.num_records == 5000
    ds = tray.read_tfrecords(path, override_num_blocks=4)
    assert [row["bytes"] for row in rows_of(ds)] == list(tfr_torch.read_records(path))


def test_four_blocks_read_each_record_exactly_once(tmp_path, write_file):
    path = write_file(str(tmp_path / "big.tfrecord"), 20000)
    ds = tray.read_tfrecords(path, {"id": SPEC["id"]}, override_num_blocks=4).materialize()
    assert "ReadTFRecordTorch: 4 tasks executed" in ds.stats()
    ids = np.concatenate([b["id"] for b in ds.iter_batches(batch_size=None, batch_format="numpy")])
    assert np.array_equal(np.sort(ids), np.arange(20000))
    assert ds.count() == 20000


def test_counts_come_from_the_index_without_reading(tmp_path, write_file):
    path = write_file(str(tmp_path / "c.tfrecord"), 500)
    spec = {"id": SPEC["id"], "absent": FixedLenFeature([], torch.int64)}  # would fail if any record were decoded
    assert tray.read_tfrecords(path, spec).count() == 500
    with pytest.raises(tfr_torch.DecodeError, match="absent"):
        rows_of(tray.read_tfrecords(path, spec))


def test_unindexed_and_compressed_files_are_read_whole(tmp_path, write_file):
    plain = write_file(str(tmp_path / "plain.tfrecord"), 300, index=False)
    gz = write_file(str(tmp_path / "c.tfrecord.gz"), 200, index=True, compression="gzip")
    source = tray.TFRecordDatasource([plain, gz])
    tasks = source.get_read_tasks(8)
    assert len(tasks) == 2  # neither file can be cut: one has no index, the other is compressed
    assert [t.metadata.num_rows for t in tasks] == [None, 200]
    ds = tray.read_tfrecords([plain, gz], {"id": SPEC["id"]}, override_num_blocks=8)
    assert [row["id"] for row in rows_of(ds)] == list(range(300)) + list(range(200))


# ----- reading: decoded columns -----------------------------------------------------------------------------------


def test_decoded_columns_equal_parse_example(tmp_path, write_file):
    path = write_file(str(tmp_path / "d.tfrecord"), 1000)
    records = list(tfr_torch.read_records(path))
    want = tfr_torch.parse_example(records, SPEC)
    ds = tray.read_tfrecords(path, SPEC, batch_rows=128, override_num_blocks=3)
    schema = ds.schema()
    assert schema.names == ["id", "x", "v", "s"]
    batch = ds.take_batch(batch_size=1000, batch_format="numpy")
    assert batch["id"].dtype == np.int64 and np.array_equal(batch["id"], want["id"].numpy())
    assert batch["x"].shape == (1000, 2, 3) and batch["x"].dtype == np.float32
    assert np.array_equal(batch["x"], want["x"].numpy())
    dense_v = want["v"].to_dense()
    for i, row in enumerate(batch["v"]):
        assert row.tolist() == dense_v[i, : i % 4].tolist() == list(range(i % 4)), i
    assert list(batch["s"]) == want["s"]
    table = table_of(ds)
    import pyarrow as pa

    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("v").type == pa.list_(pa.int64())
    assert table.schema.field("s").type == pa.binary()


def test_golden_examples_decode_as_parse_example():
    """The TensorFlow-written golden Examples (every value kind, empty lists, missing keys) through a VarLen spec
    of every key they hold."""
    path = os.path.join(GOLDEN, "examples.tfrecord")
    kinds: dict[str, set] = {}
    with open(os.path.join(GOLDEN, "examples.json")) as f:
        for entry in json.load(f):
            for key, feature in entry["features"].items():
                kinds.setdefault(key, set()).add(feature["kind"])
    dtypes = {"int64": torch.int64, "float": torch.float32, "bytes": string}
    spec = {key: VarLenFeature(dtypes[kind.pop()]) for key, kind in sorted(kinds.items()) if len(kind) == 1}
    assert len(spec) > 50
    records = list(tfr_torch.read_records(path))
    table = table_of(tray.read_tfrecords(path, spec))
    for key, feature in spec.items():
        want = [tfr_torch.decode_example(r).get(key) for r in records]
        got = table.column(key).to_pylist()
        for i, (g, w) in enumerate(zip(got, want)):
            w = [] if w is None else list(w)
            if feature.dtype == torch.float32:
                assert np.array_equal(np.asarray(g, np.float32), np.asarray(w, np.float32), equal_nan=True), (key, i)
            else:
                assert g == [x if isinstance(x, bytes) else int(x) for x in w], (key, i)


def test_sequence_ragged_and_utf8_columns(tmp_path):
    """Slow by nature: a Ray Data read and its execution on the local cluster (tasks, object store)."""
    path = str(tmp_path / "r.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(50):
            writer.write_example({"steps": np.arange(2 * (i % 3), dtype=np.float32),
                                  "vals": np.arange(i % 5, dtype=np.int64), "lens": np.array([i % 5], np.int64),
                                  "name": f"nåme {i}", "tags": [b"a", f"t{i}".encode()]})
    spec = {"steps": FixedLenSequenceFeature([2], torch.float32, allow_missing=True),
            "vals": RaggedFeature(torch.int64, value_key="vals", partitions=[RowLengths("lens")]),
            "name": FixedLenFeature([], string), "tags": VarLenFeature(string)}
    table = table_of(tray.read_tfrecords(path, spec, utf8=["name"]))
    import pyarrow as pa

    assert table.schema.field("name").type == pa.string()
    assert table.schema.field("tags").type == pa.list_(pa.binary())
    assert table.column("name").to_pylist() == [f"nåme {i}" for i in range(50)]
    assert table.column("tags").to_pylist() == [[b"a", f"t{i}".encode()] for i in range(50)]
    assert table.column("vals").to_pylist() == [[list(range(i % 5))] for i in range(50)]
    batch = tray.read_tfrecords(path, spec, utf8=["name"]).take_batch(50, batch_format="numpy")
    for i, row in enumerate(batch["steps"]):
        assert np.array_equal(row, np.arange(2 * (i % 3), dtype=np.float32).reshape(-1, 2)), i


def test_bad_utf8_names_the_file_and_offset(tmp_path):
    path = str(tmp_path / "u.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write_example({"name": b"ok"})
        writer.write_example({"name": b"\xff\xfe"})
    offset = int(tfr_torch.format.index.scan_index(path)[1, 0])
    with pytest.raises(tfr_torch.DecodeError) as info:
        rows_of(tray.read_tfrecords(path, {"name": FixedLenFeature([], string)}, utf8=True))
    assert f"{path}:{offset}: feature 'name' in example 1 is not valid UTF-8 text" in str(info.value)


def test_iter_torch_batches_for_training(tmp_path, write_file):
    path = write_file(str(tmp_path / "t.tfrecord"), 256)
    ds = tray.read_tfrecords(path, {"id": SPEC["id"], "x": SPEC["x"]})
    batches = list(ds.iter_torch_batches(batch_size=64))
    assert len(batches) == 4
    assert batches[0]["x"].dtype == torch.float32 and batches[0]["x"].shape == (64, 2, 3)
    assert torch.equal(torch.cat([b["id"] for b in batches]), torch.arange(256))


def test_no_tensorflow_in_the_tasks(tmp_path, write_file):
    path = write_file(str(tmp_path / "n.tfrecord"), 100)

    def modules(batch):
        return {"tf": np.array([("tensorflow" in sys.modules) for _ in batch["id"]]),
                "tfr": np.array([("tfr_torch.ray.arrow" in sys.modules) for _ in batch["id"]])}

    ds = tray.read_tfrecords(path, SPEC, override_num_blocks=2).map_batches(modules)
    rows = rows_of(ds)
    assert len(rows) == 100
    assert not any(row["tf"] for row in rows)
    assert all(row["tfr"] for row in rows)  # the batch decoder ran in this worker: the tasks did the decoding
    out = tray.write_tfrecords(tray.read_tfrecords(path, SPEC).map_batches(lambda b: b), str(tmp_path / "w"), "n")
    assert sum(1 for _ in tfr_torch.read_records(out[0])) == 100


def test_the_rest_of_tfr_torch_never_imports_ray():
    import subprocess

    code = ("import sys, tfr_torch, tfr_torch.data.dataset, tfr_torch.tools.convert, tfr_torch.tools.cli, "
            "tfr_torch.tfds.source; print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ----- reading: shard sets, sidecar and TFDS metadata -------------------------------------------------------------


def test_folder_split_and_features_auto_from_the_sidecar(tmp_path):
    out = str(tmp_path / "set")
    with tfr_torch.ShardedWriter(out, "toy", "train", records_per_shard=40, features=SPEC) as writer:
        for i in range(100):
            writer.write_example(example(i))
    with tfr_torch.ShardedWriter(out, "toy", "test", records_per_shard=40, features=SPEC) as writer:
        for i in range(10):
            writer.write_example(example(1000 + i))
    source = tray.TFRecordDatasource(out, "auto", split="train")
    assert [os.path.basename(p) for p in source.paths] == [f"toy-train.tfrecord-0000{i}-of-00003" for i in range(3)]
    assert source.num_records == 100
    assert sum(t.metadata.num_rows for t in source.get_read_tasks(2)) == 100
    ds = tray.read_tfrecords(out, "auto", split="train")
    assert ds.schema().names == ["id", "x", "v", "s"]
    assert [row["id"] for row in rows_of(ds)] == list(range(100))
    assert [row["id"] for row in rows_of(tray.read_tfrecords(out, "auto", split="test"))] == list(range(1000, 1010))


@pytest.mark.parametrize("indexed", [False, True])
def test_tfds_folder_splits_counts_and_wire_features(tmp_path, indexed):
    """A TFDS dataset folder written by real TFDS: TFDS's split syntax (slices with its rounding, sums), exact
    counts from dataset_info.json, features="auto" as the Example features TFDS stores (images as bytes)."""
    folder = str(tmp_path / "tfr_golden")
    shutil.copytree(TFDS_GOLDEN, folder)
    version = os.path.join(folder, "1.0.0")
    if indexed:
        for name in os.listdir(version):
            if ".tfrecord-" in name:
                tfr_torch.build_index(os.path.join(version, name))
    split = "train[2:60%]+test[-3:]"
    want = [int(item["id"]) for item in
            tfr_torch.TFRecordDataset(folder, {"id": FixedLenFeature([], torch.int64)}, split=split)]
    source = tray.TFRecordDatasource(folder, "auto", split=split)
    assert sum(t.metadata.num_rows for t in source.get_read_tasks(4)) == len(want) == source.num_records
    table = table_of(ray.data.read_datasource(source, override_num_blocks=4))
    assert table.column("id").to_pylist() == want
    import pyarrow as pa

    assert table.schema.field("image").type == pa.binary()
    assert table.schema.field("label").type == pa.int64()
    raw = [row["bytes"] for row in rows_of(tray.read_tfrecords(folder, split="test"))]
    assert len(raw) == 7
    with pytest.raises(ValueError, match="is a TFDS dataset: pass split="):
        tray.read_tfrecords(folder)


@pytest.mark.tensorflow
def test_rays_own_tensorflow_reader_gives_the_same_rows(tmp_path):
    """Ray's TF-based ray.data.read_tfrecords (it needs TensorFlow in every task) on the same files: the same rows.
    Ray turns 1-value lists into scalars, so the file holds scalars and a 3-value list."""
    pytest.importorskip("tensorflow")
    path = str(tmp_path / "same.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(200):
            writer.write_example({"id": i - 100, "x": np.arange(3, dtype=np.float32) / 7 + i, "s": f"s{i}".encode()})
    tfr_torch.build_index(path)
    spec = {"id": FixedLenFeature([], torch.int64), "x": FixedLenFeature([3], torch.float32),
            "s": FixedLenFeature([], string)}
    theirs = ray.data.read_tfrecords(path).take_all()
    ours = tray.read_tfrecords(path, spec, override_num_blocks=2).take_all()
    assert len(theirs) == len(ours) == 200
    for a, b in zip(theirs, ours):
        assert a["id"] == b["id"] and a["s"] == b["s"]
        assert np.array_equal(np.asarray(a["x"], np.float32), b["x"])
    golden = os.path.join(GOLDEN, "large-gzip.tfrecord")  # written by TensorFlow: raw records alike
    raw = tray.read_tfrecords(golden).take_all()
    assert [r["bytes"] for r in raw] == list(tfr_torch.read_records(golden))


def test_argument_errors_are_named():
    path = os.path.join(GOLDEN, "examples.tfrecord")
    bad_on_error = r"on_error must be \"raise\", \"skip\" or a callable taking the error, got 'x'"
    with pytest.raises(ValueError, match=r"features must be None, a spec dict or \"auto\", got 'bogus'"):
        tray.read_tfrecords(path, "bogus")
    with pytest.raises(ValueError, match="features='auto' needs the sidecar"):
        tray.read_tfrecords(path, "auto")
    with pytest.raises(ValueError, match=bad_on_error):
        tray.read_tfrecords(path, on_error="x")
    with pytest.raises(ValueError, match="batch_rows must be None or a positive int, got 0"):
        tray.read_tfrecords(path, batch_rows=0)
    missing = os.path.join(GOLDEN, "no-such-file.tfrecord")  # the options are checked before the paths
    with pytest.raises(ValueError, match=bad_on_error):
        tray.read_tfrecords(missing, on_error="x")
    with pytest.raises(ValueError, match=r"unknown compression 'bz2': expected one of None, .*\"auto\""):
        tray.read_tfrecords(missing, compression="bz2")
    with pytest.raises(ValueError, match=r"unknown compression 'auto': expected one of None, \"gzip\", \"zlib\" \(or "
                                         r"TensorFlow's \"\", \"GZIP\", \"ZLIB\"\)$"):
        tray.TFRecordDatasink("out", "data", compression="auto")  # a writer has no "auto"
    with pytest.raises(ValueError, match="utf8 applies to string features of a spec"):
        tray.read_tfrecords(path, utf8=True)
    with pytest.raises(ValueError, match=r"utf8 names features that are not string features: \['id'\]"):
        tray.read_tfrecords(path, {"id": SPEC["id"]}, utf8=["id"])
    with pytest.raises(TypeError, match="feature 'sp': SparseFeature has no column form in Ray Data"):
        tray.read_tfrecords(path, {"sp": SparseFeature(["i"], "v", torch.float32, [10])})
    with pytest.raises(ValueError, match="feature 'q': FixedLenSequenceFeature needs allow_missing=True"):
        tray.read_tfrecords(path, {"q": FixedLenSequenceFeature([], torch.int64)})
    with pytest.raises(ValueError, match="split='train' selects shards in a folder; paths is not a folder"):
        tray.read_tfrecords(path, split="train")
    with pytest.raises(ValueError, match=r"is a folder: pass split= \(it holds the splits \[\]\)"):
        tray.read_tfrecords(GOLDEN)
    with pytest.raises(ValueError, match="index lists 2 index files for 1 TFRecord files"):
        tray.read_tfrecords(path, index=["a.idx", "b.idx"])


# ----- reading: failures ------------------------------------------------------------------------------------------


@pytest.fixture
def corrupt_copy(tmp_path, write_file):
    """corrupt_copy(n=30, record=7): a file of n examples whose record `record` has a flipped payload byte; returns
    it and that record's offset."""
    def make(n: int = 30, record: int = 7) -> tuple[str, int]:
        path = write_file(str(tmp_path / "bad.tfrecord"), n, index=False)
        offsets = tfr_torch.format.index.scan_index(path)
        offset = int(offsets[record, 0])
        with open(path, "r+b") as f:
            f.seek(offset + 12 + 3)
            byte = f.read(1)
            f.seek(offset + 12 + 3)
            f.write(bytes([byte[0] ^ 0xFF]))
        return path, offset
    return make


def test_a_corrupt_record_raises_with_the_file_and_offset(tmp_path, write_file, corrupt_copy):
    path, offset = corrupt_copy()
    good = write_file(str(tmp_path / "good.tfrecord"), 10)
    with pytest.raises(tfr_torch.CorruptRecordError) as info:
        rows_of(tray.read_tfrecords([good, path], SPEC))
    assert f"{path}:{offset}: " in str(info.value)
    assert "CRC" in str(info.value)


def test_on_error_skip_counts_what_it_skipped(tmp_path, corrupt_copy):
    path, offset = corrupt_copy()
    source = tray.TFRecordDatasource(path, SPEC, on_error="skip")
    ids = [row["id"] for row in rows_of(ray.data.read_datasource(source))]  # the warnings stay in the tasks
    assert ids == [i for i in range(30) if i != 7]
    assert len(source.skipped) == 1 and source.skipped[0].startswith(f"{path}:{offset}: ")



# ----- writing ----------------------------------------------------------------------------------------------------


def local_set(folder: str, rows, **kwargs) -> list[str]:
    return local_set_split(folder, "train", rows, **kwargs)


def local_set_split(folder: str, split: str, rows, **kwargs) -> list[str]:
    with tfr_torch.ShardedWriter(folder, "toy", split, features=SPEC, **kwargs) as writer:
        for row in rows:
            writer.write_example(row)
    return writer.paths


@pytest.fixture
def source_dataset(tmp_path, write_file):
    """source_dataset(n=500, blocks=3): a Ray dataset read from one file of n rows (written once per test)."""
    def make(n: int = 500, blocks: int = 3):
        path = str(tmp_path / "src.tfrecord")
        if not os.path.exists(path):
            write_file(path, n)
        return tray.read_tfrecords(path, SPEC, override_num_blocks=blocks)
    return make


def test_write_gives_sharded_writers_bytes_whatever_the_blocks(tmp_path, source_dataset):
    ref = local_set(str(tmp_path / "ref"), (example(i) for i in range(500)), shard_size="8KB")
    assert len(ref) > 3
    for blocks in (1, 7):
        ds = source_dataset(blocks=blocks).repartition(blocks)
        out = str(tmp_path / f"ray{blocks}")
        paths = tray.write_tfrecords(ds, out, "toy", "train", shard_size="8KB")
        assert [os.path.basename(p) for p in paths] == [os.path.basename(p) for p in ref]
        assert dir_bytes(out) == dir_bytes(str(tmp_path / "ref")), blocks


def test_write_gzip_and_records_per_shard(tmp_path, source_dataset):
    local_set(str(tmp_path / "ref"), (example(i) for i in range(500)), records_per_shard=150, compression="gzip")
    paths = tray.write_tfrecords(source_dataset(), str(tmp_path / "out"), "toy", records_per_shard=150,
                                 compression="gzip")
    assert len(paths) == 4
    assert dir_bytes(str(tmp_path / "out")) == dir_bytes(str(tmp_path / "ref"))


def test_written_set_reads_back_and_verifies(tmp_path, capsys, source_dataset):
    out = str(tmp_path / "out")
    paths = tray.write_tfrecords(source_dataset(), out, "toy", shard_size="16KB")
    data = tfr_torch.TFRecordDataset(paths, features="auto", batch_size=500)
    batch = next(iter(data))
    want = tfr_torch.parse_example([tfr_torch.encode_example(example(i)) for i in range(500)], SPEC)
    assert torch.equal(batch["id"], want["id"]) and torch.equal(batch["x"], want["x"])
    assert batch["s"] == want["s"]
    assert cli(["verify", *paths]) == 0
    capsys.readouterr()
    with open(f"{out}/toy-train.tfr_torch.json") as f:
        sidecar = json.load(f)
    assert sidecar["records"] == 500 and sum(s["records"] for s in sidecar["shards"]) == 500
    assert sidecar["features"]["x"] == {"kind": "FixedLen", "shape": [2, 3], "dtype": "float32"}


def test_write_python_rows(tmp_path):
    items = [{"n": i, "text": f"t{i}", "vals": [float(i), 0.5], "blob": bytes([i])} for i in range(20)]
    paths = tray.write_tfrecords(ray.data.from_items(items), str(tmp_path / "o"), "py", records_per_shard=8)
    assert len(paths) == 3
    got = [tfr_torch.decode_example(r) for p in paths for r in tfr_torch.read_records(p)]
    assert [g["n"].tolist() for g in got] == [[i] for i in range(20)]
    assert [g["text"] for g in got] == [[f"t{i}".encode()] for i in range(20)]
    assert [g["vals"].tolist() for g in got] == [[float(i), 0.5] for i in range(20)]
    assert [g["blob"] for g in got] == [[bytes([i])] for i in range(20)]
    assert list(tfr_torch.read_records(paths[0]))[0] == tfr_torch.encode_example(
        {"blob": b"\x00", "n": 0, "text": "t0", "vals": np.array([0.0, 0.5], np.float32)})


def test_write_with_tfds_metadata_as_sharded_writer_does(tmp_path, source_dataset):
    options = {"version": "1.2.0", "description": "toy rows"}
    ref = str(tmp_path / "ref" / "toy" / "1.2.0")
    local_set(ref, (example(i) for i in range(500)), records_per_shard=200, tfds=options)
    out = str(tmp_path / "ray" / "toy" / "1.2.0")
    for split in ("train", "test"):  # a second split updates dataset_info.json, as ShardedWriter does
        tray.write_tfrecords(source_dataset(), out, "toy", split, records_per_shard=200, tfds=options)
        if split == "test":
            local_set_split(ref, "test", (example(i) for i in range(500)), records_per_shard=200, tfds=options)
    assert "dataset_info.json" in os.listdir(out) and "toy-train.tfr_torch.json" not in os.listdir(out)
    assert dir_bytes(out) == dir_bytes(ref)
    ids = [row["id"] for row in rows_of(tray.read_tfrecords(str(tmp_path / "ray" / "toy"), "auto", split="test[:10]"))]
    assert ids == list(range(10))
    with pytest.raises(ValueError, match="TensorFlow Datasets reads uncompressed shards only"):
        tray.write_tfrecords(source_dataset(), out, "toy", compression="gzip", tfds=options)
    with pytest.raises(ValueError, match="tfds options: unknown key"):
        tray.write_tfrecords(source_dataset(), out, "toy", tfds={"versoin": "1.0.0"})


def test_a_failed_write_leaves_no_final_shard_and_a_rerun_completes(tmp_path, source_dataset):
    out = str(tmp_path / "out")

    def explode(batch):
        if 321 in batch["id"]:
            raise RuntimeError("boom at row 321")
        return batch

    with pytest.raises(Exception, match="boom at row 321"):
        tray.write_tfrecords(source_dataset().map_batches(explode), out, "toy", shard_size="8KB")
    assert os.listdir(out) == []  # no shard, index or sidecar under a final name; the staging folder is gone
    # a run killed harder (its driver gone) leaves its staging folder: the next run of the name and split removes it
    os.makedirs(f"{out}/.toy-train.ray-0123456789ab")
    with open(f"{out}/.toy-train.ray-0123456789ab/part-00000000", "wb") as f:
        f.write(b"half")
    tray.write_tfrecords(source_dataset(), out, "toy", shard_size="8KB")
    local_set(str(tmp_path / "ref"), (example(i) for i in range(500)), shard_size="8KB")
    assert dir_bytes(out) == dir_bytes(str(tmp_path / "ref"))


def test_a_write_task_whose_worker_dies_is_retried_into_the_same_set(tmp_path, source_dataset):
    """A worker process killed in the middle of a write task: Ray runs the task again; its part file, written
    atomically, is written whole by the retry, and the set is the one an undisturbed run writes."""
    marker = str(tmp_path / "died")

    def die_once(batch):
        if 300 in batch["id"] and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return batch

    out = str(tmp_path / "out")
    tray.write_tfrecords(source_dataset().map_batches(die_once), out, "toy", shard_size="8KB")
    assert os.path.exists(marker)
    local_set(str(tmp_path / "ref"), (example(i) for i in range(500)), shard_size="8KB")
    assert dir_bytes(out) == dir_bytes(str(tmp_path / "ref"))


def test_rewrite_with_other_sharding_removes_the_old_shards(tmp_path, source_dataset):
    out = str(tmp_path / "out")
    tray.write_tfrecords(source_dataset(), out, "toy", records_per_shard=100)
    assert len([n for n in os.listdir(out) if n.endswith(".idx")]) == 5
    paths = tray.write_tfrecords(source_dataset(), out, "toy", records_per_shard=250)
    assert sorted(os.listdir(out)) == sorted([os.path.basename(p) for p in paths]
                                             + [os.path.basename(p) + ".idx" for p in paths]
                                             + ["toy-train.tfr_torch.json"])


def test_empty_dataset_writes_an_empty_set(tmp_path, source_dataset):
    ds = source_dataset().filter(lambda row: row["id"] < 0)
    assert tray.write_tfrecords(ds, str(tmp_path / "e"), "toy") == []
    with open(tmp_path / "e" / "toy-train.tfr_torch.json") as f:
        assert json.load(f)["records"] == 0


def test_write_to_a_url_gives_the_local_bytes(tmp_path, source_dataset):
    """An fsspec URL as out_dir (here `local://`, fsspec's local filesystem behind a URL, which every Ray worker
    process reaches as it would s3://): parts and shards are made on local disk and uploaded, final names given by
    moves through fsspec; the set is the one a local write makes, and no staging or temporary file is left."""
    pytest.importorskip("fsspec")
    local_set(str(tmp_path / "ref"), (example(i) for i in range(500)), records_per_shard=150, compression="gzip")
    paths = tray.write_tfrecords(source_dataset(), f"local://{tmp_path}/out", "toy", records_per_shard=150,
                                 compression="gzip")
    assert [p.rsplit("/", 1)[-1] for p in paths] == [f"toy-train.tfrecord-0000{i}-of-00004" for i in range(4)]
    assert all(p.startswith("local://") for p in paths)
    assert dir_bytes(str(tmp_path / "out")) == dir_bytes(str(tmp_path / "ref"))  # seek points, sidecar included
    ids = [int(r["id"]) for r in tfr_torch.TFRecordDataset(paths, features="auto", batch_size=None)]
    assert ids == list(range(500))
    # rewritten with another shard count: the old shards go, as in a local folder
    paths = tray.write_tfrecords(source_dataset(), f"local://{tmp_path}/out", "toy", records_per_shard=250)
    names = [p.rsplit("/", 1)[-1] for p in paths]
    assert sorted(os.listdir(tmp_path / "out")) == sorted(names + [n + ".idx" for n in names]
                                                          + ["toy-train.tfr_torch.json"])


def test_a_failed_write_to_a_url_leaves_nothing(tmp_path, source_dataset):
    pytest.importorskip("fsspec")

    def explode(batch):
        if 321 in batch["id"]:
            raise RuntimeError("boom at row 321")
        return batch

    with pytest.raises(Exception, match="boom at row 321"):
        tray.write_tfrecords(source_dataset().map_batches(explode), f"local://{tmp_path}/out", "toy")
    assert os.listdir(tmp_path / "out") == []  # the staging folder under the URL is removed too


def test_write_argument_errors(tmp_path):
    ds = ray.data.from_items([{"a": 1}])
    with pytest.raises(ValueError, match="name must be a non-empty string without '/', got 'a/b'"):
        tray.write_tfrecords(ds, str(tmp_path), "a/b")
    with pytest.raises(ValueError, match="records_per_shard must be a positive int, got 0"):
        tray.write_tfrecords(ds, str(tmp_path), "a", records_per_shard=0)
    with pytest.raises(ValueError, match=r"features must be \"auto\", a spec dict or None, got 'x'"):
        tray.write_tfrecords(ds, str(tmp_path), "a", features="x")
    nested = ray.data.from_items([{"m": {"k": 1}}])
    with pytest.raises(TypeError, match="column 'm' has Arrow type struct<k: int64>, which has no tf.train.Feature"):
        tray.write_tfrecords(nested, str(tmp_path / "n"), "a")


# ----- conversion on Ray --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for c, cls in enumerate(["cat", "dog", "eel"]):
        os.makedirs(root / cls)
        for j in range(4):
            pixels = rng.integers(0, 255, (8 + j, 10, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / cls / f"{cls}{j}.{'png' if j % 2 else 'jpg'}")
    return str(root)


def test_convert_image_folder_on_ray_gives_the_local_bytes(image_folder, tmp_path):
    local = tfr_torch.convert_image_folder(image_folder, str(tmp_path / "local"), "imgs", records_per_shard=5)
    on_ray = tfr_torch.convert_image_folder(image_folder, str(tmp_path / "ray"), "imgs", records_per_shard=5,
                                            engine="ray")
    assert on_ray.records == local.records == 12
    assert dir_bytes(str(tmp_path / "ray")) == dir_bytes(str(tmp_path / "local"))
    assert ray.is_initialized()  # the conversion used this session and left it running


def test_convert_dataset_on_ray_gives_the_local_bytes(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(1)
    items = [(Image.fromarray(rng.integers(0, 255, (6, 7, 3), dtype=np.uint8)), i % 2) for i in range(30)]
    for fmt in ("png", "raw"):
        tfr_torch.convert_dataset(items, str(tmp_path / f"local-{fmt}"), "toy", image_format=fmt,
                                  records_per_shard=7, classes=["a", "b"])
        tfr_torch.convert_dataset(items, str(tmp_path / f"ray-{fmt}"), "toy", image_format=fmt, records_per_shard=7,
                                  classes=["a", "b"], engine="ray")
        assert dir_bytes(str(tmp_path / f"ray-{fmt}")) == dir_bytes(str(tmp_path / f"local-{fmt}"))


def test_interrupted_ray_conversion_resumes(image_folder, tmp_path):
    root = str(tmp_path / "src")
    shutil.copytree(image_folder, root)
    good = os.path.join(root, "dog", "dog1.png")
    shutil.copy(good, good + ".bak")
    with open(good, "wb") as f:
        f.write(b"not an image")  # item 5 of 12
    out = str(tmp_path / "out")
    with pytest.raises(tfr_torch.DecodeError, match="dog1.png"):
        tfr_torch.convert_image_folder(root, out, "imgs", records_per_shard=2, engine="ray")
    partials = sorted(n for n in os.listdir(out) if n.endswith(".partial"))
    assert partials == [f"imgs-train.tfrecord-{i:05d}.partial" for i in range(2)]  # items 0-3
    kept = [os.stat(os.path.join(out, n)).st_ino for n in partials]
    os.replace(good + ".bak", good)
    with pytest.warns(UserWarning, match="resuming"):
        result = tfr_torch.convert_image_folder(root, out, "imgs", records_per_shard=2, engine="ray")
    assert result.resumed_from == 4
    assert [os.stat(p).st_ino for p in result.paths[:2]] == kept
    ref = tfr_torch.convert_image_folder(root, str(tmp_path / "ref"), "imgs", records_per_shard=2)
    assert dir_bytes(out) == dir_bytes(os.path.dirname(ref.paths[0]))


def test_cli_convert_engine_ray(image_folder, tmp_path, capsys):
    assert cli(["convert", image_folder, str(tmp_path / "local"), "--name", "imgs", "--shard-size", "2KB", "-q",
                "--workers", "1"]) == 0
    assert cli(["convert", image_folder, str(tmp_path / "ray"), "--name", "imgs", "--shard-size", "2KB", "-q",
                "--engine", "ray"]) == 0
    assert dir_bytes(str(tmp_path / "ray")) == dir_bytes(str(tmp_path / "local"))
    capsys.readouterr()
    assert cli(["convert", image_folder, str(tmp_path / "x"), "--name", "imgs", "--address", "auto"]) == 2
    assert ("tfr-torch convert: error: argument --address: names a Ray cluster, so it needs --engine ray"
            in capsys.readouterr().err)


def test_convert_engine_errors(image_folder, tmp_path):
    with pytest.raises(ValueError, match="engine must be \"local\" or \"ray\", got 'spark'"):
        tfr_torch.convert_image_folder(image_folder, str(tmp_path / "o"), "imgs", engine="spark")
    with pytest.raises(ValueError, match="address='auto' names a Ray cluster: it needs engine=\"ray\""):
        tfr_torch.convert_image_folder(image_folder, str(tmp_path / "o"), "imgs", address="auto")


def _clips(path: str) -> list[tuple]:
    rng = np.random.default_rng(8)
    rows = []
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(30):
            steps = int(rng.integers(0, 4))
            tokens = [rng.integers(0, 50, int(rng.integers(0, 3))).astype(np.int64) for _ in range(steps)]
            words = [np.array([f"w{i}.{s}.{j}".encode() for j in range(int(rng.integers(0, 3)))], dtype=bytes)
                     for s in range(steps)]
            emb = rng.random((steps, 2)).astype(np.float32)
            writer.write(tfr_torch.encode_sequence_example({"id": i, "title": f"clip {i}".encode()},
                                                           {"tokens": tokens, "words": words, "emb": list(emb)}))
            rows.append((i, f"clip {i}", [t.tolist() for t in tokens], [list(w) for w in words], emb))
    return rows


def test_sequence_examples_give_context_and_feature_list_columns(tmp_path):
    """Slow by nature: a Ray Data read and its execution on the local cluster (tasks, object store)."""
    import pyarrow as pa

    path = str(tmp_path / "clips.tfrecord")
    rows = _clips(path)
    spec = tfr_torch.SequenceFeatures(
        context={"id": FixedLenFeature([], torch.int64), "title": FixedLenFeature([], string)},
        sequence={"tokens": VarLenFeature(torch.int64), "words": VarLenFeature(string),
                  "emb": FixedLenSequenceFeature([2], torch.float32)})
    ds = tray.read_tfrecords(path, spec, utf8=["title"], batch_rows=7)
    table = table_of(ds)
    assert table.schema.field("title").type == pa.string()
    assert table.schema.field("tokens").type == pa.list_(pa.list_(pa.int64()))
    assert table.schema.field("words").type == pa.list_(pa.list_(pa.binary()))
    assert table.column("id").to_pylist() == [r[0] for r in rows]
    assert table.column("title").to_pylist() == [r[1] for r in rows]
    assert table.column("tokens").to_pylist() == [r[2] for r in rows]
    assert table.column("words").to_pylist() == [r[3] for r in rows]
    batch = ds.take_batch(30, batch_format="numpy")
    for row, r in zip(batch["emb"], rows):
        assert np.array_equal(np.asarray(row, dtype=np.float32).reshape(-1, 2), r[4])


def test_sequence_example_specs_are_checked_before_any_task(tmp_path):
    path = str(tmp_path / "clips.tfrecord")
    _clips(path)
    both = tfr_torch.SequenceFeatures(context={"id": FixedLenFeature([], torch.int64)},
                                      sequence={"id": VarLenFeature(torch.int64)})
    with pytest.raises(ValueError, match=r"features \['id'\] are both context features and feature lists"):
        tray.read_tfrecords(path, both)
    with pytest.raises(ValueError, match=r"utf8 names features that are not string features: \['tokens'\]"):
        tray.read_tfrecords(path, tfr_torch.SequenceFeatures(sequence={"tokens": VarLenFeature(torch.int64)}),
                            utf8=["tokens"])


def test_sequence_examples_with_features_auto_from_the_sidecar(tmp_path):
    """Slow by nature: a Ray Data read and its execution on the local cluster (tasks, object store)."""
    path = str(tmp_path / "clips.tfrecord")
    rows = _clips(path)
    spec = tfr_torch.SequenceFeatures(context={"id": FixedLenFeature([], torch.int64)},
                                      sequence={"tokens": VarLenFeature(torch.int64)})
    with tfr_torch.ShardedWriter(str(tmp_path / "out"), "clips", records_per_shard=8, features=spec) as writer:
        for record in tfr_torch.read_records(path):
            writer.write(record)
    table = table_of(tray.read_tfrecords(str(tmp_path / "out"), "auto", split="train"))
    got = sorted(zip(table.column("id").to_pylist(), table.column("tokens").to_pylist()))
    assert got == [(r[0], r[2]) for r in rows]
