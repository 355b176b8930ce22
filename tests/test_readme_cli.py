"""The README's command-line section matches the parser, and the README holds project facts only (no paths of the
machine it was written on, no issue-tracker columns)."""

import re
from pathlib import Path

from tfr_torch.tools.cli import _parser  # no public handle on the parser

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _section(title):
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert match, f"the README lost its {title!r} section"
    return match.group(1)


def _commands():
    parser = _parser()
    return next(a for a in parser._actions if a.dest == "command").choices


def test_every_command_and_option_in_the_readme_exists():
    block = re.search(r"```\n(tfr-torch .*?)```", _section("Command line"), re.S).group(1)
    commands = _commands()
    usage: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        if line.startswith("tfr-torch "):
            current = line.split()[1]
            usage[current] = ""
        usage[current] += " " + line.split("#")[0]
    assert set(usage) == set(commands)
    for name, text in usage.items():
        known = {s for action in commands[name]._actions for s in action.option_strings}
        for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", text):
            assert option in known, f"README shows {name} {option}, which the parser does not know"


def test_readme_holds_no_machine_paths_or_tracker_columns():
    for pattern in (r"/work/", r"/root/", r"/home/\w", r"/tmp/", r"site-packages"):
        assert not re.search(pattern, README), pattern
    for header in re.findall(r"^\|(.*)\|\n\|[-:| ]+\|$", README, re.M):
        assert "issue" not in header.lower(), header
