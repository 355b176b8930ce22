"""The documentation site (docs/, built by `make docs`) tells the truth, checked without mkdocs: the markdown files
are parsed here directly.

- Every Python code block of the guides runs, page by page in a fresh folder (a page's blocks share one namespace,
  in order, as a reader would paste them), on the small data the page makes itself. A block that cannot run here
  (network, a GPU, a Ray cluster, TFDS downloads) is marked with an HTML comment on the line before its fence,
  `<!-- skip: the reason -->`, and the marked blocks are counted: SKIPPED lists them, so adding one is deliberate.
- Every public name (tfr_torch.__all__ and the optional families' __all__) has a `::: name` entry in an API
  reference page and a docstring of its own (for a constant, the string after its assignment, which mkdocstrings
  shows too), and every argument of the public functions and classes is annotated.
- The command-line page shows only commands and options the parser knows, and no page holds paths of the machine
  it was written on.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import signal
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GUIDES = sorted(p for p in DOCS.rglob("*.md") if "reference" not in p.relative_to(DOCS).parts)
FAMILIES = ["tfr_torch.tfds", "tfr_torch.ray", "tfr_torch.images", "tfr_torch.hf", "tfr_torch.nodes",
            "tfr_torch.rlds"]

# (page, reason) of every block marked to skip; keep it short
SKIPPED = [
    ("guides/images.md", "needs a CUDA device (DeviceLoader on the GPU)"),
    ("guides/ray.md", "starts Ray Train on a cluster and reads gs://"),
    ("guides/rlds.md", "needs Open X-Embodiment folders and your standardize functions"),
    ("guides/tfds.md", "needs ~/tensorflow_datasets/mnist (a TFDS download)"),
    ("guides/tfds.md", "reads gs://gresearch/robotics (network)"),
]

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.S | re.M)
SKIP = re.compile(r"<!--\s*skip:\s*(.*?)\s*-->\s*$")


def code_blocks(path: Path) -> list[tuple[str, str, int, str | None]]:
    """(language, source, line, skip reason or None) of each fenced block of a markdown file, in order."""
    text = path.read_text()
    blocks = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.search(before)
        body = textwrap.dedent(match.group("body"))
        blocks.append((match.group("lang"), body, line, skip.group(1) if skip else None))
    return blocks


def _rel(path: Path) -> str:
    return path.relative_to(DOCS).as_posix()


def test_the_guides_exist_and_the_skip_list_is_what_the_pages_mark():
    assert len(GUIDES) >= 15, [_rel(p) for p in GUIDES]
    marked = [(_rel(p), reason) for p in GUIDES for lang, _, _, reason in code_blocks(p) if reason]
    assert sorted(marked) == sorted(SKIPPED)
    runnable = [1 for p in GUIDES for lang, _, _, reason in code_blocks(p) if lang == "python" and not reason]
    assert len(runnable) >= 2 * len(SKIPPED), (len(runnable), len(SKIPPED))


PAGES_WITH_CODE = [p for p in GUIDES if any(lang == "python" and not skip for lang, _, _, skip in code_blocks(p))]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=_rel)
def test_every_python_block_of_a_page_runs(page, tmp_path, monkeypatch):
    """The page's blocks in order, in one namespace, in an empty folder (with `tests/` linked in, for the golden
    TFDS folder the Hugging Face page reads). Slow for some pages (seconds): they start DataLoader workers, convert
    images, or write and read Hugging Face datasets, as their readers would."""
    if "huggingface" in page.name:
        datasets = pytest.importorskip("datasets")
        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    if "torchdata-nodes" in page.name:
        pytest.importorskip("torchdata.nodes")
    if page.name == "ray.md":
        pytest.importorskip("ray")
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    monkeypatch.chdir(tmp_path)
    scope: dict = {"__name__": "docs"}
    sigterm = signal.getsignal(signal.SIGTERM)  # ray.init (the Ray page) sets its own, which ray.shutdown leaves
    try:
        for lang, source, line, skip in code_blocks(page):
            if lang != "python" or skip:
                continue
            code = compile("\n" * (line) + source, f"docs/{_rel(page)}", "exec")  # tracebacks name the page's line
            exec(code, scope)
    finally:
        from loader_util import shut_down_loaders

        shut_down_loaders(scope)
        if page.name == "ray.md":  # the page starts a local Ray and shuts it down; not left running after a failure
            import ray

            if ray.is_initialized():
                ray.shutdown()
        signal.signal(signal.SIGTERM, sigterm)


def _public_names() -> list[tuple[str, str, object]]:
    """(module, name, object) of every public name."""
    import tfr_torch

    names = [("tfr_torch", n, getattr(tfr_torch, n)) for n in tfr_torch.__all__]
    for family in FAMILIES:
        module = importlib.import_module(family)
        names += [(family, n, getattr(module, n)) for n in module.__all__]
    return names


def _reference_entries() -> dict[str, str]:
    """{public name: the path mkdocstrings loads} of every `::: path` entry of docs/reference/ (the public name is
    its `heading:` option, else the path)."""
    entries = {}
    for page in (DOCS / "reference").glob("*.md"):
        for path, heading in re.findall(r'^::: ([\w.]+)\n(?:    options:\n(?:      .*\n)*?      heading: "([\w.]+)")?',
                                        page.read_text(), re.M):
            entries[heading or path] = path
    return entries


def _attribute_docstrings() -> dict[str, str]:
    """Top-level `NAME = value` (or `NAME: T = value`) followed by a string, in every module of the package."""
    found = {}
    for path in (ROOT / "tfr_torch").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for stmt, after in zip(tree.body, tree.body[1:]):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                stmt, ast.AnnAssign) else []
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(
                    after.value.value, str):
                for target in targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = after.value.value
    return found


def test_every_public_name_is_in_the_api_reference():
    """Slow (seconds): it imports every optional family, Ray and Hugging Face datasets included."""
    entries = _reference_entries()
    names = _public_names()
    missing = [f"{module}.{name}" for module, name, _ in names if f"{module}.{name}" not in entries]
    assert not missing, f"add `::: NAME` entries for these to a page of docs/reference/: {missing}"
    known = {f"{module}.{name}" for module, name, _ in names}
    assert not set(entries) - known, f"reference entries that are no public name: {sorted(set(entries) - known)}"
    for module, name, obj in names:  # the path shown loads the public object itself
        where, _, attribute = entries[f"{module}.{name}"].rpartition(".")
        assert getattr(importlib.import_module(where), attribute) is obj, (module, name, where)


def test_every_public_name_has_a_docstring_and_annotated_arguments():
    """The families are imported once by the test before (Ray and datasets take seconds); this reads the objects."""
    attribute_docs = _attribute_docstrings()
    undocumented, unannotated = [], []
    for module, name, obj in _public_names():
        if inspect.isclass(obj):
            doc = obj.__dict__.get("__doc__")
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
            doc = obj.__doc__
        else:
            doc = attribute_docs.get(name)
        if not (doc and doc.strip()):
            undocumented.append(f"{module}.{name}")
        if inspect.isfunction(obj) or (inspect.isclass(obj) and "__init__" in obj.__dict__):
            function = obj.__init__ if inspect.isclass(obj) else obj
            for parameter in list(inspect.signature(function).parameters.values()):
                if parameter.name in ("self", "cls"):
                    continue
                if parameter.annotation is inspect.Parameter.empty:
                    unannotated.append(f"{module}.{name}({parameter.name})")
    assert not undocumented, undocumented
    assert not unannotated, unannotated


def test_the_command_line_page_shows_only_what_the_parser_knows():
    from tfr_torch.tools.cli import _parser  # no public handle on the parser

    commands = next(a for a in _parser()._actions if a.dest == "command").choices
    (block,) = [src for lang, src, _, _ in code_blocks(DOCS / "guides" / "cli.md") if src.startswith("tfr-torch ")]
    usage: dict[str, str] = {}
    current = None
    for line in block.splitlines():
        if line.startswith("tfr-torch "):
            current = line.split()[1]
            usage[current] = ""
        assert current is not None
        usage[current] += " " + line.split("#")[0]
    assert set(usage) == set(commands)
    for name, text in usage.items():
        known = {s for action in commands[name]._actions for s in action.option_strings}
        for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", text):
            assert option in known, f"docs/guides/cli.md shows {name} {option}, which the parser does not know"


def test_no_page_holds_machine_paths_or_tracker_columns():
    """The pages, and the benchmark results whose commands and versions the plots print under them."""
    for page in [*DOCS.rglob("*.md"), *(ROOT / "benchmarks" / "results").glob("*.json")]:
        text = page.read_text()
        for pattern in (r"/work/", r"/root/", r"/home/\w", r"/tmp/", r"site-packages"):
            assert not re.search(pattern, text), (_rel(page), pattern)
        for header in re.findall(r"^\|(.*)\|\n\|[-:| ]+\|$", text, re.M):
            assert "issue" not in header.lower(), (_rel(page), header)


def test_every_page_is_in_the_navigation():
    config = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", config, re.M))
    pages = {_rel(p) for p in DOCS.rglob("*.md")}
    assert pages == listed, (sorted(pages - listed), sorted(listed - pages))
    assert os.path.exists(ROOT / ".gitignore") and "/site/" in (ROOT / ".gitignore").read_text()


def test_the_benchmarks_page_shows_every_plot_of_the_committed_results():
    """`make docs` draws plots from benchmarks/results/*.json (benchmarks/report.py); the page shows each of them
    and no other (plot_names needs no matplotlib)."""
    import sys

    sys.path.insert(0, str(ROOT))
    from benchmarks.report import plot_names

    results = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert results
    drawn = {name for path in results for name in plot_names(str(path))}
    shown = set(re.findall(r"\]\(plots/([\w.-]+\.png)\)", (DOCS / "benchmarks.md").read_text()))
    assert shown == drawn, (sorted(drawn - shown), sorted(shown - drawn))


def test_the_records_tour_gives_what_its_comments_say(tmp_path, monkeypatch):
    """The format layer's tour (docs/guides/records.md, once the README's) yields the values its comments name."""
    (source,) = [src for lang, src, _, _ in code_blocks(DOCS / "guides" / "records.md")
                 if lang == "python" and "TFRecordWriter" in src]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(source, "docs/guides/records.md", "exec"), scope)
    assert scope["features"]["label"].tolist() == [3]
    assert scope["features"]["caption"] == [b"a cat"]
    assert scope["record"] == b"any raw record"
    assert scope["image"].shape == (3, 3)
    assert len(scope["index"]) == 2
