"""FrameDataset: frame samples (observation history, action chunk, goal) drawn from RLDS episodes of one or more
TFDS datasets mixed by weight, shuffled within a bounded buffer, sharded across DDP ranks and DataLoader workers,
exactly reproducible from (seed, epoch) and resumable mid-epoch."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.utils.data import IterableDataset, get_worker_info

from tfr_torch.data.dataset import TFRecordDataset
from tfr_torch.data.distributed import check_rank_world, rank_world
from tfr_torch.data.resumable import later_epoch_set
from tfr_torch.data.sharding import rank_quota, split_sizes
from tfr_torch.data.shared_cells import shared_int64
from tfr_torch.data.transport import shared_memory_available, wrap_for_transport
from tfr_torch.rlds.packed import PackedFrame, Packer, pack_episode, same_layout, unpack_frame
from tfr_torch.rlds.sampling import choices, collate_frames, reader_rng, shuffled
from tfr_torch.rlds.windows import Window, episode_length, frame_index

__all__ = ["Source", "FrameDataset"]

_STATE_VERSION = 1
_PASSES = 1_000_000  # the inner datasets' epoch for pass p of epoch e: e * _PASSES + p
_FRAMELESS_PASSES = 100  # with samples_per_epoch: consecutive passes without a frame before a reader gives up
_CHOICE, _SHUFFLE, _EPISODES = 0, 1, 2  # reader_rng streams (_EPISODES + i: dataset i's goals and subsamples)


@dataclass(frozen=True)
class Source:
    """One dataset of a mixture: a TFDS folder of RLDS episodes, the `split` read, its sampling `weight`, and
    `standardize`, which maps one decoded episode (`{"steps": {...}, "episode_metadata": {...}}`) to the common
    layout: a dict of `[T, ...]` step values with the window's observation and action keys (Open X-Embodiment's
    per-dataset standardization functions). Default: the episode's `steps` as they are.

    >>> Source("data/fractal20220817_data/0.1.0", weight=2.0,  # doctest: +SKIP
    ...        standardize=lambda ep: {"observation": {"image": ep["steps"]["observation"]["image"]},
    ...                                "action": ep["steps"]["action"]})
    """

    path: Any
    split: str = "train"
    weight: float = 1.0
    standardize: Optional[Callable[[dict[str, Any]], Mapping[str, Any]]] = None
    index: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not (
                math.isfinite(self.weight) and self.weight >= 0):
            raise ValueError(f"Source.weight must be a finite number >= 0, got {self.weight!r} (for {self.path})")


class FrameDataset(IterableDataset[Any]):
    """Frame samples from RLDS episodes, for policy training (Octo / OpenVLA style).

    - `sources`: a TFDS folder, a `Source`, or a dict of name -> `Source` (a mixture; `names` keeps the order,
      each frame says its dataset in `dataset_index`).
    - `window`: what each frame holds (`Window`: history, future action chunk, goal, max_length; default one
      step of each); see tfr_torch.rlds.windows for the exact steps, padding and masks.
    - `samples_per_epoch`: frames per epoch over all ranks, each frame's dataset drawn by weight, datasets
      re-read (a new episode order) when they run out; every rank yields `samples_per_epoch // world_size`. None:
      each dataset's episodes read once per epoch (the weights set only how they interleave; ranks then yield
      different numbers of frames, as their episodes differ in length).
    - `shuffle`: episode order shuffled (files, and `episode_buffer` records) and frames through a buffer of
      `shuffle_buffer` frames. Memory per reader: at most `shuffle_buffer` frames (each `history` observations, a
      `future` action chunk and the step's other values) plus one decoded episode and its frames per dataset.
    - `frame_transform`: called on each frame as it leaves the buffer, in the DataLoader worker (image
      augmentation; resizing is cheaper in `standardize`, once per step). It moves to the GPU loader when that
      exists. `batch_size`: frames stacked into batches in the worker (`DataLoader(batch_size=None)`).
    - `seed`, `set_epoch`, `rank`, `world_size`, `state_dict`/`load_state_dict` as in TFRecordDataset: each rank
      and worker reads a disjoint part of each dataset's episodes; everything is drawn from (seed, epoch, rank,
      worker), so an epoch replays exactly for the same world size and num_workers.

    >>> ds = FrameDataset({"a": Source("data/a/1.0.0", weight=3), "b": Source("data/b/1.0.0")},  # doctest: +SKIP
    ...                   Window(history=2, future=4), samples_per_epoch=100_000, batch_size=64)
    >>> loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=4)  # doctest: +SKIP
    """

    def __init__(
        self,
        sources: Any,
        window: Window | None = None,
        *,
        samples_per_epoch: int | None = None,
        shuffle: bool = True,
        shuffle_buffer: int = 1000,
        episode_buffer: int = 16,
        seed: int = 0,
        frame_transform: Callable[[Any], Any] | None = None,
        batch_size: int | None = None,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        shared_memory: bool = True,
    ) -> None:
        super().__init__()
        window = Window() if window is None else window
        if not isinstance(window, Window):
            raise TypeError(f"window must be a tfr_torch.rlds.Window, got {type(window).__name__}")
        if isinstance(sources, Source):
            sources = {"0": sources}
        elif not isinstance(sources, Mapping):
            sources = {"0": Source(sources)}
        for name, source in sources.items():
            if not isinstance(source, Source):
                raise TypeError(f"sources[{name!r}] must be a tfr_torch.rlds.Source, got {type(source).__name__}")
        if not sources:
            raise ValueError("sources is empty: give at least one dataset")
        if sum(s.weight for s in sources.values()) <= 0:
            raise ValueError(f"the sources' weights sum to 0: {[s.weight for s in sources.values()]}")
        for name, value, low in (("samples_per_epoch", samples_per_epoch, 1), ("batch_size", batch_size, 1),
                                 ("shuffle_buffer", shuffle_buffer, 0), ("episode_buffer", episode_buffer, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"{name} must be {'None or ' if low else ''}an int >= {low}, got {value!r}")
        self.names = list(sources)
        self.sources = list(sources.values())
        self.window = window
        self.samples_per_epoch = samples_per_epoch
        self.shuffle = bool(shuffle)
        self.shuffle_buffer = shuffle_buffer
        self.episode_buffer = episode_buffer
        self.seed = int(seed)
        self.frame_transform = frame_transform
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.shared_memory = bool(shared_memory)
        self._rank_world = rank_world(rank, world_size)
        self.rank, self.world_size = self._rank_world.rank, self._rank_world.world_size
        if samples_per_epoch is None and self.world_size > 1:
            warnings.warn(f"FrameDataset with world_size={self.world_size} and samples_per_epoch=None: each rank "
                          "yields the frames of its own episodes, whose lengths differ, so ranks run different "
                          "numbers of steps (under DDP, a collective past the shortest rank's end waits forever); "
                          "pass samples_per_epoch for the same number of frames on every rank", stacklevel=2)
        for i in range(len(self.sources)):  # each folder and split checked now; the datasets are made again
            self._episodes(i)  # where they are read (a mixture of many sources kept none alive for nothing)
        self._totals = [self._total(i) for i in range(len(self.sources))]
        self._epoch = shared_int64(1)[0]  # seen by persistent workers
        self._resume: dict[str, Any] | None = None
        self._position = 0
        self._position_epoch = 0  # the epoch that _position counts in
        self._worker = (0, 1)

    def _episodes(self, i: int) -> TFRecordDataset:
        """Dataset i's episodes for this rank (a new TFRecordDataset: its epoch belongs to this reader alone)."""
        source = self.sources[i]
        return TFRecordDataset(source.path, split=source.split, index=source.index, shuffle=self.shuffle,
                               shuffle_buffer=self.episode_buffer, seed=self.seed * 7919 + i, rank=self.rank,
                               world_size=self.world_size, shared_memory=False)

    def _total(self, i: int) -> int:
        """Dataset i's episodes over all ranks."""
        source = self.sources[i]
        with warnings.catch_warnings():  # (said by _episodes already)
            warnings.simplefilter("ignore")
            return len(TFRecordDataset(source.path, split=source.split, index=source.index, rank=0, world_size=1,
                                       shared_memory=False))

    def _leftover(self, i: int) -> TFRecordDataset | None:
        """The episode past the ranks' equal blocks that this rank reads (TFRecordDataset drops the remainder
        `total % world_size`): position `quota * world_size + rank` of the same epoch order, read as the one record
        of "rank" that position in a world of `total` ranks. None when this rank has no such episode."""
        total = self._totals[i]
        extra = total - rank_quota(total, self.world_size, False) * self.world_size
        if self.world_size == 1 or self.rank >= extra:
            return None
        source = self.sources[i]
        return TFRecordDataset(source.path, split=source.split, index=source.index, shuffle=self.shuffle,
                               shuffle_buffer=self.episode_buffer, seed=self.seed * 7919 + i,
                               rank=total - extra + self.rank, world_size=total, shared_memory=False)

    # ----- epochs, length and state ----------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds every draw (seen by persistent workers)."""
        self._epoch.fill_(int(epoch))

    @property
    def epoch(self) -> int:
        return int(self._epoch)

    def __len__(self) -> int:
        """Frames (or batches) this rank yields per epoch; known only with samples_per_epoch."""
        if self.samples_per_epoch is None:
            raise TypeError("the length of a FrameDataset without samples_per_epoch is unknown (it depends on the "
                            "episodes' lengths)")
        quota = rank_quota(self.samples_per_epoch, self.world_size, False)
        if self.batch_size is None:
            return quota
        return quota // self.batch_size if self.drop_last else -(-quota // self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        """Where this reader (this worker, in a DataLoader worker process) stands in the current epoch."""
        if self._resume is not None:
            return dict(self._resume)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else self._worker
        epoch = self.epoch
        yielded = self._position if self._position_epoch == epoch else 0  # (set_epoch since: nothing of it yet)
        return {"version": _STATE_VERSION, "epoch": epoch, "yielded": yielded, "seed": self.seed,
                "worker": worker, "num_workers": workers, "rank": self.rank, "world_size": self.world_size,
                "sources": list(self.names), "batch_size": self.batch_size,
                "samples_per_epoch": self.samples_per_epoch, "shuffle": self.shuffle}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration of `state["epoch"]` replays the epoch's draws and skips what was yielded.
        Sets the epoch; StatefulDataLoader's own load of a state of an earlier epoch than the one the dataset is
        set to resumes nothing (see `later_epoch_set`)."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unknown FrameDataset state version {state.get('version')!r}")
        expected = {"seed": self.seed, "rank": self.rank, "world_size": self.world_size, "sources": self.names}
        layout = {"batch_size": self.batch_size, "samples_per_epoch": self.samples_per_epoch, "shuffle": self.shuffle}
        expected.update({k: v for k, v in layout.items() if k in state})  # (older states lack them)
        for key, value in expected.items():
            if state.get(key) != value:
                raise ValueError(f"cannot resume: the saved state has {key}={state.get(key)!r}, this dataset has "
                                 f"{value!r}")
        if later_epoch_set(state, self.epoch):  # not resumed, the epoch not set back (see later_epoch_set)
            self._resume = None
            return
        self._resume = dict(state)
        self._epoch.fill_(int(state["epoch"]))

    # ----- iteration ------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        check_rank_world(self._rank_world, "FrameDataset")
        return self._iterate()

    def _iterate(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        self._worker = (worker, workers)
        epoch = self.epoch
        skip = 0
        if self._resume is not None:
            resume, self._resume = self._resume, None
            if resume["epoch"] == epoch and int(resume["yielded"]):
                if (resume["worker"], resume["num_workers"]) != (worker, workers):
                    raise ValueError(f"cannot resume FrameDataset: the state was saved by worker {resume['worker']} "
                                     f"of {resume['num_workers']} (num_workers={resume['num_workers']}), this reader "
                                     f"is worker {worker} of {workers}: resume with the same num_workers")
                skip = int(resume["yielded"])
        self._position = skip
        self._position_epoch = epoch
        quota = None
        if self.samples_per_epoch is not None:
            multiple = self.batch_size or 1
            quota = split_sizes(rank_quota(self.samples_per_epoch, self.world_size, False), workers,
                                multiple)[worker]
        wrap = info is not None and self.shared_memory and shared_memory_available()
        packer = Packer(lend=wrap)  # batches sent through the transport: made in slabs it sends without a copy
        frames = self._mixed(epoch, worker, workers, quota, packer)
        if self.shuffle:
            frames = shuffled(frames, self.shuffle_buffer, reader_rng(self.seed, epoch, self.rank, worker, workers,
                                                                      _SHUFFLE))
        items = frames if self.batch_size is None else self._batches(frames, packer)
        for n, item in enumerate(items):
            if n < skip:
                continue
            if self.batch_size is None:
                item = unpack_frame(item)
                if self.frame_transform is not None:  # (batches: applied in _collate)
                    item = self.frame_transform(item)
            if wrap:
                item = wrap_for_transport(item)
            self._position += 1
            yield item

    def _batches(self, frames: Iterator[PackedFrame], packer: Packer) -> Iterator[Any]:
        batch_size = self.batch_size
        assert batch_size is not None  # only called with a batch_size
        batch: list[PackedFrame] = []
        for frame in frames:
            batch.append(frame)
            if len(batch) == batch_size:
                yield self._collate(batch, packer)
                batch = []
        if batch and not self.drop_last:
            yield self._collate(batch, packer)

    def _collate(self, batch: list[PackedFrame], packer: Packer) -> Any:
        """One batch: stacked once per key when its frames share a layout (no transform); else frame by frame."""
        if self.frame_transform is None and same_layout(batch):
            return packer.collate(batch)
        frames = [unpack_frame(f) for f in batch]
        if self.frame_transform is not None:
            frames = [self.frame_transform(f) for f in frames]
        return collate_frames(frames)

    def _mixed(self, epoch: int, worker: int, workers: int, quota: int | None,
               packer: Packer) -> Iterator[PackedFrame]:
        """This reader's frames before the shuffle buffer: each drawn from a dataset chosen by weight."""
        streams = [self._frames(i, epoch, worker, workers, quota is not None, packer)
                   for i in range(len(self.sources))]
        weights = [s.weight for s in self.sources]
        alive = [w > 0 for w in weights]
        rng = reader_rng(self.seed, epoch, self.rank, worker, workers, _CHOICE)
        produced = 0
        draws = choices(weights, alive, rng)
        while quota is None or produced < quota:
            d = next(draws, None)
            if d is None:
                if quota is not None:
                    warnings.warn(f"FrameDataset: the datasets gave no frame to this reader (rank {self.rank}, "
                                  f"worker {worker}) after {produced} of its {quota} frames: each one's part of "
                                  "the episodes is empty", stacklevel=2)
                return
            frame = next(streams[d], None)
            if frame is None:
                alive[d] = False
                draws = choices(weights, alive, rng)
                continue
            produced += 1
            yield frame

    def _frames(self, i: int, epoch: int, worker: int, workers: int, repeat: bool,
                packer: Packer) -> Iterator[PackedFrame]:
        """Dataset i's frames for this reader, episode after episode in the (shuffled) episode order; with
        `repeat`, pass after pass for as long as any pass gives a frame. Each episode's frames are gathered at once
        (one take per key, straight into their rows: one row of bytes each, tfr_torch.rlds.packed)."""
        source, window = self.sources[i], self.window
        rng = reader_rng(self.seed, epoch, self.rank, worker, workers, _EPISODES + i)
        with warnings.catch_warnings():  # said once, when the dataset was built in the main process
            warnings.simplefilter("ignore")
            episodes, leftover = self._episodes(i), self._leftover(i)
        frameless = 0
        for p in range(_PASSES if repeat else 1):
            episodes.set_epoch(epoch * _PASSES + p)
            read = given = 0
            for episode in self._pass(episodes, leftover, epoch * _PASSES + p):
                read += 1
                steps = source.standardize(episode) if source.standardize is not None else episode["steps"]
                index = frame_index(episode_length(steps, window), window, rng)
                count = len(index.timestep)
                if not count:
                    continue
                given += count
                yield from pack_episode(steps, window, index, packer,
                                        {"dataset_index": torch.full((count,), i, dtype=torch.int64)})
            # stop for good only when this part has no episode, or (its episodes all empty) a pass in the same
            # order, or many shuffled passes, gave no frame: a shuffled pass may hand a reader only empty episodes
            frameless = 0 if given else frameless + 1
            if not read or (frameless and not self.shuffle) or frameless >= _FRAMELESS_PASSES:
                return

    @staticmethod
    def _pass(episodes: TFRecordDataset, leftover: TFRecordDataset | None, epoch: int) -> Iterator[Any]:
        """One pass over this reader's episodes: its rank's block, then its leftover episode (if any)."""
        yield from episodes
        if leftover is not None:
            leftover.set_epoch(epoch)
            with warnings.catch_warnings():  # (one record for several workers: the idle ones are expected)
                warnings.simplefilter("ignore")
                rest = list(leftover)
            yield from rest


