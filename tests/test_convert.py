"""Conversion tools: convert_image_folder / convert_dataset, decode_image, the sidecar as datasets read it, and the
`tfr-torch convert / inspect / reshard` commands.

Images are generated small (16-40 px) with numpy + Pillow. torchvision is not needed: the torchvision-style path
is exercised with small dataset classes that mimic CIFAR10 / MNIST / ImageFolder (`__getitem__` -> (PIL image,
int), a `classes` attribute). ShardedWriter itself is tested in test_shards.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

import tfr_torch
from tfr_torch import DecodeError, FixedLenFeature, TFRecordDataset, decode_image, string
from tfr_torch.decode.sidecar import spec_to_json
from tfr_torch.tools import convert_jobs
from tfr_torch.tools.convert import convert_dataset, convert_image_folder, image_folder_items
from tfr_torch.tools.cli import main as cli_main
from tfr_torch.tools.progress import Progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The spec a reader would write by hand for these shards (TF-Slim / build_image_data.py keys).
SPEC = {
    "image/encoded": FixedLenFeature([], string),
    "image/format": FixedLenFeature([], string),
    "image/height": FixedLenFeature([], torch.int64),
    "image/width": FixedLenFeature([], torch.int64),
    "image/channels": FixedLenFeature([], torch.int64),
    "image/class/label": FixedLenFeature([], torch.int64),
    "image/class/text": FixedLenFeature([], string),
    "image/filename": FixedLenFeature([], string),
}
DATASET_SPEC = {k: v for k, v in SPEC.items() if k != "image/filename"}
SHARD_RE = re.compile(r"^(?P<name>.+)-(?P<split>[^-]+)\.tfrecord-(?P<i>\d{5})-of-(?P<n>\d{5})$")


# --------------------------------------------------------------------------------------------- helpers


def _pattern(rng, h, w, channels):
    """A smooth gradient with some noise: compresses like a photo, small files."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 127 // max(h + w - 2, 1))],
                    axis=-1)
    noisy = base + rng.integers(-20, 21, base.shape)
    array = np.clip(noisy, 0, 255).astype(np.uint8)
    if channels == 1:
        return array[:, :, 0]
    if channels == 4:
        return np.concatenate([array, rng.integers(0, 256, (h, w, 1)).astype(np.uint8)], axis=-1)
    return array


def _save(path, array, fmt, **kwargs):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(array).save(path, fmt, **kwargs)


# (relative path, PIL save format, height, width, channels, extra save args).
# The list is in the order torchvision's ImageFolder yields the files: classes sorted by folder name (case
# sensitive: "Zebra" < "bird"), then folder by folder as sorted(os.walk(...)) visits them (the class folder's own
# files before its subfolders'), files sorted by name. "bird/b1.jpg" holds a PNG under a .jpg name.
FOLDER_IMAGES = [
    ("Zebra/z0.png", "PNG", 18, 21, 3, {}),
    ("bird/b0.png", "PNG", 40, 40, 3, {}),
    ("bird/b1.jpg", "PNG", 16, 20, 1, {}),
    ("cat/c1.png", "PNG", 17, 19, 1, {}),
    ("cat/c2.jpg", "JPEG", 30, 22, 3, {"quality": 90}),
    ("cat/c3.JPG", "JPEG", 16, 16, 3, {"quality": 80, "subsampling": 2}),
    ("cat/z9.png", "PNG", 25, 31, 4, {}),
    ("cat/nested/n0.jpg", "JPEG", 21, 23, 1, {"quality": 85}),
    ("cat/nested/n1.png", "PNG", 18, 26, 4, {}),
    ("dog/d0.png", "PNG", 20, 16, 3, {}),
    ("dog/d1.jpeg", "JPEG", 24, 32, 3, {"quality": 95}),
]
CLASSES = ["Zebra", "bird", "cat", "dog"]
IGNORED = ["cat/notes.txt", "README.md", "dog/d2.jpg.txt"]


def _make_folder(root):
    rng = np.random.default_rng(1234)
    for rel, fmt, h, w, c, kwargs in FOLDER_IMAGES:
        _save(os.path.join(root, rel), _pattern(rng, h, w, c), fmt, **kwargs)
    for rel in IGNORED:
        with open(os.path.join(root, rel), "w") as f:
            f.write("not an image\n")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A read-only image folder (tests that change it copy it first)."""
    return _make_folder(str(tmp_path_factory.mktemp("images") / "src"))


def _label(rel):
    return CLASSES.index(rel.split("/")[0])


def pillow_pixels(source):
    """uint8 [C, H, W] as TensorFlow / torchvision decode the file: L, LA, RGB, RGBA as stored, palettes expanded."""
    with Image.open(source if not isinstance(source, bytes) else io.BytesIO(source)) as img:
        if img.mode == "P":
            img = img.convert("RGBA" if "transparency" in img.info else "RGB")
        elif img.mode not in ("L", "LA", "RGB", "RGBA"):
            img = img.convert("RGB")
        array = np.array(img)  # a writable copy
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def read_all(paths):
    out = []
    for path in paths:
        with tfr_torch.read_records(path) as records:
            out.extend(records)
    return out


def parsed(paths, spec=SPEC):
    return [tfr_torch.parse_single_example(r, spec) for r in read_all(paths)]


def dir_bytes(path):
    """{file name: bytes} of everything in a folder (hidden temporary files included)."""
    return {name: open(os.path.join(path, name), "rb").read() for name in sorted(os.listdir(path))}


def final_shards(out_dir):
    return sorted(n for n in os.listdir(out_dir) if SHARD_RE.match(n))


def load_sidecar(out_dir, name, split="train"):
    with open(os.path.join(out_dir, f"{name}-{split}.tfr_torch.json")) as f:
        return json.load(f)


def cli(*args, cwd=None, **env_vars):
    env = {**os.environ, **env_vars}
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.run([sys.executable, "-m", "tfr_torch", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd or ROOT)


def run_cli(*args):
    """The command line run in this process (`main(argv)`), which is quicker than `cli`'s subprocess."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            rc = exc.code
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


def check_shard_set(out_dir, name, split, paths):
    """TFDS names in order, one .idx per shard identical to build_index's, sidecar counts right."""
    n = len(paths)
    assert n >= 1
    assert paths == [os.path.join(str(out_dir), f"{name}-{split}.tfrecord-{i:05d}-of-{n:05d}") for i in range(n)]
    assert final_shards(out_dir) == [os.path.basename(p) for p in paths]
    sidecar = load_sidecar(out_dir, name, split)
    assert sidecar["format"] == "tfr_torch.shards/1"
    assert (sidecar["name"], sidecar["split"]) == (name, split)
    assert sidecar["tfr_torch_version"] == tfr_torch.__version__
    total = 0
    assert len(sidecar["shards"]) == n
    for path, entry in zip(paths, sidecar["shards"]):
        count = len(read_all([path]))
        assert entry["file"] == os.path.basename(path)
        assert entry["records"] == count
        assert entry["bytes"] == os.path.getsize(path)
        rebuilt = tfr_torch.build_index(path, str(path) + ".rebuilt")
        assert open(path + ".idx", "rb").read() == open(rebuilt, "rb").read()
        os.remove(rebuilt)
        total += count
    assert sidecar["records"] == total
    return sidecar


# ------------------------------------------------------------------------------- image folders: layout


def test_image_folder_items_follow_imagefolder_order(folder):
    items, classes = image_folder_items(folder)
    assert classes == CLASSES
    assert items == [(os.path.join(folder, *rel.split("/")), _label(rel)) for rel, *_ in FOLDER_IMAGES]


def test_folder_without_class_folders_is_refused(tmp_path):
    _save(str(tmp_path / "loose.png"), np.zeros((4, 4), np.uint8), "PNG")
    with pytest.raises(FileNotFoundError, match="class"):
        convert_image_folder(str(tmp_path), str(tmp_path / "out"), "x")


def test_bad_arguments_are_refused(folder, tmp_path):
    with pytest.raises(ValueError, match="format"):
        convert_image_folder(folder, str(tmp_path / "a"), "x", format="gif")
    with pytest.raises(ValueError, match="on_error"):
        convert_image_folder(folder, str(tmp_path / "b"), "x", on_error="ignore")


# --------------------------------------------------------------------- image folders: keep, round trip


@pytest.fixture(scope="module")
def kept(folder, tmp_path_factory):
    """The folder converted with format "keep" into several shards."""
    out = str(tmp_path_factory.mktemp("kept") / "out")
    result = convert_image_folder(folder, out, "imgs", "train", shard_size="4KB")
    return out, result


def test_keep_shards_have_tfds_names_indexes_and_counts(folder, kept):
    out, result = kept
    assert len(result.paths) >= 3, "the test wants several shards"
    sidecar = check_shard_set(out, "imgs", "train", result.paths)
    assert sidecar["records"] == result.records == len(FOLDER_IMAGES)
    assert result.skipped == []
    assert result.resumed_from == 0
    assert result.bytes_in == sum(os.path.getsize(os.path.join(folder, *rel.split("/"))) for rel, *_ in FOLDER_IMAGES)
    assert sidecar["compression"] is None
    assert sidecar["features"] == spec_to_json(SPEC)
    assert sidecar["image"]["encoding"] == "keep"
    assert sidecar["image"]["classes"] == CLASSES
    # nothing else is left behind: no progress file, no partial shards, no temporary files
    expected = {os.path.basename(p) for p in result.paths} | {os.path.basename(p) + ".idx" for p in result.paths}
    assert set(os.listdir(out)) == expected | {"imgs-train.tfr_torch.json"}


def test_keep_bytes_labels_and_fields(folder, kept):
    out, result = kept
    records = parsed(result.paths)
    assert len(records) == len(FOLDER_IMAGES)
    for record, (rel, fmt, h, w, c, _) in zip(records, FOLDER_IMAGES):
        path = os.path.join(folder, *rel.split("/"))
        assert record["image/encoded"] == open(path, "rb").read(), rel
        assert record["image/format"] == fmt.lower().encode(), rel  # from the content, not the file name
        assert int(record["image/height"]) == h and int(record["image/width"]) == w, rel
        assert int(record["image/channels"]) == c, rel
        assert int(record["image/class/label"]) == _label(rel), rel
        assert record["image/class/text"] == rel.split("/")[0].encode(), rel
        assert record["image/filename"] == os.path.join(*rel.split("/")).encode(), rel


def test_dataset_reads_shards_with_auto_and_explicit_features(kept):
    out, result = kept
    pattern = os.path.join(out, "imgs-train.tfrecord-*")
    auto = list(TFRecordDataset(pattern, features="auto"))
    explicit = list(TFRecordDataset(result.paths, features=SPEC))
    expected = parsed(result.paths)
    assert len(auto) == len(explicit) == len(expected) == len(FOLDER_IMAGES)
    for a, e, x in zip(auto, explicit, expected):
        assert set(a) == set(e) == set(SPEC)
        for key in SPEC:
            if isinstance(x[key], bytes):
                assert a[key] == e[key] == x[key], key
            else:
                assert torch.equal(a[key], x[key]) and torch.equal(e[key], x[key]), key
    batched = list(TFRecordDataset(result.paths, features="auto", batch_size=4))
    assert torch.equal(torch.cat([b["image/class/label"] for b in batched]),
                       torch.tensor([_label(rel) for rel, *_ in FOLDER_IMAGES]))


def test_len_uses_the_sidecar_counts(kept, monkeypatch):
    out, result = kept
    sidecar = load_sidecar(out, "imgs")

    def no_scan(*args, **kwargs):
        raise AssertionError("len() scanned a file instead of using the sidecar's counts")

    monkeypatch.setattr("tfr_torch.data.epoch_records.EpochRecords._count_file", no_scan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback that reads the files (it would warn or scan)
        assert len(TFRecordDataset(result.paths)) == len(FOLDER_IMAGES)
        assert len(TFRecordDataset(result.paths, features="auto", batch_size=4)) == -(-len(FOLDER_IMAGES) // 4)
        for path, entry in zip(result.paths, sidecar["shards"]):
            assert len(TFRecordDataset(path)) == entry["records"]
        assert len(TFRecordDataset(result.paths[1:])) == len(FOLDER_IMAGES) - sidecar["shards"][0]["records"]


def test_verify_cli_passes_on_the_shards(kept):
    out, result = kept
    r = cli("verify", *result.paths)
    assert r.returncode == 0, r.stderr
    counts = [e["records"] for e in load_sidecar(out, "imgs")["shards"]]
    assert r.stdout.splitlines() == [f"{p}: OK, {n} records" for p, n in zip(result.paths, counts)]


def test_features_auto_needs_a_sidecar(kept, tmp_path):
    out, result = kept
    lone = tmp_path / "copy.tfrecord"
    shutil.copy(result.paths[0], lone)
    with pytest.raises(ValueError, match="sidecar"):
        TFRecordDataset(str(lone), features="auto")


@pytest.mark.parametrize("fmt", ["keep", "jpeg", "raw"])
def test_workers_give_byte_identical_output(folder, tmp_path, fmt):
    one = convert_image_folder(folder, str(tmp_path / "one"), "imgs", format=fmt, shard_size="3KB", workers=1)
    three = convert_image_folder(folder, str(tmp_path / "three"), "imgs", format=fmt, shard_size="3KB", workers=3)
    assert len(one.paths) >= 2
    assert [os.path.basename(p) for p in one.paths] == [os.path.basename(p) for p in three.paths]
    first, second = dir_bytes(str(tmp_path / "one")), dir_bytes(str(tmp_path / "three"))
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], name  # shards, indexes and the sidecar


# ----------------------------------------------------------------------- image folders: re-encoding


def test_format_jpeg_reencodes_with_quality(folder, tmp_path):
    high = convert_image_folder(folder, str(tmp_path / "q95"), "imgs", format="jpeg", quality=95)
    low = convert_image_folder(folder, str(tmp_path / "q30"), "imgs", format="jpeg", quality=30)
    assert load_sidecar(str(tmp_path / "q95"), "imgs")["image"]["encoding"] == "jpeg"
    hi_records, lo_records = parsed(high.paths), parsed(low.paths)
    assert sum(len(r["image/encoded"]) for r in lo_records) < sum(len(r["image/encoded"]) for r in hi_records)
    for record, (rel, fmt, h, w, c, _) in zip(hi_records, FOLDER_IMAGES):
        path = os.path.join(folder, *rel.split("/"))
        encoded = record["image/encoded"]
        assert encoded[:2] == b"\xff\xd8", rel
        assert record["image/format"] == b"jpeg"
        with Image.open(io.BytesIO(encoded)) as img:
            assert img.format == "JPEG"
        pixels = decode_image(encoded)
        want_channels = 1 if c == 1 else 3  # JPEG has no alpha
        assert pixels.shape == (want_channels, h, w), rel
        assert (int(record["image/height"]), int(record["image/width"])) == (h, w)
        assert int(record["image/channels"]) == want_channels, rel
        assert record["image/class/text"] == rel.split("/")[0].encode()
        assert record["image/filename"] == os.path.join(*rel.split("/")).encode()
        original = pillow_pixels(path)[:want_channels].float()
        error = (pixels.float() - original).abs().mean()
        assert error < 12, rel  # a faithful re-encoding (the images are noisy)
        coarse = (decode_image(lo_records[FOLDER_IMAGES.index((rel, fmt, h, w, c, _))]["image/encoded"]).float()
                  - original).abs().mean()
        assert coarse > error, rel  # quality 30 loses more


def test_format_png_is_lossless(folder, tmp_path):
    result = convert_image_folder(folder, str(tmp_path / "png"), "imgs", format="png", shard_size="4KB")
    check_shard_set(str(tmp_path / "png"), "imgs", "train", result.paths)
    for record, (rel, fmt, h, w, c, _) in zip(parsed(result.paths), FOLDER_IMAGES):
        path = os.path.join(folder, *rel.split("/"))
        assert record["image/encoded"][:8] == b"\x89PNG\r\n\x1a\n", rel
        assert record["image/format"] == b"png"
        pixels = decode_image(record["image/encoded"])
        assert torch.equal(pixels, pillow_pixels(path)), rel  # same pixels as the original file decodes to
        assert (int(record["image/height"]), int(record["image/width"]), int(record["image/channels"])) == (h, w, c)
        assert int(record["image/class/label"]) == _label(rel)


def test_format_raw_stores_the_pixel_tensor(folder, tmp_path):
    result = convert_image_folder(folder, str(tmp_path / "raw"), "imgs", format="raw")
    assert load_sidecar(str(tmp_path / "raw"), "imgs")["image"]["encoding"] == "raw"
    for record, (rel, fmt, h, w, c, _) in zip(parsed(result.paths), FOLDER_IMAGES):
        path = os.path.join(folder, *rel.split("/"))
        assert record["image/format"] == b"raw"
        tensor = tfr_torch.parse_tensor(record["image/encoded"], torch.uint8)
        assert tensor.dtype == torch.uint8
        assert torch.equal(tensor, pillow_pixels(path)), rel
        assert (int(record["image/height"]), int(record["image/width"]), int(record["image/channels"])) == (h, w, c)


def _palette_png(path, rng):
    Image.fromarray(_pattern(rng, 19, 17, 3)).convert("P", palette=Image.ADAPTIVE, colors=16).save(path, "PNG")


def _gray_alpha_png(path, rng):
    Image.fromarray(np.stack([_pattern(rng, 15, 22, 1), _pattern(rng, 15, 22, 1)[::-1]], axis=-1), "LA").save(path)


@pytest.mark.parametrize("mode", ["P", "LA"])
@pytest.mark.parametrize("fmt", ["keep", "png", "jpeg", "raw"])
def test_channels_field_matches_the_stored_pixels(tmp_path, fmt, mode):
    """image/channels must be the channel count of the image as stored (palette PNGs decode to RGB in TensorFlow,
    torchvision and decode_image; gray+alpha PNGs to 2 channels)."""
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    rng = np.random.default_rng(7)
    (_palette_png if mode == "P" else _gray_alpha_png)(str(src / "img.png"), rng)
    result = convert_image_folder(str(tmp_path / "src"), str(tmp_path / "out"), "m", format=fmt)
    (record,) = parsed(result.paths)
    if fmt == "raw":
        pixels = tfr_torch.parse_tensor(record["image/encoded"], torch.uint8)
    else:
        pixels = decode_image(record["image/encoded"])
    assert int(record["image/channels"]) == pixels.shape[0]
    assert (int(record["image/height"]), int(record["image/width"])) == tuple(pixels.shape[1:])


# --------------------------------------------------------------------------------------- decode_image


def test_decode_image_matches_pillow(folder):
    for rel, fmt, h, w, c, _ in FOLDER_IMAGES:
        path = os.path.join(folder, *rel.split("/"))
        data = open(path, "rb").read()
        pixels = decode_image(data)
        assert pixels.dtype == torch.uint8 and pixels.shape == (c, h, w), rel
        assert torch.equal(pixels, pillow_pixels(path)), rel
        assert torch.equal(decode_image(bytearray(data)), pixels)
        assert torch.equal(decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8)), pixels)


@pytest.mark.parametrize("mode", ["P", "LA"])
def test_decode_image_palette_and_gray_alpha(tmp_path, mode):
    path = str(tmp_path / "img.png")
    (_palette_png if mode == "P" else _gray_alpha_png)(path, np.random.default_rng(3))
    pixels = decode_image(open(path, "rb").read())
    assert torch.equal(pixels, pillow_pixels(path))  # P -> 3 channels, LA -> 2 (as TensorFlow and torchvision)


def test_decode_image_garbage_raises_decode_error_naming_it(folder):
    with pytest.raises(DecodeError, match=re.escape("shard-00003:1234")):
        decode_image(b"this is not an image at all", name="shard-00003:1234")
    data = open(os.path.join(folder, "cat", "c2.jpg"), "rb").read()
    with pytest.raises(DecodeError, match="cut.jpg"):
        decode_image(data[: len(data) // 2], name="cut.jpg")
    with pytest.raises(TypeError):
        decode_image(12345)


def test_decode_image_of_a_list_returns_a_list(folder):
    paths = [os.path.join(folder, *rel.split("/")) for rel, *_ in FOLDER_IMAGES[:4]]
    images = decode_image([open(p, "rb").read() for p in paths])
    assert isinstance(images, list) and len(images) == 4
    for image, path in zip(images, paths):
        assert torch.equal(image, pillow_pixels(path))
    assert decode_image([]) == []
    good = open(paths[0], "rb").read()
    with pytest.raises(DecodeError, match="second-one"):
        decode_image([good, b"\x00garbage"], name=["first-one", "second-one"])


# --------------------------------------------------------------------------------------- broken images


def _broken_folder(folder, tmp_path, which=("garbage", "truncated_jpeg")):
    """A copy of the folder plus broken images; returns (root, {kind: path}, good rels in order)."""
    root = str(tmp_path / "broken_src")
    shutil.copytree(folder, root)
    broken = {}
    if "garbage" in which:
        broken["garbage"] = os.path.join(root, "cat", "c2b.jpg")  # sorts between c2.jpg and c3.JPG
        with open(broken["garbage"], "wb") as f:
            f.write(np.random.default_rng(5).integers(0, 256, 3000).astype(np.uint8).tobytes())
    if "truncated_jpeg" in which:
        data = open(os.path.join(root, "dog", "d1.jpeg"), "rb").read()
        broken["truncated_jpeg"] = os.path.join(root, "bird", "b0z.jpg")  # after b0.png, before b1.jpg
        with open(broken["truncated_jpeg"], "wb") as f:
            f.write(data[: len(data) * 6 // 10])
    if "truncated_png" in which:
        data = open(os.path.join(root, "bird", "b0.png"), "rb").read()
        broken["truncated_png"] = os.path.join(root, "dog", "d0z.png")
        with open(broken["truncated_png"], "wb") as f:
            f.write(data[: len(data) * 6 // 10])
    return root, broken


@pytest.mark.parametrize("kind", ["garbage", "truncated_jpeg", "truncated_png"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_broken_image_stops_the_conversion_naming_it(folder, tmp_path, kind, workers):
    root, broken = _broken_folder(folder, tmp_path, (kind,))
    out = str(tmp_path / "out")
    with pytest.raises(DecodeError) as info:
        convert_image_folder(root, out, "imgs", workers=workers, records_per_shard=2)
    assert broken[kind] in str(info.value)
    assert final_shards(out) == []
    assert not os.path.exists(os.path.join(out, "imgs-train.tfr_torch.json"))


@pytest.mark.parametrize("workers", [1, 3])
def test_on_error_skip_skips_only_the_broken_images(folder, tmp_path, workers):
    root, broken = _broken_folder(folder, tmp_path)
    out = str(tmp_path / "out")
    result = convert_image_folder(root, out, "imgs", on_error="skip", workers=workers, shard_size="4KB")
    items, _ = image_folder_items(root)
    paths = [p for p, _ in items]
    assert len(result.skipped) == 2
    for kind, path in broken.items():
        hits = [entry for entry in result.skipped if path in entry[1]]
        assert len(hits) == 1, (kind, result.skipped)
        assert hits[0][0] == paths.index(path)  # the item's number
    assert result.records == len(FOLDER_IMAGES)
    records = parsed(result.paths)
    assert [r["image/filename"] for r in records] == [os.path.join(*rel.split("/")).encode()
                                                      for rel, *_ in FOLDER_IMAGES]
    for record, (rel, *_rest) in zip(records, FOLDER_IMAGES):
        assert record["image/encoded"] == open(os.path.join(root, *rel.split("/")), "rb").read()
        assert int(record["image/class/label"]) == _label(rel)
    sidecar = check_shard_set(out, "imgs", "train", result.paths)
    assert sidecar["records"] == len(FOLDER_IMAGES)


def test_cli_on_error_skip_prints_the_skipped_paths(folder, tmp_path):
    root, broken = _broken_folder(folder, tmp_path)
    r = run_cli("convert", root, tmp_path / "out", "--name", "imgs", "--workers", "1", "--on-error", "skip")
    assert r.returncode == 0, r.stderr
    for path in broken.values():
        assert path in r.stdout + r.stderr
    assert len(read_all(r.stdout.split())) == len(FOLDER_IMAGES)


def test_cli_broken_image_fails_with_its_path(folder, tmp_path):
    root, broken = _broken_folder(folder, tmp_path, ("garbage",))
    r = run_cli("convert", root, tmp_path / "out", "--name", "imgs", "--workers", "2", "-q")
    assert r.returncode == 1
    assert broken["garbage"] in r.stderr
    assert r.stdout == ""


# ---------------------------------------------------------------------------------------- resumption


class ToyCIFAR:
    """Like torchvision.datasets.CIFAR10: (PIL RGB image, int), `classes`. Counts its __getitem__ calls and, when
    asked, is interrupted (Ctrl-C) at one item."""

    classes = ["airplane", "automobile", "bird", "cat"]

    def __init__(self, n=11, interrupt_at=None, broken=(), size=(20, 24)):
        self.n, self.interrupt_at, self.broken, self.size = n, interrupt_at, set(broken), size
        self.calls = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        self.calls.append(i)
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        if i in self.broken:
            return "not an image", 0
        rng = np.random.default_rng(i)
        return Image.fromarray(_pattern(rng, *self.size, 3)), i % len(self.classes)


def test_interrupted_dataset_conversion_resumes(tmp_path, capsys):
    ref = convert_dataset(ToyCIFAR(), str(tmp_path / "ref"), "toy", image_format="png", records_per_shard=2)
    out = str(tmp_path / "out")
    first = ToyCIFAR(interrupt_at=7)
    with pytest.raises(KeyboardInterrupt):
        convert_dataset(first, out, "toy", image_format="png", records_per_shard=2)
    assert first.calls == list(range(8))
    assert final_shards(out) == [] and not os.path.exists(os.path.join(out, "toy-train.tfr_torch.json"))
    partials = sorted(n for n in os.listdir(out) if n.endswith(".partial"))
    # items 0-5 filled three shards; item 6's shard was open when item 7 was interrupted
    assert partials == [f"toy-train.tfrecord-{i:05d}.partial" for i in range(3)]
    kept = {i: os.stat(os.path.join(out, n)) for i, n in enumerate(partials)}
    capsys.readouterr()

    second = ToyCIFAR()
    with pytest.warns(UserWarning, match="resuming"):  # without progress=True the notice is a warning
        result = convert_dataset(second, out, "toy", image_format="png", records_per_shard=2)
    assert second.calls == list(range(6, 11))  # the finished shards' items are not read again
    assert result.resumed_from == 6
    assert result.records == 11
    for i, before in kept.items():
        after = os.stat(result.paths[i])
        assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    assert dir_bytes(out) == dir_bytes(str(tmp_path / "ref"))
    assert [os.path.basename(p) for p in result.paths] == [os.path.basename(p) for p in ref.paths]


def test_resume_false_starts_over(tmp_path, capsys):
    out = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        convert_dataset(ToyCIFAR(interrupt_at=7), out, "toy", image_format="raw", records_per_shard=2)
    capsys.readouterr()
    again = ToyCIFAR()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="resuming")
        result = convert_dataset(again, out, "toy", image_format="raw", records_per_shard=2, resume=False)
    assert "resuming" not in capsys.readouterr().err
    assert again.calls == list(range(11))
    assert result.resumed_from == 0
    ref = convert_dataset(ToyCIFAR(), str(tmp_path / "ref"), "toy", image_format="raw", records_per_shard=2)
    assert dir_bytes(out) == dir_bytes(os.path.dirname(ref.paths[0]))


def test_resume_with_other_settings_is_refused(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        convert_dataset(ToyCIFAR(interrupt_at=7), out, "toy", image_format="jpeg", records_per_shard=2)
    with pytest.raises(ValueError, match="cannot resume"):
        convert_dataset(ToyCIFAR(), out, "toy", image_format="jpeg", quality=50, records_per_shard=2)


def test_resume_keeps_each_skipped_item_once(tmp_path, capsys):
    """Item 2 is broken and skipped; shard 0 (items 0, 1) is finished when item 3 is written; the run is
    interrupted at item 4. The resumed run must report item 2 once, as an uninterrupted run does."""
    ref = convert_dataset(ToyCIFAR(broken={2}), str(tmp_path / "ref"), "toy", image_format="png",
                          records_per_shard=2, on_error="skip")
    assert [entry[0] for entry in ref.skipped] == [2]
    out = str(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        convert_dataset(ToyCIFAR(broken={2}, interrupt_at=4), out, "toy", image_format="png", records_per_shard=2,
                        on_error="skip")
    result = convert_dataset(ToyCIFAR(broken={2}), out, "toy", image_format="png", records_per_shard=2,
                             on_error="skip", progress=True)
    assert "resuming" in capsys.readouterr().err
    assert [list(entry) for entry in result.skipped] == [list(entry) for entry in ref.skipped]
    assert dir_bytes(out) == dir_bytes(str(tmp_path / "ref"))


def test_fixing_a_broken_image_and_rerunning_resumes(folder, tmp_path, capsys):
    """A conversion stopped by a broken image (workers=2) keeps its finished shards; once the file is replaced,
    the rerun resumes after them and gives what a conversion of the fixed folder gives."""
    root, broken = _broken_folder(folder, tmp_path, ("garbage",))  # cat/c2b.jpg, item 5 of 12
    out = str(tmp_path / "out")
    with pytest.raises(DecodeError):
        convert_image_folder(root, out, "imgs", records_per_shard=2, workers=2)
    partials = sorted(n for n in os.listdir(out) if n.endswith(".partial"))
    assert partials == [f"imgs-train.tfrecord-{i:05d}.partial" for i in range(2)]  # items 0-3
    kept = {i: os.stat(os.path.join(out, n)).st_ino for i, n in enumerate(partials)}
    shutil.copy(os.path.join(root, "cat", "c2.jpg"), broken["garbage"])
    capsys.readouterr()
    result = convert_image_folder(root, out, "imgs", records_per_shard=2, workers=2, progress=True)
    assert "resuming" in capsys.readouterr().err
    assert result.resumed_from == 4 and result.records == 12
    assert {i: os.stat(result.paths[i]).st_ino for i in kept} == kept
    ref = convert_image_folder(root, str(tmp_path / "ref"), "imgs", records_per_shard=2, workers=1)
    assert dir_bytes(out) == dir_bytes(os.path.dirname(ref.paths[0]))


class Failing(ToyCIFAR):
    def __getitem__(self, i):
        if i == 9:
            raise RuntimeError("disk on fire")
        return super().__getitem__(i)


def test_an_unexpected_error_in_a_worker_stops_the_conversion(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(RuntimeError, match="disk on fire"):
        convert_dataset(Failing(n=30), out, "toy", image_format="png", workers=2, records_per_shard=4)
    assert final_shards(out) == []
    assert not os.path.exists(os.path.join(out, "toy-train.tfr_torch.json"))


def _interrupt_folder_job(monkeypatch, at):
    real = convert_jobs._FolderJob.__call__

    def flaky(self, i):
        if i == at:
            raise KeyboardInterrupt
        return real(self, i)

    monkeypatch.setattr(convert_jobs._FolderJob, "__call__", flaky)


def test_interrupted_folder_conversion_resumes_from_the_cli(folder, tmp_path, monkeypatch):
    ref = str(tmp_path / "ref")
    convert_image_folder(folder, ref, "imgs", shard_size="1KB")
    out = str(tmp_path / "out")
    _interrupt_folder_job(monkeypatch, at=8)
    with pytest.raises(KeyboardInterrupt):
        convert_image_folder(folder, out, "imgs", shard_size="1KB")
    monkeypatch.undo()
    partials = sorted(n for n in os.listdir(out) if n.endswith(".partial"))
    assert len(partials) >= 2
    kept = {i: os.stat(os.path.join(out, n)) for i, n in enumerate(partials)}

    r = cli("convert", folder, out, "--name", "imgs", "--shard-size", "1KB", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert "resuming" in r.stderr
    printed = r.stdout.split()
    for i, before in kept.items():
        after = os.stat(printed[i])
        assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert dir_bytes(out) == dir_bytes(ref)


def test_cli_restart_ignores_an_interrupted_run(folder, tmp_path, monkeypatch):
    ref = str(tmp_path / "ref")
    convert_image_folder(folder, ref, "imgs", shard_size="1KB")
    out = str(tmp_path / "out")
    _interrupt_folder_job(monkeypatch, at=8)
    with pytest.raises(KeyboardInterrupt):
        convert_image_folder(folder, out, "imgs", shard_size="1KB")
    monkeypatch.undo()
    # spoil a finished shard without changing its size: a resumed run would keep it, a restarted one rewrites it
    partial = os.path.join(out, "imgs-train.tfrecord-00000.partial")
    data = bytearray(open(partial, "rb").read())
    data[20] ^= 0xFF
    open(partial, "wb").write(bytes(data))
    r = run_cli("convert", folder, out, "--name", "imgs", "--shard-size", "1KB", "--workers", "1", "--restart")
    assert r.returncode == 0, r.stderr
    assert "resuming" not in r.stderr
    assert dir_bytes(out) == dir_bytes(ref)
    assert run_cli("verify", "-q", *r.stdout.split()).returncode == 0


# -------------------------------------------------------------------------------- torchvision-style datasets


class ToyMNIST:
    """Like torchvision.datasets.MNIST: (PIL "L" 28x28 image, int target), `classes`."""

    classes = [f"{d} - {name}" for d, name in enumerate(["zero", "one", "two", "three", "four", "five", "six",
                                                            "seven", "eight", "nine"])]

    def __init__(self, n=7):
        self.images = [Image.fromarray(_pattern(np.random.default_rng(100 + i), 28, 28, 1), "L") for i in range(n)]
        self.targets = torch.tensor([(3 * i) % 10 for i in range(n)])

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], int(self.targets[i])


class ToyImageFolder:
    """Like torchvision.datasets.ImageFolder with no transform: (PIL RGB image loaded from a file, int)."""

    def __init__(self, root):
        self.samples, self.classes = image_folder_items(root)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, target = self.samples[i]
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB"), target


class ArrayDataset:
    """Items of mixed image types (PIL, uint8 tensors [C, H, W], numpy [H, W, C] / [H, W]) and target types."""

    def __init__(self, items, classes=None):
        self.items = items
        if classes is not None:
            self.classes = classes

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _mixed_items():
    rng = np.random.default_rng(11)
    rgb = _pattern(rng, 18, 22, 3)
    gray = _pattern(rng, 28, 28, 1)
    rgba = _pattern(rng, 16, 17, 4)
    items = [
        (Image.fromarray(rgb), 0),                                            # PIL RGB, int
        (Image.fromarray(gray), torch.tensor(1)),                             # PIL L (MNIST), tensor target
        (torch.from_numpy(rgb.transpose(2, 0, 1).copy()), np.int64(2)),       # tensor [3, H, W], numpy target
        (torch.from_numpy(gray[None].copy()), 1),                             # tensor [1, H, W]
        (torch.from_numpy(rgb).permute(2, 0, 1), torch.tensor([2])),          # non-contiguous tensor, [1] target
        (rgb.copy(), 0),                                                      # numpy [H, W, 3]
        (gray.copy(), 2),                                                     # numpy [H, W]
        (gray[:, :, None].copy(), 1),                                         # numpy [H, W, 1]
        (torch.from_numpy(gray.copy()), 0),                                   # tensor [H, W]
        (rgba.copy(), 1),                                                     # numpy [H, W, 4]
    ]
    # what each image is, as uint8 [C, H, W]
    pixels = [rgb, gray, rgb, gray, rgb, rgb, gray, gray, gray, rgba]
    expected = [torch.from_numpy(np.ascontiguousarray((p[:, :, None] if p.ndim == 2 else p).transpose(2, 0, 1)))
                for p in pixels]
    labels = [0, 1, 2, 1, 2, 0, 2, 1, 0, 1]
    return items, expected, labels


@pytest.mark.parametrize("image_format", ["png", "raw"])
def test_convert_dataset_lossless_formats(tmp_path, image_format):
    items, expected, labels = _mixed_items()
    classes = ["red", "green", "blue"]
    out = str(tmp_path / "out")
    result = convert_dataset(ArrayDataset(items, classes), out, "mixed", "test", image_format=image_format,
                             records_per_shard=4)
    assert result.records == len(items)
    sidecar = check_shard_set(out, "mixed", "test", result.paths)
    assert sidecar["features"] == spec_to_json(DATASET_SPEC)
    assert sidecar["image"]["classes"] == classes
    assert sidecar["image"]["encoding"] == image_format
    auto = list(TFRecordDataset(result.paths, features="auto"))
    assert len(auto) == len(items)
    for i, (record, want, label) in enumerate(zip(auto, expected, labels)):
        assert "image/filename" not in record
        if image_format == "raw":
            pixels = tfr_torch.parse_tensor(record["image/encoded"], torch.uint8)
        else:
            pixels = decode_image(record["image/encoded"])
        assert torch.equal(pixels, want), i
        assert record["image/format"] == image_format.encode()
        assert (int(record["image/channels"]), int(record["image/height"]), int(record["image/width"])) == \
            tuple(want.shape), i
        assert int(record["image/class/label"]) == label
        assert record["image/class/text"] == classes[label].encode()


def test_convert_dataset_jpeg(tmp_path):
    items, expected, labels = _mixed_items()
    result = convert_dataset(ArrayDataset(items), str(tmp_path / "out"), "mixed", image_format="jpeg", quality=90)
    sidecar = load_sidecar(str(tmp_path / "out"), "mixed")
    assert sidecar["image"]["classes"] is None
    for i, (record, want, label) in enumerate(zip(parsed(result.paths, DATASET_SPEC), expected, labels)):
        assert record["image/encoded"][:2] == b"\xff\xd8"
        assert record["image/format"] == b"jpeg"
        pixels = decode_image(record["image/encoded"])
        channels = 1 if want.shape[0] == 1 else 3
        assert pixels.shape == (channels, *want.shape[1:]), i
        assert int(record["image/channels"]) == channels
        assert (pixels.float() - want[:channels].float()).abs().mean() < 12, i  # noisy pixels, 4:2:0 chroma
        assert record["image/class/text"] == str(label).encode()  # no classes: the label as text


def test_convert_cifar_and_mnist_like_datasets(tmp_path):
    cifar = ToyCIFAR(n=6, size=(32, 32))
    result = convert_dataset(cifar, str(tmp_path / "cifar"), "cifar10", image_format="png")
    for i, record in enumerate(parsed(result.paths, DATASET_SPEC)):
        image, target = ToyCIFAR(n=6, size=(32, 32))[i]
        assert torch.equal(decode_image(record["image/encoded"]), pillow_pixels(_png_bytes(image)))
        assert int(record["image/class/label"]) == target
        assert record["image/class/text"] == ToyCIFAR.classes[target].encode()
        assert (int(record["image/height"]), int(record["image/width"]), int(record["image/channels"])) == (32, 32, 3)
    mnist = ToyMNIST()
    result = convert_dataset(mnist, str(tmp_path / "mnist"), "mnist", "test", image_format="raw",
                             classes=[str(d) for d in range(10)])  # `classes` overrides dataset.classes
    records = list(TFRecordDataset(result.paths, features="auto"))
    assert len(records) == len(mnist)
    for record, image, target in zip(records, mnist.images, mnist.targets.tolist()):
        assert torch.equal(tfr_torch.parse_tensor(record["image/encoded"]), torch.from_numpy(np.array(image))[None])
        assert int(record["image/class/label"]) == target
        assert record["image/class/text"] == str(target).encode()
        assert int(record["image/channels"]) == 1


def _png_bytes(image):
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_convert_imagefolder_like_dataset_matches_its_items(folder, tmp_path):
    dataset = ToyImageFolder(folder)
    result = convert_dataset(dataset, str(tmp_path / "out"), "imgs", image_format="png", workers=2)
    records = parsed(result.paths, DATASET_SPEC)
    assert len(records) == len(FOLDER_IMAGES)
    for record, (rel, fmt, h, w, c, _) in zip(records, FOLDER_IMAGES):
        rgb = pillow_pixels(_png_bytes(Image.open(os.path.join(folder, *rel.split("/"))).convert("RGB")))
        assert torch.equal(decode_image(record["image/encoded"]), rgb), rel
        assert int(record["image/class/label"]) == _label(rel)
        assert record["image/class/text"] == rel.split("/")[0].encode()


@pytest.mark.parametrize("bad", [
    "a string",
    [[1, 2], [3, 4]],
    torch.full((3, 8, 8), 1.5),  # a float image outside [0, 1]: not what ToTensor() makes
    torch.zeros(3, 8, 8, dtype=torch.int32),
    np.zeros((2, 3, 4, 5), dtype=np.uint8),
    np.zeros((8, 8, 3), dtype=np.float64),
])
def test_bad_item_type_raises_naming_the_item(tmp_path, bad):
    items, _, _ = _mixed_items()
    items[3] = (bad, 0)
    with pytest.raises((TypeError, DecodeError)) as info:
        convert_dataset(ArrayDataset(items), str(tmp_path / "out"), "bad", image_format="png")
    assert "item 3" in str(info.value)
    assert final_shards(str(tmp_path / "out")) == []


def test_bad_item_is_skipped_with_on_error_skip(tmp_path):
    items, expected, _ = _mixed_items()
    items[3] = ("a string", 0)
    result = convert_dataset(ArrayDataset(items), str(tmp_path / "out"), "bad", image_format="raw", on_error="skip")
    assert [entry[0] for entry in result.skipped] == [3]
    assert "item 3" in result.skipped[0][1]
    stored = [tfr_torch.parse_tensor(r["image/encoded"]) for r in parsed(result.paths, DATASET_SPEC)]
    assert len(stored) == len(items) - 1
    for got, want in zip(stored, expected[:3] + expected[4:]):
        assert torch.equal(got, want)


# ------------------------------------------------------------------------------- modes and the image contract

CORPUS = os.path.join(ROOT, "tests", "data", "images", "src")
CORPUS_GOOD = sorted(f for f in os.listdir(CORPUS) if not f.startswith("bad_"))


def _corpus_folder(tmp_path, names):
    """An image folder of golden-corpus files: class "a" (those given), class "b" (one RGB PNG)."""
    for cls, files in (("a", names), ("b", ["png_rgb8.png"])):
        os.makedirs(tmp_path / "src" / cls, exist_ok=True)
        for name in files:
            shutil.copy(os.path.join(CORPUS, name), tmp_path / "src" / cls / name)
    return str(tmp_path / "src")


def _fields(record):
    return int(record["image/height"]), int(record["image/width"]), int(record["image/channels"])


def _stored_pixels(record):
    if record["image/format"] == b"raw":
        return tfr_torch.parse_tensor(record["image/encoded"], torch.uint8)
    return decode_image(record["image/encoded"])


@pytest.mark.parametrize("fmt", ["keep", "png", "raw", "jpeg"])
def test_size_fields_describe_what_decode_image_returns_for_every_corpus_image(tmp_path, fmt):
    """Palette, 1-bit, 16-bit, CMYK, GIF, WebP, BMP, TIFF, PGM: image/channels, height and width are the shape of
    decode_image(stored bytes), whatever the format."""
    names = [n for n in CORPUS_GOOD if n.rsplit(".", 1)[-1] in ("png", "jpg", "bmp", "tiff", "webp", "ppm", "pgm")]
    src = _corpus_folder(tmp_path, names)
    result = convert_image_folder(src, str(tmp_path / "out"), "c", format=fmt)
    records = parsed(result.paths)
    assert len(records) == len(names) + 1
    for record in records:
        pixels = _stored_pixels(record)
        assert _fields(record) == (pixels.shape[1], pixels.shape[2], pixels.shape[0]), record["image/filename"]


def test_gif_files_are_left_out_as_imagefolder_leaves_them(tmp_path):
    """.gif is not in torchvision's IMG_EXTENSIONS: ImageFolder skips such files, and so does the converter."""
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    shutil.copy(os.path.join(CORPUS, "gif_transparent.gif"), src / "t.gif")
    Image.fromarray(_pattern(np.random.default_rng(0), 9, 9, 3)).save(src / "x.png")
    result = convert_image_folder(str(tmp_path / "src"), str(tmp_path / "out"), "g")
    assert [(_fields(r), r["image/filename"]) for r in parsed(result.paths)] == [((9, 9, 3), b"a/x.png")]


@pytest.mark.parametrize("fmt", ["png", "raw", "jpeg"])
@pytest.mark.parametrize("mode", ["RGB", "GRAY", "RGB_ALPHA", "GRAY_ALPHA"])
def test_mode_makes_a_mixed_folder_one_shape(tmp_path, fmt, mode):
    names = ["png_gray8.png", "png_ga8.png", "png_pal4_trns.png", "png_rgba16.png", "jpeg_cmyk.jpg", "bmp_pal8.bmp"]
    src = _corpus_folder(tmp_path, names)
    if fmt == "jpeg" and mode.endswith("ALPHA"):
        with pytest.raises(ValueError) as info:
            convert_image_folder(src, str(tmp_path / "out"), "m", format=fmt, mode=mode)
        assert str(info.value) == f"JPEG has no alpha channel: mode='{mode}' needs format 'png' or 'raw'"
        return
    result = convert_image_folder(src, str(tmp_path / "out"), "m", format=fmt, mode=mode)
    channels = {"RGB": 3, "GRAY": 1, "RGB_ALPHA": 4, "GRAY_ALPHA": 2}[mode]
    records = parsed(result.paths)
    for record in records:
        pixels = _stored_pixels(record)
        assert pixels.shape[0] == channels and int(record["image/channels"]) == channels
        original = decode_image(open(os.path.join(src, record["image/filename"].decode()), "rb").read(), mode)
        if fmt == "jpeg":
            assert (pixels.float() - original.float()).abs().mean() < 12
        else:
            assert torch.equal(pixels, original), record["image/filename"]
    sidecar = json.load(open(os.path.join(tmp_path, "out", "m-train.tfr_torch.json")))
    assert sidecar["image"]["mode"] == mode


def test_mode_with_keep_is_refused(tmp_path):
    src = _corpus_folder(tmp_path, ["png_rgb8.png"])
    with pytest.raises(ValueError) as info:
        convert_image_folder(src, str(tmp_path / "out"), "m", mode="RGB")
    assert str(info.value) == ("mode='RGB' needs a format that re-encodes the pixels (jpeg, png or raw); format 'keep' "
                               "stores the files as they are")
    with pytest.raises(ValueError, match="^mode must be one of UNCHANGED, GRAY, GRAY_ALPHA, RGB, RGB_ALPHA"):
        convert_image_folder(src, str(tmp_path / "out"), "m", format="png", mode="CMYK")


def test_convert_dataset_mode_and_torchvision_enum(tmp_path):
    import enum

    class ImageReadMode(enum.Enum):  # torchvision.io.ImageReadMode's shape
        RGB = 3

    items, expected, _ = _mixed_items()
    result = convert_dataset(ArrayDataset(items), str(tmp_path / "out"), "d", image_format="raw",
                             mode=ImageReadMode.RGB)
    for record, want in zip(parsed(result.paths, DATASET_SPEC), expected):
        stored = tfr_torch.parse_tensor(record["image/encoded"], torch.uint8)
        rgb = want[:3] if want.shape[0] >= 3 else want[:1].expand(3, -1, -1)
        assert torch.equal(stored, rgb) and int(record["image/channels"]) == 3


def test_convert_dataset_takes_float_tensors_as_topilimage_does(tmp_path):
    """ToTensor() output (float in [0, 1]) is stored as torchvision's ToPILImage makes it: pic.mul(255).byte()."""
    rng = np.random.default_rng(5)
    floats = [torch.from_numpy(rng.random((3, 7, 9), dtype=np.float32)), torch.zeros(1, 4, 4), torch.ones(3, 2, 5),
              torch.from_numpy(rng.random((5, 6), dtype=np.float32)).double()]
    result = convert_dataset(ArrayDataset([(f, 0) for f in floats]), str(tmp_path / "out"), "f", image_format="png")
    records = parsed(result.paths, DATASET_SPEC)
    assert len(records) == 4 and result.skipped == []
    for record, f in zip(records, floats):
        want = f.mul(255).to(torch.uint8)
        want = want[None] if want.ndim == 2 else want
        assert torch.equal(decode_image(record["image/encoded"]), want)
        assert _fields(record) == (want.shape[1], want.shape[2], want.shape[0])


def test_float_tensor_outside_zero_one_names_the_item_and_the_range(tmp_path):
    items = [(torch.zeros(3, 4, 4), 0), (torch.full((3, 4, 4), 255.0), 0)]
    with pytest.raises(DecodeError) as info:
        convert_dataset(ArrayDataset(items), str(tmp_path / "out"), "f", image_format="png")
    assert str(info.value).startswith("item 1: cannot convert it: a float tensor image must hold values in [0, 1] "
                                      "(what ToTensor() makes), got values from 255.0 to 255.0")


def test_skipping_every_item_is_an_error_not_an_empty_data_set(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(DecodeError) as info:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            convert_dataset(ArrayDataset([("a string", 0), (None, 1)]), out, "s", image_format="png",
                            on_error="skip")
    assert str(info.value) == ("every one of the 2 items was skipped, so nothing was written; the first: item 0: "
                               "cannot convert it: an image must be a PIL image, a uint8 or float tensor [C, H, W] or "
                               "a uint8 numpy array [H, W, C], got str")
    assert final_shards(out) == [] and not os.path.exists(os.path.join(out, "s-train.tfr_torch.json"))


def test_an_empty_class_folder_is_an_error_unless_allowed(tmp_path):
    src = _corpus_folder(tmp_path, ["png_rgb8.png"])
    os.makedirs(os.path.join(src, "empty"))
    with open(os.path.join(src, "empty", "notes.txt"), "w") as f:
        f.write("not an image")
    with pytest.raises(FileNotFoundError) as info:
        convert_image_folder(src, str(tmp_path / "out"), "e")
    assert str(info.value) == (f"no image files in the class folder(s) {os.path.join(src, 'empty')!r} (extensions: "
                               f".jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp); pass allow_empty=True "
                               f"(--allow-empty) to keep such classes with no images, as torchvision's "
                               f"ImageFolder(allow_empty=True) does")
    result = convert_image_folder(src, str(tmp_path / "out"), "e", allow_empty=True)
    records = parsed(result.paths)
    assert [int(r["image/class/label"]) for r in records] == [0, 1]  # a, b; "empty" keeps label 2 with no images
    sidecar = json.load(open(os.path.join(tmp_path, "out", "e-train.tfr_torch.json")))
    assert sidecar["image"]["classes"] == ["a", "b", "empty"]


def test_cli_convert_mode_and_allow_empty(tmp_path):
    src = _corpus_folder(tmp_path, ["png_gray8.png", "png_pal4_trns.png"])
    os.makedirs(os.path.join(src, "c"))
    r = run_cli("convert", src, tmp_path / "out", "--name", "m", "--format", "png", "--mode", "rgb", "-q",
                "--workers", "1")
    assert r.returncode == 1 and "no image files in the class folder(s)" in r.stderr and r.stdout == ""
    r = run_cli("convert", src, tmp_path / "out", "--name", "m", "--format", "png", "--mode", "rgb", "-q",
                "--workers", "1", "--allow-empty")
    assert r.returncode == 0, r.stderr
    records = parsed(r.stdout.split())
    assert [int(x["image/channels"]) for x in records] == [3, 3, 3]
    r = run_cli("convert", src, tmp_path / "out2", "--name", "m", "--mode", "RGB", "-q")
    assert r.returncode == 2 and "argument --mode: RGB needs --format jpeg, png or raw" in r.stderr
    r = run_cli("convert", src, tmp_path / "out2", "--name", "m", "--format", "jpeg", "--mode", "RGB_ALPHA", "-q")
    assert r.returncode == 2 and "argument --mode: JPEG has no alpha channel" in r.stderr


def test_convert_dataset_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="image_format"):
        convert_dataset(ToyCIFAR(), str(tmp_path / "a"), "x", image_format="keep")
    with pytest.raises(TypeError, match="map-style"):
        convert_dataset(iter([(np.zeros((4, 4), np.uint8), 0)]), str(tmp_path / "b"), "x")


def test_conversion_result_is_a_plain_record(tmp_path):
    result = convert_dataset(ToyCIFAR(n=2), str(tmp_path / "out"), "toy", image_format="png")
    assert isinstance(result.paths, list) and result.records == 2 and result.skipped == []
    assert not hasattr(result, "no_such_field")  # a missing attribute is an AttributeError, as for any object
    assert getattr(result, "no_such_field", None) is None
    assert pickle.loads(pickle.dumps(result)) == result


# ---------------------------------------------------------------------------------------------- progress


def test_progress_counts_always_and_draws_only_on_a_terminal():
    stream = io.StringIO()  # not a terminal: nothing drawn, everything counted
    meter = Progress(10, "x: ", enabled=True, stream=stream, interval=0)
    meter.update(3, 3_000_000)
    assert meter.items == 3 and meter.bytes == 3_000_000
    assert meter.done() >= 0 and stream.getvalue() == ""
    assert meter.line().startswith("x: 3/10 items") and "MB/s" in meter.line()
    drawn = io.StringIO()
    loud = Progress(10, "x: ", stream=drawn, interval=0, tty_only=False)  # tqdm's bar, on any stream
    loud.update(3, 3_000_000)
    loud.done()
    assert "x: " in drawn.getvalue() and "3/10" in drawn.getvalue() and drawn.getvalue().endswith("\n")
    quiet = io.StringIO()
    silent = Progress(None, enabled=False, stream=quiet, interval=0, tty_only=False)
    silent.update(5)
    silent.done()
    assert quiet.getvalue() == "" and "5 items" in silent.line()


def test_progress_is_printed_unless_quiet(folder, tmp_path):
    loud = run_cli("convert", folder, tmp_path / "a", "--name", "imgs", "--workers", "1")
    quiet = run_cli("convert", folder, tmp_path / "b", "--name", "imgs", "--workers", "1", "-q")
    assert loud.returncode == quiet.returncode == 0
    assert "items" in loud.stderr and "converted" in loud.stderr
    assert quiet.stderr == ""
    assert len(loud.stdout.split()) == len(quiet.stdout.split()) == 1


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_convert(folder, tmp_path):
    out = tmp_path / "out"
    r = run_cli("convert", folder, out, "--name", "photos", "--split", "validation", "--shard-size", "1KB",
            "--workers", "2", "--format", "keep")
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    check_shard_set(str(out), "photos", "validation", paths)
    api = convert_image_folder(folder, str(tmp_path / "api"), "photos", "validation", shard_size="1KB")
    assert dir_bytes(str(out)) == dir_bytes(os.path.dirname(api.paths[0]))
    records = parsed(paths)
    assert [r["image/encoded"] for r in records] == [open(os.path.join(folder, *rel.split("/")), "rb").read()
                                                     for rel, *_ in FOLDER_IMAGES]


def test_conversion_is_reproducible_across_processes(folder, tmp_path):
    """The same conversion run twice (a rerun, a resumed run, spawned workers: a new Python process each time)
    writes the same bytes, whatever the process's string hash seed."""
    outs = []
    for seed in ("1", "2"):
        out = tmp_path / f"seed{seed}"
        r = cli("convert", folder, out, "--name", "imgs", "--workers", "1", "-q", PYTHONHASHSEED=seed)
        assert r.returncode == 0, r.stderr
        outs.append(dir_bytes(str(out)))
    assert outs[0].keys() == outs[1].keys()
    for name in outs[0]:
        assert outs[0][name] == outs[1][name], name


def test_cli_convert_usage_errors(folder, tmp_path):
    assert run_cli("convert", folder, tmp_path / "o").returncode == 2  # --name is required
    assert run_cli("convert", folder, tmp_path / "o", "--name", "x", "--format", "gif").returncode == 2
    r = run_cli("convert", tmp_path / "missing", tmp_path / "o", "--name", "x")
    assert r.returncode == 1 and "missing" in r.stderr


def _inspect_table(stdout):
    lines = stdout.splitlines()
    assert lines[0].split("\t") == ["file", "records", "bytes", "compression"]
    blank = lines.index("")
    files = [line.split("\t") for line in lines[1:blank]]
    files = [f for f in files if f[0] != "total"]
    header = lines.index("key\tkind\tdtype\trecords\tvalues min/mean/max\tmin\tmax")
    features = {line.split("\t")[0]: line.split("\t")[1:] for line in lines[header + 1:lines.index("", header)
                                                                           if "" in lines[header:] else None]}
    return files, features


KINDS = {"image/encoded": "bytes_list", "image/format": "bytes_list", "image/class/text": "bytes_list",
         "image/filename": "bytes_list", "image/height": "int64_list", "image/width": "int64_list",
         "image/channels": "int64_list", "image/class/label": "int64_list"}


def test_cli_inspect(kept):
    out, result = kept
    r = run_cli("inspect", *result.paths)
    assert r.returncode == 0, r.stderr
    files, features = _inspect_table(r.stdout)
    counts = [e["records"] for e in load_sidecar(out, "imgs")["shards"]]
    assert files == [[p, str(n), str(os.path.getsize(p)), "none"] for p, n in zip(result.paths, counts)]
    assert set(features) == set(KINDS)
    for key, kind in KINDS.items():
        assert features[key][0] == kind, key
        assert features[key][1] == ("string" if kind == "bytes_list" else "int64"), key
        assert features[key][2] == str(len(FOLDER_IMAGES)), key
        assert features[key][3] == "1/1.00/1", key


def test_cli_reshard_gzip(kept, tmp_path):
    out, result = kept
    new = tmp_path / "new"
    r = run_cli("reshard", *result.paths, "--out", new, "--shard-size", "2KB", "--compression", "gzip")
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    assert len(paths) > len(result.paths)  # smaller shards
    sidecar = check_shard_set(str(new), "imgs", "train", paths)
    for path in paths:
        assert open(path, "rb").read(2) == b"\x1f\x8b"
    assert read_all(paths) == read_all(result.paths)  # same records, same order
    old = load_sidecar(out, "imgs")
    assert sidecar["compression"] == "gzip"
    assert sidecar["features"] == old["features"] == spec_to_json(SPEC)
    assert sidecar["image"] == old["image"]
    assert [r["image/encoded"] for r in TFRecordDataset(paths, features="auto")] == \
        [r["image/encoded"] for r in parsed(result.paths)]
    assert len(TFRecordDataset(paths)) == len(FOLDER_IMAGES)
    # the gzip shards inspect as such
    r = run_cli("inspect", *paths)
    assert r.returncode == 0, r.stderr
    files, features = _inspect_table(r.stdout)
    assert [f[3] for f in files] == ["gzip"] * len(paths)
    assert sum(int(f[1]) for f in files) == len(FOLDER_IMAGES)
    assert {k: v[0] for k, v in features.items()} == KINDS


def test_reshard_of_plain_files_infers_the_features(tmp_path):
    plain = tmp_path / "plain.tfrecord"
    with tfr_torch.TFRecordWriter(plain) as writer:
        for i in range(20):
            writer.write_example({"id": i, "name": f"n{i}"})
    r = run_cli("reshard", plain, "--out", tmp_path / "out", "--shard-size", "200", "--name", "plain")
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    sidecar = check_shard_set(str(tmp_path / "out"), "plain", "train", paths)
    assert read_all(paths) == read_all([str(plain)])
    assert set(sidecar["features"]) == {"id", "name"}
    assert [int(r["id"]) for r in TFRecordDataset(paths, features="auto")] == list(range(20))


# ------------------------------------------------------------------------------------------ TensorFlow


@pytest.mark.tensorflow
@pytest.mark.parametrize("fmt, compression", [("keep", None), ("png", "gzip"), ("raw", None)])
def test_tensorflow_reads_the_shards(folder, tmp_path, fmt, compression):
    """tf.data + tf.io.parse_single_example + tf.io.decode_jpeg/decode_png/parse_tensor give Pillow's pixels.

    JPEG: TensorFlow decodes with dct_method "INTEGER_FAST" by default (libjpeg's JDCT_IFAST), Pillow with
    JDCT_ISLOW; they differ by up to a few units per pixel by design. With dct_method="INTEGER_ACCURATE" both
    run libjpeg(-turbo)'s exact integer IDCT and fancy upsampling, and the pixels are equal.
    """
    tf = pytest.importorskip("tensorflow")
    result = convert_image_folder(folder, str(tmp_path / "out"), "imgs", format=fmt, compression=compression,
                                  shard_size="4KB")
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/channels": tf.io.FixedLenFeature([], tf.int64),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
    }
    dataset = tf.data.TFRecordDataset(result.paths, compression_type="GZIP" if compression == "gzip" else "")
    seen = 0
    for serialized, (rel, _fmt, h, w, c, _) in zip(dataset, FOLDER_IMAGES):
        example = tf.io.parse_single_example(serialized, spec)
        encoded = example["image/encoded"]
        kind = example["image/format"].numpy()
        if kind == b"jpeg":
            pixels = tf.io.decode_jpeg(encoded, dct_method="INTEGER_ACCURATE").numpy()
        elif kind == b"png":
            pixels = tf.io.decode_png(encoded).numpy()
        else:
            assert kind == b"raw"
            pixels = tf.io.parse_tensor(encoded, tf.uint8).numpy().transpose(1, 2, 0)
        want = pillow_pixels(os.path.join(folder, *rel.split("/"))).numpy().transpose(1, 2, 0)
        assert pixels.shape == want.shape == (h, w, c), rel
        assert np.array_equal(pixels, want), rel
        assert (int(example["image/height"]), int(example["image/width"]), int(example["image/channels"])) == (h, w, c)
        assert int(example["image/class/label"]) == _label(rel)
        assert example["image/class/text"].numpy() == rel.split("/")[0].encode()
        assert example["image/filename"].numpy() == os.path.join(*rel.split("/")).encode()
        seen += 1
    assert seen == len(FOLDER_IMAGES) == sum(1 for _ in dataset)


# -------------------------------------------------------------------------------- inspect / reshard details


def test_inspect_reports_mixed_kinds_value_counts_and_non_examples(tmp_path):
    path = tmp_path / "mixed.tfrecord"
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write_example({"x": [1, 2, 3], "y": 1.5, "z": b"a"})
        writer.write_example({"x": [4], "y": 7, "z": [b"b", b"c"]})
        writer.write(b"\xff\xff\xff\xff")  # not a tf.train.Example
    r = run_cli("inspect", path)
    assert r.returncode == 0, r.stderr
    files, features = _inspect_table(r.stdout)
    assert files == [[str(path), "3", str(os.path.getsize(path)), "none"]]
    assert features["x"] == ["int64_list", "int64", "2", "1/2.00/3", "1", "4"]  # values per record, value range
    assert features["y"][:3] == ["float/int64", "-", "2"]  # one key written with two kinds
    assert features["z"] == ["bytes_list", "string", "2", "1/1.50/2", "1 bytes", "1 bytes"]
    assert "records read: 3 (every record); tf.train.Example: 2, raw (none of these): 1\n" in r.stdout
    r = run_cli("inspect", "--max-records", "1", path)
    _, features = _inspect_table(r.stdout)
    assert features["x"] == ["int64_list", "int64", "1", "3/3.00/3", "1", "3"]


def test_inspect_of_a_corrupt_file_fails_with_its_path(tmp_path):
    path = tmp_path / "bad.tfrecord"
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write_example({"x": 1})
    data = bytearray(path.read_bytes())
    data[14] ^= 0xFF
    path.write_bytes(bytes(data))
    r = run_cli("inspect", path)
    assert r.returncode == 1
    assert r.stderr.startswith(f"{path}:0:")


def test_reshard_names_from_tfds_file_names_and_raw_records(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    data = [bytes([i]) * (i + 1) for i in range(12)]  # not Examples: copied as they are
    for i in range(2):
        with tfr_torch.TFRecordWriter(src / f"foo-val.tfrecord-{i:05d}-of-00002") as writer:
            for record in data[i * 6:(i + 1) * 6]:
                writer.write(record)
    r = run_cli("reshard", src / "foo-val.tfrecord-*", "--out", tmp_path / "out", "--shard-size", "64", "-q")
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    sidecar = check_shard_set(str(tmp_path / "out"), "foo", "val", paths)
    assert sidecar["features"] is None
    assert read_all(paths) == data


def test_reshard_of_a_missing_file_fails(tmp_path):
    r = run_cli("reshard", tmp_path / "nope.tfrecord", "--out", tmp_path / "out")
    assert r.returncode == 1
    assert "nope.tfrecord" in r.stderr
    if os.path.isdir(tmp_path / "out"):
        assert final_shards(str(tmp_path / "out")) == []
