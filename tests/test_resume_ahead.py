"""A global shuffle resumed mid-epoch starts at the next record of its order: the records the state says were
yielded are not read again (they were, and dropped: a state taken at 95% of a large epoch cost 95% of an epoch's
reading). Only under on_error="raise", where no record was skipped before the state was taken; with "skip" the
yielded count does not say how far the order went, and the records are read and dropped as before."""

from __future__ import annotations

import itertools

import pytest
import torch

import tfr_torch
from tfr_torch.data import epoch_records

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


def test_under_skip_the_records_are_read_again(path, asked):
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=4, on_error="skip")
    head = _ids(itertools.islice(iter(dataset), 50))
    resumed = tfr_torch.TFRecordDataset(path, SPEC, index="auto", shuffle=True, seed=4, on_error="skip")
    resumed.load_state_dict(dataset.state_dict())
    asked.clear()
    rest = _ids(resumed)
    assert sorted(head + rest) == list(range(300))
    assert asked == [300]
