"""An elastic resume (elastic_state, then another world size) of an epoch in which readers skipped bad records
(on_error="skip" or a callable): each reader's part names the bad records it skipped ("skipped", by record number;
a global shuffle's says how far its order went instead, "consumed"), so the merge replays each reader's order as it
was read. Before, a merge took a reader's yielded items as the first positions of its order: in file order the
records after them were read again; through a shuffle buffer (which never held the bad records, so its whole order
shifted) other records were taken for the yielded ones, and good records were lost while others came twice.

Exactly once here means: every good record is read before or after the merge, but the remainder the new world
size drops (fewer than its ranks, pad=False); none read before comes again, except as a repeat that tops up the
share of a resumed reader that met a bad record (it repeats its own first records)."""

from __future__ import annotations

import itertools
import os
import warnings
from collections import Counter

import pytest
from torch.utils.data import DataLoader

from skip_util import SPEC, corrupt, ids, write

import tfr_torch
from tfr_torch import TFRecordDataset

BAD = [3, 10, 40, 130, 131]


@pytest.fixture(params=["plain", "gzip-buffered"])
def files(request, tmp_path):
    """Two indexed files of 100 records each, five of them bad. GZIP without seek points: shuffled through a
    buffer (a global shuffle needs seek points)."""
    gz = request.param != "plain"
    paths = [write(tmp_path / f"part{i}.tfrecord{'.gz' if gz else ''}", range(100 * i, 100 * i + 100), gz)
             for i in range(2)]
    corrupt(paths[0], [b for b in BAD if b < 100], gz)
    corrupt(paths[1], [b - 100 for b in BAD if b >= 100], gz)
    if gz:
        for p in paths:
            os.remove(p + ".idx.seek")
    return paths


def _make(paths, rank, world, **options):
    return TFRecordDataset(paths, SPEC, index="auto", on_error=lambda err: None, rank=rank, world_size=world,
                           **options)


def _check(heads, rests, world_after):
    read_before = set(itertools.chain.from_iterable(heads))
    seen = read_before | set(itertools.chain.from_iterable(rests))
    good = set(range(200)) - set(BAD)
    assert not seen & set(BAD)
    assert len(good - seen) < world_after  # only the remainder the new world size drops
    assert len({len(r) for r in rests}) == 1  # every new rank the same count
    for rest in rests:
        counts = Counter(rest)
        again = [i for i, n in counts.items() if i in read_before and n == 1]
        assert again == []  # Fixed: records of the first segment read again (and, buffered, others lost)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("stop", [1, 17, 45])
def test_an_elastic_resume_after_skipped_records_reads_each_good_record_once(files, shuffle, stop):
    options = {"shuffle": shuffle, "shuffle_buffer": 16, "interleave": 2}  # plain files shuffle globally
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        states, heads = [], []
        for r in range(2):
            dataset = _make(files, r, 2, **options)
            iterator = iter(dataset)
            heads.append([int(next(iterator)["id"]) for _ in range(stop)])
            states.append(dataset.state_dict())
        merged = tfr_torch.elastic_state(*states)
        rests = []
        for r in range(3):
            dataset = _make(files, r, 3, **options)
            dataset.load_state_dict(merged)
            rests.append(ids(dataset))
    _check(heads, rests, 3)


def test_parts_name_the_bad_records_their_reader_skipped(files):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = _make(files, 0, 1)  # in file order: records 0..199
        iterator = iter(dataset)
        got = [int(next(iterator)["id"]) for _ in range(20)]
        state = dataset.state_dict()
    assert got == [i for i in range(22) if i not in BAD]
    assert state["skipped"] == [3, 10]
    raising = TFRecordDataset(files, SPEC, index="auto")
    next(iter(raising))
    assert "skipped" not in raising.state_dict()  # nothing is skipped under "raise"


def test_an_elastic_resume_from_dataloader_workers(files):
    """Two ranks of two DataLoader workers each saved through torchdata's StatefulDataLoader, resumed by one rank
    of three workers: still exactly once."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    options = {"shuffle": True, "shuffle_buffer": 16, "interleave": 2, "batch_size": 4}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        states, heads = [], []
        for r in range(2):
            loader = stateful.StatefulDataLoader(_make(files, r, 2, **options), batch_size=None, num_workers=2)
            iterator = iter(loader)
            heads.append(ids(next(iterator) for _ in range(5)))
            states.append(loader.state_dict())
            del iterator
        merged = tfr_torch.elastic_state(*states)
        dataset = _make(files, 0, 1, **options)
        dataset.load_state_dict(merged)
        rest = ids(DataLoader(dataset, batch_size=None, num_workers=3))
    _check(heads, [rest], 1)


@pytest.mark.parametrize("bad", [-1, "x", [1, -2], {"a": 1}])
def test_a_state_whose_skipped_records_are_not_numbers_is_refused(files, bad):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = _make(files, 0, 1)
        next(iter(dataset))
        state = dataset.state_dict()
    _make(files, 0, 1).load_state_dict({**state, "skipped": None})  # None: not known, accepted
    with pytest.raises(ValueError, match="cannot resume: the saved state has skipped="):
        _make(files, 0, 1).load_state_dict({**state, "skipped": bad})
