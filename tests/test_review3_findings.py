"""Review of the changes since fc71dfc (module splits, PipeBatch transport, CLI leftovers): defects found, each
fixed and tested here."""

from __future__ import annotations

import subprocess
import sys

_CACHED_TRANSFORM_SCRIPT = r"""
import sys, warnings
import torch, tfr_torch
from torch.utils.data import DataLoader
path = sys.argv[1]
with tfr_torch.TFRecordWriter(path) as w:
    for i in range(40):
        w.write_example({"id": i, "tok": list(range(i % 5 + 1))})
tfr_torch.build_index(path)
spec = {"id": tfr_torch.FixedLenFeature([], torch.int64), "tok": tfr_torch.VarLenFeature(torch.int64)}
source = tfr_torch.TFRecordDataset(path, spec, batch_size=8, shared_memory=False, index="auto")
cached = tfr_torch.CachedDataset(source, transform=lambda b: {"id": b["id"], "tok": b["tok"]})
warnings.simplefilter("always")
ids = []
for b in DataLoader(cached, batch_size=None, num_workers=2):  # the first epoch: the source read through
    assert type(b) is dict and b["tok"].layout == torch.sparse_coo
    ids += b["id"].tolist()
assert sorted(ids) == list(range(40)), ids
"""


def test_cached_dataset_transform_results_of_the_first_epoch_travel_without_torchs_sparse_warning(tmp_path):
    done = subprocess.run([sys.executable, "-c", _CACHED_TRANSFORM_SCRIPT, str(tmp_path / "v.tfrecord")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Sparse invariant" not in done.stdout + done.stderr


def test_inspect_files_takes_a_file_url_as_before(tmp_path):
    import tfr_torch
    from tfr_torch.tools.inspection import inspect_files

    path = str(tmp_path / "f.tfrecord")
    with tfr_torch.TFRecordWriter(path) as writer:
        writer.write(b"abc")
    report = inspect_files([f"file://{path}"])
    assert report.splitlines()[1] == f"file://{path}\t1\t{3 + 16}\tnone"
