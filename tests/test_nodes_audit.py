"""Audit of tfr_torch.nodes (`TFRecordNode`, `ExampleDecoder`) against a simple model, with the real torchdata.nodes.

The model: every record id once per epoch over all ranks; the stream of items over several epochs is fixed by the
options (two identical pipelines agree), and a pipeline rebuilt from a state taken after any number of items, also
at an epoch's end and across epoch boundaries, and again from the rebuilt one's state, yields exactly the rest of
that stream. Checked here beyond tests/test_nodes.py and tests/test_hf_nodes_audit.py: chains of resumptions over
three epochs (plain node, Batcher + thread ParallelMapper + Prefetcher, MultiNodeWeightedSampler) for GZIP and
indexed files, several ranks and shuffling; every stop criterion of MultiNodeWeightedSampler; `on_error="skip"`
resumed at every item; GZIP buffered shuffles; states through JSON and pickle; what `reset()` does with and without
a state; truncated files and stale indexes (errors that name the file and the offset, after exactly the records
before them); a TFRecordDataset passed in keeping its epoch; malformed node states; runs of batches given as
tuples to `ExampleDecoder`; a corrupt record raising at its item, after every record before it. Pinned (xfail, a
cause outside tfr_torch): torchdata's Loader reporting a stale state after resuming at an epoch's end.
"""

import json
import os
import pickle
import warnings

import pytest
import torch

import tfr_torch

pytest.importorskip("torchdata.nodes")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torchdata.nodes import (  # noqa: E402
    Batcher,
    Loader,
    MultiNodeWeightedSampler,
    ParallelMapper,
    Prefetcher,
)

from tfr_torch.nodes import ExampleDecoder, TFRecordNode  # noqa: E402

ID = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
RECORD = len(tfr_torch.encode_example({"id": 0})) + 16  # bytes a record with a small id takes in a file


def _write(path, ids, gzip=False, index=True):
    path = str(path)
    with tfr_torch.TFRecordWriter(path, compression="GZIP" if gzip else None) as writer:
        for i in ids:
            writer.write_example({"id": i})
    if index:
        tfr_torch.build_index(path)
    return path


def _ids(item):
    """The record ids in what a pipeline yields: a record, a decoded row or batch, or a list of them."""
    if isinstance(item, (bytes, bytearray)):
        return [int(ExampleDecoder(ID)(item)["id"])]
    if isinstance(item, dict):
        return item["id"].reshape(-1).tolist()
    return [i for x in item for i in _ids(x)]


def _take(loader, count):
    """The ids of the next `count` items of `loader`, going on into the next epochs (a new iter() each) as needed."""
    out = []
    while len(out) < count:
        for item in iter(loader):
            out.append(_ids(item))
            if len(out) == count:
                break
    return out


def _epoch(loader):
    return [_ids(item) for item in loader]


def _pipeline(kind, paths, options):
    if kind in ("node", "batches"):
        return Loader(TFRecordNode(paths, **options))
    if kind == "mapped":
        node = Batcher(TFRecordNode(paths, **options), 2, drop_last=False)
        return Loader(Prefetcher(ParallelMapper(node, ExampleDecoder(ID), num_workers=2, method="thread"), 2))
    half = len(paths) // 2  # "mixed": two nodes, weighted, cycling the shorter
    nodes = {"a": TFRecordNode(paths[:half], **options), "b": TFRecordNode(paths[half:], **options)}
    return Loader(MultiNodeWeightedSampler(nodes, {"a": 2.0, "b": 1.0}, seed=4,
                                           stop_criteria="CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED"))


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "counting the records", "skipped a bad record": not what is checked here
        yield


@settings(max_examples=24, deadline=None, derandomize=True)
@given(kind=st.sampled_from(["node", "batches", "mapped", "mixed"]),
       files=st.sampled_from(["indexed", "plain", "gzip", "gzip-indexed"]), shuffle=st.booleans(), pad=st.booleans(),
       world=st.sampled_from([(0, 1), (1, 2), (2, 3)]), cuts=st.lists(st.integers(0, 9), min_size=1, max_size=4),
       seed=st.integers(0, 3))
def test_chains_of_resumptions_follow_the_uninterrupted_stream(tmp_path_factory, kind, files, shuffle, pad, world,
                                                               cuts, seed):
    """A pipeline run in segments, each rebuilt from the last one's state (pickled: a checkpoint), cut after any
    number of items (none, mid-epoch, across epochs; not at an epoch's end, see the xfail below), yields exactly
    the items, in the same order, that one uninterrupted pipeline yields over the same epochs (and a second
    identical pipeline too): plain and GZIP files with and without indexes (global or buffered shuffles), several
    ranks with and without `pad`; each epoch holds the rank's equal share, every record at most once (for one rank
    without pad, every record once)."""
    folder = tmp_path_factory.mktemp("chain")
    gzip, index = files.startswith("gzip"), files.endswith("indexed")
    sizes = [5, 3, 4, 2]
    paths = [_write(folder / f"p{f}.tfrecord", range(100 * f, 100 * f + n), gzip=gzip, index=index)
             for f, n in enumerate(sizes)]
    rank, world_size = world
    options = dict(index="auto" if index else None, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size,
                   pad=pad, shuffle_buffer=3, interleave=2)
    if kind == "batches":
        options.update(features=ID, batch_size=3)
    reference = _pipeline(kind, paths, options)
    epochs = [_epoch(reference)]
    while sum(map(len, epochs)) < sum(cuts) + 6 + 9 * len(cuts):
        epochs.append(_epoch(reference))
    if kind in ("node", "batches"):
        share = -(-sum(sizes) // world_size) if pad else sum(sizes) // world_size
        for epoch in epochs:
            flat = [i for x in epoch for i in x]
            assert len(flat) == share and (pad or len(set(flat)) == share)
            if world_size == 1:
                assert sorted(flat) == sorted(100 * f + i for f, n in enumerate(sizes) for i in range(n))
    # a state saved at an epoch's end, resumed, then saved again in the next epoch hits torchdata's Loader defect
    # pinned by test_saved_again_after_resuming_at_an_epochs_end: such cuts move one item on
    ends = {sum(len(e) for e in epochs[:n]) for n in range(1, len(epochs) + 1)}
    moved, done = [], 0
    for cut in cuts:
        while done + cut in ends:
            cut += 1
        moved.append(cut)
        done += cut
    cuts = moved
    want = [x for e in epochs for x in e][:sum(cuts) + 6]
    assert want == _take(_pipeline(kind, paths, options), sum(cuts) + 6)  # two identical pipelines agree
    got, state = [], None
    for cut in [*cuts, 6]:
        loader = _pipeline(kind, paths, options)
        if state is not None:
            loader.load_state_dict(state)
        got += _take(loader, cut)
        state = pickle.loads(pickle.dumps(loader.state_dict()))
    assert got == want


@pytest.mark.parametrize("stop", ["CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED", "ALL_DATASETS_EXHAUSTED",
                                  "FIRST_DATASET_EXHAUSTED"])
def test_weighted_sampler_over_nodes_resumes_after_every_item(tmp_path, stop):
    """MultiNodeWeightedSampler over two shuffled nodes, each stop criterion: a state taken after every item of
    epochs 0 and 1 (and at their ends) resumes with exactly the rest of the epoch, then the next epoch whole; each
    epoch of ALL_DATASETS_EXHAUSTED holds every record once."""
    a = _write(tmp_path / "a.tfrecord", range(7))
    b = _write(tmp_path / "b.tfrecord", range(100, 103))

    def mixture():
        nodes = {"a": TFRecordNode(a, index="auto", shuffle=True, seed=1),
                 "b": TFRecordNode(b, index="auto", shuffle=True, seed=2)}
        return Loader(MultiNodeWeightedSampler(nodes, {"a": 1.0, "b": 1.0}, stop_criteria=stop, seed=0))

    loader = mixture()
    full = [_epoch(loader) for _ in range(3)]
    if stop == "ALL_DATASETS_EXHAUSTED":
        for epoch in full:
            assert sorted(i for x in epoch for i in x) == [*range(7), *range(100, 103)]
    for epoch in (0, 1):
        for stop_at in range(len(full[epoch]) + 1):
            loader = mixture()
            for _ in range(epoch):
                list(loader)
            it = iter(loader)
            assert [_ids(next(it)) for _ in range(stop_at)] == full[epoch][:stop_at]
            resumed = mixture()
            resumed.load_state_dict(pickle.loads(pickle.dumps(loader.state_dict())))
            rest = full[epoch][stop_at:] if stop_at < len(full[epoch]) else full[epoch + 1]
            assert _epoch(resumed) == rest, (epoch, stop_at)


@pytest.mark.parametrize("index", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_on_error_skip_resumes_after_every_item(tmp_path, index, shuffle):
    """`on_error="skip"` with a corrupt record: every epoch yields the other 7 records (never the bad one), and a
    state taken after every item of epochs 0 and 1 resumes with exactly the rest."""
    path = _write(tmp_path / "bad.tfrecord", range(8), index=index)
    data = bytearray(open(path, "rb").read())
    data[3 * RECORD + 14] ^= 0x01  # inside record 3's data
    open(path, "wb").write(bytes(data))
    options = dict(index="auto" if index else None, on_error="skip", shuffle=shuffle, seed=1)
    loader = Loader(TFRecordNode(path, **options))
    full = [_epoch(loader) for _ in range(3)]
    for epoch in full:
        assert sorted(i for x in epoch for i in x) == [0, 1, 2, 4, 5, 6, 7]
    for epoch in (0, 1):
        for stop in range(len(full[epoch]) + 1):
            loader = Loader(TFRecordNode(path, **options))
            for _ in range(epoch):
                list(loader)
            it = iter(loader)
            [next(it) for _ in range(stop)]
            resumed = Loader(TFRecordNode(path, **options))
            resumed.load_state_dict(loader.state_dict())
            rest = full[epoch][stop:] if stop < len(full[epoch]) else full[epoch + 1]
            assert _epoch(resumed) == rest, (epoch, stop)


def test_node_and_batcher_states_survive_json(tmp_path):
    """A Loader state over a node and over a Batcher holds only JSON types: through json.dumps / loads it resumes
    with exactly the rest."""
    paths = [_write(tmp_path / "a.tfrecord", range(7)), _write(tmp_path / "b.tfrecord", range(100, 105))]
    for make in (lambda: Loader(TFRecordNode(paths, index="auto", shuffle=True, seed=3)),
                 lambda: Loader(Batcher(TFRecordNode(paths, ID, index="auto", shuffle=True, seed=3), 5,
                                        drop_last=False))):
        full = _epoch(make())
        loader = make()
        it = iter(loader)
        head = [_ids(next(it)) for _ in range(2)]
        resumed = make()
        resumed.load_state_dict(json.loads(json.dumps(loader.state_dict())))
        assert head + _epoch(resumed) == full


def test_identical_pipelines_agree_and_reset_starts_the_next_epoch(tmp_path):
    """Two identical pipelines yield the same epochs; each plain `reset()` of a node (used without a Loader) starts
    the next epoch: a new order with `shuffle`, the same order without; a `reset(state)` followed by a plain
    `reset()` before any item starts the epoch after the state's, whole (the loaded state is not applied to it)."""
    paths = [_write(tmp_path / "a.tfrecord", range(7)), _write(tmp_path / "b.tfrecord", range(100, 105))]
    every = sorted([*range(7), *range(100, 105)])

    def epochs(node, n):
        out = []
        for _ in range(n):
            node.reset()
            out.append([_ids(r)[0] for r in node])
        return out

    one = epochs(TFRecordNode(paths, index="auto", shuffle=True, seed=3), 3)
    two = epochs(TFRecordNode(paths, index="auto", shuffle=True, seed=3), 3)
    assert one == two and one[0] != one[1] != one[2] and all(sorted(e) == every for e in one)
    plain = epochs(TFRecordNode(paths, index="auto"), 2)
    assert plain[0] == plain[1] == [*range(7), *range(100, 105)]
    node = TFRecordNode(paths, index="auto", shuffle=True, seed=3)
    node.reset()
    [next(node) for _ in range(4)]
    state = node.state_dict()
    assert state["epoch"] == 0
    other = TFRecordNode(paths, index="auto", shuffle=True, seed=3)
    other.reset(state)
    other.reset()
    assert other.state_dict()["epoch"] == 1 and [_ids(r)[0] for r in other] == one[1]


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_truncated_file_names_file_and_offset_after_the_whole_records(tmp_path, shuffle):
    """A file cut inside its last record: the node raises TruncatedRecordError naming the file and the record's
    offset; in order, after yielding exactly the 4 whole records before it (none dropped); through a Batcher and a
    thread mapper, the same error."""
    path = _write(tmp_path / "cut.tfrecord", range(5), index=False)
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-5])
    expected = (f"{path}:{4 * RECORD}: truncated record: its header says {RECORD - 16} bytes of data, so {RECORD} "
                f"bytes from this offset, but the file has only {RECORD - 5}")
    got = []
    with pytest.raises(tfr_torch.TFRecordError) as err:
        for record in Loader(TFRecordNode(path, shuffle=shuffle, seed=0)):
            got.append(_ids(record)[0])
    assert type(err.value).__name__ == "TruncatedRecordError" and str(err.value) == expected
    if not shuffle:
        assert got == [0, 1, 2, 3]
    mapped = Loader(ParallelMapper(Batcher(TFRecordNode(path), 2, drop_last=False), ExampleDecoder(ID),
                                   num_workers=2, method="thread"))
    with pytest.raises(tfr_torch.TFRecordError) as err:
        list(mapped)
    assert expected in str(err.value)


def test_a_stale_index_is_refused_naming_file_and_index(tmp_path):
    """An index left from an earlier version of its file (more records, or other lengths) is refused when the node
    is built, naming the file, the index and what differs: no record is read through stale offsets."""
    path = _write(tmp_path / "s.tfrecord", range(5))
    _write(path, range(50, 53), index=False)  # rewritten with 3 records, the index kept
    with pytest.raises(tfr_torch.TFRecordError) as err:
        TFRecordNode(path, index="auto", shuffle=True)
    assert str(err.value) == (f"{path}: the index describes 5 records ending at byte {5 * RECORD}, but the file has "
                              f"{3 * RECORD} bytes (stale index, or made for another file?) (index file: {path}.idx)")


def test_an_index_of_the_same_size_but_other_record_lengths_is_refused_at_the_first_record(tmp_path):
    """A file rewritten with the same total size but other record boundaries (a long record moved first): the
    node stops before yielding anything, with an IndexMismatchError naming the file, offset 0, the index line and
    both record lengths, never reading records through offsets that are no longer records."""
    path = str(tmp_path / "moved.tfrecord")
    big = 10 ** 12
    _write(path, [1, 2, big])
    _write(path, [big, 1, 2], index=False)
    long = len(tfr_torch.encode_example({"id": big})) + 16
    assert os.path.getsize(path) == 2 * RECORD + long
    got = []
    with pytest.raises(tfr_torch.TFRecordError) as err:
        for record in Loader(TFRecordNode(path, index="auto")):
            got.append(_ids(record)[0])
    assert got == [] and type(err.value).__name__ == "IndexMismatchError"
    assert str(err.value) == (f"{path}:0: line 1 of the index says a record of {RECORD} bytes starts at offset 0, but "
                              f"the file has a record of {long} bytes there (stale index, or made for another "
                              f"file?) (index file: {path}.idx)")


def test_a_given_dataset_keeps_its_epoch(tmp_path):
    """Fixed: `TFRecordNode(dataset)` set the dataset's epoch back to 0 at its first reset, so a dataset after
    `set_epoch(2)` read epoch 0's order, and one that had loaded a state of epoch 2 dropped it silently and read
    epoch 0 whole. Now the node starts at the dataset's epoch (an explicit `epoch=` still wins)."""
    paths = [_write(tmp_path / "a.tfrecord", range(7)), _write(tmp_path / "b.tfrecord", range(100, 105))]
    options = dict(index="auto", shuffle=True, seed=3)
    by_epoch = [[_ids(r)[0] for r in Loader(TFRecordNode(paths, epoch=e, **options))] for e in range(3)]
    dataset = tfr_torch.TFRecordDataset(paths, **options)
    dataset.set_epoch(2)
    node = TFRecordNode(dataset)
    assert node.epoch == 2 and [_ids(r)[0] for r in Loader(node)] == by_epoch[2]
    assert [_ids(r)[0] for r in Loader(TFRecordNode(dataset, epoch=1))] == by_epoch[1]
    reader = tfr_torch.TFRecordDataset(paths, **options)
    reader.set_epoch(2)
    it = iter(reader)
    [next(it) for _ in range(5)]
    resumed = tfr_torch.TFRecordDataset(paths, **options)
    resumed.load_state_dict(reader.state_dict())
    assert [_ids(r)[0] for r in Loader(TFRecordNode(resumed))] == by_epoch[2][5:]


def test_malformed_node_states_are_refused(tmp_path):
    """Fixed: `reset(state)` took a state whose epoch disagreed with its dataset state's (the dataset resumed the
    one, the node counted on from the other, so the following epochs skipped some), and a boolean or negative
    epoch. Now each is a ValueError naming the state; a good state still resumes."""
    path = _write(tmp_path / "a.tfrecord", range(6))
    node = TFRecordNode(path, index="auto", shuffle=True, seed=1)
    node.reset()
    next(node)
    state = node.state_dict()
    for bad in ({**state, "epoch": 3}, {**state, "epoch": True}, {**state, "epoch": -1},
                {"epoch": 0, "dataset": None}, {"epoch": 0}):
        with pytest.raises(ValueError, match="^not a TFRecordNode state: "):
            TFRecordNode(path, index="auto", shuffle=True, seed=1).reset(bad)
    with pytest.raises(ValueError, match=r"^not a TFRecordNode state: its epoch is 3 but its dataset state's epoch "
                                         r"is 0$"):
        TFRecordNode(path, index="auto", shuffle=True, seed=1).reset({**state, "epoch": 3})
    good = TFRecordNode(path, index="auto", shuffle=True, seed=1)
    good.reset(state)
    assert len(list(good)) == 5


def test_decoder_takes_a_run_of_batches_given_as_tuples(tmp_path):
    """Fixed: `ExampleDecoder` took a run of batches only as lists: a run of tuples (what a collate or zip gives)
    raised "example 0: a serialized record must be bytes, got tuple" though a tuple of records decodes as a batch.
    Now a run of tuples gives the batches' dicts as a run of lists does."""
    records = [tfr_torch.encode_example({"id": i}) for i in range(5)]
    decode = ExampleDecoder(ID)
    assert decode(tuple(records[:2]))["id"].tolist() == [0, 1]
    run = decode([tuple(records[:3]), tuple(records[3:])])
    assert [b["id"].tolist() for b in run] == [[0, 1, 2], [3, 4]]
    assert [b["id"].tolist() for b in decode(([records[0]], (records[1], records[2])))] == [[0], [1, 2]]


@pytest.mark.xfail(strict=True, reason=(
    "torchdata 0.11 Loader defect, not tfr_torch's: Loader.__iter__ resumes a loaded state with has_next(), which "
    "stores the state in LoaderIterator._cached_state_dict before peeking; when the state is at an epoch's end the "
    "peek raises StopIteration, the Loader resets into the next epoch, and neither path clears _cached_state_dict, "
    "so every later Loader.state_dict() of that epoch returns the loaded end-of-epoch state (num_yielded too): "
    "resuming from it restarts the epoch, repeating what was read. Any root node shows it (Batcher, Mapper, "
    "Prefetcher, ParallelMapper alike); the fix belongs in torchdata's LoaderIterator (clear the cache in reset "
    "and when has_next finds no item)"))
@pytest.mark.parametrize("kind", ["node", "mapped"])
def test_saved_again_after_resuming_at_an_epochs_end(tmp_path, kind):
    """A checkpoint at an epoch's end (the usual place), resumed; one item into the next epoch a second checkpoint;
    resumed from that, the pipeline must yield the rest of that epoch, not the epoch again from its start."""
    paths = [_write(tmp_path / "a.tfrecord", range(6))]
    options = dict(index="auto", shuffle=True, seed=1)
    reference = _pipeline(kind, paths, options)
    epoch0, epoch1 = _epoch(reference), _epoch(reference)
    loader = _pipeline(kind, paths, options)
    assert _epoch(loader) == epoch0
    resumed = _pipeline(kind, paths, options)
    resumed.load_state_dict(loader.state_dict())
    it = iter(resumed)
    assert _ids(next(it)) == epoch1[0]
    again = _pipeline(kind, paths, options)
    again.load_state_dict(resumed.state_dict())
    assert _epoch(again) == epoch1[1:]


@pytest.mark.parametrize("how", ["rows", "global shuffle"])
def test_a_corrupt_record_raises_at_its_item(tmp_path, how):
    """A corrupt record among 40: the node yields every record before it in its order, then raises naming the file
    and the bad record's offset (the model: the error at the bad item)."""
    path = _write(tmp_path / "bad.tfrecord", range(40))
    order = [_ids(r)[0] for r in Loader(TFRecordNode(path, index="auto", shuffle=how != "rows", seed=0))]
    bad = 35 if how == "rows" else order[30]
    offset = sum(len(tfr_torch.encode_example({"id": i})) + 16 for i in range(bad))
    data = bytearray(open(path, "rb").read())
    data[offset + 14] ^= 0x01
    open(path, "wb").write(bytes(data))
    node = TFRecordNode(path, ID, index="auto") if how == "rows" else TFRecordNode(path, index="auto", shuffle=True,
                                                                                  seed=0)
    got = []
    with pytest.raises(tfr_torch.TFRecordError) as err:
        for item in Loader(node):
            got.append(_ids(item)[0])
    assert f"{path}:{offset}" in str(err.value) or f"offset {offset})" in str(err.value)
    assert got == order[:order.index(bad)]
