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


WRONG_CALLS = [
    ('tfr_torch.FixedLenFeature("3", torch.int64)', 'Argument 1 to "FixedLenFeature" has incompatible type "str"'),
    ('tfr_torch.TFRecordDataset("a.tfrecord", "Auto")', 'Argument 2 to "TFRecordDataset" has incompatible type'),
    ('x: torch.Tensor = tfr_torch.decode_image([b""])', "Incompatible types in assignment"),
]


def _mypy(paths: list[Path]) -> tuple[str, int]:
    """mypy --strict on these files, in its own process. Not mypy.api.run in this one: mypy raises the garbage
    collector's threshold for the rest of the process (gc.set_threshold(200_000, 30, 30)) and leaves millions of
    objects behind, so every later test ran with cyclic garbage collected 300 times less often (the corruption
    tests' memory cap then failed them) and every full collection took seconds."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
                             "--cache-dir=/dev/null", *map(str, paths)], capture_output=True, text=True)
    return result.stdout + result.stderr, result.returncode


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[Path, list[str]], str, int]:
    """One mypy --strict run (5-15 s: mypy reads torch's stubs; no cache) over the documented calls and a script
    per wrong call: each file's complaints, mypy's whole output and its exit status."""
    folder = tmp_path_factory.mktemp("wrong_calls")
    scripts = [folder / f"wrong_{k}.py" for k in range(len(WRONG_CALLS))]
    for script, (call, _) in zip(scripts, WRONG_CALLS):
        script.write_text(f"import torch\nimport tfr_torch\n{call}\n")
    files = [HERE / "documented_calls.py", *scripts]
    out, status = _mypy(files)
    by_file: dict[Path, list[str]] = {f: [] for f in files}
    for line in out.splitlines():
        for f in files:
            if line.startswith(f"{f}:"):
                by_file[f].append(line)
    return by_file, out, status


def test_documented_calls_type_check(checked):
    """mypy --strict over a script that imports torch and tfr_torch and makes the documented calls: no complaint
    (the run's other files are the wrong calls below, each with its own complaint)."""
    by_file, out, status = checked
    assert by_file[HERE / "documented_calls.py"] == [], out
    assert status == 1  # (the wrong calls)
    assert all(line.split(":", 1)[0] in map(str, by_file) for line in out.splitlines() if ": error:" in line), out


@pytest.mark.parametrize("k", range(len(WRONG_CALLS)), ids=[call for call, _ in WRONG_CALLS])
def test_wrong_calls_are_refused(checked, k):
    by_file, out, _ = checked
    call, complaint = WRONG_CALLS[k]
    mine = [path for path in by_file if path.name == f"wrong_{k}.py"][0]
    assert any(complaint in line for line in by_file[mine]), (call, out)


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
