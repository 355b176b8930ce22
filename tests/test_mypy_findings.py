"""Bugs that `mypy --strict` on the package led to (tests/test_typing.py runs it); each fails without its fix."""

from __future__ import annotations

import subprocess
import sys

import torch

import tfr_torch


def test_an_empty_spec_compiled_first_in_a_process_gives_a_plan():
    # compile_features remembers the last spec; before any, that memory held an empty spec with no plan, so an
    # empty spec compiled first matched it and got None (parse_example(records, {}) raised AttributeError)
    script = ("import tfr_torch\n"
              "assert tfr_torch.compile_features({}) is not None\n"
              "print(tfr_torch.parse_example([tfr_torch.encode_example({'a': 1})], {}))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "{}"


def test_ragged_partitions_as_a_list_as_the_readme_writes_them():
    spec = tfr_torch.RaggedFeature(torch.int64, partitions=[tfr_torch.RowLengths("n")], value_key="v")
    assert spec.partitions == (tfr_torch.RowLengths("n"),)


def test_sharded_writer_close_after_abort_returns_no_shards(tmp_path):
    # ShardedWriter.paths was set only by close(); close() after abort() (e.g. a `with` block that raised, then an
    # explicit close) returned it and raised AttributeError
    from tfr_torch.tools.shards import ShardedWriter

    writer = ShardedWriter(tmp_path, "data", "train")
    writer.write(b"record")
    writer.abort()
    assert writer.close() == []
