"""tfr_torch quick start: write a small TFRecord dataset, index it, and read it back through a torch DataLoader.

Run with `make demo` (or `python examples/quickstart.py [OUT_DIR]`: without OUT_DIR the files go to a temporary
folder that is removed at the end). Everything here is public API; the files it writes are ones TensorFlow reads
as they are (`tf.data.TFRecordDataset(paths, compression_type=...)`).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

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


FEATURES = {
    "id": tfr_torch.FixedLenFeature([], torch.int64),
    "label": tfr_torch.FixedLenFeature([], torch.int64),
    "image": tfr_torch.FixedLenFeature([4, 4], torch.float32),
    "caption": tfr_torch.FixedLenFeature([], tfr_torch.string),
    "tensor": tfr_torch.FixedLenFeature([], tfr_torch.string),
}


def main(argv: list[str]) -> int:
    if len(argv) > 1:  # keep the files there
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        return demo(out, keep=True)
    with tempfile.TemporaryDirectory(prefix="tfr_torch_demo_") as folder:  # removed when the demo ends
        return demo(Path(folder), keep=False)


def demo(out: Path, keep: bool) -> int:
    paths = write_dataset(out)
    for path in paths:
        reader = tfr_torch.read_records(path)
        count = sum(1 for _ in reader)
        index = tfr_torch.read_index(path + ".idx", path)
        print(f"wrote {path}: {count} records, compression={reader.compression}, index rows={len(index)}")

    # Decoded batches of 64 from 2 DataLoader workers, split by record ranges thanks to the indexes.
    dataset = tfr_torch.TFRecordDataset(paths, FEATURES, index="auto", batch_size=64, shuffle=True, seed=1)
    loader = DataLoader(dataset, batch_size=None, num_workers=2)
    seen, batches = [], 0
    for epoch in range(2):
        dataset.set_epoch(epoch)
        ids = []
        for batch in loader:
            batches += 1
            ids.extend(batch["id"].tolist())
            if batches == 1:
                tensors = torch.stack([tfr_torch.parse_tensor(t, dtype=torch.int16) for t in batch["tensor"]])
                print(f"first batch: image {tuple(batch['image'].shape)} {batch['image'].dtype}, labels "
                      f"{batch['label'][:8].tolist()}, tensors {tuple(tensors.shape)} {tensors.dtype}, "
                      f"caption {batch['caption'][0]!r}")
        assert sorted(ids) == list(range(len(ids))), "every record exactly once"
        print(f"epoch {epoch}: {len(ids)} records in {len(dataset)} batches (shuffled, first ids {ids[:5]}): "
              "each record exactly once")
        seen.append(ids)
    first = tfr_torch.decode_example(next(iter(tfr_torch.read_records(paths[0]))))
    print(f"first record, decode_example (each feature a list of values): caption={first['caption'][0].decode()!r} "
          f"label={first['label'].tolist()}")
    if keep:
        print(f"files are in {out}; try: tfr-torch verify {out}/*.tfrecord; tfr-torch head -n 1 {paths[0]}")
    else:
        print("(the files were written to a temporary folder, now removed; to keep them: "
              "python examples/quickstart.py OUT_DIR)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
