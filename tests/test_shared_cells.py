"""Shared int64 values (tfr_torch.data.shared_cells): a dataset's epoch, resume flag, record counts and warning
flags live in blocks of torch's shared memory shared by many datasets (one descriptor a block, where a tensor each
held four a dataset: a mixture of a few dozen datasets ran out of descriptors, tests/test_many_files_audit.py).
Covered: values never overlap and start at zero; a hundred datasets add at most a block's descriptor; a forked
child and its parent see each other's writes, and the child hands out values of a block of its own; a dataset
sent to a spawned process keeps sharing its epoch with the one it came from."""

from __future__ import annotations

import multiprocessing
import os

import pytest
import torch

import tfr_torch
from tfr_torch.data import shared_cells
from tfr_torch.data.shared_cells import shared_int64


def test_values_are_zeros_and_never_overlap():
    a, b, c = shared_int64(3), shared_int64(1), shared_int64(5000)  # c: larger than a block
    for value in (a, b, c):
        assert value.is_shared() and value.dtype == torch.int64 and int(value.abs().sum()) == 0
    a.fill_(1)
    b.fill_(2)
    c.fill_(3)
    assert a.tolist() == [1, 1, 1] and b.tolist() == [2] and set(c.tolist()) == {3}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
def test_a_hundred_datasets_hold_a_few_descriptors(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write(b"x")
    before = len(os.listdir("/proc/self/fd"))
    datasets = [tfr_torch.TFRecordDataset(path) for _ in range(100)]
    datasets += [tfr_torch.MixedDataset(datasets[:2])]
    assert len(os.listdir("/proc/self/fd")) - before <= 1  # 400 before (4 a dataset)
    datasets[7].set_epoch(3)
    assert [d.epoch for d in datasets[6:9]] == [0, 3, 0]


def _child_writes(value: torch.Tensor, queue) -> None:
    value.fill_(11)
    mine = shared_int64(1)
    mine.fill_(7)
    queue.put(int(value))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_shares_the_values_and_hands_out_its_own():
    value = shared_int64(1)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_writes, args=(value, queue))
    child.start()
    assert queue.get(timeout=60) == 11
    child.join(60)
    assert child.exitcode == 0 and int(value) == 11  # the child's write, seen here
    assert int(shared_int64(1)) == 0  # the child's own value (7) was not of this process's block


def _epoch_of(dataset, queue) -> None:
    queue.put(dataset.epoch)
    dataset.set_epoch(9)


def test_a_dataset_sent_to_a_spawned_process_keeps_sharing_its_epoch(tmp_path):
    """(A spawned interpreter imports torch: a few seconds.)"""
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write(b"x")
    dataset = tfr_torch.TFRecordDataset(path)
    dataset.set_epoch(4)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_epoch_of, args=(dataset, queue))
    child.start()
    assert queue.get(timeout=120) == 4
    child.join(120)
    assert child.exitcode == 0 and dataset.epoch == 9


def test_a_block_is_started_when_the_current_one_is_full(monkeypatch):
    monkeypatch.setattr(shared_cells, "_BLOCK", 4)
    monkeypatch.setattr(shared_cells, "_CURRENT", shared_cells._Current())
    first, second, third = shared_int64(3), shared_int64(1), shared_int64(2)
    assert first.untyped_storage().data_ptr() == second.untyped_storage().data_ptr()
    assert third.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
