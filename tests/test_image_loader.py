"""DeviceLoader and ImageTransform on the CPU: prefetch order and depth (with a recording stand-in for the CUDA
streams and events), random crops that are a pure function of (seed, epoch, rank, index), state and resume through
the loader, len / set_epoch passthrough, errors naming the image, and DecodeImages in DataLoader workers."""

from __future__ import annotations

import ctypes
import gc
import io
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader

from cuda_standin import pretend_cuda

import tfr_torch
from tfr_torch.data import receive, slabs, transport
from tfr_torch.errors import DecodeError
from tfr_torch.images import DecodeImages, DeviceLoader, ImageTransform
from tfr_torch.images import loader as loader_module

SPEC = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
        "label": tfr_torch.FixedLenFeature([], torch.int64)}


def jpeg(k: int) -> bytes:
    rng = np.random.default_rng(k)
    height, width = 40 + 3 * (k % 5), 50 + 2 * (k % 7)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([(x * 5 + k) % 256, (y * 4) % 256, (x + y + k * 9) % 256], -1) + rng.integers(0, 9, (height,
                                                                                                        width, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("images") / "train.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(23):
            writer.write_example({"image/encoded": jpeg(k), "label": k})
    tfr_torch.build_index(path, path + ".idx")
    return path


def dataset(path: str, **kwargs) -> tfr_torch.TFRecordDataset:
    return tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5, **kwargs)


TRAIN = ImageTransform(size=16, train=True, seed=11)


def test_random_choices_are_a_pure_function_of_seed_epoch_rank_and_index():
    sizes = [(40 + k, 60 - k) for k in range(8)]
    boxes, flips = TRAIN.plan(sizes, epoch=3, rank=1, indices=range(8))
    again, _ = TRAIN.plan(sizes[4:], epoch=3, rank=1, indices=range(4, 8))  # another batch grouping
    assert np.array_equal(boxes[4:], again)
    assert not np.array_equal(boxes, TRAIN.plan(sizes, epoch=4, rank=1, indices=range(8))[0])
    assert not np.array_equal(boxes, TRAIN.plan(sizes, epoch=3, rank=0, indices=range(8))[0])
    many, _ = TRAIN.plan([(375, 500)] * 2000, epoch=0, rank=0, indices=range(2000))
    area = many[:, 2] * many[:, 3] / (375 * 500)
    assert area.min() >= 0.08 - 1e-3 and area.max() <= 1.0
    assert (many[:, 0] >= 0).all() and (many[:, 0] + many[:, 2] <= 375).all()
    assert (many[:, 1] >= 0).all() and (many[:, 1] + many[:, 3] <= 500).all()
    _, flipped = TRAIN.plan([(375, 500)] * 2000, epoch=0, rank=0, indices=range(2000))
    assert 900 < flipped.sum() < 1100
    centre, none = ImageTransform(224, train=False).plan([(375, 500)], 0, 0, [0])
    side = 224 * 375 / 256  # the shorter side to 256, then the centre 224: 328.125 pixels of the original
    assert np.allclose(centre, [[(375 - side) / 2, (500 - side) / 2, side, side]]) and not none.any()


def test_the_batched_gather_is_a_bilinear_resize_of_each_crop():
    g = torch.Generator().manual_seed(0)
    images = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1)
              for h, w in [(40, 50), (33, 21), (64, 64)]]
    t = ImageTransform(size=16, seed=3, dtype=torch.uint8)
    boxes, flips = t.plan([(40, 50), (33, 21), (64, 64)], 0, 0, [0, 1, 2])
    boxes = np.round(boxes)
    got = t.apply(images, boxes, flips, method="gather")
    for image, (top, left, h, w), flip, out in zip(images, boxes.astype(int), flips, got):
        want = F.interpolate(image[:, top:top + h, left:left + w][None].float(), size=(16, 16), mode="bilinear",
                             align_corners=False)[0]
        want = want.flip(-1) if flip else want
        assert (out.float() - want.round().clamp(0, 255)).abs().max() <= 1
    resized = t.apply(images, boxes, flips, method="resize")
    assert resized.shape == (3, 3, 16, 16) and resized.is_contiguous(memory_format=torch.channels_last)
    normalized = ImageTransform(size=16, seed=3, dtype=torch.bfloat16).apply(images, boxes, flips)
    assert normalized.dtype == torch.bfloat16 and abs(float(normalized.float().mean())) < 2.5


def test_the_gather_sends_its_geometry_in_one_non_blocking_copy(monkeypatch):
    """torch.tensor(..., device="cuda") is a blocking copy: torch waits for the stream to drain after it. The gather
    made four of them a batch (sizes, boxes, flips) and the normalization two more, which held the loader's thread
    until the GPU had done the work queued before them. Now: one non-blocking copy of one host table, and the
    normalization's constants made once per device. Stand-in: Tensor.to records what a CUDA move was asked."""
    from tfr_torch.images import transforms

    moves = []
    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("device")
        if isinstance(target, (str, torch.device)) and torch.device(target).type == "cuda":
            moves.append((tuple(self.shape), kwargs.get("non_blocking", False), self.is_pinned()))
            return self
        return real_to(self, *args, **kwargs)

    g = torch.Generator().manual_seed(1)
    sizes = [(40, 50), (33, 21), (64, 64), (375, 500)]
    images = [torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g).permute(2, 0, 1) for h, w in sizes]
    boxes, flips = TRAIN.plan(sizes, 0, 0, range(4))
    monkeypatch.setattr(torch.Tensor, "to", to)
    heights, widths, starts, box, flipped = transforms._geometry(images, boxes, flips, torch.device("cuda"))
    assert moves == [((4, 8), True, False)]  # one copy, non-blocking
    assert heights.tolist() == [h for h, _ in sizes] and widths.tolist() == [w for _, w in sizes]
    areas = [h * w for h, w in sizes]
    assert starts.tolist() == [sum(areas[:k]) for k in range(4)]
    assert box.dtype == torch.float32 and torch.equal(box, torch.as_tensor(boxes, dtype=torch.float32))
    assert flipped.dtype == torch.bool and flipped.tolist() == list(flips)
    moves.clear()
    transforms._normalizer.cache_clear()
    first = transforms._normalizer((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), torch.device("cuda", 0))
    again = transforms._normalizer((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), torch.device("cuda", 0))
    assert len(moves) == 2 and again is first  # made once per device, then reused
    transforms._normalizer.cache_clear()
    monkeypatch.setattr(torch.Tensor, "to", real_to)
    mean = torch.tensor((0.485, 0.456, 0.406)) * 255.0  # the values the batch arithmetic used before
    inv = 1.0 / (torch.tensor((0.229, 0.224, 0.225)) * 255.0)
    assert torch.equal(first[0], mean) and torch.equal(first[1], inv)


class Recorder(loader_module.Streams):
    """The CUDA streams and events of a DeviceLoader, recorded: which batch was prepared, recorded, waited for."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.count = 0

    def record(self):
        self.count += 1
        self.log.append(("record", self.count))
        return self.count

    def wait(self, event, tensors):
        self.log.append(("wait", event))


class Pulls:
    """A loader that logs each batch it hands out."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log
        self.dataset = inner.dataset

    def __iter__(self):
        for k, batch in enumerate(self.inner):
            self.log.append(("pull", k + 1))
            yield batch

    def __len__(self):
        return len(self.inner)


@pytest.mark.parametrize("prefetch", [0, 1, 2, 3])
def test_prefetch_prepares_the_next_batches_before_handing_one_out(shard, monkeypatch, prefetch):
    log: list = []
    monkeypatch.setattr(loader_module, "streams_for", lambda device: Recorder(log))
    loader = DeviceLoader(Pulls(DataLoader(dataset(shard), batch_size=None), log), "cpu", transform=TRAIN,
                          prefetch=prefetch, thread=False)
    for number, batch in enumerate(loader, 1):
        log.append(("train", number))
        assert batch["image/encoded"].shape[1:] == (3, 16, 16)
    trains = [i for i, entry in enumerate(log) if entry[0] == "train"]
    assert len(trains) == 5
    for number, at in enumerate(trains, 1):
        pulled = max(e[1] for e in log[:at] if e[0] == "pull")
        assert pulled == min(number + prefetch, 5)  # exactly `prefetch` batches ahead (5 batches in all)
        assert log[at - 1] == ("wait", number)  # the training stream waits for this batch's event only
        recorded = [e[1] for e in log[:at] if e[0] == "record"]
        assert recorded == list(range(1, min(number + prefetch, 5) + 1))


@pytest.mark.parametrize("prefetch", [1, 2, 3])
def test_a_thread_prepares_at_most_prefetch_batches_ahead(shard, monkeypatch, prefetch):
    import threading
    import time

    log: list = []
    monkeypatch.setattr(loader_module, "streams_for", lambda device: Recorder(log))
    loader = DeviceLoader(Pulls(DataLoader(dataset(shard), batch_size=None), log), "cpu", transform=TRAIN,
                          prefetch=prefetch, thread=True)
    main = threading.get_ident()
    pulled_by: list = []
    original = loader._prepare

    def prepare(*args):
        pulled_by.append(threading.get_ident())
        return original(*args)

    monkeypatch.setattr(loader, "_prepare", prepare)
    it = iter(loader)
    first = next(it)
    deadline = time.monotonic() + 30
    while sum(e[0] == "pull" for e in log) < min(1 + prefetch, 5) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # would it run further ahead? It must not
    assert sum(e[0] == "pull" for e in log) == min(1 + prefetch, 5)
    rest = list(it)
    waits = [e[1] for e in log if e[0] == "wait"]
    assert waits == [1, 2, 3, 4, 5]  # each batch's own event, in order
    assert [b["label"].tolist() for b in [first, *rest]] == [b["label"].tolist() for b in
                                                           DeviceLoader(DataLoader(dataset(shard), batch_size=None),
                                                                        "cpu", transform=TRAIN, thread=False)]
    assert len(pulled_by) == 5 and main not in pulled_by  # prepared in the background thread


def test_a_thread_raises_the_bad_batch_in_its_place_and_stops_when_abandoned(shard, tmp_path):
    import threading

    path = str(tmp_path / "bad.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(9):
            data = jpeg(k)
            writer.write_example({"image/encoded": data[: len(data) // 2] if k == 7 else data, "label": k})
    data = tfr_torch.TFRecordDataset(path, SPEC, batch_size=3)
    got = []
    with pytest.raises(DecodeError, match=r"^cannot decode image epoch 0, batch 2, item 1 \("):
        for batch in DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN, thread=True):
            got.append(batch["label"].tolist())
    assert got == [[0, 1, 2], [3, 4, 5]]  # the batches before the bad one, then its error
    before = {t for t in threading.enumerate() if t.name == "tfr_torch DeviceLoader"}
    it = iter(DeviceLoader(DataLoader(dataset(shard), batch_size=None), "cpu", transform=TRAIN, thread=True))
    next(it)
    it.close()  # the training loop breaks out: the thread stops
    left = {t for t in threading.enumerate() if t.name == "tfr_torch DeviceLoader"} - before
    assert not any(t.is_alive() for t in left)


def run(loader) -> list:
    return [(b["label"].tolist(), b["image/encoded"].clone()) for b in loader]


def test_resume_through_the_loader_sees_the_same_batches_and_crops(shard):
    whole = run(DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None), "cpu", transform=TRAIN))
    assert sorted(sum((labels for labels, _ in whole), [])) == list(range(23))
    first = DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None), "cpu", transform=TRAIN)
    it = iter(first)
    for _ in range(2):
        next(it)
    state = first.state_dict()
    assert state["samples"] == 10 and state["batches"] == 2 and state["loader"]["yielded"] == 2
    again = DeviceLoader(DataLoader(dataset(shard, shuffle=True), batch_size=None), "cpu", transform=TRAIN)
    again.load_state_dict(state)
    rest = run(again)
    assert [labels for labels, _ in rest] == [labels for labels, _ in whole[2:]]
    for (_, got), (_, want) in zip(rest, whole[2:]):
        assert torch.equal(got, want)


def test_len_and_set_epoch_pass_through(shard):
    data = dataset(shard, shuffle=True)
    loader = DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN)
    assert len(loader) == 5
    first = run(loader)
    loader.set_epoch(1)
    assert data.epoch == 1 and loader.epoch == 1 and loader.state_dict()["epoch"] == 1
    second = run(loader)
    assert [labels for labels, _ in first] != [labels for labels, _ in second]
    eval_loader = DeviceLoader(DataLoader(dataset(shard), batch_size=None), "cpu",
                               transform=ImageTransform(16, train=False, dtype=torch.uint8))
    assert [b["image/encoded"].dtype for b in eval_loader] == [torch.uint8] * 5


def test_a_bad_image_is_named_by_its_place_or_its_name_key(shard, tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(6):
            data = jpeg(k)
            writer.write_example({"image/encoded": data[: len(data) // 3] if k == 4 else data, "label": k,
                                  "name": f"img{k}.jpg"})
    tfr_torch.build_index(path, path + ".idx")
    spec = dict(SPEC, name=tfr_torch.FixedLenFeature([], tfr_torch.string))
    data = tfr_torch.TFRecordDataset(path, spec, index="auto", batch_size=3)
    with pytest.raises(DecodeError, match=r"^cannot decode image epoch 0, batch 1, item 1 \("):
        list(DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN))
    with pytest.raises(DecodeError, match=r"^cannot decode image img4.jpg \("):
        list(DeviceLoader(DataLoader(data, batch_size=None), "cpu", transform=TRAIN, names="name"))


def test_decode_images_in_dataloader_workers(shard):
    transform = DecodeImages(ImageTransform(16, train=False, dtype=torch.uint8))
    data = dataset(shard, transform=transform)
    batches = list(DataLoader(data, batch_size=None, num_workers=2))
    assert sorted(sum((b["label"].tolist() for b in batches), [])) == list(range(23))
    assert all(b["image/encoded"].shape[1:] == (3, 16, 16) for b in batches)
    here = {int(label): image for b in DataLoader(dataset(shard), batch_size=None)
            for label, image in zip(b["label"], transform(b)["image/encoded"])}
    for b in batches:
        for label, image in zip(b["label"], b["image/encoded"]):
            assert torch.equal(image, here[int(label)])
    with pytest.raises(ValueError, match=r"^DecodeImages with a training transform needs index="):
        DecodeImages(TRAIN)


def _in_a_slab(tensor: torch.Tensor) -> bool:
    """Whether the tensor's memory lies in a worker's slab as this process maps it (see transport.slab_tensor)."""
    address = tensor.untyped_storage().data_ptr()
    for mapping in list(receive._MAPS.values()):
        if mapping.closed:
            continue
        start = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
        if start <= address < start + len(mapping):
            return True
    return False


@pytest.mark.skipif(not transport.shared_memory_available(), reason="no memfd_create or /proc here")
@pytest.mark.parametrize("channels_last", [False, True])
def test_worker_batches_of_images_arrive_without_a_copy_and_stay_intact_while_kept(shard, channels_last):
    """DecodeImages in a worker writes the batch into a slab of the worker's transport; the main process gets a view
    of it, and the slab is not written again while any batch (or a view of one) is kept: an epoch's batches kept to
    the end (more than a worker's slabs, so later ones are made in new shared memory) equal the in-process ones."""
    transform = DecodeImages(ImageTransform(16, train=False, dtype=torch.uint8, channels_last=channels_last))
    data = tfr_torch.TFRecordDataset(shard, SPEC, index="auto", batch_size=2, transform=transform)
    here = {int(label): image for b in DataLoader(dataset(shard), batch_size=None)
            for label, image in zip(b["label"], transform(b)["image/encoded"])}
    for workers in (1, 2):
        kept = list(DataLoader(data, batch_size=None, num_workers=workers))
        assert len(kept) == 12 > slabs._MAX_SLABS
        assert _in_a_slab(kept[0]["image/encoded"])
        rows = [(int(label), image) for b in kept for label, image in zip(b["label"], b["image/encoded"])]
        assert sorted(label for label, _ in rows) == list(range(23))
        for label, image in rows:
            assert torch.equal(image, here[int(label)]), (workers, label)
        assert all(b["image/encoded"].is_contiguous(
            memory_format=torch.channels_last if channels_last else torch.contiguous_format) for b in kept)
    del kept, rows, image
    gc.collect()
    data = tfr_torch.TFRecordDataset(shard, SPEC, index="auto", batch_size=2, transform=transform,
                                     shared_memory=False)
    batch = next(iter(DataLoader(data, batch_size=None, num_workers=1)))  # no transport: torch's shared memory
    assert not _in_a_slab(batch["image/encoded"]) and batch["image/encoded"].is_shared()


def png(k: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(k).integers(0, 256, (30 + k, 45, 3), np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("channels_last", [True, False])
def test_decode_images_equals_decoding_then_resizing_each_crop(dtype, channels_last):
    # JPEGs (crops planned from their headers, each decoded just before its resize) and a PNG (no size in the
    # header: decoded first); every crop against its own copy resized by torch on its own
    items = [jpeg(0), png(1), jpeg(2), jpeg(3), jpeg(4)]
    transform = ImageTransform(16, train=True, seed=5, dtype=dtype, channels_last=channels_last)
    got = DecodeImages(transform, index="label")({"image/encoded": items, "label": torch.arange(10, 15)})
    images = [tfr_torch.decode_image(data, "RGB") for data in items]
    boxes, flips = transform.plan([tuple(image.shape[-2:]) for image in images], 0, 0, range(10, 15))
    out = got["image/encoded"]
    assert out.shape == (5, 3, 16, 16) and out.dtype == dtype and torch.equal(got["label"], torch.arange(10, 15))
    assert out.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    mean = torch.tensor(transform.mean)[:, None, None]
    std = torch.tensor(transform.std)[:, None, None]
    for image, box, flip, pixels in zip(images, boxes, flips, out):
        top, left, h, w = (int(round(v)) for v in box)
        want = F.interpolate(image[None, :, top:top + h, left:left + w].contiguous(), size=(16, 16),
                             mode="bilinear", antialias=True)[0]
        want = want.flip(-1) if flip else want
        if dtype == torch.uint8:
            assert torch.equal(pixels, want)
        else:
            assert torch.allclose(pixels, (want / 255.0 - mean) / std, atol=1e-5)
    assert torch.equal(out, transform.apply(images, boxes, flips))


class WarningTorchvision:
    """A stand-in torchvision.io whose decode_jpeg warns at every call, as torchvision 0.29 does (its decoding moves
    to TorchCodec), plus a warning of another kind; it decodes with Pillow."""

    class ImageReadMode:
        UNCHANGED, GRAY, RGB = "UNCHANGED", "GRAY", "RGB"

    @staticmethod
    def decode_jpeg(data: torch.Tensor, mode: str = "UNCHANGED") -> torch.Tensor:
        import warnings

        warnings.warn("The image decoding and encoding capabilities of TorchVision are deprecated (stand-in)",
                      DeprecationWarning, stacklevel=2)
        warnings.warn("another notice", UserWarning, stacklevel=2)
        return tfr_torch.decode_image(bytes(data.numpy()), mode, backend="pillow")


def test_decode_images_filters_torchvisions_notice_once_a_batch(monkeypatch):
    """torchvision warns at every decode; DecodeImages installs one filter for its whole batch (not one an image:
    entering and leaving warnings.catch_warnings costs ~25 us), the notice never reaches the user, other warnings
    do, and the filters are as they were afterwards."""
    import warnings

    from tfr_torch.images import _accel

    monkeypatch.setattr(_accel, "torchvision_io", lambda: WarningTorchvision)
    installed = []
    real = _accel._quiet_torchvision
    monkeypatch.setattr(_accel, "_quiet_torchvision", lambda: installed.append(1) or real())
    items = [jpeg(k) for k in range(5)]
    transform = ImageTransform(16, train=False, dtype=torch.uint8)
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = DecodeImages(transform, backend="torchvision")({"image/encoded": items})["image/encoded"]
    assert warnings.filters == before
    assert [str(w.message) for w in seen] == ["another notice"] * 5
    assert installed == [1]  # one filter for the five decodes
    assert torch.equal(got, DecodeImages(transform, backend="pillow")({"image/encoded": items})["image/encoded"])
    installed.clear()
    with warnings.catch_warnings(record=True) as seen:  # one image outside a batch: its own filter
        warnings.simplefilter("always")
        tfr_torch.decode_image(items[0], "RGB", backend="torchvision")
    assert [str(w.message) for w in seen] == ["another notice"] and installed == [1]


def test_resizing_on_the_cpu_leaves_torch_threads_as_they_were():
    images = [tfr_torch.decode_image(jpeg(k), "RGB") for k in range(3)]
    transform = ImageTransform(16, train=False)
    boxes, flips = transform.plan([tuple(image.shape[-2:]) for image in images], 0, 0, range(3))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        transform.apply(images, boxes, flips)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_decode_images_keys_training_crops_by_the_workers_epoch_and_rank(shard):
    """The crops made in DataLoader workers are those ImageTransform.plan gives for the dataset's epoch and DDP rank:
    the same as DeviceLoader makes for them, and another rank or epoch gets other crops."""
    train = ImageTransform(16, train=True, dtype=torch.uint8, mean=None, std=None, seed=5)
    transform = DecodeImages(train, index="label")

    def crops(rank: int, epoch: int) -> dict[int, torch.Tensor]:
        data = tfr_torch.TFRecordDataset(shard, SPEC, index="auto", batch_size=4, rank=rank, world_size=2,
                                         transform=transform)
        data.set_epoch(epoch)
        return {int(label): image for b in DataLoader(data, batch_size=None, num_workers=1)
                for label, image in zip(b["label"], b["image/encoded"])}

    raw = {int(b["label"][k]): bytes(b["image/encoded"][k]) for b in DataLoader(dataset(shard), batch_size=None)
           for k in range(len(b["label"]))}
    for rank, epoch in ((0, 0), (1, 0), (1, 3)):
        got = crops(rank, epoch)
        for label, image in got.items():
            pixels = tfr_torch.decode_image(raw[label], "RGB")
            boxes, flips = train.plan([tuple(pixels.shape[-2:])], epoch, rank, [label])
            assert torch.equal(image, train.apply([pixels], boxes, flips)[0]), (rank, epoch, label)
    in_process = DecodeImages(train, index="label", rank=1)
    batch = next(iter(DataLoader(dataset(shard), batch_size=None)))
    pixels = tfr_torch.decode_image(bytes(batch["image/encoded"][0]), "RGB")
    boxes, flips = train.plan([tuple(pixels.shape[-2:])], 0, 1, [int(batch["label"][0])])
    assert torch.equal(in_process(batch)["image/encoded"][0], train.apply([pixels], boxes, flips)[0])


def test_the_background_thread_runs_on_the_loaders_cuda_device(shard, monkeypatch):
    """DeviceLoader("cuda:1") prepares batches in a thread whose current device is cuda:1, not the default (a
    stand-in records set_device; the batches stay on the CPU here)."""
    import threading

    calls: list = []
    pretend_cuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append((device, threading.get_ident())))
    monkeypatch.setattr(loader_module, "streams_for", lambda device: loader_module.Streams())
    monkeypatch.setattr(loader_module, "decode_views", lambda items, *args, **kwargs: [
        (tfr_torch.decode_image(d, "RGB"), (0, 0)) for d in items])
    batches = list(DeviceLoader(DataLoader(dataset(shard), batch_size=None), "cuda:1", transform=TRAIN))
    assert len(batches) == 5
    assert len(calls) == 1 and calls[0][0] == torch.device("cuda:1") and calls[0][1] != threading.get_ident()


def test_rlds_frames_through_the_device_loader_with_a_device_transform():
    """Decoded batches (RLDS frames: images decoded in the workers) go through DeviceLoader with images=None; its
    device_transform resizes them there, as the same resize in the workers (frame_transform) would, and the count
    of samples is the batch's first dimension."""
    from tfr_torch.rlds import FrameDataset, Source, Window, resize_images

    def frames(**kwargs):
        here = os.path.dirname(os.path.abspath(__file__))
        folder = os.path.join(here, "data", "tfds", "rlds", "rlds_golden", "1.0.0")
        return FrameDataset({"golden": Source(folder)}, Window(history=2, future=4), batch_size=4, shuffle_buffer=16,
                            seed=0, **kwargs)

    resize = resize_images((4, 5))
    in_workers = list(DataLoader(frames(frame_transform=resize), batch_size=None))
    loader = DeviceLoader(DataLoader(frames(), batch_size=None), "cpu", images=None, device_transform=resize)
    on_device = list(loader)
    assert len(on_device) == len(in_workers) > 1
    for got, want in zip(on_device, in_workers):
        assert got["observation"]["image"].shape[-2:] == (4, 5)
        assert torch.equal(got["observation"]["image"], want["observation"]["image"])
        assert torch.equal(got["action"], want["action"])
    assert loader.state_dict()["samples"] == sum(len(b["action"]) for b in in_workers)
    with pytest.raises(ValueError, match="needs images="):
        DeviceLoader(DataLoader(frames(), batch_size=None), "cpu", images=None, transform=TRAIN)
