"""The reader skips the rest of a damaged GZIP/ZLIB member (Inflater.abandon_member):
under on_error="skip", a corrupt GZIP/ZLIB stream never yields a record out of sequence (a duplicate copied by a
damaged back-reference), and reading resumes at the next gzip member."""

import gzip
import random
import warnings

import pytest

import tfr_torch
from wirebytes import frame


pytestmark = pytest.mark.usefixtures("backend")
RECORDS = [tfr_torch.encode_example({"id": i % 7, "text": ["cat", "dog", "bird"][i % 3]}) for i in range(400)]


def _in_sequence(out):
    """Each record yielded is a record of the file, after the previous one yielded (a subsequence)."""
    j = 0
    for record in out:
        while j < len(RECORDS) and RECORDS[j] != record:
            j += 1
        if j == len(RECORDS):
            return False
        j += 1
    return True


@pytest.mark.parametrize("layout", ["one member (TensorFlow's)", "four members"])
def test_skip_in_a_corrupt_gzip_stream_yields_only_records_in_sequence(tmp_path, layout, inflate_thread):
    if layout.startswith("one"):
        with tfr_torch.TFRecordWriter(str(tmp_path / "w.gz"), compression="gzip") as writer:
            for record in RECORDS:
                writer.write(record)
        data = (tmp_path / "w.gz").read_bytes()
    else:
        data = b"".join(gzip.compress(b"".join(map(frame, RECORDS[k : k + 100])), mtime=0) for k in range(0, 400, 100))
    rng = random.Random(0)
    path = tmp_path / "bad.gz"
    recovered = 0
    for _ in range(150):
        damaged = bytearray(data)
        at = rng.randrange(20, len(data) - 20)
        damaged[at : at + 3] = bytes(rng.randrange(256) for _ in range(3))
        path.write_bytes(bytes(damaged))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reader = tfr_torch.RecordReader(str(path), "gzip", on_error="skip")
            out = list(reader)
        assert _in_sequence(out)
        assert reader.skipped >= (len(out) < len(RECORDS))
        recovered += len(out)
    if layout == "four members":
        assert recovered > 150 * 280  # on average at most about one member of four is lost
