"""tfr_torch over S3 URLs, against an S3-protocol server on the loopback interface (moto's ThreadedMotoServer).

tfr_torch opens URLs with fsspec and no storage options, so the endpoint reaches s3fs through fsspec's
configuration: `FSSPEC_S3_ENDPOINT_URL` (fsspec reads `FSSPEC_<PROTOCOL>_<KWARG>` variables into
`fsspec.config.conf` when it is imported). This process imported fsspec before the server existed, so the module
fixture sets the variable (for fresh processes) and the same value in `fsspec.config.conf` (for this process and
the DataLoader workers it forks); one test checks that a fresh process configured by the environment alone works.

Covered: TFRecordWriter to s3:// (plain and GZIP; atomic: no temporary object is left), read_records back,
build_index writing `<url>.idx`, read_index; TFRecordDataset over an s3:// glob with index="auto" (and without
indexes, and GZIP files) through DataLoader(num_workers=2): every record exactly once, read in the worker
processes; a missing object or bucket raises FileNotFoundError naming the URL; an unknown protocol raises a
clear error naming it. RLDS folders (TFDS metadata of older releases, many shards) read by their dataset folder.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("moto")
moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")
fsspec = pytest.importorskip("fsspec")

import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import tfr_torch  # noqa: E402
from tfr_torch.format.index import scan_index  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUCKET = "tfr-bucket"
SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """Start the S3 server on 127.0.0.1 (a free port), point s3fs at it, create the bucket; stop it afterwards."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no request log lines
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_ENV.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", str(tmp_path_factory.mktemp("aws") / "config"))  # no user AWS config
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path_factory.mktemp("aws") / "credentials"))
        mp.setenv("FSSPEC_S3_ENDPOINT_URL", endpoint)
        # fsspec read the FSSPEC_* variables when it was imported, before the server existed: set the same value
        # in its configuration for this process (and the DataLoader workers it forks)
        mp.setitem(fsspec.config.conf, "s3", {**fsspec.config.conf.get("s3", {}), "endpoint_url": endpoint})
        s3fs.S3FileSystem.clear_instance_cache()
        try:
            fs = fsspec.filesystem("s3")
            assert fs.endpoint_url == endpoint  # never the real AWS
            fs.mkdir(BUCKET)
            yield {"endpoint": endpoint, "fs": fs}
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            server.stop()


def drain(iterable) -> int:
    """Iterate to the end with a for loop (list() would call len() first, which counts records up front)."""
    n = 0
    for _ in iterable:
        n += 1
    return n


def example_records(first: int, count: int) -> list[bytes]:
    return [tfr_torch.encode_example({"id": first + i, "blob": b"s" * ((first + i) % 23)}) for i in range(count)]


def test_endpoint_comes_from_fsspec_configuration(s3):
    fs = fsspec.filesystem("s3")
    assert fs.endpoint_url == s3["endpoint"]
    assert fs.ls(BUCKET) is not None


def test_fresh_process_configured_by_environment_only(s3):
    """FSSPEC_S3_ENDPOINT_URL + AWS_* in the environment of a new process are enough: no code change needed."""
    script = textwrap.dedent("""
        import sys, fsspec, tfr_torch
        url = sys.argv[1]
        assert fsspec.filesystem("s3").endpoint_url == sys.argv[2], fsspec.config.conf
        with tfr_torch.TFRecordWriter(url) as writer:
            for i in range(5):
                writer.write(tfr_torch.encode_example({"id": i}))
        tfr_torch.build_index(url)
        print(len(list(tfr_torch.read_records(url))), len(tfr_torch.read_index(url + ".idx", url)))
    """)
    url = f"s3://{BUCKET}/env/fresh.tfrecord"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSSPEC_")}
    env.update(AWS_ENV, FSSPEC_S3_ENDPOINT_URL=s3["endpoint"],
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", script, url, s3["endpoint"]], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split() == ["5", "5"]
    assert len(list(tfr_torch.read_records(url))) == 5  # and this process sees what it wrote


@pytest.mark.parametrize("compression,name", [(None, "data.tfrecord"), ("gzip", "data.tfrecord.gz"),
                                              ("gzip", "data-gzip.tfrecord")])
def test_writer_and_reader_round_trip(s3, tmp_path, compression, name, write_records):
    prefix = f"{BUCKET}/roundtrip-{compression}-{name}"
    url = f"s3://{prefix}/{name}"
    records = example_records(0, 40) + [b"", b"\x00" * 70_000]  # an empty record and one longer than a block
    write_records(url, records, compression)
    local = tmp_path / name
    write_records(str(local), records, compression)

    fs = s3["fs"]
    assert fs.ls(prefix) == [f"{prefix}/{name}"]  # atomic write: no temporary object left behind
    assert fs.cat(f"{prefix}/{name}") == local.read_bytes()  # byte-identical to the same file written locally
    with tfr_torch.read_records(url) as reader:  # compression detected from the name or the first bytes
        assert list(reader) == records
        assert reader.compression == ("gzip" if compression else "none")
    assert list(tfr_torch.read_records(url, compression=compression)) == records


def test_writer_abort_leaves_nothing(s3):
    prefix = f"{BUCKET}/aborted"
    url = f"s3://{prefix}/never.tfrecord"
    with pytest.raises(RuntimeError):
        with tfr_torch.TFRecordWriter(url) as writer:
            writer.write(b"partial")
            raise RuntimeError("stop")
    assert not s3["fs"].exists(prefix + "/never.tfrecord")
    assert s3["fs"].glob(prefix + "/*") == []


@pytest.mark.parametrize("compression,name", [(None, "x.tfrecord"), ("gzip", "x.tfrecord.gz")])
def test_build_index_on_s3(s3, tmp_path, compression, name, write_records):
    url = f"s3://{BUCKET}/index-{compression}/{name}"
    records = example_records(100, 25)
    write_records(url, records, compression)
    local = tmp_path / name
    write_records(str(local), records, compression)

    index_url = tfr_torch.build_index(url)
    assert index_url == url + ".idx"
    assert s3["fs"].exists(index_url)
    assert s3["fs"].cat(index_url) == Path(tfr_torch.build_index(local)).read_bytes()
    index = tfr_torch.read_index(index_url, url)
    assert index.tolist() == scan_index(local).tolist()
    assert len(index) == len(records)
    # the index reaches records by offset: read the last 5 records only
    start = int(index[-5, 0])
    assert list(tfr_torch.read_records(url, start=start)) == records[-5:]


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_sharded_writer_into_s3(s3, tmp_path, compression):
    """ShardedWriter(out_dir="s3://..."): shards made on local disk and uploaded, moved to their final names
    inside the store; the objects are the files a local folder gets, nothing else is left under the prefix, and
    the set reads back through DataLoader workers with features="auto"."""
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    prefix = f"{BUCKET}/sharded-{compression}"

    def write(out):
        with tfr_torch.ShardedWriter(out, "ds", "train", records_per_shard=40, compression=compression,
                                     features=spec) as writer:
            for record in example_records(0, 100):
                writer.write(record)
        return writer.paths

    paths = write(f"s3://{prefix}")
    write(tmp_path)
    assert paths == [f"s3://{prefix}/ds-train.tfrecord-0000{i}-of-00003" for i in range(3)]
    fs = s3["fs"]
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.find(prefix)) == sorted(os.listdir(tmp_path))
    for name in os.listdir(tmp_path):
        assert fs.cat(f"{prefix}/{name}") == (tmp_path / name).read_bytes(), name
    loader = DataLoader(tfr_torch.TFRecordDataset(f"s3://{prefix}/ds-train.tfrecord-*", features="auto",
                                                  shuffle=True, batch_size=None), batch_size=None, num_workers=2)
    assert sorted(int(item["id"]) for item in loader) == list(range(100))


def test_sharded_writer_into_a_missing_bucket_creates_no_bucket(s3):
    with pytest.raises(OSError, match=r"uploading ds-train\.tfrecord-00000\.partial to "
                                      r"'s3://no-such-bucket-x/out/ds-train\.tfrecord-00000\.partial' failed"):
        with tfr_torch.ShardedWriter("s3://no-such-bucket-x/out", "ds", "train", records_per_shard=2) as writer:
            for record in example_records(0, 5):
                writer.write(record)
    assert not s3["fs"].exists("no-such-bucket-x")


def _worker_pid(item):
    info = torch.utils.data.get_worker_info()
    return item, (os.getpid(), None if info is None else info.id)


@pytest.mark.parametrize("variant", ["index-shuffle", "index-batches", "noindex-batches", "gzip-index-shuffle",
                                     "gzip-noindex-shuffle"])
def test_dataset_glob_with_dataloader_workers(s3, variant, write_records):
    counts = [13, 0, 7, 21, 5]  # one empty object
    gzip = variant.startswith("gzip")
    suffix = ".tfrecord.gz" if gzip else ".tfrecord"
    prefix = f"s3://{BUCKET}/dataset-{variant}"
    all_ids = []
    first = 1
    for n, count in enumerate(counts):
        url = f"{prefix}/train-{n:02d}{suffix}"
        write_records(url, example_records(first, count), "gzip" if gzip else None)
        all_ids += list(range(first, first + count))
        first += count
        if "noindex" not in variant:
            tfr_torch.build_index(url)
    write_records(f"{prefix}/other{suffix}", example_records(10_000, 3),  # not matched by the glob
                  "gzip" if gzip else None)

    index = None if "noindex" in variant else "auto"
    batch_size = 4 if "batches" in variant else None
    # "train-*" also matches the train-NN.tfrecord.idx objects beside the files: expansion leaves them out
    pattern = f"{prefix}/train-*" if variant == "index-shuffle" else f"{prefix}/train-*{suffix}"
    dataset = tfr_torch.TFRecordDataset(pattern, features=SPEC, index=index,
                                        shuffle="shuffle" in variant, seed=5, batch_size=batch_size,
                                        transform=_worker_pid)
    assert dataset.paths == [f"{prefix}/train-{n:02d}{suffix}" for n in range(len(counts))]  # sorted, as URLs
    assert all((o is not None) == (index == "auto") for o in dataset.offsets)
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    seen = []
    readers = set()
    for item, (pid, worker) in loader:
        seen += item["id"].reshape(-1).tolist()
        readers.add((pid, worker))
        if batch_size is not None:
            assert 1 <= item["id"].numel() <= batch_size
    duplicated = sorted(i for i, c in Counter(seen).items() if c > 1)
    assert not duplicated, duplicated
    assert sorted(seen) == all_ids  # every record exactly once, nothing from other.tfrecord
    assert {worker for _, worker in readers} == {0, 1}  # read in both worker processes (fork: fs made anew there)
    assert os.getpid() not in {pid for pid, _ in readers}
    if "shuffle" in variant:
        assert seen != sorted(seen)


def test_missing_object_raises_file_not_found_naming_the_url(s3, write_records):
    url = f"s3://{BUCKET}/missing/nope.tfrecord"
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        list(tfr_torch.read_records(url))
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        tfr_torch.build_index(url)
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        drain(tfr_torch.TFRecordDataset(url))
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        drain(tfr_torch.TFRecordDataset(url, index="auto", shuffle=True))
    pattern = f"s3://{BUCKET}/missing/train-*.tfrecord"
    with pytest.raises(FileNotFoundError, match=re.escape(pattern)):
        tfr_torch.TFRecordDataset(pattern)
    # a file that exists with an index that does not
    url = f"s3://{BUCKET}/missing/present.tfrecord"
    write_records(url, example_records(0, 3))
    with pytest.raises(FileNotFoundError, match=re.escape(url + ".idx")):
        tfr_torch.TFRecordDataset(url, index=[url + ".idx"])
    # a bucket that does not exist
    url = "s3://tfr-no-such-bucket/x.tfrecord"
    with pytest.raises(FileNotFoundError, match=re.escape(url)):
        list(tfr_torch.read_records(url))


def test_missing_object_in_dataloader_worker(s3, write_records, loader_error):
    url = f"s3://{BUCKET}/missing-in-worker/a.tfrecord"
    write_records(url, example_records(0, 4))
    dataset = tfr_torch.TFRecordDataset([url], features=SPEC)
    s3["fs"].rm(url)  # deleted between building the dataset and reading it
    error = loader_error(DataLoader(dataset, batch_size=None, num_workers=2))
    assert isinstance(error, FileNotFoundError) and url in str(error), repr(error)
    assert "DataLoader worker process" in str(error)  # raised in a worker, carried to the main process


@pytest.mark.parametrize("make", ["read_records", "writer", "dataset", "dataset-glob", "dataset-index-auto",
                                  "build_index"])
def test_unknown_protocol_is_a_clear_error(make):
    url = "nosuchproto://bucket/data.tfrecord"
    calls = {
        "read_records": lambda: list(tfr_torch.read_records(url)),
        "writer": lambda: tfr_torch.TFRecordWriter(url),
        "dataset": lambda: drain(tfr_torch.TFRecordDataset(url)),
        "dataset-glob": lambda: tfr_torch.TFRecordDataset("nosuchproto://bucket/train-*.tfrecord"),
        "dataset-index-auto": lambda: tfr_torch.TFRecordDataset(url, index="auto"),
        "build_index": lambda: tfr_torch.build_index(url),
    }
    with pytest.raises(ValueError) as info:
        calls[make]()
    message = str(info.value)
    assert "nosuchproto" in message
    assert "nosuchproto://bucket/" in message, f"the error does not name the URL: {message!r}"


@pytest.mark.parametrize("make", ["read_records", "dataset-index-auto"])
def test_protocol_without_its_package_names_the_package(make):
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    url = "gs://bucket/data.tfrecord"
    calls = {
        "read_records": lambda: list(tfr_torch.read_records(url)),
        "dataset-index-auto": lambda: tfr_torch.TFRecordDataset(url, index="auto"),
    }
    with pytest.raises(ImportError) as info:
        calls[make]()
    message = str(info.value)
    assert "gcsfs" in message
    assert url in message, f"the error does not name the URL: {message!r}"


@pytest.mark.filterwarnings("ignore:.*have no index:UserWarning")
@pytest.mark.parametrize("layout", ["rlds_legacy/1.0.0", "rlds_nested/0.1.0"])
def test_rlds_folder_on_s3_read_as_the_open_x_embodiment_release_is(s3, layout):
    """An RLDS folder (older TFDS metadata; many shards) read from the bucket by its dataset folder, as the public
    Open X-Embodiment release is read from gs:// through gcsfs: TFDS's episodes for a split, in the process and
    in DataLoader workers, each exactly once."""
    import json

    rlds = REPO / "tests" / "data" / "tfds"
    values = json.loads((rlds / "rlds_values.json").read_text())
    fs = s3["fs"]
    name, version = layout.split("/")
    for path in (rlds / "rlds" / layout).iterdir():
        fs.pipe(f"{BUCKET}/rlds/{layout}/{path.name}", path.read_bytes())
    url = f"s3://{BUCKET}/rlds/{name}"
    ids = (lambda e: int(e["episode_metadata"]["episode_id"])) if name == "rlds_legacy" else (
        lambda e: int(e["episode"]["id"]))
    spec = "train[:50%]" if name == "rlds_legacy" else "train[:25%]"
    splits = values["splits"]["rlds_golden/1.0.0" if name == "rlds_legacy" else layout]
    dataset = tfr_torch.TFRecordDataset(url, split=spec)
    assert dataset.tfds.info.path == f"{url}/{version}"
    assert [ids(e) for e in dataset] == splits[spec]
    got = [ids(e) for e in DataLoader(tfr_torch.TFRecordDataset(url, split="train"), batch_size=None, num_workers=2)]
    assert Counter(got) == Counter(splits["train"]) and len(set(got)) == len(got)
