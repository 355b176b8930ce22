"""ShardedWriter, the converters and reshard writing to an fsspec URL (tools/shards.py, format/folder.py).

`memory://` (fsspec's in-process store: flat, no folders, as S3 is) and `local://` (fsspec's local file system
behind a URL: a hierarchical store). A URL set must be the set a local folder gets, byte for byte (shards,
indexes, seek points, sidecar or TFDS metadata), with nothing else left in the store (no unfinished shard, no
progress file, no temporary object) and nothing left in the staging folder; it reads back through a glob with
`features="auto"`; an interrupted run resumes there; a failed upload raises naming the object and leaves no
final shard; the staging folder never holds more than two shards. tests/test_s3.py runs the same writer against
an S3 server.
"""

from __future__ import annotations

import hashlib
import os
import uuid

import pytest
import torch

import tfr_torch
from tfr_torch import ShardedWriter
from tfr_torch.format import folder as folder_module
from tfr_torch.tools.reshard import reshard

fsspec = pytest.importorskip("fsspec")

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64), "blob": tfr_torch.FixedLenFeature([], tfr_torch.string)}


def example(i: int) -> dict:
    return {"id": i, "blob": bytes([i % 251]) * (i % 97)}


def write_set(out, n: int = 100, **kwargs) -> list[str]:
    with ShardedWriter(out, "ds", "train", features=SPEC, **kwargs) as writer:
        for i in range(n):
            writer.write_example(example(i), position=i)
    return writer.paths


@pytest.fixture
def memory_url():
    """A fresh folder in fsspec's memory store; removed afterwards."""
    root = f"/tfr-shards-{uuid.uuid4().hex[:8]}"
    yield f"memory://{root}"
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def memory_files(url: str) -> dict[str, str]:
    """name -> sha256 of every object under the memory URL (a flat listing of the whole prefix)."""
    fs = fsspec.filesystem("memory")
    root = url[len("memory://"):]
    return {path[len(root) + 1:]: hashlib.sha256(fs.cat(path)).hexdigest()
            for path in fs.find(root)}


def local_files(folder) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in os.listdir(folder)}


@pytest.mark.parametrize("compression", [None, "gzip", "zlib"])
def test_a_url_set_is_the_local_set_byte_for_byte(tmp_path, memory_url, compression):
    kwargs = {"records_per_shard": 30, "compression": compression}
    local = write_set(tmp_path / "ref", **kwargs)
    staging = tmp_path / "staging"
    paths = write_set(memory_url, staging_dir=staging, **kwargs)
    assert [p.rsplit("/", 1)[-1] for p in paths] == [os.path.basename(p) for p in local]
    assert paths[0] == f"{memory_url}/ds-train.tfrecord-00000-of-00004"
    assert memory_files(memory_url) == local_files(tmp_path / "ref")  # nothing more: no .partial, no progress
    assert os.listdir(staging) == []  # the writer's own staging folder inside it is gone
    ds = tfr_torch.TFRecordDataset(f"{memory_url}/ds-train.tfrecord-*", features="auto", batch_size=None,
                                   shuffle=True, index="auto")
    got = sorted((int(r["id"]), bytes(r["blob"])) for r in ds)
    assert got == [(i, example(i)["blob"]) for i in range(100)]


def test_a_hierarchical_url_store_gets_its_folder_made(tmp_path):
    out = tmp_path / "deep" / "er"
    paths = write_set(f"local://{out}", records_per_shard=40, compression="gzip")
    assert paths[-1] == f"local://{out}/ds-train.tfrecord-00002-of-00003"
    write_set(tmp_path / "ref", records_per_shard=40, compression="gzip")
    assert local_files(out) == local_files(tmp_path / "ref")


def test_a_url_rewrite_with_another_count_removes_the_old_shards(memory_url):
    write_set(memory_url, records_per_shard=10, compression="gzip")
    assert len([n for n in memory_files(memory_url) if n.endswith(".idx.seek")]) == 10
    paths = write_set(memory_url, records_per_shard=50)
    names = [p.rsplit("/", 1)[-1] for p in paths]
    assert sorted(memory_files(memory_url)) == sorted(names + [n + ".idx" for n in names]
                                                      + ["ds-train.tfr_torch.json"])


def test_an_interrupted_url_run_resumes_after_its_last_uploaded_shard(tmp_path, memory_url):
    with pytest.raises(RuntimeError, match="stop at 73"):
        with ShardedWriter(memory_url, "ds", "train", features=SPEC, records_per_shard=20) as writer:
            for i in range(100):
                if i == 73:
                    raise RuntimeError("stop at 73")
                writer.write_example(example(i), position=i)
    left = memory_files(memory_url)
    assert "ds-train.progress.json" in left and "ds-train.tfr_torch.json" not in left
    assert sorted(n for n in left if n.endswith(".partial")) == [f"ds-train.tfrecord-0000{i}.partial"
                                                                 for i in range(3)]
    writer = ShardedWriter(memory_url, "ds", "train", features=SPEC, records_per_shard=20, resume=True)
    assert writer.resumed_position == 59 and writer.records == 60
    with writer:
        for i in range(writer.resumed_position + 1, 100):
            writer.write_example(example(i), position=i)
    write_set(tmp_path / "ref", records_per_shard=20)
    assert memory_files(memory_url) == local_files(tmp_path / "ref")


def failing_uploads(fail_at: int):
    """OutputFolder.upload failing from its `fail_at`-th call on, as a store refusing writes would."""
    real = folder_module.OutputFolder.upload
    calls = []

    def upload(folder, local: str, name: str) -> None:
        calls.append(name)
        if len(calls) >= fail_at:
            raise PermissionError("Access Denied")
        real(folder, local, name)
    return upload


def test_a_failed_upload_names_the_object_and_publishes_nothing(monkeypatch, tmp_path, memory_url):
    monkeypatch.setattr(folder_module.OutputFolder, "upload", failing_uploads(3))  # the second shard's
    staging = tmp_path / "staging"
    with pytest.raises(OSError, match=r"uploading ds-train\.tfrecord-00001\.partial to "
                                      r"'memory://.*/ds-train\.tfrecord-00001\.partial' failed: "
                                      r"PermissionError: Access Denied"):
        write_set(memory_url, records_per_shard=20, staging_dir=staging)
    left = memory_files(memory_url)
    assert not [n for n in left if "-of-" in n or n.endswith(".tfr_torch.json")]  # no final shard, no sidecar
    assert "ds-train.tfrecord-00000.partial" in left  # the first shard stays for a resumed run
    assert os.listdir(staging) == []


def test_the_staging_folder_holds_at_most_two_shards(monkeypatch, tmp_path, memory_url):
    staging = tmp_path / "staging"
    seen = []
    real = folder_module.OutputFolder.upload

    def counting(folder, local, name):
        (inner,) = os.listdir(staging)  # the writer's own folder
        seen.append(len([n for n in os.listdir(staging / inner) if n.endswith(".partial")]))
        real(folder, local, name)

    monkeypatch.setattr(folder_module.OutputFolder, "upload", counting)
    write_set(memory_url, n=200, records_per_shard=10, staging_dir=staging)
    assert len(seen) == 40 and max(seen) <= 2


def test_staging_dir_is_for_urls_only(tmp_path):
    with pytest.raises(ValueError, match="staging_dir is for a URL out_dir"):
        ShardedWriter(tmp_path / "out", "ds", "train", staging_dir=tmp_path / "s")


def test_tfds_metadata_in_a_url_folder(tmp_path, memory_url):
    options = {"version": "1.0.0", "description": "toy"}
    for split in ("train", "test"):  # the second split updates the dataset_info.json found under the URL
        with ShardedWriter(memory_url, "toy", split, records_per_shard=25, features=SPEC, tfds=options) as writer:
            for i in range(60):
                writer.write_example(example(i))
        with ShardedWriter(tmp_path / "ref", "toy", split, records_per_shard=25, features=SPEC,
                           tfds=options) as writer:
            for i in range(60):
                writer.write_example(example(i))
    assert memory_files(memory_url) == local_files(tmp_path / "ref")
    ds = tfr_torch.TFRecordDataset(memory_url, split="test", batch_size=None)
    assert sorted(int(r["id"]) for r in ds) == list(range(60))


def test_reshard_into_a_url(tmp_path, memory_url):
    source = write_set(tmp_path / "src", records_per_shard=7)
    paths = reshard(source, memory_url, shard_size="2KB", compression="gzip")
    assert len(paths) > 2 and all(p.startswith(memory_url) for p in paths)
    ds = tfr_torch.TFRecordDataset(paths, features="auto", batch_size=None)
    assert [int(r["id"]) for r in ds] == list(range(100))


def test_convert_dataset_into_a_url(tmp_path, memory_url):
    items = [(torch.full((4, 4, 3), i, dtype=torch.uint8).numpy(), i % 3) for i in range(24)]
    paths = tfr_torch.convert_dataset(items, memory_url, "toy", "train", "png", records_per_shard=10).paths
    assert [p.rsplit("/", 1)[-1] for p in paths] == [f"toy-train.tfrecord-0000{i}-of-00003" for i in range(3)]
    ds = tfr_torch.TFRecordDataset(paths, features="auto", batch_size=None)
    labels = [int(r["image/class/label"]) for r in ds]
    assert labels == [i % 3 for i in range(24)]


def test_reshard_refuses_to_write_over_its_url_input(memory_url):
    source = write_set(memory_url, records_per_shard=30)
    other_spelling = [p.replace("memory:///", "memory://") for p in source]
    for paths in (source, other_spelling):
        with pytest.raises(ValueError, match="the new shards would write over their input"):
            reshard(paths, memory_url, shard_size="1KB")
    assert len(reshard(source, f"{memory_url}/copy", shard_size="1KB")) > 1  # another folder is fine


def test_cli_convert_an_image_folder_into_a_url(tmp_path, memory_url, capsys):
    from PIL import Image

    from tfr_torch.tools.cli import main

    for c, cls in enumerate(["cat", "dog"]):
        (tmp_path / "src" / cls).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (5, 4), (c * 100, i * 40, 7)).save(tmp_path / "src" / cls / f"{i}.png")
    assert main(["convert", str(tmp_path / "src"), memory_url, "--name", "pets", "--format", "png",
                 "--shard-size", "300B"]) == 0
    capsys.readouterr()
    names = sorted(memory_files(memory_url))
    assert "pets-train.tfr_torch.json" in names and len([n for n in names if n.endswith(".idx")]) > 1
    ds = tfr_torch.TFRecordDataset(f"{memory_url}/pets-train.tfrecord-*", features="auto", batch_size=None)
    assert sorted(int(r["image/class/label"]) for r in ds) == [0, 0, 0, 1, 1, 1]


def test_hugging_face_write_into_a_url(memory_url):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"id": list(range(12)), "text": [f"t{i}" for i in range(12)]})
    paths = tfr_torch.hf.write(ds, memory_url, "demo", records_per_shard=5)["train"]
    assert len(paths) == 3 and all(p.startswith(memory_url) for p in paths)
    back = tfr_torch.hf.load(f"{memory_url}/demo-train.tfrecord-*", "auto")
    assert back["id"] == list(range(12)) and back["text"] == [f"t{i}" for i in range(12)]


def test_a_refused_resume_leaves_no_staging_folder(tmp_path, memory_url):
    staging = tmp_path / "staging"
    with pytest.raises(RuntimeError):
        with ShardedWriter(memory_url, "ds", "train", records_per_shard=5, staging_dir=staging) as writer:
            for i in range(12):
                writer.write(b"%d" % i)
            raise RuntimeError("stop")
    with pytest.raises(ValueError, match="cannot resume from .*it was written with settings"):
        ShardedWriter(memory_url, "ds", "train", records_per_shard=6, staging_dir=staging, resume=True)
    assert os.listdir(staging) == []
