"""Which records each reader (rank x DataLoader worker) reads: the pure functions of tfr_torch.data.sharding,
checked against brute force (every position exactly once, equal work per rank, batch counts that do not depend on
the number of workers, seeded orders)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfr_torch.data.sharding import (
    epoch_rng,
    file_order,
    files_for_worker,
    global_block,
    rank_quota,
    runs_of_block,
    split_sizes,
    worker_block,
)

counts_st = st.lists(st.integers(0, 12), min_size=1, max_size=7)


def test_rank_quota():
    assert rank_quota(47, 1, False) == rank_quota(47, 1, True) == 47
    assert rank_quota(47, 2, False) == 23 and rank_quota(47, 2, True) == 24
    assert rank_quota(47, 3, False) == 15 and rank_quota(47, 3, True) == 16
    assert rank_quota(48, 3, False) == rank_quota(48, 3, True) == 16
    assert rank_quota(0, 4, True) == rank_quota(2, 4, False) == 0
    assert rank_quota(2, 4, True) == 1


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 200), parts=st.integers(1, 9), multiple=st.integers(1, 10))
def test_split_sizes_keep_the_batch_count(n, parts, multiple):
    sizes = split_sizes(n, parts, multiple)
    assert len(sizes) == parts and sum(sizes) == n and min(sizes) >= 0
    # at most one partial batch, in the last non-empty part; only empty parts after it
    partial = [p for p, s in enumerate(sizes) if s % multiple]
    assert len(partial) <= 1
    if partial:
        assert all(s == 0 for s in sizes[partial[0] + 1:])
    assert sum(math.ceil(s / multiple) for s in sizes) == math.ceil(n / multiple)
    assert sum(s // multiple for s in sizes) == n // multiple
    batches = [math.ceil(s / multiple) for s in sizes]
    assert max(batches) - min(batches) <= 1  # near-equal work


def test_split_sizes_examples_and_errors():
    assert split_sizes(47, 3) == [16, 16, 15]
    assert split_sizes(10, 3, 4) == [4, 4, 2]
    assert split_sizes(0, 2) == [0, 0]
    with pytest.raises(ValueError, match="parts must be >= 1, got 0"):
        split_sizes(5, 0)


@settings(max_examples=300, deadline=None)
@given(total=st.integers(0, 120), world_size=st.integers(1, 4), num_workers=st.integers(1, 5),
       multiple=st.integers(1, 6), pad=st.booleans())
def test_worker_blocks_tile_the_ranks(total, world_size, num_workers, multiple, pad):
    quota = rank_quota(total, world_size, pad)
    for rank in range(world_size):
        blocks = [worker_block(quota, rank, w, num_workers, multiple) for w in range(num_workers)]
        assert blocks[0][0] == rank * quota and blocks[-1][1] == (rank + 1) * quota
        assert all(blocks[w][1] == blocks[w + 1][0] for w in range(num_workers - 1))
        assert sum(math.ceil((b - a) / multiple) for a, b in blocks) == math.ceil(quota / multiple)


def _brute_force(counts, order, a, b):
    sequence = [(int(f), i) for f in order for i in range(counts[f])]
    return [sequence[p % len(sequence)] for p in range(a, b)] if sequence else []


@settings(max_examples=300, deadline=None)
@given(data=st.data(), counts=counts_st)
def test_runs_of_block_match_brute_force(data, counts):
    order = np.array(data.draw(st.permutations(range(len(counts)))))
    total = sum(counts)
    a = data.draw(st.integers(0, 2 * total + 2))
    b = data.draw(st.integers(a, a + 2 * total + 2))
    runs = runs_of_block(counts, order, a, b)
    assert all(0 <= r.start < r.stop <= counts[r.file] for r in runs)
    assert [(r.file, i) for r in runs for i in range(r.start, r.stop)] == _brute_force(counts, order, a, b)


@settings(max_examples=200, deadline=None)
@given(counts=counts_st, world_size=st.integers(1, 4), num_workers=st.integers(1, 4), pad=st.booleans(),
       seed=st.integers(0, 2**32), epoch=st.integers(0, 5))
def test_every_record_once_over_ranks_and_workers(counts, world_size, num_workers, pad, seed, epoch):
    total = sum(counts)
    quota = rank_quota(total, world_size, pad)
    order = file_order(len(counts), True, seed, epoch)
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sequential, permuted = [], []
    for rank in range(world_size):
        for worker in range(num_workers):
            a, b = worker_block(quota, rank, worker, num_workers)
            sequential += [int(firsts[r.file]) + i for r in runs_of_block(counts, order, a, b)
                           for i in range(r.start, r.stop)]
            permuted += global_block(counts, seed, epoch, a, b).tolist()
    for got in (sequential, permuted):
        assert len(got) == quota * world_size
        if pad or world_size == 1:
            assert set(got) == set(range(total))
        if not pad or world_size == 1:
            assert len(set(got)) == len(got)
    if world_size == 1:
        assert sorted(sequential) == sorted(permuted) == list(range(total))


def test_global_block_is_a_seeded_permutation():
    counts = [0, 1, 7, 13, 20, 6]
    full = global_block(counts, 3, 0, 0, 47)
    assert sorted(full.tolist()) == list(range(47))
    assert np.array_equal(np.concatenate([global_block(counts, 3, 0, 0, 10), global_block(counts, 3, 0, 10, 47)]),
                          full)
    assert np.array_equal(global_block(counts, 3, 0, 40, 50), full[np.arange(40, 50) % 47])  # wraps for padding
    assert np.array_equal(global_block(counts, 3, 0, 0, 47), full)
    assert not np.array_equal(global_block(counts, 3, 1, 0, 47), full)
    assert not np.array_equal(global_block(counts, 4, 0, 0, 47), full)
    assert global_block([0, 0], 3, 0, 0, 5).size == 0


def test_file_order_and_epoch_rng():
    assert file_order(6, False, 9, 4).tolist() == list(range(6))
    shuffled = file_order(20, True, 9, 4)
    assert sorted(shuffled.tolist()) == list(range(20))
    assert np.array_equal(shuffled, file_order(20, True, 9, 4))
    assert not np.array_equal(shuffled, file_order(20, True, 9, 5))
    assert not np.array_equal(shuffled, file_order(20, True, 10, 4))
    draws = epoch_rng(5, 1, 2).integers(1 << 30, size=4)
    assert np.array_equal(draws, epoch_rng(5, 1, 2).integers(1 << 30, size=4))
    assert not np.array_equal(draws, epoch_rng(5, 1, 3).integers(1 << 30, size=4))
    assert epoch_rng(-1, 0).integers(10) in range(10)  # any int seed is accepted


def test_files_for_worker_partition_the_order():
    order = file_order(7, True, 1, 0)
    parts = [files_for_worker(order, w, 3) for w in range(3)]
    assert sorted(sum(parts, [])) == list(range(7))
    assert parts[0] == [int(f) for f in order[0::3]]
