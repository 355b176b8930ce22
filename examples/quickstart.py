"""tfr_torch quick start: write a small TFRecord dataset, index it, and read it back through a torch DataLoader.

Run with `make demo` (or `python examples/quickstart.py [OUT_DIR]`). Everything here is public API; the files
it writes are ones TensorFlow reads as they are (`tf.data.TFRecordDataset(paths, compression_type=...)`).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import tfr_torch


def write_dataset(out: Path, shards: int = 2, per_shard: int = 500) -> list[str]:
    """Write `shards` files of tf.train.Examples: a 4x4 float 'image', an int label, a caption and a tensor."""
    rng = np.random.default_rng(0)
    paths = []
    for shard in range(shards):
        path = out / f"demo-{shard:05d}-of-{shards:05d}.tfrecord"
        compression = "gzip" if shard % 2 else None  # one plain, one GZIP file: read back alike
        with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
            for i in range(per_shard):
                n = shard * per_shard + i
                writer.write_example({
                    "id": n,
                    "label": int(rng.integers(10)),
                    "image": rng.random((4, 4), dtype=np.float32),  # flattened row-major into a float_list
                    "caption": f"sample {n}",
                    "tensor": tfr_torch.serialize_tensor(torch.full((2, 2), n, dtype=torch.int16)),
                })
        tfr_torch.build_index(path)  # <file>.idx, the format DALI and the tfrecord package read
        paths.append(str(path))
    return paths


class ExampleStream(IterableDataset):
    """A minimal reader: each DataLoader worker takes every k-th file. (tfr_torch.TFRecordDataset will do this
    with record-level splitting, ranks, shuffling and resumption.)"""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for path in self.paths[worker::workers]:
            for record in tfr_torch.read_records(path):  # CRC-checked, compression detected
                ex = tfr_torch.decode_example(record)
                yield {
                    "id": int(ex["id"][0]),
                    "label": int(ex["label"][0]),
                    "image": torch.from_numpy(ex["image"].reshape(4, 4)),
                    "tensor": tfr_torch.parse_tensor(ex["tensor"][0], dtype=torch.int16),
                }


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="tfr_torch_demo_"))
    out.mkdir(parents=True, exist_ok=True)
    paths = write_dataset(out)
    for path in paths:
        reader = tfr_torch.read_records(path)
        count = sum(1 for _ in reader)
        index = tfr_torch.read_index(path + ".idx", path)
        print(f"wrote {path}: {count} records, compression={reader.compression}, index rows={len(index)}")

    loader = DataLoader(ExampleStream(paths), batch_size=64, num_workers=2)
    seen, batches = [], 0
    for batch in loader:
        batches += 1
        seen.extend(batch["id"].tolist())
        if batches == 1:
            print(f"first batch: image {tuple(batch['image'].shape)} {batch['image'].dtype}, "
                  f"tensor {tuple(batch['tensor'].shape)} {batch['tensor'].dtype}, labels {batch['label'][:8].tolist()}")
    assert sorted(seen) == list(range(len(seen))), "every record exactly once"
    print(f"read {len(seen)} records in {batches} batches through DataLoader(num_workers=2): each exactly once")
    first = tfr_torch.decode_example(next(iter(tfr_torch.read_records(paths[0]))))
    print(f"first record: caption={first['caption'][0].decode()!r} label={first['label'].tolist()}")
    print(f"files are in {out}; try: tfr-torch verify {out}/*.tfrecord; tfr-torch head -n 1 {paths[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
