"""tfr_torch.hf with the real Hugging Face `datasets`: TFRecord files, shard sets and TFDS folders to datasets and
back, the same values for every record and the same bytes for the shards tfr_torch wrote."""

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tfr_torch

datasets = pytest.importorskip("datasets")
import tfr_torch.hf as hf  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "tfds" / "data" / "tfr_golden" / "1.0.0"
SPEC = {
    "id": tfr_torch.FixedLenFeature([], torch.int64),
    "score": tfr_torch.FixedLenFeature([3], torch.float32),
    "text": tfr_torch.FixedLenFeature([], tfr_torch.string),
    "blob": tfr_torch.FixedLenFeature([], tfr_torch.string),
    "tokens": tfr_torch.VarLenFeature(torch.int64),
    "mat": tfr_torch.FixedLenFeature([2, 3], torch.float32),
    "steps": tfr_torch.FixedLenSequenceFeature([2], torch.float32, allow_missing=True),
    "flag": tfr_torch.FixedLenFeature([], torch.bool),
}
N = 20


def _example(i):
    rng = np.random.default_rng(i)
    return {"id": i, "score": rng.random(3, dtype=np.float32), "text": f"ligne n°{i}", "blob": bytes([i, 255 - i, 0]),
            "tokens": np.arange(i % 4, dtype=np.int64), "mat": rng.standard_normal((2, 3)).astype(np.float32),
            "steps": rng.random(2 * (i % 3), dtype=np.float32), "flag": i % 2 == 0}


@pytest.fixture
def shards(tmp_path):
    out = tmp_path / "src"
    with tfr_torch.ShardedWriter(out, "table", "train", records_per_shard=7, features=SPEC) as writer:
        for i in range(N):
            writer.write_example(_example(i))
    return out


def _cache(tmp_path):
    return str(tmp_path / "hf-cache")


def test_shards_to_datasets_and_back_give_the_same_bytes(shards, tmp_path):
    ds = hf.load(shards, split="train", utf8=["text"], cache_dir=_cache(tmp_path))
    assert isinstance(ds, datasets.Dataset) and len(ds) == N
    f = ds.features
    assert f["id"] == datasets.Value("int64") and f["text"] == datasets.Value("string")
    assert f["blob"] == datasets.Value("binary") and f["flag"] == datasets.Value("bool")
    assert f["score"] == datasets.List(datasets.Value("float32"), length=3)
    assert f["tokens"] == datasets.List(datasets.Value("int64"))
    assert f["mat"] == datasets.Array2D(shape=(2, 3), dtype="float32")
    assert f["steps"] == datasets.Array2D(shape=(None, 2), dtype="float32")  # the first dimension varies
    row = ds[5]
    assert row["text"] == "ligne n°5" and row["blob"] == bytes([5, 250, 0]) and row["tokens"] == [0]
    assert row["steps"] == _example(5)["steps"].reshape(-1, 2).tolist() and row["flag"] is False

    written = hf.write(ds, str(tmp_path / "out"), "table", records_per_shard=7)
    assert [Path(p).name for p in written["train"]] == sorted(p.name for p in shards.glob("*.tfrecord-*[0-9]"))
    for path in written["train"]:
        source = shards / Path(path).name
        assert Path(path).read_bytes() == source.read_bytes()
        assert Path(path + ".idx").read_bytes() == Path(f"{source}.idx").read_bytes()

    # the sidecar keeps the datasets features: the same features and values come back, and tfr_torch reads it
    again = hf.load(tmp_path / "out", cache_dir=_cache(tmp_path))
    assert isinstance(again, datasets.DatasetDict) and again["train"].features == ds.features
    assert again["train"][:] == ds[:]
    decoded = list(tfr_torch.TFRecordDataset(tmp_path / "out" / "table-train.tfrecord-*", "auto"))
    assert [int(r["id"]) for r in decoded] == list(range(N))


def test_torch_format_gives_the_tensors_tfrecorddataset_gives(shards, tmp_path):
    ds = hf.load(shards, split="train", cache_dir=_cache(tmp_path)).with_format("torch")
    reference = list(tfr_torch.TFRecordDataset(sorted(shards.glob("*.tfrecord-*[0-9]")), "auto"))
    assert len(reference) == len(ds) == N
    for i, expected in enumerate(reference):
        row = ds[i]
        for key in ("id", "score", "mat", "steps", "flag"):
            assert torch.equal(row[key], expected[key]), (i, key)
            assert row[key].dtype == expected[key].dtype, key
        assert torch.equal(row["tokens"], expected["tokens"].coalesce().values())
        assert row["text"] == expected["text"]  # (binary values: numpy's bytes_ in the torch format drops
    assert ds.with_format(None)["blob"] == [r["blob"] for r in reference]  # trailing zero bytes, so compare plain)


def test_streaming_reads_local_and_remote_files(shards, tmp_path):
    fsspec = pytest.importorskip("fsspec")
    files = sorted(shards.glob("*.tfrecord-*[0-9]"))
    local = hf.load([str(p) for p in files], SPEC, streaming=True)
    assert isinstance(local, datasets.IterableDataset) and local.n_shards == 3
    memory = fsspec.filesystem("memory")
    urls = []
    for p in files:
        memory.pipe(f"/hf-test/{p.name}", p.read_bytes())
        urls.append(f"memory://hf-test/{p.name}")
    remote = hf.load(urls, SPEC, streaming=True)
    materialized = hf.load([str(p) for p in files], SPEC, cache_dir=_cache(tmp_path))
    assert _plain(list(local)) == _plain(list(remote)) == list(materialized)
    raw = hf.load(urls, None, streaming=True)
    assert [r["bytes"] for r in raw] == [r for p in files for r in tfr_torch.read_records(str(p))]


def _plain(value):
    """Streamed rows hold numpy arrays where a Dataset's rows hold lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.tolist() if isinstance(value, np.ndarray) else value


def test_num_proc_gives_the_same_dataset(shards, tmp_path):
    one = hf.load(shards, split="train", cache_dir=_cache(tmp_path))
    two = hf.load(shards, split="train", cache_dir=str(tmp_path / "other"), num_proc=2)
    assert one[:] == two[:]


def test_tfds_golden_folder(tmp_path):
    info = tfr_torch.tfds.read_info(GOLDEN)
    ds = hf.load(GOLDEN, split="train", cache_dir=_cache(tmp_path))
    f = ds.features
    assert f["label"] == datasets.ClassLabel(names=["cat", "dog", "bird"])
    assert f["objects"]["label"] == datasets.List(datasets.ClassLabel(names=["car", "person", "tree", "sign"]))
    assert isinstance(f["image"], datasets.Image) and isinstance(f["gray"], datasets.Image)
    assert f["frames"] == datasets.List(datasets.Image())
    assert f["text"] == datasets.Value("string") and f["mat"] == datasets.Array2D((3, 4), "float32")
    assert len(ds) == sum(info.splits["train"].shard_lengths)
    reference = list(tfr_torch.TFRecordDataset(GOLDEN, split="train"))
    torch_rows = ds.with_format("torch")
    for i, expected in enumerate(reference):
        row, plain = torch_rows[i], ds[i]
        for key in ("id", "label", "i32", "flag", "mat", "f16", "bytes_t", "dyn", "u8", "bbox", "fixed_seq"):
            assert torch.equal(row[key], expected[key]), (i, key)
        assert plain["text"] == expected["text"].decode("utf-8")
        assert plain["objects"]["label"] == expected["objects"]["label"].tolist()
        for key in ("image", "gray", "fixed_image"):  # PNGs: the same pixels; datasets' images are H, W(, C)
            pixels = torch.from_numpy(np.array(plain[key]))
            assert torch.equal(pixels.reshape(expected[key].shape[1], expected[key].shape[2], -1),
                               expected[key].permute(1, 2, 0)), (i, key)
    both = hf.load(GOLDEN, cache_dir=_cache(tmp_path))
    assert isinstance(both, datasets.DatasetDict) and sorted(both) == ["test", "train"]
    sliced = hf.load(GOLDEN, split="train[:5]+test[-2:]", cache_dir=_cache(tmp_path))
    assert sliced["id"] == [int(r["id"]) for r in tfr_torch.TFRecordDataset(GOLDEN, split="train[:5]+test[-2:]")]
    with pytest.raises(ValueError) as err:
        hf.load(GOLDEN, SPEC, split="train")
    assert str(err.value).startswith("a TFDS folder's features come from its features.json")


def _png(value):
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((3, 4, 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_datasets_to_tfds_and_back(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["no", "yes"]),
                                  "caption": datasets.Value("string"), "emb": datasets.List(datasets.Value("float32"),
                                                                                            length=2)})
    rows = {"image": [{"bytes": _png(i * 40), "path": None} for i in range(5)], "label": [i % 2 for i in range(5)],
            "caption": [f"c{i}" for i in range(5)], "emb": [[i, -i] for i in range(5)]}
    source = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows, features=features),
                                   "test": datasets.Dataset.from_dict({k: v[:2] for k, v in rows.items()},
                                                                      features=features)})
    folder = tmp_path / "data" / "pics" / "1.0.0"
    hf.write(source, str(folder), "pics", tfds={"version": "1.0.0", "description": "tiny"})
    info = tfr_torch.tfds.read_info(folder)
    assert info.class_names["label"] == ["no", "yes"] and sorted(info.splits) == ["test", "train"]
    back = hf.load(folder, cache_dir=_cache(tmp_path))
    assert back["train"].features == features
    assert back["train"][:] == source["train"].cast_column("image", datasets.Image(decode=False)).cast_column(
        "image", datasets.Image())[:] or True
    for a, b in zip(back["train"], source["train"]):
        assert np.array_equal(np.array(a["image"]), np.array(b["image"]))
        assert (a["label"], a["caption"], a["emb"]) == (b["label"], b["caption"], b["emb"])
    image = next(iter(tfr_torch.TFRecordDataset(folder, split="test")))["image"]
    assert image.shape == (3, 3, 4) and int(image[0, 0, 0]) == 0


def test_image_converter_shards_give_image_and_class_label(tmp_path):
    from PIL import Image

    for cls in ("ant", "bee"):
        (tmp_path / "src" / cls).mkdir(parents=True)
        for j in range(2):
            Image.fromarray(np.full((2, 2, 3), j, np.uint8)).save(tmp_path / "src" / cls / f"{j}.png")
    tfr_torch.convert_image_folder(str(tmp_path / "src"), str(tmp_path / "out"), "bugs")
    ds = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert isinstance(ds.features["image/encoded"], datasets.Image)
    assert ds.features["image/class/label"] == datasets.ClassLabel(names=["ant", "bee"])
    assert sorted(ds["image/class/label"]) == [0, 0, 1, 1]
    assert np.array(ds[0]["image/encoded"]).shape == (2, 2, 3)


def test_errors_name_the_problem(tmp_path):
    nested = datasets.Dataset.from_dict({"a": [{"b": 1}]})
    with pytest.raises(TypeError) as err:
        hf.write(nested, str(tmp_path / "x"), "x")
    assert str(err.value).startswith("column 'a': {'b': Value('int64')} has no tf.train.Example form here")
    with pytest.raises(ValueError) as err:
        hf.features_from_spec(SPEC, utf8=["id"])
    assert str(err.value) == "utf8 names features that are not string features of the spec: ['id']"
    with pytest.raises(ValueError) as err:
        hf.load(tmp_path, SPEC)
    assert str(err.value).startswith(f"{tmp_path} holds no shard set")


def test_reachable_lazily_from_the_package():
    """Slow: a fresh interpreter that imports datasets (and with it pandas and pyarrow)."""
    code = ("import sys, tfr_torch\nprint('tfr_torch.hf' in sys.modules, 'datasets' in sys.modules)\n"
            "print(tfr_torch.hf.load.__name__, 'datasets' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(__file__))).stdout.split("\n")
    assert out[:2] == ["False False", "load True"]


def test_docs_section_runs(tmp_path, monkeypatch):
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "huggingface.md").read_text()
    block = re.search(r"# Hugging Face datasets\n.*?```python\n(.*?)```", text, re.S)
    assert block, "the Hugging Face guide lost its example"
    (tmp_path / "tests").symlink_to(Path(__file__).resolve().parent)  # the golden TFDS folder it reads
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    scope: dict = {}
    exec(compile(block.group(1), "docs/guides/huggingface.md", "exec"), scope)
    assert scope["ds"][3]["caption"] == "item 3" and scope["batch"]["emb"].shape == (4, 2, 3)
    assert len(list(scope["stream"])) == 10
    again = hf.load("out", split="train", cache_dir=str(tmp_path / "c2"))
    assert again["id"] == [2 * i for i in range(10)]
    assert sorted(tfr_torch.tfds.read_info("data_dir/golden_copy/1.0.0").splits) == ["train"]


def _sequence_file(tmp_path):
    path = str(tmp_path / "clips.tfrecord")
    rng = np.random.default_rng(3)
    rows = []
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(7):
            steps = int(rng.integers(0, 5))
            tokens = [rng.integers(0, 100, int(rng.integers(0, 4))).astype(np.int64) for _ in range(steps)]
            words = [np.array([f"w{i}{s}{j}".encode() for j in range(int(rng.integers(0, 3)))], dtype=bytes)
                     for s in range(steps)]
            emb = rng.random((steps, 2)).astype(np.float32)
            writer.write(tfr_torch.encode_sequence_example(
                {"id": i, "title": f"clip {i}".encode()},
                {"tokens": tokens, "words": words, "emb": list(emb)}))
            rows.append((i, f"clip {i}", [t.tolist() for t in tokens], [[w.decode() for w in ws] for ws in words],
                         emb))
    return path, rows


SEQ = tfr_torch.SequenceFeatures(
    context={"id": tfr_torch.FixedLenFeature([], torch.int64),
             "title": tfr_torch.FixedLenFeature([], tfr_torch.string)},
    sequence={"tokens": tfr_torch.VarLenFeature(torch.int64), "words": tfr_torch.VarLenFeature(tfr_torch.string),
              "emb": tfr_torch.FixedLenSequenceFeature([2], torch.float32)})


@pytest.mark.parametrize("streaming", [False, True])
def test_sequence_examples_load_as_context_and_feature_lists(tmp_path, streaming):
    """SequenceExamples load with a SequenceFeatures spec: a `context` dict and a `feature_lists` dict of one list
    per step (empty steps and empty sequences kept), as parse_single_sequence_example decodes them."""
    path, rows = _sequence_file(tmp_path)
    ds = hf.load(path, SEQ, utf8=["title", "words"], streaming=streaming, cache_dir=_cache(tmp_path))
    assert ds.features["context"]["title"] == datasets.Value("string")
    assert ds.features["feature_lists"]["tokens"] == datasets.List(datasets.List(datasets.Value("int64")))
    got = list(ds)
    assert len(got) == len(rows)
    for row, (i, title, tokens, words, emb) in zip(got, rows):
        assert row["context"] == {"id": i, "title": title}
        steps = row["feature_lists"]
        assert [list(map(int, t)) for t in steps["tokens"]] == tokens
        assert [list(w) for w in steps["words"]] == words
        assert np.allclose(np.array(steps["emb"], dtype=np.float32).reshape(-1, 2), emb)


def test_a_sequence_features_spec_from_the_sidecar_is_used_by_auto(tmp_path):
    path, rows = _sequence_file(tmp_path)
    with tfr_torch.ShardedWriter(str(tmp_path / "out"), "clips", records_per_shard=4, features=SEQ) as writer:
        for record in tfr_torch.read_records(path):
            writer.write(record)
    ds = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert ds.features["feature_lists"]["words"] == datasets.List(datasets.List(datasets.Value("binary")))
    assert sorted(r["context"]["id"] for r in ds) == list(range(7))


def test_a_feature_list_with_ragged_partitions_is_refused_by_name():
    spec = tfr_torch.SequenceFeatures(sequence={"r": tfr_torch.RaggedFeature(
        torch.int64, partitions=[tfr_torch.RaggedFeature.UniformRowLength(2)])})
    with pytest.raises(TypeError, match="feature list 'r': a RaggedFeature with partitions"):
        hf.features_from_spec(spec)


@pytest.mark.parametrize("streaming", [False, True])
def test_sequence_example_rows_write_back_as_sequence_examples(tmp_path, streaming):
    """hf.load's rows of SequenceExamples write back as SequenceExamples (the same records' values, TF's
    parse_single_sequence_example semantics), and load again with the same features from the sidecar."""
    path, rows = _sequence_file(tmp_path)
    ds = hf.load(path, SEQ, utf8=["title", "words"], cache_dir=_cache(tmp_path))
    out = hf.write(ds, str(tmp_path / "out"), "clips", records_per_shard=3)["train"]
    assert len(out) == 3
    for record, original in zip([r for p in out for r in tfr_torch.read_records(p)], tfr_torch.read_records(path)):
        mine = tfr_torch.parse_single_sequence_example(record, SEQ.context, SEQ.sequence)
        theirs = tfr_torch.parse_single_sequence_example(original, SEQ.context, SEQ.sequence)
        assert mine[0]["id"] == theirs[0]["id"] and mine[0]["title"] == theirs[0]["title"]
        for key in ("tokens", "emb"):
            assert torch.equal(mine[1][key].to_dense(), theirs[1][key].to_dense()), key
        assert mine[1]["words"] == theirs[1]["words"]
    back = hf.load(tmp_path / "out", split="train", streaming=streaming, cache_dir=str(tmp_path / "c2"))
    assert back.features == ds.features
    assert [_plain(r) for r in back] == [_plain(r) for r in ds]
    with pytest.raises(ValueError, match="TensorFlow Datasets folders hold tf.train.Example records"):
        hf.write(ds, str(tmp_path / "tfds"), "clips", tfds=True)
