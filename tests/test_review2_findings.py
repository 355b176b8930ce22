"""Defects found in a second review of the follow-up commits (c694c20, d10ad30), each pinned by a test that failed
before its fix: MixedDataset's merged-state check (no copies, every part checked first), the reader's large-record
path when the file shrinks while it is read, and URLs whose names hold glob characters."""

from __future__ import annotations

import os
import threading

import pytest
import torch

import tfr_torch
from tfr_torch.format.framing import frame_record


@pytest.fixture(scope="module")
def mixed_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("review2_mixed")
    out = {}
    for n, (name, size) in enumerate({"a": 40, "b": 20}.items()):
        path = str(folder / f"{name}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(size):
                writer.write_example({"id": 1000 * n + i})
        tfr_torch.build_index(path, path + ".idx")
        out[name] = path
    return out


def _mixture(files, transform=None):
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    extra = {} if transform is None else {"transform": transform}
    mixed = tfr_torch.MixedDataset({name: tfr_torch.TFRecordDataset(path, spec, index="auto", shuffle=True, seed=0,
                                                                     **extra)
                                    for name, path in files.items()}, {"a": 2, "b": 1}, stop="all", seed=3)
    mixed.set_epoch(1)
    return mixed


def _merged(files):
    head = _mixture(files)
    it = iter(head)
    for _ in range(20):
        next(it)
    return tfr_torch.elastic_state([head.state_dict()])


class _LockedTransform:
    """A transform that holds a lock (a stateful augmenter, a tokenizer wrapper, a logger): deepcopy refuses it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, item):
        return item


class _CountsCopies:
    """A transform with a big table (a vocabulary, a label map): copying it costs its size."""

    copies = 0

    def __call__(self, item):
        return item

    def __deepcopy__(self, memo):
        type(self).copies += 1
        return _CountsCopies()


# Fixed: mixed.py _probe_merged: a dataset that deepcopy refused is not probed (`except Exception: continue`), so a part
# refused after it leaves the mixture half-loaded again: the datasets before the refused one have resumed
def test_a_refused_merged_state_leaves_a_mixture_with_an_uncopyable_transform_as_it_was(mixed_files):
    merged = _merged(mixed_files)
    merged["datasets"]["b"] = dict(merged["datasets"]["b"], seed=12345)  # b's part does not fit this mixture
    mixed = _mixture(mixed_files, _LockedTransform())
    with pytest.raises(ValueError, match="'b'"):
        mixed.load_state_dict(merged)
    assert len([item for item in mixed]) == 60  # 44 today: 'a' resumed from the refused state


# Fixed: mixed.py _probe_merged: loading a merged state deep-copied every dataset, with the user's transform and
# whatever it holds (a 400 MB table shared by two datasets: +800 MB peak, 1.8 s)
def test_loading_a_merged_state_copies_no_transform(mixed_files):
    merged = _merged(mixed_files)
    mixed = _mixture(mixed_files, _CountsCopies())
    _CountsCopies.copies = 0
    mixed.load_state_dict(merged)
    assert _CountsCopies.copies == 0  # 2 today: one per dataset


# Fixed: record_loop.py _read_whole: lengths() without verify does not read a big record's data; when the file shrank
# into that data, the error says the file ends after the whole data (header + length), not where it ends
def test_a_file_cut_inside_a_big_record_while_counted_is_reported_where_it_ends(tmp_path):
    path = tmp_path / "shrinks.tfrecord"
    big = 9 << 20  # past the size from which a record is read into its own bytes
    path.write_bytes(frame_record(b"a" * 10) + frame_record(os.urandom(big)) + frame_record(b"c" * 10))
    errors = []
    with tfr_torch.read_records(path, verify=False, on_error=errors.append) as reader:
        blocks = reader.lengths()
        first, offset = next(blocks)
        assert (list(first), offset) == ([10], 0)
        os.truncate(path, 26 + 12 + 100)  # the file now ends 100 bytes into the big record's data
        assert list(blocks) == []
    assert len(errors) == 1
    assert str(errors[0]).endswith(f"so {big + 16} bytes from this offset, but the file ends after 112")
    assert errors[0].skipped_range == (26, 138)


# Fixed: paths.py expand_paths: the docs (records.md, datasets.md) say an existing file's name is that file even
# when it holds glob characters; for a URL it was still a pattern, and read another file when one matched it
def test_an_existing_url_with_glob_characters_is_that_file():
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    fs.pipe("/review2_urls/x[1].tfrecord", frame_record(b"the named file"))
    fs.pipe("/review2_urls/x1.tfrecord", frame_record(b"another file"))
    try:
        found = tfr_torch.expand_paths("memory://review2_urls/x[1].tfrecord")
        assert [path.rsplit("/", 1)[-1] for path in found] == ["x[1].tfrecord"]  # ['x1.tfrecord'] today
    finally:
        fs.rm("/review2_urls", recursive=True)
