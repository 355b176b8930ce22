"""RLDS / Open X-Embodiment episodes read TF-free: TFDS folders whose `steps` feature is a `tfds.features.Dataset`.

The folders under `tests/data/tfds/rlds/` were prepared by real TFDS 4.9.10 with
`tests/data/tfds/make_rlds_golden.py`, which recorded in `rlds_values.json` what `tfds.as_numpy` yields (each
episode's `steps` as the list of its step dicts): `rlds_golden` (TFDS 4.9's metadata), `rlds_legacy` (the same
shards with features.json and dataset_info.json as TFDS < 4.6 wrote them; TFDS reads it to the same values) and
`rlds_nested` (a Dataset below the top level, a ragged value in each step, an empty episode, 8 shards, the Open
X-Embodiment release's dataset_info.json fields). tfr_torch gives an episode's steps as one dict of `[T, ...]`
tensors (images `[T, C, H, W]`, Text a list of T bytes, a Sequence in each step a RaggedTensor).
"""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.tfds import TFDSMetadataError, read_info

pytestmark = pytest.mark.filterwarnings("ignore:.*have no index:UserWarning")  # the golden shards come without

HERE = Path(__file__).parent / "data" / "tfds"
RLDS = HERE / "rlds"
VALUES = json.loads((HERE / "rlds_values.json").read_text())
GOLDEN = RLDS / "rlds_golden" / "1.0.0"
LEGACY = RLDS / "rlds_legacy" / "1.0.0"
NESTED = RLDS / "rlds_nested" / "0.1.0"
# (folder, the values it must give): the legacy layout holds the golden folder's shards
LAYOUTS = {"rlds_golden": (GOLDEN, "rlds_golden/1.0.0"), "rlds_legacy": (LEGACY, "rlds_golden/1.0.0"),
           "rlds_nested": (NESTED, "rlds_nested/0.1.0")}
IMAGES = {"image", "wrist_image"}  # TFDS: [T, H, W, C]; tfr_torch: [T, C, H, W]
try:  # the tfds extra: JPEGs decode with TFDS's own inverse DCT, so pixels equal TFDS's exactly
    import simplejpeg  # noqa: F401

    JPEG_TOLERANCE = 0
except ImportError:
    JPEG_TOLERANCE = 8


def decoded(value):
    """A value of rlds_values.json: dicts, bytes, numpy arrays, and {"dataset": [step, ...]} as a list of steps."""
    if "dict" in value:
        return {k: decoded(v) for k, v in value["dict"].items()}
    if "dataset" in value:
        return [decoded(step) for step in value["dataset"]]
    if "bytes" in value:
        return base64.b64decode(value["bytes"])
    dtype = np.dtype(value["dtype"]).newbyteorder("<")
    return np.frombuffer(base64.b64decode(value["b64"]), dtype=dtype).astype(value["dtype"]).reshape(value["shape"])


def assert_steps(got, steps: list, key: str) -> None:
    """`got`: tfr_torch's steps (a dict of [T, ...] values); `steps`: TFDS's list of T step dicts."""
    assert isinstance(got, dict), key
    for name, value in got.items():
        where = f"{key}/{name}"
        column = [step[name] for step in steps]
        if isinstance(value, dict):
            assert_steps(value, column, where)
        elif isinstance(value, list):  # Text: T byte strings
            assert value == column and all(type(v) is bytes for v in value), where
        elif isinstance(value, tfr_torch.RaggedTensor):  # a Sequence in each step
            assert value.to_list() == [c.tolist() for c in column], where
        else:
            assert isinstance(value, torch.Tensor) and value.shape[0] == len(steps), where
            if name in IMAGES:
                value = value.permute(0, 2, 3, 1)
            if not steps:
                assert value.numel() == 0, where
                continue
            want = np.stack(column)
            assert value.dtype == torch.from_numpy(np.zeros(0, want.dtype)).dtype, (where, value.dtype, want.dtype)
            assert tuple(value.shape) == want.shape, (where, tuple(value.shape), want.shape)
            if name == "image" and JPEG_TOLERANCE:
                assert np.abs(value.numpy().astype(int) - want.astype(int)).max() <= JPEG_TOLERANCE, where
            else:
                np.testing.assert_array_equal(value.numpy(), want, err_msg=where)
    assert len(got) == (len(steps[0]) if steps else len(got)), key


def assert_episode(got, want, key: str) -> None:
    assert isinstance(got, dict) and sorted(got) == sorted(want), key
    for name, value in want.items():
        where = f"{key}/{name}"
        if isinstance(value, list):  # a Dataset feature: the episode's steps
            assert_steps(got[name], value, where)
        elif isinstance(value, dict):
            assert_episode(got[name], value, where)
        elif isinstance(value, bytes):
            assert got[name] == value, where
        else:
            assert isinstance(got[name], torch.Tensor), where
            np.testing.assert_array_equal(got[name].numpy(), value, err_msg=where)


def episode_id(episode) -> int:
    return int(episode["episode_metadata"]["episode_id"] if "episode_metadata" in episode
               and "episode_id" in episode["episode_metadata"] else episode["episode"]["id"])


# ----- values -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_leaf_equals_what_tfds_yields(layout, backend):
    folder, values = LAYOUTS[layout]
    for split, episodes in VALUES[values].items():
        got = list(tfr_torch.TFRecordDataset(folder, split=split))
        assert len(got) == len(episodes)
        for i, (episode, want) in enumerate(zip(got, episodes)):
            assert_episode(episode, decoded(want), f"{layout}/{split}[{i}]")


def test_the_episode_layout():
    """One episode: the steps as a dict of [T, ...] tensors (what a model batches), TFDS's dtypes."""
    episode = next(iter(tfr_torch.TFRecordDataset(GOLDEN, split="test[1:2]")))
    steps, t = episode["steps"], 2 + (101 * 5) % 7
    assert episode["episode_metadata"] == {"file_path": b"/data/raw/episode_101.npy",
                                           "episode_id": torch.tensor(101)}
    shapes = {"action": (t, 4), "reward": (t,), "discount": (t,), "is_first": (t,), "is_last": (t,),
              "is_terminal": (t,), "language_embedding": (t, 6)}
    assert {k: tuple(steps[k].shape) for k in shapes} == shapes
    assert steps["is_first"].dtype == torch.bool and steps["reward"].dtype == torch.float32
    assert steps["is_first"].tolist() == [True] + [False] * (t - 1)
    assert steps["language_instruction"] == [b"open the drawer"] * t
    obs = steps["observation"]
    assert (obs["image"].shape, obs["wrist_image"].shape, obs["state"].shape) == ((t, 3, 8, 10), (t, 3, 4, 6), (t, 5))


def test_dataset_feature_in_both_features_json_forms():
    proto = json.loads((GOLDEN / "features.json").read_text())["featuresDict"]["features"]["steps"]
    legacy = json.loads((LEGACY / "features.json").read_text())["content"]["steps"]
    assert proto["pythonClassName"] == legacy["type"] == "tensorflow_datasets.core.features.dataset_feature.Dataset"
    assert legacy["content"]["length"] is None and "type" in legacy["content"]["feature"]
    info = json.loads((LEGACY / "dataset_info.json").read_text())
    assert "fileFormat" not in info and all("filepathTemplate" not in s and "numShards" in s for s in info["splits"])
    assert read_info(LEGACY).splits["train"].shard_lengths == read_info(GOLDEN).splits["train"].shard_lengths


def test_empty_episode_gives_empty_steps():
    (episode,) = [e for e in tfr_torch.TFRecordDataset(NESTED, split="train") if int(e["episode"]["id"]) == 4]
    steps = episode["episode"]["steps"]
    assert steps["action"].shape == (0, 3) and steps["obs"]["depth"].shape == (0, 2, 3)
    assert steps["obs"]["depth"].dtype == torch.uint16 and steps["note"] == []
    assert steps["contacts"].to_list() == []


# ----- splits ------------------------------------------------------------------------------------------------------

SPLITS = [(folder, spec) for folder, specs in VALUES["splits"].items() for spec in specs]


@pytest.mark.parametrize("folder,spec", SPLITS)
def test_every_split_expression_selects_tfds_episodes(folder, spec):
    want = VALUES["splits"][folder][spec]
    path = RLDS / folder
    assert [episode_id(e) for e in tfr_torch.TFRecordDataset(path, split=spec)] == want
    indexed = tfr_torch.IndexedTFRecordDataset(path, split=spec)
    assert [episode_id(indexed[i]) for i in range(len(indexed))] == want
    if folder.startswith("rlds_golden"):  # the legacy metadata selects the same records
        legacy = tfr_torch.TFRecordDataset(LEGACY, split=spec)
        assert [episode_id(e) for e in legacy] == want


# ----- DataLoader ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["rlds_golden", "rlds_nested"])
def test_dataloader_workers_give_every_episode_once(layout):
    folder, values = LAYOUTS[layout]
    want = {episode_id(decoded(e)): decoded(e) for e in VALUES[values]["train"]}
    dataset = tfr_torch.TFRecordDataset(folder, split="train")
    got = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert sorted(episode_id(e) for e in got) == sorted(want)
    for episode in got:
        assert_episode(episode, want[episode_id(episode)], f"{layout}/{episode_id(episode)}")


def test_indexed_dataset_in_dataloader_workers():
    dataset = tfr_torch.IndexedTFRecordDataset(GOLDEN, split="train[1:]")
    got = list(DataLoader(dataset, batch_size=None, num_workers=2, shuffle=True))
    assert sorted(episode_id(e) for e in got) == sorted(VALUES["splits"]["rlds_golden/1.0.0"]["train[1:]"])


# ----- remote folders, as the Open X-Embodiment release is read (gs:// through gcsfs) ------------------------------

@pytest.fixture
def remote():
    """The three layouts copied into fsspec's in-memory filesystem: `remote(name)` is its version folder's URL."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"memory://rlds-{uuid.uuid4().hex}"
    for layout, (folder, _) in LAYOUTS.items():
        for path in folder.iterdir():
            fs.pipe(f"{root}/{layout}/{folder.name}/{path.name}", path.read_bytes())
    yield lambda name: f"{root}/{name}/{LAYOUTS[name][0].name}"
    fs.rm(root, recursive=True)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_remote_folders_read_as_local_ones(remote, layout):
    folder, values = LAYOUTS[layout]
    url = remote(layout)
    info = read_info(url)
    assert info.path == url and info.splits == read_info(folder).splits
    for split, episodes in VALUES[values].items():
        got = list(tfr_torch.TFRecordDataset(url, split=split))
        assert [episode_id(e) for e in got] == [episode_id(decoded(e)) for e in episodes]
        for i, (episode, want) in enumerate(zip(got, episodes)):
            assert_episode(episode, decoded(want), f"{url}/{split}[{i}]")
    dataset = tfr_torch.TFRecordDataset(tfr_torch.tfds.read_info(url), split="train[:50%]")
    ids = [episode_id(e) for e in DataLoader(dataset, batch_size=None, num_workers=2)]
    assert sorted(ids) == sorted(episode_id(e) for e in tfr_torch.TFRecordDataset(folder, split="train[:50%]"))


def test_remote_dataset_folder_reads_its_latest_version(remote):
    import fsspec

    url = remote("rlds_nested").rsplit("/", 1)[0]
    fsspec.filesystem("memory").pipe(f"{url}/0.0.9/dataset_info.json", b"{}")  # an older version, never read
    dataset = tfr_torch.TFRecordDataset(url, split="train[:25%]")
    assert dataset.tfds.info.path == f"{url}/0.1.0"
    assert [episode_id(e) for e in dataset] == VALUES["splits"]["rlds_nested/0.1.0"]["train[:25%]"]
    assert tfr_torch.tfds.read_info(url.rsplit("/", 1)[0], "rlds_nested").path == f"{url}/0.1.0"


def test_remote_missing_shard_named(remote):
    import fsspec

    url = remote("rlds_nested")
    fsspec.filesystem("memory").rm(f"{url}/rlds_nested-train.tfrecord-00005-of-00008")
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(url, split="train")
    assert str(info.value) == (f"{url}/rlds_nested-train.tfrecord-00005-of-00008: shard missing: {url}/"
                               "dataset_info.json lists 8 shard(s) for split 'train'")


# ----- errors --------------------------------------------------------------------------------------------------------

@pytest.fixture
def copy(tmp_path):
    dst = tmp_path / "rlds_golden" / "1.0.0"
    shutil.copytree(GOLDEN, dst)
    return dst


def _set_steps(folder: Path, edit) -> None:
    path = folder / "features.json"
    data = json.loads(path.read_text())
    edit(data["featuresDict"]["features"]["steps"])
    path.write_text(json.dumps(data))


def test_dataset_without_its_feature_named(copy):
    _set_steps(copy, lambda steps: steps["sequence"].pop("feature"))
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train")
    assert str(info.value) == f"{copy}/features.json: feature 'steps': Dataset needs a \"feature\""


def test_unsupported_feature_inside_the_steps_named(copy):
    def edit(steps):
        steps["sequence"]["feature"]["featuresDict"]["features"]["observation"]["featuresDict"]["features"][
            "point_cloud"] = {"pythonClassName": "my_robot.features.PointCloud", "pointCloud": {}}

    _set_steps(copy, edit)
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train")
    assert str(info.value) == (
        f"{copy}/features.json: feature 'steps/observation/point_cloud' is a PointCloud, which tfr_torch does not "
        "read (supported: FeaturesDict, Tensor, Scalar, ClassLabel, Text, Image, Video, BBoxFeature, Audio (not "
        "lazily decoded), Sequence, Dataset)")


def test_bad_dataset_length_named(copy):
    _set_steps(copy, lambda steps: steps["sequence"].update(length="many"))
    with pytest.raises(TFDSMetadataError) as info:
        tfr_torch.TFRecordDataset(copy, split="train")
    assert str(info.value) == (f"{copy}/features.json: feature 'steps': Sequence length must be a non-negative "
                               "integer, got 'many'")


def test_corrupt_step_value_names_the_record_and_key(copy):
    """An episode whose actions hold one float too many: the error names the shard, the record and the key."""
    from tfr_torch.format.reader import RecordReader

    shard = copy / "rlds_golden-test.tfrecord-00000-of-00003"
    records = list(RecordReader(str(shard)))
    features = tfr_torch.decode_example(records[0])
    features["steps/action"] = np.append(np.asarray(features["steps/action"], np.float32), np.float32(1))
    with tfr_torch.TFRecordWriter(str(shard)) as writer:
        writer.write(tfr_torch.encode_example(features))
        for record in records[1:]:
            writer.write(record)
    with pytest.raises(tfr_torch.TFRecordError) as info:
        list(tfr_torch.TFRecordDataset(copy, split="test"))
    assert str(info.value) == (f"{shard}:0: feature 'steps/action' in the example holds 33 float values, not a "
                               "multiple of 4 (FixedLenSequenceFeature shape [4])")  # 8 steps of 4, and one more


# ----- written by tfr_torch, read back --------------------------------------------------------------------------------

def test_reshard_tfds_of_an_rlds_folder_reads_back(tmp_path):
    from tfr_torch.tools.reshard import reshard

    shards = sorted(str(p) for p in GOLDEN.glob("rlds_golden-train.tfrecord-*"))
    written = reshard(shards, str(tmp_path / "out"), shard_size="4KB", tfds=True, version="1.0.1")
    folder = Path(written[0]).parent
    assert len(written) > 1 and folder == tmp_path / "out" / "rlds_golden" / "1.0.1"
    want = VALUES["rlds_golden/1.0.0"]["train"]
    got = list(tfr_torch.TFRecordDataset(folder, split="train"))
    assert [episode_id(e) for e in got] == [episode_id(decoded(e)) for e in want]
    for i, (episode, ex) in enumerate(zip(got, want)):
        assert_episode(episode, decoded(ex), f"resharded[{i}]")


def test_sharded_writer_with_rlds_features_reads_back(tmp_path):
    from tfr_torch.format.reader import RecordReader

    features = json.loads((GOLDEN / "features.json").read_text())
    folder = tmp_path / "episodes" / "1.0.0"
    with tfr_torch.ShardedWriter(folder, "episodes", "train", records_per_shard=2, tfds={"features": features}) as w:
        for shard in sorted(GOLDEN.glob("rlds_golden-train.tfrecord-*")):
            for record in RecordReader(str(shard)):
                w.write(record)
    got = list(tfr_torch.TFRecordDataset(folder, split="train[-3:]"))
    want = VALUES["rlds_golden/1.0.0"]["train"][-3:]
    for i, (episode, ex) in enumerate(zip(got, want)):
        assert_episode(episode, decoded(ex), f"written[{i}]")
    assert len(got) == 3
