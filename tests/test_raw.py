"""decode_raw: tf.io.decode_raw for one record's bytes or a batch, writable results, exact error messages."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfr_torch
from tfr_torch import DecodeError, decode_raw

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.float32,
          torch.float64, torch.bool, torch.complex64, torch.uint16, torch.uint32]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_record_round_trips(dtype):
    values = torch.arange(12).to(dtype) if dtype is not torch.bool else torch.arange(12) % 3 == 0
    data = values.numpy().tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "non-writable buffer" warning
        out = decode_raw(data, dtype)
    assert out.dtype == dtype and torch.equal(out, values)
    out.zero_()  # writable, and owned: the bytes object is untouched
    assert data == values.numpy().tobytes()


def test_bfloat16():
    values = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    data = values.view(torch.int16).numpy().tobytes()
    assert torch.equal(decode_raw(data, torch.bfloat16), values)


def test_batch_and_shape():
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * i for i in range(4)]
    out = decode_raw([a.tobytes() for a in arrays], torch.float32, shape=[2, 3])
    assert out.shape == (4, 2, 3)
    assert torch.equal(out, torch.from_numpy(np.stack(arrays)))
    assert decode_raw([a.tobytes() for a in arrays], torch.float32, shape=(-1, 2)).shape == (4, 3, 2)
    assert decode_raw(arrays[0].tobytes(), "float32", (3, -1)).shape == (3, 2)
    assert decode_raw([], torch.int32).shape == (0, 0)


def test_string_column_of_a_parsed_batch(tmp_path):
    path = str(tmp_path / "d.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(5):
            writer.write(tfr_torch.encode_example({"x": np.full(4, i, np.int32).tobytes()}))
    spec = {"x": tfr_torch.FixedLenFeature([], tfr_torch.string)}
    batch = tfr_torch.parse_example(list(tfr_torch.read_records(path)), spec)
    out = decode_raw(batch["x"], torch.int32)
    assert torch.equal(out, torch.arange(5, dtype=torch.int32)[:, None].expand(5, 4))


def test_big_endian_and_fixed_length():
    data = np.array([1, 2, 258], dtype=">u2").tobytes()
    assert decode_raw(data, torch.int16, little_endian=False).tolist() == [1, 2, 258]
    assert decode_raw(data, torch.int16).tolist() == [256, 512, 513]
    out = decode_raw([b"\x01\x00\x02\x00", b"\x03\x00"], torch.int16, fixed_length=6)  # cut or zero-padded
    assert out.tolist() == [[1, 2, 0], [3, 0, 0]]
    assert decode_raw(b"\x01\x00\x02\x00", torch.int16, fixed_length=2).tolist() == [1]


def test_numpy_bytes_arrays():
    arr = np.array([b"\x01\x02", b"\x03\x04"], dtype="S2")
    assert decode_raw(arr, torch.uint8).tolist() == [[1, 2], [3, 4]]
    assert decode_raw(memoryview(b"\x05\x06"), torch.uint8).tolist() == [5, 6]


def test_errors_say_what_is_wrong():
    with pytest.raises(DecodeError) as err:
        decode_raw(b"\x00" * 7, torch.int32)
    assert str(err.value) == "decode_raw: 7 bytes is not a multiple of 4 (the size of torch.int32)"
    with pytest.raises(DecodeError) as err:
        decode_raw([b"\x00" * 8, b"\x00" * 8, b"\x00" * 5], torch.int32)
    assert str(err.value) == "decode_raw: item 2: 5 bytes is not a multiple of 4 (the size of torch.int32)"
    with pytest.raises(DecodeError) as err:
        decode_raw([b"\x00" * 8, b"\x00" * 4], torch.int32)
    assert str(err.value) == ("decode_raw: the items of a batch must have the same length to make one tensor: item 0 "
                              "has 8 bytes, item 1 has 4 (pass fixed_length= to cut or pad them, or decode them one "
                              "by one)")
    with pytest.raises(DecodeError) as err:
        decode_raw(b"\x00" * 12, torch.float32, shape=(2, 2))
    assert str(err.value) == ("decode_raw: 12 bytes (3 torch.float32 values) cannot be viewed as shape (2, 2): it "
                              "needs 4 values")
    with pytest.raises(TypeError) as err:
        decode_raw("text", torch.uint8)
    assert str(err.value) == "decode_raw: expected bytes, got str (encode it, or pass the record's bytes)"
    with pytest.raises(TypeError) as err:
        decode_raw([b"ab", 3], torch.uint8)
    assert str(err.value) == "decode_raw: item 1: expected bytes, got int"
    with pytest.raises(TypeError) as err:
        decode_raw(b"ab", "floaty")
    assert str(err.value) == "decode_raw: dtype must be a torch dtype (or its name, e.g. 'float32'), got 'floaty'"
    with pytest.raises(ValueError) as err:
        decode_raw(b"abcd", torch.int32, fixed_length=3)
    assert str(err.value) == ("decode_raw: fixed_length must be a non-negative multiple of 4 (the size of "
                              "torch.int32), got 3")


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([np.int16, np.int32, np.float32, np.float64, np.uint8, np.complex64, np.complex128]),
       st.lists(st.integers(0, 100), min_size=1, max_size=5), st.integers(0, 6), st.booleans())
def test_property_matches_numpy(np_dtype, seeds, width, little):
    def values(seed):
        rng = np.random.default_rng(seed)
        real = rng.integers(0, 100, width).astype(np_dtype)
        return real + 1j * rng.integers(0, 100, width) if np.issubdtype(np_dtype, np.complexfloating) else real

    arrays = [values(s).astype(np_dtype) for s in seeds]
    order = "<" if little else ">"
    data = [a.astype(np.dtype(np_dtype).newbyteorder(order)).tobytes() for a in arrays]
    out = decode_raw(data, torch.from_numpy(np.empty(0, np_dtype)).dtype, little_endian=little)
    assert np.array_equal(out.numpy(), np.stack(arrays))


def test_big_endian_complex_swaps_each_part_as_tensorflow_does():
    """TensorFlow byte-swaps the real and the imaginary float one by one (1+2j below, not 2+1j)."""
    assert decode_raw([b"?\x80\x00\x00@\x00\x00\x00"], torch.complex64, little_endian=False).tolist() == [[1 + 2j]]
    data = np.array([1.5 - 2j, -3 + 4.25j], dtype=">c16").tobytes()
    assert decode_raw(data, torch.complex128, little_endian=False).tolist() == [1.5 - 2j, -3 + 4.25j]
    assert decode_raw(data[::-1], torch.complex128).tolist() == [4.25 - 3j, -2 + 1.5j]
