"""Batches from DataLoader workers through reused shared memory (tfr_torch.data.transport).

What must hold: a batch that crosses from a worker arrives equal to what the worker yielded, as plain dicts,
lists, bytes and tensors the main process owns, or views of a lent slab that the worker does not reuse while any
of them lives (nothing points into memory a worker reuses); slabs are reused,
not made per batch; values the slabs do not carry travel the usual way; plain pickle and copy are untouched;
without shared memory the DataLoader's pipe still delivers everything.
"""

from __future__ import annotations

import copy
import ctypes
import gc
import os
import pickle
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.data import pipe, receive, slabs, transport
from tfr_torch.data.slabs import _HEADER as _SLAB_HEADER
from tfr_torch.data.transport import Batch, RecordBatch

pytestmark = pytest.mark.usefixtures("backend")  # the slab's byte lists: the compiled loops and the reference

needs_shm = pytest.mark.skipif(not transport.shared_memory_available(), reason="no memfd_create or /proc here")


def _send(obj):
    """What a DataLoader worker's queue does to an item: ForkingPickler out, pickle in."""
    return pickle.loads(ForkingPickler.dumps(obj))


def _sample_batch():
    return {
        "data": [b"", b"abc", bytes(range(256)) * 70],
        "label": torch.tensor([3, -1, 2**40], dtype=torch.int64),
        "f": torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, ::2],  # not contiguous
        "bf": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros((0, 5), dtype=torch.int16),
        "scalar": torch.tensor(7, dtype=torch.uint8),
        "sparse": torch.tensor([[0, 1.5], [0, 0]]).to_sparse(),
        "name": "not a tensor",
        "nested": {"ids": [1, 2, 3]},
    }


def _assert_same(got, want):
    assert type(got) is dict and list(got) == list(want)
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert type(got[key]) is torch.Tensor and got[key].dtype == value.dtype, key
            assert got[key].shape == value.shape, key
            assert torch.equal(got[key].to_dense(), value.to_dense()), key
        else:
            assert got[key] == value and type(got[key]) is type(value), key


@needs_shm
@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")  # torch's own reduction of the sparse value
def test_forking_pickler_round_trip_gives_plain_owned_values():
    want = _sample_batch()
    got = _send(Batch(want))
    _assert_same(got, want)
    assert all(type(b) is bytes for b in got["data"])
    # the tensors own their memory: writing into a reused slab afterwards cannot change them
    label = got["label"].clone()
    again = _send(Batch({"label": torch.tensor([9, 9, 9])}))
    assert torch.equal(again["label"], torch.tensor([9, 9, 9]))
    assert torch.equal(got["label"], label)


@needs_shm
def test_record_batches_arrive_as_lists_of_bytes():
    records = [b"r%d" % i * (i + 1) for i in range(50)]
    got = _send(RecordBatch(records))
    assert type(got) is list and got == records


@needs_shm
def test_slabs_are_reused_and_grow_when_a_batch_is_larger():
    pool = slabs._pool()
    before = list(pool.slabs)
    for _ in range(20):
        _send(Batch({"data": [b"x" * 1000] * 100}))
    assert len(pool.slabs) - len(before) <= 1  # every batch was copied out before the next: one slab serves all
    big = [b"y" * (1 << 20)] * 3  # 3 MB: more than a 1 MB slab holds
    assert _send(Batch({"data": big}))["data"] == big
    assert max(s.size for s in pool.slabs) >= 3 << 20


@needs_shm
def test_unreceived_batches_take_new_slabs_and_never_overwrite_pending_ones():
    pending = [ForkingPickler.dumps(Batch({"v": torch.full((1000,), i)})) for i in range(5)]
    for i, message in enumerate(pending):  # received only now, in order: each still holds its own values
        assert torch.equal(pickle.loads(message)["v"], torch.full((1000,), i))


def test_plain_pickle_and_copy_keep_the_types():
    batch = Batch({"data": [b"a"], "t": torch.ones(2)})
    for clone in (pickle.loads(pickle.dumps(batch)), copy.copy(batch), copy.deepcopy(batch)):
        assert type(clone) is Batch and clone["data"] == [b"a"] and torch.equal(clone["t"], torch.ones(2))
    records = RecordBatch([b"a", b"b"])
    assert type(pickle.loads(pickle.dumps(records))) is RecordBatch


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")
def test_without_shared_memory_batches_go_inline(monkeypatch):
    monkeypatch.setattr(slabs._pool(), "disabled", "test: no shared memory")
    want = _sample_batch()
    _assert_same(_send(Batch(want)), want)
    assert _send(RecordBatch([b"a", b"bc"])) == [b"a", b"bc"]


# ----- nested results (RLDS episodes) -----------------------------------------------------------------------------

def _episode():
    """Nested as an RLDS episode is, with every kind of value a nested result holds."""
    return {
        "steps": {
            "observation": {"image": torch.arange(5 * 3 * 8 * 8, dtype=torch.int64).to(torch.uint8).reshape(5, 3, 8, 8),
                            "state": torch.randn(5, 7, dtype=torch.float64)},
            "action": torch.randn(5, 4),
            "is_first": torch.tensor([True, False, False, False, False]),
            "language_instruction": [b"open the drawer"] * 5,
            "empty": torch.zeros((0, 3), dtype=torch.bfloat16),
            "contacts": tfr_torch.RaggedTensor(torch.arange(6.0), (torch.tensor([0, 2, 6]),)),
        },
        "episode_metadata": {"file_path": b"/data/episode_1.npy", "id": torch.tensor(7), "n": 5, "empty": {}},
        "frames": [torch.ones(2, 2), torch.zeros(3, dtype=torch.int32)],          # a list of tensors
        "objects": [{"label": torch.tensor(1), "names": [b"cup", b""]}, {"label": torch.tensor(2), "names": []}],
        "nested_text": [[b"a", b"bc"], [], [b"d"]],                               # lists of lists of bytes
        "pair": (torch.tensor([1]), b"x"),                                       # tuples travel in the pickle
        "flat": [b"x" * 100, b"y"],
    }


def _assert_identical(got, want, where="item"):
    assert type(got) is type(want), (where, type(got), type(want))
    if isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            _assert_identical(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            _assert_identical(a, b, f"{where}[{i}]")
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want), where
    elif isinstance(want, tfr_torch.RaggedTensor):
        assert got.to_list() == want.to_list(), where
    else:
        assert got == want, where


@needs_shm
@pytest.mark.parametrize("wrap", [Batch, transport.Parcel])
def test_nested_results_travel_through_the_slab(wrap):
    """Dicts in dicts, lists of dicts, lists of tensors and of bytes: every dense tensor and list of bytes crosses
    in the slab (the pickle holds only the skeleton), and the structure and values arrive identical, as plain
    dicts and lists the receiver owns."""
    want = _episode()
    sent = copy.deepcopy(want)
    big = torch.randn(256, 1024)  # 1 MB
    sent["steps"]["observation"]["big"] = big
    want["steps"]["observation"]["big"] = big.clone()
    message = bytes(ForkingPickler.dumps(wrap(sent)))
    assert b"_rebuild_nested" in message and len(message) < 8192  # the megabyte went through the slab
    got = pickle.loads(message)
    _assert_identical(got, want)
    _assert_identical(sent, want)  # what the worker sent is left as it was (None only in the skeleton's copy)
    again = _send(Batch({"steps": {"observation": {"big": torch.zeros(256, 1024)}}}))  # the slab is reused
    assert torch.equal(got["steps"]["observation"]["big"], big) and not again["steps"]["observation"]["big"].any()


@needs_shm
def test_nested_record_spans_and_only_nested_values():
    assert _send(Batch({"a": {"b": {"c": [b"x", b"yz"]}}})) == {"a": {"b": {"c": [b"x", b"yz"]}}}
    assert _send(Batch({"a": [[torch.tensor(1.5)]]}))["a"][0][0].item() == 1.5
    assert _send(Batch({"a": [], "b": {}})) == {"a": [], "b": {}}  # nothing for the slab


@pytest.mark.filterwarnings("ignore:Sparse invariant checks:UserWarning")
def test_nested_results_without_shared_memory_go_inline(monkeypatch):
    monkeypatch.setattr(slabs._pool(), "disabled", "test: no shared memory")
    want = _episode()
    message = bytes(ForkingPickler.dumps(Batch(copy.deepcopy(want))))
    assert b"_rebuild_nested" not in message
    _assert_identical(pickle.loads(message), want)


_DTYPES = [torch.uint8, torch.int64, torch.float32, torch.float64, torch.bool, torch.bfloat16, torch.int16]
_tensors = st.builds(lambda shape, dtype, seed: (torch.arange(int(np.prod(shape)), dtype=torch.int64) * seed % 7)
                     .to(dtype).reshape(shape),
                     st.lists(st.integers(0, 4), max_size=3), st.sampled_from(_DTYPES), st.integers(1, 50))
_leaves = st.one_of(_tensors, st.lists(st.binary(max_size=40), max_size=4), st.binary(max_size=8),
                    st.integers(), st.none())
_nests = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=12)


@needs_shm
@given(st.dictionaries(st.text(max_size=4), _nests, min_size=1, max_size=4))
def test_any_nesting_arrives_identical(item):
    """Dicts and lists of tensors, bytes, lists of bytes and plain values, nested any way: what the main process
    gets equals what the worker sent, and the worker's item is left as it was."""
    want = copy.deepcopy(item)
    _assert_identical(_send(Batch(item)), want)
    _assert_identical(item, want)


def _nest(row):
    """A transform that nests a flat row as an episode's keys are nested."""
    return {"steps": {"observation": {"data": [row["data"]] * 3}, "id": row["id"].expand(3).clone()},
            "episode_metadata": {"id": row["id"], "names": [{"n": row["data"][:1]}]}}


def test_dataloader_workers_send_nested_items_through_the_slab(tmp_path, write):
    path = str(tmp_path / "d.tfrecord")
    write(path, 60)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", transform=_nest)
    want = {int(item["episode_metadata"]["id"]): item for item in dataset}
    got = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert sorted(int(item["episode_metadata"]["id"]) for item in got) == sorted(want)
    for item in got:
        _assert_identical(item, want[int(item["episode_metadata"]["id"])])


@pytest.fixture
def write(write_records):
    """write(path, n): n Examples (ids 0..n-1, payloads of varied sizes) and the file's index."""
    return lambda path, n: write_records(
        path, [{"id": i, "data": bytes([i % 251]) * (i * 37 % 5000)} for i in range(n)], index=True)


SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64), "data": tfr_torch.FixedLenFeature([], tfr_torch.string)}


@pytest.mark.parametrize("shared_memory", [True, False])
@pytest.mark.parametrize("features", [SPEC, None])
def test_dataloader_batches_equal_the_in_process_ones(tmp_path, shared_memory, features, write):
    path = str(tmp_path / "d.tfrecord")
    write(path, 203)
    dataset = tfr_torch.TFRecordDataset(path, features, index="auto", batch_size=16, shared_memory=shared_memory)
    want = list(dataset)
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    got = list(loader)
    assert len(got) == len(want) == 13  # 203 records in batches of 16, split between workers by whole batches
    key = (lambda b: b["id"].tolist()) if features else (lambda b: b)
    assert sorted(map(key, got)) == sorted(map(key, want))
    for batch in got:
        assert type(batch) is (dict if features else list)
        if features:
            assert batch["id"].dtype == torch.int64
            assert batch["data"] == [bytes([i % 251]) * (i * 37 % 5000) for i in batch["id"].tolist()]


def test_dataloader_per_record_items_collated_in_workers(tmp_path, write):
    path = str(tmp_path / "d.tfrecord")
    write(path, 40)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto")
    got = list(DataLoader(dataset, batch_size=8, num_workers=2))
    ids = sorted(i for batch in got for i in batch["id"].tolist())
    assert ids == list(range(40))
    assert all(type(batch) is dict for batch in got)


def test_transform_output_that_is_not_a_dict_passes_through(tmp_path, write):
    path = str(tmp_path / "d.tfrecord")
    write(path, 20)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5,
                                        transform=lambda b: (b["id"], b["data"]))
    got = list(DataLoader(dataset, batch_size=None, num_workers=2))
    assert sorted(i for ids, _ in got for i in ids.tolist()) == list(range(20))


@needs_shm
def test_spawned_workers_and_mappings_of_finished_workers_are_dropped(tmp_path, write):
    """Slow by nature: 2 epochs of 2 spawned workers (each a fresh interpreter importing torch), then 3 epochs of
    new forked workers."""
    path = str(tmp_path / "d.tfrecord")
    write(path, 64)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=8)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="spawn")
    for _ in range(2):
        assert sorted(i for batch in loader for i in batch["id"].tolist()) == list(range(64))
    fork_loader = DataLoader(dataset, batch_size=None, num_workers=2)
    for _ in range(3):  # new workers every epoch: the main process keeps the mappings of the last ones only
        assert sorted(i for batch in fork_loader for i in batch["id"].tolist()) == list(range(64))
    workers = {pid for pid, _ in receive._MAPS} - {os.getpid()}  # (this process's own slabs: earlier tests)
    assert len(workers) <= 2


@pytest.mark.parametrize("shared_memory", [True, False])
def test_indexed_dataset_batches_collated_in_workers(tmp_path, shared_memory, write):
    path = str(tmp_path / "d.tfrecord")
    write(path, 50)
    dataset = tfr_torch.IndexedTFRecordDataset(path, SPEC, shared_memory=shared_memory)
    assert type(dataset[3]) is dict  # not in a worker: a plain dict
    got = list(DataLoader(dataset, batch_size=8, num_workers=2))
    assert all(type(batch) is dict for batch in got)
    ids = [i for batch in got for i in batch["id"].tolist()]
    assert ids == list(range(50))
    assert [d for batch in got for d in batch["data"]] == [dataset[i]["data"] for i in range(50)]


def test_a_parcel_passes_default_convert_unwalked_and_arrives_as_what_it_holds():
    from torch.utils.data import default_convert

    batch = {"data": [b"x" * 100, b""], "label": torch.tensor([1, 2])}
    parcel = transport.Parcel(batch)
    assert default_convert(parcel) is parcel
    for got in (_send(parcel), pickle.loads(pickle.dumps(parcel))):
        assert type(got) is dict and got["data"] == batch["data"] and torch.equal(got["label"], batch["label"])
    records = [b"a", b"bc" * 5000]
    assert _send(transport.Parcel(records)) == records and type(_send(transport.Parcel(records))) is list


def _assert_unchanged(got, want):
    assert type(got) is type(want), (type(got), type(want))
    if isinstance(want, torch.Tensor):
        assert got is want
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            _assert_unchanged(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _assert_unchanged(a, b)
    else:
        assert got == want


def test_default_convert_changes_nothing_that_tfr_torch_decodes():
    """Why a worker may send its batches past DataLoader's default_convert (transport.Parcel): it converts numpy
    arrays only, and no decoded value of any feature kind is one or holds one."""
    from torch.utils.data import default_convert

    spec = {"i": tfr_torch.FixedLenFeature([2], torch.int64), "s": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "s2": tfr_torch.FixedLenFeature([2], tfr_torch.string, default_value=[b"a", b"b"]),
            "v": tfr_torch.VarLenFeature(torch.float32), "vs": tfr_torch.VarLenFeature(tfr_torch.string),
            "sp": tfr_torch.SparseFeature("idx", "v", torch.float32, [10]),
            "r": tfr_torch.RaggedFeature(torch.int64, value_key="i"),
            "rs": tfr_torch.RaggedFeature(tfr_torch.string, value_key="vs"),
            "q": tfr_torch.FixedLenSequenceFeature([], torch.int64, allow_missing=True, default_value=0)}
    records = [tfr_torch.encode_example({"i": [1, 2], "s": b"x", "v": [0.5, 1.5], "vs": [b"p"], "idx": [3, 4],
                                         "q": [7]}),
               tfr_torch.encode_example({"i": [3, 4], "s": b"y", "s2": [b"c", b"d"], "v": [2.5], "vs": [b"q", b"r"],
                                         "idx": [9]})]
    for batch in (tfr_torch.parse_example(records, spec), tfr_torch.parse_single_example(records[0], spec)):
        _assert_unchanged(default_convert(batch), batch)


def test_only_a_default_convert_loader_without_transform_gets_parcels(tmp_path, write, monkeypatch):
    from torch.utils.data._utils.collate import default_collate, default_convert
    from torch.utils.data._utils.fetch import _IterableDatasetFetcher

    path = str(tmp_path / "d.tfrecord")
    write(path, 10)
    seen = []
    monkeypatch.setattr(tfr_torch.TFRecordDataset, "_iterate", lambda self, converts_only=False: seen.append(
        converts_only) or iter(()))
    batched = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5)
    records = tfr_torch.TFRecordDataset(path, SPEC, index="auto")
    _IterableDatasetFetcher(batched, False, default_convert, False)
    _IterableDatasetFetcher(batched, False, lambda b: b, False)
    _IterableDatasetFetcher(records, True, default_collate, False)
    iter(batched)
    assert seen == [True, False, False, False]


def test_a_collate_fn_or_a_transform_still_sees_and_converts_what_it_did(tmp_path, write):
    """With batch_size=None a user's collate_fn gets the batch as a dict, and numpy arrays a transform returns
    are still turned into tensors by default_convert: neither loader sends parcels."""
    import numpy as np

    path = str(tmp_path / "d.tfrecord")
    write(path, 20)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5)
    kinds = list(DataLoader(dataset, batch_size=None, num_workers=2, collate_fn=lambda b: type(b).__mro__[-2]))
    assert kinds == [dict] * 4
    numpy_ids = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5,
                                          transform=lambda b: {"id": np.asarray(b["id"])})
    got = list(DataLoader(numpy_ids, batch_size=None, num_workers=2))
    assert all(type(batch["id"]) is torch.Tensor for batch in got)
    assert sorted(i for batch in got for i in batch["id"].tolist()) == list(range(20))


def _worker_items(dataset, monkeypatch):
    """What the dataset yields inside DataLoader worker 0 of 1 whose collate is default_convert (Parcels)."""
    import types

    import tfr_torch.data.dataset as dataset_module

    monkeypatch.setattr(dataset_module, "get_worker_info", lambda: types.SimpleNamespace(id=0, num_workers=1))
    return list(dataset._iterate(converts_only=True))


@needs_shm
@pytest.mark.parametrize("slab", [True, False])
def test_worker_batches_keep_strings_in_their_records_until_the_slab(tmp_path, write, monkeypatch, backend, slab):
    """In a worker, a batch for the transport holds a FixedLenFeature string as spans of its records (the compiled
    core), written once into the slab, or sent inline as the list it stands for when there is no slab; either
    way it arrives as the list of bytes parse_example gives."""
    from tfr_torch.decode.spans import RecordSpans

    path = str(tmp_path / "d.tfrecord")
    write(path, 40)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=16)
    want = list(dataset)
    parcels = _worker_items(dataset, monkeypatch)
    assert [type(p) for p in parcels] == [transport.Parcel] * 3
    spans = [type(p.item["data"]) is RecordSpans for p in parcels]
    assert spans == [backend == "native"] * 3
    if not slab:
        monkeypatch.setattr(slabs._pool(), "disabled", "test: no shared memory")
    for parcel, expected in zip(parcels, want):
        got = _send(parcel)
        assert type(got["data"]) is list and got["data"] == expected["data"]
        assert torch.equal(got["id"], expected["id"])


def test_record_spans_are_checked_against_their_records(backend):
    """pack_spans and bytes_of_spans refuse spans outside their records or the arena, and a slab too small."""
    import numpy as np

    if backend != "native":
        pytest.skip("spans are made and read by the compiled core only")

    from tfr_torch.decode.spans import RecordSpans

    core = tfr_torch._native.core
    records = [b"hello world", b"abc"]
    good = np.array([[0, 6, 5], [1, 0, 3]], dtype=np.int64)
    spans = RecordSpans(core, records, bytearray(good.tobytes()), 0, 2)
    assert spans.tolist() == [b"world", b"abc"] and spans.nbytes() == 8 and len(spans) == 2
    assert pickle.loads(pickle.dumps(spans)) == [b"world", b"abc"]
    out = bytearray(10)
    assert spans.pack(out, 1) == [5, 3] and out == b"\0worldabc\0"
    with pytest.raises(ValueError, match="do not fit in 10"):
        spans.pack(out, 3)
    for bad in ([[2, 0, 1]], [[-1, 0, 1]], [[0, 6, 6]], [[1, 4, 0]], [[0, -1, 1]], [[0, 0, -1]]):
        arena = bytearray(np.array(bad, dtype=np.int64).tobytes())
        with pytest.raises(ValueError, match="is outside the records"):
            RecordSpans(core, records, arena, 0, 1).tolist()
    with pytest.raises(ValueError, match="do not fit in the 48-byte arena"):
        RecordSpans(core, records, bytearray(good.tobytes()), 8, 2).tolist()
    with pytest.raises(ValueError, match="is outside the records"):
        RecordSpans(core, [b"hello world", "abc"], bytearray(good.tobytes()), 0, 2).tolist()  # not bytes


def test_spans_only_for_strings_one_decoder_takes_whole(backend):
    """ExamplePlan.parse(spans=True) gives spans (compiled core only) for a FixedLenFeature of one string per
    example whose key no other spec reads, with the values parse_example gives; a missing string filled by its
    default takes the checked path and comes back as a list."""
    from tfr_torch.decode.spans import RecordSpans

    records = [tfr_torch.encode_example({"s": b"x%d" % i, "t": b"t%d" % i}) for i in range(5)]
    values = [b"x%d" % i for i in range(5)]
    string = tfr_torch.FixedLenFeature([], tfr_torch.string)
    got = tfr_torch.compile_features({"s": string, "t": string}).parse(records, spans=True)
    assert [type(got[k]) for k in "st"] == [RecordSpans if backend == "native" else list] * 2
    assert (got["s"].tolist() if backend == "native" else got["s"]) == values
    shared = tfr_torch.compile_features({"s": string, "r": tfr_torch.RaggedFeature(tfr_torch.string, value_key="s")})
    got = shared.parse(records, spans=True)
    assert type(got["s"]) is list and got["s"] == values  # "s" is read by two specs: never spans
    with_default = tfr_torch.compile_features({"s": tfr_torch.FixedLenFeature([], tfr_torch.string,
                                                                              default_value=b"?")})
    got = with_default.parse(records + [tfr_torch.encode_example({"u": 1})], spans=True)
    assert type(got["s"]) is list and got["s"] == values + [b"?"]


def _collated(rows, in_worker, monkeypatch):
    """default_collate of `rows` as a DataLoader worker (in_worker) or the main process runs it: the result, or
    the error's class and message."""
    import torch.utils.data

    monkeypatch.setattr(torch.utils.data, "get_worker_info", (lambda: object()) if in_worker else (lambda: None))
    try:
        return torch.utils.data.default_collate(rows)
    except Exception as exc:  # noqa: BLE001 - compared, class and message
        return (type(exc).__name__, str(exc))


def _rows():
    return [{"label": torch.tensor(i), "emb": torch.full((2, 3), float(i)), "data": b"x%d" % i,
             "pair": [b"a%d" % i, b"b"], "n": i} for i in range(4)]


@pytest.mark.parametrize("in_worker", [True, False])
def test_default_collate_of_dataset_rows_is_default_collate_of_dicts(monkeypatch, in_worker):
    """A worker's rows (Batch) collate as plain dicts do: stacked tensors, lists of bytes, transposed lists,
    numbers to tensors, keys in order; only the stacked tensors' memory differs (plain, not a new shared-memory
    segment per batch, which the slab makes pointless)."""
    plain = _collated(_rows(), in_worker, monkeypatch)
    ours = _collated([Batch(row) for row in _rows()], in_worker, monkeypatch)
    assert type(ours) is Batch and list(ours) == list(plain)
    for key in plain:
        if isinstance(plain[key], torch.Tensor):
            assert ours[key].dtype == plain[key].dtype and torch.equal(ours[key], plain[key]), key
        else:
            assert ours[key] == plain[key], key
    assert plain["label"].is_shared() == in_worker  # what default_collate does in a worker
    assert not ours["label"].is_shared() and not ours["emb"].is_shared()


@pytest.mark.parametrize("in_worker", [True, False])
@pytest.mark.parametrize("bad", ["shapes", "sparse", "missing key"])
def test_default_collate_of_dataset_rows_fails_as_default_collate_of_dicts(monkeypatch, in_worker, bad):
    rows = _rows()
    if bad == "shapes":
        rows[2]["emb"] = torch.zeros(3, 2)
    elif bad == "sparse":
        for row in rows:
            row["emb"] = row["emb"].to_sparse()
    else:
        del rows[3]["data"]
    plain = _collated(rows, in_worker, monkeypatch)
    ours = _collated([Batch(row) for row in rows], in_worker, monkeypatch)
    assert isinstance(plain, tuple) and ours == plain


@needs_shm
def test_indexed_dataloader_batches_are_plain_tensors_equal_to_the_rows(tmp_path):
    """Map-style: DataLoader(IndexedTFRecordDataset, batch_size=N) with workers collates each worker's rows with
    the Batch entry of default_collate; the batches equal the items one by one."""
    path = str(tmp_path / "m.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(10):
            writer.write(tfr_torch.encode_example({"id": i, "v": [i, i + 1], "s": b"s%d" % i}))
    tfr_torch.build_index(path)
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64), "v": tfr_torch.FixedLenFeature([2], torch.int64),
            "s": tfr_torch.FixedLenFeature([], tfr_torch.string)}
    ds = tfr_torch.IndexedTFRecordDataset(path, spec)
    batches = list(DataLoader(ds, batch_size=4, num_workers=2))
    assert [type(b) for b in batches] == [dict] * 3
    assert torch.cat([b["id"] for b in batches]).tolist() == list(range(10))
    assert torch.cat([b["v"] for b in batches]).tolist() == [[i, i + 1] for i in range(10)]
    assert [s for b in batches for s in b["s"]] == [b"s%d" % i for i in range(10)]


# ----- tensors made in lent slabs (slab_tensor): sent without a copy, the slab reused only once nobody holds them


def _lent(shape, dtype=torch.float32):
    with transport.lending_slabs():
        tensor = transport.slab_tensor(shape, dtype)
    assert tensor is not None
    return tensor, slabs._pool().lent[tensor.untyped_storage().data_ptr()][0]


def test_slab_tensor_only_while_lending():
    assert transport.slab_tensor((4, 4), torch.uint8) is None  # anywhere else a lent tensor would be copied
    with transport.lending_slabs():
        with transport.lending_slabs():
            pass
        assert transport.slab_tensor((0, 4), torch.uint8) is None  # nothing to hold
        assert transport.slab_tensor((2, 4), torch.uint8) is not None  # still lending after the inner block
    assert transport.slab_tensor((4, 4), torch.uint8) is None


@needs_shm
def test_a_lent_tensor_arrives_as_a_view_of_its_slab_and_the_slab_waits_for_every_view():
    tensor, slab = _lent((6, 5))
    tensor.copy_(torch.arange(30, dtype=torch.float32).reshape(6, 5))
    got = _send(Batch({"x": tensor, "y": torch.arange(3), "s": [b"ab"]}))
    assert torch.equal(got["x"], torch.arange(30, dtype=torch.float32).reshape(6, 5))
    assert torch.equal(got["y"], torch.arange(3)) and got["s"] == [b"ab"]
    tensor[0, 0] = 99.0  # the same memory: no copy was made
    assert got["x"][0, 0] == 99.0
    del tensor
    gc.collect()
    assert not slab.free()  # the receiver's tensor still lies in it
    row = got["x"][2]
    del got
    gc.collect()
    assert not slab.free()  # and a view of it
    assert torch.equal(row, torch.arange(10, 15, dtype=torch.float32))
    del row
    gc.collect()
    assert slab.free()
    again, same = _lent((6, 5))
    assert same is slab  # reused


@needs_shm
def test_a_slab_is_never_reused_while_a_received_batch_is_kept():
    kept = []
    for i in range(2 * slabs._MAX_SLABS):  # more than a worker may have: later batches are made elsewhere
        with transport.lending_slabs():
            tensor = transport.slab_tensor((64, 64), torch.int32)
        if tensor is None:
            tensor = torch.empty((64, 64), dtype=torch.int32)
        tensor.fill_(i)
        kept.append(_send(Batch({"x": tensor})))
        del tensor  # the worker's tensor gone (no cycle holds it): only the receiver's views hold its slab
    for i, batch in enumerate(kept):
        assert torch.equal(batch["x"], torch.full((64, 64), i, dtype=torch.int32)), i


@needs_shm
def test_a_lent_tensor_dropped_unsent_frees_its_slab():
    tensor, slab = _lent((100,))
    assert not slab.free()
    smaller = tensor[:10].clone()  # what a transform that replaces the tensor leaves
    del tensor
    gc.collect()
    assert slab.free() and smaller.shape == (10,)


@needs_shm
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16, torch.bool])
def test_views_of_lent_tensors_keep_their_layout(dtype):
    memory, slab = _lent((2, 5, 4, 3), dtype)  # [N, H, W, C] memory seen as channels_last [N, C, H, W]
    memory.copy_(torch.arange(120).reshape(2, 5, 4, 3).to(dtype))
    images = memory.permute(0, 3, 1, 2)
    got = _send(Batch({"images": images, "first": images[1, :, 1:3]}))
    for key, want in (("images", images), ("first", images[1, :, 1:3])):
        assert got[key].dtype == dtype and got[key].shape == want.shape and got[key].stride() == want.stride()
        assert torch.equal(got[key], want)
    assert got["images"].is_contiguous(memory_format=torch.channels_last)
    del memory, images, got, want
    gc.collect()
    assert slab.free()


@needs_shm
def test_lent_tensors_in_a_nested_batch_and_views_in_another_dtype_arrive_as_views():
    tensor, slab = _lent((8,), torch.int64)
    tensor.copy_(torch.arange(8))
    nested = _send(Batch({"steps": {"x": tensor, "first": [tensor[:2], torch.ones(2)], "s": [b"a", b"bc"]},
                          "n": 3}))
    other = _send(Batch({"x": tensor.view(torch.int32)}))
    only = _send(Batch({"steps": {"x": tensor}}))  # nothing to copy: no slab of the usual kind is taken
    assert torch.equal(other["x"], torch.arange(8).view(torch.int32)) and torch.equal(only["steps"]["x"], tensor)
    assert torch.equal(nested["steps"]["x"], torch.arange(8)) and nested["steps"]["s"] == [b"a", b"bc"]
    assert torch.equal(nested["steps"]["first"][0], torch.arange(2)) and nested["n"] == 3
    assert torch.equal(nested["steps"]["first"][1], torch.ones(2))  # copied through the slab, as any tensor
    tensor.fill_(0)
    assert not other["x"].any() and not nested["steps"]["x"].any() and not only["steps"]["x"].any()  # views
    del tensor, other, only
    gc.collect()
    assert not slab.free()  # the nested batch's views still hold it
    del nested
    gc.collect()
    assert slab.free()


@needs_shm
def test_the_mapping_of_a_gone_worker_is_kept_while_its_views_are():
    tensor, slab = _lent((16,), torch.int64)
    tensor.copy_(torch.arange(16))
    got = _send(Batch({"x": tensor}))
    key = (os.getpid(), slab.serial)
    mapping = receive._MAPS[key]
    receive._close(mapping)  # what unmapping a gone worker's slabs does: not while a view remains
    assert not mapping.closed and torch.equal(got["x"], torch.arange(16))
    del got
    gc.collect()
    receive._close(mapping)
    assert mapping.closed
    del receive._MAPS[key]


@needs_shm
def test_a_forked_child_gets_its_own_copy_of_a_held_lent_slab():
    """A forked child inherits the parent's views of a lent slab (the worker's MAP_SHARED memory): it copies them
    at the fork, so the worker writing into the slab after the parent released it changes nothing the child sees;
    the child dropping its views releases nothing; the parent releases as usual."""
    tensor, slab = _lent((16,), torch.int64)
    tensor.copy_(torch.arange(16))
    got = _send(Batch({"x": tensor}))
    del tensor
    gc.collect()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: waits until the worker wrote over the slab, then reads its inherited batch
        code = 1
        try:
            os.read(go_r, 1)
            code = 0 if torch.equal(got["x"], torch.arange(16)) else 2
            del got["x"]
            gc.collect()
        finally:
            os._exit(code)
    assert not slab.free()  # the parent still holds its view
    del got
    gc.collect()
    assert slab.free()  # the parent released it: the worker may write into it
    slab.mm[_SLAB_HEADER : _SLAB_HEADER + 128] = b"\xff" * 128  # and does
    os.write(go_w, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0  # the child still saw 0..15


def test_a_forked_child_past_the_copy_limit_keeps_the_slabs_from_reuse(monkeypatch):
    monkeypatch.setattr(receive, "COPY_AT_FORK", 0)  # a process holding more than the child would copy
    tensor, slab = _lent((16,), torch.int64)
    got = _send(Batch({"x": tensor}))
    del tensor
    gc.collect()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    del got
    gc.collect()
    assert not slab.free()  # held at the fork: never released to its worker
    later, other = _lent((16,), torch.int64)
    assert other is not slab
    got = _send(Batch({"x": later}))
    del later, got
    gc.collect()
    assert other.free()  # received after the fork: released when its views go


@needs_shm
def test_a_worker_with_the_pid_of_a_gone_one_is_not_taken_for_it():
    """The receiver keys its mappings by worker pid and slab number; a new worker can get the pid of one that has
    exited (pids wrap), and its first slab must not be read through the old worker's mapping."""
    old = _send(Batch({"v": torch.full((1000,), 1)}))
    old_keys = {key for key in receive._MAPS if key[0] == os.getpid()}
    slabs._POOL = None  # a new worker process with this pid: a new pool, numbering its slabs afresh
    new = _send(Batch({"v": torch.full((1000,), 2)}))
    assert torch.equal(new["v"], torch.full((1000,), 2)) and torch.equal(old["v"], torch.full((1000,), 1))
    assert not old_keys & set(receive._MAPS)  # the earlier process's mappings are dropped


@needs_shm
@pytest.mark.parametrize("in_worker", [True, False])
def test_a_worker_stacks_large_row_tensors_into_a_lent_slab(monkeypatch, in_worker):
    """default_collate of a worker's rows: a key whose stack is 1 MiB or more is stacked straight into a lent slab
    (sent without a copy); smaller ones, and the main process's, are stacked as torch.stack does."""
    rows = [Batch({"image": torch.full((3, 128, 128), float(i)), "label": torch.tensor(i)}) for i in range(6)]
    got = _collated(rows, in_worker, monkeypatch)
    assert torch.equal(got["image"], torch.stack([row["image"] for row in rows]))
    assert torch.equal(got["label"], torch.arange(6))
    lent = slabs._pool().lent
    assert (got["image"].untyped_storage().data_ptr() in lent) == in_worker
    assert got["label"].untyped_storage().data_ptr() not in lent
    if in_worker:
        sent = _send(got)  # and the transport sends it as a view of that slab
        assert torch.equal(sent["image"], torch.stack([row["image"] for row in rows]))
    mixed = [Batch({"image": torch.zeros((3, 128, 128), dtype=torch.float64 if i else torch.float32)})
             for i in range(6)]
    assert _collated(mixed, in_worker, monkeypatch)["image"].dtype == torch.float64  # promoted, as torch.stack


def _big_row(row):
    """A per-record transform that makes a 48 KiB tensor from the record's id."""
    return {"id": row["id"], "pixels": torch.full((3, 64, 64), float(row["id"]))}


@needs_shm
def test_dataloader_batches_of_large_rows_arrive_as_views_of_a_slab(tmp_path):
    path = str(tmp_path / "rows.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(64):
            writer.write(tfr_torch.encode_example({"id": i}))
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    dataset = tfr_torch.TFRecordDataset(path, spec, transform=_big_row)
    batches = list(DataLoader(dataset, batch_size=32, num_workers=1))  # 32 x 48 KiB = 1.5 MiB a batch: lent
    assert [b["id"].tolist() for b in batches] == [list(range(32)), list(range(32, 64))]
    for b in batches:
        assert torch.equal(b["pixels"], b["id"].float()[:, None, None, None].expand(32, 3, 64, 64))
    mapped = []
    for mapping in receive._MAPS.values():
        if not mapping.closed:
            start = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
            mapped.append((start, start + len(mapping)))
    address = batches[0]["pixels"].untyped_storage().data_ptr()
    assert any(start <= address < end for start, end in mapped)


@needs_shm
def test_a_batch_the_slab_path_fails_on_goes_the_usual_way(monkeypatch):
    """An exception while a batch is written into a slab would be raised in the worker's queue feeder thread,
    which prints it and drops the batch: the DataLoader would wait for it forever. The batch goes the usual way
    instead, with a warning, and the slab it had taken stays free."""
    def broken(plan, mm):
        raise RuntimeError("a value the slab path did not expect")

    monkeypatch.setattr(transport, "_write", broken)
    held = {id(slab) for slab in slabs._pool().slabs if not slab.free()}  # by batches of earlier tests still alive
    batch = _sample_batch()
    with pytest.warns(RuntimeWarning, match="could not go through the shared-memory transport .RuntimeError: a value"):
        got = _send(Batch(batch))
    assert list(got) == list(batch) and torch.equal(got["label"], batch["label"]) and got["data"] == batch["data"]
    with pytest.warns(RuntimeWarning):
        assert _send(transport.RecordBatch([b"a", b"bc"])) == [b"a", b"bc"]
    assert all(slab.free() for slab in slabs._pool().slabs if id(slab) not in held)


def test_nested_tensors_are_not_taken_for_slab_tensors():
    nested = torch.nested.nested_tensor([torch.arange(3), torch.arange(5)])  # strided layout, but no plain memory
    assert not transport._slab_tensor(nested)
    got = _send(Batch({"n": nested, "x": torch.arange(4)}))
    assert [t.tolist() for t in got["n"].unbind()] == [[0, 1, 2], [0, 1, 2, 3, 4]]


_SPARSE_SCRIPT = r"""
import sys, warnings
import torch, tfr_torch
path = sys.argv[1]
with tfr_torch.TFRecordWriter(path) as w:
    for i in range(40):
        w.write_example({"id": i, "tok": list(range(i % 5 + 1))})
spec = {"id": tfr_torch.FixedLenFeature([], torch.int64), "tok": tfr_torch.VarLenFeature(torch.int64)}
flat = tfr_torch.TFRecordDataset(path, spec, batch_size=8)
nested = tfr_torch.TFRecordDataset(path, spec, batch_size=8, transform=lambda b: {"x": {"tok": b["tok"]},
                                                                                    "id": [b["id"]]})
want = {tuple(b["id"].tolist()): b["tok"].to_dense() for b in flat}
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    got = list(torch.utils.data.DataLoader(flat, batch_size=None, num_workers=2))
    deep = list(torch.utils.data.DataLoader(nested, batch_size=None, num_workers=2))
assert {tuple(b["id"].tolist()): b["tok"].to_dense() for b in got}.keys() == want.keys()
for b in got:
    assert b["tok"].layout == torch.sparse_coo and b["tok"].is_coalesced()
    assert torch.equal(b["tok"].to_dense(), want[tuple(b["id"].tolist())])
for b in deep:
    assert torch.equal(b["x"]["tok"].to_dense(), want[tuple(b["id"][0].tolist())])
print("|".join(str(w.message) for w in caught))
"""


def test_sparse_batches_from_workers_arrive_whole_and_without_torchs_invariant_warning(tmp_path):
    """Fixed: every program reading VarLenFeatures through DataLoader workers printed torch's "Sparse invariant
    checks are implicitly disabled ... SEGFAULT" warning (torch's rebuild of a pickled sparse tensor). A fresh
    process: torch gives that warning once per process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SPARSE_SCRIPT, str(tmp_path / "v.tfrecord")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Sparse invariant" not in done.stdout + done.stderr


_PIPE_SCRIPT = r"""
import sys, warnings
import torch, tfr_torch
from torch.utils.data import DataLoader
path = sys.argv[1]
with tfr_torch.TFRecordWriter(path) as w:
    for i in range(40):
        w.write_example({"id": i, "tok": list(range(i % 5 + 1))})
tfr_torch.build_index(path)
spec = {"id": tfr_torch.FixedLenFeature([], torch.int64), "tok": tfr_torch.VarLenFeature(torch.int64)}
want = {i: list(range(i % 5 + 1)) for i in range(40)}
flat = tfr_torch.TFRecordDataset(path, spec, batch_size=8, shared_memory=False)
nested = tfr_torch.TFRecordDataset(path, spec, batch_size=8, shared_memory=False,
                                   transform=lambda b: {"x": {"tok": b["tok"]}, "id": b["id"]})
cached = tfr_torch.CachedDataset(tfr_torch.TFRecordDataset(path, spec, batch_size=8, shared_memory=False))
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    runs = {
        "batches": list(DataLoader(flat, batch_size=None, num_workers=2)),
        "nested": [{"id": b["id"], "tok": b["x"]["tok"]}
                   for b in DataLoader(nested, batch_size=None, num_workers=2)],
        "cached": [b for _ in range(2) for b in DataLoader(cached, batch_size=None, num_workers=2)],
    }
    indexed = tfr_torch.IndexedTFRecordDataset(path, spec, shared_memory=False)
    rows = [row for rows in DataLoader(indexed, batch_size=8, num_workers=2, collate_fn=list) for row in rows]
assert all(type(row) is dict and row["tok"].layout == torch.sparse_coo for row in rows)
assert {int(row["id"]): row["tok"].to_dense().tolist() for row in rows} == want
for name, batches in runs.items():
    seen = {}
    for b in batches:
        assert type(b) is dict, (name, type(b))
        assert b["tok"].layout == torch.sparse_coo, name
        dense = b["tok"].to_dense().tolist()
        for n, i in enumerate(b["id"].tolist()):
            seen.setdefault(i, []).append(dense[n][:len(want[i])])
    copies = 2 if name == "cached" else 1
    assert seen == {i: [v] * copies for i, v in want.items()}, name
print("|".join(str(w.message) for w in caught))
"""


def test_sparse_batches_through_the_pipe_arrive_whole_and_without_torchs_invariant_warning(tmp_path):
    """Fixed: with shared_memory=False (batches through the workers' pipes, torch's usual way), every program
    reading VarLenFeatures still printed torch's "Sparse invariant checks are implicitly disabled ... SEGFAULT"
    warning; batches, nested transform results and a CachedDataset's replay now arrive as plain dicts without
    it, and so do an IndexedTFRecordDataset's rows that a collate function passes on as they are (or in a mapping
    of their own type). A fresh process: torch gives that warning once per process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PIPE_SCRIPT, str(tmp_path / "v.tfrecord")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Sparse invariant" not in done.stdout + done.stderr


def test_pipe_batches_keep_their_type_through_collate_and_copy_and_arrive_as_plain_dicts():
    sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1], [0, 2]]), torch.tensor([5, 6]), (2, 3),
                                     check_invariants=True).coalesce()
    batch = pipe.for_the_pipe({"tok": sparse, "inner": {"tok": sparse}, "id": torch.arange(2)})
    assert type(batch) is pipe.PipeBatch
    assert type(copy.copy(batch)) is pipe.PipeBatch  # default_convert / default_collate copy a mapping
    assert type(torch.utils.data.default_convert(batch)) is pipe.PipeBatch
    row = pipe.for_the_pipe({"id": torch.tensor(1)})
    assert type(torch.utils.data.default_collate([row, row])) is pipe.PipeBatch
    got = ForkingPickler.loads(bytes(ForkingPickler.dumps(batch)))
    assert type(got) is dict and type(got["inner"]) is dict
    assert torch.equal(got["tok"].to_dense(), sparse.to_dense()) and got["tok"].is_coalesced()
    assert torch.equal(got["inner"]["tok"].to_dense(), sparse.to_dense())
    assert torch.equal(got["id"], torch.arange(2))
    assert pipe.for_the_pipe([b"a"]) == [b"a"] and type(pipe.for_the_pipe([b"a"])) is list
