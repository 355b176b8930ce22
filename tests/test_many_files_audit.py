"""Many files, few descriptors: every reader, writer and tool of tfr_torch over more files than the process may
open. Each case runs in a child Python whose RLIMIT_NOFILE is 64 (`ulimit -n 64`, as in some containers; TFDS's
ImageNet has 1,024 train shards, Open X-Embodiment datasets thousands) over 80-200 tiny files, and asserts every
record read (or written) exactly once and, where it ends, no data file left open. (The global shuffle itself, fixed
with data/open_files.py, is tests/test_open_files.py's and tests/test_resources_audit.py's.)

Covered and found right: TFRecordDataset in file order, buffer-shuffled (interleave 4 and 16), globally shuffled,
with and without indexes, DataLoader workers 0 and 2, two epochs; on_error="skip" over many files of which some are
cut short; GZIP files globally shuffled (seek points; spilled or in groups) and buffer-shuffled;
IndexedTFRecordDataset over plain and GZIP files; index="auto" checking 120-210 indexes at construction; TFDS
folders of 100 shards (file order, buffer and global shuffles, IndexedTFRecordDataset, `tfr-torch inspect`) and
writing one of 150 shards; RLDS FrameDataset over 100 shards (shuffled or not, with or without indexes, workers)
and a mixture of 4 datasets; MixedDataset of 3 global shuffles of 40 files (the readers share the
budget); CachedDataset in memory and in a folder (workers, 3 epochs);
ShardedWriter of 150 shards (plain and gzip, with seek points); reshard into 100-180 shards (also --tfds);
convert_image_folder of 100 images into 100 shards (1 and 2 workers); build_index and infer_features over 210
files; `tfr-torch count|verify|index|head|schema|inspect` over 210 files; tfr_torch.hf load (files and a TFDS
folder, streaming or not) and write of 150 shards; tfr_torch.nodes' TFRecordNode; the Ray datasource's read tasks
(run in this process: a Ray session's own descriptor needs are Ray's). Threads stay bounded (pools) and files are
read one at a time by the writers and tools.

Found:
- Fixed (rlds/dataset.py): FrameDataset kept a TFRecordDataset per source for its life (`self.episodes`), and
  every TFRecordDataset holds 4 shared-memory descriptors: making a mixture of 20 datasets under `ulimit -n 64`
  raised `RuntimeError: unable to open shared memory object </torch_...> ... Too many open files (24)`, naming
  nothing. Each source is now checked and let go (1 descriptor for the whole FrameDataset).
- Fixed (data/shared_cells.py, used by data/dataset.py, counting.py, mixed.py, cache.py, rlds/dataset.py): those
  4 descriptors per TFRecordDataset (its epoch, resume flag, record counts and warning flags, each a tensor of
  torch's shared memory) made reading a mixture of many datasets (FrameDataset of 20 sources; MixedDataset of 30
  TFRecordDatasets, which could not even be made) run out of them. Such values now share blocks of 4,096 (a
  descriptor per block). Left as it is: the files that datasets read side by side (each its `interleave` files)
  count against no process-wide budget (30 datasets x 1 file fit here).
- Fixed (data/epoch_records.py, open_files.interleaved_within_limit): `interleave` above the descriptor limit
  opens that many files at once; the EMFILE named a file but not the cause. It now names `interleave` and the limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import tfr_torch
from test_rlds import _CLASS, _dict, _tensor  # features.json pieces of an RLDS folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT = 64  # the children's RLIMIT_NOFILE (soft): every case reads or writes more files than this
PLAIN, GZ, SHARDS, EPISODES, SOURCES, PER_SOURCE, IMAGES = 120, 90, 100, 100, 20, 5, 100

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd") or sys.platform != "linux",
                                reason="sets RLIMIT_NOFILE and counts descriptors in /proc")

def _rlds_features():
    step = _dict({"observation": _dict({"state": _tensor((2,), "float32")}), "action": _tensor((3,), "float32")})
    steps = {"pythonClassName": _CLASS + "dataset_feature.Dataset", "sequence": {"feature": step, "length": "-1"}}
    return _dict({"steps": steps, "episode_metadata": _dict({"episode_id": _tensor((), "int64")})})


def _episode_length(e: int) -> int:
    return 2 + e % 3


def _write_episodes(version: Path, name: str, ids) -> None:
    """One episode a shard; state = (episode id, step)."""
    with tfr_torch.ShardedWriter(str(version), name, "train", records_per_shard=1,
                                 tfds={"features": _rlds_features()}) as writer:
        for e in ids:
            t = _episode_length(e)
            s = np.arange(t, dtype=np.float32)
            writer.write_example({"steps/observation/state": np.stack([np.full(t, e, np.float32), s], 1).reshape(-1),
                                  "steps/action": np.stack([np.full(t, e, np.float32), s, -s], 1).reshape(-1),
                                  "episode_metadata/episode_id": e})


def _frames(ids) -> list[int]:
    return sorted(e * 100 + t for e in ids for t in range(_episode_length(e)))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """plain/: PLAIN files of 3 Examples {"id"} with indexes; gz/: GZ GZIP files of 4 with indexes and seek points;
    tfds/many/1.0.0: a TFDS folder of SHARDS one-record shards; rlds/big/1.0.0: EPISODES one-episode shards;
    rlds/s<j>/1.0.0: SOURCES datasets of PER_SOURCE one-episode shards; images/: IMAGES tiny PNGs in 2 classes."""
    root = tmp_path_factory.mktemp("many")
    (root / "plain").mkdir()
    for k in range(PLAIN):
        path = str(root / "plain" / f"p{k:03d}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(3):
                writer.write_example({"id": k * 10 + i})
        tfr_torch.build_index(path)
    (root / "gz").mkdir()
    for k in range(GZ):
        path = str(root / "gz" / f"g{k:03d}.tfrecord.gz")
        with tfr_torch.TFRecordWriter(path, compression="GZIP") as writer:
            for i in range(4):
                writer.write_example({"id": 10_000 + k * 10 + i, "pad": bytes(300)})
        tfr_torch.build_index(path)
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    with tfr_torch.ShardedWriter(str(root / "tfds" / "many" / "1.0.0"), "many", "train", records_per_shard=1,
                                 features=spec, tfds={}) as writer:
        for i in range(SHARDS):
            writer.write_example({"id": i})
    _write_episodes(root / "rlds" / "big" / "1.0.0", "big", range(EPISODES))
    for j in range(SOURCES):
        _write_episodes(root / "rlds" / f"s{j}" / "1.0.0", f"s{j}", range(j * 100, j * 100 + PER_SOURCE))
    for i in range(IMAGES):
        folder = root / "images" / ("cat" if i % 2 else "dog")
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((4, 5, 3), i, np.uint8)).save(folder / f"{i:03d}.png")
    return root


_PRELUDE = """
import glob, json, os, resource, sys, warnings
warnings.simplefilter("ignore")
resource.setrlimit(resource.RLIMIT_NOFILE, ({limit}, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import numpy as np, torch, tfr_torch
from torch.utils.data import DataLoader
D, OUT = sys.argv[1], sys.argv[2]
SPEC = {{"id": tfr_torch.FixedLenFeature([], torch.int64)}}
PLAIN = sorted(glob.glob(D + "/plain/*.tfrecord"))
GZ = sorted(glob.glob(D + "/gz/*.tfrecord.gz"))

def ids(items):
    got = []
    for item in items:
        value = item["id"] if isinstance(item, dict) else tfr_torch.decode_example(item)["id"][0]
        got.extend(torch.as_tensor(value).reshape(-1).tolist())
    return got

def open_data():
    count = 0  # this process's descriptors open on files of the data or output folders
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink("/proc/self/fd/" + fd).startswith((D, OUT))
        except OSError:  # (the listing's own descriptor, closed since)
            pass
    return count

def done(value):
    print("RESULT " + json.dumps(value))
"""


def _child(code: str, data: Path, out: Path, *, setup: str = "", timeout: float = 120, limit: int = LIMIT):
    """Run `code` (after _PRELUDE and `setup`) in a Python whose descriptor limit is `limit`; what it gave done()."""
    out.mkdir(exist_ok=True)
    script = _PRELUDE.format(limit=limit) + setup + textwrap.dedent(code)
    run = subprocess.run([sys.executable, "-c", script, str(data), str(out)], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    results = [line[len("RESULT "):] for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and results, (run.stdout[-2000:], run.stderr[-3000:])
    return json.loads(results[-1])


def _plain_ids() -> list[int]:
    return sorted(k * 10 + i for k in range(PLAIN) for i in range(3))


def _gz_ids() -> list[int]:
    return sorted(10_000 + k * 10 + i for k in range(GZ) for i in range(4))


# ----- TFRecordDataset ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", [
    "shuffle=False",
    "shuffle=True",                       # buffer shuffle, 4 files interleaved
    "shuffle=True, interleave=16",
    "shuffle=False, index='auto'",
    "shuffle=True, index='auto'",         # global shuffle
], ids=["order", "buffer", "interleave16", "order-index", "global"])
@pytest.mark.parametrize("workers", [0, 2])
def test_tfrecorddataset_reads_every_record_once(data, tmp_path, options, workers):
    """120 files, two epochs. (Each case: a child Python with its descriptor limit; it imports torch, a few seconds.)"""
    got = _child(f"""
        ds = tfr_torch.TFRecordDataset(PLAIN, SPEC, {options}, seed=3)
        loader = DataLoader(ds, batch_size=None, num_workers={workers})
        first = ids(loader)
        ds.set_epoch(1)
        done([first, ids(loader), open_data()])
    """, data, tmp_path)
    assert sorted(got[0]) == sorted(got[1]) == _plain_ids()
    assert got[2] == 0  # no file left open by the epochs


@pytest.mark.parametrize("workers", [0, 2])
def test_an_interleave_wider_than_the_descriptor_limit(data, tmp_path, workers):
    """Fixed: a reader's `interleave` files are all open at once whatever the descriptor limit, and interleave=100
    under ulimit -n 64 raised "[Errno 24] Too many open files" naming a file, not the cause. The error now names
    `interleave` and the limit (in DataLoader workers too); an interleave within the limit reads every record once."""
    got = _child(f"""
        out = []
        for interleave in (100, 30):
            ds = tfr_torch.TFRecordDataset(PLAIN, SPEC, shuffle=True, interleave=interleave)
            try:
                out.append(["ok", sorted(ids(DataLoader(ds, batch_size=None, num_workers={workers})))])
            except Exception as err:
                out.append(["error", type(err).__name__, str(err)])
        done(out)
    """, data, tmp_path)
    wide, within = got
    assert wide[:2] == ["error", "OSError"], got
    assert "Too many open files" in wide[2] and "interleave=100" in wide[2] and "64" in wide[2], wide
    assert ".tfrecord" in wide[2]  # and the file it could not open
    assert within == ["ok", _plain_ids()]


@pytest.mark.parametrize("options", ["", ", index='auto'", ", index='auto', shuffle=True"])
def test_on_error_skip_over_many_files_with_bad_ones(data, tmp_path, options):
    """Every tenth file is cut short in its last record: that record is skipped, the rest read once."""
    got = _child(f"""
        import shutil
        paths = []
        for k, path in enumerate(PLAIN):
            copy = os.path.join(OUT, os.path.basename(path))
            shutil.copy(path, copy)
            shutil.copy(path + ".idx", copy + ".idx")
            if k % 10 == 0:
                with open(copy, "r+b") as f:
                    f.seek(-3, 2)
                    f.write(b"xyz")
            paths.append(copy)
        ds = tfr_torch.TFRecordDataset(paths, SPEC, on_error="skip"{options})
        done([sorted(ids(ds)), open_data()])
    """, data, tmp_path)
    assert got[0] == [i for i in _plain_ids() if not (i // 10 % 10 == 0 and i % 10 == 2)]
    assert got[1] == 0


@pytest.mark.parametrize("options", ["shuffle=True, index='auto'", "shuffle=True, index='auto', spill_dir=OUT",
                                     "shuffle=True, index='auto', spill_dir=False", "shuffle=True"])
def test_gzip_files_many(data, tmp_path, options):
    """90 GZIP files: globally shuffled through seek points (spilled or read in groups), buffer-shuffled."""
    got = _child(f"""
        ds = tfr_torch.TFRecordDataset(GZ, SPEC, {options}, seed=2)
        done([sorted(ids(ds)), open_data()])
    """, data, tmp_path)
    assert got[0] == _gz_ids() and got[1] == 0


@pytest.mark.parametrize("workers", [0, 2])
def test_indexed_dataset_over_many_files(data, tmp_path, workers):
    """210 plain and GZIP files by record number, in a random order, through a DataLoader."""
    got = _child(f"""
        ds = tfr_torch.IndexedTFRecordDataset(PLAIN + GZ, SPEC)
        order = np.random.default_rng(0).permutation(len(ds)).tolist()
        loader = DataLoader(ds, batch_size=7, sampler=order, num_workers={workers})
        done([ids(loader), [int(x) for x in np.asarray(order)], open_data()])
    """, data, tmp_path)
    everything = _plain_ids() + _gz_ids()
    assert got[0] == [everything[i] for i in got[1]]


# ----- RLDS ---------------------------------------------------------------------------------------------------------

_RLDS = """
from tfr_torch.rlds import FrameDataset, Source

def standardize(episode):
    steps = dict(episode["steps"])
    e = int(episode["episode_metadata"]["episode_id"])
    steps["frame"] = torch.arange(len(steps["action"])) + e * 100
    return steps

def frames(items):
    return sorted(v for item in items for v in item["frame"].reshape(-1).tolist())
"""


@pytest.mark.parametrize("shuffle,index,workers", [(False, None, 0), (True, None, 2), (True, "auto", 0),
                                                   (True, "auto", 2), (False, "auto", 2)])
def test_rlds_frames_of_one_dataset_of_many_shards(data, tmp_path, shuffle, index, workers):
    """100 one-episode shards, two epochs: every frame once."""
    got = _child(f"""
        ds = FrameDataset(Source(D + "/rlds/big/1.0.0", standardize=standardize, index={index!r}), shuffle={shuffle},
                          batch_size=8, seed=1)
        loader = DataLoader(ds, batch_size=None, num_workers={workers})
        first = frames(loader)
        ds.set_epoch(1)
        done([first, frames(loader), open_data()])
    """, data, tmp_path, setup=_RLDS)
    assert got[0] == got[1] == _frames(range(EPISODES))
    assert got[2] == 0


def test_a_mixture_of_many_rlds_datasets_keeps_no_descriptor_per_dataset(data, tmp_path):
    """Fixed (rlds/dataset.py): FrameDataset kept a TFRecordDataset per source for its life, and each holds 4
    shared-memory descriptors (torch's file_descriptor strategy): a mixture of 20 datasets under `ulimit -n 64`
    raised `RuntimeError: unable to open shared memory object </torch_...> in read-write mode: Too many open files
    (24)` while it was being made (naming no dataset); under 1,024 the limit was some 200 datasets, in the main
    process and again in every forked DataLoader worker. Each source is now checked and let go."""
    got = _child(f"""
        from tfr_torch.rlds import FrameDataset, Source
        before = len(os.listdir("/proc/self/fd"))
        ds = FrameDataset({{f"s{{j}}": Source(f"{{D}}/rlds/s{{j}}/1.0.0") for j in range({SOURCES})}}, seed=1)
        done([len(os.listdir("/proc/self/fd")) - before, ds.names])
    """, data, tmp_path)
    assert got[0] <= 2, got  # (its own epoch: one shared tensor)
    assert got[1] == [f"s{j}" for j in range(SOURCES)]


@pytest.mark.parametrize("index,workers", [(None, 2), ("auto", 0)])
def test_rlds_mixture_of_a_few_datasets(data, tmp_path, index, workers):
    """4 datasets of 5 shards."""
    got = _child(f"""
        sources = {{f"s{{j}}": Source(f"{{D}}/rlds/s{{j}}/1.0.0", standardize=standardize, index={index!r})
                   for j in range(4)}}
        ds = FrameDataset(sources, batch_size=8, seed=1)
        done([frames(DataLoader(ds, batch_size=None, num_workers={workers})), open_data()])
    """, data, tmp_path, setup=_RLDS)
    assert got == [_frames(e for j in range(4) for e in range(j * 100, j * 100 + PER_SOURCE)), 0]


@pytest.mark.parametrize("index,workers", [(None, 0), ("auto", 2)])
def test_rlds_mixture_of_many_datasets(data, tmp_path, index, workers):
    """Fixed: 20 datasets of 5 one-episode shards, each reader reading from every dataset at once (a TFRecordDataset
    each, and its current file): every TFRecordDataset held 4 shared-memory descriptors (its epoch, resume flag,
    counts and flags), and `RuntimeError: unable to open shared memory object ... Too many open files` named
    nothing; its values now share a block with other datasets' (data/shared_cells.py)."""
    got = _child(f"""
        sources = {{f"s{{j}}": Source(f"{{D}}/rlds/s{{j}}/1.0.0", standardize=standardize, index={index!r})
                   for j in range({SOURCES})}}
        ds = FrameDataset(sources, batch_size=8, seed=1)
        done([frames(DataLoader(ds, batch_size=None, num_workers={workers})), open_data()])
    """, data, tmp_path, setup=_RLDS)
    assert got == [_frames(e for j in range(SOURCES) for e in range(j * 100, j * 100 + PER_SOURCE)), 0]


# ----- TFDS folders -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", ["", "shuffle=True", "shuffle=True, index='auto'"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_tfds_folder_of_many_shards_reads_every_record_once(data, tmp_path, options, workers):
    """A TFDS folder of 100 shards (its metadata's counts, indexes with index='auto')."""
    got = _child(f"""
        ds = tfr_torch.TFRecordDataset(D + "/tfds/many/1.0.0", split="train", batch_size=7, {options})
        done([sorted(ids(DataLoader(ds, batch_size=None, num_workers={workers}))), len(ds), open_data()])
    """, data, tmp_path)
    assert got == [list(range(SHARDS)), -(-SHARDS // 7), 0]  # (len: batches)


def test_an_indexed_dataset_of_a_tfds_folder_of_many_shards(data, tmp_path):
    """A slice of a TFDS split of 100 shards, by record number."""
    got = _child("""
        ds = tfr_torch.IndexedTFRecordDataset(D + "/tfds/many/1.0.0", split="train[10%:]")
        done([[int(ds[i]["id"]) for i in reversed(range(len(ds)))]])
    """, data, tmp_path)
    assert got == [list(reversed(range(SHARDS // 10, SHARDS)))]


def test_writing_a_tfds_folder_of_many_shards(data, tmp_path):
    """ShardedWriter(tfds=...) of 150 one-record shards, read back."""
    got = _child(f"""
        folder = OUT + "/many/1.0.0"
        with tfr_torch.ShardedWriter(folder, "many", "train", records_per_shard=1, features=SPEC,
                                     tfds={{}}) as writer:
            for i in range({SHARDS + 50}):
                writer.write_example({{"id": i}})
        done([len(writer.paths), ids(tfr_torch.TFRecordDataset(folder, split="train")), open_data()])
    """, data, tmp_path)
    assert got == [SHARDS + 50, list(range(SHARDS + 50)), 0]


# ----- mixtures and caches ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options", ["shuffle=False", "shuffle=True", "shuffle=True, index='auto'"])
def test_a_mixture_of_many_datasets(data, tmp_path, options):
    """Fixed: a MixedDataset of 30 datasets of 4 files each (120 files): making the 30 TFRecordDatasets (120
    shared-memory descriptors, see above) raised `RuntimeError: unable to open shared memory object`."""
    got = _child(f"""
        parts = [tfr_torch.TFRecordDataset(PLAIN[k : k + 4], SPEC, {options}) for k in range(0, len(PLAIN), 4)]
        mixed = tfr_torch.MixedDataset(parts, seed=1)
        done([sorted(ids(mixed)), open_data()])
    """, data, tmp_path)
    assert got == [_plain_ids(), 0]


def test_a_mixture_of_a_few_globally_shuffled_datasets_of_many_files(data, tmp_path):
    """3 datasets of 40 files each, each a global shuffle (the readers share the budget of half the limit)."""
    got = _child("""
        parts = [tfr_torch.TFRecordDataset(PLAIN[k : k + 40], SPEC, shuffle=True, index="auto") for k in (0, 40, 80)]
        mixed = tfr_torch.MixedDataset(parts, seed=1)
        done([sorted(ids(mixed)), open_data()])
    """, data, tmp_path)
    assert got == [_plain_ids(), 0]


@pytest.mark.parametrize("folder", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_cache_of_many_files(data, tmp_path, folder, workers):
    """CachedDataset of a global shuffle of 120 files: the first epoch reads, two more replay."""
    got = _child(f"""
        source = tfr_torch.TFRecordDataset(PLAIN, SPEC, shuffle=True, index="auto", batch_size=5)
        cache = tfr_torch.CachedDataset(source, OUT + "/cache" if {folder} else None, shuffle=True)
        loader = DataLoader(cache, batch_size=None, num_workers={workers}, persistent_workers={workers} > 0)
        epochs = []
        for epoch in range(3):
            cache.set_epoch(epoch)
            epochs.append(sorted(ids(loader)))
        done([epochs, open_data()])
    """, data, tmp_path)
    assert got == [[_plain_ids()] * 3, 0]


# ----- writers and tools --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", [None, "gzip"])
def test_a_sharded_writer_of_many_shards(data, tmp_path, compression):
    """150 shards (gzip: with seek points), read back in order."""
    got = _child(f"""
        with tfr_torch.ShardedWriter(OUT, "many", "train", compression={compression!r}, records_per_shard=2,
                                     features=SPEC) as writer:
            for i in range(300):
                writer.write_example({{"id": i}})
        done([len(writer.paths), ids(tfr_torch.TFRecordDataset(writer.paths, SPEC, index="auto")), open_data()])
    """, data, tmp_path)
    assert got == [150, list(range(300)), 0]


@pytest.mark.parametrize("options", ["num_shards=150", "shard_size=60", "num_shards=100, tfds=True"])
def test_reshard_into_many_shards(data, tmp_path, options):
    """120 files resharded into 100-180 shards (by count, by size, as a TFDS folder)."""
    got = _child(f"""
        from tfr_torch.tools.reshard import reshard
        paths = reshard(PLAIN, OUT, name="many", split="train", {options})
        read = tfr_torch.TFRecordDataset(OUT + "/many/1.0.0", split="train") if "tfds" in {options!r} else \\
            tfr_torch.TFRecordDataset(paths)
        done([len(paths), ids(read), open_data()])
    """, data, tmp_path)
    assert got[1] == _plain_ids() and got[2] == 0
    assert got[0] >= 100


@pytest.mark.parametrize("workers", [1, 2])
def test_converting_many_images_into_many_shards(data, tmp_path, workers):
    """100 images into 100 shards, with 1 and 2 worker processes."""
    got = _child(f"""
        result = tfr_torch.convert_image_folder(D + "/images", OUT, "imgs", "train", records_per_shard=1,
                                                workers={workers})
        spec = {{"image/class/label": tfr_torch.FixedLenFeature([], torch.int64),
                 "image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string)}}
        read = list(tfr_torch.TFRecordDataset(sorted(glob.glob(OUT + "/imgs-train.tfrecord-*-of-?????")), spec))
        pixels = [int(tfr_torch.decode_image(r["image/encoded"])[0, 0, 0]) for r in read]
        done([len(result.paths) if hasattr(result, "paths") else None, sorted(pixels), open_data()])
    """, data, tmp_path)
    assert got[1] == list(range(IMAGES)) and got[2] == 0


def test_build_index_and_infer_features_over_many_files(data, tmp_path):
    """210 indexes built, then a spec inferred from records of every file."""
    got = _child("""
        import shutil
        copies = []
        for path in PLAIN + GZ:
            copies.append(shutil.copy(path, OUT))
        for path in copies:
            tfr_torch.build_index(path)
        spec = tfr_torch.infer_features(copies)
        counts = [len(tfr_torch.read_index(p + ".idx")) for p in copies]
        done([sum(counts), sorted(spec), open_data()])
    """, data, tmp_path)
    assert got == [PLAIN * 3 + GZ * 4, ["id", "pad"], 0]


@pytest.mark.parametrize("command", ["count", "verify", "index", "head -n 1000", "schema", "inspect"])
def test_the_command_line_over_many_files(data, tmp_path, command):
    """Each command over a quoted pattern of 210 files (and their side files)."""
    got = _child(f"""
        import contextlib, io, shutil
        for path in PLAIN + GZ:
            shutil.copy(path, OUT)
        from tfr_torch.tools.cli import main
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main({command.split()!r} + [OUT + "/*.tfrecord*"])
        done([status, out.getvalue(), err.getvalue(), open_data()])
    """, data, tmp_path)
    status, out, err, left = got
    assert (status, err, left) == (0, "", 0), got
    if command == "count":
        assert out.splitlines()[-1].split() == [str(PLAIN * 3 + GZ * 4), "total"]
    if command.startswith("head"):
        assert len(out.splitlines()) == PLAIN * 3 + GZ * 4
    if command == "index":
        assert len(list(tmp_path.glob("*.idx"))) == PLAIN + GZ


def test_the_cli_inspect_of_a_tfds_folder_of_many_shards(data, tmp_path):
    """`tfr-torch inspect` of a TFDS folder of 100 shards."""
    got = _child("""
        import contextlib, io
        from tfr_torch.tools.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(["inspect", D + "/tfds/many/1.0.0"])
        done([status, out.getvalue(), open_data()])
    """, data, tmp_path)
    assert got[0] == 0 and str(SHARDS) in got[1] and got[2] == 0


# ----- integrations -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["files", "tfds"])
@pytest.mark.parametrize("streaming", [False, True])
def test_hf_load_of_many_files(data, tmp_path, target, streaming):
    """120 files or a TFDS folder of 100 shards as a `datasets` Dataset (one unit per file)."""
    pytest.importorskip("datasets")
    got = _child(f"""
        import tfr_torch.hf
        if {target!r} == "files":
            ds = tfr_torch.hf.load(PLAIN, SPEC, cache_dir=OUT + "/hf", streaming={streaming})
        else:
            ds = tfr_torch.hf.load(D + "/tfds/many/1.0.0", split="train", cache_dir=OUT + "/hf", streaming={streaming})
        done([sorted(int(row["id"]) for row in ds)])
    """, data, tmp_path)
    assert got == [_plain_ids() if target == "files" else list(range(SHARDS))]


def test_hf_write_of_many_shards(data, tmp_path):
    """A `datasets` Dataset written as 150 shards, loaded back."""
    pytest.importorskip("datasets")
    got = _child("""
        import datasets, tfr_torch.hf
        table = datasets.Dataset.from_dict({"id": list(range(300))})
        paths = tfr_torch.hf.write(table, OUT + "/out", "many", "train", records_per_shard=2)["train"]
        back = tfr_torch.hf.load(OUT + "/out", split="train", cache_dir=OUT + "/hf")
        done([len(paths), sorted(int(r["id"]) for r in back), open_data()])
    """, data, tmp_path)
    assert got == [150, list(range(300)), 0]


@pytest.mark.parametrize("options", ["shuffle=True", "shuffle=True, index='auto'"])
def test_a_torchdata_node_over_many_files(data, tmp_path, options):
    """TFRecordNode over 120 files, two epochs."""
    pytest.importorskip("torchdata.nodes")
    got = _child(f"""
        from torchdata.nodes import Loader
        from tfr_torch.nodes import TFRecordNode
        loader = Loader(TFRecordNode(PLAIN, SPEC, {options}))
        first = ids(loader)
        done([sorted(first), sorted(ids(loader)), open_data()])
    """, data, tmp_path)
    assert got == [_plain_ids(), _plain_ids(), 0]


@pytest.mark.parametrize("index", [None, "auto"])
def test_the_ray_datasource_read_tasks_over_many_files(data, tmp_path, index):
    """Each read task's body run in this process (no Ray session: its descriptor needs are Ray's own)."""
    pytest.importorskip("ray")
    got = _child(f"""
        from tfr_torch.ray.datasource import TFRecordDatasource
        source = TFRecordDatasource(PLAIN + GZ, SPEC, index={index!r})
        got = []
        for parallelism in (1, 4):
            seen = []
            for task in source.get_read_tasks(parallelism):
                for block in task():
                    seen.extend(block.column("id").to_pylist())
            got.append(sorted(seen))
        done([got, open_data()])
    """, data, tmp_path)
    assert got == [[_plain_ids() + _gz_ids()] * 2, 0]
