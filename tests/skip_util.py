"""What the skip-across-ranks tests share: small indexed files of `id` Examples, data CRCs broken on purpose, and
the ids a dataset yields."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import torch

import tfr_torch
from tfr_torch.format.index import read_index

SPEC = {"id": tfr_torch.FixedLenFeature([], torch.int64)}


def write(path, ids, gz=False):
    with tfr_torch.TFRecordWriter(str(path), compression="gzip" if gz else None) as writer:
        for i in ids:
            writer.write_example({"id": i, "pad": b"x" * (i % 5 + 1)})
    tfr_torch.build_index(str(path))
    return str(path)


def corrupt(path, records, gz=False):
    """Flip a data byte of each of `records` (their data CRCs then fail); the index is kept (GZIP: rebuilt, with
    its seek points)."""
    table = read_index(path + ".idx")
    raw = bytearray(gzip.decompress(Path(path).read_bytes()) if gz else Path(path).read_bytes())
    for r in records:
        offset, size = (int(v) for v in table[r])
        raw[offset + size - 5] ^= 0xFF
    Path(path).write_bytes(gzip.compress(bytes(raw)) if gz else bytes(raw))
    if gz:
        os.remove(path + ".idx")
        os.remove(path + ".idx.seek")
        tfr_torch.build_index(path)


def ids(items):
    """The ids of decoded items or batches, in order."""
    out = []
    for item in items:
        value = item["id"]
        out += value.tolist() if value.dim() else [int(value)]
    return out
