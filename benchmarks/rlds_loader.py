"""RLDS episodes (nested results) through a DataLoader with worker processes, beside the same reads in the process.

    python benchmarks/rlds_loader.py [--episodes 300] [--workers 2] [--repeat 3] [--data-dir benchmarks/data]

Writes (once, under `--data-dir`) a TFDS folder shaped as an Open X-Embodiment dataset with `ShardedWriter(...,
tfds={"features": ...})`: `--episodes` episodes of 8 to 26 steps (about 17 on average: 300 episodes hold ~5,200
steps), each step a 64x64 JPEG and a 32x32 PNG image, an 8-float state, a 7-float action, reward, discount, the
is_first / is_last / is_terminal flags, a language instruction and a 512-float language embedding, plus the
episode's metadata, 30 episodes per shard. Then times one pass over the split `train`, best of `--repeat`:

- in the process: `for episode in TFRecordDataset(folder, split="train")` (decoding included);
- `DataLoader(dataset, batch_size=None, num_workers=W, persistent_workers=True)` after a warm-up pass: each
  episode (a nested dict of [T, ...] tensors and lists of bytes) crosses from its worker through the worker's
  reused shared-memory slab;
- the same DataLoader with `shared_memory=False`: episodes pickled through the DataLoader's pipe, each tensor in
  its own new shared-memory segment (what nested results cost before the slab carried them).

The ratio is the in-process time over the row's time (above 1: faster than reading in the process).
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import time
from typing import Any

import numpy as np
from PIL import Image

import tfr_torch

_CLASS = "tensorflow_datasets.core.features."


def _tensor(dims: tuple[int, ...], dtype: str) -> dict[str, Any]:
    return {"pythonClassName": _CLASS + "tensor_feature.Tensor",
            "tensor": {"shape": {"dimensions": [str(d) for d in dims]}, "dtype": dtype, "encoding": "none"}}


def _image(dims: tuple[int, int, int], fmt: str) -> dict[str, Any]:
    return {"pythonClassName": _CLASS + "image_feature.Image",
            "image": {"shape": {"dimensions": [str(d) for d in dims]}, "dtype": "uint8", "encodingFormat": fmt}}


def _dict(features: dict[str, Any]) -> dict[str, Any]:
    return {"pythonClassName": _CLASS + "features_dict.FeaturesDict", "featuresDict": {"features": features}}


_TEXT = {"pythonClassName": _CLASS + "text_feature.Text", "text": {}}


def features_json() -> dict[str, Any]:
    """An Open X-Embodiment episode's feature tree, as TFDS 4.9 writes features.json."""
    step = _dict({
        "observation": _dict({"image": _image((64, 64, 3), "jpeg"), "wrist_image": _image((32, 32, 3), "png"),
                              "state": _tensor((8,), "float32")}),
        "action": _tensor((7,), "float32"), "reward": _tensor((), "float32"), "discount": _tensor((), "float32"),
        "is_first": _tensor((), "bool"), "is_last": _tensor((), "bool"), "is_terminal": _tensor((), "bool"),
        "language_instruction": _TEXT, "language_embedding": _tensor((512,), "float32"),
    })
    steps = {"pythonClassName": _CLASS + "dataset_feature.Dataset", "sequence": {"feature": step, "length": "-1"}}
    return _dict({"steps": steps, "episode_metadata": _dict({"file_path": _TEXT,
                                                             "episode_id": _tensor((), "int64")})})


def _encoded(array: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array).save(out, fmt, **({"quality": 85} if fmt == "JPEG" else {}))
    return out.getvalue()


def write(folder: str, episodes: int) -> int:
    """The dataset (see the module doc); returns its number of steps."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:64, 0:64]
    jpegs = [_encoded(np.clip(np.stack([(x + k) % 256, (y * 2) % 256, (x + y + k) % 256], -1)
                              + rng.integers(-12, 13, (64, 64, 3)), 0, 255).astype(np.uint8), "JPEG")
             for k in range(20)]
    pngs = [_encoded(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8), "PNG") for _ in range(20)]
    steps = 0
    with tfr_torch.ShardedWriter(folder, "rlds_bench", "train", records_per_shard=30,
                                 tfds={"features": features_json()}) as writer:
        for i in range(episodes):
            t = int(rng.integers(8, 27))
            steps += t
            last = np.zeros(t, np.int64)
            last[-1] = 1
            writer.write_example({
                "steps/observation/image": [jpegs[(i + k) % 20] for k in range(t)],
                "steps/observation/wrist_image": [pngs[(i + k) % 20] for k in range(t)],
                "steps/observation/state": rng.standard_normal(t * 8).astype(np.float32),
                "steps/action": rng.standard_normal(t * 7).astype(np.float32),
                "steps/reward": last.astype(np.float32), "steps/discount": np.ones(t, np.float32),
                "steps/is_first": last[::-1].copy(), "steps/is_last": last, "steps/is_terminal": last,
                "steps/language_instruction": [b"pick up the red block"] * t,
                "steps/language_embedding": rng.standard_normal(t * 512).astype(np.float32),
                "episode_metadata/file_path": f"/data/episode_{i}.npy".encode(),
                "episode_metadata/episode_id": i,
            })
    return steps


def _count(episodes: Any) -> int:
    return sum(1 for _ in episodes)


def _best(run: Any, repeat: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = run()
        times.append(time.perf_counter() - start)
    return min(times), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    args = parser.parse_args()
    from torch.utils.data import DataLoader

    folder = os.path.join(args.data_dir, f"rlds_bench_{args.episodes}", "rlds_bench", "1.0.0")
    if not os.path.exists(os.path.join(folder, "dataset_info.json")):
        print(f"writing {args.episodes} episodes ({write(folder, args.episodes)} steps) to {folder}")
    info = tfr_torch.tfds.read_info(folder)
    print(f"{info.splits['train'].num_examples} episodes in {info.splits['train'].num_shards} shards; "
          f"backend {tfr_torch.backend()}; best of {args.repeat} passes")

    in_process, n = _best(functools.partial(_count, tfr_torch.TFRecordDataset(folder, split="train")), args.repeat)
    rows = [("TFRecordDataset(folder, split='train') in the process", in_process, n)]
    for shared in (True, False):
        dataset = tfr_torch.TFRecordDataset(folder, split="train", shared_memory=shared)
        loader = DataLoader(dataset, batch_size=None, num_workers=args.workers, persistent_workers=True)
        _count(loader)  # warm-up: the workers start, the slabs are made
        seconds, n = _best(functools.partial(_count, loader), args.repeat)
        label = f"DataLoader(num_workers={args.workers})" + ("" if shared else ", shared_memory=False")
        rows.append((label, seconds, n))
    print("| reader | episodes | seconds | episodes/s | ratio to in-process |\n|---|---|---|---|---|")
    for label, seconds, n in rows:
        print(f"| {label} | {n} | {seconds:.3f} | {n / seconds:,.0f} | {in_process / seconds:.2f}x |")


if __name__ == "__main__":
    main()
