"""Stress tests of the DataLoader transport (data/slabs.py, data/receive.py, data/transport.py) from the user's side.

What must hold whatever the user keeps, drops, slices, re-sends or abandons: every batch the main process holds
keeps the bytes it had when it arrived (equal to the records' true contents); slabs and mappings stay bounded; no
hang, no crash. Each test hashes what it keeps at receipt and checks it again after many later batches (which reuse
the workers' slabs)."""

from __future__ import annotations

import gc
import hashlib
import io
import os
import pickle
import random
import time
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.data import receive, slabs, transport

needs_shm = pytest.mark.skipif(not transport.shared_memory_available(), reason="no memfd_create or /proc here")

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64), "data": tfr_torch.FixedLenFeature([], tfr_torch.string)}
_MUL = 1_000_003


def _payload(i):
    return bytes([(i * 7) % 251]) * (i * 37 % 300)


@pytest.fixture
def records(tmp_path, write_records):
    """records(n) -> path: n Examples with ids 0..n-1 and payloads of varied sizes, indexed."""
    def make(n):
        path = str(tmp_path / f"d{n}.tfrecord")
        write_records(path, [{"id": i, "data": _payload(i)} for i in range(n)], index=True)
        return path
    return make


def _rows_of(ids, width, dtype=torch.int64):
    return (ids[:, None] * _MUL + torch.arange(width)[None, :]).to(dtype)


def _lend(shape, dtype):
    """slab_tensor, or a plain tensor where no slab is free (the worker's fallback)."""
    t = transport.slab_tensor(shape, dtype)
    return torch.empty(shape, dtype=dtype) if t is None else t


class Lending:
    """A batch transform that makes its large values with slab_tensor (as DecodeImages does), in several shapes:
    `kind` "one": one lent tensor; "several": two lent tensors and an ordinary one; "nested": lent tensors in nested
    dicts and lists beside bytes; "view": the lent memory sent as a permuted view and as a slice."""

    def __init__(self, width, kind="one", fail_at=None):
        self.width, self.kind, self.fail_at = width, kind, fail_at

    def __call__(self, batch):
        ids = batch["id"]
        if self.fail_at is not None and int(ids[0]) == self.fail_at:
            raise ValueError(f"transform failed at {self.fail_at}")
        n, w = len(ids), self.width
        x = _lend((n, w), torch.int64)
        x.copy_(_rows_of(ids, w))
        out = {"id": ids, "x": x, "data": batch["data"]}
        if self.kind in ("several", "nested"):
            y = _lend((n, w), torch.float32)
            y.copy_(_rows_of(ids, w, torch.float64).neg().to(torch.float32))
            z = _rows_of(ids, 3) + 5  # ordinary, copied through the slab
            if self.kind == "several":
                out.update(y=y, z=z)
            else:
                out["meta"] = {"y": y, "parts": [z, {"x_again": x[:, :2]}, list(batch["data"])], "n": n}
        elif self.kind == "view":
            out["xt"] = x.t()
            out["tail"] = x[1:, 3:]
        return out


def _expected(batch, width, kind):
    ids = batch["id"]
    want = {"id": ids, "x": _rows_of(ids, width), "data": [_payload(int(i)) for i in ids]}
    if kind in ("several", "nested"):
        y = _rows_of(ids, width, torch.float64).neg().to(torch.float32)
        z = _rows_of(ids, 3) + 5
        if kind == "several":
            want.update(y=y, z=z)
        else:
            want["meta"] = {"y": y, "parts": [z, {"x_again": want["x"][:, :2]}, want["data"]], "n": len(ids)}
    elif kind == "view":
        want["xt"] = want["x"].t()
        want["tail"] = want["x"][1:, 3:]
    return want


def _digest(value, h=None):
    """A hash of every byte, shape, stride and dtype of a batch (dicts, lists, tensors, bytes, ints)."""
    h = h or hashlib.sha256()
    if isinstance(value, dict):
        for key in value:
            h.update(repr(key).encode())
            _digest(value[key], h)
    elif isinstance(value, (list, tuple)):
        h.update(b"[%d" % len(value))
        for item in value:
            _digest(item, h)
    elif isinstance(value, torch.Tensor):
        h.update(repr((value.dtype, tuple(value.shape))).encode())
        h.update(value.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if value.numel() else b"")
    elif isinstance(value, np.ndarray):
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())
    return h.hexdigest()


def _assert_equal(got, want, where="batch"):
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for key in want:
            _assert_equal(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            _assert_equal(a, b, f"{where}[{i}]")
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and got.shape == want.shape, where
        assert torch.equal(got, want), where
    else:
        assert got == want, where


def _mapped_ranges():
    out = []
    import ctypes
    for mm in list(receive._MAPS.values()):
        if not mm.closed:
            start = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            out.append((start, start + len(mm)))
    return out


def _in_a_slab(tensor):
    address = tensor.untyped_storage().data_ptr()
    return any(start <= address < end for start, end in _mapped_ranges())


def _shut_down(loader):
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
        loader._iterator = None


# ----- kept batches, random subsets, across epochs -----------------------------------------------------------------

@needs_shm
@pytest.mark.parametrize("num_workers", [1, 2])
@pytest.mark.parametrize("kind", ["one", "several", "nested", "view"])
def test_randomly_kept_batches_never_change_across_epochs(records, num_workers, kind):
    """persistent workers, 4 epochs; a random third of the batches kept (some dropped again later, in random
    order); every kept batch still hashes as it did on arrival and equals the records' contents."""
    path = records(96)
    width = 40
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=Lending(width, kind))
    loader = DataLoader(dataset, batch_size=None, num_workers=num_workers, persistent_workers=True,
                        prefetch_factor=4)
    rng = random.Random(1234 + num_workers)
    kept = {}  # (epoch, n) -> (batch, digest)
    lent_seen = 0
    try:
        for epoch in range(4):
            dataset.set_epoch(epoch)
            for n, batch in enumerate(loader):
                lent_seen += _in_a_slab(batch["x"])
                _assert_equal(batch, _expected(batch, width, kind), f"epoch {epoch} batch {n}")
                if rng.random() < 0.35:
                    kept[(epoch, n)] = (batch, _digest(batch))
                if kept and rng.random() < 0.3:  # drop a random kept one
                    del kept[rng.choice(list(kept))]
                del batch
                for (e, m), (old, digest) in rng.sample(list(kept.items()), min(3, len(kept))):
                    assert _digest(old) == digest, f"kept batch {e}/{m} changed while epoch {epoch} ran"
            for (e, m), (old, digest) in kept.items():
                assert _digest(old) == digest, f"kept batch {e}/{m} changed by the end of epoch {epoch}"
                _assert_equal(old, _expected(old, width, kind), f"kept batch {e}/{m}")
    finally:
        _shut_down(loader)
    assert lent_seen > 0  # the lent path was exercised (batches arrived as views of a slab)


# ----- views of views ---------------------------------------------------------------------------------------------

@needs_shm
def test_slices_reshapes_and_numpy_arrays_of_a_lent_tensor_outlive_it(records):
    """The user keeps only a slice, a reshaped view, a dtype view and a numpy array of each received lent tensor and
    drops the batch: the slab must stay taken while any of them lives."""
    path = records(120)
    width = 64
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=6, transform=Lending(width))
    loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=True, prefetch_factor=2)
    kept = []
    try:
        for epoch in range(2):
            dataset.set_epoch(epoch)
            for n, batch in enumerate(loader):
                x = batch["x"]
                pick = n % 6
                if pick == 0:
                    part = x[2:4, 10:20]
                elif pick == 1:
                    part = x.reshape(-1)[5:301].view(2, -1)[:, ::3]
                elif pick == 2:
                    part = x.view(torch.int32)[1]
                elif pick == 3:
                    part = x.numpy()[3]
                elif pick == 4:
                    part = np.from_dlpack(x[1:3])  # a DLPack capsule, no tensor object kept
                else:
                    part = torch.from_dlpack(x.t().__dlpack__())[4]
                want = part.copy() if isinstance(part, np.ndarray) else part.clone()
                del batch, x
                kept.append((part, want))
                for part, want in kept[-8:] + kept[:4]:
                    if isinstance(part, np.ndarray):
                        assert np.array_equal(part, want)
                    else:
                        assert torch.equal(part, want)
                if len(kept) > 12:  # drop some, oldest first or at random
                    kept.pop(n % len(kept))
        gc.collect()
        for part, want in kept:
            assert np.array_equal(part, want) if isinstance(part, np.ndarray) else torch.equal(part, want)
    finally:
        _shut_down(loader)


# ----- more held than slabs ---------------------------------------------------------------------------------------

@needs_shm
@pytest.mark.parametrize("num_workers", [1, 2])
def test_holding_more_batches_than_slabs_then_releasing_them_all(records, num_workers):
    """Hold every batch of an epoch (more than _MAX_SLABS per worker: later ones take the fallback), release them
    all, run again: the slabs are reused (batches arrive as views again), nothing held changed, slabs bounded."""
    path = records(200)
    width = 300  # 10 x 300 x 8 = 24 KB a batch
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=10, transform=Lending(width, "several"))
    loader = DataLoader(dataset, batch_size=None, num_workers=num_workers, persistent_workers=True)
    try:
        held = [(b, _digest(b)) for b in loader]
        assert len(held) == 20
        assert sum(_in_a_slab(b["x"]) for b, _ in held) >= 1
        for b, digest in held:
            assert _digest(b) == digest
            _assert_equal(b, _expected(b, width, "several"))
        del b
        random.Random(5).shuffle(held)
        while held:
            held.pop()
        gc.collect()
        for _ in range(3):
            again = []
            for b in loader:
                again.append(_in_a_slab(b["x"]))
                _assert_equal(b, _expected(b, width, "several"))
            assert sum(again) >= len(again) // 2, again  # slabs free again: the lent path is taken
        maps = {key for key in receive._MAPS if key[0] != os.getpid()}
        workers = {pid for pid, _ in maps}
        assert len(workers) <= num_workers and len(maps) <= num_workers * slabs._MAX_SLABS
    finally:
        _shut_down(loader)


# ----- sizes that make slabs grow, retire and be replaced while batches are held -----------------------------------

class Varying:
    """A batch transform whose lent tensor's size varies batch by batch, from 8 KB to ~3 MB, so that the worker
    retires and replaces slabs (take's victim) while the user holds others."""

    def __call__(self, batch):
        ids = batch["id"]
        width = 1000 * (1 + (int(ids[0]) * 5) % 47) if int(ids[0]) % 3 else 64
        x = _lend((len(ids), width), torch.int64)
        x.copy_(_rows_of(ids, width))
        return {"id": ids, "x": x, "data": batch["data"], "small": ids * 2}


@needs_shm
@pytest.mark.parametrize("num_workers", [1, 2])
def test_kept_batches_survive_slab_retirement_and_growth(records, num_workers):
    path = records(160)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=8, transform=Varying())
    loader = DataLoader(dataset, batch_size=None, num_workers=num_workers, persistent_workers=True)
    rng = random.Random(99)
    kept = []
    try:
        for epoch in range(3):
            dataset.set_epoch(epoch)
            for batch in loader:
                width = batch["x"].shape[1]
                assert torch.equal(batch["x"], _rows_of(batch["id"], width))
                assert batch["data"] == [_payload(int(i)) for i in batch["id"]]
                assert torch.equal(batch["small"], batch["id"] * 2)
                if rng.random() < 0.3:
                    kept.append((batch, _digest(batch)))
                if len(kept) > 6 or (kept and rng.random() < 0.2):
                    kept.pop(rng.randrange(len(kept)))
                del batch
                for old, digest in kept:
                    assert _digest(old) == digest
        assert all(len(pool) <= slabs._MAX_SLABS for pool in [
            {s for p, s in receive._MAPS if p == pid} for pid in {p for p, _ in receive._MAPS}])
    finally:
        _shut_down(loader)


@needs_shm
def test_multi_mebibyte_and_tiny_batches_arrive_intact(records):
    """Batches of 1 record (tiny) and of 4 MiB lent tensors, two workers, a few kept across a second epoch."""
    path = records(40)
    for batch_size, width in ((1, 3), (8, 65536)):  # 8 x 65536 x 8 = 4 MiB
        dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=batch_size,
                                            transform=Lending(width, "several"))
        loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
        kept = []
        try:
            for epoch in range(2):
                ids = []
                for n, batch in enumerate(loader):
                    _assert_equal(batch, _expected(batch, width, "several"))
                    ids += batch["id"].tolist()
                    if n % 3 == 0:
                        kept.append((batch, _digest(batch)))
                assert sorted(ids) == list(range(40))
            for old, digest in kept:
                assert _digest(old) == digest
                _assert_equal(old, _expected(old, width, "several"))
        finally:
            _shut_down(loader)


# ----- several iterators, early breaks, worker errors --------------------------------------------------------------

@needs_shm
def test_two_iterators_alive_at_once_over_one_dataset(records):
    path = records(80)
    width = 50
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=Lending(width, "nested"))
    a = iter(DataLoader(dataset, batch_size=None, num_workers=2))
    b = iter(DataLoader(dataset, batch_size=None, num_workers=1))
    kept, seen = [], {"a": [], "b": []}
    for n in range(20):
        for name, it in (("a", a), ("b", b)):
            batch = next(it)
            _assert_equal(batch, _expected(batch, width, "nested"))
            seen[name] += batch["id"].tolist()
            if n % 2:
                kept.append((batch, _digest(batch)))
        for old, digest in kept:
            assert _digest(old) == digest
    assert sorted(seen["a"]) == sorted(seen["b"]) == list(range(80))
    for it in (a, b):
        with pytest.raises(StopIteration):
            next(it)
    del a, b
    gc.collect()
    for old, digest in kept:
        assert _digest(old) == digest


@needs_shm
@pytest.mark.parametrize("persistent", [True, False])
def test_breaking_out_early_then_iterating_again(records, persistent):
    """Break out after a few batches (batches left unreceived in the queue), keep some, start again: every epoch
    complete and right, kept batches unchanged, including those of workers that have exited."""
    path = records(120)
    width = 200
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5, transform=Lending(width))
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=persistent, prefetch_factor=4)
    kept = []
    try:
        for round_ in range(4):
            for n, batch in enumerate(loader):
                _assert_equal(batch, _expected(batch, width, "one"))
                if n % 2 == round_ % 2:
                    kept.append((batch, _digest(batch)))
                if n == 2 + round_:
                    break
            del batch
            ids = sorted(i for b in loader for i in b["id"].tolist())
            assert ids == list(range(120))
            for old, digest in kept:
                assert _digest(old) == digest
    finally:
        _shut_down(loader)
    gc.collect()
    for old, digest in kept:
        assert _digest(old) == digest
        _assert_equal(old, _expected(old, width, "one"))


@needs_shm
def test_a_worker_error_midway_then_a_new_epoch(records):
    path = records(60)
    width = 100
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5, transform=Lending(width, fail_at=30))
    loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=True)
    kept = []
    try:
        with pytest.raises(ValueError, match="transform failed at 30"):
            for batch in loader:
                _assert_equal(batch, _expected(batch, width, "one"))
                kept.append((batch, _digest(batch)))
        assert len(kept) == 6
        again = []
        with pytest.raises(ValueError, match="transform failed at 30"):  # the same persistent worker, anew
            for batch in loader:
                again.append(batch["id"].tolist())
        assert again == [list(range(i, i + 5)) for i in range(0, 30, 5)]
        dataset.transform = Lending(width)  # not seen by the persistent worker; a new loader's are
        loader2 = DataLoader(dataset, batch_size=None, num_workers=2)
        for _ in range(2):
            assert sorted(i for b in loader2 for i in b["id"].tolist()) == list(range(60))
        for old, digest in kept:
            assert _digest(old) == digest
    finally:
        _shut_down(loader)


# ----- a received view sent on, saved, copied -------------------------------------------------------------------

def _child_digest(queue, go, out):
    tensor = queue.get()
    go.wait(20)
    out.put(_digest(tensor))


@needs_shm
def test_a_received_view_put_on_a_multiprocessing_queue_saved_and_dropped(records):
    """The user sends a received lent tensor's slice to another process (torch's reduction moves the storage to new
    shared memory), saves the batch with torch.save, and drops it; the worker reuses the slab; the other process
    and the saved copy still have the values sent."""
    import torch.multiprocessing as tmp

    path = records(80)
    width = 500
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=Lending(width))
    loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=True)
    ctx = tmp.get_context("fork")
    queue, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_child_digest, args=(queue, go, out), daemon=True)
    child.start()
    it = iter(loader)
    try:
        batch = next(it)
        assert _in_a_slab(batch["x"])
        want = _digest(batch["x"][1:])
        saved = io.BytesIO()
        torch.save(batch, saved)
        queue.put(batch["x"][1:])
        pickled = ForkingPickler.dumps(batch["x"][2:])
        assert _digest(batch["x"][1:]) == want
        del batch
        gc.collect()
        rest = [b for b in it]  # the slab is free now: reused
        for b in rest:
            _assert_equal(b, _expected(b, width, "one"))
        go.set()
        assert out.get(timeout=20) == want
        assert torch.equal(pickle.loads(pickled), _rows_of(torch.arange(4), width)[2:])
        saved.seek(0)
        loaded = torch.load(saved, weights_only=False)
        _assert_equal(loaded, _expected(loaded, width, "one"))
    finally:
        go.set()
        child.join(10)
        _shut_down(loader)


def _slow_copy(real):
    def copy(*args):
        time.sleep(1.0)  # a child the scheduler runs late (a loaded machine)
        real(*args)

    return copy


def _digest_later(tensor, go, out):
    go.wait(20)
    out.put((_digest(tensor), (tensor[:, 0] // _MUL).tolist()))


@needs_shm
@pytest.mark.parametrize(("shared_memory", "late"), [(True, False), (False, False), (True, True)],
                         ids=["slab", "pipe", "slab-child-copies-late"])
def test_a_forked_child_keeps_the_values_of_a_batch_the_parent_drops(records, shared_memory, late, monkeypatch):
    """The user hands a received batch to a forked process (multiprocessing's default start method on Linux
    before 3.14: the child inherits it, nothing is pickled), e.g. to log or evaluate it asynchronously, and goes
    on training. With torch's own transport (a shared-memory segment per tensor, or private memory) the child
    keeps the values it was given, whatever the parent does next.

    `late`: fixed (seen once in CI, on a loaded machine): the child copied the lent slabs it inherits after the
    fork, while the parent went on; a parent that dropped the batch and read on released the slab, the worker
    wrote the next batch into it, and a child scheduled late copied that instead. The bytes are now taken by the
    parent before the fork (the child copies its own, copy-on-write, snapshot of them)."""
    import multiprocessing

    from tfr_torch.data import receive

    if late:
        monkeypatch.setattr(receive, "_private_copy", _slow_copy(receive._private_copy))
    path = records(80)
    width = 500
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=Lending(width),
                                        shared_memory=shared_memory)
    loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=True)
    ctx = multiprocessing.get_context("fork")
    out, go = ctx.Queue(), ctx.Event()
    it = iter(loader)
    child = None
    try:
        batch = next(it)
        assert _in_a_slab(batch["x"]) == shared_memory  # a view of the worker's lent slab
        want = (_digest(batch["x"]), [0, 1, 2, 3])
        child = ctx.Process(target=_digest_later, args=(batch["x"], go, out), daemon=True)
        child.start()
        del batch  # the parent is done with it: its views gone, the slab released to the worker
        gc.collect()
        for b in it:  # the worker reuses the slab for the next batches
            _assert_equal(b, _expected(b, width, "one"))
        go.set()
        # Regression test: before 48e8820 the child's inherited view lay in the worker's MAP_SHARED slab, which the
        # parent released when its own views died (receive._release), so the child read a later batch's values
        # (seen: ids [76..79], [68..71] for [0..3]). 48e8820 keeps any slab held at a fork from reuse.
        assert out.get(timeout=20) == want
    finally:
        go.set()
        if child is not None:
            child.join(10)
        _shut_down(loader)


# ----- what a transform may return: values torch's own transport carries --------------------------------------------

def _ragged_rows(batch):
    """A transform that returns a batch's variable-length rows as a torch.nested tensor (strided layout, torch's
    default), which torch's DataLoader carries between processes."""
    ids = batch["id"].tolist()
    return {"id": batch["id"], "seq": torch.nested.nested_tensor([torch.arange(float(i % 5 + 1)) for i in ids])}


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage:UserWarning")
@pytest.mark.parametrize("shared_memory", [False, True])
def test_a_transform_returning_a_nested_tensor(records, shared_memory):
    """torch.nested tensors reach the main process through torch's DataLoader (shared_memory=False shows it)."""
    path = records(12)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=_ragged_rows,
                                        shared_memory=shared_memory)
    # Regression: with shared_memory=True, transport._slab_tensor took a strided nested tensor for a plain one, so
    # writing it raised in the worker's queue feeder thread, which printed it and dropped the batch, and the main
    # process waited for it forever (here DataLoader's timeout would fire instead).
    it = iter(DataLoader(dataset, batch_size=None, num_workers=1, timeout=5))
    try:
        got = list(it)
    finally:
        it._shutdown_workers()
    assert [b["id"].tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    for b in got:
        assert [row.tolist() for row in b["seq"].unbind()] == [list(map(float, range(i % 5 + 1)))
                                                                for i in b["id"].tolist()]


# ----- the default path (no transform): parcels, strings left in their records until the slab -------------------

@needs_shm
@pytest.mark.parametrize("features", [SPEC, None])
def test_kept_parcel_batches_never_change(records, features):
    """No transform: batches travel as Parcels (strings as spans of their records, written by the queue's feeder
    thread while the worker decodes the next batches) or RecordBatches; a random half kept over 3 epochs."""
    path = records(150)
    dataset = tfr_torch.TFRecordDataset(path, features, index="auto", batch_size=7)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True, prefetch_factor=6)
    rng = random.Random(3)
    kept = []
    raw = list(tfr_torch.TFRecordDataset(path, None, index="auto", batch_size=1000))[0]
    try:
        for epoch in range(3):
            for batch in loader:
                if features is None:
                    ids = [raw.index(r) for r in batch]
                    assert batch == [raw[i] for i in ids]
                else:
                    assert batch["data"] == [_payload(int(i)) for i in batch["id"]]
                if rng.random() < 0.5:
                    kept.append((batch, _digest(batch)))
                if len(kept) > 10:
                    kept.pop(rng.randrange(len(kept)))
                for old, digest in kept:
                    assert _digest(old) == digest
    finally:
        _shut_down(loader)


# ----- what the main process keeps mapped once a loader is done ----------------------------------------------------

def _slab_rss() -> int:
    """Bytes of tfr_torch slabs resident in this process's mappings (/proc/self/smaps)."""
    total, in_slab = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if not line[0].isupper() or ":" not in line.split()[0] or line.split()[0][-1] != ":":
                in_slab = "memfd:tfr_torch" in line  # a mapping's first line
            elif in_slab and line.startswith("Rss:"):
                total += int(line.split()[1]) << 10
    return total


@needs_shm
def test_workers_that_are_gone_leave_no_memory_behind(records):
    """Once a DataLoader's workers have exited and nothing received from them is held, the slabs they leave
    mapped in the main process (until a later batch sweeps the mappings of workers that are gone) hold no memory:
    each worker gives back the memory of the slabs the main process is done with as it exits."""
    path = records(64)
    before = _slab_rss()
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=8, transform=Lending(65536, "several"))
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    during = 0
    for batch in loader:
        _assert_equal(batch, _expected(batch, 65536, "several"))
        during = max(during, _slab_rss())
        del batch  # nothing held when the workers exit (a batch held then keeps its slab's memory until the
        # main process sweeps the mappings of workers that are gone, at its next new mapping)
    del loader
    gc.collect()
    stale = [key for key, mm in receive._MAPS.items() if key[0] != os.getpid() and not receive._alive(key[0])
             and not mm.closed]
    assert stale  # still mapped (the sweep comes with a later batch) ...
    assert during - before > 2 << 20  # the slabs mapped, their pages resident while the loader runs
    deadline = time.monotonic() + 10  # the workers give it back as they exit, which the loader does not wait for
    while _slab_rss() - before >= 1 << 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _slab_rss() - before < 1 << 20  # ... but their memory is gone


@needs_shm
def test_a_validation_loader_forked_every_epoch_leaves_the_training_workers_their_slabs(records):
    """The usual loop: a training loader with persistent workers, and after each epoch a validation DataLoader
    whose workers are forked anew, while the training loop's variable `batch` still holds the epoch's last batch.
    Epoch after epoch, the training batches should keep arriving through the workers' slabs (as views)."""
    path = records(80)
    val_path = records(12)
    width = 500
    train = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=Lending(width))
    val = tfr_torch.TFRecordDataset(val_path, SPEC, index="auto", batch_size=4)
    loader = DataLoader(train, batch_size=None, num_workers=1, persistent_workers=True)
    in_slabs = []
    try:
        for epoch in range(2 * slabs._MAX_SLABS):
            train.set_epoch(epoch)
            viewed = 0
            for batch in loader:  # (`batch` outlives the loop, as in any training script)
                viewed += _in_a_slab(batch["x"])
                _assert_equal(batch, _expected(batch, width, "one"))
            in_slabs.append(viewed)
            assert sum(len(b["id"]) for b in DataLoader(val, batch_size=None, num_workers=1)) == 12
    finally:
        _shut_down(loader)
    # Regression: when every fork kept the slabs held at that moment from reuse (48e8820), the slab of the last
    # training batch (still bound to `batch`) was never released to its persistent worker, one more each epoch,
    # until most batches were sent the slow way: [20, 20, 20, 20, 16, 12, 8, 3, 4, 4, 3, ...] by epoch. The child
    # now copies what it inherits (receive._before_fork).
    assert min(in_slabs[-4:]) >= 10, str(in_slabs)


# ----- map-style: rows collated in the workers, large stacks lent -------------------------------------------------

def _image_row(row):
    """A per-record transform: a 3 x 96 x 96 float32 image (108 KiB) from the record's id; 16 rows stack to
    1.7 MiB, which a worker's collate makes in a lent slab (transport._stack)."""
    return {"id": row["id"], "image": torch.full((3, 96, 96), float(row["id"])) + torch.arange(96.0)}


@needs_shm
def test_map_style_shuffled_batches_stacked_into_lent_slabs_stay_intact(records):
    """IndexedTFRecordDataset, shuffled, two persistent workers, 3 epochs: random batches and single images cut
    from others kept; each still hashes as it did on arrival."""
    path = records(96)
    dataset = tfr_torch.IndexedTFRecordDataset(path, SPEC, transform=_image_row)
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2, persistent_workers=True,
                        generator=torch.Generator().manual_seed(0))
    rng = random.Random(7)
    kept, lent = [], 0
    try:
        for epoch in range(3):
            ids = []
            for batch in loader:
                lent += _in_a_slab(batch["image"])
                want = batch["id"].float()[:, None, None, None] + torch.arange(96.0)
                assert torch.equal(batch["image"], want.expand(len(batch["id"]), 3, 96, 96))
                ids += batch["id"].tolist()
                if rng.random() < 0.4:
                    kept.append((batch, _digest(batch)))
                else:
                    one = batch["image"][rng.randrange(16)]
                    kept.append((one, _digest(one)))
                del batch
                if len(kept) > 12:
                    kept.pop(rng.randrange(len(kept)))
                for value, digest in kept:
                    assert _digest(value) == digest
            assert sorted(ids) == list(range(96))
    finally:
        _shut_down(loader)
    assert lent > 0


# ----- DecodeImages, the library's own lending transform -----------------------------------------------------------

def _jpeg(k):
    from PIL import Image

    height, width = 40 + 3 * (k % 5), 50 + 2 * (k % 7)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([(x * 5 + k) % 256, (y * 4) % 256, (x + y + k * 9) % 256], -1).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@needs_shm
@pytest.mark.parametrize("channels_last", [False, True])
def test_decoded_image_batches_kept_at_random_across_epochs(tmp_path, write_records, channels_last):
    from tfr_torch.images import DecodeImages, ImageTransform

    spec = {"image/encoded": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "label": tfr_torch.FixedLenFeature([], torch.int64)}
    path = str(tmp_path / "img.tfrecord")
    write_records(path, [{"image/encoded": _jpeg(k), "label": k} for k in range(40)], index=True)
    transform = DecodeImages(ImageTransform(24, train=False, dtype=torch.float32, channels_last=channels_last))
    here = {int(label): image.clone() for b in tfr_torch.TFRecordDataset(path, spec, index="auto", batch_size=40)
            for label, image in zip(b["label"], transform(b)["image/encoded"])}
    dataset = tfr_torch.TFRecordDataset(path, spec, index="auto", batch_size=3, transform=transform)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, persistent_workers=True)
    rng = random.Random(11)
    kept, lent = [], 0
    try:
        for epoch in range(3):
            for batch in loader:
                lent += _in_a_slab(batch["image/encoded"])
                for label, image in zip(batch["label"].tolist(), batch["image/encoded"]):
                    assert torch.equal(image, here[label])
                if rng.random() < 0.4:
                    kept.append((batch, _digest(batch)))
                if len(kept) > 10:
                    kept.pop(rng.randrange(len(kept)))
                del batch
                for old, digest in kept:
                    assert _digest(old) == digest
    finally:
        _shut_down(loader)
    assert lent > 0


@needs_shm
def test_two_threads_each_iterating_a_loader_at_once(records):
    """Two threads of the main process each iterate their own loader (the receive side's mappings and releases
    from both at once), keeping some batches and dropping others; then each checks what it kept."""
    import threading

    path = records(100)
    width = 300
    errors, kept = [], {0: [], 1: []}

    def run(n):
        try:
            dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=5,
                                                transform=Lending(width, "nested" if n else "several"))
            loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=True)
            try:
                for epoch in range(3):
                    for i, batch in enumerate(loader):
                        _assert_equal(batch, _expected(batch, width, "nested" if n else "several"))
                        if (i + epoch + n) % 3 == 0:
                            kept[n].append((batch, _digest(batch)))
                        if len(kept[n]) > 9:
                            kept[n].pop(i % 9)
                    for old, digest in kept[n]:
                        assert _digest(old) == digest
            finally:
                _shut_down(loader)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]
    for n in (0, 1):
        for old, digest in kept[n]:
            assert _digest(old) == digest


@needs_shm
def test_a_fork_copies_only_the_slabs_of_workers_still_running(records):
    """What a fork copies (receive._before_fork): the held batches of running workers, which may write into their
    slabs again; not those of workers that have exited (a DataLoader's next epoch forks its new workers while the
    last epoch's last batch is still held): their slabs are never written again."""
    path = records(40)
    dataset = tfr_torch.TFRecordDataset(path, SPEC, index="auto", batch_size=4, transform=Lending(500))
    loader = DataLoader(dataset, batch_size=None, num_workers=1, persistent_workers=True)
    it = iter(loader)
    try:
        batch = next(it)
        assert _in_a_slab(batch["x"])
        receive._before_fork()
        try:
            assert receive._TO_COPY  # its worker runs: a child would copy it
        finally:
            receive._after_fork_in_parent()
        for _ in it:
            pass
    finally:
        _shut_down(loader)
    deadline = time.monotonic() + 10
    while any(receive._alive(entry[2]) for entry in receive._HELD.values() if entry[2] is not None):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    receive._before_fork()
    try:
        assert not receive._TO_COPY  # the worker is gone: nothing to copy, nothing kept from reuse
        assert any(entry[1] is not None for entry in receive._HELD.values())  # the batch is still held
    finally:
        receive._after_fork_in_parent()
    _assert_equal(batch, _expected(batch, 500, "one"))
