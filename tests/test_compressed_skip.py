"""Skipping in GZIP/ZLIB files (docs/guides/records.md, "Bad records"): a record whose data CRC alone fails is
skipped alone; a member whose stream fails or holds a corrupt header is given up (Inflater.abandon_member),
reading resumes at the next gzip member, and the error says what was lost (an estimate of the records, the
bytes), counted in `.skipped`.

The sweeps below check that damaged streams yield only records of the file, in order: a duplicate copied by a
damaged back-reference (which passes its CRCs) is possible in principle until the member's check value at its
end, and a member is given up as soon as a header shows the damage: such a duplicate is rare (none in these
sweeps), not impossible."""

import gzip
import pickle
import random
import struct
import warnings
import zlib

import pytest

import tfr_torch
from tfr_torch import SkippedRecordWarning
from wirebytes import frame, masked_crc


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


# --------------------------------------------------------------------------------------------------------------
# Which of the two happens when: a bad record alone is skipped; a member whose stream fails, or whose record
# header is corrupt, is given up, and the error says what that lost.

def _bad(data: bytes) -> bytes:
    """A framed record whose stored data CRC is off by one bit (its header is intact)."""
    framed = bytearray(frame(data))
    framed[-1] ^= 0x01
    return bytes(framed)


def _crc_message(path, data: bytes, off: int) -> str:
    crc = masked_crc(data)
    return (f"{path}:{off}: corrupt record data: the CRC of its {len(data)} data bytes (at offset {off + 12}) is "
            f"{crc:#010x}, expected {crc ^ 0x01000000:#010x} (stored after the data)")


def _read(path, **kwargs):
    """(records, errors handed to on_error, reader) with a collecting callable."""
    seen = []
    reader = tfr_torch.read_records(str(path), on_error=seen.append, **kwargs)
    with reader:
        return list(reader), seen, reader


FOUR = [b"r0", b"r1", b"r2", b"r3"]
SKIP_LAYOUTS = {  # the issue's file: r1's data CRC is bad, its header intact
    "plain": lambda: frame(b"r0") + _bad(b"r1") + frame(b"r2") + frame(b"r3"),
    "zlib": lambda: zlib.compress(frame(b"r0") + _bad(b"r1") + frame(b"r2") + frame(b"r3")),
    "gzip": lambda: gzip.compress(frame(b"r0") + _bad(b"r1") + frame(b"r2") + frame(b"r3"), mtime=0),
    "gzip, members": lambda: (gzip.compress(frame(b"r0"), mtime=0) + gzip.compress(_bad(b"r1") + frame(b"r2"), mtime=0)
                              + gzip.compress(frame(b"r3"), mtime=0)),
}


@pytest.mark.parametrize("layout", list(SKIP_LAYOUTS))
def test_a_bad_record_in_an_intact_stream_is_skipped_alone(tmp_path, layout, inflate_thread):
    path = tmp_path / "skip.tfrecord"
    path.write_bytes(SKIP_LAYOUTS[layout]())
    with pytest.warns(SkippedRecordWarning) as warned:
        reader = tfr_torch.read_records(str(path), on_error="skip")
        got = list(reader)
    assert (got, reader.skipped, reader.records) == ([b"r0", b"r2", b"r3"], 1, 3)
    assert [str(w.message) for w in warned] == [f"skipping bad data: {_crc_message(path, b'r1', 18)}"]
    assert warned[0].filename == __file__  # the user's line
    got, seen, reader = _read(path)
    assert (got, reader.skipped) == ([b"r0", b"r2", b"r3"], 1)
    [err] = seen
    assert isinstance(err, tfr_torch.CorruptRecordError) and (err.path, err.offset) == (str(path), 18)
    assert str(err) == _crc_message(path, b"r1", 18)
    assert (err.skipped_records, err.skipped_estimated, err.skipped_range) == (1, False, (18, 36))
    assert err.skipped_file_range == ((18, 36) if layout == "plain" else None)
    with tfr_torch.read_records(str(path), on_error=seen.append) as blocks:
        assert [r for block, _ in blocks.blocks() for r in block] == [b"r0", b"r2", b"r3"]
    with tfr_torch.read_records(str(path), on_error=seen.append) as lengths:
        assert [n for sizes, _ in lengths.lengths() for n in sizes.tolist()] == [2, 2, 2]
        assert lengths.skipped == 1


@pytest.mark.parametrize("layout", list(SKIP_LAYOUTS))
def test_byte_ranges_around_a_skipped_record(tmp_path, layout, inflate_thread):
    """start/end (index offsets) are offsets of the decompressed stream: skipping r1 alone keeps them all valid."""
    path = tmp_path / "skip.tfrecord"
    path.write_bytes(SKIP_LAYOUTS[layout]())
    for kwargs, records, skipped in [({"start": 18}, [b"r2", b"r3"], 1), ({"start": 36}, [b"r2", b"r3"], 0),
                                     ({"end": 54}, [b"r0", b"r2"], 1), ({"start": 18, "end": 36}, [], 1),
                                     ({"start": 54}, [b"r3"], 0)]:
        got, seen, reader = _read(path, **kwargs)
        assert (got, reader.skipped, [e.offset for e in seen]) == (records, skipped, [18] * skipped), kwargs
    index = tfr_torch.read_index(tfr_torch.build_index(str(path)))  # the index has r1 (data CRCs unchecked)
    assert index.tolist() == [[0, 18], [18, 18], [36, 18], [54, 18]]


@pytest.mark.parametrize("layout", list(SKIP_LAYOUTS))
@pytest.mark.parametrize("index", [None, "auto"])
def test_a_dataset_skips_the_bad_record_alone(tmp_path, layout, index):
    path = tmp_path / "skip.tfrecord"
    path.write_bytes(SKIP_LAYOUTS[layout]())
    if index:
        tfr_torch.build_index(str(path))
    with pytest.warns(SkippedRecordWarning, match="corrupt record data"):
        got = [bytes(r) for r in tfr_torch.TFRecordDataset(str(path), index=index, on_error="skip")]
    assert got == [b"r0", b"r2", b"r3"]


# Members whose stream fails at a known place: deflate stored blocks (RFC 1951 section 3.2.4) hold their bytes as
# they are, so where the damage is and what is lost are exact. A stored block whose NLEN is not the complement of
# LEN is an error zlib finds at that block's header.

RECS = [b"%03d" % i + b"." * 97 for i in range(60)]  # 100 bytes each: 116 framed
FRAMED = 116


def _stored(payloads, broken=None) -> bytes:
    """Deflate data: one stored block per payload, the last final; block `broken` with a wrong NLEN."""
    out = b""
    for i, payload in enumerate(payloads):
        nlen = ~len(payload) & 0xFFFF
        out += bytes([i == len(payloads) - 1]) + struct.pack("<HH", len(payload), nlen ^ (i == broken)) + payload
    return out


def _gzip_member(payloads, broken=None) -> bytes:
    data = b"".join(payloads)
    return (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + _stored(payloads, broken)
            + struct.pack("<II", zlib.crc32(data), len(data)))


def _zlib_stream(payloads, broken=None) -> bytes:
    data = b"".join(payloads)
    return b"\x78\x01" + _stored(payloads, broken) + struct.pack(">I", zlib.adler32(data))


def _member_lines(records, bad=None):
    """The framed records, split into two stored blocks 50 bytes into record 8: the second block is the one whose
    header is damaged, so records 0-7 (and 50 bytes of 8) inflate before the error."""
    plain = b"".join(_bad(r) if i == bad else frame(r) for i, r in enumerate(records))
    return [plain[: 8 * FRAMED + 50], plain[8 * FRAMED + 50 :]]


def _given_up_note(kind, err, off, unread, lost, resumes_at=None):
    first, last = err.skipped_file_range
    parts = [f"the {unread} decompressed bytes from offset {off} (inflated, not read as records)"] if unread else []
    parts.append(f"compressed bytes [{first}, {last}) of the file (not inflated)")
    after = (f"; reading goes on at the next GZIP member (compressed byte {resumes_at})" if resumes_at is not None
             else "; nothing after it is read")
    return (f"; gave up the rest of this {kind}: " + " and ".join(parts) + f"; about {lost} records lost (an "
            "estimate from those bytes and the mean record size read so far)" + after)


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_a_member_whose_stream_fails_is_given_up_and_counted(tmp_path, compression, inflate_thread):
    records = RECS[:20]
    make = _gzip_member if compression == "gzip" else _zlib_stream
    data = make(_member_lines(records), broken=1)
    block2 = data.index(_member_lines(records)[1]) - 5  # the damaged block's header
    path = tmp_path / "broken.tfrecord"
    path.write_bytes(data)
    got, [err], reader = _read(path, compression=compression)
    assert got == records[:8]
    assert (reader.skipped, err.skipped_records, err.skipped_estimated) == (12, 12, True)  # records 8-19
    off = 8 * FRAMED
    assert (err.offset, err.skipped_range) == (off + 50, (off, off + 50))
    first, last = err.skipped_file_range
    assert block2 <= first <= block2 + 5 and last == len(data)
    back = pickle.loads(pickle.dumps(err))  # as a DataLoader worker hands it over
    assert (str(back), back.skipped_records, back.skipped_range, back.skipped_file_range) == (
        str(err), 12, (off, off + 50), (first, last))
    kind = "GZIP member" if compression == "gzip" else "ZLIB stream"
    assert str(err) == (f"{path}:{off + 50}: cannot inflate the {compression.upper()} stream after {off + 50} "
                        "decompressed bytes: Error -3 while decompressing data: invalid stored block lengths"
                        + _given_up_note(kind, err, off, 50, 12))
    with pytest.warns(SkippedRecordWarning) as warned:
        reader = tfr_torch.read_records(str(path), compression, on_error="skip")
        assert list(reader) == records[:8]
    assert [str(w.message) for w in warned] == [f"skipping bad data: {err}"] and reader.skipped == 12
    with pytest.raises(tfr_torch.CorruptRecordError) as raised:
        list(tfr_torch.read_records(str(path), compression))
    assert str(raised.value) == (f"{path}:{off + 50}: cannot inflate the {compression.upper()} stream after "
                                 f"{off + 50} decompressed bytes: Error -3 while decompressing data: invalid stored "
                                 "block lengths")  # raised: nothing was given up, nothing to add
    assert raised.value.skipped_records is None


def test_a_failing_member_among_several_is_given_up_alone(tmp_path, inflate_thread):
    members = [_gzip_member([b"".join(map(frame, RECS[:20]))]), _gzip_member(_member_lines(RECS[20:40]), broken=1),
               _gzip_member([b"".join(map(frame, RECS[40:]))])]
    path = tmp_path / "members.tfrecord.gz"
    path.write_bytes(b"".join(members))
    got, [err], reader = _read(path)
    assert got == RECS[:28] + RECS[40:]
    assert (reader.skipped, reader.records) == (12, 48)
    off = 28 * FRAMED
    assert err.skipped_range == (off, off + 50) and err.skipped_file_range[1] == len(members[0]) + len(members[1])
    assert str(err).endswith(_given_up_note("GZIP member", err, off, 50, 12, len(members[0]) + len(members[1])))


@pytest.mark.parametrize("layout", ["gzip", "zlib", "gzip, members"])
def test_a_corrupt_header_in_a_compressed_stream_gives_the_member_up(tmp_path, layout, inflate_thread):
    """Where the next record starts is unknown: the rest of the member goes, counted by its decompressed bytes."""
    plain = bytearray(b"".join(map(frame, RECS[:20])))
    plain[8 * FRAMED + 9] ^= 0x40  # record 8's length CRC
    if layout == "zlib":
        data, before, after = zlib.compress(bytes(plain), 0), [], []
    else:
        before = [gzip.compress(b"".join(map(frame, RECS[20:30])), mtime=0)] if layout == "gzip, members" else []
        after = [gzip.compress(b"".join(map(frame, RECS[30:40])), mtime=0)] if before else []
        data = b"".join([*before, gzip.compress(bytes(plain), 0, mtime=0), *after])
    path = tmp_path / "header.tfrecord"
    path.write_bytes(data)
    got, [err], reader = _read(path, compression=layout[:4])
    ahead = RECS[20:30] if before else []
    assert got == ahead + RECS[:8] + (RECS[30:40] if after else [])
    off = (len(ahead) + 8) * FRAMED
    assert (err.offset, err.skipped_range, reader.skipped) == (off, (off, off + 12 * FRAMED), 12)
    first, last = err.skipped_file_range
    assert last == len(data) - sum(map(len, after)) and last - first <= 8  # at most the trailer was not inflated
    kind = "ZLIB stream" if layout == "zlib" else "GZIP member"
    note = (f"; gave up the rest of this {kind}: the {12 * FRAMED} decompressed bytes from offset {off} (inflated, "
            "not read as records)")
    if last > first:
        note += f" and compressed bytes [{first}, {last}) of the file (not inflated)"
    note += ("; about 12 records lost (an estimate from those bytes and the mean record size read so far)"
             + (f"; reading goes on at the next GZIP member (compressed byte {last})" if after else
                "; nothing after it is read"))
    assert str(err).startswith(f"{path}:{off}: corrupt record header: the CRC of its length field is ")
    assert str(err).endswith(note)


def test_a_bad_record_then_a_failure_in_the_same_member_names_the_records_between(tmp_path, inflate_thread):
    """The records after a skipped bad record were yielded (each passed its CRCs); when the member's stream then
    fails, the error says so: they came from the member given up."""
    path = tmp_path / "both.tfrecord.gz"
    path.write_bytes(_gzip_member(_member_lines(RECS[:20], bad=3), broken=1))
    got, [bad, failed], reader = _read(path)
    assert got == RECS[:3] + RECS[4:8]
    assert (bad.offset, failed.offset, reader.skipped) == (3 * FRAMED, 8 * FRAMED + 50, 1 + 12)
    assert str(failed).endswith(_given_up_note("GZIP member", failed, 8 * FRAMED, 50, 12) + (
        f"; the bad record skipped at offset {3 * FRAMED} was in this GZIP member too: the 4 records read after it "
        "passed their own CRCs and were yielded, but came from this damaged stream"))


def test_a_bad_record_in_a_member_that_ends_well_is_not_named_later(tmp_path, inflate_thread):
    path = tmp_path / "two.tfrecord.gz"
    path.write_bytes(gzip.compress(frame(RECS[40]) + _bad(RECS[41]) + frame(RECS[42]), mtime=0)  # deflated
                     + _gzip_member(_member_lines(RECS[:20]), broken=1))  # stored blocks
    got, [bad, failed], reader = _read(path)
    assert got == [RECS[40], RECS[42]] + RECS[:8]
    assert reader.skipped == 13
    assert str(failed).endswith(_given_up_note("GZIP member", failed, 11 * FRAMED, 50, 12))


def test_a_check_value_that_fails_after_a_bad_record(tmp_path, inflate_thread):
    """The gzip trailer's CRC32 (zlib's Adler-32) is checked at the member's end: every record has been read by
    then; the error says the records after the skipped one came from a stream that failed its check."""
    plain = b"".join(_bad(r) if i == 3 else frame(r) for i, r in enumerate(RECS[:20]))
    damaged = bytearray(gzip.compress(plain, mtime=0))
    damaged[-8] ^= 0x01  # the CRC32 of the member's data
    path = tmp_path / "check.tfrecord.gz"
    path.write_bytes(damaged)
    got, [bad, failed], reader = _read(path)
    assert got == RECS[:3] + RECS[4:20]
    assert reader.skipped == 2  # the bad record, and the failed check (nothing left to read: counted as 1)
    assert "incorrect data check" in str(failed) and failed.skipped_records == 1
    assert str(failed).endswith(f"; the bad record skipped at offset {3 * FRAMED} was in this GZIP member too: "
                                "the 16 records read after it passed their own CRCs and were yielded, but came "
                                "from this damaged stream")


def test_thread_and_no_thread_agree_on_skipped_records_and_members(tmp_path, monkeypatch):
    """Small reads and pieces, so the thread runs ahead of the reader and is rewound where a member is given up."""
    from tfr_torch.format import inflate

    monkeypatch.setattr(inflate, "_READ", 256)
    monkeypatch.setattr(inflate, "_PIECE", 512)
    files = {"bad record": gzip.compress(b"".join(_bad(r) if i % 7 == 3 else frame(r) for i, r in enumerate(RECS)),
                                         mtime=0),
             "members": b"".join([_gzip_member(_member_lines(RECS[:20], bad=2), broken=1),
                                  gzip.compress(b"".join(map(frame, RECS[20:])), mtime=0)]),
             "zlib": _zlib_stream(_member_lines(RECS[:20], bad=5), broken=1)}
    for name, data in files.items():
        path = tmp_path / f"{name}.tfrecord"
        path.write_bytes(data)
        outcomes = []
        for threaded in (True, False):
            monkeypatch.setattr(inflate, "_THREAD_DEFAULT", threaded)
            got, seen, reader = _read(path, compression="zlib" if name == "zlib" else "gzip")
            outcomes.append((got, [(str(e), e.skipped_records, e.skipped_range, e.skipped_file_range) for e in seen],
                             reader.skipped, reader.offset))
        assert outcomes[0] == outcomes[1], name
        assert outcomes[0][2] >= 1
