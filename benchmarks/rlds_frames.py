"""RLDS episodes and windowed frame samples (tfr_torch.rlds) beside tf.data doing the same work.

    python benchmarks/rlds_frames.py [--episodes 300] [--workers 2] [--repeat 3] [--tf-python PYTHON]

The data set is benchmarks/rlds_loader.py's (written once under `--data-dir`): Open X-Embodiment-shaped episodes of
8 to 26 steps, each step a 64x64 JPEG and a 32x32 PNG, state, action, language instruction and embedding. Timed,
best of `--repeat` passes over the split `train`, on one machine:

1. episodes fully decoded (images included), in the process: `TFRecordDataset(folder, split="train")` against
   TFDS's `builder_from_directory(folder).as_dataset("train")` with each episode's `steps` batched into one element
   (`.map(..., AUTOTUNE).prefetch(AUTOTUNE)`), and against the `SkipDecoding` form (steps read as one dict of
   tensors, then decoded with the features' own `decode_batch_example`, AUTOTUNE): the faster TF row is the target.
2. windowed frame samples (observation history 2, action chunk 4, a frame shuffle buffer of `--buffer` frames,
   batches of 64): `FrameDataset` in the process and through `DataLoader(num_workers=W, persistent_workers=True)`,
   against tf.data with the same transforms (decoded episodes, the same index gathers as Octo's `chunk_act_obs`,
   frames flattened by `interleave(from_tensor_slices, AUTOTUNE)`, `shuffle(buffer)`, `batch(64)`, prefetch).
3. peak memory of each DataLoader worker (its VmHWM) with the buffer and with no buffer, beside the documented
   bound: `--buffer` x the bytes of one frame.

TensorFlow runs in `--tf-python` (a Python with tensorflow and tensorflow-datasets) as a subprocess.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlds_loader  # noqa: E402  (the data set's writer, beside this script)

import tfr_torch  # noqa: E402

TF_SCRIPT = r"""
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf, tensorflow_datasets as tfds
folder, repeat, history, future, buffer, batch = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:7])
A = tf.data.AUTOTUNE
builder = tfds.builder_from_directory(folder)

def batched_steps():
    ds = builder.as_dataset(split="train")
    return ds.map(lambda ep: {**ep, "steps": ep["steps"].batch(1 << 20).get_single_element()}, num_parallel_calls=A)

steps_feature = builder.info.features["steps"]
def skip_decoding():
    ds = builder.as_dataset(split="train", decoders={"steps": tfds.decode.SkipDecoding()})
    def decode(ep):
        ep = dict(ep)
        ep["steps"] = steps_feature.feature.decode_batch_example(ep["steps"])
        return ep
    return ds.map(decode, num_parallel_calls=A)

def windows(ep):
    s = ep["steps"]
    t = tf.shape(s["action"])[0]
    past = tf.range(t)[:, None] + tf.range(-history + 1, 1)
    ahead = tf.range(t)[:, None] + tf.range(future)
    out = {k: v for k, v in s.items() if k not in ("observation", "action")}
    out["observation"] = tf.nest.map_structure(lambda x: tf.gather(x, tf.maximum(past, 0)), s["observation"])
    out["action"] = tf.gather(s["action"], tf.minimum(ahead, t - 1))
    out["timestep_pad_mask"] = past >= 0
    out["action_pad_mask"] = ahead < t
    return out

def frames(episodes):
    ds = episodes().map(windows, num_parallel_calls=A)
    ds = ds.interleave(tf.data.Dataset.from_tensor_slices, num_parallel_calls=A)
    return ds.shuffle(buffer).batch(batch, num_parallel_calls=A)

def best(make):
    times, n = [], 0
    for _ in range(repeat):
        ds = make().prefetch(A)
        start = time.perf_counter()
        n = sum(int(tf.shape(b["action"])[0]) if "timestep_pad_mask" in b else 1 for b in ds)  # frames or episodes
        times.append(time.perf_counter() - start)
    return min(times), n

out = {}
for name, make in [("episodes, steps batched", batched_steps), ("episodes, SkipDecoding + decode_batch_example",
                   skip_decoding)]:
    out[name] = best(make)
def frames_batched():
    return frames(batched_steps)
def frames_skip_decoding_batch():
    return frames(skip_decoding)
for name, make in [("frames, steps batched", frames_batched),
                   ("frames, SkipDecoding + decode_batch_example", frames_skip_decoding_batch)]:
    out[name] = best(make)
print(json.dumps({"tf": tf.__version__, "tfds": tfds.__version__, "rows": out}))
"""


def _count(items: Any) -> int:
    return sum(1 for _ in items)


def _frames(batches: Any) -> int:
    return sum(len(b["timestep"]) for b in batches)


def _best(run: Any, repeat: int) -> tuple[float, int]:
    times, count = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = run()
        times.append(time.perf_counter() - start)
    return min(times), count


def _children_peak_kib() -> list[int]:
    """VmHWM (peak resident memory, KiB) of this process's children: the DataLoader's workers."""
    peaks = []
    me = str(os.getpid())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] != me:
                    continue
            with open(f"/proc/{pid}/status") as f:
                peaks += [int(line.split()[1]) for line in f if line.startswith("VmHWM")]
        except (OSError, IndexError):
            continue
    return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--buffer", type=int, default=1000, help="frame shuffle buffer (frames)")
    parser.add_argument("--tf-python", default=os.environ.get("TFR_TORCH_TF_PYTHON", ""),
                        help="a Python with tensorflow and tensorflow-datasets (default: $TFR_TORCH_TF_PYTHON)")
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    args = parser.parse_args()
    from torch.utils.data import DataLoader

    from tfr_torch.rlds import FrameDataset, Window, frame_nbytes

    folder = os.path.join(args.data_dir, f"rlds_bench_{args.episodes}", "rlds_bench", "1.0.0")
    if not os.path.exists(os.path.join(folder, "dataset_info.json")):
        print(f"writing {args.episodes} episodes ({rlds_loader.write(folder, args.episodes)} steps) to {folder}")
    history, future, batch = 2, 4, 64
    print(f"{folder}: backend {tfr_torch.backend()}, {os.cpu_count()} CPUs, best of {args.repeat} passes")

    tf_rows: dict[str, tuple[float, int]] = {}
    if args.tf_python and os.path.exists(args.tf_python):
        done = subprocess.run([args.tf_python, "-c", TF_SCRIPT, folder, str(args.repeat), str(history), str(future),
                               str(args.buffer), str(batch)], capture_output=True, text=True, check=False)
        if done.returncode:
            print("TensorFlow side failed:\n" + done.stderr[-3000:])
        else:
            answer = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"TensorFlow {answer['tf']}, TFDS {answer['tfds']}")
            tf_rows = {k: (v[0], v[1]) for k, v in answer["rows"].items()}

    def window_ds(buffer: int) -> FrameDataset:
        return FrameDataset(folder, Window(history=history, future=future), shuffle_buffer=buffer, batch_size=batch)

    episodes, n_eps = _best(functools.partial(_count, tfr_torch.TFRecordDataset(folder, split="train")), args.repeat)
    tf_eps = min((v for k, v in tf_rows.items() if k.startswith("episodes")), default=None)
    print("\n| episodes fully decoded, in the process | episodes | seconds | episodes/s | tfr_torch's speed-up |")
    print("|---|---|---|---|---|")
    print(f"| tfr_torch TFRecordDataset(folder, split='train') | {n_eps} | {episodes:.3f} | {n_eps / episodes:,.0f} "
          f"| {tf_eps[0] / episodes if tf_eps else float('nan'):.2f}x over tf.data's fastest |")
    for name, (seconds, n) in tf_rows.items():
        if name.startswith("episodes"):
            print(f"| tf.data: {name} | {n} | {seconds:.3f} | {n / seconds:,.0f} | |")

    in_process, n_frames = _best(functools.partial(_frames, window_ds(args.buffer)), args.repeat)
    loader = DataLoader(window_ds(args.buffer), batch_size=None, num_workers=args.workers, persistent_workers=True)
    _frames(loader)  # warm-up: workers start, slabs are made
    in_workers, n_loader = _best(functools.partial(_frames, loader), args.repeat)
    peaks = _children_peak_kib()
    del loader
    unbuffered = DataLoader(window_ds(0), batch_size=None, num_workers=args.workers, persistent_workers=True)
    _frames(unbuffered)
    _frames(unbuffered)
    peaks_none = _children_peak_kib()
    del unbuffered
    tf_frames = min((v for k, v in tf_rows.items() if k.startswith("frames")), default=None)
    print(f"\n| frames (history {history}, action chunk {future}, buffer {args.buffer}, batches of {batch}) | frames "
          "| seconds | frames/s | ratio |\n|---|---|---|---|---|")
    print(f"| tfr_torch FrameDataset in the process | {n_frames} | {in_process:.3f} | {n_frames / in_process:,.0f} "
          f"| {tf_frames[0] / in_process if tf_frames else float('nan'):.2f}x tf.data's fastest |")
    print(f"| tfr_torch FrameDataset, DataLoader(num_workers={args.workers}) | {n_loader} | {in_workers:.3f} | "
          f"{n_loader / in_workers:,.0f} | {tf_frames[0] / in_workers if tf_frames else float('nan'):.2f}x tf.data's "
          f"fastest; {in_process / in_workers:.2f}x in-process |")
    for name, (seconds, n) in tf_rows.items():
        if name.startswith("frames"):
            print(f"| tf.data: {name} (AUTOTUNE) | {n} | {seconds:.3f} | {n / seconds:,.0f} | |")

    one = next(iter(FrameDataset(folder, Window(history=history, future=future), shuffle=False)))
    bound = args.buffer * frame_nbytes(one)
    print(f"\nmemory per worker: one frame holds {frame_nbytes(one):,} bytes; documented bound of the buffer: "
          f"{args.buffer} x {frame_nbytes(one):,} = {bound / 2**20:.1f} MiB")
    print(f"peak RSS (VmHWM) of the workers, buffer {args.buffer}: {[f'{p / 1024:.0f} MiB' for p in peaks]}; "
          f"buffer 0: {[f'{p / 1024:.0f} MiB' for p in peaks_none]}; difference "
          f"{(max(peaks, default=0) - max(peaks_none, default=0)) / 1024:.1f} MiB (bound {bound / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
