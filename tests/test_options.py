"""String options are checked where they are given: a dataset's constructor raises ValueError naming the argument,
the value and what is accepted (not a DataLoader worker later); the accepted spellings keep working."""

import numpy as np
import pytest

import tfr_torch
from tfr_torch.format.options import check_positive_int


@pytest.fixture
def path(tmp_path):
    out = tmp_path / "a.tfrecord"
    with tfr_torch.TFRecordWriter(out) as writer:
        for i in range(3):
            writer.write(b"%d" % i)
    return str(out)


@pytest.mark.parametrize("kwargs, message", [
    ({"on_error": "ignore"}, "on_error must be \"raise\", \"skip\" or a callable taking the error, got 'ignore'"),
    ({"compression": "bz2"}, "unknown compression 'bz2': expected one of None, \"gzip\", \"zlib\" (or TensorFlow's "
                             "\"\", \"GZIP\", \"ZLIB\"), \"auto\""),
    ({"interleave": 0}, "interleave must be a positive int (files read at once), got 0"),
    ({"interleave": 2.5}, "interleave must be a positive int (files read at once), got 2.5"),
    ({"interleave": True}, "interleave must be a positive int (files read at once), got True"),
])
def test_bad_options_raise_when_the_dataset_is_built(path, kwargs, message):
    with pytest.raises(ValueError) as info:
        tfr_torch.TFRecordDataset(path, **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize("kwargs", [
    {"on_error": "skip"}, {"on_error": print}, {"compression": None}, {"compression": ""}, {"compression": "NONE"},
    {"compression": "auto"}, {"interleave": 1}, {"interleave": 8},
])
def test_accepted_spellings(path, kwargs):
    assert list(tfr_torch.TFRecordDataset(path, **kwargs)) == [b"0", b"1", b"2"]


def test_numpy_ints_are_ints():
    assert check_positive_int(np.int64(3), "interleave", "files read at once") == 3
