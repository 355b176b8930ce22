"""tfr_torch.nodes with the real torchdata.nodes: exactly-once records per rank, exact resumption, decoding."""

import pickle
from collections import Counter

import pytest
import torch

import tfr_torch

pytest.importorskip("torchdata.nodes")
from torchdata.nodes import Batcher, Loader, ParallelMapper, Prefetcher, Unbatcher  # noqa: E402

from tfr_torch.nodes import ExampleDecoder, TFRecordNode  # noqa: E402

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64), "text": tfr_torch.FixedLenFeature([], tfr_torch.string)}
FILES, PER_FILE = 3, 11


@pytest.fixture
def files(tmp_path):
    paths = []
    for f in range(FILES):
        path = tmp_path / f"part-{f}.tfrecord"
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(PER_FILE):
                rid = f * PER_FILE + i
                writer.write_example({"id": rid, "text": f"record {rid}"})
        tfr_torch.build_index(str(path))
        paths.append(str(path))
    return paths


def _loader(files, batch=4, **options):
    node = TFRecordNode(files, **options)
    mapped = ParallelMapper(Batcher(node, batch, drop_last=False), ExampleDecoder(SPEC), num_workers=2,
                            method="thread")
    return Loader(Prefetcher(mapped, prefetch_factor=2))


def _ids(batches):
    return [i for b in batches for i in b["id"].tolist()]


@pytest.mark.filterwarnings("ignore:counting the records")
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("index", [None, "auto"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_ranks_read_each_record_once(files, world_size, index, shuffle):
    n = FILES * PER_FILE
    per_rank = []
    for rank in range(world_size):
        ids = _ids(_loader(files, index=index, shuffle=shuffle, seed=5, rank=rank, world_size=world_size))
        assert len(ids) == n // world_size
        # the same records, in the same order, as TFRecordDataset gives this rank
        dataset = tfr_torch.TFRecordDataset(files, SPEC, index=index, shuffle=shuffle, seed=5, rank=rank,
                                            world_size=world_size)
        assert ids == [int(r["id"]) for r in dataset]
        per_rank.append(ids)
    counts = Counter(i for ids in per_rank for i in ids)
    assert sum(counts.values()) == world_size * (n // world_size)
    assert set(counts.values()) == {1} and set(counts) <= set(range(n))
    if world_size in (1, 3):
        assert set(counts) == set(range(n))


def test_rank_and_world_size_detected_from_the_environment(files, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    node = TFRecordNode(files, index="auto")
    assert (node.rank, node.world_size, len(node)) == (1, 3, 11)
    ids = [int(x) for x in (ExampleDecoder(SPEC)(r)["id"] for r in Loader(node))]
    expected = [int(r["id"]) for r in tfr_torch.TFRecordDataset(files, SPEC, index="auto", rank=1, world_size=3)]
    assert ids == expected and len(ids) == 11


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("stop", [0, 1, 2, 3])
def test_resume_continues_with_exactly_the_remaining_records(files, stop, shuffle):
    options = dict(index="auto", shuffle=shuffle, seed=2, rank=0, world_size=2)
    full = [b["id"].tolist() for b in _loader(files, **options)]
    assert len(full) == 4  # 16 records (33 // 2) in batches of 4
    loader = _loader(files, **options)
    it = iter(loader)
    head = [next(it)["id"].tolist() for _ in range(stop)]
    state = loader.state_dict()
    resumed = _loader(files, **options)
    resumed.load_state_dict(state)
    tail = [b["id"].tolist() for b in resumed]
    assert head + tail == full


def test_resume_in_a_later_epoch_and_epochs_advance(files):
    options = dict(index="auto", shuffle=True, seed=9)
    loader = _loader(files, **options)
    epoch0 = _ids(loader)
    it = iter(loader)  # epoch 1
    head = [next(it)["id"].tolist() for _ in range(3)]
    state = loader.state_dict()
    rest = [b["id"].tolist() for b in it]
    epoch1 = _ids([{"id": torch.tensor(b)} for b in head + rest])
    assert sorted(epoch0) == sorted(epoch1) == list(range(FILES * PER_FILE)) and epoch0 != epoch1
    resumed = _loader(files, **options)
    resumed.load_state_dict(state)
    assert [b["id"].tolist() for b in resumed] == rest
    assert sorted(_ids(resumed)) == list(range(FILES * PER_FILE))  # then epoch 2, whole
    assert resumed.state_dict() is not None


def test_state_saved_at_the_end_of_an_epoch_starts_the_next(files):
    loader = _loader(files, index="auto", shuffle=True, seed=1)
    list(loader)
    state = loader.state_dict()
    resumed = _loader(files, index="auto", shuffle=True, seed=1)
    resumed.load_state_dict(state)
    again = _loader(files, index="auto", shuffle=True, seed=1, epoch=1)
    assert _ids(resumed) == _ids(again)


def test_a_loader_that_ran_on_resumes_an_older_state(files):
    """A Loader that ran on past the epoch a state was saved in, given that state: the rest of that epoch, then the
    epochs after it (the dataset under the node resumes no state of an earlier epoch than its own, so the node
    sets the dataset's epoch to the state's first; it did not, and the later epoch was read in its place)."""
    options = dict(index="auto", shuffle=True, seed=9)
    reference = _loader(files, **options)
    epochs = [_ids(reference) for _ in range(3)]
    loader = _loader(files, **options)
    it = iter(loader)
    head = _ids([next(it) for _ in range(2)])
    state = loader.state_dict()
    for _ in range(2):
        list(loader)  # on to epoch 2
    loader.load_state_dict(state)
    assert head + _ids(loader) == epochs[0]
    assert _ids(loader) == epochs[1]


def test_a_state_from_another_rank_is_refused(files):
    loader = _loader(files, index="auto", rank=0, world_size=2)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    other = _loader(files, index="auto", rank=1, world_size=2)
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="^cannot resume: the saved state"):  # the dataset's message, naming ranks
        next(iter(other))


def test_decoder_single_records_batches_and_pickling(files):
    records = list(tfr_torch.read_records(files[0]))
    decode = pickle.loads(pickle.dumps(ExampleDecoder(SPEC)))
    one = decode(records[2])
    assert int(one["id"]) == 2 and one["text"] == b"record 2"
    batch = decode(records[:3])
    assert batch["id"].tolist() == [0, 1, 2] and batch["text"] == [b"record 0", b"record 1", b"record 2"]
    with pytest.raises(TypeError) as info:
        ExampleDecoder(None)
    assert str(info.value).startswith("ExampleDecoder needs a feature spec")
    with pytest.raises(TypeError, match="decodes a record .bytes., a list of records or a list of batches, got int"):
        decode(3)
    run = decode([records[:3], records[3:5]])  # a run of batches: their dicts
    assert [b["id"].tolist() for b in run] == [[0, 1, 2], [3, 4]] and run[1]["text"] == [b"record 3", b"record 4"]
    with pytest.raises(TypeError):
        decode([records[:3], "not records"])


def test_runs_of_batches_through_a_thread_mapper_and_unbatcher(files):
    node = TFRecordNode(files, index="auto")
    runs = ParallelMapper(Batcher(Batcher(node, 4, drop_last=False), 3, drop_last=False), ExampleDecoder(SPEC),
                          num_workers=2, method="thread")
    batches = list(Loader(Unbatcher(runs)))
    assert [len(b["id"]) for b in batches] == [4] * 8 + [1]
    assert [int(i) for b in batches for i in b["id"]] == list(range(33))


def test_node_decodes_and_batches_through_the_dataset(files):
    node = TFRecordNode(files, SPEC, batch_size=8, index="auto")
    assert [b["id"].tolist() for b in Loader(node)][0] == list(range(8))
    dataset = tfr_torch.TFRecordDataset(files, index="auto")
    assert len(TFRecordNode(dataset)) == 33
    with pytest.raises(TypeError, match="takes no features or dataset options"):
        TFRecordNode(dataset, SPEC)


def test_process_mapper(files):
    """Slow: two spawned worker processes, each importing torch."""
    node = TFRecordNode(files, index="auto")
    loader = Loader(ParallelMapper(Batcher(node, 10, drop_last=False), ExampleDecoder(SPEC), num_workers=2,
                                   method="process", multiprocessing_context="spawn"))
    assert sorted(_ids(loader)) == list(range(33))


def test_reachable_lazily_from_the_package():
    """Slow: a fresh interpreter that imports torch and torchdata."""
    import subprocess
    import sys

    code = ("import sys, tfr_torch\nprint('tfr_torch.nodes' in sys.modules, 'torchdata' in sys.modules)\n"
            "print(tfr_torch.nodes.TFRecordNode.__name__, 'torchdata.nodes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split("\n")
    assert out[:2] == ["False False", "TFRecordNode True"]


def test_docs_section_runs(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "torchdata-nodes.md").read_text()
    block = re.search(r"# torchdata.nodes\n.*?```python\n(.*?)```", text, re.S)
    assert block, "the torchdata.nodes guide lost its example"
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block.group(1), "docs/guides/torchdata-nodes.md", "exec"), scope)
    ids = [i for b in scope["first"] + scope["rest"] for i in b.tolist()]
    assert len(ids) == 48 and len(set(ids)) == 48  # 50 records, batches of 8 (drop_last)
    full = [i for b in scope["pipeline"]() for i in b["id"].tolist()]
    assert ids == full
