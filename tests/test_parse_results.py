"""What parse_example and friends return: the shapes and types of each spec kind in batch and single forms (empty
batches included), to_padded, nested (jagged) tensors, RaggedTensor and SparseBytes; and large records (another
path through a batch) decoded like small ones.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tfr_torch
from tfr_torch import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RowLengths,
    RowLimits,
    RowSplits,
    RowStarts,
    SparseFeature,
    UniformRowLength,
    ValueRowIds,
    VarLenFeature,
    encode_example,
    encode_sequence_example,
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
)
from parse_util import assert_same_tensor

pytestmark = pytest.mark.usefixtures("backend")  # every test on the reference and the compiled core


# ------------------------------------------------------------------------- result shapes and types


def test_empty_batch_for_every_spec_kind():
    spec = {
        "fixed": FixedLenFeature([], torch.int64),
        "fixed23": FixedLenFeature([2, 3], torch.float32),
        "fixed_str": FixedLenFeature([2], tfr_torch.string),
        "var": VarLenFeature(torch.float32),
        "var_str": VarLenFeature(tfr_torch.string),
        "sparse": SparseFeature("i", "v", torch.float32, 5),
        "sparse2": SparseFeature(["i", "j"], "v", torch.float32, [5, 6]),
        "sparse_str": SparseFeature("i", "s", tfr_torch.string, 5),
        "ragged": RaggedFeature(torch.int64),
        "ragged_str": RaggedFeature(tfr_torch.string, value_key="s"),
        "ragged2": RaggedFeature(torch.int32, value_key="r", partitions=[RowLengths("n")]),
        "seq": FixedLenSequenceFeature([3], torch.uint8, allow_missing=True),
    }
    out = parse_example([], spec)
    assert set(out) == set(spec)
    assert_same_tensor(out["fixed"], torch.zeros(0, dtype=torch.int64))
    assert_same_tensor(out["fixed23"], torch.zeros(0, 2, 3))
    assert out["fixed_str"] == []
    for key, shape in [("var", (0, 0)), ("sparse", (0, 5)), ("sparse2", (0, 5, 6))]:
        assert out[key].layout == torch.sparse_coo
        assert out[key].shape == shape
        assert out[key].dtype == torch.float32
        assert out[key]._nnz() == 0
    assert out["var_str"] == []
    assert isinstance(out["sparse_str"], tfr_torch.SparseBytes)
    assert out["sparse_str"].dense_shape == (0, 5) and out["sparse_str"].values == []
    assert out["sparse_str"].to_list() == []
    assert out["ragged"].layout == torch.jagged and out["ragged"].dtype == torch.int64
    assert out["ragged"].unbind() == ()
    assert out["ragged_str"] == []
    assert isinstance(out["ragged2"], tfr_torch.RaggedTensor)
    assert len(out["ragged2"]) == 0 and out["ragged2"].to_list() == []
    assert_same_tensor(out["seq"], torch.zeros(0, 0, 3, dtype=torch.uint8))


def test_empty_batch_of_sequence_examples():
    context, lists, lengths = parse_sequence_example(
        [], context_features={"c": FixedLenFeature([2], torch.float32), "cv": VarLenFeature(torch.int64)},
        sequence_features={"f": FixedLenSequenceFeature([2], torch.int64, allow_missing=True),
                           "v": VarLenFeature(torch.int64), "s": VarLenFeature(tfr_torch.string),
                           "r": RaggedFeature(torch.float32)})
    assert_same_tensor(context["c"], torch.zeros(0, 2))
    assert context["cv"].shape == (0, 0)
    assert_same_tensor(lists["f"], torch.zeros(0, 0, 2, dtype=torch.int64))
    assert_same_tensor(lengths["f"], torch.zeros(0, dtype=torch.int64))
    assert lists["v"].layout == torch.sparse_coo and lists["v"].shape == (0, 0, 0)
    assert lists["s"] == []
    assert isinstance(lists["r"], tfr_torch.RaggedTensor) and lists["r"].to_list() == []
    assert set(lengths) == {"f"}


@pytest.mark.usefixtures("batch_path")
def test_all_missing_varlen():
    records = [encode_example({"other": 1})] * 3
    out = parse_example(records, {"v": VarLenFeature(torch.float32), "s": VarLenFeature(tfr_torch.string)})
    assert out["v"].layout == torch.sparse_coo and out["v"].shape == (3, 0) and out["v"]._nnz() == 0
    padded, lengths = tfr_torch.to_padded(out["v"], -1.0)
    assert_same_tensor(padded, torch.zeros(3, 0))
    assert lengths.tolist() == [0, 0, 0]
    assert out["s"] == [[], [], []]
    single = parse_single_example(records[0], {"v": VarLenFeature(torch.float32)})["v"]
    assert single.shape == (0,) and single._nnz() == 0


@pytest.mark.usefixtures("batch_path")
def test_fixed_len_2x3_numeric_and_strings():
    numbers = np.arange(6, dtype=np.int64).reshape(2, 3)
    words = [[b"a", b"b", b"c"], [b"d", b"e", b"f"]]
    default_words = [[b"1", b"2", b"3"], [b"4", b"5", b"6"]]
    records = [encode_example({"n": numbers, "w": words}), encode_example({"n": numbers + 10})]
    spec = {"n": FixedLenFeature([2, 3], torch.int64),
            "w": FixedLenFeature([2, 3], tfr_torch.string, default_value=default_words)}
    out = parse_example(records, spec)
    assert_same_tensor(out["n"], torch.from_numpy(np.stack([numbers, numbers + 10])))
    assert out["w"] == [words, default_words]
    single = parse_single_example(records[0], spec)
    assert_same_tensor(single["n"], torch.from_numpy(numbers))
    assert single["w"] == words
    # scalar strings come back as bytes, [n] as a list
    record = encode_example({"s": "héllo", "l": [b"x", b"y"]})
    spec = {"s": FixedLenFeature([], tfr_torch.string), "l": FixedLenFeature([2], tfr_torch.string)}
    assert parse_single_example(record, spec) == {"s": "héllo".encode(), "l": [b"x", b"y"]}
    assert parse_example([record, record], spec) == {"s": ["héllo".encode()] * 2, "l": [[b"x", b"y"]] * 2}


@pytest.mark.usefixtures("batch_path")
def test_fixed_len_defaults_fill_missing_examples():
    records = [encode_example({"x": [1.0, 2.0], "id": 7}), encode_example({})]
    spec = {"x": FixedLenFeature([2], torch.float32, default_value=[-1.0, -0.0]),
            "id": FixedLenFeature([], torch.int64, default_value=-1),
            "t": FixedLenFeature([2], torch.float32, default_value=torch.tensor([0.5, 0.25])),
            "a": FixedLenFeature([2], torch.int32, default_value=np.array([3, 4]))}
    out = parse_example(records, spec)
    assert_same_tensor(out["x"], torch.tensor([[1.0, 2.0], [-1.0, -0.0]]))
    assert out["id"].tolist() == [7, -1]
    assert out["t"].tolist() == [[0.5, 0.25], [0.5, 0.25]]
    assert_same_tensor(out["a"], torch.tensor([[3, 4], [3, 4]], dtype=torch.int32))


@pytest.mark.parametrize("dtype, shape, default", [
    (torch.float32, [0], []), (torch.int64, [2, 0], [[], []]), (torch.uint8, [0, 3], []),
    (tfr_torch.string, [2, 0], [[], []]),
])
def test_zero_size_fixed_len_with_default(dtype, shape, default):
    """A zero-size FixedLenFeature holds no values: present (as an empty list), it gives [B, *shape]; its empty
    default is no default, as TensorFlow 2.21 reads it (tests/test_tf_live_audit.py), so a missing one is an error
    naming the key."""
    wire = {tfr_torch.string: bytes, torch.float32: np.float32}.get(dtype, np.int64)
    empty = np.array([], dtype=wire)
    spec = {"z": FixedLenFeature(shape, dtype, default_value=default)}
    present = [encode_example({"z": empty}), encode_example({"z": empty, "other": 1})]
    out = parse_example(present, spec)["z"]
    single = parse_single_example(present[0], spec)["z"]
    if dtype == tfr_torch.string:
        assert out == [default] * 2 and single == default
    else:
        assert_same_tensor(out, torch.zeros(2, *shape, dtype=dtype))
        assert_same_tensor(single, torch.zeros(*shape, dtype=dtype))
    for missing in (encode_example({}), encode_example({"other": 1})):
        with pytest.raises(tfr_torch.DecodeError, match="'z'"):
            parse_example(present + [missing], spec)
        with pytest.raises(tfr_torch.DecodeError, match="'z'"):
            parse_single_example(missing, spec)


def test_varlen_to_padded_2d():
    records = [encode_example({"t": [1, 2, 3]}), encode_example({"t": [4]}), encode_example({}),
               encode_example({"t": np.array([], dtype=np.int64)})]
    sparse = parse_example(records, {"t": VarLenFeature(torch.int64)})["t"]
    assert sparse.layout == torch.sparse_coo and sparse.shape == (4, 3)
    assert sparse.coalesce().indices().tolist() == [[0, 0, 0, 1], [0, 1, 2, 0]]
    values, lengths = tfr_torch.to_padded(sparse, -1)
    assert_same_tensor(values, torch.tensor([[1, 2, 3], [4, -1, -1], [-1, -1, -1], [-1, -1, -1]]))
    assert_same_tensor(lengths, torch.tensor([3, 1, 0, 0]))
    values, _ = tfr_torch.to_padded(sparse)
    assert values.tolist() == [[1, 2, 3], [4, 0, 0], [0, 0, 0], [0, 0, 0]]
    single = parse_single_example(records[0], {"t": VarLenFeature(torch.int64)})["t"]
    assert single.shape == (3,) and single.to_dense().tolist() == [1, 2, 3]
    strings = parse_example([encode_example({"s": [b"a", b"b"]}), encode_example({})],
                            {"s": VarLenFeature(tfr_torch.string)})["s"]
    assert strings == [[b"a", b"b"], []]
    with pytest.raises(TypeError, match=r"to_padded expects a sparse COO tensor .*got list"):
        tfr_torch.to_padded(strings)


def test_varlen_to_padded_3d_from_sequence_example():
    records = [encode_sequence_example({"id": 0}, {"f": [[1, 2], [3, 4]]}),
               encode_sequence_example({"id": 1}, {}),
               encode_sequence_example({"id": 2}, {"f": [[1, 2, 5], [3]]})]
    context, lists, lengths = parse_sequence_example(records, context_features={"id": FixedLenFeature([], torch.int64)},
                                                     sequence_features={"f": VarLenFeature(torch.int64)})
    assert context["id"].tolist() == [0, 1, 2]
    assert lengths == {}
    sparse = lists["f"]
    assert sparse.layout == torch.sparse_coo and sparse.shape == (3, 2, 3)
    values, step_lengths = tfr_torch.to_padded(sparse, -1)
    assert_same_tensor(values, torch.tensor([[[1, 2, -1], [3, 4, -1]],
                                             [[-1, -1, -1], [-1, -1, -1]],
                                             [[1, 2, 5], [3, -1, -1]]]))
    assert_same_tensor(step_lengths, torch.tensor([[2, 2], [0, 0], [3, 1]]))
    _, single = parse_single_sequence_example(records[2], sequence_features={"f": VarLenFeature(torch.int64)})
    assert single["f"].shape == (2, 3)
    assert tfr_torch.to_padded(single["f"], -1)[0].tolist() == [[1, 2, 5], [3, -1, -1]]


def test_fixed_len_sequence_feature_in_sequence_example():
    records = [encode_sequence_example(None, {"f": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "s": [[b"a"], [b"b"]]}),
               encode_sequence_example(None, {"f": [[7.0, 8.0]], "s": [[b"c"]]})]
    spec = {"f": FixedLenSequenceFeature([2], torch.float32), "s": FixedLenSequenceFeature([], tfr_torch.string)}
    _, lists, lengths = parse_sequence_example(records, sequence_features=spec)
    assert_same_tensor(lists["f"], torch.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
                                                 [[7.0, 8.0], [0.0, 0.0], [0.0, 0.0]]]))
    assert lists["s"] == [[b"a", b"b"], [b"c", b""]]
    assert lengths["f"].tolist() == [3, 1] and lengths["s"].tolist() == [2, 1]
    _, single = parse_single_sequence_example(records[1], sequence_features=spec)
    assert_same_tensor(single["f"], torch.tensor([[7.0, 8.0]]))
    assert single["s"] == [b"c"]
    with pytest.raises(ValueError, match=r"FixedLenSequenceFeature 'f': a default_value is not allowed"):
        parse_sequence_example(records, sequence_features={
            "f": FixedLenSequenceFeature([2], torch.float32, default_value=0.0)})


def test_fixed_len_sequence_feature_in_example():
    records = [encode_example({"s": [1, 2, 3, 4]}), encode_example({"s": [5, 6]}), encode_example({})]
    spec = {"s": FixedLenSequenceFeature([2], torch.int64, allow_missing=True, default_value=-1)}
    out = parse_example(records, spec)["s"]
    assert_same_tensor(out, torch.tensor([[[1, 2], [3, 4]], [[5, 6], [-1, -1]], [[-1, -1], [-1, -1]]]))
    assert_same_tensor(parse_single_example(records[1], spec)["s"], torch.tensor([[5, 6]]))
    assert_same_tensor(parse_single_example(records[2], spec)["s"], torch.zeros(0, 2, dtype=torch.int64))


def test_ragged_without_partitions_is_a_jagged_nested_tensor():
    records = [encode_example({"a": [1, 2, 3]}), encode_example({"a": [4]}), encode_example({}),
               encode_example({"a": np.array([], dtype=np.int64)})]
    out = parse_example(records, {"a": RaggedFeature(torch.int64)})["a"]
    assert out.is_nested and out.layout == torch.jagged
    assert out.dtype == torch.int64
    assert [t.tolist() for t in out.unbind()] == [[1, 2, 3], [4], [], []]
    single = parse_single_example(records[0], {"a": RaggedFeature(torch.int64)})["a"]
    assert not single.is_nested  # one example: dense, as TensorFlow gives it
    assert_same_tensor(single, torch.tensor([1, 2, 3]))
    words = parse_example([encode_example({"w": [b"x", b"y"]}), encode_example({})],
                          {"w": RaggedFeature(tfr_torch.string)})
    assert words["w"] == [[b"x", b"y"], []]
    # value_key reads another feature; UniformRowLength innermost gives uniform inner dimensions
    out = parse_example([encode_example({"v": [1, 2, 3, 4, 5, 6]}), encode_example({"v": [7, 8]})],
                        {"r": RaggedFeature(torch.int64, value_key="v", partitions=[UniformRowLength(2)])})["r"]
    assert out.layout == torch.jagged
    assert [t.tolist() for t in out.unbind()] == [[[1, 2], [3, 4], [5, 6]], [[7, 8]]]


@pytest.mark.usefixtures("batch_path")
def test_ragged_with_two_levels_is_a_ragged_tensor():
    records = [encode_example({"v": [1.0, 2.0, 3.0, 4.0, 5.0], "inner": [2, 0, 3], "outer": [2, 1]}),
               encode_example({"v": [6.0], "inner": [1], "outer": [0, 1]}),
               encode_example({})]
    spec = {"r": RaggedFeature(torch.float32, value_key="v", partitions=[RowLengths("outer"), RowLengths("inner")])}
    out = parse_example(records, spec)["r"]
    assert isinstance(out, tfr_torch.RaggedTensor)
    assert out.ragged_rank == 3 and len(out) == 3
    assert out.to_list() == [[[[1.0, 2.0], []], [[3.0, 4.0, 5.0]]], [[], [[6.0]]], []]
    assert out.values.dtype == torch.float32
    assert all(s.dtype == torch.int32 for s in out.nested_row_splits)
    assert out.row_splits.tolist() == [0, 2, 4, 4]
    # every partition type gives the same tensor
    for partition, data in [(RowSplits, [0, 2, 2, 5]), (RowStarts, [0, 2, 2]), (RowLimits, [2, 2, 5]),
                            (ValueRowIds, [0, 0, 2, 2, 2])]:
        r = parse_single_example(encode_example({"v": [1, 2, 3, 4, 5], "p": data}),
                                 {"r": RaggedFeature(torch.int64, value_key="v", partitions=[partition("p")],
                                                     row_splits_dtype=torch.int64)})["r"]
        assert [t.tolist() for t in r.unbind()] == [[1, 2], [], [3, 4, 5]], partition
    words = parse_example([encode_example({"w": [b"a", b"b", b"c"], "n": [1, 2]})],
                          {"r": RaggedFeature(tfr_torch.string, value_key="w", partitions=[RowLengths("n")])})
    assert words["r"] == [[[b"a"], [b"b", b"c"]]]


def test_ragged_feature_lists_in_sequence_example():
    empty = np.array([], dtype=np.int64)
    records = [encode_sequence_example(None, {"f": [[1, 2], empty, [3]]}), encode_sequence_example(None, {"f": [[4]]})]
    _, lists, _ = parse_sequence_example(records, sequence_features={"f": RaggedFeature(torch.int64)})
    assert isinstance(lists["f"], tfr_torch.RaggedTensor)
    assert lists["f"].to_list() == [[[1, 2], [], [3]], [[4]]]
    _, single = parse_single_sequence_example(records[0], sequence_features={"f": RaggedFeature(torch.int64)})
    assert single["f"].layout == torch.jagged
    assert [t.tolist() for t in single["f"].unbind()] == [[1, 2], [], [3]]


@pytest.mark.usefixtures("batch_path")
def test_sparse_feature_sorts_by_index_unless_already_sorted():
    # the order of the stored entries is what already_sorted is about: read it with _indices() / _values(), which
    # (unlike indices()) torch allows on a tensor not marked coalesced (duplicate indices are legal, as in TF)
    records = [encode_example({"i": [3, 1, 2], "v": [1.0, 2.0, 3.0]}), encode_example({"i": [0], "v": [9.0]})]
    out = parse_example(records, {"s": SparseFeature("i", "v", torch.float32, 5)})["s"]
    assert out.layout == torch.sparse_coo and out.shape == (2, 5)
    assert out._indices().tolist() == [[0, 0, 0, 1], [1, 2, 3, 0]]
    assert out._values().tolist() == [2.0, 3.0, 1.0, 9.0]
    assert out.to_dense().tolist() == [[0.0, 2.0, 3.0, 1.0, 0.0], [9.0, 0.0, 0.0, 0.0, 0.0]]
    kept = parse_example(records, {"s": SparseFeature("i", "v", torch.float32, 5, already_sorted=True)})["s"]
    assert kept._indices().tolist() == [[0, 0, 0, 1], [3, 1, 2, 0]]
    assert kept._values().tolist() == [1.0, 2.0, 3.0, 9.0]
    single = parse_single_example(records[0], {"s": SparseFeature("i", "v", torch.float32, 5)})["s"]
    assert single.shape == (5,) and single._indices().tolist() == [[1, 2, 3]]
    # two index keys: sorted row-major
    two = parse_single_example(encode_example({"i": [1, 0, 1], "j": [0, 2, 1], "v": [1, 2, 3]}),
                               {"s": SparseFeature(["i", "j"], "v", torch.int64, [2, 3])})["s"]
    assert two.shape == (2, 3)
    assert two._indices().tolist() == [[0, 1, 1], [2, 0, 1]]
    assert two._values().tolist() == [2, 1, 3]


@pytest.mark.usefixtures("batch_path")
def test_string_sparse_feature_gives_sparse_bytes():
    records = [encode_example({"i": [3, 1], "w": [b"c", b"a"]}), encode_example({"i": [0], "w": [b"z"]})]
    out = parse_example(records, {"s": SparseFeature("i", "w", tfr_torch.string, 4)})["s"]
    assert isinstance(out, tfr_torch.SparseBytes)
    assert out.dense_shape == (2, 4)
    assert out.indices.tolist() == [[0, 1], [0, 3], [1, 0]]
    assert out.values == [b"a", b"c", b"z"]
    assert out.to_list() == [[b"", b"a", b"", b"c"], [b"z", b"", b"", b""]]
    assert out.to_list(default=b"?") == [[b"?", b"a", b"?", b"c"], [b"z", b"?", b"?", b"?"]]
    single = parse_single_example(records[0], {"s": SparseFeature("i", "w", tfr_torch.string, 4)})["s"]
    assert single.dense_shape == (4,) and single.to_list() == [b"", b"a", b"", b"c"]


def test_large_records_decode_like_small_ones():
    """Batches of large records (here ~5 KB) take another path (see batch_path); the values must not change."""
    spec = {"img": tfr_torch.FixedLenFeature([], tfr_torch.string),
            "tags": tfr_torch.VarLenFeature(tfr_torch.string),
            "label": tfr_torch.FixedLenFeature([], torch.int64),
            "box": tfr_torch.FixedLenFeature([4], torch.float32)}
    rng = np.random.default_rng(5)
    records = [tfr_torch.encode_example({"img": rng.bytes(5000 + i),
                                         "tags": np.array([b"t%d" % j for j in range(i % 3)], dtype=bytes),
                                         "label": i * 7, "box": [i, 0.5, -1.0, 2.0]}) for i in range(9)]
    batch = tfr_torch.parse_example(records, spec)
    for i, record in enumerate(records):
        one = tfr_torch.parse_single_example(record, spec)
        assert batch["img"][i] == one["img"] and len(one["img"]) == 5000 + i
        assert batch["label"][i] == one["label"] == i * 7
        assert torch.equal(batch["box"][i], one["box"])
    assert batch["tags"] == [[b"t%d" % j for j in range(i % 3)] for i in range(9)]
