"""`make demo`: the quick start runs, leaves no temporary folder behind, and nothing is reinstalled when nothing
changed (the Makefile's stamp files)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tfr_torch

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_and_removes_its_temporary_folder(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True,
                            text=True, env=dict(os.environ, TMPDIR=str(scratch)), timeout=300)
    assert result.returncode == 0, result.stderr
    assert "epoch 1: 1000 records in 16 batches" in result.stdout
    assert "each record exactly once" in result.stdout
    assert list(scratch.iterdir()) == []  # the demo's folder is gone


def test_quickstart_keeps_files_in_the_folder_it_is_given(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py"), str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    # the GZIP shard (00001) also gets its seek points, which only the compiled core builds
    seek = ["demo-00001-of-00002.tfrecord.idx.seek"] if tfr_torch.backend() == "native" else []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "demo-00000-of-00002.tfrecord", "demo-00000-of-00002.tfrecord.idx",
        "demo-00001-of-00002.tfrecord", "demo-00001-of-00002.tfrecord.idx", *seek]
    assert f"files are in {tmp_path / 'out'}; try: tfr-torch verify" in result.stdout


def _make(folder, *targets):
    """The commands `make -n TARGETS` would run in `folder` (a copy of the Makefile and what it depends on)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    result = subprocess.run(["make", "--no-print-directory", "-n", *targets, "VENV=venv"], cwd=folder,
                            capture_output=True, text=True, timeout=60, env=env)  # as if typed (not under make)
    assert result.returncode == 0, result.stderr
    return [line.strip() for line in result.stdout.splitlines()]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_installs_only_when_something_changed(tmp_path):
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "tfr_torch" / "_native" / "src", tmp_path / "tfr_torch" / "_native" / "src")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    fresh = _make(tmp_path, "demo")
    assert any("pip" in line and "install" in line and "-e ." in line for line in fresh), fresh
    assert fresh[-1] == "venv/bin/python examples/quickstart.py"

    (tmp_path / "venv" / ".installed").touch()  # as the install step leaves it
    assert _make(tmp_path, "demo") == ["venv/bin/python examples/quickstart.py"]

    later = os.stat(tmp_path / "venv" / ".installed").st_mtime + 10
    source = sorted((tmp_path / "tfr_torch" / "_native" / "src").glob("*.c"))[0]
    os.utime(source, (later, later))  # a C source changed: rebuild
    assert any("-e ." in line for line in _make(tmp_path, "demo"))
    os.utime(tmp_path / "venv" / ".installed", (later + 10, later + 10))
    for stamp in (".installed-test", ".installed-fuzz"):
        (tmp_path / "venv" / stamp).touch()
        os.utime(tmp_path / "venv" / stamp, (later + 20, later + 20))
    lines = _make(tmp_path, "test")  # the suite (and whatever else `make test` runs), nothing installed
    assert lines[0] == "venv/bin/python -m pytest -q --durations=15" and not any("pip" in line for line in lines), lines
