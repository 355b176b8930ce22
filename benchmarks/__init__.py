"""The benchmark harness behind `python benchmarks/run.py`: tfr_torch beside the `tfrecord` package and TensorFlow.

Modules (each imports only modules below it in this list)
- `run.py` (a script beside the package): the command line; `--worker` runs one subprocess's share.
- `harness`: the worker (imports one library, times its variants of one workload) and the parent's side of it.
- `variants/`: one module per workload family (`records`: read and write, `decode`: tabular Examples into
  tensors, `loader`: DataLoaders); importing `benchmarks.variants` registers them all, in this order.
- `report`: a `Row` per variant with its rates and ratios, printed as a Markdown table and a summary.
- `registry`: `Workload`, `Variant`, `Ctx` and the `workload()` / `@variant()` registration functions.
- `datasets`: the synthetic data sets and their cache; `system`: machine facts, process CPU time and memory.

Design
- A registry of workloads (`WORKLOADS`). Each has a data set and, per library ("tfr_torch", "tfrecord",
  "tensorflow"), one or more variants registered with `@variant(...)`. A variant's function gets a `Ctx` and
  returns a zero-argument callable that does one full pass and returns how many records it handled.
- Variants of one kind (e.g. "crc": reads that check every CRC) are comparable; each row's ratio is
  tfr_torch's rate / the row's rate, against tfr_torch's variant of the same kind (>1: tfr_torch is faster).
- Every (workload, library) pair runs in its own subprocess (`--worker`): `import tfrecord` and
  `import tensorflow` cannot share a process (both register tensorflow.BytesList & co in protobuf's default
  pool), and a fresh process also keeps memory and allocator state from one library out of another's numbers.
  A library that does not import is reported as "not installed", not as an error.
- Data is generated once with tfr_torch (so every library reads the very same file) and cached in
  --data-dir (default benchmarks/data/, gitignored); files are named after their record count and regenerated
  when missing or when their sidecar .json does not match.
- Timing: one untimed warm-up pass (which also brings the file into the page cache), then --repeat timed
  passes; the best (shortest) is reported, with the process CPU time of that pass (plus that of its joined
  DataLoader workers) as a % of its wall time (over 100% means more than one core was busy). MB are 10**6 bytes
  of record payload (for gzip, decompressed), not counting the 16 bytes of framing per record.
- Workloads run on one core (TensorFlow's inter/intra-op pools of 1, OMP_NUM_THREADS=1 for torch) unless
  registered with parallel=True (loader-16k: DataLoader workers, tf.data AUTOTUNE).
- A pass may put extra numbers in `ctx.metrics` (loader-16k: the peak RSS of DataLoader workers); a variant's
  `summary` turns them into a line of the summary.
"""
