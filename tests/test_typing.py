"""The type hints match the documented calls: mypy --strict accepts the documented calls (tests/data/typing/) and
refuses wrong ones; and the package itself passes `mypy` under pyproject's [tool.mypy] (strict, exceptions listed
there with their reasons)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy.api")

HERE = Path(__file__).parent / "data" / "typing"
ROOT = Path(__file__).resolve().parent.parent


def _mypy(path: Path) -> tuple[str, int]:
    """mypy --strict on one file, in its own process. Not mypy.api.run in this one: mypy raises the garbage
    collector's threshold for the rest of the process (gc.set_threshold(200_000, 30, 30)) and leaves millions of
    objects behind, so every later test ran with cyclic garbage collected 300 times less often (the corruption
    tests' memory cap then failed them) and every full collection took seconds."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
                             "--cache-dir=/dev/null", str(path)], capture_output=True, text=True)
    return result.stdout + result.stderr, result.returncode


def test_documented_calls_type_check():
    """Runs mypy --strict over a script that imports torch and tfr_torch: 5-15 s, mypy reading torch's stubs."""
    out, status = _mypy(HERE / "documented_calls.py")
    assert status == 0, out


@pytest.mark.parametrize("call, complaint", [
    ('tfr_torch.FixedLenFeature("3", torch.int64)', 'Argument 1 to "FixedLenFeature" has incompatible type "str"'),
    ('tfr_torch.TFRecordDataset("a.tfrecord", "Auto")', 'Argument 2 to "TFRecordDataset" has incompatible type'),
    ('x: torch.Tensor = tfr_torch.decode_image([b""])', "Incompatible types in assignment"),
])
def test_wrong_calls_are_refused(tmp_path, call, complaint):
    """One mypy --strict run per call (5-15 s each: mypy reads torch's stubs; no cache, so no run sees another's)."""
    script = tmp_path / "wrong.py"
    script.write_text(f"import torch\nimport tfr_torch\n{call}\n")
    out, status = _mypy(script)
    assert status == 1 and complaint in out, out


def test_all_is_the_export_table():
    import tfr_torch

    assert tfr_torch.__all__ == ["__version__", *sorted(tfr_torch._EXPORTS)]


@pytest.mark.slow
def test_the_package_type_checks_strictly(tmp_path):
    """`mypy` from the repository root, as a developer runs it: [tool.mypy] checks tfr_torch strictly. A fresh cache
    (in tmp_path, about a minute) so that nothing left from an earlier run can hide an error."""
    result = subprocess.run([sys.executable, "-m", "mypy", f"--cache-dir={tmp_path / 'mypy'}", "--no-error-summary"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "", result.stdout
