"""Audit of the image converters (`convert_image_folder`, `convert_dataset`, `tfr-torch convert`; the code in
tfr_torch/tools/convert.py, convert_jobs.py and convert_run.py) against what docs/guides/images.md, cli.md and the
docstrings promise: every image of an ImageFolder-layout folder in exactly one record, once, with torchvision's
label, whatever the shard and worker counts; byte-identical output for any worker count and rerun; the documented
feature keys, readable back by TFRecordDataset with valid index files; broken files named; resumption that never
mixes records of two different listings; arguments checked before anything is written.

Images are tiny PNGs made with Pillow in tmp_path (PNG: lossless, so `keep`, `png` and `raw` give the pixels back
exactly); ImageFolder's listing is re-implemented here from torchvision's `find_classes` / `make_dataset`, without
torchvision.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import signal

import numpy as np
import pytest
import torch
from PIL import Image

import tfr_torch
from tfr_torch import DecodeError, TFRecordDataset, build_index, decode_image, parse_tensor, read_index
from tfr_torch.tools.cli import main as cli_main
from tfr_torch.tools.convert import convert_dataset, convert_image_folder, image_folder_items

EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def _save(path, seed, mode="RGB", size=(5, 4), fmt=None):
    """A tiny image of random pixels (seeded) at `path`; returns its uint8 [C, H, W] pixels as Pillow decodes it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), np.uint8)).convert(mode)
    img.save(path, format=fmt)
    with Image.open(path) as back:
        array = np.asarray(back)
    array = array[:, :, None] if array.ndim == 2 else array
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def _torchvision_listing(root):
    """(path, label) in the order of torchvision's ImageFolder: find_classes (sorted scandir dirs) and make_dataset
    (sorted os.walk with followlinks, sorted files, a case-insensitive extension match)."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    items = []
    for label, name in enumerate(classes):
        for folder, _, files in sorted(os.walk(os.path.join(root, name), followlinks=True)):
            for file in sorted(files):
                if file.lower().endswith(EXTENSIONS):
                    items.append((os.path.join(folder, file), label))
    return items, classes


def _tricky_folder(root):
    """Class names that sort by code point ("10" < "9" < "B" < "a" < "with space" < "ä"), nested folders, upper-case
    extensions, a hidden image (ImageFolder keeps it), non-images, a folder named like an image, a symlink to an
    image of another class. Returns {path: pixels} of every image file."""
    pixels = {}
    layout = ["10/x.png", "9/b.PNG", "9/a.png", "B/one.png", "a/deep/er/z.png", "a/deep/y.png", "a/top.png",
              "with space/f i l e.png", "ä/ünï.png", "a/.hidden.png"]
    for seed, rel in enumerate(layout):
        pixels[os.path.join(root, rel)] = _save(os.path.join(root, rel), seed, fmt="PNG")
    with open(os.path.join(root, "a", "notes.txt"), "w") as f:
        f.write("not an image")
    with open(os.path.join(root, "a", ".DS_Store"), "wb") as f:
        f.write(b"\0\0\0\1Bud1")
    os.makedirs(os.path.join(root, "B", "dir.png"))  # a folder, not a file
    os.symlink(os.path.join(root, "10", "x.png"), os.path.join(root, "B", "link.png"))
    pixels[os.path.join(root, "B", "link.png")] = pixels[os.path.join(root, "10", "x.png")]
    with open(os.path.join(root, "stray.png"), "wb") as f:  # a file beside the class folders: no class, left out
        f.write(b"junk")
    return pixels


def _records(paths):
    return list(TFRecordDataset(paths, features="auto"))


def _all_files(folder):
    return {name: open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}


class Toy:
    """A map-style dataset of (PIL image, target) with targets of several types, and `classes`."""

    classes = ["zero", "one", "two"]

    def __init__(self):
        self.items = [(Image.fromarray(np.full((3, 4, 3), i * 40, np.uint8)), t)
                      for i, t in enumerate([0, np.int64(2), torch.tensor(1), torch.tensor([2]), 7])]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Ballast:
    """Like torchvision's CIFAR10 (every image in one array held by the dataset): 64 tiny images; counts how often
    it is pickled in this process."""

    pickled = 0

    def __init__(self):
        self.data = np.arange(64 * 4 * 4 * 3, dtype=np.uint32).astype(np.uint8).reshape(64, 4, 4, 3)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return Image.fromarray(self.data[i]), i % 3

    def __getstate__(self):
        type(self).pickled += 1
        return self.__dict__


@pytest.fixture
def tricky(tmp_path):
    root = str(tmp_path / "src")
    return root, _tricky_folder(root)


@pytest.mark.parametrize("workers, records_per_shard", [(1, 1), (2, 3), (2, 100)])
def test_every_image_once_with_imagefolders_label_and_pixels(tricky, tmp_path, workers, records_per_shard):
    """Every image file appears in exactly one record, in ImageFolder's order, with its label, class text, relative
    filename, the file's bytes (keep), sizes that describe decode_image's result and the original pixels."""
    root, pixels = tricky
    expected, classes = _torchvision_listing(root)
    items, found_classes = image_folder_items(root)
    assert (items, found_classes) == (expected, classes)
    out = str(tmp_path / "out")
    result = convert_image_folder(root, out, "t", workers=workers, records_per_shard=records_per_shard)
    assert result.records == len(expected) == len(pixels) and result.skipped == []
    assert len(result.paths) == -(-len(expected) // records_per_shard)
    records = _records(result.paths)
    assert [r["image/filename"] for r in records] == [os.fsencode(os.path.relpath(p, root)) for p, _ in expected]
    for record, (path, label) in zip(records, expected):
        assert int(record["image/class/label"]) == label
        assert record["image/class/text"] == classes[label].encode()
        assert record["image/format"] == b"png"
        assert record["image/encoded"] == open(path, "rb").read()
        decoded = decode_image(record["image/encoded"])
        assert torch.equal(decoded, pixels[path])
        assert [int(record[k]) for k in ("image/channels", "image/height", "image/width")] == list(decoded.shape)


@pytest.mark.parametrize("fmt", ["keep", "png", "raw"])
def test_output_is_byte_identical_for_any_worker_count_and_rerun(tricky, tmp_path, fmt):
    """workers=1, workers=2 and a rerun from scratch make the same files, byte for byte: shards, indexes, sidecar."""
    root, _ = tricky
    outs = []
    for n, workers in enumerate([1, 2, 2]):
        out = str(tmp_path / f"out{n}")
        convert_image_folder(root, out, "t", format=fmt, workers=workers, records_per_shard=4, check=n != 2)
        outs.append(_all_files(out))
    assert outs[0] == outs[1] == outs[2]
    assert sum(name.endswith(".idx") for name in outs[0]) == 3


@pytest.mark.parametrize("fmt", ["png", "raw", "jpeg"])
def test_reencoded_formats_give_the_original_pixels(tricky, tmp_path, fmt):
    """png and raw store the pixels exactly (raw: serialize_tensor of uint8 [C, H, W]); jpeg those of a JPEG of
    them at that quality, within 2 levels."""
    root, pixels = tricky
    expected, _ = _torchvision_listing(root)
    result = convert_image_folder(root, str(tmp_path / "out"), "t", format=fmt, quality=100, workers=2)
    records = _records(result.paths)
    assert len(records) == len(expected)
    for record, (path, _label) in zip(records, expected):
        assert record["image/format"] == fmt.encode()
        if fmt == "raw":
            got = parse_tensor(record["image/encoded"])
        else:
            got = decode_image(record["image/encoded"])
        assert [int(record[k]) for k in ("image/channels", "image/height", "image/width")] == list(got.shape)
        if fmt == "jpeg":  # noise in 5x4 px does not survive JPEG: the pixels of Pillow's own JPEG of the original
            reference = io.BytesIO()
            Image.fromarray(pixels[path].permute(1, 2, 0).numpy()).save(reference, "JPEG", quality=100)
            assert (got.int() - decode_image(reference.getvalue()).int()).abs().max() <= 2
        else:
            assert torch.equal(got, pixels[path])


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_index_files_describe_their_shards(tricky, tmp_path, compression):
    """Each shard's .idx is what build_index makes of the shard, and read_index accepts it against the shard."""
    root, _ = tricky
    out = str(tmp_path / "out")
    result = convert_image_folder(root, out, "t", records_per_shard=3, compression=compression)
    total = 0
    for n, path in enumerate(result.paths):
        assert path.endswith(f"t-train.tfrecord-{n:05d}-of-{len(result.paths):05d}")
        index = read_index(path + ".idx", path)
        build_index(path, str(tmp_path / "rebuilt.idx"))
        assert np.array_equal(index, read_index(str(tmp_path / "rebuilt.idx")))
        total += len(index)
    assert total == result.records
    ds = TFRecordDataset(result.paths, features="auto", index="auto", shuffle=True, seed=3)
    assert sorted(r["image/filename"] for r in ds) == sorted(r["image/filename"] for r in _records(result.paths))


def test_more_shards_than_images_and_a_tiny_shard_size(tricky, tmp_path):
    """A shard size smaller than one record puts each record in a shard of its own; none is empty."""
    root, _ = tricky
    expected, _ = _torchvision_listing(root)
    result = convert_image_folder(root, str(tmp_path / "out"), "t", shard_size=1)
    assert len(result.paths) == len(expected)
    assert [len(read_index(p + ".idx", p)) for p in result.paths] == [1] * len(expected)


def test_a_broken_file_deep_in_a_unicode_folder_is_named(tricky, tmp_path):
    """A corrupt image, an image cut short and a dangling symlink: on_error="raise" stops naming the first and
    leaves no set; "skip" lists each by its item number and path, and no record carries any of them."""
    root, _ = tricky
    good = open(os.path.join(root, "a", "top.png"), "rb").read()
    broken = {os.path.join(root, "ä", "deep", "kaputt.png"): good[: len(good) // 2],
              os.path.join(root, "9", "c.jpg"): b"this is text, not a JPEG"}
    for path, data in broken.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    dangling = os.path.join(root, "B", "gone.png")
    os.symlink(os.path.join(root, "nowhere.png"), dangling)
    items, _ = image_folder_items(root)
    paths = [p for p, _ in items]
    first = min([*broken, dangling], key=paths.index)
    out = str(tmp_path / "out")
    with pytest.raises(DecodeError, match="on_error='skip'") as info:
        convert_image_folder(root, out, "t", workers=2)
    assert str(info.value).startswith(first + ": ")
    assert not [n for n in os.listdir(out) if ".tfrecord-" in n and "-of-" in n]
    with pytest.warns(UserWarning, match="skipped: "):
        result = convert_image_folder(root, str(tmp_path / "out2"), "t", workers=2, on_error="skip")
    assert sorted(index for index, _ in result.skipped) == sorted(paths.index(p) for p in [*broken, dangling])
    for index, reason in result.skipped:
        assert reason.startswith(paths[index] + ": ")
    names = {r["image/filename"] for r in _records(result.paths)}
    assert len(names) == result.records == len(items) - 3
    assert not names & {os.fsencode(os.path.relpath(p, root)) for p in [*broken, dangling]}


def test_zero_images_with_allow_empty_writes_an_empty_set(tmp_path):
    """Class folders that are all empty (allow_empty=True): no shard, zero records, no leftover progress file."""
    root = tmp_path / "src"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    out = str(tmp_path / "out")
    result = convert_image_folder(str(root), out, "t", allow_empty=True, workers=2)
    assert (result.paths, result.records, result.skipped) == ([], 0, [])
    assert os.listdir(out) == ["t-train.tfr_torch.json"]


def test_a_rerun_replaces_an_earlier_set_and_leaves_other_splits_alone(tricky, tmp_path):
    """Converting again into the same folder with fewer shards removes the earlier set's extra shards (no mix of
    two sets), and a set of another split in the same folder is untouched."""
    root, _ = tricky
    out = str(tmp_path / "out")
    val = convert_image_folder(root, out, "t", "val", records_per_shard=5)
    val_files = {n: b for n, b in _all_files(out).items() if "-val." in n}
    convert_image_folder(root, out, "t", records_per_shard=2)
    result = convert_image_folder(root, out, "t", records_per_shard=5)
    train = sorted(n for n in os.listdir(out) if n.startswith("t-train.tfrecord-"))
    assert train == sorted([os.path.basename(p) for p in result.paths] + [os.path.basename(p) + ".idx"
                                                                          for p in result.paths])
    assert {n: b for n, b in _all_files(out).items() if "-val." in n} == val_files
    assert len(_records(result.paths)) == len(_records(val.paths)) == result.records


def test_tfds_folder_output_reads_back(tricky, tmp_path):
    """tfds=True writes OUT/NAME/VERSION/ with TFDS's metadata; TFRecordDataset(folder, split=...) reads every image."""
    root, _ = tricky
    expected, classes = _torchvision_listing(root)
    out = str(tmp_path / "out")
    result = convert_image_folder(root, out, "t", tfds=True, version="1.2.3", records_per_shard=4)
    folder = os.path.join(out, "t", "1.2.3")
    assert all(os.path.dirname(p) == folder for p in result.paths)
    assert {"dataset_info.json", "features.json"} <= set(os.listdir(folder))
    labels = [int(r["image/class/label"]) for r in TFRecordDataset(folder, split="train")]
    assert labels == [label for _, label in expected]


def test_convert_dataset_targets_and_classes(tmp_path):
    """Targets given as ints, numpy ints and 0-d / 1-element tensors all become the int64 label; the class text
    comes from dataset.classes; a target outside classes keeps its number as text."""
    result = convert_dataset(Toy(), str(tmp_path / "out"), "toy", image_format="png", workers=2,
                             records_per_shard=2)
    records = _records(result.paths)
    assert [int(r["image/class/label"]) for r in records] == [0, 2, 1, 2, 7]
    assert [r["image/class/text"] for r in records] == [b"zero", b"two", b"one", b"two", b"7"]
    for i, record in enumerate(records):
        assert torch.equal(decode_image(record["image/encoded"]), torch.full((3, 3, 4), i * 40, dtype=torch.uint8))


# ------------------------------------------------------------------------------------------- defects, fixed


def test_a_relative_folder_is_read_where_it_was_listed_by_engine_workers(tricky, tmp_path, monkeypatch):
    """Fixed: the job kept the relative paths of a relative SRC and opened them in the process that ran it, so a
    Ray worker with another working directory (any other node, or a runtime_env working_dir) found no file: every
    image "No such file or directory" (reproduced with a real `ray.init(runtime_env={"working_dir": ...})`).
    Here a stand-in for tfr_torch.ray.convert.ordered_map ships the job as Ray does (pickled) and runs it in
    another working directory."""
    pytest.importorskip("ray")
    import tfr_torch.ray.convert as ray_convert

    root, _ = tricky
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def ordered_map(job, indices, *, address=None):
        job = pickle.loads(pickle.dumps(job))
        for i in indices:
            with contextlib.chdir(elsewhere):  # the worker's directory while it runs, not while the caller writes
                item = job(i)
            yield item

    monkeypatch.setattr(ray_convert, "ordered_map", ordered_map)
    monkeypatch.chdir(tmp_path)
    result = convert_image_folder("src", "out", "t", engine="ray", records_per_shard=4)
    reference = convert_image_folder(root, str(tmp_path / "ref"), "t", records_per_shard=4)
    assert result.records == reference.records and result.skipped == []
    assert [open(p, "rb").read() for p in result.paths] == [open(p, "rb").read() for p in reference.paths]


class _StandInRay:
    """What tfr_torch.ray.convert.connect uses of `ray`, doing to SIGTERM what ray.init and ray.shutdown do (Ray
    2.x: init sets a handler that raises SystemExit; shutdown leaves it)."""

    def __init__(self) -> None:
        self.up = False

    def is_initialized(self) -> bool:
        return self.up

    def init(self, **kwargs) -> None:
        self.up = True
        signal.signal(signal.SIGTERM, self.handler)

    def shutdown(self) -> None:
        self.up = False

    @staticmethod
    def handler(signum, frame):
        raise SystemExit(signum)


def test_a_ray_started_for_a_conversion_leaves_sigterm_as_it_was(monkeypatch):
    """Fixed: the Ray engine started a local Ray when none was running and shut it down when done, which left Ray's
    SIGTERM handler in the caller's process: SIGTERM then raised SystemExit instead of ending the process, and a
    process forked later (a multiprocessing pool's worker, e.g. Hugging Face datasets' num_proc) that got SIGTERM
    as it started lost the signal and never ended (the pool's terminate waited for it for ever)."""
    pytest.importorskip("ray")
    import tfr_torch.ray.convert as ray_convert

    stand_in = _StandInRay()
    monkeypatch.setattr(ray_convert, "ray", stand_in)
    before = signal.getsignal(signal.SIGTERM)
    try:
        disconnect = ray_convert.connect()
        assert disconnect is not None and stand_in.up
        assert signal.getsignal(signal.SIGTERM) == _StandInRay.handler  # what ray.init does
        disconnect()
        assert not stand_in.up and signal.getsignal(signal.SIGTERM) == before
        stand_in.up = True  # a Ray the caller runs: left to the caller, running
        assert ray_convert.connect() is None and stand_in.up
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize("workers", [2, 3])
def test_the_dataset_is_not_shipped_to_the_workers_with_every_chunk(tmp_path, workers):
    """Fixed: each chunk of 8 items was submitted to the process pool with the whole job, so the dataset (or a
    folder's full listing) was pickled and sent once per chunk: a 20 MB dataset of 256 items took 2.7 s with
    workers=2 against 0.06 s with workers=1, and CIFAR-10 (150 MB, 6,250 chunks) would pickle about 1 TB. Now the
    job reaches each worker once, when it starts (forked: never pickled), and the output is unchanged."""
    Ballast.pickled = 0
    result = convert_dataset(Ballast(), str(tmp_path / "out"), "b", image_format="png", workers=workers,
                             records_per_shard=10)
    assert Ballast.pickled <= workers
    reference = convert_dataset(Ballast(), str(tmp_path / "ref"), "b", image_format="png", records_per_shard=10)
    assert _all_files(tmp_path / "out") == _all_files(tmp_path / "ref")
    assert result.records == reference.records == 64


def _stop_at_a_broken_file(root, out, **kwargs):
    """A run stopped by a broken image after its first shard (items 0, 1) was finished; the file is then fixed."""
    broken = os.path.join(root, "b", "4.png")
    with open(broken, "wb") as f:
        f.write(b"junk")
    with pytest.raises(DecodeError, match="4.png"):
        convert_image_folder(root, out, "t", records_per_shard=2, **kwargs)
    assert any(n.endswith(".partial") for n in os.listdir(out))
    _save(broken, 99)


def test_resume_refuses_a_folder_whose_classes_changed(tmp_path):
    """Fixed: resumption compared only the number of items, so a class folder added since the interrupted run (an
    empty one with allow_empty, or a renamed class) resumed: the kept shard had the old labels, the new ones the
    shifted labels (class "b" was label 0 in shard 0 and 1 after it), silently. Now the listing is part of the
    settings: such a run is refused, and resume=False starts over with right labels."""
    root = str(tmp_path / "src")
    for i in range(6):
        _save(os.path.join(root, "b", f"{i}.png"), i)
    out = str(tmp_path / "out")
    _stop_at_a_broken_file(root, out, allow_empty=True)
    os.makedirs(os.path.join(root, "a"))
    with pytest.raises(ValueError, match="cannot resume from .*t-train.progress.json"):
        convert_image_folder(root, out, "t", records_per_shard=2, allow_empty=True)
    result = convert_image_folder(root, out, "t", records_per_shard=2, allow_empty=True, resume=False)
    assert [int(r["image/class/label"]) for r in _records(result.paths)] == [1] * 6


def test_resume_refuses_a_folder_with_other_files_of_the_same_count(tmp_path):
    """Fixed: a file removed and another added (the same count) resumed from the old shards: the removed image
    stayed in the set and one of the remaining ones was never converted. Now refused; a folder only fixed in place
    (the broken file rewritten) still resumes."""
    root = str(tmp_path / "src")
    for i in range(6):
        _save(os.path.join(root, "b", f"{i}.png"), i)
    out = str(tmp_path / "out")
    _stop_at_a_broken_file(root, out)
    os.rename(os.path.join(root, "b", "0.png"), os.path.join(root, "b", "9.png"))
    with pytest.raises(ValueError, match="cannot resume"):
        convert_image_folder(root, out, "t", records_per_shard=2)
    os.rename(os.path.join(root, "b", "9.png"), os.path.join(root, "b", "0.png"))
    with pytest.warns(UserWarning, match="resuming"):
        result = convert_image_folder(root, out, "t", records_per_shard=2)
    assert result.resumed_from == 2
    assert [r["image/filename"] for r in _records(result.paths)] == [f"b/{i}.png".encode() for i in range(6)]


@pytest.mark.parametrize("kwargs, message", [
    (dict(workers=0), "workers must be a positive int (the number of encoding processes), got 0"),
    (dict(workers=2.5), "workers must be a positive int (the number of encoding processes), got 2.5"),
    (dict(workers="2"), "workers must be a positive int (the number of encoding processes), got '2'"),
    (dict(quality=500, format="jpeg"), "quality must be a JPEG quality, an int from 0 to 100, got 500"),
    (dict(quality="high", format="jpeg"), "quality must be a JPEG quality, an int from 0 to 100, got 'high'"),
])
def test_bad_workers_and_quality_are_refused_before_anything_is_written(tricky, tmp_path, kwargs, message):
    """Fixed: workers=0 (or 2.5, "2") ran silently in one process (max(int(workers), 1)) and a quality of 500 or
    "high" was handed to Pillow, which made JPEGs of it without a word; the CLI refused both. Now a ValueError
    naming the value, before the output folder is made."""
    root, _ = tricky
    out = tmp_path / "out"
    with pytest.raises(ValueError) as info:
        convert_image_folder(root, str(out), "t", **kwargs)
    assert str(info.value) == message
    assert not out.exists()
    if "quality" in kwargs:
        with pytest.raises(ValueError, match="quality must be"):
            convert_dataset([(Image.new("RGB", (2, 2)), 0)], str(out), "t", quality=kwargs["quality"])
    ok = convert_image_folder(root, str(out), "t", workers=np.int64(2), quality=np.int64(90), format="jpeg")
    assert ok.records == len(_torchvision_listing(root)[0])


def test_a_class_folder_name_that_is_not_utf8(tmp_path, capsys):
    """A class folder named in Latin-1 (not UTF-8): the sidecar set stores the names' bytes as they are on disk and
    reads back. Fixed: with tfds=True the conversion wrote `image.class.label.labels.txt` in Latin-1 and finished,
    leaving a TFDS folder that TFRecordDataset(folder) (and TFDS) failed to open with a UnicodeDecodeError; now
    refused before anything is written, naming the folder (the CLI: one line, status 1)."""
    src = os.fsencode(str(tmp_path / "src"))
    for n, name in enumerate([b"caf\xe9", b"dog"]):
        _save(os.fsdecode(os.path.join(src, name, b"x\xff.png")), n)
    result = convert_image_folder(os.fsdecode(src), str(tmp_path / "out"), "t")
    records = _records(result.paths)
    assert [(r["image/filename"], r["image/class/text"]) for r in records] == [
        (b"caf\xe9/x\xff.png", b"caf\xe9"), (b"dog/x\xff.png", b"dog")]
    out = tmp_path / "tfds"
    with pytest.raises(ValueError, match=r"has a name that is not UTF-8 \(b'caf\\xe9'\)"):
        convert_image_folder(os.fsdecode(src), str(out), "t", tfds=True)
    assert not out.exists()
    assert cli_main(["convert", os.fsdecode(src), str(out), "--name", "t", "--tfds", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not UTF-8" in err[0]


# ------------------------------------------------------------------------------------------------------ CLI


def test_cli_convert_relative_paths_match_the_api(tricky, tmp_path, monkeypatch, capsys):
    """`tfr-torch convert src out` with relative paths, 2 workers: status 0, the shard paths on stdout, files
    byte-identical to the API's; an OUT that is an existing file is one line and status 1."""
    root, _ = tricky
    monkeypatch.chdir(tmp_path)
    assert cli_main(["convert", "src", "cli", "--name", "t", "--workers", "2", "--shard-size", "300", "-q"]) == 0
    printed = capsys.readouterr().out.split()
    api = convert_image_folder(root, str(tmp_path / "api"), "t", shard_size=300)
    assert [os.path.basename(p) for p in printed] == [os.path.basename(p) for p in api.paths]
    assert _all_files(tmp_path / "cli") == _all_files(tmp_path / "api")
    (tmp_path / "afile").write_text("x")
    assert cli_main(["convert", "src", "afile", "--name", "t", "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tfr-torch convert: ") and "afile" in err[0]


def test_decode_keys_are_documented_ones(tricky, tmp_path):
    """The records carry exactly the documented keys (tools/convert.py's table), folders with image/filename."""
    root, _ = tricky
    result = convert_image_folder(root, str(tmp_path / "out"), "t")
    keys = {"image/encoded", "image/format", "image/height", "image/width", "image/channels", "image/class/label",
            "image/class/text", "image/filename"}
    for record in tfr_torch.read_records(result.paths[0]):
        parsed = tfr_torch.decode_example(record)
        assert set(parsed) == keys
