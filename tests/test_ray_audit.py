"""An audit of tfr_torch.ray for Examples (tests/test_ray.py holds the feature tests): read planning over random
files (every record once, in the files' order, exact counts), every spec kind against `parse_example` value by
value, error locations, TFDS slices over many blocks; writing every column type Ray makes, features="auto" over
blocks whose schemas differ, what a failed write leaves, and (with TFR_TORCH_TF_PYTHON naming a Python with
TensorFlow) TensorFlow reading what write_tfrecords wrote. One local Ray (2 CPUs) for the module."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import textwrap

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RowLengths,
    UniformRowLength,
    VarLenFeature,
    string,
)
from tfr_torch.format.index import scan_index

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import pyarrow as pa  # noqa: E402  (Ray Data brings it)

import tfr_torch.ray as tray  # noqa: E402
from tfr_torch.ray.planning import FileInfo, group_pieces, plan_pieces  # noqa: E402

pytestmark = pytest.mark.ray

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "")
needs_tf = pytest.mark.skipif(not TF_PYTHON or not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow for the reference checks")
ID = {"id": FixedLenFeature([], torch.int64)}


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


def table_of(ds) -> pa.Table:
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def ids_of(ds) -> list[int]:
    return [int(i) for i in table_of(ds).column("id").to_pylist()]


def dir_bytes(folder: str) -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def write_ids(path: str, ids, *, index: bool = True, compression: str | None = None, missing=()) -> str:
    """Examples {"id": i, "k": i} (no "k" for the ids in `missing`), indexed unless told not to."""
    with tfr_torch.TFRecordWriter(path, compression) as writer:
        for i in ids:
            writer.write_example({"id": i} if i in missing else {"id": i, "k": i})
    if index:
        tfr_torch.build_index(path)
    return path


def raised(info) -> BaseException:
    """The library's error inside what Ray raised (RayTaskError subclasses it, keeping the message)."""
    return info.value


# ----- planning ------------------------------------------------------------------------------------------------------


def test_plan_covers_every_record_once_in_order_for_random_files():
    """The pure planner over 300 random file sets (counts known or not, splittable or not, TFDS windows):
    record ranges cover every wanted record once, in file order; the groups are consecutive, non-empty and no more
    than asked."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        files, wanted, everything = [], [], {}
        for f in range(int(rng.integers(1, 6))):
            n = int(rng.choice([0, 1, 2, 5, 40, 1000]))
            sizes = rng.integers(16, 200, n)
            offsets = np.stack([np.cumsum(sizes) - sizes, sizes], 1).astype(np.int64)
            indexed, known = bool(rng.integers(2)), bool(rng.integers(2))
            first, take, partial = 0, n, bool(rng.integers(4) == 0) and n > 0
            if partial:
                first = int(rng.integers(0, n))
                take = int(rng.integers(0, n - first + 1))
            size = int(sizes.sum())
            everything[f"f{f}"] = offsets
            files.append(FileInfo(f"f{f}", size, take if (indexed or known or partial) else None,
                                  offsets[first : first + take] if indexed else None, indexed, first, partial))
            wanted += [(f"f{f}", r) for r in range(first, first + take)]
        for parallelism in (1, 2, 3, 8, 33):
            pieces = plan_pieces(files, parallelism)
            got = []
            for piece in pieces:
                count = piece.count
                if count is None:  # read to the end: the whole file (only unpartial, uncounted files)
                    count = len([w for w in wanted if w[0] == piece.path])
                full = everything[piece.path]
                if piece.skip:  # a window of a file without an index: read from its start, the first skipped
                    assert (piece.start, piece.skip) == (0, piece.first), piece
                elif piece.exact and count:  # a record range: its bytes are exactly those records'
                    assert piece.start == full[piece.first, 0], piece
                    assert piece.end in (None, full[piece.first + count - 1].sum()), piece
                got += [(piece.path, piece.first + r) for r in range(count)]
            assert got == wanted, (files, parallelism)
            groups = group_pieces(pieces, parallelism)
            assert [p for g in groups for p in g] == pieces
            assert len(groups) <= parallelism and all(groups)


@pytest.fixture(scope="module")
def random_files(tmp_path_factory):
    """Seeded random files: indexed or not, gzip, zlib, empty (with and without an index), one big indexed file;
    returns them and the ids they hold in order."""
    folder = tmp_path_factory.mktemp("random")
    rng = np.random.default_rng(3)
    paths, ids, next_id = [], [], 0
    plan = [(0, True, None), (3000, True, None), (0, False, None)]
    plan += [(int(rng.integers(1, 120)), bool(rng.integers(2)), rng.choice([None, None, "gzip", "zlib"]))
             for _ in range(7)]
    for i, (n, index, compression) in enumerate(plan):
        suffix = {None: "", "gzip": ".gz", "zlib": ".zz"}[compression]
        path = str(folder / f"r{i}.tfrecord{suffix}")
        write_ids(path, range(next_id, next_id + n), index=index, compression=compression)
        paths.append(path)
        ids += list(range(next_id, next_id + n))
        next_id += n
    return paths, ids


def test_random_files_give_every_record_once_in_order_whatever_the_blocks(random_files):
    """Slow by nature: 12 Ray Data reads (4 block counts x 3 batch sizes) on the local cluster."""
    paths, ids = random_files
    source = tray.TFRecordDatasource(paths, ID)
    for blocks in (1, 2, 5, 16):
        tasks = source.get_read_tasks(blocks)
        assert 0 < len(tasks) <= blocks
        known = [t.metadata.num_rows for t in tasks if t.metadata.num_rows is not None]
        unindexed = [p for p in paths if not os.path.exists(p + ".idx")]
        assert (len(known) == len(tasks)) == (not unindexed)
        for batch_rows in (None, 1, 37):
            ds = tray.read_tfrecords(paths, ID, override_num_blocks=blocks, batch_rows=batch_rows).materialize()
            assert ids_of(ds) == ids, (blocks, batch_rows)
            assert ds.count() == len(ids)
    raw = tray.read_tfrecords(paths, override_num_blocks=7)
    assert [row["bytes"] for row in raw.iter_rows()] == [r for p in paths for r in tfr_torch.read_records(p)]


def test_one_big_indexed_file_is_cut_into_exact_record_ranges(random_files):
    paths, _ = random_files
    big = paths[1]
    source = tray.TFRecordDatasource(big)
    for blocks in (2, 3, 7, 64):
        rows = [t.metadata.num_rows for t in source.get_read_tasks(blocks)]
        assert len(rows) == blocks and sum(rows) == 3000 and max(rows) - min(rows) <= 1
    assert tray.read_tfrecords(big, ID, override_num_blocks=7).count() == 3000


def test_a_stale_sidecar_count_is_not_reported_as_the_row_count(tmp_path):
    """A shard rewritten after its sidecar (and without an index): Ray's count() came from the sidecar's record
    count (30) while the rows were 25; the sidecar's count is used only where the shard still has the size it
    recorded, as TFRecordDataset does (trusted_counts)."""
    out = str(tmp_path / "set")
    with tfr_torch.ShardedWriter(out, "toy", "train", records_per_shard=10, features=ID) as writer:
        for i in range(30):
            writer.write_example({"id": i})
    for name in os.listdir(out):
        if name.endswith(".idx"):
            os.remove(os.path.join(out, name))
    source = tray.TFRecordDatasource(out, "auto", split="train")
    assert source.num_records == 30  # the unchanged set: counts from the sidecar, no pass over the data
    assert [t.metadata.num_rows for t in source.get_read_tasks(3)] == [10, 10, 10]
    write_ids(f"{out}/toy-train.tfrecord-00001-of-00003", range(100, 105), index=False)
    source = tray.TFRecordDatasource(out, "auto", split="train")
    assert source.num_records is None
    ds = tray.read_tfrecords(out, "auto", split="train")
    assert ds.count() == 25
    assert ids_of(ds) == list(range(10)) + list(range(100, 105)) + list(range(20, 30))


@pytest.mark.parametrize("indexed", [False, True])
def test_tfds_slices_over_many_blocks_select_what_tfds_selects(tmp_path, indexed):
    out = str(tmp_path / "toy" / "1.0.0")
    with tfr_torch.ShardedWriter(out, "toy", "train", records_per_shard=37, tfds={"version": "1.0.0"},
                                 features=ID) as writer:
        for i in range(200):
            writer.write_example({"id": i})
    for name in os.listdir(out):
        if name.endswith(".idx") and not indexed:
            os.remove(os.path.join(out, name))
    for split in ("train[10%:30%]", "train[36:38]+train[:2]", "train[-5:]", "train[37:74]"):
        want = [int(row["id"]) for row in
                tfr_torch.TFRecordDataset(str(tmp_path / "toy"), ID, split=split, batch_size=None)]
        source = tray.TFRecordDatasource(str(tmp_path / "toy"), "auto", split=split)
        assert source.num_records == len(want)
        for blocks in (1, 8):
            ds = ray.data.read_datasource(source, override_num_blocks=blocks)
            assert ids_of(ds) == want, (split, blocks)
            assert ds.count() == len(want)


def test_a_tfds_slice_after_a_skipped_record_selects_what_tfrecorddataset_selects(tmp_path):
    """on_error="skip" over a TFDS slice of a shard without an index: the records before the slice were counted
    without the bad one, so a bad record before the slice moved the window one record on (train[10:20] gave ids
    11..20); bad records count as positions, as in dataset_info.json's shard lengths and TFRecordDataset."""
    out = str(tmp_path / "toy" / "1.0.0")
    with tfr_torch.ShardedWriter(out, "toy", "train", records_per_shard=50, tfds={"version": "1.0.0"},
                                 features=ID) as writer:
        for i in range(100):
            writer.write_example({"id": i})
    for name in os.listdir(out):
        if name.endswith(".idx"):
            os.remove(os.path.join(out, name))
    shard = f"{out}/toy-train.tfrecord-00000-of-00002"
    offsets = scan_index(shard)
    with open(shard, "r+b") as f:
        for record in (3, 15):  # one before the slice, one inside it: their data CRCs fail
            f.seek(int(offsets[record, 0]) + 12 + 1)
            byte = f.read(1)
            f.seek(int(offsets[record, 0]) + 12 + 1)
            f.write(bytes([byte[0] ^ 0xFF]))
    folder = str(tmp_path / "toy")
    for split in ("train[10:20]", "train[:5]", "train[2:16]+train[48:52]"):
        with pytest.warns(tfr_torch.SkippedRecordWarning):
            want = [int(r["id"]) for r in
                    tfr_torch.TFRecordDataset(folder, ID, split=split, on_error="skip", batch_size=None)]
        got = ids_of(tray.read_tfrecords(folder, ID, split=split, on_error="skip", override_num_blocks=3))
        assert got == want, split
    assert want == [2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 48, 49, 50, 51]


def test_a_folder_holding_the_split_of_two_sets_is_refused(tmp_path):
    """Two datasets written into one folder (names "a" and "b"): read_tfrecords(folder, split="train") read both
    as one dataset (and "auto" blamed a missing sidecar)."""
    out = str(tmp_path / "two")
    for name, n in (("a", 5), ("b", 3)):
        with tfr_torch.ShardedWriter(out, name, "train", records_per_shard=2, features=ID) as writer:
            for i in range(n):
                writer.write_example({"id": i})
    for features in (ID, "auto"):
        with pytest.raises(ValueError, match=rf"{out} holds split 'train' of several shard sets, named \['a', 'b'\]: "
                                             rf"pass the files of one \(a glob such as {out}/a-train.tfrecord-\*\)"):
            tray.read_tfrecords(out, features, split="train")
    assert ids_of(tray.read_tfrecords(f"{out}/b-train.tfrecord-*", "auto")) == [0, 1, 2]


# ----- columns -------------------------------------------------------------------------------------------------------


def _audit_row(i: int) -> dict:
    rng = np.random.default_rng(i)
    row = {"id": i, "f": rng.random(3).astype(np.float32), "v": np.arange(i % 3, dtype=np.int64),
           "s": np.array([f"s{i}".encode()] * (i % 2), dtype=bytes), "seq": np.arange(2 * (i % 3), dtype=np.float32),
           "h": np.float32(i) / 3, "name": f"nåme {i}", "pair": [f"a{i}", f"b{i}"],
           "vals": np.arange(i % 5, dtype=np.int64),
           "lens": np.array([1, i % 5 - 1]) if i % 5 else np.array([0], np.int64),
           "strs": np.array([b"a", b"b", b"c", b"d"][: 2 * (i % 3)], dtype=bytes)}
    if i % 4:
        row["opt"] = i
    return row


AUDIT_SPEC = {
    "id": FixedLenFeature([], torch.int64),
    "f": FixedLenFeature([3], torch.float32),
    "f1": FixedLenFeature([1, 3], torch.float16, default_value=np.full((1, 3), 2.5)),
    "opt": FixedLenFeature([], torch.int32, default_value=-7),
    "v": VarLenFeature(torch.int32),
    "vb": VarLenFeature(torch.bool),
    "s": VarLenFeature(string),
    "name": FixedLenFeature([], string),
    "pair": FixedLenFeature([2], string),
    "seq": FixedLenSequenceFeature([2], torch.float32, allow_missing=True),
    "seqs": FixedLenSequenceFeature([], string, allow_missing=True),
    "strs": FixedLenSequenceFeature([2], string, allow_missing=True),
    "h": FixedLenFeature([], torch.float16),
    "r1": RaggedFeature(torch.int64, value_key="vals"),
    "r2": RaggedFeature(torch.int64, value_key="vals", partitions=[RowLengths("lens")]),
    "r3": RaggedFeature(torch.int64, value_key="vals", partitions=[UniformRowLength(1)]),
    "rs": RaggedFeature(string, value_key="strs", partitions=[UniformRowLength(2)]),
}


def _expected(key: str, spec, value, i: int):
    """Row i of parse_example's result for `key`, as a plain Python value in the column's form."""
    if isinstance(spec, FixedLenFeature):
        return value[i] if spec.dtype == string else value[i].tolist()
    if isinstance(spec, VarLenFeature):
        if spec.dtype == string:
            return value[i]
        dense = value.to_dense()[i].tolist()
        count = int((value._indices()[0] == i).sum())
        return dense[:count]
    if isinstance(spec, FixedLenSequenceFeature):
        return None  # compared against the record itself: the padded batch hides each row's steps
    if isinstance(value, torch.Tensor):  # a nested tensor (RaggedFeature without partitions, or uniform ones)
        return value.unbind()[i].tolist()
    return value.to_list()[i] if hasattr(value, "to_list") else value[i]


def test_every_spec_kind_equals_parse_example_value_by_value(tmp_path):
    """Slow by nature: one Ray Data read per feature kind (17) on the local cluster."""
    path = str(tmp_path / "kinds.tfrecord")
    rows = [_audit_row(i) for i in range(50)]
    with tfr_torch.TFRecordWriter(path) as writer:
        for row in rows:
            writer.write_example(row)
    tfr_torch.build_index(path)
    records = list(tfr_torch.read_records(path))
    for key, spec in AUDIT_SPEC.items():
        want = tfr_torch.parse_example(records, {key: spec})[key]
        table = table_of(tray.read_tfrecords(path, {key: spec}, batch_rows=7, override_num_blocks=3))
        got = table.column(key).to_pylist()
        assert len(got) == 50
        for i, value in enumerate(got):
            if isinstance(spec, FixedLenSequenceFeature):
                raw = rows[i].get(key, np.zeros(0))
                width = int(np.prod(spec.shape)) or 1
                if spec.dtype == string:
                    assert value == np.asarray(raw).reshape(-1, *spec.shape).tolist(), (key, i)
                    assert value == want[i][: len(raw) // width], (key, i)
                else:
                    assert np.array_equal(np.asarray(value, np.float32).reshape(-1, *spec.shape),
                                          want[i, : len(raw) // width].numpy()), (key, i)
            elif key in ("f", "h", "f1"):
                assert np.array_equal(np.asarray(value, np.float32),
                                      np.asarray(_expected(key, spec, want, i), np.float32)), (key, i)
            else:
                assert value == _expected(key, spec, want, i), (key, i)
    types = table_of(tray.read_tfrecords(path, AUDIT_SPEC, utf8=["name", "pair"])).schema
    assert types.field("name").type == pa.string() and types.field("pair").type == pa.list_(pa.string(), 2)
    assert types.field("opt").type == pa.int32() and types.field("h").type == pa.float16()
    assert types.field("vb").type == pa.list_(pa.bool_()) and types.field("strs").type == pa.list_(
        pa.list_(pa.binary(), 2))
    batch = tray.read_tfrecords(path, AUDIT_SPEC, utf8=["name", "pair"]).take_batch(50, batch_format="numpy")
    assert list(batch["pair"][3]) == ["a3", "b3"] and batch["name"][1] == "nåme 1"
    assert batch["f1"].shape == (50, 1, 3) and batch["f1"].dtype == np.float16 and (batch["f1"] == 2.5).all()


def test_a_missing_key_names_the_file_offset_and_key_in_any_block(tmp_path):
    path = write_ids(str(tmp_path / "m.tfrecord"), range(100), missing={61})
    gz = write_ids(str(tmp_path / "m.tfrecord.gz"), range(100), missing={61}, compression="gzip")
    offset = int(scan_index(path)[61, 0])
    spec = {"id": FixedLenFeature([], torch.int64), "k": FixedLenFeature([], torch.int64)}
    for source in (path, gz):
        with pytest.raises(tfr_torch.DecodeError) as info:
            tray.read_tfrecords(source, spec, override_num_blocks=4, batch_rows=10).materialize()
        assert f"{source}:{offset}: feature 'k' in example 1 is required but missing" in str(raised(info))
    with_default = dict(spec, k=FixedLenFeature([], torch.int64, default_value=-1))
    got = table_of(tray.read_tfrecords(path, with_default, override_num_blocks=4)).column("k").to_pylist()
    assert got == [-1 if i == 61 else i for i in range(100)]


def test_after_a_skipped_record_errors_name_the_right_offset(tmp_path):
    """With on_error="skip", the record after a skipped one was named by the skipped record's offset (the end of
    the record before it) in decode errors."""
    path = write_ids(str(tmp_path / "c.tfrecord"), range(30), missing={8, 20}, index=False)
    offsets = scan_index(path)
    with open(path, "r+b") as f:  # record 7's payload changed: its data CRC fails, the framing stays
        f.seek(int(offsets[7, 0]) + 12 + 3)
        byte = f.read(1)
        f.seek(int(offsets[7, 0]) + 12 + 3)
        f.write(bytes([byte[0] ^ 0xFF]))
    spec = {"id": FixedLenFeature([], torch.int64), "k": FixedLenFeature([], torch.int64)}
    with pytest.raises(tfr_torch.DecodeError) as info:
        tray.read_tfrecords(path, spec, on_error="skip").materialize()
    assert f"{path}:{int(offsets[8, 0])}: feature 'k' in example 7 is required" in str(raised(info))
    source = tray.TFRecordDatasource(path, ID, on_error="skip", batch_rows=4)
    ds = ray.data.read_datasource(source, override_num_blocks=3)
    assert ids_of(ds) == [i for i in range(30) if i != 7] and ds.count() == 29
    assert len(source.skipped) >= 1 and source.skipped[0].startswith(f"{path}:{int(offsets[7, 0])}: ")


def test_iter_torch_batches_give_the_specs_dtypes_and_shapes(tmp_path):
    path = str(tmp_path / "t.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(96):
            writer.write_example({"id": i, "x": np.full((2, 2), i, np.float32), "b": i % 2, "h": float(i)})
    tfr_torch.build_index(path)
    spec = {"id": FixedLenFeature([], torch.int64), "x": FixedLenFeature([2, 2], torch.float32),
            "b": FixedLenFeature([], torch.bool), "h": FixedLenFeature([], torch.float16)}
    batches = list(tray.read_tfrecords(path, spec, override_num_blocks=3).iter_torch_batches(batch_size=32))
    assert [b["x"].shape for b in batches] == [(32, 2, 2)] * 3
    assert batches[0]["b"].dtype == torch.bool and batches[0]["h"].dtype == torch.float16
    assert torch.equal(torch.cat([b["id"] for b in batches]), torch.arange(96))
    assert torch.equal(torch.cat([b["x"][:, 1, 1] for b in batches]), torch.arange(96, dtype=torch.float32))


# ----- writing -------------------------------------------------------------------------------------------------------


def _read_back(paths: list[str]) -> list[dict]:
    return [tfr_torch.decode_example(r) for p in paths for r in tfr_torch.read_records(p)]


def test_every_column_type_ray_makes_round_trips(tmp_path):
    """Slow by nature: Ray writes and reads on the local cluster. Scalars of every width, bool, float16, str and
    bytes, fixed-shape tensors (float16 too), lists (empty ones included): features="auto" reads back what was
    written, and the shards are ShardedWriter's for the same rows."""
    def batch(b):
        i = b["id"]
        return {"id": i, "i8": i.astype(np.int8), "u16": i.astype(np.uint16), "u32": i.astype(np.uint32),
                "b": i % 3 == 0, "h": (i / 4).astype(np.float16), "d": i / 8, "t": np.array([f"t{k}" for k in i]),
                "x": np.arange(6, dtype=np.float16).reshape(1, 2, 3) + i[:, None, None].astype(np.float16),
                "l": [np.arange(k % 3, dtype=np.int64) for k in i],
                "ls": [[f"w{k}"] * (k % 2) for k in i],
                "blob": [bytes([k % 256]) * (k % 4) for k in i]}

    ds = ray.data.range(60, override_num_blocks=4).map_batches(batch)
    out = str(tmp_path / "out")
    paths = tray.write_tfrecords(ds, out, "toy", records_per_shard=25)
    assert len(paths) == 3
    rows = ds.take_all()
    spec = {"id": FixedLenFeature([], torch.int64), "i8": FixedLenFeature([], torch.int8),
            "u16": FixedLenFeature([], torch.int64), "u32": FixedLenFeature([], torch.int64),
            "b": FixedLenFeature([], torch.bool), "h": FixedLenFeature([], torch.float16),
            "d": FixedLenFeature([], torch.float64), "t": FixedLenFeature([], string),
            "x": FixedLenFeature([2, 3], torch.float16), "l": VarLenFeature(torch.int64), "ls": VarLenFeature(string),
            "blob": FixedLenFeature([], string)}
    ref = str(tmp_path / "ref")
    with tfr_torch.ShardedWriter(ref, "toy", "train", records_per_shard=25, features=spec) as writer:
        for row in rows:
            writer.write_example({k: (np.array([], dtype=bytes) if k == "ls" and not len(v) else v)
                                  for k, v in row.items()})
    assert dir_bytes(out) == dir_bytes(ref)
    back = table_of(tray.read_tfrecords(out, "auto", split="train"))
    assert back.column("id").to_pylist() == list(range(60))
    assert back.column("i8").type == pa.int8() and back.column("b").to_pylist() == [k % 3 == 0 for k in range(60)]
    assert back.column("h").to_pylist() == [float(np.float16(k / 4)) for k in range(60)]
    assert back.column("t").to_pylist() == [f"t{k}".encode() for k in range(60)]
    assert back.column("l").to_pylist() == [list(range(k % 3)) for k in range(60)]
    assert back.column("ls").to_pylist() == [[f"w{k}".encode()] * (k % 2) for k in range(60)]
    assert back.column("blob").to_pylist() == [bytes([k]) * (k % 4) for k in range(60)]
    x = table_of(tray.read_tfrecords(out, "auto", split="train")).column("x").combine_chunks().to_numpy_ndarray()
    assert x.dtype == np.float16 and np.array_equal(x[5], np.arange(6, dtype=np.float16).reshape(2, 3) + 5)


def test_tensor_columns_of_numpy_strings_and_bools_are_written(tmp_path):
    """A 2-D numpy str array from map_batches is a Ray tensor column of fixed_size_binary values: features="auto"
    refused it ("no tf.train.Feature form") though each cell is a str array that encode_example writes."""
    ds = ray.data.range(6, override_num_blocks=2).map_batches(
        lambda b: {"id": b["id"], "s": np.array([[f"é{k}", "b"] for k in b["id"]]),
                   "bt": np.stack([b["id"] % 2 == 0, b["id"] % 3 == 0], 1)})
    out = str(tmp_path / "o")
    paths = tray.write_tfrecords(ds, out, "t")
    with open(f"{out}/t-train.tfr_torch.json") as f:
        features = json.load(f)["features"]
    assert features["s"] == {"kind": "FixedLen", "shape": [2], "dtype": "string"}
    assert features["bt"] == {"kind": "FixedLen", "shape": [2], "dtype": "bool"}
    assert list(tfr_torch.read_records(paths[0]))[4] == tfr_torch.encode_example(
        {"id": 4, "s": ["é4", "b"], "bt": np.array([True, False])})
    table = table_of(tray.read_tfrecords(out, "auto", split="train"))
    assert table.column("s").to_pylist() == [[f"é{k}".encode(), b"b"] for k in range(6)]
    assert [list(v) for v in table.column("bt").to_pylist()] == [[k % 2 == 0, k % 3 == 0] for k in range(6)]


def test_the_write_runs_with_preserve_order_on_for_a_dataset_made_without_it(tmp_path):
    """write_tfrecords switched preserve_order on in the current DataContext, but a dataset runs with the copy of
    the context it was made in: for a dataset made with Ray's default (off), the write ran unordered, so the
    shards depended on which task finished first. Each task here records the setting it ran with."""
    context = ray.data.DataContext.get_current()
    context.execution_options.preserve_order = False  # Ray's default (the module fixture turned it on)
    try:
        ds = ray.data.range(8, override_num_blocks=2).map_batches(
            lambda b: {"id": b["id"], "ordered": np.full(len(b["id"]),
                                                         ray.data.DataContext.get_current().execution_options
                                                         .preserve_order)})
    finally:
        context.execution_options.preserve_order = True
    paths = tray.write_tfrecords(ds, str(tmp_path / "o"), "t")
    assert [int(r["ordered"][0]) for r in _read_back(paths)] == [1] * 8
    assert ds.context.execution_options.preserve_order is False  # the dataset's setting is given back


def test_empty_lists_of_strings_are_written(tmp_path):
    """A list<string> column with an empty list in a block: numpy gives it as an untyped empty object array, which
    encode_example refused ("an empty list has no type"), failing the whole write."""
    ds = ray.data.from_items([{"tags": ["x", "y"]}, {"tags": []}, {"tags": ["z"]}], override_num_blocks=1)
    paths = tray.write_tfrecords(ds, str(tmp_path / "o"), "t")
    assert [list(r["tags"]) for r in _read_back(paths)] == [[b"x", b"y"], [], [b"z"]]
    assert list(tfr_torch.read_records(paths[0]))[1] == tfr_torch.encode_example({"tags": np.array([], bytes)})


def test_features_auto_is_the_spec_of_every_block_not_the_first(tmp_path):
    """features="auto" took the spec from the first block's schema alone: a tensor column whose first block
    happened to hold rows of one shape became FixedLenFeature of that shape (the set then failed to read back
    with "auto"), and a list column whose first block held only empty lists (list<null>) failed the write."""
    rows = [{"id": i, "v": np.ones((1 if i < 3 else i % 4 + 1, 2), np.float32) * i,
             "tags": [] if i < 3 else [f"t{i}"] * (i % 3)} for i in range(12)]
    ds = ray.data.from_items(rows, override_num_blocks=4)
    out = str(tmp_path / "o")
    paths = tray.write_tfrecords(ds, out, "t", records_per_shard=5)
    with open(f"{out}/t-train.tfr_torch.json") as f:
        features = json.load(f)["features"]
    assert features["v"] == {"kind": "VarLen", "dtype": "float32"}
    assert features["tags"] == {"kind": "VarLen", "dtype": "string"}
    got = [row for row in tfr_torch.TFRecordDataset(paths, "auto", batch_size=None)]
    assert [int(r["id"]) for r in got] == list(range(12))
    table = table_of(tray.read_tfrecords(out, "auto", split="train"))
    assert table.column("v").to_pylist() == [r["v"].ravel().tolist() for r in rows]
    assert table.column("tags").to_pylist() == [[t.encode() for t in r["tags"]] for r in rows]


def test_columns_of_one_type_per_block_but_two_overall_are_refused_and_nothing_is_left(tmp_path):
    def batch(b):  # ints in the first block, floats in the others
        return {"id": b["id"], "n": b["id"] if b["id"][0] == 0 else b["id"] + 0.5}

    out = str(tmp_path / "o")
    ds = ray.data.range(20, override_num_blocks=2).map_batches(batch)
    with pytest.raises(TypeError, match=r"column 'n' is FixedLenFeature\(.*int64.*\) in some blocks and "
                                        r"FixedLenFeature\(.*float64.*\) in others"):
        tray.write_tfrecords(ds, out, "t")
    assert os.listdir(out) == []
    paths = tray.write_tfrecords(ds, out, "t", features={"id": ID["id"], "n": VarLenFeature(torch.float32)})
    assert len(_read_back(paths)) == 20


def test_a_uint64_beyond_int64_fails_the_write_naming_the_row_and_leaves_nothing(tmp_path):
    out = str(tmp_path / "o")
    ds = ray.data.range(10, override_num_blocks=2).map_batches(
        lambda b: {"u": b["id"].astype(np.uint64) + np.uint64(2**63 - 5)})
    with pytest.raises(ValueError, match=r"write_tfrecords: row 0 of block 0 of write task \d+: feature 'u': uint64 "
                                         r"value 9223372036854775808 does not fit in int64_list"):
        tray.write_tfrecords(ds, out, "t")
    assert os.listdir(out) == []


def test_zero_rows_and_empty_blocks(tmp_path):
    ds = ray.data.range(40, override_num_blocks=5).filter(lambda r: r["id"] < 8 or r["id"] >= 32)
    paths = tray.write_tfrecords(ds, str(tmp_path / "o"), "t", records_per_shard=6)
    assert [int(r["id"][0]) for r in _read_back(paths)] == list(range(8)) + list(range(32, 40))
    assert tray.write_tfrecords(ray.data.range(0), str(tmp_path / "z"), "t", features=ID) == []
    with open(tmp_path / "z" / "t-train.tfr_torch.json") as f:
        sidecar = json.load(f)
    assert sidecar["records"] == 0 and sidecar["shards"] == [] and sidecar["features"]["id"]["dtype"] == "int64"


def test_written_shards_compressed_by_size_to_a_url_read_back(tmp_path):
    """Slow by nature: a Ray write to an fsspec URL (`local://`, which every Ray worker reaches) and reads of it on
    the local cluster; compressed shards cut by size, the set a local write makes, read back by its split."""
    pytest.importorskip("fsspec")
    ds = ray.data.range(300, override_num_blocks=3).map_batches(
        lambda b: {"id": b["id"], "x": np.repeat(b["id"][:, None], 8, 1).astype(np.float32)})
    local = str(tmp_path / "local")
    paths = tray.write_tfrecords(ds, local, "toy", shard_size="4KB", compression="zlib")
    sidecar = json.load(open(f"{local}/toy-train.tfr_torch.json"))
    assert len(paths) > 2 and sum(s["records"] for s in sidecar["shards"]) == 300
    url = tray.write_tfrecords(ds, f"local://{tmp_path}/url", "toy", shard_size="4KB", compression="zlib")
    assert dir_bytes(str(tmp_path / "url")) == dir_bytes(local)
    back = tray.read_tfrecords(local, "auto", split="train", override_num_blocks=4)
    assert back.count() == 300 and ids_of(back) == list(range(300))
    assert [int(r["id"]) for r in tfr_torch.TFRecordDataset(url, "auto", batch_size=None)] == list(range(300))
    # the URL folder read back by its split, as a local folder is (it was refused: "paths is not a folder")
    again = tray.read_tfrecords(f"local://{tmp_path}/url", "auto", split="train", override_num_blocks=2)
    assert again.count() == 300 and ids_of(again) == list(range(300))


@needs_tf
def test_tensorflow_reads_what_write_tfrecords_wrote(tmp_path):
    """Slow by nature: a Ray write, then TensorFlow started in a subprocess to parse the shards."""
    def batch(b):
        i = b["id"]
        return {"id": i, "b": i % 2 == 0, "h": (i / 2).astype(np.float16), "t": np.array([f"t{k}" for k in i]),
                "x": np.stack([i, -i], 1).astype(np.float32), "l": [np.arange(k % 3) for k in i]}

    out = str(tmp_path / "o")
    paths = tray.write_tfrecords(ray.data.range(20, override_num_blocks=3).map_batches(batch), out, "t",
                                 compression="gzip", records_per_shard=8)
    script = textwrap.dedent("""
        import json, sys, tensorflow as tf
        spec = {"id": tf.io.FixedLenFeature([], tf.int64), "b": tf.io.FixedLenFeature([], tf.int64),
                "h": tf.io.FixedLenFeature([], tf.float32), "t": tf.io.FixedLenFeature([], tf.string),
                "x": tf.io.FixedLenFeature([2], tf.float32), "l": tf.io.VarLenFeature(tf.int64)}
        rows = []
        for record in tf.data.TFRecordDataset(sys.argv[1:], compression_type="GZIP"):
            p = tf.io.parse_single_example(record, spec)
            rows.append([int(p["id"]), int(p["b"]), float(p["h"]), p["t"].numpy().decode(), p["x"].numpy().tolist(),
                         tf.sparse.to_dense(p["l"]).numpy().tolist()])
        print(json.dumps(rows))
    """)
    done = subprocess.run([TF_PYTHON, "-c", script, *paths], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert rows == [[k, int(k % 2 == 0), float(np.float16(k / 2)), f"t{k}", [float(k), float(-k)],
                     list(range(k % 3))] for k in range(20)]

