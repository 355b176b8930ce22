"""Defects found in a review of a day's changes (MixedDataset elastic loads, DeviceLoader errors in place,
location_key with TFDS decoders), each pinned by a test that failed before its fix."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import tfr_torch
from tfr_torch.images import DeviceLoader

TFDS_GOLDEN = Path(__file__).parent / "data" / "tfds" / "data" / "tfr_golden"


class _FailsAtThree:
    """A wrapped loader whose fourth batch raises (a corrupt record, a worker that died, ...)."""

    def __iter__(self):
        for i in range(5):
            if i == 3:
                raise RuntimeError("the wrapped loader failed at batch 3")
            yield {"x": torch.full((2,), i)}


# Fixed: without a thread, an error of the wrapped loader came `prefetch` batches early (prepared ones lost)
def test_without_a_thread_a_failing_loader_hands_out_the_batches_before_its_error():
    got = []
    with pytest.raises(RuntimeError, match="failed at batch 3"):
        for batch in DeviceLoader(_FailsAtThree(), "cpu", images=None, prefetch=2, thread=False):
            got.append(int(batch["x"][0]))
    assert got == [0, 1, 2]


def test_with_a_thread_a_failing_loader_hands_out_the_batches_before_its_error():  # the reference behaviour
    got = []
    with pytest.raises(RuntimeError, match="failed at batch 3"):
        for batch in DeviceLoader(_FailsAtThree(), "cpu", images=None, prefetch=2, thread=True):
            got.append(int(batch["x"][0]))
    assert got == [0, 1, 2]


@pytest.mark.skipif(not TFDS_GOLDEN.exists(), reason="needs the TFDS golden folder")
@pytest.mark.parametrize("cls", [tfr_torch.TFRecordDataset, tfr_torch.IndexedTFRecordDataset])
# Fixed: a location_key equal to a TFDS feature name was accepted and overwrote that feature in every item
def test_a_location_key_that_is_a_tfds_feature_is_refused(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="location_key 'id' is already a key"):
            cls(TFDS_GOLDEN, split="test", location_key="id")


@pytest.mark.skipif(not TFDS_GOLDEN.exists(), reason="needs the TFDS golden folder")
@pytest.mark.parametrize("cls", [tfr_torch.TFRecordDataset, tfr_torch.IndexedTFRecordDataset])
# Fixed: a TFDSDecoder(as_supervised=True) with location_key was accepted, then every item failed
def test_a_location_key_with_a_supervised_tfds_decoder_is_refused_at_construction(cls):
    from tfr_torch.tfds import TFDSDecoder

    info = tfr_torch.tfds.read_info(str(TFDS_GOLDEN.parent), "tfr_golden")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="as_supervised"):
            cls(TFDS_GOLDEN, split="test", features=TFDSDecoder(info, as_supervised=True), location_key="where")


@pytest.fixture(scope="module")
def mixed_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("review_mixed")
    out = {}
    for n, (name, size) in enumerate({"a": 40, "b": 20}.items()):
        path = str(folder / f"{name}.tfrecord")
        with tfr_torch.TFRecordWriter(path) as writer:
            for i in range(size):
                writer.write_example({"id": 1000 * n + i})
        tfr_torch.build_index(path, path + ".idx")
        out[name] = path
    return out


def _mixture(files, seed=0):
    spec = {"id": tfr_torch.FixedLenFeature([], torch.int64)}
    mixed = tfr_torch.MixedDataset({name: tfr_torch.TFRecordDataset(path, spec, index="auto", shuffle=True, seed=seed)
                                    for name, path in files.items()}, {"a": 2, "b": 1}, stop="all", seed=3)
    mixed.set_epoch(1)
    return mixed


# Fixed: a refused merged state left the datasets before the refused one resumed (a half-loaded mixture)
def test_a_refused_merged_state_leaves_the_mixture_as_it_was(mixed_files):
    head = _mixture(mixed_files)
    it = iter(head)
    for _ in range(20):
        next(it)
    merged = tfr_torch.elastic_state([head.state_dict()])
    merged["datasets"]["b"] = dict(merged["datasets"]["b"], seed=12345)  # b's part does not fit this mixture
    mixed = _mixture(mixed_files)
    with pytest.raises(ValueError, match="'b'"):
        mixed.load_state_dict(merged)
    assert len([item for item in mixed]) == 60
