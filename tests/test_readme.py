"""The README is the front page: what tfr_torch is, the two commands, one example that runs as written, the peers
table and links into the documentation (docs/), each to a page that exists. It holds project facts only: no paths
of the machine it was written on, no issue-tracker columns. (The guides' code blocks, the command-line page and
the API reference are checked by tests/test_docs.py.)"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_two_commands_and_the_sections():
    assert "make demo" in README and "make test" in README and "make docs" in README
    for title in ("Two commands", "One example", "Beside the peers", "The documentation"):
        assert re.search(rf"^## {title}$", README, re.M), title


def test_the_example_runs(tmp_path, monkeypatch, capsys):
    block = re.search(r"## One example\n\n```python\n(.*?)```", README, re.S)
    assert block, "the README lost its example"
    monkeypatch.chdir(tmp_path)
    exec(compile(block.group(1), "README.md (One example)", "exec"), {"__name__": "readme"})
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(line.startswith("torch.Size([32]) torch.float32 b'item ") for line in lines)


def test_every_link_into_the_documentation_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not link.startswith("http")]
    assert len(local) >= 15, local
    for link in local:
        assert (ROOT / link).is_file(), link
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "guides").glob("*.md")}
    assert pages <= set(local), sorted(pages - set(local))


def test_readme_holds_no_machine_paths_or_tracker_columns():
    for pattern in (r"/work/", r"/root/", r"/home/\w", r"/tmp/", r"site-packages"):
        assert not re.search(pattern, README), pattern
    for header in re.findall(r"^\|(.*)\|\n\|[-:| ]+\|$", README, re.M):
        assert "issue" not in header.lower(), header
