"""tfr_torch.rlds: trajectory windows (history, action chunks, padding masks), goal relabeling, subsampling, the
bounded frame shuffle buffer, weighted mixtures (exact counts for a seed), reproducibility, resumption and
exactly-once sharding across ranks x DataLoader workers; on small synthetic episodes and the golden RLDS folders."""

from __future__ import annotations

import collections
import ctypes
import io
import itertools
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, get_worker_info

import tfr_torch
from tfr_torch.data import receive, transport
from tfr_torch.rlds import FrameDataset, Source, Window, frame_index, gather_frames, shuffled, window_episode

pytestmark = [pytest.mark.filterwarnings("ignore:.*have no index:UserWarning"),
              pytest.mark.filterwarnings("ignore:FrameDataset with world_size:UserWarning")]  # ranks apart

GOLDEN = Path(__file__).parent / "data" / "tfds" / "rlds" / "rlds_golden" / "1.0.0"
_CLASS = "tensorflow_datasets.core.features."


def _tensor(dims, dtype):
    return {"pythonClassName": _CLASS + "tensor_feature.Tensor",
            "tensor": {"shape": {"dimensions": [str(d) for d in dims]}, "dtype": dtype, "encoding": "none"}}


def _dict(features):
    return {"pythonClassName": _CLASS + "features_dict.FeaturesDict", "featuresDict": {"features": features}}


def _features():
    image = {"pythonClassName": _CLASS + "image_feature.Image",
             "image": {"shape": {"dimensions": ["4", "4", "3"]}, "dtype": "uint8", "encodingFormat": "png"}}
    step = _dict({"observation": _dict({"image": image, "state": _tensor((2,), "float32")}),
                  "action": _tensor((3,), "float32"),
                  "language_instruction": {"pythonClassName": _CLASS + "text_feature.Text", "text": {}}})
    steps = {"pythonClassName": _CLASS + "dataset_feature.Dataset", "sequence": {"feature": step, "length": "-1"}}
    return _dict({"steps": steps, "episode_metadata": _dict({"episode_id": _tensor((), "int64")})})


def _png(value):
    out = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(out, "PNG")
    return out.getvalue()


def write_episodes(folder: Path, name: str, lengths, first_id=0) -> Path:
    """Episodes whose values say where they come from: state = (episode id, step), action = (id, step, -step),
    image pixels = step, instruction b"e<id> s<step>"."""
    version = folder / name / "1.0.0"
    with tfr_torch.ShardedWriter(str(version), name, "train", records_per_shard=3,
                                 tfds={"features": _features()}) as writer:
        for i, t in enumerate(lengths):
            e = first_id + i
            s = np.arange(t, dtype=np.float32)
            writer.write_example({
                "steps/observation/image": [_png(k) for k in range(t)],
                "steps/observation/state": np.stack([np.full(t, e, np.float32), s], 1).reshape(-1),
                "steps/action": np.stack([np.full(t, e, np.float32), s, -s], 1).reshape(-1),
                "steps/language_instruction": [f"e{e} s{k}".encode() for k in range(t)],
                "episode_metadata/episode_id": e,
            })
    return version


def with_ids(episode):
    steps = dict(episode["steps"])
    steps["episode_id"] = episode["episode_metadata"]["episode_id"].expand(len(steps["action"]))
    return steps


def key(frame):
    return int(frame["episode_id"]), int(frame["timestep"])


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("rlds")
    return (write_episodes(root, "small", [3, 5, 1, 7, 4, 6, 2, 5, 3, 8, 4, 6]),
            write_episodes(root, "other", [6, 2, 9, 4], first_id=100))


# ----- windows ----------------------------------------------------------------------------------------------------

def test_frame_index_history_and_chunks_as_octo():
    index = frame_index(4, Window(history=3, future=3))
    assert index.timestep.tolist() == [0, 1, 2, 3]
    assert index.history.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3]]  # the first step repeated
    assert index.timestep_pad_mask.tolist() == [[False, False, True], [False, True, True], [True, True, True],
                                                [True, True, True]]
    assert index.action.tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 3], [3, 3, 3]]  # the last action repeated
    assert index.action_pad_mask.tolist() == [[True, True, True], [True, True, True], [True, True, False],
                                              [True, False, False]]
    assert index.goal.tolist() == [-1, -1, -1, -1]


def test_window_episode_values_masks_and_language():
    steps = {"observation": {"x": torch.arange(3) * 10, "img": torch.arange(3, dtype=torch.uint8)[:, None, None]
                             .expand(3, 2, 2)},
             "action": torch.tensor([[1.0], [2.0], [3.0]]), "language_instruction": [b"a", b"b", b"c"],
             "reward": torch.tensor([0.0, 0.0, 1.0])}
    out = window_episode(steps, Window(history=2, future=2))
    assert out["observation"]["x"].tolist() == [[0, 0], [0, 10], [10, 20]]
    assert out["observation"]["img"][:, :, 0, 0].tolist() == [[0, 0], [0, 1], [1, 2]]
    assert out["action"][..., 0].tolist() == [[1, 2], [2, 3], [3, 3]]
    assert out["timestep_pad_mask"].tolist() == [[False, True], [True, True], [True, True]]
    assert out["action_pad_mask"].tolist() == [[True, True], [True, True], [True, False]]
    assert out["language_instruction"] == [b"a", b"b", b"c"]
    assert out["reward"].tolist() == [0.0, 0.0, 1.0] and out["timestep"].tolist() == [0, 1, 2]
    one = gather_frames(steps, Window(history=2, future=2), frame_index(3, Window(history=2, future=2)), 0)
    assert one["observation"]["x"].tolist() == [0, 0] and one["language_instruction"] == b"a"


def test_windows_on_the_golden_episodes():
    window = Window(history=3, future=4)
    episodes = list(tfr_torch.TFRecordDataset(str(GOLDEN), split="train"))
    assert episodes
    for episode in episodes:
        steps = episode["steps"]
        t_len = len(steps["action"])
        out = window_episode(steps, window)
        for t in range(t_len):
            for k in range(3):
                s = t - 2 + k
                assert bool(out["timestep_pad_mask"][t, k]) == (s >= 0)
                assert torch.equal(out["observation"]["image"][t, k], steps["observation"]["image"][max(s, 0)])
                assert torch.equal(out["observation"]["state"][t, k], steps["observation"]["state"][max(s, 0)])
            for j in range(4):
                assert bool(out["action_pad_mask"][t, j]) == (t + j < t_len)
                assert torch.equal(out["action"][t, j], steps["action"][min(t + j, t_len - 1)])
            assert out["language_instruction"][t] == steps["language_instruction"][t]
            assert torch.equal(out["is_first"][t], steps["is_first"][t])


def test_goal_relabeling():
    last = frame_index(5, Window(goal="last"))
    assert last.goal.tolist() == [4, 4, 4, 4, 4]
    goals = np.stack([frame_index(6, Window(goal="uniform"), np.random.default_rng(s)).goal for s in range(200)])
    t = np.arange(6)
    assert (goals >= np.minimum(t + 1, 5)).all() and (goals <= 5).all()
    assert set(goals[:, 0].tolist()) == {1, 2, 3, 4, 5}  # every later step is drawn
    assert frame_index(6, Window(goal="uniform"), np.random.default_rng(3)).goal.tolist() == \
        frame_index(6, Window(goal="uniform"), np.random.default_rng(3)).goal.tolist()
    steps = {"observation": {"x": torch.arange(6) * 10}, "action": torch.zeros(6, 1)}
    out = window_episode(steps, Window(goal="uniform"), np.random.default_rng(0))
    assert (out["goal"]["x"] == out["goal_timestep"] * 10).all()
    with pytest.raises(ValueError, match=r"goal='uniform' draws at random: pass a seeded numpy Generator"):
        frame_index(6, Window(goal="uniform"))


def test_subsampling_is_deterministic_from_the_seed():
    window = Window(history=2, future=2, max_length=4)
    a = frame_index(10, window, np.random.default_rng(7))
    b = frame_index(10, window, np.random.default_rng(7))
    c = frame_index(10, window, np.random.default_rng(8))
    assert len(a.timestep) == 4 and a.timestep.tolist() == sorted(set(a.timestep.tolist()))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert a.timestep.tolist() != c.timestep.tolist()
    assert (a.history[:, 1] == a.timestep).all()  # kept frames still see their neighbouring steps
    assert len(frame_index(3, window, np.random.default_rng(7)).timestep) == 3  # shorter: every frame


@pytest.mark.parametrize("kwargs, message", [
    ({"history": 0}, "Window.history must be a positive int (steps), got 0"),
    ({"future": 1.5}, "Window.future must be a positive int (steps), got 1.5"),
    ({"goal": "first"}, "Window.goal must be None, 'uniform' or 'last', got 'first'"),
    ({"max_length": 0}, "Window.max_length must be None or a positive int (frames), got 0"),
])
def test_window_options_are_checked(kwargs, message):
    with pytest.raises(ValueError) as raised:
        Window(**kwargs)
    assert str(raised.value) == message


# ----- shuffle buffer ----------------------------------------------------------------------------------------------

def test_shuffle_buffer_holds_at_most_its_size():
    taken = []

    def source():
        for i in range(1000):
            taken.append(i)
            yield i

    out = []
    for item in shuffled(source(), 16, np.random.default_rng(0)):
        out.append(item)
        assert len(taken) - len(out) <= 16  # items taken in but not yet yielded: the buffer
    assert sorted(out) == list(range(1000)) and out != list(range(1000))
    assert out == list(shuffled(range(1000), 16, np.random.default_rng(0)))


def test_frame_dataset_buffer_bound(folders):
    """The frames taken from episodes but not yet yielded never exceed shuffle_buffer."""
    small, _ = folders
    ds = FrameDataset(Source(str(small), standardize=with_ids), Window(history=2, future=4), shuffle_buffer=5)
    made = []
    original = ds._mixed

    def counting(*args):
        for frame in original(*args):
            made.append(frame)
            yield frame

    ds._mixed = counting
    seen = 0
    for _ in ds:
        seen += 1
        assert len(made) - seen <= 5
    assert seen == 54


# ----- frame datasets ------------------------------------------------------------------------------------------------

def test_frames_carry_windows_from_the_folder(folders):
    small, _ = folders
    frames = list(FrameDataset(Source(str(small), standardize=with_ids), Window(history=2, future=3)))
    assert sorted(map(key, frames)) == sorted((e, t) for e, n in enumerate([3, 5, 1, 7, 4, 6, 2, 5, 3, 8, 4, 6])
                                                for t in range(n))
    for f in frames:
        e, t = key(f)
        assert f["observation"]["state"][:, 1].tolist() == [max(t - 1, 0), t]
        assert f["observation"]["image"][:, 0, 0, 0].tolist() == [max(t - 1, 0), t]
        n = [3, 5, 1, 7, 4, 6, 2, 5, 3, 8, 4, 6][e]
        assert f["action"][:, 1].tolist() == [min(t + j, n - 1) for j in range(3)]
        assert f["action_pad_mask"].tolist() == [t + j < n for j in range(3)]
        assert f["language_instruction"] == f"e{e} s{t}".encode()


def test_mixture_counts_for_the_seed(folders):
    small, other = folders
    ds = FrameDataset({"small": Source(str(small), weight=3.0), "other": Source(str(other), weight=1.0)},
                      Window(), samples_per_epoch=4000, seed=5)
    counts = collections.Counter(int(f["dataset_index"]) for f in ds)
    assert counts == {0: 2964, 1: 1036}  # exact: every draw comes from (seed, epoch)
    assert abs(counts[0] - 3000) < 4 * math.sqrt(4000 * 0.75 * 0.25)  # and a multinomial draw of p = 0.75
    assert ds.names == ["small", "other"] and len(ds) == 4000


def test_mixture_reproducible_per_epoch_and_resumable(folders):
    small, other = folders
    sources = {"small": Source(str(small), weight=2.0, standardize=with_ids),
               "other": Source(str(other), standardize=with_ids)}
    ds = FrameDataset(sources, Window(history=2, future=2, goal="uniform", max_length=4), samples_per_epoch=300,
                      seed=11, shuffle_buffer=20)
    first = [(key(f), int(f["goal_timestep"])) for f in ds]
    assert first == [(key(f), int(f["goal_timestep"])) for f in ds]
    ds.set_epoch(1)
    assert first != [(key(f), int(f["goal_timestep"])) for f in ds]
    ds.set_epoch(0)
    it = iter(ds)
    head = [(key(f), int(f["goal_timestep"])) for f in itertools.islice(it, 123)]
    state = ds.state_dict()
    assert state["yielded"] == 123 and state["epoch"] == 0
    fresh = FrameDataset(sources, Window(history=2, future=2, goal="uniform", max_length=4), samples_per_epoch=300,
                         seed=11, shuffle_buffer=20)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    assert head + [(key(f), int(f["goal_timestep"])) for f in fresh] == first
    with pytest.raises(ValueError, match=r"cannot resume: the saved state has seed=11, this dataset has 12"):
        FrameDataset(sources, samples_per_epoch=300, seed=12).load_state_dict(state)
    back = FrameDataset(sources, Window(history=2, future=2, goal="uniform", max_length=4), samples_per_epoch=300,
                        seed=11, shuffle_buffer=20)
    back.set_epoch(1)
    back.load_state_dict(state)  # given directly: its epoch, also back from a later one
    assert back.epoch == 0 and head + [(key(f), int(f["goal_timestep"])) for f in back] == first


@pytest.mark.parametrize("workers", [0, 2])
def test_a_checkpoint_after_an_epoch_through_stateful_dataloader_resumes_with_the_next(folders, workers):
    """StatefulDataLoader loads its state as the next pass begins, after the loop's set_epoch(saved + 1): a state
    saved after epoch 0's loop then resumes nothing and epoch 1 is read whole (it read nothing, or epoch 0 again)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    small, other = folders
    sources = {"small": Source(str(small), weight=2.0, standardize=with_ids),
               "other": Source(str(other), standardize=with_ids)}

    def loader():
        ds = FrameDataset(sources, Window(history=2, future=2), samples_per_epoch=60, seed=11, shuffle_buffer=20)
        return StatefulDataLoader(ds, batch_size=None, num_workers=workers)

    def epoch(run, e):
        run.dataset.set_epoch(e)
        return [key(f) for f in run]

    reference = loader()
    expected = [epoch(reference, 0), epoch(reference, 1)]
    assert expected[0] != expected[1]
    first = loader()
    assert epoch(first, 0) == expected[0]
    resumed = loader()
    resumed.load_state_dict(first.state_dict())
    assert epoch(resumed, 1) == expected[1]


def test_several_ranks_without_samples_per_epoch_are_warned_of_unequal_counts(folders):
    """Without samples_per_epoch each rank yields the frames of its own episodes (here 3+1+... against 5+7+...):
    a DDP job would wait forever at a collective past the shortest rank's end, so building it says so, naming the
    way out; one rank, or samples_per_epoch, is not warned about."""
    small, _ = folders
    with pytest.warns(UserWarning, match=r"world_size=2 and samples_per_epoch=None.*pass samples_per_epoch"):
        FrameDataset(Source(str(small)), rank=0, world_size=2)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "FrameDataset with world_size")
        FrameDataset(Source(str(small)), rank=0, world_size=1)
        FrameDataset(Source(str(small)), rank=1, world_size=2, samples_per_epoch=10)


@pytest.mark.parametrize("batch_size", [None, 4])
def test_exactly_once_across_ranks_and_workers(folders, batch_size):
    """samples_per_epoch=None: each rank and worker reads a disjoint part of the episodes, together all of them."""
    small, _ = folders
    lengths = [3, 5, 1, 7, 4, 6, 2, 5, 3, 8, 4, 6]
    everything = collections.Counter((e, t) for e, n in enumerate(lengths) for t in range(n))
    got: collections.Counter = collections.Counter()
    for rank in range(2):
        ds = FrameDataset(Source(str(small), standardize=with_ids), Window(history=2, future=2), seed=3,
                          rank=rank, world_size=2, batch_size=batch_size)
        for item in DataLoader(ds, batch_size=None, num_workers=2):
            if batch_size is None:
                got[key(item)] += 1
            else:
                got.update(zip(item["episode_id"].tolist(), item["timestep"].tolist()))
    assert got == everything


def test_equal_counts_per_rank_and_frame_transform_in_workers(folders):
    small, other = folders

    def mark(frame):
        frame["worker"] = torch.tensor(get_worker_info().id)
        return frame

    sizes = []
    workers = set()
    for rank in range(2):
        ds = FrameDataset({"a": Source(str(small)), "b": Source(str(other))}, Window(history=2, future=4),
                          samples_per_epoch=101, batch_size=8, rank=rank, world_size=2, frame_transform=mark)
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
        sizes.append([len(b["timestep"]) for b in batches])
        workers.update(torch.cat([b["worker"] for b in batches]).tolist())
        assert len(ds) == len(batches) == 7
    assert sorted(sizes[0]) == sorted(sizes[1]) and sum(sizes[0]) == 50
    assert workers == {0, 1}


def test_source_and_dataset_arguments_are_checked(folders):
    small, _ = folders
    with pytest.raises(ValueError, match=r"Source.weight must be a finite number >= 0, got -1"):
        Source(str(small), weight=-1)
    with pytest.raises(ValueError, match=r"samples_per_epoch must be None or an int >= 1, got 0"):
        FrameDataset(str(small), samples_per_epoch=0)
    with pytest.raises(TypeError, match=r"window must be a tfr_torch.rlds.Window, got dict"):
        FrameDataset(str(small), {"history": 2})


def test_resize_images():
    resize = tfr_torch.rlds.resize_images((2, 3))
    frame = {"observation": {"image": torch.full((2, 3, 4, 6), 7, dtype=torch.uint8), "state": torch.zeros(2, 3)},
             "action": torch.zeros(4, 3)}
    out = resize(frame)
    assert out["observation"]["image"].shape == (2, 3, 2, 3) and (out["observation"]["image"] == 7).all()
    assert out["observation"]["state"] is frame["observation"]["state"] and out["action"] is frame["action"]


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path, value


@pytest.mark.skipif(not transport.shared_memory_available(), reason="no memfd_create or /proc here")
def test_worker_frame_batches_equal_the_in_process_ones_and_arrive_as_views_of_a_slab(folders):
    """A worker's frame batches are made in a slab of their own (Packer(lend=True)) and sent as views of it."""
    small, _ = folders

    def batches(workers):
        ds = FrameDataset(Source(str(small), standardize=with_ids), Window(history=2, future=2), seed=3,
                          batch_size=4)
        return list(DataLoader(ds, batch_size=None, num_workers=workers))

    here, there = batches(0), batches(1)
    assert len(here) == len(there) > 1
    for a, b in zip(here, there):
        got, want = dict(_leaves(b)), dict(_leaves(a))
        assert list(got) == list(want)
        for path, value in want.items():
            if isinstance(value, torch.Tensor):
                assert got[path].dtype == value.dtype and torch.equal(got[path], value), path
            else:
                assert got[path] == value, path
    mapped = []
    for mapping in receive._MAPS.values():
        if not mapping.closed:
            start = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
            mapped.append((start, start + len(mapping)))
    tensors = [v for _, v in _leaves(there[0]) if isinstance(v, torch.Tensor) and v.numel()]
    inside = [any(s <= t.untyped_storage().data_ptr() < e for s, e in mapped) for t in tensors]
    assert all(inside) and len({t.untyped_storage().data_ptr() for t in tensors}) == 1  # one slab, views of it
