"""DataLoader workers started by "spawn" and "forkserver" (macOS's default, and what CUDA users set), with Linux's
"fork" as the control.

A spawned worker is a new interpreter that gets the dataset pickled: what must hold is that everything a dataset
shares with its workers survives that (the epoch tensor that persistent workers read, the record counts the workers
take together, the block cache of remote files, the shared-memory batch transport), that every record still arrives
exactly once, errors raised in a worker reach the main process naming their file and offset, and an abandoned
iteration leaves no worker behind and no state that hangs the next one.

Each spawned worker imports torch (2-4 s on a small machine): the tests share one DataLoader among many datasets
(a MixedDataset of every kind of TFRecordDataset) and use two workers.
"""

from __future__ import annotations

import gc
import io
import os
import pickle
import time

import fsspec
import numpy as np
import pytest
import torch
import torch.utils.data._utils
from fsspec.implementations.local import LocalFileSystem
from torch.utils.data import DataLoader, RandomSampler

import tfr_torch
from tfr_torch import (
    CachedDataset,
    CorruptRecordError,
    DecodeError,
    FixedLenFeature,
    FixedLenSequenceFeature,
    IndexedTFRecordDataset,
    MixedDataset,
    SequenceFeatures,
    TFRecordDataset,
)
from tfr_torch.format.remote import RemoteOptions
from tfr_torch.images import DecodeImages, ImageTransform

CONTEXTS = ["fork", "spawn", "forkserver"]
SPEC = {"id": FixedLenFeature([], torch.int64)}
SEQUENCE_SPEC = SequenceFeatures(context={"id": FixedLenFeature([], torch.int64)},
                                 sequence={"step": FixedLenSequenceFeature([2], torch.int64, allow_missing=True)})
IMAGE_SPEC = {"image/encoded": FixedLenFeature([], tfr_torch.string), "id": FixedLenFeature([], torch.int64)}
EVAL_IMAGES = DecodeImages(ImageTransform(8, train=False, dtype=torch.uint8))

pytestmark = [
    pytest.mark.filterwarnings("ignore:counting the records:UserWarning"),
    pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning"),
    pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning"),
]


# ------------------------------------------------------------------------------------------------ the corpus


class GateFS(LocalFileSystem):
    """Local files under the `gateaudit://` protocol, whose range reads wait while a file named `gate` lies beside
    the one read (after leaving `started-<pid>` there): a worker held in the middle of counting a remote file."""

    protocol = "gateaudit"

    def cat_file(self, path, start=None, end=None, **kwargs):
        folder = os.path.dirname(self._strip_protocol(path))
        gate = os.path.join(folder, "gate")
        if os.path.exists(gate):
            open(os.path.join(folder, f"started-{os.getpid()}"), "w").close()
            while os.path.exists(gate):
                time.sleep(0.01)
        return super().cat_file(path, start, end, **kwargs)


def register_gate_fs(worker_id: int = 0) -> None:
    """Register GateFS in this process (a DataLoader's worker_init_fn: a spawned worker imports this module)."""
    fsspec.register_implementation("gateaudit", GateFS, clobber=True)


register_gate_fs()


def _jpeg(k: int) -> bytes:
    from PIL import Image

    pixels = np.stack(np.mgrid[0:20 + k, 0:24] * (k + 1), -1)[..., [0, 1, 0]] % 256
    buf = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _write(folder, ids, files=1, *, compression=None, index=True, make=None):
    """`files` TFRecord files in `folder` (created) holding the Examples of `ids`, split in order; their paths."""
    os.makedirs(folder, exist_ok=True)
    make = make or (lambda i: {"id": i})
    paths = []
    for f, part in enumerate(np.array_split(np.array(ids), files)):
        path = os.path.join(folder, f"part-{f}.tfrecord" + (".gz" if compression else ""))
        with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
            for i in part.tolist():
                record = make(i)
                writer.write(record) if isinstance(record, bytes) else writer.write_example(record)
        if index:
            tfr_torch.build_index(path, seek_span=1 << 16)
        paths.append(path)
    return paths


def _sequence_example(i: int) -> bytes:
    return tfr_torch.encode_sequence_example({"id": i}, {"step": [[i, t] for t in range(i % 3)]})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("spawn")
    c = {
        "plain": _write(root / "plain", range(0, 30), 3, index=False),
        "buffer": _write(root / "buffer", range(100, 130), 3, index=False),
        "records": _write(root / "records", range(200, 230), 2, index=False),
        "sequence": _write(root / "sequence", range(300, 312), make=_sequence_example),
        "sequence_rows": _write(root / "sequence_rows", range(320, 332), make=_sequence_example),
        "images": _write(root / "images", range(400, 408), make=lambda i: {"image/encoded": _jpeg(i - 400), "id": i}),
        "remote": _write(root / "remote", range(500, 530), 3),
        "ranked": _write(root / "ranked", range(600, 630), 3),
        # > 64 KiB decompressed: several seek points, read by offset for the global shuffle
        "gzip": _write(root / "gzip", range(1000, 1300), compression="gzip",
                       make=lambda i: {"id": i, "pad": b"x" * 400}),
        "shuffled": _write(root / "shuffled", range(2000, 2030), 3),
        "memory": _write(root / "memory", range(2100, 2130), 3, index=False),
        "folder": _write(root / "folder", range(2200, 2230), 3, index=False),
        "indexed": _write(root / "indexed", range(3000, 3030), 3, make=lambda i: {"id": i, "data": b"d%d" % i}),
        "stateful": _write(root / "stateful", range(4000, 4040), 2),
    }
    c["root"] = root
    return c


def _ids(item) -> list[int]:
    """The record ids in an item: raw record bytes, a per-record dict, a batch, or a SequenceFeatures batch."""
    if isinstance(item, bytes):
        return [int(tfr_torch.decode_example(item)["id"][0])]
    if "context" in item:
        item = item["context"]
    return item["id"].reshape(-1).tolist()


def _loader(dataset, context, **kwargs):
    return DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=context, **kwargs)


# ------------------------------------------------------------------------------------------------ every kind of dataset


@pytest.mark.parametrize("context", CONTEXTS)
def test_every_kind_of_dataset_yields_every_record_once_in_workers(corpus, context):
    """One DataLoader (with pin_memory) over a mixture of each kind of TFRecordDataset: batches without index, GZIP
    with seek points shuffled globally, per-record dicts shuffled by buffer, raw records, SequenceFeatures (batches
    and rows), images
    decoded by DecodeImages, fsspec URLs through a block cache, and two simulated ranks. Every record once, each
    kind's values as the main process reads them."""
    c = corpus
    cache = str(c["root"] / f"blocks-{context}")
    datasets = {
        "plain": TFRecordDataset(c["plain"], SPEC, batch_size=4),
        "gzip": TFRecordDataset(c["gzip"], SPEC, batch_size=16, index="auto", shuffle=True, seed=3),
        "buffer": TFRecordDataset(c["buffer"], SPEC, shuffle=True, shuffle_buffer=8),
        "records": TFRecordDataset(c["records"]),
        "sequence": TFRecordDataset(c["sequence"], SEQUENCE_SPEC, batch_size=3),
        "sequence_rows": TFRecordDataset(c["sequence_rows"], SEQUENCE_SPEC),
        "images": TFRecordDataset(c["images"], IMAGE_SPEC, batch_size=3, index="auto", transform=EVAL_IMAGES),
        "remote": TFRecordDataset(["local://" + p for p in c["remote"]], SPEC, batch_size=4, shuffle=True,
                                  index=[p + ".idx" for p in c["remote"]],
                                  remote=RemoteOptions(cache_dir=cache, block_size=1024, cache_bytes=1 << 20)),
        "rank0": TFRecordDataset(c["ranked"], SPEC, batch_size=4, index="auto", shuffle=True, rank=0, world_size=2),
        "rank1": TFRecordDataset(c["ranked"], SPEC, batch_size=4, index="auto", shuffle=True, rank=1, world_size=2),
    }
    items = list(_loader(MixedDataset(datasets), context, pin_memory=True))
    ids = sorted(i for item in items for i in _ids(item))
    expected = sorted([*range(0, 30), *range(100, 130), *range(200, 230), *range(300, 312), *range(320, 332),
                       *range(400, 408), *range(500, 530), *range(600, 630), *range(1000, 1300)])
    assert ids == expected
    assert sum(isinstance(item, bytes) for item in items) == 30
    assert os.listdir(cache)  # the remote files' blocks went through the cache
    # the values: as read in this process
    here = {tuple(_ids(item)): item for name in ("sequence", "sequence_rows", "images") for item in datasets[name]}
    for item in items:
        if isinstance(item, dict) and tuple(_ids(item)) in here:
            want = here[tuple(_ids(item))]
            if "context" in item:
                assert torch.equal(item["feature_lists"]["step"], want["feature_lists"]["step"])
            else:
                assert torch.equal(item["image/encoded"], want["image/encoded"])
                assert item["image/encoded"].shape[1:] == (3, 8, 8)


@pytest.mark.parametrize("context", CONTEXTS)
def test_set_epoch_reaches_persistent_workers(corpus, context, tmp_path):
    """Persistent workers of a mixture of a globally shuffled TFRecordDataset and two shuffled CachedDatasets (in
    memory and in a folder): each epoch yields every record once, in the order of its epoch (set_epoch in the main
    process reaches the workers: epochs 1 and 2 differ, epoch 1 again repeats epoch 1)."""
    c = corpus
    mixed = MixedDataset({
        "shuffled": TFRecordDataset(c["shuffled"], SPEC, batch_size=4, index="auto", shuffle=True),
        "memory": CachedDataset(TFRecordDataset(c["memory"], SPEC, batch_size=4), shuffle=True),
        "folder": CachedDataset(TFRecordDataset(c["folder"], SPEC, batch_size=4), tmp_path / "cache", shuffle=True),
    })
    loader = _loader(mixed, context, persistent_workers=True)
    orders = {}
    try:
        for n, epoch in enumerate([0, 1, 2, 1]):
            mixed.set_epoch(epoch)
            order = [_ids(batch) for batch in loader]
            assert sorted(i for ids in order for i in ids) == [*range(2000, 2030), *range(2100, 2130),
                                                                *range(2200, 2230)], epoch
            orders[n] = order
    finally:
        loader._iterator = None  # the persistent workers end now, not in a later test
        gc.collect()
    assert orders[1] != orders[2]
    assert orders[3] == orders[1]
    assert os.listdir(tmp_path / "cache")


@pytest.mark.parametrize("context", CONTEXTS)
def test_indexed_dataset_with_a_sampler(corpus, context):
    """IndexedTFRecordDataset, read once in this process (its files opened here), then by workers with a
    RandomSampler and the default collate: every record once, with its data."""
    dataset = IndexedTFRecordDataset(corpus["indexed"], {**SPEC, "data": FixedLenFeature([], tfr_torch.string)})
    assert dataset[5]["data"] == b"d3005"
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2, multiprocessing_context=context)
    rows = [(i, d) for batch in loader for i, d in zip(batch["id"].tolist(), batch["data"])]
    assert sorted(rows) == [(i, b"d%d" % i) for i in range(3000, 3030)]


@pytest.mark.parametrize("context", CONTEXTS)
def test_stateful_dataloader_resumes_with_workers(corpus, context):
    """torchdata's StatefulDataLoader: a state taken after 3 batches of a shuffled epoch and loaded into a new
    loader and dataset yields the rest of that epoch, every record once over the two. Slow by nature under spawn and
    forkserver: two loaders, so four worker processes that each import torch."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make():
        dataset = TFRecordDataset(corpus["stateful"], SPEC, batch_size=2, index="auto", shuffle=True, seed=5)
        dataset.set_epoch(1)
        return stateful.StatefulDataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context=context)

    loader = make()
    it = iter(loader)
    first = [i for _ in range(3) for i in next(it)["id"].tolist()]
    state = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    rest = [i for batch in resumed for i in batch["id"].tolist()]
    assert sorted(first + rest) == list(range(4000, 4040))


# ------------------------------------------------------------------------------------------------ errors in workers


def _corrupt(tmp_path):
    """A file whose second record's data CRC is wrong, with its index; its path and that record's offset."""
    path = str(tmp_path / "bad.tfrecord")
    _write(tmp_path / "src", range(4), index=False)
    data = bytearray(open(tmp_path / "src" / "part-0.tfrecord", "rb").read())
    offsets = tfr_torch.read_index(tfr_torch.build_index(str(tmp_path / "src" / "part-0.tfrecord")))[0]
    data[int(offsets[1]) + 14] ^= 0xFF  # a data byte of record 1 (after its 12 header bytes)
    open(path, "wb").write(data)
    os.replace(tmp_path / "src" / "part-0.tfrecord.idx", path + ".idx")  # its index (the same offsets)
    return path, int(offsets[1])


@pytest.mark.parametrize("context", CONTEXTS)
def test_errors_in_workers_name_the_file_and_offset(tmp_path, context, loader_error):
    """A corrupt record and a record of the wrong type, read in a worker (and the corrupt one by index, through a
    sampler): the main process gets the same error type, its message naming the file and the record's offset. Slow
    by nature under spawn and forkserver: three loaders, so six worker processes that each import torch."""
    path, offset = _corrupt(tmp_path)
    err = loader_error(_loader(TFRecordDataset(path, SPEC, batch_size=2, index=None), context))
    assert type(err) is CorruptRecordError
    assert f"{path}:{offset}: corrupt record data: the CRC of its" in str(err)
    wrong = _write(tmp_path / "wrong", range(2), make=lambda i: {"id": b"not an int"}, index=False)[0]
    err = loader_error(_loader(TFRecordDataset(wrong, SPEC, batch_size=2), context))
    assert isinstance(err, DecodeError)
    assert f"{wrong}:0" in str(err) and "'id'" in str(err)
    err = loader_error(DataLoader(IndexedTFRecordDataset(path, SPEC), batch_size=2, num_workers=2,
                                  multiprocessing_context=context))
    assert type(err) is CorruptRecordError
    assert f"{path}:{offset}: corrupt record data: the CRC of its" in str(err)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_errors_from_workers_keep_their_path_and_offset_attributes(tmp_path, context, loader_error):
    """The error a worker raised keeps, in the main process, the `path` and `offset` its message names (the style's
    "each carries the path and the byte offset"), also through pickle: torch re-raises it as `type(traceback
    text)`, and the error reads them back from that text (its text unchanged)."""
    path, offset = _corrupt(tmp_path)
    err = loader_error(_loader(TFRecordDataset(path, SPEC, batch_size=2, index=None), context))
    assert type(err) is CorruptRecordError
    again = pickle.loads(pickle.dumps(err))
    assert (again.path, again.offset) == (err.path, err.offset) == (path, offset)
    assert str(again) == str(err) and str(err).startswith("Caught CorruptRecordError in DataLoader worker process")


def test_a_worker_error_text_without_an_offset_leaves_the_attributes_none():
    """Only the `path:offset: ` form is read back; other texts (an error naming no file) leave None."""
    text = ("Caught DecodeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
            "  File \"x.py\", line 1, in <module>\ntfr_torch.errors.DecodeError: feature 'a' is missing\n")
    err = tfr_torch.DecodeError(text)
    assert (err.path, err.offset) == (None, None) and str(err) == text
    named = tfr_torch.DecodeError(text.replace("feature 'a'", "s3://b/x.tfrecord:12: feature 'a'"))
    assert (named.path, named.offset) == ("s3://b/x.tfrecord", 12)


# ------------------------------------------------------------------------------------------------ abandoned iterations


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie has exited
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("context", CONTEXTS)
def test_an_abandoned_iteration_leaves_no_worker_and_no_shared_memory(corpus, context, monkeypatch):
    """Stopped after one batch and dropped: the workers have exited and /dev/shm holds nothing new of torch or
    tfr_torch (the transport's slabs are anonymous memfds; torch's shared tensors go by file descriptor)."""
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.2)
    before = set(os.listdir("/dev/shm"))
    loader = _loader(TFRecordDataset(corpus["plain"], SPEC, batch_size=2), context)
    it = iter(loader)
    assert len(next(it)["id"]) == 2
    pids = [worker.pid for worker in it._workers]
    del it
    gc.collect()
    for _ in range(3000):  # a worker still alive after its join timeout is terminated without a join: wait for it
        if all(_gone(pid) for pid in pids):
            break
        time.sleep(0.01)
    assert [pid for pid in pids if not _gone(pid)] == []
    new = {name for name in set(os.listdir("/dev/shm")) - before
           if "torch" in name and not name.startswith("tfr_torch_fuzz")}  # (the fuzz tests' own files)
    assert new == set()


@pytest.mark.parametrize("context", CONTEXTS)
def test_counting_after_an_iteration_dropped_mid_count_does_not_hang(tmp_path, context, monkeypatch):
    """A file without an index, for more readers than files: the workers count it together (data/counting.py). The
    first iteration is dropped while a worker counts (held by GateFS), so that worker is shut down with the file
    claimed; the next pass must count it again, not wait forever for the dead worker (it did: `timeout` guards the
    hang here, and the test fails after it rather than hanging). Slow by nature under spawn and forkserver: two
    passes of workers that each import torch."""
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.2)
    path = _write(tmp_path / "gated", range(10), index=False)[0]
    dataset = TFRecordDataset("gateaudit://" + path)
    loader = _loader(dataset, context, worker_init_fn=register_gate_fs, timeout=60)
    gate = tmp_path / "gated" / "gate"
    gate.touch()
    it = iter(loader)
    for _ in range(60_000):  # the first worker's range read has begun (a spawned one imports torch first)
        if any(name.startswith("started-") for name in os.listdir(tmp_path / "gated")):
            break
        time.sleep(0.01)
    else:
        pytest.fail("no worker began counting")
    del it
    gc.collect()
    gate.unlink()
    assert sorted(int(tfr_torch.decode_example(r)["id"][0]) for r in loader) == list(range(10))
    assert len(dataset) == 10  # the workers' counts reached this process


# ------------------------------------------------------------------------------------------------ module settings


class _Backends(torch.utils.data.Dataset):
    """Which backend each access ran on (tfr_torch.backend() where the item is made)."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> str:
        return tfr_torch.backend()


_FORKSERVER = pytest.mark.xfail(strict=False, reason="a forkserver's workers fork from its server process, which "
                                "keeps the environment (TFR_TORCH_NATIVE) of the time it was started: a set_backend "
                                "after an earlier forkserver DataLoader does not reach them")


@pytest.mark.parametrize("context", ["fork", "spawn", pytest.param("forkserver", marks=_FORKSERVER)])
def test_the_backend_chosen_in_the_main_process_is_the_workers_backend(context):
    """set_backend("python") before the DataLoader starts: its workers decode on the reference too."""
    if not tfr_torch._native.available():
        pytest.skip("the compiled core is not built: both sides run the reference anyway")
    previous = tfr_torch.set_backend("python")
    try:
        got = list(DataLoader(_Backends(), batch_size=None, num_workers=1, multiprocessing_context=context))
    finally:
        tfr_torch.set_backend(previous)
    assert got == ["python", "python"]
