"""Audit of the prose claims of docs/guides/datasets.md, images.md, tfds.md, rlds.md, huggingface.md,
torchdata-nodes.md, ray.md (what can be checked without Ray), docs/benchmarks.md and benchmarks/README.md.

Each test names its page and claim and checks the real behaviour: stated defaults, quoted error and warning
messages, equal work per rank, resume errors, what TFDS / Hugging Face `datasets` / torchdata do (the installed
libraries; TensorFlow and TFDS through the Python that TFR_TORCH_TF_PYTHON names, else /work/tfvenv/bin/python,
in a subprocess, skipped when there is none).

Found wrong in the docs (the code is right; the pages were fixed, the tests start "Fixed (docs):"):

- datasets.md said torchdata's `StatefulDataLoader.load_state_dict` refuses a state of another `num_workers` with an
  AssertionError: `load_state_dict` accepts it; the AssertionError comes when the loader is next iterated.
- datasets.md said an indexed file that ends before its index says raises `IndexMismatchError` "as it is read": a
  file already shorter is refused when the dataset is built; only one that shrinks afterwards raises as it is read.
- torchdata-nodes.md said torchdata 0.11's `Loader`, resumed from a state saved at an epoch's very end, keeps
  reporting that state "until the next epoch ends" (so: save again after the first epoch that follows): it keeps
  reporting it in every later epoch, until the Loader is given another state.
- benchmarks/README.md said the generated data sets are "all five": `benchmarks/datasets.py` defines six.

No code defect was found in the claims checked (no xfail). Checked and true: option checks and their messages,
DataLoader double batching, foreign spec spellings, location_key, not-TFRecord / gzip messages, glob handling, equal
work per rank (drop / pad / len / batches), the no-index counting and "nothing per rank" warnings, RANK/WORLD_SIZE
detection, on_error="skip" repeats, sidecar recount warning, state contents and resume errors, RemoteOptions
defaults, MixedDataset lengths and per-rank counts, CachedDataset replay, ElasticDistributedSampler = torch's
DistributedSampler, __getitems__ and default_collate's type map, per-record = parse_single_example; TFDS splits
equal to real TFDS 4.9.10 (and its default interleave of 16, ClassLabel names), split errors, missing shard and
array_record refusals, lazy submodules, decode thread default; FrameDataset rank warning, per-rank counts and
resume refusals; Hugging Face feature mapping and the two `datasets` behaviours; torchdata.nodes epochs and state;
Ray block defaults; decode_image errors and modes, converter sidecar, empty class folders, float tensors; the
benchmark data sets, run.py defaults, compare.py's verdicts and TensorFlow's single-threaded options.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import tfr_torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO, "tests", "data", "tfds", "data", "tfr_golden")
RLDS = os.path.join(REPO, "tests", "data", "tfds", "rlds", "rlds_golden", "1.0.0")
SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON") or "/work/tfvenv/bin/python"
needs_tf = pytest.mark.skipif(not os.path.exists(TF_PYTHON),
                              reason="no Python with tensorflow (set TFR_TORCH_TF_PYTHON)")


def _write(path, ids, index=False):
    with tfr_torch.TFRecordWriter(str(path)) as writer:
        for i in ids:
            writer.write_example({"id": i})
    if index:
        tfr_torch.build_index(str(path))
    return str(path)


def _ids(items):
    return [int(x["id"]) for x in items]


def _quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


# ------------------------------------------------------------------------------------------ datasets.md


def test_options_checked_at_build(tmp_path):
    """datasets.md, "Options are checked when the dataset is built": a bad interleave, compression, on_error,
    batch_size or shuffle_buffer raises ValueError naming the value (`interleave must be a positive int (files read
    at once), got 0`)."""
    path = _write(tmp_path / "a.tfrecord", range(4))
    with pytest.raises(ValueError, match=r"^interleave must be a positive int \(files read at once\), got 0$"):
        tfr_torch.TFRecordDataset(path, SPEC, interleave=0)
    for kwargs, shown in (({"compression": "bz2"}, "'bz2'"), ({"on_error": "ignore"}, "'ignore'"),
                          ({"batch_size": 0}, "got 0"), ({"shuffle_buffer": -1}, "got -1")):
        with pytest.raises(ValueError, match=shown):
            tfr_torch.TFRecordDataset(path, SPEC, **kwargs)


def test_dataloader_batching_again_raises(tmp_path):
    """datasets.md, "What it yields": with batch_size, a DataLoader that batches again raises, saying so."""
    ds = tfr_torch.TFRecordDataset(_write(tmp_path / "a.tfrecord", range(8)), SPEC, batch_size=4)
    with pytest.raises(ValueError, match=r"DataLoader batches them again.*batch_size=None"):
        next(iter(torch.utils.data.DataLoader(ds, batch_size=2)))


def test_foreign_spec_spellings_get_the_tfr_torch_spelling(tmp_path):
    """datasets.md, "What it yields": a spec written the tfrecord package's way ({"label": "int"}), a bare dtype or
    features="Auto" gets a message with the tfr_torch spelling."""
    path = _write(tmp_path / "a.tfrecord", range(2))
    with pytest.raises(TypeError, match=r"tfrecord. package.*FixedLenFeature\(\[\], torch.int64\)"):
        tfr_torch.TFRecordDataset(path, {"id": "int"})
    with pytest.raises(TypeError, match=r"bare dtype.*FixedLenFeature\(\[\], torch.int64\)"):
        tfr_torch.TFRecordDataset(path, {"id": torch.int64})
    with pytest.raises(ValueError, match=r"did you mean 'auto'"):
        tfr_torch.TFRecordDataset(path, "Auto")


def test_location_key_is_path_offset(tmp_path):
    """datasets.md, "Where each record is": location_key puts "path:offset" (the byte offset of the record's
    header) under that key; a list of them in a batch."""
    path = _write(tmp_path / "a.tfrecord", range(3))
    one = list(tfr_torch.TFRecordDataset(path, SPEC, location_key="where"))
    assert [x["where"] for x in one][0] == f"{path}:0"
    size = os.path.getsize(path) // 3  # three records of the same size
    assert [x["where"] for x in one] == [f"{path}:{k * size}" for k in range(3)]
    batch = next(iter(tfr_torch.TFRecordDataset(path, SPEC, location_key="where", batch_size=2)))
    assert batch["where"] == [f"{path}:0", f"{path}:{size}"]


def test_not_tfrecord_and_gzip_messages(tmp_path):
    """datasets.md, "Paths": a file that is not TFRecord data fails at offset 0 saying what it looks like
    (`img.jpg:0: not a TFRecord file: it starts like a JPEG image ...`); a gzip file read as uncompressed says to
    pass compression="gzip"."""
    jpg = tmp_path / "img.jpg"
    jpg.write_bytes(b"\xff\xd8\xff\xe0" + bytes(100))
    with pytest.raises(tfr_torch.TFRecordError, match=r"img\.jpg:0: not a TFRecord file: it starts like a JPEG image"):
        list(tfr_torch.TFRecordDataset(str(jpg)))
    plain = _write(tmp_path / "a.tfrecord", range(3))
    gz = tmp_path / "g.tfrecord"
    with open(plain, "rb") as src, gzip.open(gz, "wb") as dst:
        dst.write(src.read())
    with pytest.raises(tfr_torch.TFRecordError, match=r"g\.tfrecord:0:.*pass compression='gzip'"):
        list(tfr_torch.TFRecordDataset(str(gz), compression=None))


def test_glob_characters_and_file_named_twice(tmp_path, monkeypatch):
    """datasets.md, "Paths" / "Metadata": an existing file named with glob characters (data[1].tfrecord) is that
    file; a file named twice is said in a warning and read as many times as it is named."""
    monkeypatch.chdir(tmp_path)
    _write("data[1].tfrecord", range(5))
    assert _ids(tfr_torch.TFRecordDataset("data[1].tfrecord", SPEC)) == list(range(5))
    _write("t-0.tfrecord", range(3))
    with pytest.warns(UserWarning, match=r"named more than once.*t-0\.tfrecord \(2 times\)"):
        ds = tfr_torch.TFRecordDataset(["t-0.tfrecord", "t-*.tfrecord"], SPEC)
    assert sorted(_ids(ds)) == [0, 0, 1, 1, 2, 2]


def test_globs_leave_out_side_files_and_lists_naming_one_are_refused(tmp_path, monkeypatch):
    """datasets.md, "Paths": globs leave out .idx, .idx.seek, sidecars, dataset_info.json, features.json,
    *.labels.txt and .partial shards; a list that names one is refused with one line."""
    monkeypatch.chdir(tmp_path)
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    with tfr_torch.ShardedWriter("sw", "demo", "train", records_per_shard=3, features=spec) as writer:
        for i in range(6):
            writer.write_example({"id": i})
    for name in ("x.tfrecord.partial", "dataset_info.json", "features.json", "label.labels.txt",
                 "demo-train.tfrecord-00000-of-00002.idx.seek"):
        (tmp_path / "sw" / name).write_text("junk")
    assert sorted(_ids(tfr_torch.TFRecordDataset("sw/*", "auto"))) == list(range(6))
    for name in ("x.tfrecord.partial", "demo-train.tfrecord-00000-of-00002.idx"):
        with pytest.raises(ValueError, match=r"leave it out of the list of files") as err:
            tfr_torch.TFRecordDataset([f"sw/{name}"], "auto")
        assert "\n" not in str(err.value)


def test_missing_files_named_when_built(tmp_path, monkeypatch):
    """datasets.md, "Metadata is checked": missing files are named when the dataset is built."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"missing\.tfrecord"):
        tfr_torch.TFRecordDataset("missing.tfrecord", SPEC)
    with pytest.raises(FileNotFoundError, match=r"missing-\*\.tfrecord"):
        tfr_torch.TFRecordDataset("missing-*.tfrecord", SPEC)


@pytest.mark.parametrize("index", [None, "auto"])
def test_equal_work_per_rank(tmp_path, index):
    """datasets.md, "Equal work per rank": with world_size > 1 every rank yields exactly N // world_size records
    (remainder dropped); pad=True repeats the first records, giving ceil(N / world_size); len() is that number;
    exactly once over the ranks."""
    path = _write(tmp_path / "odd.tfrecord", range(31), index=index == "auto")
    for pad, per_rank in ((False, 7), (True, 8)):
        seen = []
        for rank in range(4):
            ds = _quiet(lambda r=rank, p=pad: tfr_torch.TFRecordDataset(path, SPEC, rank=r, world_size=4, pad=p,
                                                                        index=index))
            ids = _ids(ds)
            assert len(ids) == len(ds) == per_rank
            seen += ids
        if pad:
            assert sorted(seen) == [0] + list(range(31))  # the first record repeated once
        else:
            assert sorted(seen) == list(range(28))
    ds = tfr_torch.TFRecordDataset(path, SPEC, rank=1, world_size=4, batch_size=3, index="auto") if index else None
    if ds is not None:
        assert len(ds) == 3 and [len(b["id"]) for b in ds] == [3, 3, 1]


def test_counting_warning_and_nothing_per_rank_warnings(tmp_path):
    """datasets.md, "Exactly once" / "Metadata": without indexes and several ranks the records are counted once,
    with one warning; a warning says when every rank or a rank's drop_last batches get nothing."""
    tiny = _write(tmp_path / "tiny.tfrecord", range(3))
    with pytest.warns(UserWarning) as record:
        ds = tfr_torch.TFRecordDataset(tiny, SPEC, rank=0, world_size=4)
    messages = [str(w.message) for w in record]
    assert any("counting the records of 1 file(s) without an index" in m for m in messages)
    assert any("every rank yields nothing" in m for m in messages)
    assert len(ds) == 0
    indexed = _write(tmp_path / "a.tfrecord", range(10), index=True)
    with pytest.warns(UserWarning, match=r"this rank yields no batch"):
        ds = tfr_torch.TFRecordDataset(indexed, SPEC, index="auto", batch_size=8, drop_last=True, rank=0,
                                       world_size=2)
    assert len(ds) == 0


def test_rank_from_environment_without_torch_xla(tmp_path, monkeypatch):
    """datasets.md, "Equal work per rank": the RANK / WORLD_SIZE environment variables give the rank when no
    process group is running; detection never imports torch_xla."""
    path = _write(tmp_path / "a.tfrecord", range(10), index=True)
    had_xla = "torch_xla" in sys.modules
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = tfr_torch.TFRecordDataset(path, SPEC, index="auto")
    assert len(ds) == 5 and _ids(ds) == [5, 6, 7, 8, 9]
    assert had_xla or "torch_xla" not in sys.modules


def test_on_error_skip_repeats_only_with_several_ranks(tmp_path):
    """datasets.md, "Equal work per rank": under on_error="skip" a reader whose share held bad records ends with
    as many of its own first records again, so no rank is shorter; with one rank nothing is repeated."""
    path = _write(tmp_path / "a.tfrecord", range(10))
    data = bytearray(open(path, "rb").read())
    record = len(data) // 10
    data[3 * record + 14] ^= 0xFF  # a payload byte of record 3: its data CRC fails
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    tfr_torch.build_index(str(bad))
    alone = _quiet(lambda: _ids(tfr_torch.TFRecordDataset(str(bad), SPEC, index="auto", on_error="skip")))
    assert alone == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    ranks = [_quiet(lambda r=r: _ids(tfr_torch.TFRecordDataset(str(bad), SPEC, index="auto", on_error="skip",
                                                               rank=r, world_size=2))) for r in range(2)]
    assert ranks == [[0, 1, 2, 4, 0], [5, 6, 7, 8, 9]]


def test_indexed_file_shorter_than_its_index(tmp_path):
    """Fixed (docs): datasets.md, "Metadata is checked": an indexed file that ends before its index says raises
    IndexMismatchError when the dataset is built (the docs said "as it is read"); a file that shrinks after the
    dataset was built raises it as it is read."""
    short = _write(tmp_path / "short.tfrecord", range(10), index=True)
    os.truncate(short, os.path.getsize(short) * 9 // 10)
    with pytest.raises(tfr_torch.IndexMismatchError, match=r"the index describes 10 records"):
        tfr_torch.TFRecordDataset(short, SPEC, index="auto")  # built: nothing iterated yet
    later = _write(tmp_path / "later.tfrecord", range(10), index=True)
    ds = tfr_torch.TFRecordDataset(later, SPEC, index="auto")
    os.truncate(later, os.path.getsize(later) * 9 // 10)
    with pytest.raises(tfr_torch.IndexMismatchError, match=r"ends after 9 of the 10 records"):
        list(ds)


def test_rewritten_shard_counted_with_a_warning(tmp_path, monkeypatch):
    """datasets.md, "Metadata is checked": a sidecar count is used only while its shard has that size; a shard
    rewritten since is counted instead, with a warning naming it and both numbers."""
    monkeypatch.chdir(tmp_path)
    with tfr_torch.ShardedWriter("sw", "demo", "train", records_per_shard=5, features=SPEC) as writer:
        for i in range(10):
            writer.write_example({"id": i})
    first = "sw/demo-train.tfrecord-00000-of-00002"
    old_size = os.path.getsize(first)
    for name in os.listdir("sw"):
        if name.endswith(".idx"):
            os.remove(os.path.join("sw", name))
    _write(first, range(100, 107))
    with pytest.warns(UserWarning, match=r"demo-train\.tfrecord-00000-of-00002") as record:
        ds = tfr_torch.TFRecordDataset("sw/demo-train.tfrecord-*", "auto", rank=0, world_size=2)
    message = next(str(w.message) for w in record if "sidecar" in str(w.message))
    assert f"5 records in {old_size} bytes" in message and f"{os.path.getsize(first)} bytes" in message
    assert len(ds) == (7 + 5) // 2
    assert ds.metadata is not None and ds.classes is None


def test_state_contents_and_resume_errors(tmp_path):
    """datasets.md, "Resuming mid-epoch": a reader's part holds the epoch, seed, files, shuffle, pad, shuffle
    buffer, world size, workers, batch size and items yielded; a state that does not fit raises ValueError
    (`cannot resume: the saved state has seed=7, this dataset has 8`), an edited one too (`... epoch=1.5, expected
    an int >= 0`)."""
    path = _write(tmp_path / "a.tfrecord", range(31), index=True)
    ds = tfr_torch.TFRecordDataset(path, SPEC, seed=7, shuffle=True, index="auto")
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    for key in ("epoch", "seed", "files", "shuffle", "pad", "shuffle_buffer", "world_size", "num_workers", "batch",
                "yielded"):
        assert key in state
    assert state["yielded"] == 1 and state["seed"] == 7
    with pytest.raises(ValueError, match=r"^cannot resume: the saved state has seed=7, this dataset has 8$"):
        tfr_torch.TFRecordDataset(path, SPEC, seed=8, shuffle=True, index="auto").load_state_dict(state)
    with pytest.raises(ValueError, match=r"^cannot resume: the saved state has epoch=1\.5, expected an int >= 0$"):
        tfr_torch.TFRecordDataset(path, SPEC, seed=7, shuffle=True, index="auto").load_state_dict(
            {**state, "epoch": 1.5})


def test_remote_options_defaults():
    """datasets.md, "Remote files": 8 MB blocks, 4 ahead per file, 16 requests per process, metadata trusted for
    RemoteOptions(metadata_ttl=60) seconds."""
    opts = tfr_torch.RemoteOptions()
    assert (opts.block_size, opts.readahead, opts.max_in_flight, opts.metadata_ttl) == (8 << 20, 4, 16, 60)


def test_stateful_dataloader_refuses_other_num_workers(tmp_path):
    """Fixed (docs): datasets.md, "Resuming mid-epoch": torchdata's StatefulDataLoader refuses a state saved with
    another num_workers with an AssertionError, raised when the loader is next iterated (its load_state_dict
    accepts the state; the docs said load_state_dict raises)."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    path = _write(tmp_path / "a.tfrecord", range(10), index=True)
    ds = tfr_torch.TFRecordDataset(path, SPEC, index="auto")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = sdl.StatefulDataLoader(ds, batch_size=None, num_workers=2)
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        del it
        other = sdl.StatefulDataLoader(ds, batch_size=None, num_workers=1)
        other.load_state_dict(state)  # accepted
        with pytest.raises(AssertionError):
            next(iter(other))


def test_mixed_dataset_length_by_stop(tmp_path):
    """datasets.md, "MixedDataset": stop="all" yields every item once and len() is the sum of the lengths;
    "first" and "cycle" have no length."""
    a = _write(tmp_path / "a.tfrecord", range(10), index=True)
    b = _write(tmp_path / "b.tfrecord", range(100, 105), index=True)

    def mixed(stop):
        return tfr_torch.MixedDataset({"a": tfr_torch.TFRecordDataset(a, SPEC, index="auto"),
                                       "b": tfr_torch.TFRecordDataset(b, SPEC, index="auto")}, stop=stop)

    assert len(mixed("all")) == 15
    assert sorted(_ids(mixed("all"))) == [*range(10), *range(100, 105)]
    for stop in ("first", "cycle"):
        with pytest.raises(TypeError, match="has no length"):
            len(mixed(stop))


def test_elastic_sampler_is_distributed_sampler(tmp_path):
    """datasets.md, "Map-style datasets": ElasticDistributedSampler gives torch's DistributedSampler's indices in
    the same order for each (seed, epoch), padded or cut with drop_last; its errors name what differs."""
    path = _write(tmp_path / "a.tfrecord", range(10), index=True)
    ds = tfr_torch.IndexedTFRecordDataset(path, SPEC)
    for drop_last in (False, True):
        for rank in range(3):
            ours = tfr_torch.ElasticDistributedSampler(ds, num_replicas=3, rank=rank, seed=0, drop_last=drop_last)
            theirs = torch.utils.data.DistributedSampler(ds, num_replicas=3, rank=rank, seed=0, drop_last=drop_last)
            ours.set_epoch(2)
            theirs.set_epoch(2)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)
    sampler = tfr_torch.ElasticDistributedSampler(ds, num_replicas=1, rank=0, seed=7)
    next(iter(sampler))
    state = sampler.state_dict()
    with pytest.raises(ValueError, match=r"^cannot resume: the saved state has seed=7, this sampler has 8$"):
        tfr_torch.ElasticDistributedSampler(ds, num_replicas=1, rank=0, seed=8).load_state_dict(state)


def test_indexed_getitems_and_collate_type_map(tmp_path):
    """datasets.md, "IndexedTFRecordDataset": a batch of indices (__getitems__) equals the items one by one;
    importing tfr_torch adds its marked type to default_collate's type map."""
    from torch.utils.data._utils.collate import default_collate_fn_map

    path = _write(tmp_path / "a.tfrecord", range(10), index=True)
    ds = tfr_torch.IndexedTFRecordDataset(path, SPEC)
    items = ds.__getitems__([1, 3, 8])
    assert [int(x["id"]) for x in items] == [1, 3, 8]
    assert all(torch.equal(x["id"], ds[i]["id"]) for x, i in zip(items, [1, 3, 8]))
    assert any(getattr(t, "__module__", "").startswith("tfr_torch") for t in default_collate_fn_map)


def test_per_record_items_equal_parse_single_example(tmp_path):
    """datasets.md, "What it yields": per-record dicts (decoded 32 at a time for FixedLen/VarLen specs) equal
    parse_single_example of each record."""
    spec = {"x": tfr_torch.FixedLenFeature([3], torch.float32), "v": tfr_torch.VarLenFeature(torch.int64)}
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(70):
            writer.write_example({"x": np.arange(3, dtype=np.float32) * i, "v": np.arange(i % 4, dtype=np.int64)})
    got = list(tfr_torch.TFRecordDataset(path, spec))
    want = [tfr_torch.parse_single_example(r, spec) for r in tfr_torch.read_records(path)]
    assert len(got) == len(want) == 70
    for g, w in zip(got, want):
        assert torch.equal(g["x"], w["x"])
        assert torch.equal(g["v"].to_dense(), w["v"].to_dense())


# ------------------------------------------------------------------------------------------ tfds.md


def test_tfds_split_errors_name_the_split():
    """tfds.md, "Splits": what TFDS refuses (an unknown split, a slice outside the split, a selection of no
    example, all[:10%]) raises ValueError naming the split string."""
    for split in ("nope", "train[100:200]", "train[5:5]", "all[:10%]"):
        with pytest.raises(ValueError, match=re.escape(f"split '{split}'")):
            tfr_torch.TFRecordDataset(GOLDEN, split=split)


SPLITS = ["train", "test", "all", "train[:33%]", "train[:50%]", "train[-5:]", "train[1shard]", "train[:2shard]",
          "test+train[:3]"]


@needs_tf
def test_tfds_splits_equal_tfds_and_its_defaults():
    """tfds.md, "Splits": every split form selects the records TFDS does (percent rounding included); TFDS's
    default interleaves 16 files; TFDS refuses all[:10%] and the other cases; ClassLabel(num_classes=N) names
    are "0" to "N-1"."""
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow_datasets as tfds
        from tensorflow_datasets.core import reader
        b = tfds.builder_from_directory({os.path.join(GOLDEN, "1.0.0")!r})
        out = {{"counts": {{}}, "refused": {{}}}}
        rc = tfds.ReadConfig(interleave_cycle_length=1)
        for sp in {SPLITS!r}:
            out["counts"][sp] = [int(x["label"]) for x in tfds.as_numpy(b.as_dataset(split=sp, shuffle_files=False,
                                                                                    read_config=rc))]
        for sp in ("all[:10%]", "nope", "train[100:200]", "train[5:5]"):
            try:
                b.as_dataset(split=sp)
            except Exception as e:
                out["refused"][sp] = type(e).__name__
        out["default_cycle"] = reader._get_default_interleave_cycle_length(disable_shuffling=False)
        out["missing"] = str(tfds.ReadConfig().interleave_cycle_length)
        out["names"] = tfds.features.ClassLabel(num_classes=3).names
        print(json.dumps(out))
    """)
    proc = subprocess.run([TF_PYTHON, "-c", script], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = json.loads(proc.stdout.strip().splitlines()[-1])
    for split in SPLITS:
        assert _ids_labels(tfr_torch.TFRecordDataset(GOLDEN, split=split)) == ref["counts"][split], split
    assert set(ref["refused"]) == {"all[:10%]", "nope", "train[100:200]", "train[5:5]"}
    assert ref["default_cycle"] == 16 and ref["missing"] == "missing"
    assert ref["names"] == ["0", "1", "2"]


def _ids_labels(ds):
    return [int(x["label"]) for x in ds]


def test_optional_modules_not_imported_by_import_tfr_torch():
    """tfds.md: tfr_torch.tfds, .ray, .images, .tools are imported on first use, never by `import tfr_torch`;
    huggingface.md / ray.md: the rest of tfr_torch never imports `datasets` or Ray (nor TensorFlow)."""
    code = ("import sys, tfr_torch; print([m for m in ('tfr_torch.tfds', 'tfr_torch.ray', 'tfr_torch.images', "
            "'tfr_torch.tools', 'tfr_torch.hf', 'datasets', 'ray', 'tensorflow', 'tensorflow_datasets') "
            "if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_decode_threads_default(monkeypatch):
    """tfds.md, "Robot episodes": the decode thread pool's size is TFR_TORCH_DECODE_THREADS or the CPUs, at most 8
    (default)."""
    from tfr_torch.tfds.image_steps import decode_threads

    monkeypatch.delenv("TFR_TORCH_DECODE_THREADS", raising=False)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    assert decode_threads(None) == min(cpus, 8)
    monkeypatch.setenv("TFR_TORCH_DECODE_THREADS", "3")
    assert decode_threads(None) == 3


def test_tfds_classes_from_metadata():
    """tfds.md: the golden folder's class names come from its metadata (['cat', 'dog', 'bird']), and
    test+train[:3] holds 10 examples."""
    train = tfr_torch.TFRecordDataset(GOLDEN, split="train[:50%]")
    assert train.tfds.classes == ["cat", "dog", "bird"] and train.classes == ["cat", "dog", "bird"]
    info = tfr_torch.tfds.read_info(os.path.dirname(GOLDEN), "tfr_golden", version="1.0.0")
    assert len(tfr_torch.TFRecordDataset(info, split="test+train[:3]")) == 10


# ------------------------------------------------------------------------------------------ rlds.md


def test_frame_dataset_ranks():
    """rlds.md, "Mixtures": a FrameDataset built for several ranks without samples_per_epoch warns; with it each
    rank yields samples_per_epoch // world_size frames; a state of another batch_size, shuffle or
    samples_per_epoch is refused by name."""
    from tfr_torch.rlds import FrameDataset, Source, Window

    with pytest.warns(UserWarning, match=r"world_size=2 and samples_per_epoch=None"):
        FrameDataset({"g": Source(RLDS)}, Window(history=2, future=4), seed=0, rank=0, world_size=2)
    for rank in range(2):
        ds = FrameDataset({"g": Source(RLDS)}, Window(history=2, future=4), samples_per_epoch=21, shuffle_buffer=16,
                          seed=0, rank=rank, world_size=2)
        assert sum(1 for _ in ds) == len(ds) == 10
    ds = FrameDataset({"g": Source(RLDS)}, Window(history=2, future=4), batch_size=4, shuffle_buffer=16, seed=0)
    next(iter(ds))
    state = ds.state_dict()
    for kwargs, name in (({"batch_size": 2}, "batch_size"), ({"shuffle": False}, "shuffle"),
                         ({"samples_per_epoch": 10}, "samples_per_epoch")):
        args = {"batch_size": 4, "shuffle_buffer": 16, "seed": 0, **kwargs}
        other = FrameDataset({"g": Source(RLDS)}, Window(history=2, future=4), **args)
        with pytest.raises(ValueError, match=f"cannot resume: the saved state has {name}="):
            other.load_state_dict(state)


# ------------------------------------------------------------------------------------------ huggingface.md


def test_hf_features_and_datasets_behaviours(tmp_path):
    """huggingface.md, "Features" and the two `datasets` behaviours: FixedLenFeature([]) -> Value, 1-D ->
    List(length=n), 2-D to 5-D -> Array2D-5D (first dimension may vary), VarLen and a 0 dimension -> List, strings
    binary; torch format drops a binary value's trailing zero bytes; a streamed row holds numpy arrays where a
    Dataset's holds lists; for TFRecord files a split slice is refused; files of no records give no rows;
    SparseFeature and bfloat16 raise TypeError naming the key."""
    datasets = pytest.importorskip("datasets")
    hf = pytest.importorskip("tfr_torch.hf")
    spec = {"s": tfr_torch.FixedLenFeature([], torch.int64), "v": tfr_torch.FixedLenFeature([3], torch.float32),
            "m": tfr_torch.FixedLenFeature([2, 2], torch.int64), "z": tfr_torch.FixedLenFeature([0], torch.int64),
            "vl": tfr_torch.VarLenFeature(torch.int64), "b": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "seq": tfr_torch.FixedLenSequenceFeature([2, 2], torch.float32, allow_missing=True)}
    path = str(tmp_path / "h.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(3):
            writer.write_example({"s": i, "v": [1.0, 2.0, 3.0], "m": [[1, 2], [3, 4]], "z": np.zeros(0, np.int64),
                                  "vl": np.arange(i, dtype=np.int64), "b": b"ab\x00\x00",
                                  "seq": np.ones((i, 2, 2), np.float32)})
    cache = str(tmp_path / "cache")
    ds = hf.load(path, spec, cache_dir=cache)
    f = ds.features
    assert f["s"] == datasets.Value("int64") and f["b"] == datasets.Value("binary")
    assert isinstance(f["v"], datasets.List) and f["v"].length == 3
    assert f["m"] == datasets.Array2D(shape=(2, 2), dtype="int64")
    assert f["seq"] == datasets.Array3D(shape=(None, 2, 2), dtype="float32")
    assert isinstance(f["z"], datasets.List) and f["z"].length == -1
    assert isinstance(f["vl"], datasets.List) and f["vl"].length == -1
    assert ds[0]["b"] == b"ab\x00\x00"
    assert bytes(ds.with_format("torch")[0]["b"]) == b"ab"  # trailing zero bytes dropped by `datasets`
    streamed = next(iter(hf.load(path, spec, streaming=True)))
    assert isinstance(streamed["m"], np.ndarray) and isinstance(ds[0]["m"], list)
    with pytest.raises(ValueError, match=r"slice the Dataset"):
        hf.load(path, spec, split="train[:2]", cache_dir=cache)
    empty = _write(tmp_path / "empty.tfrecord", [])
    assert len(hf.load(empty, spec, cache_dir=cache)) == 0
    with pytest.raises(TypeError, match=r"'sp'"):
        hf.load(path, {"sp": tfr_torch.SparseFeature(["i"], "v", torch.float32, [5])}, cache_dir=cache)
    with pytest.raises(TypeError, match=r"'bf'"):
        hf.load(path, {"bf": tfr_torch.FixedLenFeature([], torch.bfloat16)}, cache_dir=cache)


def test_datasets_reads_no_tfrecord():
    """huggingface.md: Hugging Face `datasets` reads Parquet, WebDataset, Arrow... but no TFRecord."""
    pytest.importorskip("datasets")
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    assert {"parquet", "webdataset", "arrow"} <= set(_PACKAGED_DATASETS_MODULES)
    assert not any("tfrecord" in name.lower() for name in _PACKAGED_DATASETS_MODULES)


# ------------------------------------------------------------------------------------------ torchdata-nodes.md


def test_nodes_epochs_and_state(tmp_path):
    """torchdata-nodes.md: each iter(loader) is one epoch, advancing the epoch that seeds the shuffle;
    Loader.state_dict() holds the epoch and how many items the node yielded; TFRecordNode(dataset) starts at the
    dataset's own epoch (from set_epoch); epoch= sets it."""
    nodes = pytest.importorskip("torchdata.nodes")
    path = _write(tmp_path / "a.tfrecord", range(10), index=True)

    def node(**kw):
        return tfr_torch.nodes.TFRecordNode(path, SPEC, index="auto", shuffle=True, seed=0, **kw)

    def epoch(e):
        ds = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=0)
        ds.set_epoch(e)
        return _ids(ds)

    loader = nodes.Loader(node())
    assert _ids(loader) == epoch(0) and _ids(loader) == epoch(1) and epoch(0) != epoch(1)
    ds = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=0)
    ds.set_epoch(1)
    assert _ids(nodes.Loader(tfr_torch.nodes.TFRecordNode(ds))) == epoch(1)
    assert _ids(nodes.Loader(node(epoch=1))) == epoch(1)
    loader = nodes.Loader(node())
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    assert state["num_yielded"] == 3 and state["root"]["epoch"] == 0 and state["root"]["dataset"]["yielded"] == 3


def test_torchdata_loader_stale_state_after_resume_at_epoch_end(tmp_path):
    """Fixed (docs): torchdata-nodes.md, the torchdata 0.11 defect: a Loader resumed from a state saved at an
    epoch's very end keeps reporting that state in every later epoch (the docs said: until the next epoch ends),
    for torchdata's own nodes as for TFRecordNode; a fresh pipeline with TFRecordNode(epoch=) avoids it."""
    nodes = pytest.importorskip("torchdata.nodes")

    def plain():
        return nodes.Loader(nodes.SamplerWrapper(torch.utils.data.SequentialSampler(range(5))))

    loader = plain()
    it = iter(loader)
    for _ in range(5):
        next(it)
    end = loader.state_dict()
    resumed = plain()
    resumed.load_state_dict(end)
    for _ in range(3):  # the epoch after the saved one, and two more
        it = iter(resumed)
        next(it)
        next(it)
        assert resumed.state_dict() == end  # stale: two items into this epoch, it still says the old epoch's end
        list(it)

    path = _write(tmp_path / "a.tfrecord", range(10), index=True)

    def pipeline(**kw):
        return nodes.Loader(tfr_torch.nodes.TFRecordNode(path, SPEC, index="auto", shuffle=True, seed=0, **kw))

    loader = pipeline()
    it = iter(loader)
    for _ in range(10):
        next(it)
    end = loader.state_dict()
    resumed = pipeline()
    resumed.load_state_dict(end)
    list(resumed)  # the next epoch, whole
    it = iter(resumed)
    for _ in range(4):
        next(it)
    assert resumed.state_dict() == end  # still stale one epoch later
    fresh = pipeline(epoch=1)
    it = iter(fresh)
    for _ in range(4):
        next(it)
    assert fresh.state_dict()["root"]["dataset"]["yielded"] == 4 and fresh.state_dict()["root"]["epoch"] == 1


# ------------------------------------------------------------------------------------------ ray.md


def test_ray_block_size_defaults():
    """ray.md, "Columns": one Arrow block per batch of records (batch_rows, default up to 4096 records or 64 MB)
    (the constants of tfr_torch/ray/datasource.py; no Ray session is started)."""
    source = open(os.path.join(REPO, "tfr_torch", "ray", "datasource.py")).read()
    assert "_BATCH_ROWS = 4096" in source and "_BATCH_BYTES = 64 << 20" in source


# ------------------------------------------------------------------------------------------ images.md


def test_image_errors_and_modes():
    """images.md, "Decoding images": a serialize_tensor payload raises DecodeError whose message says to use
    parse_tensor; an empty image raises DecodeError naming it (name=); "L", "LA", "RGBA" are accepted."""
    from io import BytesIO

    from PIL import Image

    raw = tfr_torch.serialize_tensor(torch.zeros(3, 2, 2, dtype=torch.uint8))
    with pytest.raises(tfr_torch.DecodeError, match=r"rec:0.*parse_tensor"):
        tfr_torch.decode_image(raw, name="rec:0")
    with pytest.raises(tfr_torch.DecodeError, match=r"x\.png:5.*empty"):
        tfr_torch.decode_image(b"", name="x.png:5")
    buf = BytesIO()
    Image.fromarray(np.zeros((8, 9, 3), np.uint8)).save(buf, format="PNG")
    shapes = {m: tuple(tfr_torch.decode_image(buf.getvalue(), mode=m).shape) for m in ("L", "LA", "RGBA")}
    assert shapes == {"L": (1, 8, 9), "LA": (2, 8, 9), "RGBA": (4, 8, 9)}


def test_converter_sidecar_empty_class_and_float_tensors(tmp_path, monkeypatch):
    """images.md, "Converting": a class folder with no image is an error naming it (allow_empty=True keeps it);
    the sidecar holds the spec, every shard's record count, the image encoding, the class names and the tfr_torch
    version; convert_dataset stores float tensors in [0, 1] as pic.mul(255).byte()."""
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    for name in ("cat", "dog", "empty"):
        os.makedirs(f"imgs/{name}", exist_ok=True)
    for name in ("cat", "dog"):
        for i in range(2):
            Image.fromarray(rng.integers(0, 255, (8, 9, 3), np.uint8)).save(f"imgs/{name}/{i}.png")
    with pytest.raises(FileNotFoundError, match=r"imgs/empty"):
        tfr_torch.convert_image_folder("imgs/", "out/", "p", "train", workers=1)
    _quiet(lambda: tfr_torch.convert_image_folder("imgs/", "out/", "p", "train", workers=1, allow_empty=True))
    side = json.load(open("out/p-train.tfr_torch.json"))
    assert "image/encoded" in side["features"] and side["shards"][0]["records"] == 4
    assert side["image"]["encoding"] == "keep" and side["image"]["classes"] == ["cat", "dog", "empty"]
    assert side["tfr_torch_version"] == tfr_torch.__version__
    x = torch.rand(3, 4, 5)
    _quiet(lambda: tfr_torch.convert_dataset([(x, 1)], "out2/", "f", "train", image_format="png"))
    record = next(iter(tfr_torch.TFRecordDataset("out2/f-train.tfrecord-*", "auto")))
    assert torch.equal(tfr_torch.decode_image(record["image/encoded"]), x.mul(255).byte())


# ------------------------------------------------------------------------------------------ benchmarks


@pytest.fixture()
def bench_modules(monkeypatch):
    monkeypatch.syspath_prepend(REPO)
    monkeypatch.syspath_prepend(os.path.join(REPO, "benchmarks"))
    import benchmarks.compare as compare
    import benchmarks.datasets as bdata
    return bdata, compare


def test_benchmark_data_sets(bench_modules):
    """Fixed (docs): benchmarks/README.md, "How it measures": the generated data sets are six (the README said
    "all five"); "Workloads": 20,000 records of 16 KiB, 200,000 small Examples of ~165 B, 200,000 tabular of
    ~280 B, 50,000 SequenceExamples of ~1.8 KB."""
    bdata, _ = bench_modules
    assert len(bdata.DATASETS) == 6
    readme = open(os.path.join(REPO, "benchmarks", "README.md")).read()
    assert "all six" in readme and "all five" not in readme
    counts = {name: d.default_records for name, d in bdata.DATASETS.items()}
    assert counts == {"16k": 20_000, "16k-gzip": 20_000, "small": 200_000, "tabular": 200_000,
                      "example-16k": 20_000, "sequence": 50_000}
    assert all(len(r) == 16 * 1024 for r in bdata.gen_16k(5))
    small = [len(r) for r in bdata.gen_small(3000)]
    tabular = [len(r) for r in bdata.gen_tabular(3000)]
    sequence = [len(r) for r in bdata.gen_sequence(3000)]
    assert 155 <= np.mean(small) <= 170
    assert 265 <= np.mean(tabular) <= 295
    assert 1700 <= np.mean(sequence) <= 1950


def test_benchmark_options_and_compare_margin(bench_modules):
    """benchmarks/README.md / docs/benchmarks.md: run.py's defaults (--repeat 3, --warmup 1, --data-dir
    benchmarks/data/); compare.py's verdicts (faster, slower, mixed or same at a 10% margin, --rounds 3);
    TensorFlow single-threaded (private_threadpool_size=1, max_intra_op_parallelism=1, autotune off, no injected
    prefetch)."""
    _, compare = bench_modules
    import benchmarks.run as run

    args = run.parse_args([])
    assert (args.repeat, args.warmup) == (3, 1)
    assert args.data_dir == os.path.join(REPO, "benchmarks", "data")
    assert compare.MARGIN == 0.10
    assert compare.verdict([1.11, 1.2]) == "faster" and compare.verdict([0.89, 0.8]) == "slower"
    assert compare.verdict([1.11, 0.89]) == "mixed" and compare.verdict([1.05, 1.2]) == "same"
    assert re.search(r'"--rounds", type=int, default=3\b', open(os.path.join(REPO, "benchmarks", "compare.py")).read())
    tfdata = open(os.path.join(REPO, "benchmarks", "variants", "tfdata.py")).read()
    for line in ("private_threadpool_size = 1", "max_intra_op_parallelism = 1", "autotune.enabled = False",
                 "inject_prefetch = False"):
        assert line in tfdata


# ------------------------------------------------------------------------------------------ more datasets.md / tfds.md


def test_mixed_dataset_equal_items_per_rank(tmp_path):
    """datasets.md, "MixedDataset": where the datasets give the ranks equal shares, every rank yields as many items
    per epoch whatever `stop` is."""
    a = _write(tmp_path / "a.tfrecord", range(10), index=True)
    b = _write(tmp_path / "b.tfrecord", range(100, 105), index=True)

    def mixed(rank, stop):
        return tfr_torch.MixedDataset({"a": tfr_torch.TFRecordDataset(a, SPEC, index="auto", rank=rank, world_size=2),
                                       "b": tfr_torch.TFRecordDataset(b, SPEC, index="auto", rank=rank, world_size=2)},
                                      stop=stop)

    for stop in ("all", "first", "cycle"):
        counts = [len(list(mixed(rank, stop))) for rank in range(2)]
        assert counts[0] == counts[1], stop
    assert [len(list(mixed(rank, "all"))) for rank in range(2)] == [5 + 2, 5 + 2]


def test_cached_dataset_replays_without_reading(tmp_path):
    """datasets.md, "CachedDataset": an epoch abandoned midway keeps nothing; the first full epoch's items are
    replayed by later epochs without reading the source; shuffle=True replays in a new order each epoch."""
    path = _write(tmp_path / "a.tfrecord", range(10), index=True)
    cached = tfr_torch.CachedDataset(tfr_torch.TFRecordDataset(path, SPEC, index="auto"), shuffle=True, seed=0)
    it = iter(cached)
    next(it)
    del it  # abandoned: nothing kept, so the next epoch reads the source
    first = _ids(cached)
    assert first == list(range(10))
    os.remove(path)
    os.remove(path + ".idx")
    orders = []
    for epoch in (1, 2):
        cached.set_epoch(epoch)
        orders.append(_ids(cached))
    assert all(sorted(o) == list(range(10)) for o in orders) and orders[0] != orders[1]


def test_tfds_missing_shard_and_other_format(tmp_path):
    """tfds.md, "Counts": a missing shard raises TFDSMetadataError naming the file, before anything is read; a
    dataset prepared in another file format (array_record) is refused by name."""
    from tfr_torch.tfds import TFDSMetadataError

    folder = tmp_path / "tg"
    shutil.copytree(os.path.join(GOLDEN, "1.0.0"), folder)
    os.remove(folder / "tfr_golden-test.tfrecord-00001-of-00003")
    with pytest.raises(TFDSMetadataError, match=r"tfr_golden-test\.tfrecord-00001-of-00003: shard missing"):
        tfr_torch.TFRecordDataset(str(folder), split="test")
    assert len(tfr_torch.TFRecordDataset(str(folder), split="train")) == 23
    info = json.loads((folder / "dataset_info.json").read_text())
    info["fileFormat"] = "array_record"
    (folder / "dataset_info.json").write_text(json.dumps(info))
    with pytest.raises(TFDSMetadataError, match=r"'array_record'"):
        tfr_torch.TFRecordDataset(str(folder), split="train")
