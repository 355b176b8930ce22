"""A global shuffle resumed mid-epoch starts at the next record of its order: the records the state says were
yielded are not read again (they were, and dropped: a state taken at 95% of a large epoch cost 95% of an epoch's
reading). Under on_error="skip" too: the state says how far the order went ("consumed": the bad records skipped
among the yielded ones counted)."""

from __future__ import annotations

import itertools

import pytest
import torch

import tfr_torch
from tfr_torch.data import epoch_records

from skip_util import corrupt

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("ahead") / "data.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(300):
            writer.write_example({"id": i})
    tfr_torch.build_index(path)
    return path


@pytest.fixture
def asked(monkeypatch):
    """How many records each reader's share asked iter_random for."""
    sizes = []
    real = epoch_records.iter_random

    def iter_random(source, ids, counts):
        sizes.append(len(ids))
        return real(source, ids, counts)

    monkeypatch.setattr(epoch_records, "iter_random", iter_random)
    return sizes


def _ids(items) -> list[int]:
    return [i for item in items for i in torch.as_tensor(item["id"]).reshape(-1).tolist()]


@pytest.mark.parametrize("batch_size", [None, 8])
@pytest.mark.parametrize("k", [0, 1, 17, 37])
def test_the_rest_of_the_order_without_reading_the_yielded_records(path, asked, batch_size, k):
    def make(**options):
        return tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=4, batch_size=batch_size,
                                         **options)

    whole = _ids(make())
    dataset = make()
    dataset.set_epoch(0)
    head = _ids(itertools.islice(iter(dataset), k))
    resumed = make()
    resumed.load_state_dict(dataset.state_dict())
    asked.clear()
    rest = _ids(resumed)
    assert head + rest == whole
    assert asked == [300 - k * (batch_size or 1)]  # Fixed: 300, every record read again and the first dropped
    assert resumed.state_dict()["yielded"] == len(whole) // (batch_size or 1) + (batch_size is not None
                                                                                 and len(whole) % batch_size > 0)


def _bad_copy(path, tmp_path, bad, gz=False) -> str:
    """A copy of the 300-record file (GZIP-compressed where `gz`) whose records `bad` fail their data CRC."""
    copy = str(tmp_path / ("bad.tfrecord.gz" if gz else "bad.tfrecord"))
    with tfr_torch.TFRecordWriter(copy, compression="gzip" if gz else None) as writer:
        for record in tfr_torch.read_records(path):
            writer.write(record)
    tfr_torch.build_index(copy)
    corrupt(copy, bad, gz)
    return copy


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("batch_size", [None, 8])
@pytest.mark.parametrize("k", [1, 20, 36])
def test_under_skip_the_rest_of_the_order_without_reading_the_yielded_records(path, tmp_path, asked, gz,
                                                                               batch_size, k):
    """Bad records skipped before the state was taken are counted in how far the order went (its "consumed"), so
    the resumed reader starts at the next record: nothing read twice, nothing lost. Fixed: the yielded records were
    read again and dropped (the yielded count alone does not say where the order stands)."""
    bad = [5, 77, 150, 290]
    copy = _bad_copy(path, tmp_path, bad, gz)

    def make(on_error):
        return tfr_torch.TFRecordDataset(copy, SPEC, index="auto", shuffle=True, seed=4, batch_size=batch_size,
                                         on_error=on_error)

    order = _ids(tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=4))  # every record's turn
    table = tfr_torch.read_index(copy + ".idx")
    reported: list[int] = []

    def report(err):  # the record numbers of the bad records reported, from the offsets they name
        reported.append(int(table[:, 0].tolist().index(err.skipped_range[0])))

    whole = _ids(make(report))
    assert whole == [i for i in order if i not in bad] and sorted(reported) == bad
    reported.clear()
    dataset = make(report)
    head = _ids(itertools.islice(iter(dataset), k))
    state = dataset.state_dict()
    went = state["consumed"]
    assert order[:went] == [i for i in order[:went] if i in bad or i in head]  # past the yielded and bad only
    assert order[went] not in bad and order[went] not in head  # up to the next good record
    for on_error in (report, "raise"):  # resumed under either policy
        resumed = make(on_error)
        resumed.load_state_dict(state)
        asked.clear()
        reported.clear()
        ahead = [i for i in order[went:] if i in bad]
        if on_error == "raise" and ahead:
            with pytest.raises(tfr_torch.TFRecordError):
                _ids(resumed)
            continue
        assert head + _ids(resumed) == whole
        assert asked == [300 - went]  # Fixed: [300], the yielded records read again
        assert reported == ahead  # a bad record the first pass went past is not reported again


def test_a_state_edited_to_go_past_its_share_is_refused(path):
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=4)
    next(iter(dataset))
    state = dataset.state_dict()
    resumed = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=4)
    resumed.load_state_dict({**state, "consumed": 301})
    with pytest.raises(ValueError, match="went 301 positions into a share of 300 records"):
        _ids(resumed)
    with pytest.raises(ValueError, match="consumed=-1"):
        resumed.load_state_dict({**state, "consumed": -1})


@pytest.fixture
def runs(monkeypatch):
    """The record runs (file, start, stop) each reader of file order asked iter_run for."""
    asked_runs = []
    real = epoch_records.iter_run

    def iter_run(source, run):
        asked_runs.append(tuple(run))
        return real(source, run)

    monkeypatch.setattr(epoch_records, "iter_run", iter_run)
    return asked_runs


@pytest.mark.parametrize("batch_size", [None, 8])
@pytest.mark.parametrize("k", [0, 1, 17, 37])
@pytest.mark.parametrize("world_size", [1, 2])
def test_file_order_resumes_at_the_next_record(path, tmp_path, runs, batch_size, k, world_size):
    """Unshuffled reading split by record ranges (an index: counts known) starts at the next record too. Fixed:
    every record before the state was read again and dropped."""
    second = str(tmp_path / "second.tfrecord")
    with tfr_torch.TFRecordWriter(second) as writer:
        for i in range(300, 420):
            writer.write_example({"id": i})
    tfr_torch.build_index(second)

    def make(**options):
        return tfr_torch.TFRecordDataset([path, second], SPEC, index="auto", batch_size=batch_size, rank=world_size - 1,
                                         world_size=world_size, **options)

    whole = _ids(make())
    dataset = make()
    head = _ids(itertools.islice(iter(dataset), k))
    resumed = make()
    resumed.load_state_dict(dataset.state_dict())
    runs.clear()
    rest = _ids(resumed)
    assert head + rest == whole
    assert sum(stop - start for _, start, stop in runs) == len(whole) - len(head)  # Fixed: len(whole)


def test_file_order_under_skip_without_bad_records_resumes_at_the_next_record(path, runs):
    """A state saved under on_error="skip" names the bad records it skipped (none here): resumed in the same
    layout, file order starts right after the yielded records. Fixed: they were read again and dropped (a state
    under "skip" did not count as saying where file order stands)."""
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", on_error="skip")
    head = _ids(itertools.islice(iter(dataset), 50))
    state = dataset.state_dict()
    assert state["skipped"] == [] and state["exact"] is False
    resumed = tfr_torch.TFRecordDataset(path, SPEC, index="auto", on_error="skip")
    resumed.load_state_dict(state)
    runs.clear()
    assert head + _ids(resumed) == list(range(300))
    assert runs == [(0, 50, 300)]  # Fixed: [(0, 0, 300)]


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("batch_size", [None, 8])
@pytest.mark.parametrize("k", [0, 1, 6, 17, 37])
def test_file_order_under_skip_resumes_past_the_skipped_records(path, tmp_path, runs, gz, batch_size, k):
    """Bad records skipped before the state was taken are named in it ("skipped"): the resumed reader of file order
    starts after the yielded records and the bad ones among and right after them, reports only the bad records
    from there on, and its own state still names every bad record of the epoch. Fixed: every record before the
    state was read again (and the bad ones among them reported again)."""
    bad = [5, 6, 77, 78, 150, 290]
    copy = _bad_copy(path, tmp_path, bad, gz)
    table = tfr_torch.read_index(copy + ".idx")
    reported: list[int] = []

    def report(err):
        reported.append(int(table[:, 0].tolist().index(err.skipped_range[0])))

    def make():
        return tfr_torch.TFRecordDataset(copy, SPEC, index="auto", batch_size=batch_size, on_error=report)

    good = [i for i in range(300) if i not in bad]
    assert _ids(make()) == good and reported == bad
    reported.clear()
    dataset = make()
    head = _ids(itertools.islice(iter(dataset), k))
    state = dataset.state_dict()
    assert state.get("skipped", []) == reported and set(reported) >= {b for b in bad if head and b < head[-1]}
    start = head[-1] + 1 if head else 0
    while head and start in reported:  # skipped right after the last yielded record: gone past already
        start += 1
    resumed = make()
    resumed.load_state_dict(state)
    runs.clear()
    reported.clear()
    assert head + _ids(resumed) == good
    assert runs == ([(0, start, 300)] if start < 300 else [])  # Fixed: [(0, 0, 300)]
    assert reported == [b for b in bad if b >= start]  # Fixed: the bad records before the state again
    assert resumed.state_dict()["skipped"] == bad  # the first pass's as well as the resumed pass's


@pytest.mark.filterwarnings("ignore::tfr_torch.SkippedRecordWarning")
@pytest.mark.parametrize("world_size", [2, 3])
def test_file_order_under_skip_with_ranks_keeps_each_ranks_items_after_a_resume(path, tmp_path, runs, world_size):
    """Several ranks: a reader that skipped bad records tops its share up with repeats of its first good ones;
    resumed past the bad records (its state names them), it yields what the uninterrupted pass would have."""
    bad = [3, 4, 40, 41, 42]
    copy = _bad_copy(path, tmp_path, bad)

    def make(rank):
        return tfr_torch.TFRecordDataset(copy, SPEC, index="auto", batch_size=4, rank=rank, world_size=world_size,
                                         on_error="skip")

    for rank in range(world_size):
        whole = _ids(make(rank))
        assert len(whole) == 300 // world_size
        for k in (1, 3, 9, 12):
            dataset = make(rank)
            head = _ids(itertools.islice(iter(dataset), k))
            resumed = make(rank)
            resumed.load_state_dict(dataset.state_dict())
            runs.clear()
            assert head + _ids(resumed) == whole, (rank, k)
            assert runs[0][1] > rank * (300 // world_size)  # started inside its share, not at its start
