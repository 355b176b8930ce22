"""tfr_torch.rlds.packed: an episode's frames gathered at once and kept one row of bytes each give, frame by frame
and batch by batch, exactly what gather_frames and collate_frames give; each frame holds only its own bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tfr_torch.rlds import FrameDataset, Window, collate_frames, frame_index, gather_frames
from tfr_torch.rlds.packed import Packer, collate_packed, pack_episode, pack_frames, unpack_frame

pytestmark = pytest.mark.filterwarnings("ignore:.*have no index:UserWarning")

GOLDEN = Path(__file__).parent / "data" / "tfds" / "rlds" / "rlds_golden" / "1.0.0"


def assert_same(got, want, where=""):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), where
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert torch.equal(got.view(torch.uint8) if got.dtype == torch.bfloat16 else got,
                           want.view(torch.uint8) if want.dtype == torch.bfloat16 else want), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for k in want:
            assert_same(got[k], want[k], f"{where}/{k}")
    else:
        assert got == want, where


def steps(t: int) -> dict:
    """Every kind of step value: images, float/bool/int/bfloat16/float16 tensors, an expanded (stride 0) value, a
    value of width 0, text as bytes, and a dict of them in the observation."""
    rng = np.random.default_rng(t)
    return {
        "observation": {"image": torch.from_numpy(rng.integers(0, 256, (t, 3, 5, 4), dtype=np.uint8)),
                        "state": torch.randn(t, 3, generator=torch.Generator().manual_seed(t)),
                        "flag": torch.arange(t) % 2 == 0,
                        "half": torch.arange(t * 2, dtype=torch.float16).reshape(t, 2),
                        "note": [f"o{k}".encode() for k in range(t)]},
        "action": torch.arange(t * 7, dtype=torch.float32).reshape(t, 7).to(torch.bfloat16),
        "episode_id": torch.tensor(9).expand(t),
        "nothing": torch.zeros(t, 0, dtype=torch.int32),
        "reward": torch.arange(t, dtype=torch.float64),
        "language_instruction": [f"s{k}".encode() for k in range(t)],
    }


@pytest.mark.parametrize("window", [Window(history=2, future=4), Window(history=3, future=1, goal="uniform"),
                                    Window(history=1, future=2, goal="last", max_length=3)])
def test_frames_and_batches_equal_gather_and_collate(window):
    episode = steps(6)
    index = frame_index(6, window, np.random.default_rng(0))
    count = len(index.timestep)
    packed = pack_frames(gather_frames(episode, window, index), count, {})
    want = [gather_frames(episode, window, index, row) for row in range(count)]
    assert len(packed) == count
    for row, frame in enumerate(packed):
        assert_same(unpack_frame(frame), want[row], f"frame {row}")
    assert_same(collate_packed(packed), collate_frames(want), "batch")


def test_a_frame_holds_only_its_own_bytes():
    window = Window(history=2, future=4)
    episode = steps(8)
    index = frame_index(8, window)
    packed = pack_frames(gather_frames(episode, window, index), 8, {})
    rows = [f.row for f in packed]
    assert all(r.base is None for r in rows)  # copies, not views of the episode's matrix
    assert len({r.ctypes.data for r in rows}) == 8
    frame = unpack_frame(packed[3])
    image = frame["observation"]["image"]
    assert image.untyped_storage().nbytes() == image.numel()  # its own storage, not the row's or the episode's


def test_layouts_are_shared_between_episodes():
    window = Window(history=2, future=2)
    layouts: dict = {}
    a = pack_frames(gather_frames(steps(3), window, frame_index(3, window)), 3, layouts)
    b = pack_frames(gather_frames(steps(5), window, frame_index(5, window)), 5, layouts)
    assert a[0].layout is b[4].layout and len(layouts) == 1


def test_frame_dataset_batches_equal_its_frames_collated():
    window = Window(history=2, future=3, goal="uniform")
    frames = list(FrameDataset(GOLDEN, window, seed=4, shuffle_buffer=7))
    batches = list(FrameDataset(GOLDEN, window, seed=4, shuffle_buffer=7, batch_size=4))
    assert sum(len(b["timestep"]) for b in batches) == len(frames) > 4
    for k, batch in enumerate(batches):
        assert_same(batch, collate_frames(frames[4 * k : 4 * k + 4]), f"batch {k}")


@pytest.mark.parametrize("window", [Window(history=2, future=4), Window(history=3, future=1, goal="uniform"),
                                    Window(history=1, future=2, goal="last", max_length=3)])
def test_pack_episode_equals_packing_the_gathered_frames(window):
    episode = steps(7)
    index = frame_index(7, window, np.random.default_rng(1))
    count = len(index.timestep)
    extra = {"dataset_index": torch.full((count,), 2, dtype=torch.int64)}
    packer = Packer()
    packed = pack_episode(episode, window, index, packer, extra)
    want = [{**gather_frames(episode, window, index, row), "dataset_index": torch.tensor(2)} for row in range(count)]
    for row, frame in enumerate(packed):
        assert_same(unpack_frame(frame), want[row], f"frame {row}")
        assert frame.row.base is None  # its own bytes, not a view of the packer's reused matrix
    assert_same(packer.collate(packed), collate_frames(want), "batch")
    again = pack_episode(steps(3), window, frame_index(3, window, np.random.default_rng(1)), packer)
    assert_same(unpack_frame(packed[0]), want[0], "a frame kept while the packer packs the next episode")
    assert again[0].layout is not packed[0].layout  # (no dataset_index: another layout)


def test_batch_memory_is_reused_only_when_nothing_holds_it():
    window = Window(history=2, future=2)
    packer = Packer()
    frames = pack_episode(steps(6), window, frame_index(6, window), packer)
    want = collate_frames([unpack_frame(f) for f in frames])
    first = packer.collate(frames)
    image_ptr = first["observation"]["image"].data_ptr()
    second = packer.collate(frames)  # the first batch is alive: new memory
    assert second["observation"]["image"].data_ptr() != image_ptr
    kept = first["reward"]  # one key of the first batch held: its memory is not reused
    del first
    third = packer.collate(frames)
    assert third["observation"]["image"].data_ptr() != image_ptr
    assert_same(third, want)
    del kept, third
    fourth = packer.collate(frames)  # nothing holds the first batch's memory any more
    assert fourth["observation"]["image"].data_ptr() == image_ptr
    assert_same(fourth, want)
    assert_same(second, want)  # earlier batches never change under the caller
