"""`location_key`: each decoded item (or batch) carries its records' locations, "path:offset", as TFDS's
`add_tfds_id` does, from TFRecordDataset (in order, shuffled through the index, GZIP, DataLoader workers, resumed)
and IndexedTFRecordDataset; and DeviceLoader names a bad image by it (path and offset on the DecodeError, on the
CPU and through a GPU batch with a stand-in decoder)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.errors import DecodeError

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}


def write(path: str, count: int, compression: str | None = None, start: int = 0) -> dict[int, str]:
    """The file, its index, and {id: "path:offset"} from the index (what location_key must give)."""
    with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
        for i in range(start, start + count):
            writer.write_example({"id": i, "pad": np.zeros(i % 7 + 1, np.int64)})  # records of different sizes
    tfr_torch.build_index(path, path + ".idx")
    offsets = tfr_torch.read_index(path + ".idx", path)
    return {start + k: f"{path}:{int(offsets[k, 0])}" for k in range(count)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("where")
    truth: dict[int, str] = {}
    paths = []
    for n, compression in enumerate([None, "gzip"]):
        path = str(folder / f"part-{n}.tfrecord") + (".gz" if compression else "")
        truth.update(write(path, 17 + n * 6, compression, start=100 * n))
        paths.append(path)
    return paths, truth


def pairs(items) -> dict[int, str]:
    out = {}
    for item in items:
        ids, where = item["id"], item["where"]
        if ids.dim() == 0:
            out[int(ids)] = where
        else:
            assert len(where) == len(ids)
            out.update(zip(ids.tolist(), where))
    return out


@pytest.mark.parametrize("batch_size", [None, 4])
@pytest.mark.parametrize("shuffle", [False, True])
def test_each_item_carries_its_records_location(files, batch_size, shuffle):
    paths, truth = files
    data = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", shuffle=shuffle, batch_size=batch_size,
                                     location_key="where")
    assert pairs(data) == truth


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
def test_locations_travel_from_dataloader_workers_and_through_collation(files):
    paths, truth = files
    batched = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", batch_size=5, location_key="where")
    assert pairs(DataLoader(batched, batch_size=None, num_workers=2)) == truth
    single = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", shuffle=True, location_key="where")
    collated = list(DataLoader(single, batch_size=6, num_workers=2))  # strings collate into lists
    assert all(isinstance(b["where"], list) for b in collated)
    assert pairs(collated) == truth


def test_a_resumed_dataset_and_a_sequence_example_dataset_say_where_too(files, tmp_path):
    paths, truth = files
    first = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", shuffle=True, location_key="where")
    it = iter(first)
    head = [next(it) for _ in range(9)]
    again = tfr_torch.TFRecordDataset(paths, SPEC, index="auto", shuffle=True, location_key="where")
    again.load_state_dict(first.state_dict())
    assert pairs(head + list(again)) == truth
    path = str(tmp_path / "seq.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(3):
            writer.write(tfr_torch.encode_sequence_example({"id": i}, {"steps": [[1]] * (i + 1)}))
    spec = tfr_torch.SequenceFeatures(context={"id": tfr_torch.FixedLenFeature([], torch.int64)},
                                      sequence={"steps": tfr_torch.FixedLenSequenceFeature([], torch.int64)})
    rows = list(tfr_torch.TFRecordDataset(path, spec, location_key="where"))
    offsets = [0]
    for record in list(tfr_torch.read_records(path))[:-1]:
        offsets.append(offsets[-1] + len(record) + 16)
    assert [row["where"] for row in rows] == [f"{path}:{o}" for o in offsets]


def test_the_map_style_dataset_says_where(files):
    paths, truth = files
    data = tfr_torch.IndexedTFRecordDataset(paths[:1], SPEC, location_key="where")
    assert pairs(data[i] for i in range(len(data))) == {k: v for k, v in truth.items() if k < 100}
    assert pairs(data.__getitems__([3, 0, 16])) == {k: truth[k] for k in (3, 0, 16)}


def test_location_key_is_checked_at_construction(files):
    paths, _ = files
    with pytest.raises(ValueError, match="location_key needs features="):
        tfr_torch.TFRecordDataset(paths, location_key="where")
    with pytest.raises(ValueError, match="location_key 'id' is already a key of the decoded items"):
        tfr_torch.TFRecordDataset(paths, SPEC, location_key="id")
    with pytest.raises(TypeError, match="location_key must be a non-empty str"):
        tfr_torch.IndexedTFRecordDataset(paths[:1], SPEC, location_key="")
    spec = tfr_torch.SequenceFeatures(context=SPEC)
    with pytest.raises(ValueError, match="location_key 'context' is already a key"):
        tfr_torch.TFRecordDataset(paths, spec, location_key="context")


def jpeg(k: int, width: int = 48, height: int = 40) -> bytes:
    rng = np.random.default_rng(k)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


IMAGES = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
          "label": tfr_torch.FixedLenFeature([], torch.int64)}


@pytest.fixture(scope="module")
def bad_shard(tmp_path_factory):
    """Six images, the fifth cut to a third; the bad record's location from the index."""
    path = str(tmp_path_factory.mktemp("bad") / "bad.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for k in range(6):
            data = jpeg(k)
            writer.write_example({"image/encoded": data[: len(data) // 3] if k == 4 else data, "label": k})
    tfr_torch.build_index(path, path + ".idx")
    return path, int(tfr_torch.read_index(path + ".idx", path)[4, 0])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
@pytest.mark.parametrize("workers", [0, 2])
def test_the_device_loader_names_a_bad_images_record(bad_shard, workers):
    from tfr_torch.images import DeviceLoader, ImageTransform

    path, offset = bad_shard
    data = tfr_torch.TFRecordDataset(path, IMAGES, index="auto", batch_size=3, location_key="where")
    loader = DeviceLoader(DataLoader(data, batch_size=None, num_workers=workers), "cpu",
                          transform=ImageTransform(16, train=True, seed=1))
    with pytest.raises(DecodeError) as raised:
        list(loader)
    err = raised.value
    assert (err.path, err.offset, err.key, err.index) == (path, offset, "image/encoded", 1)
    assert str(err).startswith(f"{path}:{offset}: cannot decode image (")
    # without the key: named by its place, as before
    plain = tfr_torch.TFRecordDataset(path, IMAGES, index="auto", batch_size=3)
    with pytest.raises(DecodeError, match=r"^cannot decode image epoch 0, batch 1, item 1 \(") as raised:
        list(DeviceLoader(DataLoader(plain, batch_size=None), "cpu", transform=ImageTransform(16, train=True)))
    assert raised.value.path is None


def test_a_gpu_batch_names_a_bad_images_record(bad_shard, monkeypatch):
    """Through the GPU path (a stand-in nvImageCodec on a pretend CUDA device): the structure check refuses the
    cut JPEG by its record's location, before any GPU call."""
    from cuda_standin import pretend_cuda
    from test_gpu_decode import RELEASES, clear_caches, fake_nvimgcodec

    from tfr_torch.images import DeviceLoader, _accel
    from tfr_torch.images import loader as loader_module

    pretend_cuda(monkeypatch)
    monkeypatch.setattr(_accel, "torchvision_io", lambda: None)
    monkeypatch.setattr(_accel, "torchcodec_decoders", lambda: None)
    nvi = fake_nvimgcodec("0.9", **RELEASES["0.9"])
    monkeypatch.setattr(_accel, "nvimgcodec", lambda: nvi)
    monkeypatch.setattr(loader_module, "streams_for", lambda device: loader_module.Streams())
    clear_caches()
    try:
        path, offset = bad_shard
        data = tfr_torch.TFRecordDataset(path, IMAGES, index="auto", batch_size=3, location_key="where")
        loader = DeviceLoader(DataLoader(data, batch_size=None), "cuda:0", thread=False)
        batches = iter(loader)
        first = next(batches)
        assert len(first["image/encoded"]) == 3 and len(nvi.log["decoded"]) > 0
        with pytest.raises(DecodeError) as raised:
            next(batches)
        assert (raised.value.path, raised.value.offset, raised.value.index) == (path, offset, 1)
    finally:
        clear_caches()


def test_a_mixture_or_a_cache_of_located_datasets_says_where_too(files, tmp_path):
    """DeviceLoader reads `location_key` off the loader's dataset: MixedDataset and CachedDataset pass theirs on."""
    paths, truth = files
    one, two = (tfr_torch.TFRecordDataset(p, SPEC, index="auto", location_key="where") for p in paths)
    mixed = tfr_torch.MixedDataset([one, two], seed=3)
    assert mixed.location_key == "where"
    assert pairs(mixed) == truth
    assert tfr_torch.MixedDataset([one, tfr_torch.TFRecordDataset(paths[1], SPEC, index="auto")]).location_key is None
    cached = tfr_torch.CachedDataset(one, str(tmp_path / "cache"))
    assert cached.location_key == "where"
    assert pairs(cached) == {k: v for k, v in truth.items() if k < 100}
