"""Checkpoints through torchdata's StatefulDataLoader in the usual training loop, resumed: the resumed run sees
exactly what the uninterrupted run sees, batch for batch, for every resumable kind (TFRecordDataset with each
kind of shuffle, MixedDataset, CachedDataset, IndexedTFRecordDataset with ElasticDistributedSampler), with 0 and
2 DataLoader workers, and DeviceLoader around such a loader.

The loop: `for epoch in range(start, epochs): set_epoch(epoch); for batch in loader: ...`, a checkpoint either
after an epoch's loop (the next run starts at epoch + 1) or inside it (the next run starts at that epoch).
StatefulDataLoader loads a state as its next pass begins, that is after the loop's set_epoch. Fixed: a state
saved after an epoch's loop set every kind back to the saved epoch there: with 0 workers the next epoch was
empty (the saved epoch's empty remainder was resumed as if it were the new epoch: a whole epoch of training
silently skipped), with workers the saved epoch was read again in place of the next (the workers wrote the
epoch, which they share with the main process, back to the saved one).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

import tfr_torch
from tfr_torch import CachedDataset, ElasticDistributedSampler, IndexedTFRecordDataset, MixedDataset, TFRecordDataset
from tfr_torch.images import DeviceLoader

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
EPOCHS = 3

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # torchdata's set_vital notice, worker counts


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """4 indexed files of 9 records each, ids 0-35."""
    folder = tmp_path_factory.mktemp("epochs")
    out = []
    for f in range(4):
        path = str(folder / f"part-{f}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(9):
                writer.write_example({"id": f * 9 + i})
        tfr_torch.build_index(path)
        out.append(path)
    return out


class Wrapped(torch.utils.data.IterableDataset):
    """A user's dataset around a TFRecordDataset that passes epochs and states on to it."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def __iter__(self):
        return iter(self.inner)

    def set_epoch(self, epoch):
        self.inner.set_epoch(epoch)

    def state_dict(self):
        return {"inner": self.inner.state_dict()}

    def load_state_dict(self, state):
        self.inner.load_state_dict(state["inner"])


def make(kind, paths, folder, workers, persistent=False):
    """A fresh StatefulDataLoader of `kind` over `paths` (a CachedDataset keeps its parts in `folder`)."""
    options = dict(batch_size=None, num_workers=workers, persistent_workers=persistent and workers > 0)
    if kind == "sampler":
        dataset = IndexedTFRecordDataset(paths, SPEC)
        sampler = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3)
        return StatefulDataLoader(dataset, batch_size=5, sampler=sampler, num_workers=workers,
                                  persistent_workers=options["persistent_workers"])
    if kind == "device":  # the batches moved to the device (here the CPU), no images to decode
        return DeviceLoader(make("buffer", paths, folder, workers, persistent), device="cpu", images=None)
    if kind == "buffer":
        dataset = TFRecordDataset(paths, SPEC, shuffle=True, seed=3, shuffle_buffer=6, batch_size=4)
    elif kind == "global":
        dataset = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=3, batch_size=4)
    elif kind == "wrapped":
        dataset = Wrapped(TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=3, batch_size=4))
    elif kind == "plain":
        dataset = TFRecordDataset(paths, SPEC, batch_size=4)
    elif kind == "mixed":
        dataset = MixedDataset({"a": TFRecordDataset(paths[:2], SPEC, shuffle=True, seed=1, shuffle_buffer=4),
                                "b": TFRecordDataset(paths[2:], SPEC, index="auto", shuffle=True, seed=2)}, seed=5)
    else:
        assert kind == "cached"
        dataset = CachedDataset(TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=3, batch_size=4),
                                folder, shuffle=True, seed=7)
    return StatefulDataLoader(dataset, **options)


def set_epoch(loader, epoch):
    if isinstance(loader, DeviceLoader):
        loader.set_epoch(epoch)  # and its dataset's
        return
    target = loader.sampler if isinstance(loader.sampler, ElasticDistributedSampler) else loader.dataset
    target.set_epoch(epoch)


def ids(batch):
    return [int(i) for i in torch.as_tensor(batch["id"]).reshape(-1)]


def train(loader, start=0, state=None, stop=None):
    """The training loop from epoch `start` (a state loaded first). `stop`: (epoch, batches) to checkpoint after
    that many batches of that epoch (None: after its loop) and end the run. Returns (the batches seen, as lists of
    ids per epoch, the state saved, the epoch the next run starts at)."""
    if state is not None:
        loader.load_state_dict(state)
    seen = []
    for epoch in range(start, EPOCHS):
        set_epoch(loader, epoch)
        got = []
        for batch in loader:
            got.append(ids(batch))
            if stop is not None and stop[0] == epoch and stop[1] == len(got):
                seen.append((epoch, got))
                return seen, loader.state_dict(), epoch
        seen.append((epoch, got))
        if stop is not None and stop == (epoch, None):
            return seen, loader.state_dict(), epoch + 1
    return seen, None, EPOCHS


def merged(runs):
    """Per epoch, the batches of every run in order (a run cut inside an epoch continues in the next run)."""
    out: dict[int, list[list[int]]] = {}
    for run in runs:
        for epoch, batches in run:
            out.setdefault(epoch, []).extend(batches)
    return out


KINDS = ["buffer", "global", "plain", "mixed", "cached", "sampler", "device", "wrapped"]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_a_checkpoint_after_an_epoch_resumes_with_the_next_epoch_whole(paths, tmp_path, kind, workers):
    full, _, _ = train(make(kind, paths, str(tmp_path / "a"), workers))
    expected = merged([full])
    assert all(sorted(i for b in expected[e] for i in b) == list(range(36)) for e in range(EPOCHS))
    if kind != "plain":
        assert expected[1] != expected[0]  # each epoch its own order: reading the saved one again would show
    first, state, start = train(make(kind, paths, str(tmp_path / "b"), workers), stop=(0, None))
    assert start == 1
    rest, _, _ = train(make(kind, paths, str(tmp_path / "b"), workers), start=start, state=state)
    assert merged([first, rest]) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoints_inside_and_after_epochs_chain_to_the_uninterrupted_run(paths, tmp_path, kind):
    """No workers: a checkpoint inside epoch 0, then one after epoch 1's loop, then after the last batch of
    epoch 2 (inside its loop): the three resumed runs together are the uninterrupted run. (A cache resumed
    inside its first epoch keeps nothing of it and reads the source again in the next, by design, so its
    chain starts with a checkpoint after epoch 0's loop and one inside epoch 1.)"""
    full, _, _ = train(make(kind, paths, str(tmp_path / "a"), 0))
    expected = merged([full])
    last = len(expected[2])
    folder = str(tmp_path / "b")
    runs = []
    start, state = 0, None
    stops = ((0, None), (1, 2)) if kind == "cached" else ((0, 2), (1, None))
    for stop in (*stops, (2, last)):
        run, state, start = train(make(kind, paths, folder, 0), start=start, state=state, stop=stop)
        runs.append(run)
    final, _, _ = train(make(kind, paths, folder, 0), start=start, state=state)
    runs.append(final)
    assert final == [(2, [])]  # the state saved at epoch 2's last batch: nothing of it left
    assert merged(runs) == expected


@pytest.mark.parametrize("kind", ["buffer", "sampler"])
def test_persistent_workers_resume_with_the_next_epoch_whole(paths, tmp_path, kind):
    full, _, _ = train(make(kind, paths, str(tmp_path / "a"), 2, persistent=True))
    first, state, start = train(make(kind, paths, str(tmp_path / "b"), 2, persistent=True), stop=(1, None))
    rest, _, _ = train(make(kind, paths, str(tmp_path / "b"), 2, persistent=True), start=start, state=state)
    assert merged([first, rest]) == merged([full])


def test_a_state_given_directly_resumes_its_epoch_also_back_from_a_later_one(paths):
    """Only StatefulDataLoader's own (deferred) load keeps a later epoch. A state given to load_state_dict
    directly resumes its epoch and sets it, forward or back (an in-process recovery with a dataset that ran
    on); a state that does not fit is refused all the same."""
    def dataset(**kw):
        return TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=3, **kw)

    reference = dataset()
    epoch0 = [int(x["id"]) for x in reference]
    reference.set_epoch(2)
    epoch2 = [int(x["id"]) for x in reference]
    source = dataset()
    it = iter(source)
    head = [int(next(it)["id"]) for _ in range(5)]
    state = source.state_dict()
    assert state["epoch"] == 0 and state["yielded"] == 5
    back = dataset()
    back.set_epoch(2)
    list(back)
    back.load_state_dict(state)
    assert back.epoch == 0 and back.state_dict() == state
    assert head + [int(x["id"]) for x in back] == epoch0
    reference.set_epoch(2)
    it = iter(reference)
    for _ in range(3):
        next(it)
    forward = dataset()
    forward.set_epoch(1)
    forward.load_state_dict(reference.state_dict())
    assert forward.epoch == 2 and [int(x["id"]) for x in forward] == epoch2[3:]
    other = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=4)
    other.set_epoch(2)
    with pytest.raises(ValueError, match="seed=3, this dataset has 4"):
        other.load_state_dict(state)
    assert other.epoch == 2


@pytest.mark.parametrize("workers", [0, 2])
def test_an_in_process_recovery_through_the_merged_state(paths, workers):
    """The guide's resume_loader with the dataset of a run that went on past its checkpoint (inside epoch 1) and
    failed: the merged state loaded into that dataset, a fresh loader, set_epoch(1): the rest of epoch 1."""
    dataset = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=1)
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=workers)
    dataset.set_epoch(1)
    epoch1 = [int(x["id"]) for x in loader]
    it = iter(loader)
    head = [int(next(it)["id"]) for _ in range(4)]
    saved = tfr_torch.elastic_state([loader.state_dict()])
    del it
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        list(loader)
    dataset.load_state_dict(saved)
    loader = StatefulDataLoader(dataset, batch_size=None, num_workers=workers)
    dataset.set_epoch(1)
    rest = [int(x["id"]) for x in loader]
    assert sorted(head + rest) == list(range(36))
    if workers == 0:
        assert head + rest == epoch1


def test_the_sampler_given_a_state_directly_resumes_its_epoch(paths):
    dataset = IndexedTFRecordDataset(paths, SPEC)
    sampler = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3)
    it = iter(sampler)
    head = [next(it) for _ in range(4)]
    state = sampler.state_dict()
    epoch0 = list(ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3))
    back = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3)
    back.set_epoch(1)
    list(back)
    back.load_state_dict(state)
    assert back.epoch == 0 and head + list(back) == epoch0
    other = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=4)
    other.set_epoch(1)
    with pytest.raises(ValueError, match="seed=3, this sampler has 4"):
        other.load_state_dict(state)
    assert other.epoch == 1


def test_mixture_and_cache_given_a_state_directly_resume_its_epoch(paths, tmp_path):
    def mixture():
        return MixedDataset({"a": TFRecordDataset(paths[:2], SPEC, shuffle=True, seed=1, shuffle_buffer=4),
                             "b": TFRecordDataset(paths[2:], SPEC, index="auto", shuffle=True, seed=2)}, seed=5)

    folders = iter(range(3))

    def cache():  # each its own folder (a kept part would be replayed in the cache's order)
        return CachedDataset(TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=3),
                             str(tmp_path / f"c{next(folders)}"), seed=7, shuffle=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for build in (mixture, cache):
            epoch0 = [int(x["id"]) for x in build()]
            source = build()
            it = iter(source)
            head = [int(next(it)["id"]) for _ in range(3)]
            state = source.state_dict()
            back = build()
            back.set_epoch(1)
            list(back)
            back.load_state_dict(state)
            assert back.epoch == 0
            assert head + [int(x["id"]) for x in back] == epoch0
