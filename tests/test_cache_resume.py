"""CachedDataset.state_dict / load_state_dict: a replayed epoch resumes the rest of its order (from the kept part,
or from the source read again where the part is gone: a new process with a cache in memory); a first epoch resumes
through the source's own state and keeps nothing; states of another cache or reader are refused by name."""

from __future__ import annotations

import random

import pytest
import torch

import tfr_torch
from tfr_torch import CachedDataset, TFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
N = 37

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


@pytest.fixture
def files(tmp_path, write_corpus):
    return write_corpus(tmp_path, [17, 20], lambda i: {"id": i}, index=True).paths


def ids(items):
    return [int(item["id"]) for item in items]


def make(files, folder=None, **kwargs):
    return CachedDataset(TFRecordDataset(files, SPEC, index="auto", shuffle=True, seed=4), folder, shuffle=True,
                         seed=2, **kwargs)


@pytest.mark.parametrize("where", ["memory", "folder"])
def test_a_replayed_epoch_resumes_the_rest_of_its_order(files, tmp_path, where):
    folder = str(tmp_path / "cache") if where == "folder" else None
    first = make(files, folder)
    list(first)  # epoch 0: read and kept
    first.set_epoch(3)
    whole = ids(first)
    rng = random.Random(where)
    for cut in sorted(rng.sample(range(1, N), 5)) + [0, N]:
        ds = make(files, folder)
        if where == "memory":
            list(ds)  # the part kept in this process, as in a run that goes on
        ds.set_epoch(3)
        it = iter(ds)
        head = [int(next(it)["id"]) for _ in range(cut)]
        state = ds.state_dict()
        assert state["phase"] == "replay" and state["yielded"] == cut
        for fresh in (ds, make(files, folder)):  # the same object, and a new process's (memory: nothing kept)
            fresh.load_state_dict(state)
            assert fresh.state_dict() == state
            assert head + ids(fresh) == whole, (cut, fresh is ds)
            assert fresh.epoch == 3 and fresh.dataset.epoch == 3


def test_a_first_epoch_resumes_through_the_source_and_keeps_nothing(files):
    whole = ids(make(files))
    ds = make(files)
    it = iter(ds)
    head = [int(next(it)["id"]) for _ in range(11)]
    state = ds.state_dict()
    assert state["phase"] == "read" and state["yielded"] == 11 and "source" in state
    resumed = make(files)
    resumed.load_state_dict(state)
    assert head + ids(resumed) == whole
    assert not resumed.cached()  # a part missing its head is not a part
    resumed.set_epoch(1)
    assert sorted(ids(resumed)) == list(range(N)) and resumed.cached()  # read whole, kept
    resumed.set_epoch(2)
    assert sorted(ids(resumed)) == list(range(N))


def test_a_state_taken_right_after_set_epoch_starts_that_epoch(files):
    ds = make(files)
    before = ds.state_dict()  # nothing kept, nothing begun: the epoch reads the source
    assert before["phase"] is None and before["yielded"] == 0
    list(ds)
    ds.set_epoch(1)
    state = ds.state_dict()
    assert state["phase"] == "replay" and state["yielded"] == 0 and state["kept_epoch"] == 0
    expected = ids(ds)
    again = make(files)  # a new process: the part is read again, then that epoch's replay order
    again.load_state_dict(state)
    assert ids(again) == expected
    first = make(files)
    first.load_state_dict(before)
    assert ids(first) == ids(make(files))


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
def test_stateful_dataloader_workers_resume_a_replayed_epoch(files, tmp_path):
    from torchdata.stateful_dataloader import StatefulDataLoader

    folder = str(tmp_path / "cache")

    def loader():
        ds = make(files, folder)
        return ds, StatefulDataLoader(ds, batch_size=3, num_workers=2)

    ds, first = loader()
    list(first)  # epoch 0: each worker keeps its part in the folder
    ds.set_epoch(1)
    whole = [b["id"].tolist() for b in first]
    ds, again = loader()
    ds.set_epoch(1)
    it = iter(again)
    head = [next(it)["id"].tolist() for _ in range(5)]
    state = again.state_dict()
    del it
    ds, resumed = loader()
    resumed.load_state_dict(state)
    assert head + [b["id"].tolist() for b in resumed] == whole


def test_states_that_do_not_fit_are_refused(files):
    ds = make(files)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    with pytest.raises(ValueError, match=r"another cache: seed 2 \(here 5\)"):
        CachedDataset(ds.dataset, shuffle=True, seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="not a CachedDataset state"):
        ds.load_state_dict(ds.dataset.state_dict())
    with pytest.raises(ValueError, match="yielded must be a non-negative int"):
        ds.load_state_dict({**state, "yielded": -3})
    with pytest.raises(ValueError, match="holds its dataset's state"):
        ds.load_state_dict({k: v for k, v in state.items() if k != "source"})
    other = make(files)
    other.load_state_dict({**state, "reader": "rank0of1-worker1of2"})
    with pytest.raises(ValueError, match=r"taken by reader rank0of1-worker1of2, not rank0of1-worker0of1"):
        iter(other)
