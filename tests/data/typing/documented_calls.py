"""Calls as the README documents them: `mypy --strict` must accept them (tests/test_typing.py)."""

import torch
from torch.utils.data import DataLoader

import tfr_torch

spec = {
    "label": tfr_torch.FixedLenFeature([], torch.int64),
    "x": tfr_torch.FixedLenFeature([3], torch.float32, default_value=[0.0, 0.0, 0.0]),
    "tags": tfr_torch.VarLenFeature(torch.int64),
    "name": tfr_torch.FixedLenFeature([], tfr_torch.string),
}
ds = tfr_torch.TFRecordDataset("data/*.tfrecord", spec, batch_size=64, shuffle=True)
auto = tfr_torch.TFRecordDataset(["a.tfrecord"], "auto")
indexed = tfr_torch.IndexedTFRecordDataset("a.tfrecord", "auto")
loader = DataLoader(ds, batch_size=None, num_workers=2)
sampler = tfr_torch.ElasticDistributedSampler(indexed, seed=0, drop_last=True)
sampler.set_epoch(1)
sampler.load_state_dict(tfr_torch.elastic_state([sampler.state_dict(consumed=0)]))
indexed_loader = DataLoader(indexed, batch_size=32, sampler=sampler, num_workers=2)
out = tfr_torch.parse_example([b""], spec)
one = tfr_torch.parse_single_example(b"", spec)
record: bytes = tfr_torch.encode_example({"label": 1, "x": [1.0, 2.0, 3.0], "name": b"n"})
image: torch.Tensor = tfr_torch.decode_image(b"", mode="RGB")
images: list[torch.Tensor] = tfr_torch.decode_image([b"", b""], device="cuda")
raw: torch.Tensor = tfr_torch.decode_raw(b"", torch.uint8)
with tfr_torch.TFRecordWriter("out.tfrecord") as writer:
    writer.write(record)
for r in tfr_torch.read_records("out.tfrecord"):
    n: int = len(r)
ragged = {"words": tfr_torch.RaggedFeature(torch.int64, partitions=[tfr_torch.RowLengths("word_lengths")],
                                           value_key="chars")}
