"""Audit of the Hugging Face `datasets` integration (tfr_torch.hf) and the torchdata.nodes integration
(tfr_torch.nodes), with the real libraries.

tfr_torch.hf: the `datasets.Features` each FixedLen / VarLen / FixedLenSequence spec and dtype maps to (and the
refusal of Sparse / Ragged / bfloat16 specs); map-style and streaming datasets giving the values TFRecordDataset
gives, defaults included; TFRecord -> Dataset -> TFRecord keeping every byte; Dataset -> TFRecord -> Dataset keeping
every value of every `Value` dtype, empty lists of strings and images, wide unsigned integers, and nulls refused by
column; streaming datasets read by DataLoader workers and by `split_dataset_by_node` giving every record exactly
once; `IterableDataset.state_dict` resumption; the same files loaded under two split names; errors that name the
file, the offset and the key (missing keys, corrupt records, text that is not UTF-8).

tfr_torch.nodes: `Loader.state_dict()` taken after every item of an epoch (raw records, rows and batches the node
decodes, a Batcher + ParallelMapper + Prefetcher pipeline), with and without indexes and shuffling, for 1 and 2
ranks, resumes with exactly the rest of the epoch and then the next epoch whole; ranks with `pad=True`; a corrupt
record naming the file and offset through the node and through a thread mapper; SequenceExamples through
`ExampleDecoder`.
"""

import os
import pickle
from collections import Counter

import numpy as np
import pytest
import torch

import tfr_torch

datasets = pytest.importorskip("datasets")
pytest.importorskip("torchdata.nodes")
import tfr_torch.hf as hf  # noqa: E402
from datasets.distributed import split_dataset_by_node  # noqa: E402
from torchdata.nodes import Batcher, Loader, ParallelMapper, Prefetcher  # noqa: E402

from tfr_torch.nodes import ExampleDecoder, TFRecordNode  # noqa: E402
from chain_util import chain as _chain  # noqa: E402

S = tfr_torch.string
ID = {"id": tfr_torch.FixedLenFeature([], torch.int64)}


def _cache(tmp_path, name="hf-cache"):
    return str(tmp_path / name)


def _plain(value):
    """Streamed rows hold numpy arrays and scalars where a Dataset's rows hold lists and Python values."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    return value


def _id_files(tmp_path, counts, index=True):
    """Files of Examples {"id": n}, ids 100 * file + i: returns the paths and every id."""
    paths, ids = [], []
    for f, n in enumerate(counts):
        path = str(tmp_path / f"ids-{f}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(n):
                writer.write_example({"id": 100 * f + i})
                ids.append(100 * f + i)
        if index:
            tfr_torch.build_index(path)
        paths.append(path)
    return paths, ids


# ----- tfr_torch.hf: features ---------------------------------------------------------------------------------------

WIDE = {
    "id": tfr_torch.FixedLenFeature([], torch.int64),
    "s2": tfr_torch.FixedLenFeature([2], S),
    "s23": tfr_torch.FixedLenFeature([2, 3], S),
    "vs": tfr_torch.VarLenFeature(S),
    "seqs": tfr_torch.FixedLenSequenceFeature([], S, allow_missing=True),
    "seqs2": tfr_torch.FixedLenSequenceFeature([2], S, allow_missing=True),
    "i8": tfr_torch.FixedLenFeature([], torch.int8),
    "i16": tfr_torch.FixedLenFeature([], torch.int16),
    "i32": tfr_torch.FixedLenFeature([], torch.int32),
    "u8v": tfr_torch.FixedLenFeature([3], torch.uint8),
    "f16": tfr_torch.FixedLenFeature([2], torch.float16),
    "f64": tfr_torch.FixedLenFeature([], torch.float64),
    "b": tfr_torch.FixedLenFeature([2, 2], torch.bool),
    "vf": tfr_torch.VarLenFeature(torch.float32),
    "seq": tfr_torch.FixedLenSequenceFeature([], torch.int64, allow_missing=True),
    "seq3": tfr_torch.FixedLenSequenceFeature([2, 2], torch.int32, allow_missing=True),
    "a5": tfr_torch.FixedLenFeature([1, 1, 2, 1, 1], torch.float32),
}


def _wide_example(i):
    """Record i for WIDE: bytes with zero bytes at both ends, every list non-empty (see the empty-list test)."""
    return {"id": i, "s2": [b"a%d" % i, b"\x00b\x00"], "s23": [bytes([j, 0]) for j in range(6)],
            "vs": [b"v\x00"] * (1 + i % 3), "seqs": [b"q%d" % i] * (1 + i % 2),
            "seqs2": [b"r\x00", b"\x00"] * (1 + i % 2), "i8": -i, "i16": -300 * i, "i32": 70000 * i,
            "u8v": np.array([i, 255, 0]), "f16": np.array([0.5, i], np.float32),
            "f64": np.float32(i / 4), "b": np.array([1, 0, i % 2, 1]), "vf": np.arange(1 + i % 3, dtype=np.float32),
            "seq": np.arange(1 + i % 3), "seq3": np.arange(4 * (1 + i % 2)), "a5": np.array([i, -i], np.float32)}


def test_features_of_every_spec_kind_and_dtype():
    L, V = datasets.List, datasets.Value
    f = hf.features_from_spec(WIDE, utf8=["s2"])
    assert f["id"] == V("int64") and f["i8"] == V("int8") and f["i16"] == V("int16") and f["i32"] == V("int32")
    assert f["s2"] == L(V("string"), length=2)
    assert f["s23"] == L(L(V("binary"), length=3), length=2)  # strings: nested lists, never an Array2D
    assert f["vs"] == L(V("binary")) and f["seqs"] == L(V("binary"))
    assert f["seqs2"] == L(L(V("binary"), length=2))
    assert f["u8v"] == L(V("uint8"), length=3) and f["f16"] == L(V("float16"), length=2)
    assert f["f64"] == V("float64") and f["b"] == datasets.Array2D((2, 2), "bool")
    assert f["vf"] == L(V("float32")) and f["seq"] == L(V("int64"))
    assert f["seq3"] == datasets.Array3D((None, 2, 2), "int32")
    assert f["a5"] == datasets.Array5D((1, 1, 2, 1, 1), "float32")
    # and back: the spec each column is written with
    back = hf.spec_from_features(f)
    assert back["s23"] == tfr_torch.FixedLenFeature([2, 3], S) and back["vs"] == tfr_torch.VarLenFeature(S)
    assert back["seq3"] == tfr_torch.FixedLenSequenceFeature([2, 2], torch.int32, allow_missing=True)
    assert back["seqs2"] == tfr_torch.FixedLenSequenceFeature([2], S, allow_missing=True)

    with pytest.raises(TypeError) as err:
        hf.features_from_spec({"sp": tfr_torch.SparseFeature("ix", "v", torch.float32, [4])})
    assert str(err.value).startswith("feature 'sp': a SparseFeature has no `datasets` feature here")
    with pytest.raises(TypeError) as err:
        hf.features_from_spec({"r": tfr_torch.RaggedFeature(torch.int64)})
    assert str(err.value).startswith("feature 'r': a RaggedFeature has no `datasets` feature here")
    with pytest.raises(TypeError) as err:
        hf.features_from_spec({"h": tfr_torch.FixedLenFeature([], torch.bfloat16)})
    assert str(err.value) == "feature 'h': torch.bfloat16 has no `datasets` Value type"


def _reference_row(spec, item):
    """What a Dataset row should hold for a TFRecordDataset item: tensors as lists, sparse tensors their values."""
    out = {}
    for key in spec:
        value = item[key]
        if isinstance(value, torch.Tensor):
            value = value.coalesce().values() if value.is_sparse else value
            value = value.tolist()
        out[key] = value
    return out


def test_map_style_and_streaming_give_the_decoded_values_defaults_included(tmp_path):
    spec = dict(WIDE, dflt=tfr_torch.FixedLenFeature([], torch.int64, default_value=7),
                dfs=tfr_torch.FixedLenFeature([], S, default_value=b"z\x00"))
    path = str(tmp_path / "wide.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(6):
            writer.write_example({**_wide_example(i), **({"dfs": b"given", "dflt": -1} if i == 2 else {})})
    reference = [_reference_row(spec, r) for r in tfr_torch.TFRecordDataset(path, spec)]
    assert reference[0]["dfs"] == b"z\x00" and reference[2]["dflt"] == -1 and reference[0]["s2"][1] == b"\x00b\x00"
    ds = hf.load(path, spec, cache_dir=_cache(tmp_path))
    assert list(ds) == reference
    stream = hf.load(path, spec, streaming=True)
    assert _plain(list(stream)) == reference


def test_tfrecord_to_datasets_to_tfrecord_keeps_every_byte(tmp_path):
    src = tmp_path / "src"
    with tfr_torch.ShardedWriter(src, "wide", "train", records_per_shard=4, features=WIDE) as writer:
        for i in range(10):
            writer.write_example(_wide_example(i))
    ds = hf.load(src, split="train", cache_dir=_cache(tmp_path))
    assert len(ds) == 10
    written = hf.write(ds, str(tmp_path / "out"), "wide", records_per_shard=4)
    sources = sorted(p for p in os.listdir(src) if p.split(".")[-1].startswith("tfrecord-") and "idx" not in p)
    assert [os.path.basename(p) for p in written["train"]] == sources
    for path in written["train"]:
        with open(path, "rb") as a, open(src / os.path.basename(path), "rb") as b:
            assert a.read() == b.read(), path
    again = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path, "c2"))
    assert again.features == ds.features and again[:] == ds[:]


def test_datasets_to_tfrecord_to_datasets_keeps_every_value_dtype(tmp_path):
    V, L = datasets.Value, datasets.List
    rows = {
        "i8": [-128, 127, 0], "i16": [-32768, 32767, 1], "i32": [-2**31, 2**31 - 1, 2], "i64": [-2**63, 2**63 - 1, 3],
        "u8": [0, 255, 4], "u16": [0, 65535, 5], "u32": [0, 2**32 - 1, 6],
        "f16": [0.5, -2.0, 65504.0], "f32": [1.5, -0.25, 3.0e38], "bool": [True, False, True],
        "bin": [b"\x00\x00", b"", b"a\x00"], "text": ["é", "", "a\x00b"],
        "label": [0, 1, -1], "ints": [[1, 2], [], [3]], "floats": [[0.5], [], [1.0, 2.0]],
        "pairs": [[[1, 2]], [], [[3, 4], [5, 6]]], "fixed": [["a", "b"], ["", "\x00"], ["c", "d"]],
        "mat": [[[1, 2, 3], [4, 5, 6]]] * 3, "grid": [[[1.0, 2.0]], [], [[3.0, 4.0], [5.0, 6.0]]],
    }
    features = datasets.Features({
        "i8": V("int8"), "i16": V("int16"), "i32": V("int32"), "i64": V("int64"), "u8": V("uint8"),
        "u16": V("uint16"), "u32": V("uint32"), "f16": V("float16"), "f32": V("float32"), "bool": V("bool"),
        "bin": V("binary"), "text": V("string"), "label": datasets.ClassLabel(names=["no", "yes"]),
        "ints": L(V("int64")), "floats": L(V("float32")), "pairs": L(L(V("int32"), length=2)),
        "fixed": L(V("string"), length=2), "mat": datasets.Array2D((2, 3), "int16"),
        "grid": datasets.Array2D((None, 2), "float32"),
    })
    ds = datasets.Dataset.from_dict(rows, features=features)
    hf.write(ds, str(tmp_path / "out"), "dtypes")
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert back.features == features
    assert back[:] == ds[:]
    # the IterableDataset path writes the same shards
    hf.write(ds.to_iterable_dataset(), str(tmp_path / "stream"), "dtypes")
    with open(tmp_path / "out" / "dtypes-train.tfrecord-00000-of-00001", "rb") as a, \
            open(tmp_path / "stream" / "dtypes-train.tfrecord-00000-of-00001", "rb") as b:
        assert a.read() == b.read()


def _png(value):
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((2, 3, 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("column", ["text", "binary", "pairs_of_text", "images"])
def test_empty_lists_of_strings_and_images_are_written(tmp_path, column):
    """An empty list is an ordinary row value in `datasets`; numeric empty lists are written, and so must these
    (from_row types numeric lists by the spec but leaves a string list as an untyped `[]`)."""
    V, L = datasets.Value, datasets.List
    feature, values = {
        "text": (L(V("string")), [["a", "b"], []]),
        "binary": (L(V("binary")), [[b"a\x00"], []]),
        "pairs_of_text": (L(L(V("string"), length=2)), [[["a", "b"]], []]),
        "images": (L(datasets.Image()), [[{"bytes": _png(9), "path": None}], []]),
    }[column]
    features = datasets.Features({"id": V("int64"), "x": feature})
    ds = datasets.Dataset.from_dict({"id": [0, 1], "x": values}, features=features)
    hf.write(ds, str(tmp_path / "out"), "empty")
    back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    assert back["id"] == [0, 1]
    plain = back.cast_column("x", L(datasets.Image(decode=False))) if column == "images" else back
    got = plain["x"]
    assert len(got[1]) == 0
    if column == "images":
        assert [img["bytes"] for img in got[0]] == [_png(9)]
    else:
        assert got == values


def test_uint64_beyond_int64_round_trips_or_is_refused_by_column(tmp_path):
    """`uint64` is listed as written through int64_list: a value past 2**63 - 1 must come back, or the error must
    name the column (not a bare OverflowError from numpy)."""
    import pyarrow as pa

    ds = datasets.Dataset(pa.table({"big": pa.array([0, 2**63, 2**64 - 1], pa.uint64())}))
    try:
        hf.write(ds, str(tmp_path / "out"), "u64")
        back = hf.load(tmp_path / "out", split="train", cache_dir=_cache(tmp_path))
    except Exception as err:  # noqa: BLE001 - either outcome is asserted below
        assert "'big'" in _chain(err), f"{type(err).__name__}: {err}"
    else:
        assert back["big"] == [0, 2**63, 2**64 - 1]


@pytest.mark.parametrize("feature", ["value", "list"])
def test_a_null_value_is_refused_naming_the_column(tmp_path, feature):
    """`datasets` columns are nullable; a None has no tf.train.Feature form: the TypeError/ValueError must name the
    column (today: numpy's "int() argument must be ... not 'NoneType'")."""
    V = datasets.Value
    f = V("int64") if feature == "value" else datasets.List(V("int64"))
    values = [1, None] if feature == "value" else [[1], None]
    ds = datasets.Dataset.from_dict({"col": values}, features=datasets.Features({"col": f}))
    with pytest.raises((TypeError, ValueError)) as err:
        hf.write(ds, str(tmp_path / "out"), "nulls")
    assert "'col'" in str(err.value), str(err.value)


# ----- tfr_torch.hf: errors -----------------------------------------------------------------------------------------

def _offsets(path):
    """Each record's byte offset: a record is framed as 8 length bytes, 4 CRC bytes, the data, 4 CRC bytes."""
    offsets, at = [], 0
    for record in tfr_torch.read_records(path):
        offsets.append(at)
        at += 16 + len(record)
    return offsets


def _error_file(tmp_path):
    path = str(tmp_path / "err.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write_example({"id": 0, "t": b"ok"})
        writer.write_example({"id": 1, "t": b"\xff\xfe"})  # not UTF-8
        writer.write_example({"id": 2})  # "t" missing
    return path


@pytest.mark.parametrize("streaming", [False, True])
def test_missing_key_and_corrupt_record_errors_name_file_offset_and_key(tmp_path, streaming):
    path = _error_file(tmp_path)
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64), "t": tfr_torch.FixedLenFeature([], S)}
    offsets = _offsets(path)
    with pytest.raises(Exception) as err:
        list(hf.load(path, spec, streaming=streaming, cache_dir=_cache(tmp_path)))
    text = _chain(err.value)
    assert f"{path}:" in text and "feature 't' in the example is required but missing" in text, text
    assert f"{path}:{offsets[2]}:" in text, text

    data = bytearray(open(path, "rb").read())
    data[20] ^= 0xFF  # inside the first record's data
    bad = str(tmp_path / "corrupt.tfrecord")
    open(bad, "wb").write(bytes(data))
    with pytest.raises(Exception) as err:
        list(hf.load(bad, None, streaming=streaming, cache_dir=_cache(tmp_path, "c2")))
    text = _chain(err.value)
    assert f"{bad}:0: corrupt record data" in text, text


@pytest.mark.parametrize("streaming", [False, True])
def test_text_that_is_not_utf8_names_file_offset_and_key(tmp_path, streaming):
    """utf8=True turns bytes into str in to_row: a record that is not UTF-8 raises a bare UnicodeDecodeError that
    names neither the file, nor the record's offset, nor the key."""
    path = _error_file(tmp_path)
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64),
            "t": tfr_torch.FixedLenFeature([], S, default_value=b"")}
    with pytest.raises(Exception) as err:
        list(hf.load(path, spec, utf8=True, streaming=streaming, cache_dir=_cache(tmp_path)))
    text = _chain(err.value)
    assert path in text and "'t'" in text, text
    assert isinstance(err.value, tfr_torch.TFRecordError) or isinstance(err.value.__cause__, tfr_torch.TFRecordError)


def test_the_same_files_under_another_split_name(tmp_path):
    """The cache key leaves out the split name: a second load of the same files as split="validation" finds the
    cached "train" build and datasets raises 'Unknown split "validation"'."""
    paths, ids = _id_files(tmp_path, [3, 4], index=False)
    first = hf.load(paths, ID, cache_dir=_cache(tmp_path))  # split "train"
    assert first["id"] == ids
    second = hf.load(paths, ID, split="validation", cache_dir=_cache(tmp_path))
    assert str(second.split) == "validation" and second["id"] == ids


# ----- tfr_torch.hf: streaming, workers, nodes ----------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("index", [False, True])
@pytest.mark.parametrize("num_workers", [2, 3])
def test_streaming_in_dataloader_workers_reads_every_record_once(tmp_path, num_workers, index):
    """A streaming dataset's units (files) are shared among DataLoader workers by `datasets`; the TFRecordDataset
    each unit is read with must then read its whole file, yet it sees the worker info and reads only its
    worker's share of it: half (or a third) of the records are lost."""
    paths, ids = _id_files(tmp_path, [5, 6, 7], index=index)
    stream = hf.load(paths, ID, streaming=True)
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=num_workers)
    got = [int(row["id"]) for row in loader]
    assert Counter(got) == Counter(ids)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_streaming_tfds_folder_in_dataloader_workers_reads_every_record_once():
    """The same with a TFDS folder: each unit is one shard ("train[0shard]"), read by a TFRecordDataset that
    then splits the shard again between the workers."""
    golden = os.path.join(os.path.dirname(__file__), "data", "tfds", "data", "tfr_golden", "1.0.0")
    stream = hf.load(golden, split="train", streaming=True)
    reference = [int(r["id"]) for r in tfr_torch.TFRecordDataset(golden, split="train")]
    got = [int(row["id"]) for row in torch.utils.data.DataLoader(stream, batch_size=None, num_workers=2)]
    assert Counter(got) == Counter(reference)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_split_dataset_by_node_reads_every_record_once(tmp_path, world_size):
    paths, ids = _id_files(tmp_path, [5, 6, 7], index=False)
    stream = hf.load(paths, ID, streaming=True)
    got = [row["id"] for rank in range(world_size) for row in split_dataset_by_node(stream, rank, world_size)]
    assert Counter(got) == Counter(ids)
    shuffled = stream.shuffle(seed=3, buffer_size=4)
    got = [row["id"] for rank in range(world_size)
           for row in split_dataset_by_node(shuffled, rank, world_size)]
    assert Counter(got) == Counter(ids)
    raw = hf.load(paths, None, streaming=True)
    records = [r for p in paths for r in tfr_torch.read_records(p)]
    got = [row["bytes"] for rank in range(world_size) for row in split_dataset_by_node(raw, rank, world_size)]
    assert Counter(got) == Counter(records)


def test_streaming_state_dict_resumes_with_the_rest(tmp_path):
    paths, ids = _id_files(tmp_path, [4, 5, 6], index=False)
    full = [row["id"] for row in hf.load(paths, ID, streaming=True)]
    assert full == ids
    for stop in (1, 4, 5, 9, 15):
        stream = hf.load(paths, ID, streaming=True)
        it = iter(stream)
        head = [next(it)["id"] for _ in range(stop)]
        state = stream.state_dict()
        resumed = hf.load(paths, ID, streaming=True)
        resumed.load_state_dict(state)
        assert head + [row["id"] for row in resumed] == full, stop


def test_num_proc_and_streaming_give_the_same_rows_as_the_records(tmp_path):
    paths, ids = _id_files(tmp_path, [3, 0, 4, 5], index=False)
    one = hf.load(paths, ID, cache_dir=_cache(tmp_path))
    two = hf.load(paths, ID, cache_dir=_cache(tmp_path, "c2"), num_proc=2)
    assert one["id"] == two["id"] == ids == [row["id"] for row in hf.load(paths, ID, streaming=True)]


# ----- tfr_torch.nodes ----------------------------------------------------------------------------------------------

def _ids_of(item):
    if isinstance(item, dict):
        return item["id"].reshape(-1).tolist()
    if isinstance(item, list):
        return [i for x in item for i in _ids_of(x)]
    return ExampleDecoder(ID)(item)["id"].reshape(-1).tolist()


def _pipeline(kind, paths, **options):
    if kind == "raw":
        return Loader(TFRecordNode(paths, **options))
    if kind == "rows":
        return Loader(TFRecordNode(paths, ID, **options))
    if kind == "batches":
        return Loader(TFRecordNode(paths, ID, batch_size=3, **options))
    node = Batcher(TFRecordNode(paths, **options), 2, drop_last=False)
    return Loader(Prefetcher(ParallelMapper(node, ExampleDecoder(ID), num_workers=2, method="thread"), 3))


def _check_resume_everywhere(kind, paths, options, stops=None):
    loader = _pipeline(kind, paths, **options)
    full = [[_ids_of(x) for x in loader] for _ in range(4)]  # epochs 0 to 3
    for epoch in (0, 1):
        n = len(full[epoch])
        for stop in (range(n + 1) if stops is None else [s for s in stops if s <= n]):
            loader = _pipeline(kind, paths, **options)
            for _ in range(epoch):
                list(loader)
            it = iter(loader)
            head = [_ids_of(next(it)) for _ in range(stop)]
            assert head == full[epoch][:stop]
            state = pickle.loads(pickle.dumps(loader.state_dict()))  # a checkpoint
            resumed = _pipeline(kind, paths, **options)
            resumed.load_state_dict(state)
            rest = [_ids_of(x) for x in resumed]
            after = [_ids_of(x) for x in resumed]
            if stop < n:
                assert rest == full[epoch][stop:] and after == full[epoch + 1], (epoch, stop)
            else:  # saved at the end of the epoch: the next epoch, whole
                assert rest == full[epoch + 1] and after == full[epoch + 2], (epoch, stop)
    return full


@pytest.mark.filterwarnings("ignore:counting the records")
@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("index", [None, "auto"])
@pytest.mark.parametrize("kind", ["raw", "rows", "batches"])
def test_node_resumes_after_every_item_and_across_epochs(tmp_path, kind, index, shuffle, world_size):
    paths, ids = _id_files(tmp_path, [7, 8, 9])
    ranks = []
    for rank in range(world_size):
        options = dict(index=index, shuffle=shuffle, seed=3, rank=rank, world_size=world_size)
        full = _check_resume_everywhere(kind, paths, options)
        ranks.append(full)
        for epoch in full:
            assert len(epoch) == (len(ids) // world_size if kind != "batches" else -(-(len(ids) // world_size) // 3))
        if shuffle:
            assert full[0] != full[1]
    for e in range(4):
        every = [i for r in ranks for b in r[e] for i in (b if isinstance(b, list) else [b])]
        assert len(every) == world_size * (len(ids) // world_size) and set(Counter(every).values()) == {1}
        if world_size == 1:
            assert Counter(every) == Counter(ids)


@pytest.mark.parametrize("shuffle", [False, True])
def test_mapper_prefetcher_pipeline_resumes(tmp_path, shuffle):
    paths, ids = _id_files(tmp_path, [5, 6])
    full = _check_resume_everywhere("mapped", paths, dict(index="auto", shuffle=shuffle, seed=1), stops=[0, 1, 3, 6])
    assert sorted(i for b in full[0] for i in b) == sorted(ids)


@pytest.mark.parametrize("kind", ["raw", "batches", "mapped"])
def test_a_resumed_pipeline_saved_again_resumes_again(tmp_path, kind):
    """A state taken from a resumed pipeline, before and after its first item, resumes at the same place."""
    paths, _ = _id_files(tmp_path, [5, 6])
    options = dict(index="auto", shuffle=True, seed=1)
    full = [_ids_of(x) for x in _pipeline(kind, paths, **options)]
    loader = _pipeline(kind, paths, **options)
    it = iter(loader)
    head = [_ids_of(next(it))]
    resumed = _pipeline(kind, paths, **options)
    resumed.load_state_dict(loader.state_dict())
    it = iter(resumed)
    before = resumed.state_dict()
    mid = [_ids_of(next(it))]
    after = resumed.state_dict()
    again = _pipeline(kind, paths, **options)
    again.load_state_dict(before)
    assert head + [_ids_of(x) for x in again] == full
    again = _pipeline(kind, paths, **options)
    again.load_state_dict(after)
    assert head + mid + [_ids_of(x) for x in again] == full


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ranks_with_pad_read_every_record(tmp_path, world_size):
    paths, ids = _id_files(tmp_path, [4, 3])  # 7 records
    per_rank = []
    for rank in range(world_size):
        node = TFRecordNode(paths, index="auto", shuffle=True, seed=2, rank=rank, world_size=world_size, pad=True)
        per_rank.append([_ids_of(r)[0] for r in Loader(node)])
    quota = -(-len(ids) // world_size)
    assert [len(r) for r in per_rank] == [quota] * world_size
    counts = Counter(i for r in per_rank for i in r)
    assert set(counts) == set(ids) and sum(counts.values()) == quota * world_size


def test_sequence_examples_through_example_decoder(tmp_path):
    path = str(tmp_path / "seq.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        for i in range(5):
            writer.write_sequence_example(
                {"id": i}, {"tok": [np.array([i, j], np.int64) for j in range(i)],
                            "w": [np.array([float(j)], np.float32) for j in range(i % 3)]})
    spec = tfr_torch.SequenceFeatures({"id": tfr_torch.FixedLenFeature([], torch.int64)},
                                      {"tok": tfr_torch.VarLenFeature(torch.int64),
                                       "w": tfr_torch.FixedLenSequenceFeature([], torch.float32,
                                                                              allow_missing=True)})
    decode = pickle.loads(pickle.dumps(ExampleDecoder(spec)))
    records = list(tfr_torch.read_records(path))
    rows = list(tfr_torch.TFRecordDataset(path, spec))
    one = decode(records[3])
    assert int(one["context"]["id"]) == 3
    assert torch.equal(one["feature_lists"]["tok"].to_dense(), rows[3]["feature_lists"]["tok"].to_dense())
    assert one["feature_lists"]["w"].tolist() == [] and rows[4]["feature_lists"]["w"].tolist() == [0.0]
    batch = decode(records[:4])
    reference = next(iter(tfr_torch.TFRecordDataset(path, spec, batch_size=4)))
    assert batch["context"]["id"].tolist() == [0, 1, 2, 3] and batch["lengths"]["w"].tolist() == [0, 1, 2, 0]
    assert torch.equal(batch["feature_lists"]["w"], reference["feature_lists"]["w"])
    assert torch.equal(batch["feature_lists"]["tok"].to_dense(), reference["feature_lists"]["tok"].to_dense())
    loader = Loader(ParallelMapper(Batcher(TFRecordNode(path, index=None), 2, drop_last=False), decode,
                                   num_workers=2, method="thread"))
    assert [i for b in loader for i in b["context"]["id"].tolist()] == [0, 1, 2, 3, 4]
    node = TFRecordNode(path, spec, batch_size=2)
    assert [b["context"]["id"].tolist() for b in Loader(node)] == [[0, 1], [2, 3], [4]]


def test_a_corrupt_record_names_file_and_offset_through_the_node_and_a_mapper(tmp_path):
    paths, _ = _id_files(tmp_path, [5], index=False)
    path = paths[0]
    offsets = _offsets(path)
    data = bytearray(open(path, "rb").read())
    data[offsets[2] + 14] ^= 0x01  # inside record 2's data
    open(path, "wb").write(bytes(data))
    expected = f"{path}:{offsets[2]}: corrupt record data"
    got = []
    with pytest.raises(tfr_torch.TFRecordError) as err:
        for record in Loader(TFRecordNode(path)):
            got.append(_ids_of(record)[0])
    assert str(err.value).startswith(expected) and got == [0, 1]
    with pytest.raises(tfr_torch.TFRecordError) as err:
        list(Loader(TFRecordNode(path, ID)))
    assert str(err.value).startswith(expected)
    mapped = Loader(Prefetcher(ParallelMapper(Batcher(TFRecordNode(path), 2), ExampleDecoder(ID), num_workers=2,
                                              method="thread"), 2))
    with pytest.raises(tfr_torch.TFRecordError) as err:
        list(mapped)
    assert expected in str(err.value)
    with pytest.raises(tfr_torch.TFRecordError) as err:
        ExampleDecoder(ID)([tfr_torch.encode_example({"id": 0}), b"\xff"])
    assert str(err.value) == "example 1: cannot parse 1 bytes as a tf.train.Example: byte 0 ends inside a varint"


@pytest.mark.parametrize("streaming", [False, True])
def test_text_that_is_not_utf8_in_a_tfds_shard_names_the_shard_and_offset(tmp_path, streaming):
    """A TFDS folder's Text feature holding bytes that are not UTF-8: the error names the shard file, the record's
    byte offset in it and the key (each whole shard is one unit of work)."""
    features = datasets.Features({"id": datasets.Value("int64"), "caption": datasets.Value("string")})
    source = datasets.Dataset.from_dict({"id": list(range(6)), "caption": [f"zz{i:02d}" for i in range(6)]},
                                        features=features)
    folder = tmp_path / "data" / "texts" / "1.0.0"
    hf.write(datasets.DatasetDict({"train": source}), str(folder), "texts", tfds={"version": "1.0.0"})
    shards = sorted(folder.glob("texts-train.tfrecord-*"))
    records = list(tfr_torch.read_records(str(shards[0])))
    bad = next(i for i, r in enumerate(records) if i > 0 and b"zz" in r)
    records[bad] = records[bad].replace(b"zz", b"\xff\xfe", 1)  # the same length: the metadata still agrees
    with tfr_torch.TFRecordWriter(str(shards[0])) as writer:
        for record in records:
            writer.write(record)
    offset = sum(16 + len(r) for r in records[:bad])
    with pytest.raises(Exception) as err:
        list(hf.load(folder, split="train", streaming=streaming, cache_dir=_cache(tmp_path)))
    text = _chain(err.value)
    assert f"{shards[0]}:{offset}:" in text and "'caption'" in text and "not UTF-8" in text, text
