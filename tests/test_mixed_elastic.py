"""MixedDataset resumed under another layout: `tfr_torch.elastic_state` merges every reader's mixture state (each
dataset's parts merged as TFRecordDataset's are, the mixture's next segment numbered), and a mixture of any world
size and number of DataLoader workers loading it reads each dataset's rest exactly once, its draws afresh from
(seed, epoch, segment, worker) -- the same on every rank, so the new ranks still yield equal counts."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import tfr_torch
from tfr_torch import MixedDataset, TFRecordDataset

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
SIZES = {"a": 96, "b": 36, "c": 12}  # ids: a 0.., b 1000.., c 2000..
WEIGHTS = {"a": 3, "b": 2, "c": 1}
ALL = sorted(1000 * n + i for n, size in enumerate(SIZES.values()) for i in range(size))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixed_elastic")
    out = {}
    for n, (name, size) in enumerate(SIZES.items()):
        paths = []
        for shard in range(2):
            path = str(folder / f"{name}-{shard}.tfrecord")
            with tfr_torch.TFRecordWriter(path) as writer:
                for i in range(shard, size, 2):
                    writer.write_example({"id": 1000 * n + i})
            tfr_torch.build_index(path, path + ".idx")
            paths.append(path)
        out[name] = paths
    return out


def mixture(files, stop="all", seed=5, epoch=1, **kwargs):
    mixed = MixedDataset({name: TFRecordDataset(files[name], SPEC, index="auto", shuffle=True, **kwargs)
                          for name in SIZES}, WEIGHTS, stop=stop, seed=seed)
    mixed.set_epoch(epoch)
    return mixed


def ids(items):
    return [int(item["id"]) for item in items]


def heads(files, world, cut, stop="all"):
    """Every rank of `world` reads `cut` items (as DDP ranks step together); their items and states."""
    items, states = [], []
    for rank in range(world):
        mixed = mixture(files, stop, rank=rank, world_size=world)
        it = iter(mixed)
        items += [int(next(it)["id"]) for _ in range(cut)]
        states.append(mixed.state_dict())
    return items, states


def resumed(files, state, world, workers=0, stop="all"):
    """Each rank of `world` loads the merged state and reads the rest through a DataLoader of `workers`."""
    out = []
    for rank in range(world):
        mixed = mixture(files, stop, rank=rank, world_size=world)
        mixed.load_state_dict(state)
        out.append(ids(torch.utils.data.DataLoader(mixed, batch_size=None, num_workers=workers)))
    return out


@pytest.mark.parametrize(("world", "workers"), [(1, 0), (1, 2), (3, 0)])
def test_the_rest_of_a_mixed_epoch_is_read_once_under_another_layout(files, world, workers):
    head, states = heads(files, 2, 23)
    state = tfr_torch.elastic_state(states)
    assert state["merged"] and state["segment"] == 1
    rest = resumed(files, state, world, workers)
    assert len({len(r) for r in rest}) == 1  # every new rank yields as many items
    seen = Counter(head + [i for r in rest for i in r])
    assert max(seen.values()) == 1  # nothing twice
    missing = sorted(set(ALL) - set(seen))
    if world == 1:
        assert not missing
    else:  # each dataset's rest is cut to a multiple of the new world size, as a fresh epoch is (pad=False)
        per_dataset = Counter(i // 1000 for i in missing)
        assert all(count < world for count in per_dataset.values()), missing


def test_each_dataset_resumes_as_it_does_alone(files):
    """The mixture's items of each dataset are exactly what that dataset yields from its merged part alone."""
    _, states = heads(files, 2, 17)
    state = tfr_torch.elastic_state(states)
    rest = resumed(files, state, 3)
    for n, name in enumerate(SIZES):
        alone = []
        for rank in range(3):
            dataset = TFRecordDataset(files[name], SPEC, index="auto", shuffle=True, rank=rank, world_size=3)
            dataset.set_epoch(1)
            dataset.load_state_dict(state["datasets"][name])
            alone.append(sorted(ids(dataset)))
        assert [sorted(i for i in r if i // 1000 == n) for r in rest] == alone


def test_a_resumed_mixture_draws_the_same_every_time_and_states_merge_again(files):
    _, states = heads(files, 2, 11)
    state = tfr_torch.elastic_state(states)
    first, second = resumed(files, state, 2), resumed(files, state, 2)
    assert first == second
    again = mixture(files, rank=0, world_size=2)
    again.load_state_dict(state)
    assert again.state_dict() == state  # saved again before iterating: the merged state as loaded
    assert tfr_torch.elastic_state([again.state_dict()]) == state
    # a second resume: parts of segment 1, merged into segment 2, read by one rank
    items, parts = [], []
    for rank in range(2):
        mixed = mixture(files, rank=rank, world_size=2)
        mixed.load_state_dict(state)
        it = iter(mixed)
        items += [int(next(it)["id"]) for _ in range(9)]
        part = mixed.state_dict()
        assert part["segment"] == 1
        parts.append(part)
    twice = tfr_torch.elastic_state(parts)
    assert twice["segment"] == 2
    head, _ = heads(files, 2, 11)
    (rest,) = resumed(files, twice, 1)
    assert sorted(head + items + rest) == ALL


@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
def test_stateful_dataloader_states_resume_under_other_workers(files):
    """StatefulDataLoader with 2 workers, stopped mid-epoch; its state merged and loaded into a mixture read by 3."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    first = StatefulDataLoader(mixture(files), batch_size=4, num_workers=2)
    it = iter(first)
    head = [i for _ in range(7) for i in next(it)["id"].tolist()]
    state = tfr_torch.elastic_state(first.state_dict())
    del it
    mixed = mixture(files)
    mixed.load_state_dict(state)
    rest = ids(torch.utils.data.DataLoader(mixed, batch_size=None, num_workers=3))
    assert sorted(head + rest) == ALL


def test_stop_first_continues_until_a_dataset_runs_out_and_an_ended_epoch_stays_ended(files):
    head, states = heads(files, 2, 20, stop="first")
    rest = resumed(files, tfr_torch.elastic_state(states), 1, stop="first")[0]
    assert rest and not set(rest) & set(head)
    assert len(set(rest)) == len(rest)
    ended = []
    for rank in range(2):
        mixed = mixture(files, "first", rank=rank, world_size=2)
        list(mixed)
        ended.append(mixed.state_dict())
    over = tfr_torch.elastic_state(ended)
    assert over["over"] is True
    mixed = mixture(files, "first")
    mixed.load_state_dict(over)
    assert ids(mixed) == []  # the epoch had ended on every reader
    fresh = mixture(files, "first")
    assert ids(mixed) == ids(fresh)  # a second pass over the epoch is a whole one


def test_states_that_cannot_merge_are_refused_by_name(files):
    _, states = heads(files, 2, 5)
    with pytest.raises(ValueError, match="stop='cycle' resumes with the layout it was saved with only"):
        tfr_torch.elastic_state(heads(files, 2, 5, stop="cycle")[1])
    with pytest.raises(ValueError, match=r"different epochs or mixtures: epoch=1 in rank 0 worker 0's part, epoch=2"):
        tfr_torch.elastic_state([states[0], {**states[1], "epoch": 2}])
    with pytest.raises(ValueError, match=r"MixedDataset dataset 'a': the parts of 1 of the 2 readers .* missing"):
        tfr_torch.elastic_state(states[:1])
    with pytest.raises(ValueError, match="one kind: 2 MixedDataset state"):
        tfr_torch.elastic_state([*states, states[0]["datasets"]["a"]])
    merged = tfr_torch.elastic_state(states)
    with pytest.raises(ValueError, match="either one merged MixedDataset state or every reader's part"):
        tfr_torch.elastic_state([merged, *states])
    with pytest.raises(ValueError, match="segment must be an int >= 1"):
        mixture(files).load_state_dict({**merged, "segment": 0})
    with pytest.raises(ValueError, match="another mixture: weights"):
        MixedDataset({name: TFRecordDataset(files[name], SPEC) for name in SIZES}, seed=5).load_state_dict(merged)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork() of a process with threads (Python 3.12+)
def test_the_main_process_does_not_report_a_merged_state_its_workers_took(files):
    """As TFRecordDataset: once a pass of DataLoader workers took the loaded state, the main process's copy no
    longer says it is pending (it would resume that part of the epoch again)."""
    _, states = heads(files, 2, 11)
    state = tfr_torch.elastic_state(states)
    mixed = mixture(files)
    mixed.load_state_dict(state)
    assert mixed.state_dict() == state
    list(torch.utils.data.DataLoader(mixed, batch_size=None, num_workers=2))
    assert mixed.state_dict().get("merged") is None
