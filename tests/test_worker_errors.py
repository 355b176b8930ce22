"""Errors raised in DataLoader workers keep their attributes in the main process.

torch's DataLoader sends a worker's exception as its class and the text of its traceback (torch._utils'
ExceptionWrapper) and re-raises `type(text)`: tfr_torch's errors add one line to that text naming the attributes
the text does not (`key`, `index`, `step`, `position`, the `skipped_*` ones, `index_path`) and read it back, taking
it out of the text again.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import traceback

import numpy as np
import pytest
import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import DataLoader

import tfr_torch
from tfr_torch import (CorruptRecordError, DecodeError, FixedLenFeature, IndexMismatchError, TFRecordDataset,
                       TFRecordError, TruncatedRecordError)
from tfr_torch.format.columns import ColumnKindError
from tfr_torch.tfds.metadata import TFDSMetadataError

SPEC = {"id": FixedLenFeature([], torch.int64)}
HEAD = "(tfr_torch error attributes: "


def _through_a_wrapper(err: BaseException) -> BaseException:
    """`err` as torch's ExceptionWrapper hands it to another thread or process: raised there, caught, re-raised."""
    try:
        raise err
    except BaseException:
        wrapper = ExceptionWrapper(sys.exc_info(), where="in DataLoader worker process 0")
    try:
        wrapper.reraise()
    except BaseException as again:
        return again
    raise AssertionError("reraise() returned")


def _decode_error() -> DecodeError:
    return DecodeError("feature 'id' in example 2 holds bytes values", "/data/a.tfrecord", 62, key="id", index=2,
                       step=5, position=7)


def test_every_attribute_of_a_decode_error_comes_back_and_its_line_leaves_the_text():
    err = _through_a_wrapper(_decode_error())
    assert type(err) is DecodeError
    assert (err.path, err.offset, err.key, err.index, err.step, err.position) == ("/data/a.tfrecord", 62, "id", 2, 5, 7)
    text = str(err)
    assert text.startswith("Caught DecodeError in DataLoader worker process 0.\nOriginal Traceback")
    assert text.rstrip("\n").endswith("/data/a.tfrecord:62: feature 'id' in example 2 holds bytes values")
    assert HEAD not in text
    again = pickle.loads(pickle.dumps(err))
    assert (again.key, again.index, again.step, again.position, str(again)) == ("id", 2, 5, 7, text)


def test_an_error_with_notes_keeps_them_and_its_attributes():
    """Notes (PEP 678; the readers add some) are printed after the error's text, so after the attribute line."""
    err = _decode_error()
    err.add_note("while reading shard 3")
    back = _through_a_wrapper(err)
    assert (back.key, back.index) == ("id", 2)
    assert str(back).rstrip("\n").endswith("holds bytes values\nwhile reading shard 3") and HEAD not in str(back)


def test_numpy_integers_come_back_as_ints():
    """Attributes set from numpy arrays (a batch position, offsets from an index) are numpy integers."""
    err = DecodeError("bad", "/d/a.tfrecord", np.int64(40), key="k", index=np.int64(3))
    err.skipped_range = (np.int64(40), np.int64(90))
    back = _through_a_wrapper(err)
    assert (back.offset, back.index, back.skipped_range) == (40, 3, (40, 90))
    assert type(back.index) is int


def test_the_skipped_attributes_come_back_as_they_were():
    err = CorruptRecordError("corrupt record data", "/data/b.tfrecord", 100)
    err.skipped_records, err.skipped_estimated = 3, True
    err.skipped_range, err.skipped_file_range = (100, 250), (40, 90)
    back = _through_a_wrapper(err)
    assert type(back) is CorruptRecordError
    assert (back.path, back.offset) == ("/data/b.tfrecord", 100)
    assert (back.skipped_records, back.skipped_estimated) == (3, True)
    assert back.skipped_range == (100, 250) and back.skipped_file_range == (40, 90)
    assert isinstance(back.skipped_range, tuple)


@pytest.mark.parametrize("make, attributes", [
    (lambda: IndexMismatchError("stale index", "/d/c.tfrecord", 12, index_path="/d/c.tfrecord.idx"),
     {"index_path": "/d/c.tfrecord.idx", "path": "/d/c.tfrecord", "offset": 12}),
    (lambda: ColumnKindError("label", 4, "bytes", "int64"),
     {"key": "label", "index": 4, "found": "bytes", "expected": "int64"}),
    (lambda: TFDSMetadataError("features.json is not JSON", "/d/features.json"),
     {"path": "/d/features.json", "offset": None}),
    (lambda: TruncatedRecordError("the file ends inside a record", "/d/e.tfrecord", 300),
     {"path": "/d/e.tfrecord", "offset": 300, "skipped_records": None}),
])
def test_each_error_class_comes_back_as_itself_with_its_attributes(make, attributes):
    """ColumnKindError (built from four values) came back as a RuntimeError before: torch could not build it from
    one text."""
    err = make()
    back = _through_a_wrapper(err)
    assert type(back) is type(err)
    assert {name: getattr(back, name) for name in attributes} == attributes
    assert HEAD not in str(back)


def test_the_line_is_added_only_for_torch_s_wrapper():
    """Printed, logged or formatted by anything else (an `on_error` callable in a worker, a log line), the error's
    text is its message alone."""
    err = _decode_error()
    assert HEAD not in str(err) and HEAD not in repr(err)
    try:
        raise err
    except DecodeError:
        assert HEAD not in "".join(traceback.format_exception(*sys.exc_info()))
    plain = TFRecordError("no extra attributes", "/d/f.tfrecord", 1)
    assert HEAD not in str(_through_a_wrapper(plain).args[0])


def test_an_uncaught_error_prints_its_message(tmp_path):
    """Fixed: printed by the interpreter for an uncaught error (str() called from C, no Python frame above it),
    the error's text was "<exception str() failed>": looking for torch's wrapper up the stack raised."""
    script = tmp_path / "uncaught.py"
    script.write_text("from tfr_torch import DecodeError\nraise DecodeError('bad value', 'p.tfrecord', 12, key='k')\n")
    for args in (["-c", script.read_text()], [str(script)]):
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)
        assert done.stderr.rstrip().endswith("tfr_torch.errors.DecodeError: p.tfrecord:12: bad value"), done.stderr


def test_a_text_whose_line_is_damaged_is_kept_whole():
    """A line that does not read back (cut, not JSON, after another class's error) leaves the text as it is and the
    attributes None (path and offset then come from the text); a name the class does not carry is ignored."""
    base = ("Caught DecodeError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
            "  File \"x.py\", line 1, in <module>\ntfr_torch.errors.DecodeError: /d/a.tfrecord:5: feature 'a'\n")
    for tail in (HEAD + '{"key": "a"\n', HEAD + "not json)\n", HEAD + '["key"])\n'):
        err = DecodeError(base + tail)
        assert str(err) == base + tail and err.key is None and (err.path, err.offset) == ("/d/a.tfrecord", 5)
    other = DecodeError(base.replace("DecodeError: /d", "ValueError: /d") + HEAD + '{"key": "a"})\n')
    assert other.key is None
    unknown = DecodeError(base + HEAD + '{"key": "a", "message": "x", "path": "/elsewhere"})\n')
    assert unknown.key == "a" and unknown.message == base and unknown.path == "/elsewhere"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_decode_error_in_a_worker_names_its_feature_and_example(tmp_path, context, loader_error):
    """Through a real DataLoader: the record of the wrong type is example 2 of the batch; its feature is 'id'."""
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(4):
            writer.write_example({"id": i} if i != 2 else {"id": b"not an int"})
    err = loader_error(DataLoader(TFRecordDataset(path, SPEC, batch_size=4), batch_size=None, num_workers=1,
                                  multiprocessing_context=context))
    assert type(err) is DecodeError
    assert (err.path, err.key, err.index) == (path, "id", 2) and err.offset is not None
    assert str(err).startswith("Caught DecodeError in DataLoader worker process 0")
    assert HEAD not in str(err)


def test_a_skipped_error_an_on_error_callable_raises_in_a_worker_keeps_its_count(tmp_path, loader_error):
    """An `on_error` callable gets the error with `skipped_records` set; raised again in a worker, the main process
    sees the same count and range."""
    path = str(tmp_path / "b.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(4):
            writer.write_example({"id": i})
    data = bytearray(open(path, "rb").read())
    data[30] ^= 0xFF  # inside record 0's data
    open(path, "wb").write(data)
    seen = []

    def fail(err):
        seen.append(err.skipped_records)
        raise err

    err = loader_error(DataLoader(TFRecordDataset(path, SPEC, on_error=fail, index=None), batch_size=None,
                                  num_workers=1))
    assert type(err) is CorruptRecordError
    assert err.skipped_records == 1 and err.skipped_range is not None and err.path == path
