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


# Every public entry point that takes `compression` / `on_error` refuses a bad value at the call, naming the value and
# listing the accepted ones, before it opens, lists or creates anything (the paths below do not exist).
READ_CHOICES = ('unknown compression \'bz2\': expected one of None, "gzip", "zlib" (or TensorFlow\'s "", "GZIP", '
                '"ZLIB"), "auto"')
WRITE_CHOICES = ('unknown compression \'bz2\': expected one of None, "gzip", "zlib" (or TensorFlow\'s "", "GZIP", '
                 '"ZLIB")')
ON_ERROR = 'on_error must be "raise", "skip" or a callable taking the error, got \'ignore\''
ON_ERROR_POLICY = 'on_error must be "raise" or "skip", got \'ignore\''


class _Items:
    """A map-style dataset convert_dataset would take (never read here)."""

    def __len__(self):
        return 1

    def __getitem__(self, i):
        raise AssertionError("not reached: the arguments are checked first")


def _entry_points(missing, out):
    from tfr_torch.tools.inspection import inspect_files
    from tfr_torch.tools.reshard import reshard

    return {
        "read_records": (lambda **kw: tfr_torch.read_records(missing, **kw), "auto"),
        "TFRecordDataset": (lambda **kw: tfr_torch.TFRecordDataset(missing, **kw), "auto"),
        "build_index": (lambda **kw: tfr_torch.build_index(missing, **kw), "auto"),
        "read_index": (lambda **kw: tfr_torch.read_index(missing + ".idx", missing, **kw), "auto"),
        "check_index": (lambda **kw: tfr_torch.check_index(np.zeros((0, 2), np.int64), missing, **kw), "auto"),
        "infer_features": (lambda **kw: tfr_torch.infer_features(missing, **kw), "auto"),
        "inspect_files": (lambda **kw: inspect_files([missing], **kw), "auto"),
        "TFRecordWriter": (lambda **kw: tfr_torch.TFRecordWriter(out + ".tfrecord", **kw), "write"),
        "ShardedWriter": (lambda **kw: tfr_torch.ShardedWriter(out, "data", **kw), "write"),
        "reshard": (lambda **kw: reshard([missing], out, **kw), "write"),
        "convert_image_folder": (lambda **kw: tfr_torch.convert_image_folder(missing, out, "data", **kw), "write"),
        "convert_dataset": (lambda **kw: tfr_torch.convert_dataset(_Items(), out, "data", **kw), "write"),
    }


@pytest.mark.parametrize("entry", ["read_records", "TFRecordDataset", "build_index", "read_index", "check_index",
                                   "infer_features", "inspect_files", "TFRecordWriter", "ShardedWriter", "reshard",
                                   "convert_image_folder", "convert_dataset"])
def test_bad_compression_fails_at_every_entry_point(tmp_path, entry):
    call, kind = _entry_points(str(tmp_path / "missing.tfrecord"), str(tmp_path / "out"))[entry]
    with pytest.raises(ValueError) as info:
        call(compression="bz2")
    assert str(info.value) == (READ_CHOICES if kind == "auto" else WRITE_CHOICES)
    if kind == "write":  # a writer's compression is never "auto"
        with pytest.raises(ValueError, match="unknown compression 'auto'"):
            call(compression="auto")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, not even the output folder


@pytest.mark.parametrize("entry, message", [("read_records", ON_ERROR), ("TFRecordDataset", ON_ERROR),
                                            ("convert_image_folder", ON_ERROR_POLICY),
                                            ("convert_dataset", ON_ERROR_POLICY)])
def test_bad_on_error_fails_at_every_entry_point(tmp_path, entry, message):
    call, _ = _entry_points(str(tmp_path / "missing.tfrecord"), str(tmp_path / "out"))[entry]
    with pytest.raises(ValueError) as info:
        call(on_error="ignore")
    assert str(info.value) == message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("compression", [None, "", "none", "NONE", "gzip", "GZIP", "zlib", "ZLIB"])
def test_every_documented_compression_spelling_round_trips(tmp_path, compression):
    path = str(tmp_path / "a.tfrecord")
    with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
        writer.write(b"x")
    assert list(tfr_torch.read_records(path, compression=compression)) == [b"x"]
    assert list(tfr_torch.read_records(path)) == [b"x"]  # "auto" finds it
