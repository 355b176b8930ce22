"""An adversarial audit of the spilled global shuffle (tfr_torch/data/spill.py) against the grouped reads
(spill_dir=False), beyond tests/test_spill.py: many files of mixed sizes in one dataset (GZIP of several members,
ZLIB, a zero-record GZIP file, an empty uncompressed file, 0-byte records, records larger than a group); every
output form (raw records, decoded rows with location_key, batches with drop_last, a transform); ranks x DataLoader
workers, pad=True over an uneven split, a share asking for a record twice; resumption (state_dict /
load_state_dict after k items, StatefulDataLoader with workers, elastic_state into another world size); errors at
a record's turn (a file truncated after the dataset was built, index lines that lie about sizes, seek points of
another file, a corrupt header, a corrupt GZIP member, verify=False) under "raise", "skip", a callable, and a
callable that raises; the spill folder left empty when a DataLoader worker is killed or an iterator is abandoned;
a spill folder that cannot be written, vanishes, or reads back short; the dataset pickled (spawned worker) with
spill_dir set; the share's bookkeeping memory. Two defects fixed are marked "Fixed:"."""

from __future__ import annotations

import gc
import gzip
import os
import pickle
import shutil
import signal
import zlib

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch.data import reading, spill
from tfr_torch.format.framing import frame_record
from tfr_torch.format.record_file import RecordFile
from tfr_torch.format.seek import build_seek_points

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
SPAN = 1 << 16  # the smallest seek span: many intervals in small files
GROUP = 4 << 10  # max_group_bytes: many groups in small files


def _example(i: int, rng: np.random.Generator) -> bytes:
    size = int(rng.choice([0, 10, 300, 3000, 9000]))  # 9000: larger than a group
    return tfr_torch.encode_example({"id": i, "x": rng.integers(0, 40, size, dtype=np.uint8).tobytes()})


def _framed(records: list[bytes]) -> bytes:
    return b"".join(frame_record(r) for r in records)


def _index(path: str) -> str:
    tfr_torch.build_index(path, seek_span=SPAN)
    return path


def _examples(ids: range, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [_example(i, rng) for i in ids]


def _gzip_members(path: str, records: list[bytes], members: int) -> str:
    """A GZIP file of `members` concatenated gzip members (as `cat a.gz b.gz` makes)."""
    cuts = np.linspace(0, len(records), members + 1).astype(int)
    with open(path, "wb") as f:
        for a, b in zip(cuts[:-1], cuts[1:]):
            f.write(gzip.compress(_framed(records[a:b])))
    return _index(path)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """Files of Examples with ids 0..1199 (each id once): several sizes and forms of compressed file."""
    folder = tmp_path_factory.mktemp("audit")
    paths = [
        _gzip_members(str(folder / "multi.tfrecord.gz"), _examples(range(0, 500), 1), 4),
        _index(_zlib(str(folder / "z.tfrecord.zz"), _examples(range(500, 800), 2))),
        _gzip_members(str(folder / "zero.tfrecord.gz"), [], 1),  # a GZIP file of no records
        _gzip_members(str(folder / "one.tfrecord.gz"), _examples(range(800, 801), 3), 1),
        _gzip_members(str(folder / "single.tfrecord.gz"), _examples(range(801, 1200), 4), 1),
    ]
    empty = folder / "empty.tfrecord"  # an uncompressed file of no records
    empty.write_bytes(b"")
    paths.insert(2, _index(str(empty)))
    return paths


def _zlib(path: str, records: list[bytes]) -> str:
    with open(path, "wb") as f:
        f.write(zlib.compress(_framed(records)))
    return path


@pytest.fixture(scope="module")
def raw_files(tmp_path_factory, examples):
    """The Example files, plus a GZIP file of 0-byte records and records larger than a group."""
    folder = tmp_path_factory.mktemp("raw")
    rng = np.random.default_rng(7)
    odd = [b"" if k % 3 == 0 else rng.bytes(int(rng.choice([5, 20000]))) for k in range(90)]
    return [*examples, _gzip_members(str(folder / "odd.tfrecord.gz"), odd, 2)]


@pytest.fixture
def counted(monkeypatch, tmp_path_factory):
    """A function giving how many readers (in this process or DataLoader workers forked from it) chose the spill."""
    log = tmp_path_factory.mktemp("log") / "spilled.log"
    real = reading.spilled

    def spilled(*args, **kwargs):
        with open(log, "a") as f:
            f.write(f"{len(args[4])}\n")
        return real(*args, **kwargs)

    monkeypatch.setattr(reading, "spilled", spilled)
    return lambda: len(log.read_text().split()) if log.exists() else 0


def _dataset(paths, spill_dir, features=None, **options):
    options.setdefault("seed", 5)
    return tfr_torch.TFRecordDataset(paths, features, index="auto", shuffle=True, max_group_bytes=GROUP,
                                     spill_dir=spill_dir, **options)


def _plain(item):
    """An item as plain Python values, to compare."""
    if isinstance(item, torch.Tensor):
        return item.tolist()
    if isinstance(item, np.ndarray):
        return item.tolist()
    if isinstance(item, dict):
        return {k: _plain(v) for k, v in item.items()}
    if isinstance(item, (list, tuple)):
        return [_plain(v) for v in item]
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    return item


def _both(paths, folder, counted, features=None, **options):
    """The items of the grouped reads and of the spill (which must be chosen), as plain values."""
    before = counted()
    grouped = [_plain(x) for x in _dataset(paths, False, features, **options)]
    assert counted() == before
    spilt = [_plain(x) for x in _dataset(paths, str(folder), features, **options)]
    assert counted() > before
    assert os.listdir(folder) == []
    return grouped, spilt


def _ids(records) -> list[int]:
    return [int(tfr_torch.parse_single_example(bytes(r), SPEC)["id"]) for r in records]


def test_raw_records_and_locations_of_mixed_files(raw_files, counted, tmp_path):
    spill_folder = tmp_path / "spill"
    spill_folder.mkdir()
    grouped, spilt = _both(raw_files, spill_folder, counted)
    assert spilt == grouped
    assert len(spilt) == 1200 + 90
    assert sum(1 for record in spilt if record == b"") == 30  # the 0-byte records came through


def test_decoded_rows_batches_and_transform(examples, counted, tmp_path):
    grouped, spilt = _both(examples, tmp_path, counted, SPEC, location_key="where")
    assert spilt == grouped and sorted(row["id"] for row in spilt) == list(range(1200))
    assert len({row["where"] for row in spilt}) == 1200  # each "path:offset" once
    grouped, spilt = _both(examples, tmp_path, counted, SPEC, batch_size=64, drop_last=True)
    assert spilt == grouped and len(spilt) == 1200 // 64
    assert all(len(batch["id"]) == 64 for batch in spilt)
    grouped, spilt = _both(examples, tmp_path, counted, SPEC, transform=lambda row: int(row["id"]) * 2)
    assert spilt == grouped and sorted(spilt) == list(range(0, 2400, 2))


def _loader_items(paths, spill_dir, rank, world_size, workers=2, **options):
    dataset = _dataset(paths, spill_dir, SPEC, rank=rank, world_size=world_size, **options)
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    return [int(row["id"]) for row in loader]


def test_ranks_and_workers(examples, counted, tmp_path):
    everything = []
    for rank in range(3):
        before = counted()
        grouped = _loader_items(examples, False, rank, 3)
        assert counted() == before
        spilt = _loader_items(examples, str(tmp_path), rank, 3)
        assert spilt == grouped
        everything += spilt
    assert counted() >= 3
    assert os.listdir(tmp_path) == []
    assert sorted(everything) == list(range(1200))


def test_pad_over_an_uneven_split(examples, counted, tmp_path):
    everything = []
    for rank in range(7):  # 1200 = 7 x 171 + 3: four ranks get a repeated record
        grouped = [int(r["id"]) for r in _dataset(examples, False, SPEC, rank=rank, world_size=7, pad=True)]
        spilt = [int(r["id"]) for r in _dataset(examples, str(tmp_path), SPEC, rank=rank, world_size=7, pad=True)]
        assert spilt == grouped and len(spilt) == 172
        everything += spilt
    assert counted() == 7
    assert len(everything) == 1204 and sorted(set(everything)) == list(range(1200))


def test_a_share_that_asks_for_a_record_twice(tmp_path):
    """spilled() given the same record twice (and a 0-byte record): each comes out at its turn."""
    records = [b"", b"a" * 50, b"b" * 3000, b"c" * 7]
    path = str(tmp_path / "d.tfrecord.gz")
    with open(path, "wb") as f:
        f.write(gzip.compress(_framed(records)))
    _index(path)
    offsets = tfr_torch.read_index(path + ".idx")
    order = [2, 1, 2, 0, 3, 1, 0]
    located = offsets[order, :2].astype(np.int64)
    file_ids = np.zeros(len(order), dtype=np.int64)
    bounds = reading.group_bounds(located[:, 1], 60)
    ends = {0: int((located[:, 0] + located[:, 1]).max())}

    alone = []

    def one(f, offset, size):  # a record the pass did not deliver: here, the second asking of one
        alone.append(offset)
        with RecordFile(path) as handle:
            return handle.read(offset, size)

    blocks = list(spill.spilled(str(tmp_path), [path], "GZIP", True, file_ids, located, bounds, ends, one))
    assert len(alone) <= 3
    assert [bytes(r) for b in blocks for r in b.records] == [records[k] for k in order]
    assert [w for b in blocks for w in b.where] == [(path, int(offsets[k, 0])) for k in order]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in (path, path + ".idx",
                                                                               path + ".idx.seek"))


@pytest.mark.parametrize("k", [0, 437, 1200])
def test_resume_gives_exactly_the_rest(examples, counted, tmp_path, k):
    rests = {}
    for spill_dir in (False, str(tmp_path)):
        dataset = _dataset(examples, spill_dir, SPEC)
        dataset.set_epoch(2)
        it = iter(dataset)
        head = [int(next(it)["id"]) for _ in range(k)]
        state = dataset.state_dict()
        del it
        fresh = _dataset(examples, spill_dir, SPEC)
        fresh.load_state_dict(state)
        rest = [int(row["id"]) for row in fresh]
        assert sorted(head + rest) == list(range(1200))
        rests[spill_dir] = (head, rest)
    assert rests[False] == rests[str(tmp_path)]
    # the first pass spills; a resumed one spills the rest of its share (nothing left at the end: no spill)
    assert counted() == (2 if 0 < k < 1200 else 1)
    assert os.listdir(tmp_path) == []


def test_resume_through_stateful_dataloader_with_workers(examples, counted, tmp_path):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    rests = {}
    for spill_dir in (False, str(tmp_path)):
        loader = stateful.StatefulDataLoader(_dataset(examples, spill_dir, SPEC), batch_size=None, num_workers=2)
        it = iter(loader)
        head = [int(next(it)["id"]) for _ in range(301)]
        state = loader.state_dict()
        del it
        again = stateful.StatefulDataLoader(_dataset(examples, spill_dir, SPEC), batch_size=None, num_workers=2)
        again.load_state_dict(state)
        rest = [int(row["id"]) for row in again]
        assert sorted(head + rest) == list(range(1200))
        rests[spill_dir] = (head, rest)
    assert rests[False] == rests[str(tmp_path)]
    assert counted() >= 2
    assert os.listdir(tmp_path) == []


def test_elastic_state_into_another_world_size(examples, counted, tmp_path):
    results = {}
    for spill_dir in (False, str(tmp_path)):
        parts, head = [], []
        for rank in range(2):
            dataset = _dataset(examples, spill_dir, SPEC, rank=rank, world_size=2)
            it = iter(dataset)
            head += [int(next(it)["id"]) for _ in range(100 + 50 * rank)]
            parts.append(dataset.state_dict())
            del it
        merged = tfr_torch.elastic_state(parts)
        rest = []
        for rank in range(3):
            dataset = _dataset(examples, spill_dir, SPEC, rank=rank, world_size=3)
            dataset.load_state_dict(merged)
            rest.append([int(row["id"]) for row in dataset])
        # the 950 left, cut to a multiple of the new world size (datasets.md): 948, each once
        assert len(set(head + sum(rest, []))) == len(head + sum(rest, [])) == 250 + 948
        results[spill_dir] = (head, rest)
    assert results[False] == results[str(tmp_path)]
    assert os.listdir(tmp_path) == []


def test_set_epoch_changes_the_order_on_both_paths(examples, counted, tmp_path):
    orders = {}
    for epoch in (0, 3):
        got = {}
        for spill_dir in (False, str(tmp_path)):
            dataset = _dataset(examples, spill_dir, SPEC)
            dataset.set_epoch(epoch)
            got[spill_dir] = [int(row["id"]) for row in dataset]
        assert got[False] == got[str(tmp_path)]
        orders[epoch] = got[False]
    assert orders[0] != orders[3] and sorted(orders[0]) == sorted(orders[3])


# errors ------------------------------------------------------------------------------------------------------------


def _outcome(paths, spill_dir, on_error="raise", **options):
    """(ids read, (error type, path, offset) or None, [(path, offset, skipped_records) handed to on_error])."""
    handed = []
    policy = on_error
    if on_error == "callable":
        def policy(err):
            handed.append((err.path, err.offset, err.skipped_records))
    got = []
    failure = None
    dataset = _dataset(paths, spill_dir, SPEC, on_error=policy, **options)
    try:
        with pytest.warns() if on_error == "skip" else _nothing():
            for row in dataset:
                got.append(int(row["id"]))
    except tfr_torch.TFRecordError as err:
        failure = (type(err), err.path, err.offset)
    return got, failure, handed


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _same_outcome(paths, tmp_path, counted, on_error="raise", **options):
    grouped = _outcome(paths, False, on_error, **options)
    before = counted()
    spilt = _outcome(paths, str(tmp_path), on_error, **options)
    assert counted() > before
    assert spilt == grouped
    assert os.listdir(tmp_path) == []
    return spilt


def test_a_file_shorter_than_its_index_is_refused_on_both_paths(tmp_path):
    """The file holds its first 260 records (its seek points made for it), its index lists 400."""
    records = _examples(range(400), 11)
    path = _gzip_members(str(tmp_path / "t.tfrecord.gz"), records, 1)
    shutil.copyfile(path + ".idx", str(tmp_path / "full.idx"))
    _gzip_members(path, records[:260], 1)
    shutil.copyfile(str(tmp_path / "full.idx"), path + ".idx")
    for spill_dir in (False, True):
        with pytest.raises(tfr_torch.IndexMismatchError, match="the index describes 400 records") as err:
            _dataset([path], spill_dir, SPEC)
        assert err.value.path == path


@pytest.mark.parametrize("on_error", ["raise", "callable"])
def test_a_file_truncated_after_the_dataset_was_built(tmp_path, counted, on_error):
    folder = tmp_path / "files"
    folder.mkdir()
    path = _gzip_members(str(folder / "t.tfrecord.gz"), _examples(range(400), 11), 1)
    data = open(path, "rb").read()
    outcomes = []
    for spill_dir in (False, True):
        handed: list = []
        dataset = _dataset([path], spill_dir, SPEC, on_error=handed.append if on_error == "callable" else on_error)
        with open(path, "wb") as f:
            f.write(data[: len(data) * 2 // 3])
        with pytest.raises(tfr_torch.TFRecordError) as err:
            list(dataset)
        outcomes.append((type(err.value), err.value.path, err.value.offset, len(handed)))
        with open(path, "wb") as f:
            f.write(data)
    assert outcomes[0] == outcomes[1] and outcomes[0][1] == path


@pytest.mark.parametrize("on_error", ["raise", "skip", "callable"])
def test_an_index_line_that_lies_about_a_size(tmp_path, counted, on_error):
    folder = tmp_path / "files"
    folder.mkdir()
    path = _gzip_members(str(folder / "l.tfrecord.gz"), _examples(range(300), 12), 2)
    lines = open(path + ".idx").read().splitlines()
    offset, size = lines[123].split()[:2]
    after, size_after = (int(v) for v in lines[124].split()[:2])
    assert size_after > 40
    # record 123 said 8 bytes longer, record 124 8 bytes later and shorter: an index whose lines still add up
    lines[123] = f"{offset} {int(size) + 8}"
    lines[124] = f"{after + 8} {size_after - 8}"
    with open(path + ".idx", "w") as f:
        f.write("\n".join(lines) + "\n")
    spill_folder = tmp_path / "spill"
    spill_folder.mkdir()
    got, failure, handed = _same_outcome([path], spill_folder, counted, on_error)
    if on_error == "raise":  # at whichever of the two comes first in the shuffled order
        assert failure is not None and failure[1] == path and failure[2] in (int(offset), after + 8)
        assert issubclass(failure[0], tfr_torch.TFRecordError)
    else:
        assert failure is None and len(got) == 298
    if on_error == "callable":
        assert sorted(handed) == [(path, int(offset), 1), (path, after + 8, 1)]


# Fixed: the spill's pass reads without seek points, so over stale seek points (or another file's) it gave
# records where the grouped reads raise IndexMismatchError; now a file whose points do not match is not spilled.
def test_seek_points_of_another_file(tmp_path, counted):
    """Seek points (and index) of another file of the same size (the file rewritten with other records of the
    same sizes, cut to its old size): the spill, which reads without seek points, gives what the groups give."""
    folder = tmp_path / "files"
    folder.mkdir()
    path = _gzip_members(str(folder / "s.tfrecord.gz"), _examples(range(600), 13), 1)
    size = os.path.getsize(path)
    seed = 100
    while True:  # other records of the same sizes, compressed to at least the old size
        other = _gzip_members(str(folder / "o.tfrecord.gz"), _examples(range(600), 13), 1)
        rng = np.random.default_rng(seed)
        records = [r[:-4] + rng.bytes(4) if len(r) > 20 else r for r in _examples(range(600), 13)]
        with open(other, "wb") as f:
            f.write(gzip.compress(_framed(records)))
        if os.path.getsize(other) >= size:
            break
        seed += 1
    with open(other, "r+b") as f:
        f.truncate(size)
    os.replace(other, path)
    spill_folder = tmp_path / "spill"
    spill_folder.mkdir()
    grouped = _outcome([path], False)
    assert grouped[1] is not None and grouped[1][:2] == (tfr_torch.IndexMismatchError, path)
    assert _outcome([path], str(spill_folder)) == grouped
    assert os.listdir(spill_folder) == []


@pytest.mark.parametrize("on_error", ["raise", "skip", "callable"])
def test_a_corrupt_gzip_member_the_same(tmp_path, counted, on_error):
    """A member whose deflate data is damaged in a file of several: the records past it are read alone."""
    folder = tmp_path / "files"
    folder.mkdir()
    path = _gzip_members(str(folder / "m.tfrecord.gz"), _examples(range(400), 14), 4)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 3] ^= 0xFF
    data[len(data) // 3 + 7] ^= 0xFF
    open(path, "wb").write(bytes(data))
    spill_folder = tmp_path / "spill"
    spill_folder.mkdir()
    got, failure, handed = _same_outcome([path], spill_folder, counted, on_error)
    assert len(got) < 400 and (failure is None) == (on_error != "raise")
    if on_error == "callable":
        assert handed and all(p == path for p, _, _ in handed)


def _damaged_file(tmp_path, where: str) -> tuple[str, int]:
    """A GZIP file of 300 Examples with one record damaged at `where` ("header": its length; "data": a data byte,
    its CRC left as it was); (path, that record's offset)."""
    records = _examples(range(300), 15)
    framed = bytearray()
    offset = 0
    for i, record in enumerate(records):
        if i == 140:
            offset = len(framed)
        framed += frame_record(record)
    folder = tmp_path / "files"
    folder.mkdir(exist_ok=True)
    path = folder / f"{where}.tfrecord.gz"
    path.write_bytes(gzip.compress(bytes(framed)))
    _index(str(path))  # the index of the good file (the same offsets), the seek points of the damaged one
    framed[offset + (1 if where == "header" else 14)] ^= 0x40
    path.write_bytes(gzip.compress(bytes(framed)))
    assert build_seek_points(str(path), str(path) + ".idx.seek", "gzip", SPAN)
    return str(path), offset


@pytest.mark.parametrize("on_error", ["raise", "skip", "callable"])
def test_a_corrupt_header_in_one_gzip_member(tmp_path, counted, on_error):
    """The pass gives up the rest of the member after a header it cannot trust: every record after it is read
    alone, as the grouped reads do, with the same errors."""
    path, offset = _damaged_file(tmp_path, "header")
    spill_folder = tmp_path / "spill"
    spill_folder.mkdir()
    got, failure, handed = _same_outcome([path], spill_folder, counted, on_error)
    if on_error == "raise":
        assert failure is not None and failure[:3] == (tfr_torch.CorruptRecordError, path, offset)
    else:
        assert failure is None and len(got) == 299
    if on_error == "callable":
        assert handed == [(path, offset, 1)]


def test_unverified_records_are_the_same_bytes(tmp_path, counted):
    """verify=False: a damaged data byte comes out damaged, the same on both paths."""
    path, offset = _damaged_file(tmp_path, "data")
    spill_folder = tmp_path / "spill"
    spill_folder.mkdir()
    grouped, spilt = _both([path], spill_folder, counted, verify=False)
    assert spilt == grouped and len(spilt) == 300


class _Stop(Exception):
    pass


def test_an_on_error_callable_that_raises_stops_both_paths_at_the_same_item(tmp_path, counted):
    path, offset = _damaged_file(tmp_path, "data")
    spill_folder = tmp_path / "spill"
    spill_folder.mkdir()
    outcomes = []

    def stop(err):
        raise _Stop(err.path, err.offset)

    for spill_dir in (False, str(spill_folder)):
        got = []
        with pytest.raises(_Stop) as caught:
            for row in _dataset([path], spill_dir, SPEC, on_error=stop):
                got.append(int(row["id"]))
        outcomes.append((got, caught.value.args))
    assert outcomes[0] == outcomes[1] and outcomes[0][1] == (path, offset)
    assert counted() == 1 and os.listdir(spill_folder) == []


# the spill folder ----------------------------------------------------------------------------------------------------


def test_nothing_left_when_a_worker_is_killed(examples, tmp_path):
    dataset = _dataset(examples, str(tmp_path), SPEC)
    loader = DataLoader(dataset, batch_size=None, num_workers=1, timeout=20)
    it = iter(loader)
    next(it)
    assert os.listdir(tmp_path) == []
    pid = it._workers[0].pid  # DataLoader exposes its workers only here
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(RuntimeError):
        for _ in it:
            pass
    del it
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_nothing_left_when_an_iterator_is_abandoned(examples, tmp_path, counted):
    for _ in range(3):
        it = iter(_dataset(examples, str(tmp_path), SPEC))
        next(it)
        del it
        gc.collect()
    assert counted() == 3
    assert os.listdir(tmp_path) == []


def test_a_spill_folder_that_cannot_be_written(examples, counted, monkeypatch, tmp_path):
    expected = [int(r["id"]) for r in _dataset(examples, False, SPEC)]

    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(tmp_path))

    monkeypatch.setattr(spill.tempfile, "TemporaryFile", refused)
    with pytest.warns(RuntimeWarning, match="could not make a spill file in .*Permission denied.* in groups instead"):
        assert [int(r["id"]) for r in _dataset(examples, str(tmp_path), SPEC)] == expected
    assert counted() == 1


def test_a_spill_folder_that_vanishes(examples, counted, tmp_path):
    folder = tmp_path / "gone"
    folder.mkdir()
    expected = [int(r["id"]) for r in _dataset(examples, False, SPEC)]
    dataset = _dataset(examples, str(folder), SPEC)
    folder.rmdir()
    import warnings
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert [int(r["id"]) for r in dataset] == expected


def test_a_spill_file_that_reads_back_short_raises(examples, counted, monkeypatch, tmp_path):
    """A spill file cut short under the reader (it has no name, but a full folder of a sparse file may still fail):
    an error naming the folder, never records of another place."""
    real = spill._pread
    monkeypatch.setattr(spill, "_pread", lambda fd, size, offset: real(fd, size, offset)[: max(size - 1, 0)])
    with pytest.raises(OSError, match="the spill file in .* ended at byte"):
        list(_dataset(examples, str(tmp_path), SPEC))


def test_the_dataset_pickles_with_spill_dir(examples, counted, tmp_path):
    """Also through a spawned DataLoader worker (a fresh interpreter importing torch: a few seconds)."""
    dataset = _dataset(examples, tmp_path, SPEC)  # a pathlib.Path
    again = pickle.loads(pickle.dumps(dataset))
    expected = [int(r["id"]) for r in _dataset(examples, False, SPEC)]
    assert [int(r["id"]) for r in again] == expected
    assert counted() == 1
    # a spawned worker (nothing inherited: the dataset pickled whole) reads the same through its spill
    share = _dataset(examples[:2], tmp_path, SPEC, rank=0, world_size=2)
    loader = DataLoader(share, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    assert [int(r["id"]) for r in loader] == [int(r["id"]) for r in _dataset(examples[:2], False, SPEC, rank=0,
                                                                                world_size=2)]
    assert os.listdir(tmp_path) == []


# Fixed: spilled() built every record's (path, offset) tuple for the whole share before the first group
# (~100 bytes a record beside the module docstring's 25 bytes of bookkeeping); now a group's at a time.
def test_bookkeeping_of_a_large_share_is_not_per_record_python_objects(tmp_path, monkeypatch):
    import tracemalloc

    n = 100_000
    path = str(tmp_path / "many.tfrecord.gz")
    with open(path, "wb") as f:
        f.write(gzip.compress(_framed([bytes([k % 251]) for k in range(n)])))
    _index(path)
    located = tfr_torch.read_index(path + ".idx")[:, :2].astype(np.int64)
    located = located[np.random.default_rng(0).permutation(n)]
    file_ids = np.zeros(n, dtype=np.int64)
    bounds = reading.group_bounds(located[:, 1], 4096)
    ends = {0: int((located[:, 0] + located[:, 1]).max())}
    monkeypatch.setattr(spill, "WRITE_BYTES", 4096)  # the records gathered for writing: a few KB
    blocks = spill.spilled(str(tmp_path), [path], "GZIP", True, file_ids, located, bounds, ends, None)
    tracemalloc.start()
    try:
        first = next(blocks)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert first.where == [(path, int(o)) for o in located[: len(first), 0]]
    assert sum(len(b) for b in blocks) + len(first) == n
    assert held < 50 * n  # what stays held while the groups are read: numpy bookkeeping, no tuple per record
