"""Audit of tfr_torch.rlds (FrameDataset, windows, packed frames, sampling, transforms) and the TFDS metadata and
episode decoding it relies on (tfr_torch.tfds), on small RLDS-shaped TFDS folders written here (is_first / is_last /
is_terminal flags, a nested observation dict, PNG images, text; episodes of 0 and 1 steps).

What it checks:
- every frame's window against an independent reference of Octo's `chunk_act_obs` / goal relabeling / subsampling
  (history and action chunks longer than the episode, padding by repetition, masks, the step's own flags and text),
  frame by frame and batch by batch, and the episode order without shuffling;
- exactly once: the multiset of (episode, step) ids over simulated ranks x DataLoader workers, shuffled or not, with
  and without batches, for one dataset and a mixture, also when the ranks do not divide the episodes; no frame twice
  across readers within a first pass with `samples_per_epoch`; every rank yields its quota (`len(ds)`);
- resumption mid-epoch through torchdata's StatefulDataLoader (workers) and in the process; a state saved right
  after `set_epoch`, or loaded under another num_workers or batch_size, neither loses nor repeats frames;
  `set_epoch` seen by persistent workers, replaying an epoch exactly;
- batches made in reused memory stay intact while a key of them is held; the shuffle buffer gives every item once;
- hostile inputs: step values of different lengths in one episode (from a record, from a lying features.json, from a
  standardize function), an image of another size than features.json declares, shardLengths that disagree with the
  shards (with and without numBytes), a truncated shard: an error naming the file (and offset / key), never frames
  silently lost or made up;
- with TFR_TORCH_TF_PYTHON naming a Python with TensorFlow and tensorflow-datasets: TFDS itself refuses the same
  hostile episodes, and `resize_images` agrees with `tf.image.resize(bilinear, antialias=True)` within 1.
"""

from __future__ import annotations

import collections
import gc
import io
import itertools
import json
import os
import pickle
import shutil
import subprocess
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.rlds import FrameDataset, Source, Window, frame_index, resize_images, shuffled, window_episode
from tfr_torch.tfds import TFDSMetadataError

pytestmark = [pytest.mark.filterwarnings("ignore:.*have no index:UserWarning"),
              pytest.mark.filterwarnings("ignore:FrameDataset with world_size:UserWarning")]  # ranks apart

TF_PYTHON = os.environ.get("TFR_TORCH_TF_PYTHON", "")
needs_tf = pytest.mark.skipif(not TF_PYTHON or not os.path.exists(TF_PYTHON),
                              reason="set TFR_TORCH_TF_PYTHON to a Python with tensorflow for the reference checks")

_CLASS = "tensorflow_datasets.core.features."
EVEN = [3, 5, 0, 1, 7, 4, 6, 2, 5, 1, 8, 4]  # 12 episodes: divisible by 1, 2, 3 and 4 ranks
ODD = [3, 5, 1, 7, 4, 6, 2, 5, 3, 8, 4, 6, 2]  # 13 episodes
OTHER = [6, 2, 9, 4, 3, 3]


# ----- writing small RLDS folders ----------------------------------------------------------------------------------

def _tensor(dims, dtype):
    return {"pythonClassName": _CLASS + "tensor_feature.Tensor",
            "tensor": {"shape": {"dimensions": [str(d) for d in dims]}, "dtype": dtype, "encoding": "none"}}


def _dict(features):
    return {"pythonClassName": _CLASS + "features_dict.FeaturesDict", "featuresDict": {"features": features}}


def _features():
    image = {"pythonClassName": _CLASS + "image_feature.Image",
             "image": {"shape": {"dimensions": ["2", "2", "3"]}, "dtype": "uint8", "encodingFormat": "png"}}
    step = _dict({"observation": _dict({"image": image, "pose": _dict({"xyz": _tensor((3,), "float32")}),
                                        "state": _tensor((2,), "float32")}),
                  "action": _tensor((2,), "float32"),
                  "is_first": _tensor((), "bool"), "is_last": _tensor((), "bool"), "is_terminal": _tensor((), "bool"),
                  "language_instruction": {"pythonClassName": _CLASS + "text_feature.Text", "text": {}}})
    steps = {"pythonClassName": _CLASS + "dataset_feature.Dataset", "sequence": {"feature": step, "length": "-1"}}
    return _dict({"steps": steps, "episode_metadata": _dict({"episode_id": _tensor((), "int64")})})


def _png(value, size=2):
    out = io.BytesIO()
    Image.fromarray(np.full((size, size, 3), value % 256, np.uint8)).save(out, "PNG")
    return out.getvalue()


def _episode(e, t, pose_steps=None, image_sizes=None):
    """An episode whose values say where they come from: state = (id, step), pose = (id, step, 2 step), action =
    (id, step), image pixels = step, instruction b"e<id> s<step>"; is_terminal on the last step."""
    s = np.arange(t, dtype=np.float32)
    p = np.arange(t if pose_steps is None else pose_steps, dtype=np.float32)
    sizes = image_sizes or [2] * t
    return {
        "steps/observation/image": np.array([_png(k, sizes[k]) for k in range(t)], dtype=object) if t
        else np.array([], dtype=bytes),
        "steps/observation/pose/xyz": np.stack([np.full(len(p), e, np.float32), p, 2 * p], 1).reshape(-1),
        "steps/observation/state": np.stack([np.full(t, e, np.float32), s], 1).reshape(-1),
        "steps/action": np.stack([np.full(t, e, np.float32), s], 1).reshape(-1),
        "steps/is_first": (np.arange(t) == 0).astype(np.int64),
        "steps/is_last": (np.arange(t) == t - 1).astype(np.int64),
        "steps/is_terminal": (np.arange(t) == t - 1).astype(np.int64),
        "steps/language_instruction": [f"e{e} s{k}".encode() for k in range(t)] if t else np.array([], dtype=bytes),
        "episode_metadata/episode_id": e,
    }


def write_episodes(root: Path, name: str, lengths, first_id=0, per_shard=3, examples=None) -> Path:
    version = root / name / "1.0.0"
    with tfr_torch.ShardedWriter(str(version), name, "train", records_per_shard=per_shard,
                                 tfds={"features": _features()}) as writer:
        for example in examples if examples is not None else (
                _episode(first_id + i, t) for i, t in enumerate(lengths)):
            writer.write_example(example)
    return version


def shards(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if ".tfrecord-" in p.name and not p.name.endswith(".idx"))


def with_ids(episode):
    steps = dict(episode["steps"])
    steps["episode_id"] = episode["episode_metadata"]["episode_id"].expand(len(steps["action"]))
    return steps


def frames_of(item):
    """The frames of an item (a frame or a batch of them), each a dict."""
    if item["timestep"].dim() == 0:
        return [item]

    def pick(value, i):
        if isinstance(value, dict):
            return {k: pick(v, i) for k, v in value.items()}
        return value[i]

    return [pick(item, i) for i in range(len(item["timestep"]))]


def ids(item):
    return [(int(f["episode_id"]), int(f["timestep"])) for f in frames_of(item)]


def every_step(lengths, first_id=0):
    return collections.Counter((first_id + e, t) for e, n in enumerate(lengths) for t in range(n))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("rlds_audit")
    return {"even": write_episodes(root, "even", EVEN), "odd": write_episodes(root, "odd", ODD),
            "other": write_episodes(root, "other", OTHER, first_id=100)}


# ----- windows: every frame against Octo's semantics ---------------------------------------------------------------

def _check_frame(f, window, lengths):
    e, t = int(f["episode_id"]), int(f["timestep"])
    n = lengths[e]
    assert 0 <= t < n
    past = [t - window.history + 1 + k for k in range(window.history)]
    assert f["timestep_pad_mask"].tolist() == [s >= 0 for s in past]
    assert f["observation"]["state"].tolist() == [[e, max(s, 0)] for s in past]  # first observation repeated
    assert f["observation"]["pose"]["xyz"].tolist() == [[e, max(s, 0), 2 * max(s, 0)] for s in past]
    assert f["observation"]["image"].shape == (window.history, 3, 2, 2)
    assert f["observation"]["image"][:, 0, 0, 0].tolist() == [max(s, 0) for s in past]
    ahead = [t + j for j in range(window.future)]
    assert f["action_pad_mask"].tolist() == [s < n for s in ahead]
    assert f["action"].tolist() == [[e, min(s, n - 1)] for s in ahead]  # last action repeated, not zeros
    assert bool(f["is_first"]) == (t == 0) and bool(f["is_last"]) == (t == n - 1)
    assert bool(f["is_terminal"]) == (t == n - 1)
    assert f["language_instruction"] == f"e{e} s{t}".encode()
    if window.goal is not None:
        g = int(f["goal_timestep"])
        assert (g == n - 1) if window.goal == "last" else (min(t + 1, n - 1) <= g <= n - 1)
        assert f["goal"]["state"].tolist() == [e, g] and int(f["goal"]["image"][0, 0, 0]) == g
    else:
        assert "goal" not in f and "goal_timestep" not in f


@pytest.mark.parametrize("window", [Window(history=4, future=6), Window(history=1, future=12, goal="last"),
                                    Window(history=9, future=2, goal="uniform", max_length=2)])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_every_frame_is_octos_window(folders, window, batch_size):
    ds = FrameDataset(Source(str(folders["even"]), standardize=with_ids), window, seed=2, shuffle_buffer=5,
                      batch_size=batch_size)
    got = collections.Counter()
    for item in ds:
        for f in frames_of(item):
            _check_frame(f, window, EVEN)
            got[(int(f["episode_id"]), int(f["timestep"]))] += 1
    if window.max_length is None:
        assert got == every_step(EVEN)
    else:  # max_length frames of each longer episode, each at most once
        per_episode = collections.Counter(e for e, _ in got)
        assert per_episode == {e: min(n, window.max_length) for e, n in enumerate(EVEN) if n}
        assert max(got.values()) == 1


def _short_steps(t):
    return {"observation": {"x": torch.arange(t) * 10, "img": torch.zeros(t, 3, 2, 2, dtype=torch.uint8)},
            "action": torch.arange(t, dtype=torch.float32)[:, None], "language_instruction": [b"a"] * t}


def test_window_episode_on_a_one_step_episode():
    out = window_episode(_short_steps(1), Window(history=3, future=4, goal="uniform"), np.random.default_rng(0))
    assert out["observation"]["x"].tolist() == [[0, 0, 0]] and out["observation"]["img"].shape == (1, 3, 3, 2, 2)
    assert out["timestep_pad_mask"].tolist() == [[False, False, True]]
    assert out["action"].tolist() == [[[0.0]] * 4] and out["action_pad_mask"].tolist() == [[True, False, False, False]]
    assert out["goal_timestep"].tolist() == [0] and out["goal"]["x"].tolist() == [0]  # the last step
    assert out["language_instruction"] == [b"a"]
    index = frame_index(1, Window(history=2, future=2, max_length=5), np.random.default_rng(0))
    assert index.timestep.tolist() == [0] and index.history.tolist() == [[0, 0]]


@pytest.mark.parametrize("goal", [None, "uniform", "last"])
def test_window_episode_on_an_empty_episode(goal):
    """RLDS holds empty episodes (TFDS gives their steps as [0, ...] values): no frame, every value with 0 rows."""
    out = window_episode(_short_steps(0), Window(history=3, future=4, goal=goal), np.random.default_rng(0))
    assert out["observation"]["x"].shape == (0, 3) and out["observation"]["img"].shape == (0, 3, 3, 2, 2)
    assert out["action"].shape == (0, 4, 1) and out["action_pad_mask"].shape == (0, 4)
    assert out["timestep"].shape == (0,) and out["language_instruction"] == []
    if goal is not None:
        assert out["goal"]["x"].shape == (0,) and out["goal_timestep"].shape == (0,)


def test_unshuffled_frames_come_in_episode_then_step_order(folders):
    ds = FrameDataset(Source(str(folders["even"]), standardize=with_ids), Window(history=2), shuffle=False)
    assert [k for item in ds for k in ids(item)] == [(e, t) for e, n in enumerate(EVEN) for t in range(n)]


# ----- exactly once over ranks x workers -----------------------------------------------------------------------------

def _all_ranks(make, world_size, workers):
    got = collections.Counter()
    for rank in range(world_size):
        for item in DataLoader(make(rank, world_size), batch_size=None, num_workers=workers):
            got.update(ids(item))
    return got


@pytest.mark.parametrize("world_size, workers", [(1, 3), (2, 2), (3, 0), (4, 2)])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [None, 3])
def test_exactly_once_over_ranks_and_workers(folders, world_size, workers, shuffle, batch_size):
    def make(rank, ws):
        return FrameDataset(Source(str(folders["even"]), standardize=with_ids), Window(history=2, future=3),
                            shuffle=shuffle, seed=9, shuffle_buffer=4, batch_size=batch_size, rank=rank,
                            world_size=ws)

    assert _all_ranks(make, world_size, workers) == every_step(EVEN)


@pytest.mark.parametrize("world_size, workers", [(2, 0), (3, 2)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_no_episode_lost_when_the_ranks_do_not_divide_the_episodes(folders, world_size, workers, shuffle):
    """samples_per_epoch=None promises each dataset's episodes read once per epoch, exactly once over ranks x
    workers (ranks may yield different numbers of frames): 13 episodes over 2 or 3 ranks must all be read."""
    def make(rank, ws):
        return FrameDataset(Source(str(folders["odd"]), standardize=with_ids), shuffle=shuffle, seed=3, rank=rank,
                            world_size=ws)

    got = _all_ranks(make, world_size, workers)
    lost = sorted({e for e, _ in every_step(ODD) - got})
    assert got == every_step(ODD), f"episodes never read: {lost}"


@pytest.mark.parametrize("shuffle", [False, True])
def test_mixture_exactly_once_over_ranks_and_workers(folders, shuffle):
    want = collections.Counter({(0, *k): v for k, v in every_step(EVEN).items()})
    want.update({(1, *k): v for k, v in every_step(OTHER, 100).items()})
    for world_size, workers in ((1, 2), (2, 3), (3, 0)):
        got = collections.Counter()
        for rank in range(world_size):
            ds = FrameDataset({"a": Source(str(folders["even"]), weight=3.0, standardize=with_ids),
                               "b": Source(str(folders["other"]), standardize=with_ids)},
                              Window(history=2), shuffle=shuffle, seed=4, rank=rank, world_size=world_size)
            for item in DataLoader(ds, batch_size=None, num_workers=workers):
                got[(int(item["dataset_index"]), int(item["episode_id"]), int(item["timestep"]))] += 1
        assert got == want, (world_size, workers)


def test_first_pass_with_samples_per_epoch_gives_no_frame_twice(folders):
    """Fewer samples than any reader's part of the first pass: every frame comes from a disjoint part, none twice."""
    got = collections.Counter()
    for rank in range(2):
        ds = FrameDataset(Source(str(folders["even"]), standardize=with_ids), samples_per_epoch=12, seed=2,
                          rank=rank, world_size=2)
        items = list(DataLoader(ds, batch_size=None, num_workers=2))
        assert len(items) == len(ds) == 6
        for item in items:
            got.update(ids(item))
    assert sum(got.values()) == 12 and max(got.values()) == 1 and set(got) <= set(every_step(EVEN))


def test_every_rank_yields_its_quota_when_some_episodes_are_empty(tmp_path):
    """RLDS datasets hold empty episodes. With samples_per_epoch every rank must yield samples_per_epoch //
    world_size frames (else DDP ranks run unequal numbers of steps and hang), also in an epoch whose shuffled
    first pass hands a rank only empty episodes."""
    folder = write_episodes(tmp_path, "empties", [0, 0, 5, 5], per_shard=1)
    short = []
    for epoch in range(6):
        for rank in range(2):
            ds = FrameDataset(Source(str(folder), standardize=with_ids), samples_per_epoch=20, seed=1, rank=rank,
                              world_size=2)
            ds.set_epoch(epoch)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                n = len(list(ds))
            if n != len(ds):
                short.append((epoch, rank, n, len(ds)))
    assert short == [], "(epoch, rank, frames yielded, len(ds))"


# ----- resumption and epochs -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{}, {"batch_size": 3}, {"samples_per_epoch": 80},
                                    {"samples_per_epoch": 80, "batch_size": 4}])
@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_mid_epoch_exactly(folders, kwargs, workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def make():
        return FrameDataset(Source(str(folders["even"]), standardize=with_ids),
                            Window(history=2, future=2, goal="uniform"), seed=5, shuffle_buffer=7, **kwargs)

    def keyed(item):
        return [(k, int(f["goal_timestep"])) for k, f in zip(ids(item), frames_of(item))]

    full = [k for item in StatefulDataLoader(make(), batch_size=None, num_workers=workers) for k in keyed(item)]
    for stop in (1, 7):
        loader = StatefulDataLoader(make(), batch_size=None, num_workers=workers)
        it = iter(loader)
        head = [k for item in itertools.islice(it, stop) for k in keyed(item)]
        state = loader.state_dict()
        del it
        again = StatefulDataLoader(make(), batch_size=None, num_workers=workers)
        again.load_state_dict(state)
        assert head + [k for item in again for k in keyed(item)] == full, stop


def test_in_process_resume_in_a_later_epoch_and_at_the_ends(folders):
    def make():
        return FrameDataset(Source(str(folders["even"]), standardize=with_ids), Window(history=3, future=2),
                            seed=8, shuffle_buffer=6, batch_size=2)

    ds = make()
    ds.set_epoch(3)
    full = [k for item in ds for k in ids(item)]
    batches = -(-sum(EVEN) // 2)
    assert len(full) == sum(EVEN)
    for stop in (0, 1, 11, batches):  # the last: the whole epoch yielded, nothing left
        ds = make()
        ds.set_epoch(3)
        it = iter(ds)
        head = [k for item in itertools.islice(it, stop) for k in ids(item)]
        state = ds.state_dict()
        assert state["epoch"] == 3 and state["yielded"] == stop
        fresh = make()
        fresh.load_state_dict(state)
        assert fresh.epoch == 3
        assert head + [k for item in fresh for k in ids(item)] == full, stop


def _frames_ds(folders, **kwargs):
    return FrameDataset(Source(str(folders["even"]), standardize=with_ids), Window(history=2), seed=1,
                        shuffle_buffer=4, **kwargs)


def test_state_saved_after_set_epoch_resumes_the_new_epoch_from_its_start(folders):
    """The usual checkpoint at an epoch boundary: finish epoch 0, set_epoch(1), save. The state must say that
    nothing of epoch 1 was yielded (TFRecordDataset's does), not carry epoch 0's count into epoch 1."""
    ds = _frames_ds(folders)
    assert len(list(ds)) == sum(EVEN)
    ds.set_epoch(1)
    state = ds.state_dict()
    assert (state["epoch"], state["yielded"]) == (1, 0)
    reference = _frames_ds(folders)
    reference.set_epoch(1)
    fresh = _frames_ds(folders)
    fresh.load_state_dict(state)
    assert [k for f in fresh for k in ids(f)] == [k for f in reference for k in ids(f)]


def test_state_loaded_under_another_number_of_workers_is_not_silently_replayed(folders):
    """A state saved in the process (worker 0 of 1) after 10 frames, loaded into a DataLoader with 2 workers: either
    a ValueError saying the layouts differ (as TFRecordDataset's), or exactly the frames not yet yielded; never the
    whole epoch again (its first 10 frames twice)."""
    ds = _frames_ds(folders)
    it = iter(ds)
    head = [k for f in itertools.islice(it, 10) for k in ids(f)]
    state = ds.state_dict()
    fresh = _frames_ds(folders)
    fresh.load_state_dict(state)
    try:
        rest = [k for f in DataLoader(fresh, batch_size=None, num_workers=2) for k in ids(f)]
    except ValueError as raised:
        assert "worker" in str(raised)
        return
    assert collections.Counter(head + rest) == every_step(EVEN), f"{len(head)} + {len(rest)} frames"


def test_state_loaded_with_another_batch_size_is_not_misread(folders):
    """"yielded" counts frames without batch_size and batches with it: a state saved after 8 frames, loaded by the
    same dataset with batch_size=4, must raise (the layouts differ) or yield exactly the other frames, not skip 8
    batches (32 frames)."""
    ds = _frames_ds(folders)
    it = iter(ds)
    head = [k for f in itertools.islice(it, 8) for k in ids(f)]
    state = ds.state_dict()
    fresh = _frames_ds(folders, batch_size=4)
    try:
        fresh.load_state_dict(state)
        rest = [k for batch in fresh for k in ids(batch)]
    except ValueError as raised:
        assert "batch" in str(raised)
        return
    assert collections.Counter(head + rest) == every_step(EVEN), f"{len(head)} + {len(rest)} frames"


def test_set_epoch_reshuffles_deterministically_in_persistent_workers(folders):
    ds = FrameDataset({"a": Source(str(folders["even"]), weight=2, standardize=with_ids),
                       "b": Source(str(folders["other"]), standardize=with_ids)},
                      Window(history=2, goal="uniform"), samples_per_epoch=60, seed=4, shuffle_buffer=10)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)

    def run():
        return [(int(f["dataset_index"]), *ids(f)[0], int(f["goal_timestep"])) for f in loader]

    first, again = run(), run()
    ds.set_epoch(1)
    second = run()
    ds.set_epoch(0)
    assert first == again == run() and len(first) == 60
    assert first != second and len(second) == 60


def test_batches_in_reused_memory_stay_intact_while_a_key_is_held(folders):
    """Frame batches are stacked into reused buffers: a value kept from a batch the loop dropped must keep its bytes
    while later batches are made. A full gc.collect() after every batch (the slow part, a few seconds) makes any
    early reuse of the kept memory happen inside the test."""
    def make():
        return FrameDataset(Source(str(folders["even"]), standardize=with_ids), Window(history=3, future=2),
                            batch_size=4, seed=1, shuffle_buffer=6)

    kept = []
    for batch in make():
        kept.append((batch["action"], batch["observation"]["pose"]["xyz"][1:]))
        del batch
        gc.collect()
    fresh = [(b["action"].clone(), b["observation"]["pose"]["xyz"][1:].clone()) for b in make()]
    assert len(kept) == len(fresh) > 3
    for (a, x), (b, y) in zip(kept, fresh):
        assert torch.equal(a, b) and torch.equal(x, y)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(0, 60), size=st.integers(0, 20), seed=st.integers(0, 2**32))
def test_shuffle_buffer_gives_every_item_once_and_holds_at_most_its_size(n, size, seed):
    taken = []

    def source():
        for i in range(n):
            taken.append(i)
            yield i

    out = []
    for item in shuffled(source(), size, np.random.default_rng(seed)):
        out.append(item)
        assert len(taken) - len(out) <= max(size, 1)
    assert sorted(out) == list(range(n))


# ----- hostile episodes and metadata --------------------------------------------------------------------------------

def _folder_with(tmp_path, name, example):
    folder = write_episodes(tmp_path, name, [], examples=[example])
    (shard,) = shards(folder)
    return folder, shard


def test_episode_whose_step_values_differ_in_length_is_refused(tmp_path):
    """An episode whose steps/observation/pose/xyz holds 3 steps and every other step value 4. TFDS refuses it
    (tf.data: "Dimensions 4 and 3 are not compatible"); reading it must raise naming the shard and the key, not give
    an episode whose values disagree (FrameDataset then silently repeats the pose of step 2 for step 3)."""
    folder, shard = _folder_with(tmp_path, "ragged_steps", _episode(0, 4, pose_steps=3))
    with pytest.raises(tfr_torch.TFRecordError) as raised:
        list(tfr_torch.TFRecordDataset(str(folder), split="train"))
    assert str(shard) in str(raised.value) and "steps/observation/pose/xyz" in str(raised.value)
    with pytest.raises(tfr_torch.TFRecordError):
        list(FrameDataset(str(folder), shuffle=False))


def test_features_json_lying_about_a_step_shape_is_refused(tmp_path, folders):
    """features.json says each action holds 3 floats where the records hold 2: 6 steps of 2 floats read as 4
    "steps" of 3 beside 6 steps of everything else. TFDS refuses it; tfr_torch must too, not yield 4 frames."""
    folder = tmp_path / "lying" / "1.0.0"
    shutil.copytree(write_episodes(tmp_path, "src", [6, 3]), folder)
    path = folder / "features.json"
    data = json.loads(path.read_text())
    data["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]["action"][
        "tensor"]["shape"]["dimensions"] = ["3"]
    path.write_text(json.dumps(data))
    with pytest.raises(tfr_torch.TFRecordError) as raised:
        list(tfr_torch.TFRecordDataset(str(folder), split="train"))
    assert "steps/action" in str(raised.value) and str(shards(folder)[0]) in str(raised.value)


def test_standardize_giving_steps_of_different_lengths_is_refused(folders):
    """A standardize function that loses the last observation: FrameDataset must not clamp the window to the
    observations there are (the packed gather's mode="clip") and give frames whose observation is another step's."""
    def drop_last_state(episode):
        steps = with_ids(episode)
        obs = dict(steps["observation"])
        obs["state"] = obs["state"][:-1]
        steps["observation"] = obs
        return steps

    with pytest.raises((ValueError, IndexError)) as raised:
        list(FrameDataset(Source(str(folders["other"]), standardize=drop_last_state), shuffle=False))
    assert "observation/state" in str(raised.value)


def test_image_of_another_size_than_declared_is_refused(tmp_path):
    """features.json declares 2x2x3 images; step 1's PNG is 3x3. TFDS refuses it ("Incompatible shapes ... expected
    [2,2,3] but got [3,3,3]"); tfr_torch must raise naming the shard and the key, not yield a list of images."""
    folder, shard = _folder_with(tmp_path, "sizes", _episode(0, 3, image_sizes=[2, 3, 2]))
    try:
        episodes = list(tfr_torch.TFRecordDataset(str(folder), split="train"))
    except tfr_torch.TFRecordError as raised:
        assert str(shard) in str(raised) and "steps/observation/image" in str(raised)
        return
    image = episodes[0]["steps"]["observation"]["image"]
    pytest.fail(f"read without error: the episode's images are a {type(image).__name__} of shapes "
                f"{[tuple(i.shape) for i in image] if isinstance(image, list) else tuple(image.shape)}")


def _edit_split(folder: Path, lengths=None, drop_bytes=False):
    path = folder / "dataset_info.json"
    data = json.loads(path.read_text())
    if lengths is not None:
        data["splits"][0]["shardLengths"] = [str(n) for n in lengths]
    if drop_bytes:
        data["splits"][0].pop("numBytes", None)
    path.write_text(json.dumps(data))


@pytest.fixture
def seven(tmp_path):
    """7 episodes in shards of 3, 3 and 1, copied so each test may break its own."""
    lengths = [3, 5, 1, 7, 4, 6, 2]
    folder = tmp_path / "copy" / "1.0.0"
    shutil.copytree(write_episodes(tmp_path, "seven", lengths), folder)
    return folder, lengths


def test_shard_holding_more_episodes_than_shardlengths_says_without_numbytes(seven):
    """dataset_info.json without numBytes (as older TFDS wrote it) says shard 1 holds 2 episodes; it holds 3. TFDS
    reads each whole shard (no take() when a split takes all of it) and gives all 7; tfr_torch must give them all
    too, or refuse naming the shard, never drop episode 5 silently."""
    folder, lengths = seven
    _edit_split(folder, [3, 2, 1], drop_bytes=True)
    shard = shards(folder)[1]
    for shuffle in (False, True):
        try:
            got = [k for item in FrameDataset(Source(str(folder), standardize=with_ids), shuffle=shuffle)
                   for k in ids(item)]
        except TFDSMetadataError as raised:
            assert str(shard) in str(raised) and "says 2" in str(raised)
            continue
        except tfr_torch.TFRecordError as raised:  # found when the shard, read whole, goes on past its count
            assert str(raised).startswith(f"{shard}:") and "more records than the split's record count (2)" in str(
                raised), str(raised)
            continue
        lost = sorted(set(range(7)) - {e for e, _ in got})
        assert collections.Counter(got) == every_step(lengths), f"shuffle={shuffle}: episodes lost: {lost}"


def test_shardlengths_lies_are_named(seven):
    folder, _ = seven
    shard = shards(folder)[1]
    _edit_split(folder, [3, 2, 1])  # numBytes kept: the sizes disagree, the shards are counted
    with pytest.raises(TFDSMetadataError) as raised:
        FrameDataset(str(folder))
    assert str(raised.value) == (f"{shard}: shard holds 3 records but {folder}/dataset_info.json says 2 "
                                 "(shardLengths of split 'train')")
    _edit_split(folder, [3, 3, 2], drop_bytes=True)  # more than there are, no numBytes: the shards are counted
    last = shards(folder)[2]
    with pytest.raises(TFDSMetadataError) as raised:
        FrameDataset(str(folder), shuffle=False)
    assert str(raised.value) == (f"{last}: shard holds 1 records but {folder}/dataset_info.json says 2 "
                                 "(shardLengths of split 'train')")


@pytest.mark.parametrize("cut", ["last_record", "middle"])
def test_truncated_shard_is_named_with_its_offset(seven, cut):
    folder, _ = seven
    shard = shards(folder)[1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 30] if cut == "last_record" else data[: len(data) // 2])
    with pytest.raises(tfr_torch.TFRecordError) as raised:
        list(FrameDataset(Source(str(folder), standardize=with_ids), shuffle=False))
    assert isinstance(raised.value, tfr_torch.errors.TruncatedRecordError)
    assert str(raised.value).startswith(f"{shard}:") and "truncated record" in str(raised.value)


# ----- TensorFlow's own answers (skipped without TFR_TORCH_TF_PYTHON) -------------------------------------------

def _run_tf(script: str, job, tmp_path):
    job_path, out_path = tmp_path / "job.pkl", tmp_path / "out.pkl"
    job_path.write_bytes(pickle.dumps(job))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([TF_PYTHON, "-c", textwrap.dedent(script), str(job_path), str(out_path)], env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return pickle.loads(out_path.read_bytes())


_TF_REFUSALS = """
    import pickle, sys
    import numpy as np, tensorflow as tf, tensorflow_datasets as tfds
    records = pickle.load(open(sys.argv[1], "rb"))
    image = tfds.features.Image(shape=(2, 2, 3), encoding_format="png")
    features = tfds.features.FeaturesDict({"steps": tfds.features.Dataset({
        "observation": {"image": image, "pose": {"xyz": tfds.features.Tensor(shape=(3,), dtype=np.float32)}},
        "action": tfds.features.Tensor(shape=(2,), dtype=np.float32)})})
    out = []
    for record in records:
        try:
            ds = tf.data.Dataset.from_tensor_slices([record]).map(features.deserialize_example)
            for episode in ds:
                list(episode["steps"])
            out.append("read")
        except Exception as exc:
            out.append(type(exc).__name__)
    pickle.dump(out, open(sys.argv[2], "wb"))
"""


@needs_tf
def test_tfds_refuses_the_hostile_episodes(tmp_path):
    """The reference for the hostile-episode tests above: TFDS reads the good episode and refuses the others."""
    keep = ("steps/observation/image", "steps/observation/pose/xyz", "steps/action")

    def record(example):
        return tfr_torch.encode_example({k: v for k, v in example.items() if k in keep})

    got = _run_tf(_TF_REFUSALS, [record(_episode(0, 4)), record(_episode(0, 4, pose_steps=3)),
                                 record(_episode(0, 3, image_sizes=[2, 3, 2]))], tmp_path)
    assert got[0] == "read"
    assert got[1] in ("ValueError", "InvalidArgumentError") and got[2] in ("ValueError", "InvalidArgumentError")


_TF_RESIZE = """
    import pickle, sys
    import numpy as np, tensorflow as tf
    images, sizes = pickle.load(open(sys.argv[1], "rb"))
    out = []
    for size in sizes:
        r = tf.image.resize(images, size, method="bilinear", antialias=True)
        out.append(tf.cast(tf.clip_by_value(tf.round(r), 0, 255), tf.uint8).numpy())
    pickle.dump(out, open(sys.argv[2], "wb"))
"""


@needs_tf
def test_resize_images_agrees_with_tensorflow(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (3, 37, 29, 3), dtype=np.uint8)
    sizes = [(16, 12), (64, 40), (37, 10)]
    want = _run_tf(_TF_RESIZE, (images, sizes), tmp_path)
    chw = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    for size, expected in zip(sizes, want):
        got = resize_images(size)({"observation": chw})["observation"].permute(0, 2, 3, 1).numpy()
        assert got.shape == expected.shape
        assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1, size
