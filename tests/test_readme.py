"""The README's API tour runs as written (so the README keeps telling the truth)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_api_tour_runs(tmp_path, monkeypatch):
    text = README.read_text()
    block = re.search(r"## A tour of the API\n\n```python\n(.*?)```", text, re.S)
    assert block, "the README lost its API tour"
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(block.group(1), "README.md (API tour)", "exec"), scope)
    assert scope["features"]["label"].tolist() == [3]
    assert scope["features"]["caption"] == [b"a cat"]
    assert scope["record"] == b"any raw record"
    assert scope["image"].shape == (3, 3)
    assert len(scope["index"]) == 2
