"""An adversarial audit of DeviceLoader (tfr_torch.images) on the CPU, against what its docstring and the images guide
promise: resume from every position of an epoch (DataLoader workers 0 and 2, prefetch 0-3, with and without the
background thread) gives exactly the remaining batches with the same crops; crops keyed by (seed, epoch, rank,
sample index) with the epoch and rank taken from the dataset or a DistributedSampler; len() equal to the batches
yielded; a clean epoch after breaking out, with no thread or worker process left; errors in their place, naming the
record; mixed images, batches of one, an empty dataset; other features untouched; dtype and layout; regions; every
tensor of a batch moved; identical runs identical."""

from __future__ import annotations

import collections
import gc
import io
import multiprocessing
import re
import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from cuda_standin import pretend_cuda

import tfr_torch
from tfr_torch.errors import DecodeError
from tfr_torch.images import DeviceLoader, ImageTransform, decode_image
from tfr_torch.images import loader as loader_module

SPEC = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "label": tfr_torch.FixedLenFeature([], torch.int64)}
TRAIN = ImageTransform(16, train=True, seed=7, dtype=torch.uint8, mean=None, std=None)
RECORDS = 11  # batches of 3: 4 batches, the last of 2


def jpeg(k: int, gray: bool = False) -> bytes:
    rng = np.random.default_rng(300 + k)
    height, width = 24 + 5 * (k % 4), 30 + 3 * (k % 5)
    shape = (height, width) if gray else (height, width, 3)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def png(k: int, channels: int = 3) -> bytes:
    rng = np.random.default_rng(400 + k)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (20 + k, 27, channels), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def write(path: str, images: list[bytes], **extra) -> str:
    with tfr_torch.TFRecordWriter(path) as writer:
        for k, data in enumerate(images):
            writer.write_example({"image/encoded": data, "label": k, **{key: f(k) for key, f in extra.items()}})
    tfr_torch.build_index(path, path + ".idx")
    return path


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> str:
    return write(str(tmp_path_factory.mktemp("device_loader") / "train.tfrecord"), [jpeg(k) for k in range(RECORDS)])


def offsets_of(path: str) -> list[int]:
    """Each record's byte offset, as the index beside it has it."""
    with open(path + ".idx") as index:
        return [int(line.split()[0]) for line in index]


def dataset(path: str, **kwargs) -> tfr_torch.TFRecordDataset:
    kwargs.setdefault("batch_size", 3)
    return tfr_torch.TFRecordDataset(path, SPEC, index="auto", **kwargs)


def run(loader) -> list[tuple[list[int], torch.Tensor]]:
    return [(b["label"].tolist(), b["image/encoded"].clone()) for b in loader]


def same(got, want) -> bool:
    return [g for g, _ in got] == [w for w, _ in want] and all(torch.equal(a, b) for (_, a), (_, b) in zip(got, want))


def loader_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "tfr_torch DeviceLoader" and t.is_alive()}


def settled(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def reference(images: list[bytes], transform: ImageTransform, epoch: int, rank: int, indices) -> torch.Tensor:
    """The batch the promise describes: decode_image, the crops of plan(seed, epoch, rank, index), apply."""
    pixels = [decode_image(data, "RGB") for data in images]
    boxes, flips = transform.plan([tuple(p.shape[-2:]) for p in pixels], epoch, rank, list(indices))
    return transform.apply(pixels, boxes, flips)


# ---- resume -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("thread", [False, True])
@pytest.mark.parametrize("prefetch", [0, 1, 2, 3])
def test_resume_at_every_position_gives_the_remaining_batches_and_crops(shard, thread, prefetch):
    """A state saved after 0, 1, ... 4 batches (the end) of a shuffled epoch 2, num_workers=0, loaded into a fresh
    loader: exactly the remaining batches, each with the crops of the uninterrupted run; the state counts the batches
    handed out, not those prefetched."""
    def make() -> DeviceLoader:
        loader = DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None), "cpu", transform=TRAIN,
                              prefetch=prefetch, thread=thread)
        loader.set_epoch(2)
        return loader

    whole = run(make())
    assert len(whole) == 4 and sorted(sum((labels for labels, _ in whole), [])) == list(range(RECORDS))
    for position in range(len(whole) + 1):
        first = make()
        it = iter(first)
        for _ in range(position):
            next(it)
        state = first.state_dict()
        assert (state["epoch"], state["batches"], state["samples"]) == (2, position, min(3 * position, RECORDS))
        it.close()
        again = DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None), "cpu", transform=TRAIN,
                             prefetch=prefetch, thread=thread)
        again.load_state_dict(state)
        assert same(run(again), whole[position:]), position
        assert again.state_dict()["samples"] == RECORDS
    assert settled(lambda: not loader_threads())


@pytest.mark.parametrize("prefetch", [1, 3])
def test_resume_with_two_workers_at_every_position(shard, prefetch):
    """The same through torchdata's StatefulDataLoader with 2 workers and the background thread: every position of
    the epoch resumes to exactly the remaining batches and crops."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def make() -> DeviceLoader:
        inner = stateful.StatefulDataLoader(dataset(shard, shuffle=True), batch_size=None, num_workers=2)
        return DeviceLoader(inner, "cpu", transform=TRAIN, prefetch=prefetch, thread=True)

    whole = run(make())
    for position in (0, 1, 3, 4):
        first = make()
        it = iter(first)
        for _ in range(position):
            next(it)
        state = first.state_dict()
        it.close()
        again = make()
        again.load_state_dict(state)
        assert same(run(again), whole[position:]), position


# ---- epochs and ranks -------------------------------------------------------------------------------------------

def test_set_epoch_changes_the_crops_and_reaches_persistent_workers(shard):
    """set_epoch(1) on the DeviceLoader reaches the persistent workers' shuffle (the order is epoch 1's, as fresh
    workers made for epoch 1 read it) and keys the crops by epoch 1: other crops than epoch 0's for the same sample
    indices, those that plan() gives for epoch 1."""
    raw = {k: jpeg(k) for k in range(RECORDS)}
    loader = DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None, num_workers=2,
                                     persistent_workers=True), "cpu", transform=TRAIN)
    epoch0 = run(loader)
    loader.set_epoch(1)
    epoch1 = run(loader)
    fresh = DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None, num_workers=2), "cpu",
                         transform=TRAIN)
    fresh.set_epoch(1)
    assert same(epoch1, run(fresh))
    assert [labels for labels, _ in epoch0] != [labels for labels, _ in epoch1]
    index = 0
    for labels, images in epoch1:
        want = reference([raw[k] for k in labels], TRAIN, 1, 0, range(index, index + len(labels)))
        assert torch.equal(images, want)
        assert not torch.equal(images, reference([raw[k] for k in labels], TRAIN, 0, 0,
                                                 range(index, index + len(labels))))
        index += len(labels)


def test_two_ranks_see_disjoint_records_and_crops_keyed_by_their_rank(shard):
    """rank/world_size on the dataset: the two ranks' records are disjoint, as many on each, and each rank's crops
    are plan()'s for its own rank (so rank 1's i-th sample is not cropped as rank 0's i-th)."""
    raw = {k: jpeg(k) for k in range(RECORDS)}
    seen = []
    for rank in (0, 1):
        loader = DeviceLoader(DataLoader(dataset(shard, rank=rank, world_size=2, shuffle=True), batch_size=None),
                              "cpu", transform=TRAIN)
        assert loader.rank == rank
        batches = run(loader)
        assert len(batches) == len(loader)
        labels = sum((b for b, _ in batches), [])
        seen.append(labels)
        images = torch.cat([images for _, images in batches])
        assert torch.equal(images, reference([raw[k] for k in labels], TRAIN, 0, rank, range(len(labels))))
        assert not torch.equal(images, reference([raw[k] for k in labels], TRAIN, 0, 1 - rank, range(len(labels))))
    assert len(seen[0]) == len(seen[1]) == RECORDS // 2 and not set(seen[0]) & set(seen[1])


def test_a_distributed_sampler_gives_the_rank_and_the_epoch_of_the_crops(shard):
    """Fixed: over a map-style IndexedTFRecordDataset with DDP's DistributedSampler(rank=1), DeviceLoader keyed the
    crops by rank 0 on every rank (the same crop draws for every rank's i-th sample), and the standard DDP call
    `sampler.set_epoch(e)` left the crops keyed by epoch 0 every epoch. The rank and the epoch now come from the
    sampler when the dataset has none."""
    raw = {k: jpeg(k) for k in range(RECORDS)}
    data = tfr_torch.IndexedTFRecordDataset(shard, SPEC, index="auto")
    sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=0)
    loader = DeviceLoader(DataLoader(data, batch_size=3, sampler=sampler), "cpu", transform=TRAIN)
    assert loader.rank == 1
    for epoch in (0, 2):
        sampler.set_epoch(epoch)  # as a DDP training loop does
        batches = run(loader)
        assert loader.epoch == epoch
        labels = sum((b for b, _ in batches), [])
        assert labels == [int(k) for k in sampler]
        images = torch.cat([images for _, images in batches])
        assert torch.equal(images, reference([raw[k] for k in labels], TRAIN, epoch, 1, range(len(labels))))
    loader.set_epoch(3)
    assert sampler.epoch == 3
    inner = DistributedSampler(data, num_replicas=2, rank=1, seed=0)  # under a batch_sampler
    batched = DeviceLoader(DataLoader(data, batch_sampler=BatchSampler(inner, 3, drop_last=False)), "cpu",
                           transform=TRAIN)
    assert batched.rank == 1
    inner.set_epoch(2)
    assert same(run(batched), batches) and batched.epoch == 2
    batched.set_epoch(5)
    assert inner.epoch == 5
    data.close()


# ---- length and iteration ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("batch_size, world_size", [(3, 1), (1, 1), (4, 2), (5, 1)])
def test_len_is_the_number_of_batches_yielded(shard, drop_last, batch_size, world_size):
    """len() equals the batches an epoch yields and state_dict's samples the records, for drop_last both ways,
    batches of one and several ranks."""
    for rank in range(world_size):
        data = dataset(shard, batch_size=batch_size, drop_last=drop_last, rank=rank, world_size=world_size)
        loader = DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN)
        batches = list(loader)
        assert len(batches) == len(loader) == len(data)
        assert all(b["image/encoded"].shape == (len(b["label"]), 3, 16, 16) for b in batches)
        assert loader.state_dict()["samples"] == sum(len(b["label"]) for b in batches)
        if drop_last:
            assert all(len(b["label"]) == batch_size for b in batches)


def test_an_empty_dataset_yields_nothing_and_its_state_is_the_start(tmp_path):
    """A shard without records: len() 0, no batch, no thread left, a state at the start of the epoch."""
    path = write(str(tmp_path / "empty.tfrecord"), [])
    with pytest.warns(UserWarning, match="hold no records"):
        data = dataset(path)
    loader = DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN, thread=True)
    assert len(loader) == 0 and list(loader) == []
    assert loader.state_dict() == {"version": 1, "epoch": 0, "samples": 0, "batches": 0, "loader": None}
    assert settled(lambda: not loader_threads())


@pytest.mark.parametrize("thread", [False, True])
@pytest.mark.parametrize("workers", [0, 2])
def test_breaking_out_then_iterating_again_starts_a_clean_epoch(shard, thread, workers):
    """`for batch in loader: break`, then a whole pass: the whole epoch from its first batch with the same crops as an
    uninterrupted pass, and afterwards no loader thread and no DataLoader worker process left."""
    children = set(multiprocessing.active_children())
    before = loader_threads()
    loader = DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None, num_workers=workers), "cpu",
                          transform=TRAIN, thread=thread, prefetch=2)
    want = run(DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None, num_workers=workers), "cpu",
                            transform=TRAIN))
    for batch in loader:
        assert batch["label"].tolist() == want[0][0]
        break
    if workers == 0:
        assert loader.state_dict()["batches"] == 1
    assert same(run(loader), want)
    if workers == 0:
        assert loader.state_dict()["samples"] == RECORDS
    gc.collect()
    assert settled(lambda: loader_threads() == before)
    assert settled(lambda: set(multiprocessing.active_children()) <= children)


def test_identical_runs_and_both_ways_of_preparing_give_identical_batches(shard):
    """Two runs with workers and the thread give the same batches bit for bit, and so do runs with and without the
    thread in this process."""
    def batches(workers: int, thread: bool) -> list:
        return run(DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None, num_workers=workers), "cpu",
                                transform=ImageTransform(16, seed=3), thread=thread, prefetch=3))

    first = batches(2, True)
    assert same(batches(2, True), first)
    assert same(batches(0, True), batches(0, False))


# ---- errors -------------------------------------------------------------------------------------------------------

class FailsAt:
    """A wrapped loader whose iteration raises at batch `at`."""

    def __init__(self, inner, at: int) -> None:
        self.inner, self.at = inner, at
        self.dataset = inner.dataset

    def __iter__(self):
        for k, batch in enumerate(self.inner):
            if k == self.at:
                raise RuntimeError(f"the wrapped loader failed at batch {k}")
            yield batch

    def __len__(self) -> int:
        return len(self.inner)


@pytest.mark.parametrize("thread", [False, True])
@pytest.mark.parametrize("prefetch", [0, 1, 3])
@pytest.mark.parametrize("at", [0, 2])
def test_an_error_of_the_wrapped_loader_comes_after_the_batches_before_it(shard, thread, prefetch, at):
    """The wrapped loader raising at its first or third batch: the batches before it are handed out, then its own
    exception; no thread is left, and the next pass is a whole epoch."""
    before = loader_threads()
    loader = DeviceLoader(FailsAt(DataLoader(dataset(shard), batch_size=None), at), "cpu", transform=TRAIN,
                          thread=thread, prefetch=prefetch)
    got = []
    with pytest.raises(RuntimeError, match=rf"^the wrapped loader failed at batch {at}$"):
        for batch in loader:
            got.append(batch["label"].tolist())
    assert got == [[0, 1, 2], [3, 4, 5]][:at]
    assert settled(lambda: loader_threads() == before)
    loader.loader.at = 99
    assert [labels for labels, _ in run(loader)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10]]


@pytest.mark.parametrize("thread, prefetch, workers", [(False, 0, 0), (False, 2, 0), (True, 1, 0), (True, 3, 2)])
def test_a_truncated_jpeg_is_named_by_its_file_and_offset(tmp_path, thread, prefetch, workers):
    """A cut JPEG (record 7), the dataset giving record locations (location_key): the batches before its own, then
    DecodeError "<file>:<offset>: cannot decode image (N bytes): ..." with path, offset (the record's, as the index
    has it), key and index in the batch; no thread left."""
    images = [jpeg(k) for k in range(9)]
    images[7] = images[7][: len(images[7]) // 2]
    path = write(str(tmp_path / "bad.tfrecord"), images)
    offsets = offsets_of(path)
    before = loader_threads()
    data = dataset(path, location_key="where")
    loader = DeviceLoader(DataLoader(data, batch_size=None, num_workers=workers), "cpu", transform=TRAIN,
                          thread=thread, prefetch=prefetch)
    order = [b["label"].tolist() for b in DataLoader(data, batch_size=None, num_workers=workers)]
    bad = next(n for n, labels in enumerate(order) if 7 in labels)
    got = []
    message = rf"^{re.escape(path)}:{offsets[7]}: cannot decode image \({len(images[7])} bytes\): "
    with pytest.raises(DecodeError, match=message) as caught:
        for batch in loader:
            got.append(batch["label"].tolist())
    assert got == order[:bad] and len(got) >= 1
    err = caught.value
    assert (err.path, err.offset, err.key, err.index) == (path, offsets[7], "image/encoded", order[bad].index(7))
    assert settled(lambda: loader_threads() == before)


@pytest.mark.parametrize("thread", [False, True])
def test_the_workers_stop_when_the_error_is_dropped_without_a_garbage_collection(tmp_path, thread):
    """Fixed: a DecodeError raised from DeviceLoader was in a reference cycle (its traceback held the frame that
    held it), so the wrapped DataLoader and its worker processes lived on after the error until a garbage
    collection, which then stalled about 5 s stopping them (in whatever code it ran). With the garbage collector
    off, dropping the error now stops the workers at once."""
    images = [jpeg(k) for k in range(9)]
    images[7] = images[7][:100]
    path = write(str(tmp_path / "bad.tfrecord"), images)
    children = set(multiprocessing.active_children())
    loader = DeviceLoader(DataLoader(dataset(path), batch_size=None, num_workers=2), "cpu", transform=TRAIN,
                          thread=thread, prefetch=2)
    gc.collect()
    gc.disable()
    try:
        error = None
        try:
            for _ in loader:
                pass
        except DecodeError as exc:
            error = exc
        assert isinstance(error, DecodeError)
        del error
        assert settled(lambda: set(multiprocessing.active_children()) <= children, seconds=8)
    finally:
        gc.enable()


def test_names_from_an_int_feature_are_its_values(tmp_path):
    """Fixed: names= an int feature (a record id) named a bad image "tensor(4)"; it is named "4", as DecodeImages
    names it by its index= value."""
    images = [jpeg(k) for k in range(6)]
    images[4] = images[4][:60]
    path = write(str(tmp_path / "ids.tfrecord"), images)
    loader = DeviceLoader(DataLoader(dataset(path), batch_size=None), "cpu", transform=TRAIN, names="label")
    with pytest.raises(DecodeError, match=r"^cannot decode image 4 \(60 bytes\): "):
        list(loader)


def test_a_names_key_the_batch_lacks_leaves_the_record_locations(tmp_path):
    """Fixed: names= a key that the batches do not have (a feature the shards lack, or misspelt) silently dropped the
    record locations the dataset gives (location_key): the bad image was named "epoch 0, batch 1, item 1" with no
    path or offset. Such a batch is now named as if names= were not given: by the record's file and offset."""
    images = [jpeg(k) for k in range(6)]
    images[4] = images[4][:80]
    path = write(str(tmp_path / "located.tfrecord"), images)
    offsets = offsets_of(path)
    data = dataset(path, location_key="where")
    loader = DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN, names="image/filename")
    with pytest.raises(DecodeError, match=rf"^{re.escape(path)}:{offsets[4]}: cannot decode image \(80 bytes\)"
                       ) as caught:
        list(loader)
    assert (caught.value.path, caught.value.offset, caught.value.index) == (path, offsets[4], 1)
    unlocated = DeviceLoader(DataLoader(dataset(path), batch_size=None), "cpu", transform=TRAIN, names="nothing")
    with pytest.raises(DecodeError, match=r"^cannot decode image epoch 0, batch 1, item 1 \(80 bytes\)"):
        list(unlocated)


# ---- what a batch holds -----------------------------------------------------------------------------------------

def test_mixed_sizes_gray_and_png_in_one_batch(tmp_path):
    """Colour and gray JPEGs of several sizes, an RGB and an RGBA PNG in one batch: the training batch equals the
    reference (RGB decoding, plan, apply); without a transform, each image as decode_image gives it in RGB."""
    images = [jpeg(0), jpeg(1, gray=True), png(2), png(3, channels=4), jpeg(5), jpeg(6, gray=True)]
    path = write(str(tmp_path / "mixed.tfrecord"), images)
    data = dataset(path, batch_size=6)
    batch = next(iter(DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN)))
    assert torch.equal(batch["image/encoded"], reference(images, TRAIN, 0, 0, range(6)))
    plain = next(iter(DeviceLoader(DataLoader(data, batch_size=None), "cpu")))["image/encoded"]
    assert isinstance(plain, list) and len(plain) == 6
    for got, data_ in zip(plain, images):
        assert got.dtype == torch.uint8 and got.shape[0] == 3 and torch.equal(got, decode_image(data_, "RGB"))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channels_last", [True, False])
def test_dtype_and_channels_last_are_honoured(shard, dtype, channels_last):
    """Each batch has the transform's dtype and memory layout and equals the transform applied to the decoded
    images (normalized for the float dtypes)."""
    transform = ImageTransform(12, train=True, seed=2, dtype=dtype, channels_last=channels_last)
    index = 0
    for batch in DeviceLoader(DataLoader(dataset(shard), batch_size=None), "cpu", transform=transform):
        images = batch["image/encoded"]
        labels = batch["label"].tolist()
        assert images.dtype == dtype and images.shape == (len(labels), 3, 12, 12)
        assert images.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
        assert torch.equal(images, reference([jpeg(k) for k in labels], transform, 0, 0,
                                             range(index, index + len(labels))))
        index += len(labels)


def test_a_gray_transform_gives_one_channel_batches(shard):
    """ImageTransform(mode="GRAY") through DeviceLoader: [B, 1, size, size] batches normalized by its one mean and
    std, equal to the transform applied to decode_image(data, "GRAY")."""
    gray = ImageTransform(8, train=True, mode="GRAY", mean=(0.5,), std=(0.2,), seed=1)
    batch = next(iter(DeviceLoader(DataLoader(dataset(shard), batch_size=None), "cpu", transform=gray)))
    pixels = [decode_image(jpeg(k), "GRAY") for k in range(3)]
    boxes, flips = gray.plan([tuple(p.shape[-2:]) for p in pixels], 0, 0, range(3))
    assert batch["image/encoded"].shape == (3, 1, 8, 8)
    assert torch.equal(batch["image/encoded"], gray.apply(pixels, boxes, flips))


def test_other_features_pass_through_untouched(tmp_path):
    """Strings (a list of bytes), record locations and int tensors reach the training loop as the wrapped loader gave
    them (the same list objects, equal tensors), and the wrapped loader's batch itself is not changed."""
    path = write(str(tmp_path / "features.tfrecord"), [jpeg(k) for k in range(5)],
                 name=lambda k: f"img{k}.jpg".encode())
    spec = dict(SPEC, name=tfr_torch.FixedLenFeature([], tfr_torch.string))
    data = tfr_torch.TFRecordDataset(path, spec, index="auto", batch_size=5, location_key="where")
    given = []

    class Keeps:
        dataset = data

        def __iter__(self):
            for batch in DataLoader(data, batch_size=None):
                given.append((batch, dict(batch)))
                yield batch

    out = next(iter(DeviceLoader(Keeps(), "cpu", transform=TRAIN)))
    batch, copy = given[0]
    assert batch.keys() == copy.keys() and all(batch[key] is copy[key] for key in copy)  # not changed
    assert isinstance(batch["image/encoded"], list) and isinstance(batch["image/encoded"][0], bytes)
    assert out["name"] is batch["name"] and out["name"] == [f"img{k}.jpg".encode() for k in range(5)]
    assert out["where"] is batch["where"] and all(w.startswith(f"{path}:") for w in out["where"])
    assert torch.equal(out["label"], torch.arange(5)) and out["image/encoded"].shape == (5, 3, 16, 16)
    moved = next(iter(DeviceLoader(DataLoader(data, batch_size=None), "cpu", images=None)))
    assert moved["image/encoded"] == batch["image/encoded"]  # images=None: the encoded bytes as they came


def test_tensors_anywhere_in_a_batch_reach_the_device():
    """Fixed: a batch's tensors were moved only in dicts and in lists or tuples whose first item is a tensor: the
    tensors of an (features dict, labels) pair or a list of dicts stayed on the host, and a namedtuple (which
    default_collate keeps) failed with "__new__() missing ... positional argument". The "meta" device shows what
    was moved."""
    Pair = collections.namedtuple("Pair", "x y")
    names = [b"a", b"b"]
    batches = [({"x": torch.ones(2)}, torch.zeros(2)), [{"x": torch.ones(2)}, {"x": torch.ones(2)}],
               Pair(torch.ones(2), torch.zeros(2)), {"pair": Pair(torch.ones(2), [1, 2]), "names": names}]

    class Batches:
        def __iter__(self):
            return iter(batches)

        def __len__(self):
            return len(batches)

    features, listed, pair, nested = DeviceLoader(Batches(), "meta", images=None)
    assert features[0]["x"].is_meta and features[1].is_meta and isinstance(features, tuple)
    assert all(item["x"].is_meta for item in listed) and isinstance(listed, list)
    assert type(pair) is Pair and pair.x.is_meta and pair.y.is_meta
    assert type(nested["pair"]) is Pair and nested["pair"].x.is_meta and nested["pair"].y == [1, 2]
    assert nested["names"] is names


def test_a_transform_over_batches_that_are_not_dicts_is_an_error():
    """Fixed: with a transform, a batch that is not a dict (a tuple of encoded images and labels) was only moved: its
    images reached the training loop as undecoded bytes, silently. It is a TypeError saying what to pass."""
    batches = [([jpeg(0), jpeg(1)], torch.tensor([0, 1]))]
    with pytest.raises(TypeError, match=r"^DeviceLoader with a transform decodes the images of dict batches \(under "
                                        r"'image/encoded'\), got a tuple; give it a loader of dicts, or "
                                        r"transform=None, images=None to only move the batches$"):
        next(iter(DeviceLoader(batches, "cpu", transform=TRAIN)))
    images, labels = next(iter(DeviceLoader(batches, "cpu", images=None)))  # only moved: as documented
    assert images == batches[0][0] and torch.equal(labels, batches[0][1])


def test_regions_decode_only_the_crops_and_give_the_same_batch(shard, monkeypatch):
    """regions=True on a (stand-in) GPU: each image's region, as the decoder is asked for it, holds its planned crop,
    and the batch made from the regions equals the batch made from whole images."""
    pretend_cuda(monkeypatch)
    monkeypatch.setattr(loader_module, "streams_for", lambda device: loader_module.Streams())
    asked: list = []

    def decode_views(items, names, mode, dtype, backend, exif, device, regions=None, *args, **kwargs):
        out = []
        for k, data in enumerate(items):
            pixels = decode_image(data, "RGB")
            if regions is None:
                out.append((pixels, (0, 0)))
                continue
            top, left, bottom, right = regions[k]
            asked.append((tuple(pixels.shape[-2:]), regions[k]))
            out.append((pixels[:, top:bottom, left:right], (top, left)))
        return out

    monkeypatch.setattr(loader_module, "decode_views", decode_views)
    transform = ImageTransform(16, train=True, seed=4, dtype=torch.uint8)

    def batches(regions: bool) -> list:
        return run(DeviceLoader(DataLoader(dataset(shard), batch_size=None), "cuda", transform=transform,
                                regions=regions, thread=False))

    whole = batches(False)
    assert not asked
    cropped = batches(True)
    assert len(asked) == RECORDS and same(cropped, whole)
    boxes, _ = transform.plan([size for size, _ in asked], 0, 0, range(RECORDS))
    for ((height, width), (top, left, bottom, right)), box in zip(asked, boxes):
        assert 0 <= top <= box[0] and 0 <= left <= box[1]
        assert box[0] + box[2] <= bottom <= height and box[1] + box[3] <= right <= width
    assert any((bottom - top, right - left) != size for size, (top, left, bottom, right) in asked)  # regions only
