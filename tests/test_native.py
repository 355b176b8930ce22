"""The compiled core (tfr_torch._native): the backend switch, its kernels against the pure-Python reference, and a
differential test that feeds both backends the same valid and mutated records.

The golden, parity, corruption and error-message tests run on both backends through the `backend` fixture
(tests/conftest.py); this file tests what is particular to the kernels.
"""

from __future__ import annotations

import os
import random
import re
import struct
import subprocess
import gc
import sys
import threading
import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import _native
from tfr_torch.errors import TFRecordError
from tfr_torch.format.crc import crc32c as reference_crc32c
from tfr_torch.format.crc import masked_crc32c as reference_masked
from wirebytes import frame, header  # records framed as the format says: what the kernels are checked against

core = _native.core if _native.available() else None
needs_core = pytest.mark.skipif(not _native.available(),
                                reason=f"the compiled core is not built: {_native.import_error}")


# ---------------------------------------------------------------------------------------------- backend switch


def test_set_backend_switches_and_returns_the_previous_one():
    start = tfr_torch.backend()
    try:
        assert tfr_torch.set_backend("python") == start
        assert tfr_torch.backend() == "python" and _native.core is None
        assert tfr_torch.set_backend("auto") == "python"
        assert tfr_torch.backend() == ("native" if _native.available() else "python")
    finally:
        tfr_torch.set_backend(start)


def test_set_backend_refuses_an_unknown_name():
    with pytest.raises(ValueError, match=r'backend must be "native", "python" or "auto", got \'fast\''):
        tfr_torch.set_backend("fast")


@pytest.mark.parametrize("value, expected", [("0", "python"), ("off", "python"), ("1", None)])
def test_environment_variable_turns_the_core_off(value, expected):
    expected = expected or ("native" if _native.available() else "python")
    code = "import tfr_torch; print(tfr_torch.backend())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TFR_TORCH_NATIVE": value},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == expected


def test_version_names_the_backend():
    env = {**os.environ, "TFR_TORCH_NATIVE": "0"}
    out = subprocess.run([sys.executable, "-m", "tfr_torch", "--version"], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert out == f"tfr_torch {tfr_torch.__version__} (backend: python, the pure-Python reference; turned off by " \
                  "TFR_TORCH_NATIVE=0)\n"
    if _native.available():
        out = subprocess.run([sys.executable, "-m", "tfr_torch", "--version"], capture_output=True, text=True,
                             check=True, env={k: v for k, v in os.environ.items() if k != "TFR_TORCH_NATIVE"}).stdout
        assert out.startswith(f"tfr_torch {tfr_torch.__version__} (backend: native, compiled core with ")


@needs_core
def test_set_backend_native_when_built():
    previous = tfr_torch.set_backend("native")
    try:
        assert tfr_torch.backend() == "native" and _native.core is not None
    finally:
        tfr_torch.set_backend(previous)


def test_set_backend_native_without_the_core_says_why(monkeypatch):
    monkeypatch.setattr(_native, "_compiled", None)
    monkeypatch.setattr(_native, "import_error", "ImportError: no _core")
    with pytest.raises(RuntimeError, match=r"not available \(ImportError: no _core\); reinstall with a C compiler"):
        tfr_torch.set_backend("native")


# ---------------------------------------------------------------------------------------------- CRC-32C


@needs_core
def test_crc32c_known_vectors():
    assert core.crc32c(b"") == 0
    assert core.crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert core.crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720, B.4
    assert core.crc32c(b"\xff" * 32) == 0x62A8AB43


@needs_core
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=3000), split=st.integers(0, 3000))
def test_crc32c_equals_the_reference_at_every_length_and_alignment(data, split):
    assert core.crc32c(data) == reference_crc32c(data)
    assert core.masked_crc32c(data) == reference_masked(data)
    split = min(split, len(data))  # continued over two pieces, from any alignment
    assert core.crc32c(data[split:], core.crc32c(data[:split])) == reference_crc32c(data)
    assert core.crc32c(memoryview(bytearray(data))[split:]) == reference_crc32c(data[split:])


@needs_core
@pytest.mark.parametrize("length", [767, 768, 769, 6143, 6144, 6145, 2 * 6144 + 768 + 13, 3 * 6144 - 1])
def test_crc32c_of_long_buffers_equals_the_reference(length):
    """Lengths on both sides of the hardware path's three-way blocks (3 x 256 and 3 x 2048 bytes), from every
    alignment, whole and continued from a split inside a block."""
    data = np.random.default_rng(length).bytes(length + 8)
    for start in range(8):
        piece = data[start : start + length]
        assert core.crc32c(piece) == reference_crc32c(piece), start
        assert core.crc32c(piece[777:], core.crc32c(piece[:777])) == reference_crc32c(piece), start


@needs_core
def test_hardware_crc_is_a_bool():
    assert core.hardware_crc() in (True, False)


# ---------------------------------------------------------------------------------------------- framing


@needs_core
@settings(max_examples=200, deadline=None)
@given(records=st.lists(st.binary(max_size=300), max_size=20))
def test_frame_records_equals_the_format(records):
    assert core.frame_records(records) == b"".join(frame(r) for r in records)
    assert core.frame_records(tuple(bytearray(r) for r in records)) == b"".join(frame(r) for r in records)


@needs_core
def test_frame_records_refuses_what_is_not_bytes():
    with pytest.raises(TypeError):
        core.frame_records([b"ok", 3])


@needs_core
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.binary(max_size=200), min_size=1, max_size=12), cut=st.integers(0, 10_000),
       verify=st.booleans())
def test_scan_records_hands_out_every_whole_record_and_stops_at_a_cut(records, cut, verify):
    buf = b"".join(frame(r) for r in records)
    cut = min(cut, len(buf))
    found, stop, status = core.scan_records(buf, 0, cut, cut, verify, 1 << 20)
    ends = np.cumsum([len(r) + 16 for r in records]).tolist()
    whole = sum(1 for e in ends if e <= cut)
    assert found == records[:whole]
    assert stop == (ends[whole - 1] if whole else 0)
    assert status == (core.SCAN_LIMIT if stop == cut else core.SCAN_MORE)
    lengths, stop_too, status_too = core.scan_records(buf, 0, cut, cut, verify, 1 << 20, True)  # lengths only
    assert np.frombuffer(lengths, dtype=np.int64).tolist() == [len(r) for r in records[:whole]]
    assert (stop_too, status_too) == (stop, status)


@needs_core
def test_scan_records_reports_a_bad_header_and_bad_data_where_they_are():
    records = [b"a" * 10, b"b" * 20, b"c" * 30]
    buf = bytearray(b"".join(frame(r) for r in records))
    second = len(records[0]) + 16
    bad_header = bytearray(buf)
    bad_header[second + 9] ^= 1  # the length CRC of the second record
    assert core.scan_records(bad_header, 0, len(buf), len(buf), True, 100) == ([records[0]], second,
                                                                                core.SCAN_BAD_HEADER)
    bad_data = bytearray(buf)
    bad_data[second + 12] ^= 1  # the second record's data
    assert core.scan_records(bad_data, 0, len(buf), len(buf), True, 100) == ([records[0]], second, core.SCAN_BAD_DATA)
    found, stop, status = core.scan_records(bad_data, 0, len(buf), len(buf), False, 100)  # data CRC not checked
    assert len(found) == 3 and stop == len(buf) and status == core.SCAN_LIMIT


@needs_core
def test_scan_records_stops_at_max_records_and_at_the_limit():
    records = [bytes([i]) * i for i in range(10)]
    buf = b"".join(frame(r) for r in records)
    assert core.scan_records(buf, 0, len(buf), len(buf), True, 4)[::2] == (records[:4], core.SCAN_FULL)
    limit = len(frame(records[0])) + 1  # records that start before the limit are handed out
    found, stop, status = core.scan_records(buf, 0, len(buf), limit, True, 100)
    assert found == records[:2] and status == core.SCAN_LIMIT


@needs_core
def test_scan_records_never_trusts_a_lying_length():
    buf = header(2**62) + b"x" * 100
    found, stop, status = core.scan_records(buf, 0, len(buf), len(buf), True, 10)
    assert (found, stop, status) == ([], 0, core.SCAN_MORE)  # the caller reads on and reports the truncation


@needs_core
@pytest.mark.parametrize("lo, hi", [(-1, 4), (0, 10**6), (5, 4)])
def test_kernels_refuse_a_range_outside_the_buffer(lo, hi):
    with pytest.raises(ValueError, match="bad range"):
        core.scan_records(b"x" * 100, lo, hi, hi, True, 10)
    with pytest.raises(ValueError, match="bad range"):
        core.find_header(b"x" * 100, lo, hi)


@needs_core
@settings(max_examples=150, deadline=None)
@given(junk=st.binary(max_size=400), record=st.binary(max_size=50))
def test_find_header_finds_the_first_valid_header(junk, record):
    buf = junk + frame(record)
    at = core.find_header(buf, 0, len(buf))
    expected = next(i for i in range(len(buf) - 11) if reference_masked(buf[i:i + 8]) == struct.unpack_from(
        "<I", buf, i + 8)[0])
    assert at == expected


@needs_core
def test_find_header_without_a_candidate():
    assert core.find_header(bytes(11), 0, 11) == -1
    assert core.find_header(b"", 0, 0) == -1


def test_skip_after_corruption_is_fast_and_finds_the_next_record(tmp_path, backend):
    """20 MiB of zeros then a good record: on_error="skip" reaches the record (issue: a byte-by-byte resync)."""
    path = tmp_path / "zeros.tfrecord"
    size = (20 << 20) if backend == "native" else (1 << 20)
    path.write_bytes(bytes(size) + frame(b"found me"))
    with pytest.warns(tfr_torch.SkippedRecordWarning):
        assert list(tfr_torch.read_records(str(path), on_error="skip")) == [b"found me"]


# ---------------------------------------------------------------------------------------------- differential

KINDS = {"int64": torch.int64, "float": torch.float32, "bytes": tfr_torch.string}

feature_values = st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6).map(lambda v: ("int64", np.array(v, dtype=np.int64))),
    st.lists(st.floats(width=32, allow_nan=False), max_size=6).map(lambda v: ("float", np.array(v, np.float32))),
    st.lists(st.binary(max_size=40), min_size=1, max_size=4).map(lambda v: ("bytes", v)),
)
examples = st.dictionaries(st.sampled_from(["a", "b", "c", "long/key/name", "é"]), feature_values, max_size=5)


def _mutations(data: bytes, rnd: random.Random) -> list[bytes]:
    """Byte-level mutations of a serialized record: flips, truncations, insertions, lying lengths."""
    out = []
    if not data:
        return [b"\x0a", b"\x0a\x05"]
    for _ in range(4):
        i = rnd.randrange(len(data))
        flipped = bytearray(data)
        flipped[i] ^= 1 << rnd.randrange(8)
        out.append(bytes(flipped))
    out.append(data[: rnd.randrange(len(data))])
    i = rnd.randrange(len(data) + 1)
    out.append(data[:i] + bytes([rnd.randrange(256)]) + data[i:])
    i = rnd.randrange(len(data))
    lying = bytearray(data)
    lying[i] = rnd.choice([0x7F, 0xFF, 0x80, 0x01])
    out.append(bytes(lying))
    i = rnd.randrange(len(data))
    out.append(data[:i] + b"\xff\xff\xff\xff\x0f" + data[i + 1 :])  # a varint length of 2**32 - 1
    return out


def _outcome(fn):
    """What a call gives, comparable across backends: its values, or its error's class and message."""
    try:
        result = fn()
    except (TFRecordError, ValueError, TypeError) as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", _plain(result))


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return ("nested", [_plain(t) for t in value.unbind()])
        if value.is_sparse:
            value = value.coalesce()
            return ("sparse", value.indices().tolist(), _plain(value.values()), list(value.shape))
        if value.dtype == torch.float32:
            return ("f32", list(value.shape), value.contiguous().view(torch.int32).flatten().tolist())
        return (str(value.dtype), list(value.shape), value.flatten().tolist())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "values") and hasattr(value, "offsets"):  # a ragged result
        return ("ragged", _plain(value.values()), _plain(value.offsets()))
    if isinstance(value, tfr_torch.RaggedTensor):
        return ("RaggedTensor", _plain(value.values), _plain(list(value.nested_row_splits)))
    return value


def _specs(example: dict) -> list[dict]:
    """Specs over a record's keys: VarLen of each key's kind, FixedLen where the count fits, a missing key."""
    var = {key: tfr_torch.VarLenFeature(KINDS[kind]) for key, (kind, _) in example.items()}
    fixed = {key: tfr_torch.FixedLenFeature([len(values)], KINDS[kind]) for key, (kind, values) in example.items()
             if kind != "bytes"}
    fixed["missing"] = tfr_torch.FixedLenFeature([2], torch.int64, default_value=[7, 8])
    wrong = {key: tfr_torch.VarLenFeature(torch.int64 if kind != "int64" else torch.float32)
             for key, (kind, _) in example.items()}
    return [s for s in (var, fixed, wrong) if s]


def _both(fn):
    previous = tfr_torch.set_backend("python")
    try:
        reference = _outcome(fn)
        tfr_torch.set_backend("native")
        compiled = _outcome(fn)
    finally:
        tfr_torch.set_backend(previous)
    return reference, compiled


@needs_core
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(examples, min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1))
def test_both_backends_give_the_same_values_or_the_same_error(batch, seed):
    rnd = random.Random(seed)
    records = [tfr_torch.encode_example({k: v for k, (_, v) in ex.items()}) for ex in batch]
    specs = [spec for ex in batch for spec in _specs(ex)] or [{"x": tfr_torch.VarLenFeature(torch.int64)}]
    candidates = [records] + [[m] + records[1:] for m in _mutations(records[0], rnd)]
    for recs in candidates:
        for spec in specs[:3]:
            reference, compiled = _both(lambda: tfr_torch.parse_example(recs, spec))
            assert compiled == reference, (recs, spec)
            reference, compiled = _both(lambda: tfr_torch.parse_single_example(recs[0], spec))
            assert compiled == reference, (recs[0], spec)


step_lists = st.one_of(
    st.lists(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3), max_size=4).map(
        lambda steps: ("int64", [np.array(v, dtype=np.int64) for v in steps])),
    st.lists(st.lists(st.floats(width=32, allow_nan=False), min_size=2, max_size=2), max_size=4).map(
        lambda steps: ("float", [np.array(v, dtype=np.float32) for v in steps])),
    st.lists(st.lists(st.binary(max_size=20), min_size=1, max_size=3), max_size=4).map(lambda steps: ("bytes", steps)),
)
sequence_examples = st.tuples(examples, st.dictionaries(st.sampled_from(["s", "t", "long/list", "ü"]), step_lists,
                                                        max_size=3))


def _sequence_specs(batch: list) -> list[tuple[dict, dict]]:
    """(context, sequence) specs over the batch's keys: VarLen lists, FixedLenSequence where a float list has two
    values per step, Ragged, two lists read together (equal step counts or an error), a required missing list, a
    wrong kind."""
    context = {key: tfr_torch.VarLenFeature(KINDS[kind]) for ex, _ in batch for key, (kind, _) in ex.items()}
    lists = {key: kind for _, ls in batch for key, (kind, _) in ls.items()}
    var = {key: tfr_torch.VarLenFeature(KINDS[kind]) for key, kind in lists.items()}
    dense = {key: tfr_torch.FixedLenSequenceFeature([2], torch.float32, allow_missing=True)
             for key, kind in lists.items() if kind == "float"}
    ragged = {key: tfr_torch.RaggedFeature(KINDS[kind]) for key, kind in lists.items()}
    ints = [key for key, kind in lists.items() if kind == "int64"]
    if ints and len(lists) > 1:
        other = next(key for key in lists if key != ints[0])
        ragged["pair"] = tfr_torch.RaggedFeature(KINDS[lists[other]], value_key=other,
                                                 partitions=[tfr_torch.RowLengths(ints[0])])
    required = {"absent": tfr_torch.FixedLenSequenceFeature([], torch.int64)}
    wrong = {key: tfr_torch.VarLenFeature(torch.int64 if kind != "int64" else torch.float32)
             for key, kind in lists.items()}
    return [(context, var), ({}, dense), ({}, ragged), (context, required), ({}, wrong)]


@needs_core
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(sequence_examples, min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1))
def test_both_backends_give_the_same_sequence_values_or_the_same_error(batch, seed):
    """The SequenceExample kernels (context by the Example decoder, feature lists in one pass) against the
    reference, on valid and mutated records."""
    rnd = random.Random(seed)
    records = [tfr_torch.encode_sequence_example({k: v for k, (_, v) in ctx.items()},
                                                 {k: v for k, (_, v) in ls.items()}) for ctx, ls in batch]
    specs = [(c, s) for c, s in _sequence_specs(batch) if c or s]
    candidates = [records] + [[m] + records[1:] for m in _mutations(records[0], rnd)]
    for recs in candidates:
        for context, sequence in specs:
            reference, compiled = _both(lambda: tfr_torch.parse_sequence_example(recs, context, sequence))
            assert compiled == reference, (recs, context, sequence)
            reference, compiled = _both(lambda: tfr_torch.parse_single_sequence_example(recs[0], context, sequence))
            assert compiled == reference, (recs[0], context, sequence)


@needs_core
def test_sequence_examples_take_the_kernels():
    """Writers' SequenceExamples are decoded by the kernels (not handed back to the reference)."""
    from tfr_torch.decode.sequence_plan import SequenceExamplePlan
    from tfr_torch.decode.units import Locator

    records = [tfr_torch.encode_sequence_example({"id": i}, {"tok": [[1, 2], [3]] * i, "w": [[b"a"]] * i})
               for i in range(5)]
    plan = SequenceExamplePlan({"id": tfr_torch.FixedLenFeature([], torch.int64)},
                               {"tok": tfr_torch.VarLenFeature(torch.int64),
                                "w": tfr_torch.RaggedFeature(tfr_torch.string)})
    parsed = plan._native_parse(core, records, Locator(None), False)
    assert parsed is not None
    context, lists, _ = parsed
    assert context["id"].tolist() == [0, 1, 2, 3, 4]
    assert lists["tok"].to_dense()[2, :5].tolist() == [[1, 2], [3, 0], [1, 2], [3, 0], [0, 0]]


@needs_core
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.binary(max_size=64), min_size=1, max_size=8), seed=st.integers(0, 2**32 - 1))
def test_both_backends_read_mutated_files_the_same_way(tmp_path_factory, records, seed):
    rnd = random.Random(seed)
    data = b"".join(frame(r) for r in records)
    folder = tmp_path_factory.mktemp("files")
    for j, mutated in enumerate([data] + _mutations(data, rnd)):
        path = folder / f"m{j}.tfrecord"
        path.write_bytes(mutated)

        def read_all(on_error):
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return list(tfr_torch.read_records(str(path), on_error=on_error))

        for on_error in ("raise", "skip"):
            reference, compiled = _both(lambda: read_all(on_error))
            assert compiled == reference, (mutated, on_error)


# ---------------------------------------------------------------------------------------------- memory, threads

TABULAR = {
    "id": tfr_torch.FixedLenFeature([], torch.int64),
    "x": tfr_torch.FixedLenFeature([16], torch.float32),
    "tags": tfr_torch.VarLenFeature(torch.int64),
    "name": tfr_torch.FixedLenFeature([], tfr_torch.string),
}


def _tabular(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [tfr_torch.encode_example({"id": i, "x": rng.random(16, dtype=np.float32),
                                      "tags": rng.integers(0, 1000, size=i % 7), "name": b"n%d" % i})
            for i in range(n)]


@needs_core
def test_parse_example_peak_memory_is_of_the_order_of_its_output():
    records = _tabular(256)
    previous = tfr_torch.set_backend("native")
    try:
        tfr_torch.parse_example(records, TABULAR)  # warm: plans, the decoder
        tracemalloc.start()
        out = tfr_torch.parse_example(records, TABULAR)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        tfr_torch.set_backend(previous)
    numeric = sum(t.numel() * t.element_size() for t in (out["id"], out["x"], out["tags"].values()))
    names = sum(len(s) + 40 for s in out["name"])  # one bytes object per string value, as the user asked for bytes
    # a Python object per numeric value would cost about 32 bytes each (256 * 20 values: 160 KiB)
    assert peak < 2 * (numeric + names) + 64 * 1024, (peak, numeric, names)


@needs_core
def test_decoding_in_threads_gives_the_same_batches():
    batches = [_tabular(256, seed) for seed in range(6)]
    previous = tfr_torch.set_backend("native")
    try:
        expected = [_plain(tfr_torch.parse_example(b, TABULAR)) for b in batches]
        got: dict[int, object] = {}

        def work(k: int) -> None:
            for _ in range(3):
                for i in range(k, len(batches), 2):
                    got[i] = _plain(tfr_torch.parse_example(batches[i], TABULAR))

        threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        tfr_torch.set_backend(previous)
    assert [got[i] for i in range(len(batches))] == expected


# ---------------------------------------------------------------------------------------------- inflate libraries


def _inflate_libraries():
    import zlib

    libs = [("zlib", zlib)]
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        pass
    else:
        libs.append(("zlib-ng", zlib_ng))
    return libs


@pytest.mark.parametrize("name, lib", _inflate_libraries(), ids=[n for n, _ in _inflate_libraries()])
@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_every_inflate_library_reads_and_rejects_alike(tmp_path, monkeypatch, name, lib, compression,
                                                       inflate_thread):
    from tfr_torch.format import inflate as codec

    records = [bytes([i % 251]) * (i * 37 % 5000) for i in range(200)]
    path = tmp_path / "data.tfrecord"
    with tfr_torch.TFRecordWriter(str(path), compression=compression) as writer:
        for r in records:
            writer.write(r)
    data = path.read_bytes()
    broken = bytearray(data)
    broken[len(data) // 2] ^= 0xFF
    (tmp_path / "broken.tfrecord").write_bytes(bytes(broken))
    (tmp_path / "cut.tfrecord").write_bytes(data[: len(data) * 2 // 3])
    monkeypatch.setattr(codec, "_inflate", lib)
    monkeypatch.setattr(codec, "_INFLATE_ERRORS", (__import__("zlib").error, lib.error))
    assert list(tfr_torch.read_records(str(path), compression=compression)) == records
    for bad, error in (("broken", TFRecordError), ("cut", tfr_torch.TruncatedRecordError)):
        with pytest.raises(error, match=rf"{bad}.tfrecord:\d+: ") as caught:
            list(tfr_torch.read_records(str(tmp_path / f"{bad}.tfrecord"), compression=compression))
        got = str(caught.value)
        monkeypatch.setattr(codec, "_inflate", __import__("zlib"))
        with pytest.raises(type(caught.value)) as reference:
            list(tfr_torch.read_records(str(tmp_path / f"{bad}.tfrecord"), compression=compression))
        monkeypatch.setattr(codec, "_inflate", lib)
        assert got == str(reference.value)  # the same error, at the same offset, as with zlib


def test_inflate_library_can_be_chosen(monkeypatch):
    code = "from tfr_torch.format import inflate as c; print(c.INFLATE)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TFR_TORCH_INFLATE": "zlib"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "zlib"
    bad = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TFR_TORCH_INFLATE": "fast"},
                         capture_output=True, text=True)
    assert 'TFR_TORCH_INFLATE must be "auto", "zlib" or "zlib-ng", got \'fast\'' in bad.stderr


@needs_core
@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(0, 20), max_size=50))
def test_sparse_indices_equal_numpy(counts):
    array = np.array(counts, dtype=np.int64)
    got = np.frombuffer(core.sparse_indices(array), dtype=np.int64).reshape(2, -1)
    rows = np.repeat(np.arange(len(counts)), counts)
    positions = np.concatenate([np.arange(c) for c in counts]) if counts else np.zeros(0, np.int64)
    assert got[0].tolist() == rows.tolist() and got[1].tolist() == positions.tolist()


@needs_core
def test_sparse_indices_refuses_negative_and_huge_counts():
    with pytest.raises(ValueError, match="count -1 of row 1 is out of range"):
        core.sparse_indices(np.array([1, -1], dtype=np.int64))
    with pytest.raises(ValueError, match="out of range"):
        core.sparse_indices(np.array([2**62, 2**62], dtype=np.int64))
    with pytest.raises(ValueError, match="not a whole number of int64 counts"):
        core.sparse_indices(b"123")


@needs_core
@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.binary(max_size=300), max_size=20), offset=st.integers(0, 64))
def test_pack_and_unpack_bytes_round_trip(values, offset):
    """The transport's loops: a list of bytes written back to back into a buffer and copied out again."""
    buffer = bytearray(offset + sum(map(len, values)) + 3)
    assert core.bytes_total(values) == sum(map(len, values))
    lengths = core.pack_bytes(values, buffer, offset)
    assert lengths == [len(v) for v in values]
    assert bytes(buffer[offset : offset + sum(lengths)]) == b"".join(values)
    out = core.unpack_bytes(buffer, offset, lengths)
    assert out == values and all(type(v) is bytes for v in out)


@needs_core
def test_pack_and_unpack_bytes_refuse_what_does_not_fit():
    assert core.bytes_total([b"a", bytearray(b"b")]) == -1 and core.bytes_total((b"a",)) == -1
    with pytest.raises(ValueError, match="4 bytes from offset 1 do not fit in 4"):
        core.pack_bytes([b"ab", b"cd"], bytearray(4), 1)
    with pytest.raises(ValueError, match="item 1 is bytearray, not bytes"):
        core.pack_bytes([b"ab", bytearray(b"cd")], bytearray(8), 0)
    with pytest.raises(BufferError):
        core.pack_bytes([b"ab"], b"read-only", 0)
    with pytest.raises(ValueError, match="item 1 of 3 bytes at offset 2 runs past the 4-byte buffer"):
        core.unpack_bytes(b"abcd", 0, [2, 3])
    with pytest.raises(ValueError, match="item 0 of -1 bytes"):
        core.unpack_bytes(b"abcd", 0, [-1])
    with pytest.raises(ValueError, match="offset 5 is outside the 4-byte buffer"):
        core.unpack_bytes(b"abcd", 5, [])
    with pytest.raises(ValueError, match="runs past"):
        core.unpack_bytes(b"abcd", 0, [2**62, 2**62])


@needs_core
def test_example_decoder_lays_columns_out_in_one_arena():
    """decode() returns one writable buffer (the arena) and, per key, offsets into it: presence, counts, values
    and, for keys asked for, the [2, total] COO indices (row, position); bytes values come back as a list."""
    core = _native.core if _native.core is not None else _native._compiled
    records = [tfr_torch.encode_example({"t": [5, 6, 7], "f": [1.5], "s": [b"a", b"bc"]}),
               tfr_torch.encode_example({"f": [2.5], "s": [b"d"]}),
               tfr_torch.encode_example({"t": [8], "f": [3.5], "s": [b"e"]})]
    decoder = core.ExampleDecoder([b"t", b"f", b"s"], bytes([2, 1, 0]), bytes([1, 0, 1]))
    status, arena, (t, f, s), dense = decoder.decode(records)
    assert status == 0 and dense is False  # no dense columns asked for
    view = memoryview(arena)
    assert not view.readonly
    present, counts, values, total, uniform, indices, longest = t
    assert np.frombuffer(arena, np.bool_, 3, present).tolist() == [True, False, True]
    assert np.frombuffer(arena, np.int64, 3, counts).tolist() == [3, 0, 1]
    assert np.frombuffer(arena, np.int64, total, values).tolist() == [5, 6, 7, 8]
    assert (total, uniform, longest) == (4, -1, 3)
    assert np.frombuffer(arena, np.int64, 2 * total, indices).reshape(2, total).tolist() == [[0, 0, 0, 2],
                                                                                            [0, 1, 2, 0]]
    assert np.frombuffer(arena, np.float32, f[3], f[2]).tolist() == [1.5, 2.5, 3.5]
    assert f[3:] == (3, 1, -1, 1)  # every record has one float; no indices asked for
    assert s[2] == [b"a", b"bc", b"d", b"e"] and s[3:] == (4, -1, -1, 2)  # indices are for numeric columns only
    with pytest.raises(ValueError, match="one byte per key"):
        core.ExampleDecoder([b"t", b"f"], bytes([2, 1]), bytes([1]))


@needs_core
def test_several_bytes_columns_each_get_their_own_values():
    """The kernel finds every bytes column's values (as slices of the records, without the GIL) in one array, column
    after column: each column gets its own values, with a column given as spans, a missing or empty feature and a
    numeric column between them."""
    core = _native.core if _native.core is not None else _native._compiled
    records = [tfr_torch.encode_example({"a": [b"a0", b"a1"], "n": [1], "b": [b""], "c": [b"c0"]}),
               tfr_torch.encode_example({"n": [2], "b": [b"b1", b"b2", b"b3"], "c": [b"c1"],
                                         "a": np.array([], dtype=bytes)}),
               tfr_torch.encode_example({"a": [b"x" * 300], "n": [3], "c": [b"c2"]})]
    decoder = core.ExampleDecoder([b"a", b"n", b"b", b"c"], bytes([0, 2, 0, 0]), bytes(4), bytes([0, 0, 0, 1]))
    for spans in (False, True):
        status, arena, (a, n, b, c), _ = decoder.decode(records, spans)
        assert status == 0
        assert a[2] == [b"a0", b"a1", b"x" * 300] and a[3] == 3
        assert b[2] == [b"", b"b1", b"b2", b"b3"] and b[3] == 4
        assert np.frombuffer(arena, np.int64, 3, b[1]).tolist() == [1, 3, 0]
        assert np.frombuffer(arena, np.int64, n[3], n[2]).tolist() == [1, 2, 3]
        if spans:  # (record, start, length) of each value, in the arena
            spans_of_c = np.frombuffer(arena, np.int64, 3 * c[3], c[2]).reshape(-1, 3)
            assert [records[i][start : start + length] for i, start, length in spans_of_c] == [b"c0", b"c1", b"c2"]
        else:
            assert c[2] == [b"c0", b"c1", b"c2"]
    spec = {"a": tfr_torch.VarLenFeature(tfr_torch.string), "b": tfr_torch.VarLenFeature(tfr_torch.string),
            "c": tfr_torch.FixedLenFeature([], tfr_torch.string), "n": tfr_torch.FixedLenFeature([], torch.int64)}
    reference, compiled = _both(lambda: tfr_torch.parse_example(records, spec))
    assert compiled == reference and compiled[0] == "ok"


@needs_core
def test_example_decoder_lays_dense_columns_back_to_back():
    """The columns given as `dense` (key, count) pairs lie back to back in that order when every record holds each
    with its count (dense is True), padded only where the kind changes; otherwise each lies where it would, and
    their values are the same."""
    core = _native.core if _native.core is not None else _native._compiled
    records = [tfr_torch.encode_example({"a": i, "f": [i + 0.5, i + 0.25], "b": 10 * i, "v": [1] * (i + 1)})
               for i in range(3)]
    pairs = np.array([(2, 1), (0, 1), (1, 2)], dtype=np.int64).tobytes()  # b, a, then f
    decoder = core.ExampleDecoder([b"a", b"f", b"b", b"v"], bytes([2, 1, 2, 2]), bytes(4), bytes(4), pairs)
    status, arena, (a, f, b, v), dense = decoder.decode(records)
    assert status == 0 and dense is True
    assert (b[2], a[2], f[2]) == (0, 3 * 8, 6 * 8)  # one block: b's 3 int64, a's 3 int64, f's 6 float32
    assert np.frombuffer(arena, np.int64, 6, 0).tolist() == [0, 10, 20, 0, 1, 2]
    assert np.frombuffer(arena, np.float32, 6, f[2]).tolist() == [0.5, 0.25, 1.5, 1.25, 2.5, 2.25]
    assert np.frombuffer(arena, np.int64, v[3], v[2]).tolist() == [1] * 6
    status, arena, (a, f, b, v), dense = decoder.decode(records + [tfr_torch.encode_example({"a": 7, "f": [1.0]})])
    assert status == 0 and dense is False  # a record without b, one with one float: laid out column by column
    assert np.frombuffer(arena, np.int64, a[3], a[2]).tolist() == [0, 1, 2, 7]
    assert np.frombuffer(arena, np.float32, f[3], f[2]).tolist() == [0.5, 0.25, 1.5, 1.25, 2.5, 2.25, 1.0]
    for bad in ([(3, 0)], [(0, 1), (0, 1)], [(4, 1)], [(-1, 1)], [(0, 2**33)]):
        with pytest.raises(ValueError, match="dense needs"):
            core.ExampleDecoder([b"a", b"f", b"b", b"v"], bytes([2, 1, 2, 0]), bytes(4), bytes(4),
                                np.array(bad, dtype=np.int64).tobytes())
    with pytest.raises(ValueError, match="dense needs"):
        core.ExampleDecoder([b"a"], bytes([2]), bytes(1), bytes(1), b"\0" * 8)


def _dense_spec(n: int) -> dict[str, object]:
    """n FixedLen features: int64 scalars, float32 scalars and float32 [2] vectors, a third of each."""
    kinds = [tfr_torch.FixedLenFeature([], torch.int64), tfr_torch.FixedLenFeature([], torch.float32),
             tfr_torch.FixedLenFeature([2], torch.float32, default_value=[-1.0, -2.0])]
    return {f"k{i}": kinds[i % 3] for i in range(n)}


def _dense_records(n: int, count: int) -> list[bytes]:
    return [tfr_torch.encode_example({f"k{i}": (r + i, float(r) - i, [r * 0.5, i * 0.25][: 2])[i % 3]
                                      for i in range(n)}) for r in range(count)]


@needs_core
@pytest.mark.parametrize("n", [3, 9, 40])
def test_dense_features_from_one_block_equal_the_reference(n):
    """FixedLenFeatures made as views of the kernel's dense block: the reference's values, dtypes and shapes, in
    the spec's order, for a batch, one example, and a batch where one example lacks a feature (its default, by the
    column-by-column path); writable views of disjoint memory."""
    spec, records = _dense_spec(n), _dense_records(n, 5)
    missing = records[:2] + [tfr_torch.encode_example({f"k{i}": (1, 1.0)[i % 3] for i in range(n) if i % 3 < 2})]
    for batch in (records, missing):
        reference, compiled = _both(lambda: tfr_torch.parse_example(batch, spec))
        assert compiled == reference and compiled[0] == "ok"
    reference, compiled = _both(lambda: tfr_torch.parse_single_example(records[1], spec))
    assert compiled == reference and compiled[0] == "ok"
    previous = tfr_torch.set_backend("native")
    try:
        out = tfr_torch.parse_example(records, spec)
    finally:
        tfr_torch.set_backend(previous)
    assert list(out) == list(spec)
    before = {key: value.clone() for key, value in out.items()}
    out["k0"] += 100
    assert all(torch.equal(out[key], before[key]) for key in spec if key != "k0")


def _python_calls(fn) -> int:
    """How many Python-level calls (functions and builtins, profile events) a call of fn makes. The garbage
    collector is held off meanwhile: a collection it started there would run finalizers of other tests' objects
    (Python calls fn did not make; seen once as 4 more calls under the sanitizer build)."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
        if enabled:
            gc.enable()
    return calls


@needs_core
def test_python_calls_per_batch_do_not_grow_with_dense_features():
    """Issue 26: with the compiled core, a batch of FixedLenFeatures of a few dtypes and shapes costs the same
    number of Python calls however many features it has (one view per dtype and shape; the tensors of a group are
    made by one unbind)."""
    previous = tfr_torch.set_backend("native")
    try:
        calls = []
        for n in (9, 30, 90):
            spec, records = _dense_spec(n), _dense_records(n, 16)
            tfr_torch.parse_example(records, spec)  # warm: the plan compiled, the kernel made
            calls.append(_python_calls(lambda: tfr_torch.parse_example(records, spec)))
    finally:
        tfr_torch.set_backend(previous)
    assert calls[0] == calls[1] == calls[2], calls


@needs_core
def test_native_results_are_writable_and_do_not_share_values():
    """Tensors made from the kernel's arena are writable views of disjoint parts of it (no warning from torch
    about non-writable memory), and they keep it alive after the rest of the batch is dropped."""
    import gc
    import warnings

    records = _tabular(64)
    previous = tfr_torch.set_backend("native")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = tfr_torch.parse_example(records, TABULAR)
        tfr_torch.set_backend("python")
        expected = tfr_torch.parse_example(records, TABULAR)
    finally:
        tfr_torch.set_backend(previous)
    ids, x, tags = out["id"], out["x"], out["tags"]
    del out
    gc.collect()
    x_before = x.clone()
    ids += 1000
    tags.values().mul_(-1)
    assert torch.equal(x, x_before)
    assert torch.equal(ids, expected["id"] + 1000)
    assert torch.equal(tags.values(), -expected["tags"].values())
    assert torch.equal(tags.indices(), expected["tags"].indices())


def _int64_records(runs: list[bytes]) -> list[bytes]:
    """Examples whose int64 feature "t" is one packed run of exactly these bytes (Int64List.value, field 1)."""
    from wirebytes import int64_feature, ld, raw_example

    return [raw_example({"t": int64_feature(ld(1, run))}) for run in runs]


@needs_core
@pytest.mark.parametrize("runs", [
    [bytes(range(0x00, 0x40)), bytes([0x80 | 5, 0x01]) * 9],  # one-byte values, two-byte values across 8-byte words
    [b"\xff" * 9 + b"\x01", b"\x80" * 9 + b"\x7f" + b"\x05"],  # 10-byte varints: bits past 64 are dropped
    [b"\x01\x02", b"\x80" * 10 + b"\x01"],  # an 11-byte varint: malformed
    [b"\x01" * 15 + b"\x85"],  # the last varint cut off at the run's end
    [b"\x01\x02\x03", b"\x85" * 12 + b"\x01" + b"\x02" * 7],  # 12 continuation bytes spanning a word boundary
])
@pytest.mark.parametrize("spec", [tfr_torch.VarLenFeature(torch.int64), tfr_torch.FixedLenFeature([2], torch.int64)])
def test_packed_int64_runs_decode_as_the_reference_decodes_them(runs, spec):
    """The kernel counts a packed int64 run by its varints' last bytes and finds a varint longer than 10 bytes only
    when it decodes the run: the values, or the error, are still the reference's."""
    records = _int64_records(runs)
    reference, compiled = _both(lambda: tfr_torch.parse_example(records, {"t": spec}))
    assert compiled == reference
    status = core.ExampleDecoder([b"t"], bytes([2])).decode(records)[0]
    malformed = any(b"\x80" * 10 in run or b"\x85" * 10 in run or run[-1] >= 0x80 for run in runs)
    assert (status == 2) == malformed  # a malformed record sends the batch to the reference, which names it
    if malformed:
        assert reference[0] == "error"


@needs_core
def test_keys_in_another_order_or_unplanned_at_a_position_are_found_by_name():
    """The kernel guesses each map position's key from the record before: records whose keys come in other orders,
    an unplanned key of the same length where a planned one stood, a key twice (the last wins), and more than 64
    entries all decode as the reference decodes them."""
    from wirebytes import int64_feature, packed_ints, raw_example

    def record(pairs):
        return raw_example(dict(pairs)) if len({k for k, _ in pairs}) == len(pairs) else b"".join(
            raw_example({k: v}) for k, v in pairs)  # a key twice: one Features map entry after the other

    ints = lambda *v: int64_feature(packed_ints(v))  # noqa: E731
    many = [(f"k{j:03d}", ints(j)) for j in range(70)]
    records = [record([("ab", ints(1)), ("cd", ints(2))]),
               record([("cd", ints(3)), ("ab", ints(4))]),
               record([("ac", ints(9)), ("cd", ints(5)), ("ab", ints(6))]),
               record([("ab", ints(7)), ("ab", ints(8)), ("cd", ints(0))]),
               record(many + [("ab", ints(10)), ("cd", ints(11))]),
               record(list(reversed(many)) + [("cd", ints(12)), ("ab", ints(13))])]
    spec = {"ab": tfr_torch.FixedLenFeature([], torch.int64), "cd": tfr_torch.FixedLenFeature([], torch.int64),
            "k069": tfr_torch.FixedLenFeature([], torch.int64, default_value=-1)}
    assert core.ExampleDecoder([b"ab", b"cd", b"k069"], bytes([2, 2, 2])).decode(records)[0] == 0  # the kernel's
    reference, compiled = _both(lambda: tfr_torch.parse_example(records, spec))
    assert compiled == reference
    assert reference[1]["ab"][2] == [1, 4, 6, 8, 10, 13] and reference[1]["cd"][2] == [2, 3, 5, 0, 11, 12]
    assert reference[1]["k069"][2] == [-1, -1, -1, -1, 69, 69]


# ---------------------------------------------------------------------------------------------- C sources

C_SOURCES = os.path.join(os.path.dirname(__file__), os.pardir, "tfr_torch", "_native", "src")
LONGEST_C_FUNCTION = 80  # lines from a function's opening brace to its closing one (STYLE.md: short functions)


def _c_function_lengths(text: str) -> dict[str, int]:
    """{function name: lines from its opening brace to its closing brace} of a C file: comments, strings and
    character literals blanked out, then top-level braces that follow a parameter list (not an `=`) counted."""
    blank = re.sub(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'",
                   lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    lengths, depth, head, start, name = {}, 0, "", 0, ""
    for at, char in enumerate(blank):
        if char == "{":
            if depth == 0:
                found = re.search(r"(\w+)\s*\([^;{}]*\)\s*$", head)
                name = found.group(1) if found and "=" not in head else ""
                start = blank.count("\n", 0, at)
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                if name:
                    lengths[name] = blank.count("\n", 0, at) - start + 1
                head = ""
        elif depth == 0:
            head = "" if char == ";" else head + char
    return lengths


def test_c_function_lengths_are_counted():
    text = "/* { */\nstatic int f(int a) {\n    if (a) {\n        return '}';\n    }\n    return 0;\n}\n" \
           "static const int table[] = {1, 2};\nint g(void) { return 1; }\n"
    assert _c_function_lengths(text) == {"f": 6, "g": 1}


def test_no_c_function_is_longer_than_80_lines():
    """The compiled core reads as STYLE.md asks: short functions, one wire concept each."""
    long_ones = {}
    for name in sorted(os.listdir(C_SOURCES)):
        if name.endswith(".c"):
            with open(os.path.join(C_SOURCES, name), encoding="utf-8") as f:
                lengths = _c_function_lengths(f.read())
            long_ones.update({f"{name}:{fn}": n for fn, n in lengths.items() if n > LONGEST_C_FUNCTION})
            assert lengths, f"{name}: no function found (the counter no longer reads the file)"
    assert not long_ones, f"functions over {LONGEST_C_FUNCTION} lines: {long_ones}"
