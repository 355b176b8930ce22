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

import os
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


KINDS = ["buffer", "global", "plain", "mixed", "cached", "sampler", "device"]


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


def test_a_state_of_an_earlier_epoch_is_not_resumed_and_does_not_set_the_epoch_back(paths):
    """Loaded directly: a state of epoch 0 into a dataset set to epoch 2 changes nothing (state_dict says epoch
    2 from its start; a pass reads epoch 2 whole); into one at epoch 0 (or a new one) it resumes and sets the
    epoch; a state of a later epoch sets the epoch forward. A state that does not fit is refused all the same."""
    def dataset(**kw):
        return TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=3, **kw)

    reference = dataset()
    reference.set_epoch(2)
    epoch2 = [int(x["id"]) for x in reference]
    source = dataset()
    it = iter(source)
    head = [int(next(it)["id"]) for _ in range(5)]
    state = source.state_dict()
    assert state["epoch"] == 0 and state["yielded"] == 5
    later = dataset()
    later.set_epoch(2)
    later.load_state_dict(state)
    assert later.epoch == 2
    assert later.state_dict()["epoch"] == 2 and later.state_dict()["yielded"] == 0
    assert [int(x["id"]) for x in later] == epoch2
    fresh = dataset()
    fresh.load_state_dict(state)
    assert fresh.epoch == 0
    assert head + [int(x["id"]) for x in fresh] == [int(x["id"]) for x in dataset()]
    reference.set_epoch(2)
    it = iter(reference)
    for _ in range(3):
        next(it)
    forward = dataset()
    forward.set_epoch(1)
    forward.load_state_dict(reference.state_dict())
    assert forward.epoch == 2 and [int(x["id"]) for x in forward] == epoch2[3:]
    with pytest.raises(ValueError, match="seed=3, this dataset has 4"):
        other = TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=4)
        other.set_epoch(2)
        other.load_state_dict(state)


def test_the_sampler_keeps_a_later_epoch_and_refuses_what_does_not_fit(paths):
    dataset = IndexedTFRecordDataset(paths, SPEC)
    sampler = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3)
    it = iter(sampler)
    head = [next(it) for _ in range(4)]
    state = sampler.state_dict()
    later = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3)
    later.set_epoch(1)
    later.load_state_dict(state)
    assert later.epoch == 1 and later.state_dict()["yielded"] == 0
    reference = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3)
    reference.set_epoch(1)
    assert list(later) == list(reference)
    fresh = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=3)
    fresh.load_state_dict(state)
    assert fresh.epoch == 0 and head + list(fresh) == list(ElasticDistributedSampler(dataset, 1, 0, seed=3))
    with pytest.raises(ValueError, match="seed=3, this sampler has 4"):
        other = ElasticDistributedSampler(dataset, num_replicas=1, rank=0, seed=4)
        other.set_epoch(1)
        other.load_state_dict(state)


def test_mixture_and_cache_keep_a_later_epoch(paths, tmp_path):
    def mixture():
        return MixedDataset({"a": TFRecordDataset(paths[:2], SPEC, shuffle=True, seed=1, shuffle_buffer=4),
                             "b": TFRecordDataset(paths[2:], SPEC, index="auto", shuffle=True, seed=2)}, seed=5)

    def cache(folder):
        return CachedDataset(TFRecordDataset(paths, SPEC, index="auto", shuffle=True, seed=3), folder, seed=7,
                             shuffle=True)

    folders = iter(str(tmp_path / f"c{i}") for i in range(3))  # each cache its own: nothing kept read again
    for build in (mixture, lambda: cache(next(folders))):
        source = build()
        it = iter(source)
        for _ in range(3):
            next(it)
        state = source.state_dict()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reference = build()
            reference.set_epoch(1)
            epoch1 = [int(x["id"]) for x in reference]
            later = build()
            later.set_epoch(1)
            later.load_state_dict(state)
            assert later.epoch == 1 and later.state_dict()["epoch"] == 1
            assert [int(x["id"]) for x in later] == epoch1
    assert os.path.isdir(tmp_path / "c2")  # the cache resumed nothing: it read epoch 1 whole and kept it
