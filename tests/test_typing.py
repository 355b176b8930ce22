"""The type hints match the documented calls: mypy --strict accepts the README's calls (tests/data/typing/) and
refuses wrong ones. The package's own strictness is not gated yet (see pyproject's [tool.mypy])."""

from __future__ import annotations

from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

HERE = Path(__file__).parent / "data" / "typing"


def _mypy(path: Path) -> tuple[str, int]:
    out, err, status = api.run(["--strict", "--follow-imports=silent", "--no-error-summary",
                                "--cache-dir=/dev/null", str(path)])
    return out + err, status


def test_documented_calls_type_check():
    out, status = _mypy(HERE / "documented_calls.py")
    assert status == 0, out


@pytest.mark.parametrize("call, complaint", [
    ('tfr_torch.FixedLenFeature("3", torch.int64)', 'Argument 1 to "FixedLenFeature" has incompatible type "str"'),
    ('tfr_torch.TFRecordDataset("a.tfrecord", "Auto")', 'Argument 2 to "TFRecordDataset" has incompatible type'),
    ('x: torch.Tensor = tfr_torch.decode_image([b""])', "Incompatible types in assignment"),
])
def test_wrong_calls_are_refused(tmp_path, call, complaint):
    script = tmp_path / "wrong.py"
    script.write_text(f"import torch\nimport tfr_torch\n{call}\n")
    out, status = _mypy(script)
    assert status == 1 and complaint in out, out


def test_all_is_the_export_table():
    import tfr_torch

    assert tfr_torch.__all__ == ["__version__", *sorted(tfr_torch._EXPORTS)]
