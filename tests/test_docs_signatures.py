"""The call signatures that the prose of README.md and docs/ quotes match the code.

A page's inline code span `Name(...)` or `module.name(...)` (outside fenced blocks; a span may run over lines) whose
name resolves to a public object (tfr_torch.__all__; a name of an optional family importable here, as `hf.write`,
`tfr_torch.hf.write` or, when no other public name has it, `write`; a method `Class.method` of a public class) is
checked when it is anchored on that object: its first item is the bare name of the real first parameter (`paths` in
`TFRecordDataset(paths, features=None, *, ...)`), or it holds a bare `*`. Spans with a value first
(`TFRecordDataset("train-*", ...)`), a value for the first parameter (`RemoteOptions(metadata_ttl=60)`), another
first name (`TFRecordDataset(files)`) or a leading `...` are examples, left alone.

An anchored span is a signature when it holds `*`, `*args`, `**kwargs` or an `...` item, or when its defaults are
values (not placeholders such as `N`, `spec` or `...`) and its bare names are all parameters. A signature is checked
against inspect.signature:
- every parameter it names exists, in the code's order, and of the same kind (positional, keyword-only after `*`);
- a default it gives equals the code's (a literal, an expression such as `64 << 20` or `256 MiB`, or a name such as
  `torch.int32` resolved in the object's module); a default written `...` or `{...}` stands for any value;
- unless it holds an `...` item or `**kwargs`, it names every parameter; a span of bare names only (a short form,
  `VarLenFeature(dtype)`) must name at least every parameter without a default.
Any other anchored span is an example call (`TFDSDecoder(info, decode_threads=N)`, `read_tfrecords(paths, spec)`)
and must bind to the signature (no unknown keyword, no missing required argument).

Each finding names the page, the line, the quoted span and the code's signature.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "reference" not in p.relative_to(DOCS).parts)]
FAMILIES = ["tfr_torch.tfds", "tfr_torch.ray", "tfr_torch.images", "tfr_torch.hf", "tfr_torch.nodes",
            "tfr_torch.rlds"]

# at least this many signatures on the core pages (datasets, decoding, records): a broken extractor cannot pass
MIN_SIGNATURES = 20

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[^\n]*\n.*?^(?P=indent)(?P=fence)[ \t]*$", re.S | re.M)
CALL = re.compile(r"^(?P<name>[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*)\((?P<params>.*)\)$", re.S)
UNITS = {"KiB": "<< 10", "MiB": "<< 20", "GiB": "<< 30"}  # `256 MiB` as a default, outside quotes
ANY = object()  # a default the prose writes as `...`: any value


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def code_spans(text: str) -> list[tuple[int, str]]:
    """(line, content) of each inline code span of a markdown text, fenced blocks left out (CommonMark: a run of n
    backticks opens, the next run of exactly n closes; line breaks inside read as spaces)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    spans = []
    position = 0
    for opening in re.finditer(r"`+", text):
        if opening.start() < position:
            continue
        run = opening.group(0)
        closing = re.compile(rf"(?<!`){run}(?!`)").search(text, opening.end())
        if closing is None:
            position = opening.end()
            continue
        content = text[opening.end():closing.start()].replace("\n", " ")
        spans.append((text.count("\n", 0, opening.start()) + 1, content.strip()))
        position = closing.end()
    return spans


@dataclass(frozen=True)
class Lazy:
    """A public name, imported when a span first quotes it (torch, Ray and Hugging Face datasets take seconds to
    import; only the pages that quote them pay for it)."""

    module: str
    name: str

    def load(self) -> object:
        return getattr(importlib.import_module(self.module), self.name)


def _family_names(family: str) -> list[str]:
    """A family's __all__, read from its source when it is a literal list (no import), else by importing it."""
    source = (ROOT / family.replace(".", "/") / "__init__.py").read_text()
    for statement in ast.parse(source).body:
        if isinstance(statement, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in statement.targets):
            try:
                return list(ast.literal_eval(statement.value))
            except ValueError:
                break
    return list(importlib.import_module(family).__all__)


def public_objects() -> dict[str, object]:
    """{quoted name: Lazy} (nothing imported but tfr_torch's lazy `__init__`): `Name` and `tfr_torch.Name` for
    tfr_torch.__all__; `family.name` and `tfr_torch.family.name` for each optional family, and the bare `name`
    when no other public name has it."""
    import tfr_torch

    table: dict[str, object] = {}
    for name in tfr_torch.__all__:  # lazy too: the first of them imports torch
        table[name] = table[f"tfr_torch.{name}"] = Lazy("tfr_torch", name)
    bare: dict[str, list[Lazy]] = {}
    for family in FAMILIES:
        short = family.rpartition(".")[2]
        for name in _family_names(family):
            table[f"{short}.{name}"] = table[f"{family}.{name}"] = Lazy(family, name)
            bare.setdefault(name, []).append(Lazy(family, name))
    for name, objects in bare.items():
        if name not in table and len(objects) == 1:
            table[name] = objects[0]
    return table


def _load(entry: object) -> object:
    """The object of a table entry; pytest skips the page's test when a family's optional dependency is missing."""
    if not isinstance(entry, Lazy):
        return entry
    try:
        return entry.load()
    except ImportError as error:
        pytest.skip(f"{entry.module} needs an optional dependency: {error}")


def resolve(name: str, table: dict[str, object]) -> object | None:
    """The public object a quoted name stands for (a method `Class.method` of a public class too), or None."""
    if name in table:
        return _load(table[name])
    owner, _, attribute = name.rpartition(".")
    if owner in table:
        cls = _load(table[owner])
        if not inspect.isclass(cls):
            return None
        found = inspect.getattr_static(cls, attribute, None)
        if isinstance(found, (staticmethod, classmethod)):
            return getattr(cls, attribute)
        if inspect.isfunction(found):
            return found
    return None


def real_parameters(obj: object) -> list[inspect.Parameter] | None:
    """The parameters a caller passes (no `self`), or None when the object has no signature."""
    try:
        parameters = list(inspect.signature(obj).parameters.values())  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    if parameters and parameters[0].name in ("self", "cls") and inspect.isfunction(obj):
        parameters = parameters[1:]
    return parameters


def _split_top_level(params: str) -> list[str]:
    """Items of a parameter list split on the commas outside brackets and strings."""
    items, depth, quote, current = [], 0, None, ""
    for char in params:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        items.append(current.strip())
    return items


@dataclass
class Quoted:
    """A signature as a page quotes it."""

    parameters: list[inspect.Parameter]  # defaults as source text, or inspect.Parameter.empty
    elided: bool  # an `...` item stands for parameters left out
    bare_only: bool  # no defaults, no `*`: a short form such as `VarLenFeature(dtype)`
    loose: frozenset[str] = frozenset()  # named after an `...` that may hide the `*`: either kind will do


def parse_quoted(params: str) -> Quoted | None:
    """The quoted parameters, or None when they are not a `def`'s (values, not names)."""
    items = _split_top_level(params)
    elided = "..." in items
    loose, after_ellipsis = set(), False
    for item in items:
        if item.startswith("*"):
            break
        if item == "...":
            after_ellipsis = True
        elif after_ellipsis:
            loose.add(item.partition("=")[0].strip())
    kept = [item for item in items if item != "..."]
    for unit, shift in UNITS.items():
        kept = [re.sub(rf"(?<=\d) {unit}\b(?![\"'])", f" {shift}", item) for item in kept]
    try:
        tree = ast.parse(f"def f({', '.join(kept)}): pass")
    except SyntaxError:
        return None
    args = tree.body[0].args  # type: ignore[attr-defined]
    kinds = inspect.Parameter
    parameters = []
    positional = args.posonlyargs + args.args
    offsets = len(positional) - len(args.defaults)
    for index, arg in enumerate(positional):
        default = ast.unparse(args.defaults[index - offsets]) if index >= offsets else kinds.empty
        kind = kinds.POSITIONAL_ONLY if arg in args.posonlyargs else kinds.POSITIONAL_OR_KEYWORD
        parameters.append(inspect.Parameter(arg.arg, kind, default=default))
    if args.vararg:
        parameters.append(inspect.Parameter(args.vararg.arg, kinds.VAR_POSITIONAL))
    for arg, default_node in zip(args.kwonlyargs, args.kw_defaults):
        default = ast.unparse(default_node) if default_node is not None else kinds.empty
        parameters.append(inspect.Parameter(arg.arg, kinds.KEYWORD_ONLY, default=default))
    if args.kwarg:
        parameters.append(inspect.Parameter(args.kwarg.arg, kinds.VAR_KEYWORD))
    bare_only = bool(kept) and not kept[0].startswith("*") and all(
        p.default is kinds.empty and p.kind == kinds.POSITIONAL_OR_KEYWORD for p in parameters)
    return Quoted(parameters, elided, bare_only, frozenset(loose))


def _is_placeholder(source: str, obj: object) -> bool:
    """Whether a quoted value stands for some value rather than a default: `...`, `{...}`, or a name the object's
    module does not know (`N`, `spec`)."""
    try:
        return evaluate_default(source, obj) is ANY
    except NameError:
        return True
    except Exception:  # any other unreadable default is a signature's problem, reported by check()
        return False


def classify(params: str, real: list[inspect.Parameter], obj: object) -> tuple[str, Quoted] | None:
    """("signature", quoted) or ("call", quoted) for a span anchored on the real first parameter (see the module's
    docstring), None for one that is not. A call is an example with placeholder values (`TFDSDecoder(info,
    decode_threads=N)`) or with names the code does not have (`read_tfrecords(paths, spec)`): only checked to bind."""
    items = _split_top_level(params)
    if not items or not real or items[0] == "...":
        return None
    anchored = items[0] == "*" or "*" in items or (items[0].isidentifier() and items[0] == real[0].name)
    if not anchored:
        return None
    quoted = parse_quoted(params)
    if quoted is None:
        return None
    kinds = inspect.Parameter
    marked = quoted.elided or any(p.kind in (kinds.KEYWORD_ONLY, kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
                                  for p in quoted.parameters)
    if marked:
        return "signature", quoted
    if any(p.default is not kinds.empty and _is_placeholder(p.default, obj) for p in quoted.parameters):
        return "call", quoted
    names = {p.name for p in real}
    if quoted.bare_only and not all(p.name in names for p in quoted.parameters):
        return "call", quoted
    return "signature", quoted


def check_call(quoted: Quoted, obj: object) -> list[str]:
    """What keeps an example call from binding to the real signature (empty when it binds)."""
    kinds = inspect.Parameter
    positional = [None for p in quoted.parameters if p.default is kinds.empty]
    keywords = {p.name: None for p in quoted.parameters if p.default is not kinds.empty}
    try:
        inspect.signature(obj).bind(*positional, **keywords)  # type: ignore[arg-type]
    except TypeError as error:
        return [f"as a call it does not bind: {error}"]
    return []


_SAFE_NODES = (ast.Expression, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop, ast.Tuple, ast.List,
               ast.Dict, ast.Set, ast.Name, ast.Attribute, ast.Load)


def evaluate_default(source: str, obj: object) -> object:
    """The value of a quoted default: a literal, arithmetic on literals, or names resolved in the object's module
    (ANY for `...` or a container holding it)."""
    tree = ast.parse(source, mode="eval")
    if any(isinstance(node, ast.Constant) and node.value is Ellipsis for node in ast.walk(tree)):
        return ANY
    bad = [type(node).__name__ for node in ast.walk(tree) if not isinstance(node, _SAFE_NODES)]
    if bad:
        raise ValueError(f"default {source!r} is not a literal expression ({bad})")
    module = inspect.getmodule(inspect.unwrap(obj))  # type: ignore[arg-type]
    namespace = dict(vars(module)) if module else {}
    import numpy
    import torch

    namespace.update(torch=torch, np=numpy, numpy=numpy)
    return eval(compile(tree, "<docs default>", "eval"), {"__builtins__": {}}, namespace)  # noqa: S307


def _same(quoted: object, real: object) -> bool:
    try:
        if isinstance(quoted, (tuple, list)) and isinstance(real, (tuple, list)):
            return list(quoted) == list(real)
        return type(quoted) is type(real) and bool(quoted == real)
    except Exception:  # an array-like compared element-wise: not a default a page would quote
        return False


def _format(parameters: list[inspect.Parameter]) -> str:
    return str(inspect.Signature(parameters, __validate_parameters__=False))


def check(quoted: Quoted, real: list[inspect.Parameter], obj: object) -> list[str]:
    """What the quoted signature gets wrong about the real one (empty when it matches)."""
    problems = []
    by_name = {p.name: (i, p) for i, p in enumerate(real)}
    kinds = inspect.Parameter
    last = -1
    for parameter in quoted.parameters:
        if parameter.name not in by_name:
            problems.append(f"`{parameter.name}` is no parameter")
            continue
        index, actual = by_name[parameter.name]
        if index < last:
            problems.append(f"`{parameter.name}` is out of order")
        last = max(last, index)
        positional = (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
        loose = parameter.name in quoted.loose and actual.kind == kinds.KEYWORD_ONLY
        if parameter.kind != actual.kind and not loose and not (
                parameter.kind in positional and actual.kind in positional):
            problems.append(f"`{parameter.name}` is {actual.kind.description}, the page says "
                            f"{parameter.kind.description}")
        if parameter.default is not kinds.empty:
            if actual.default is kinds.empty:
                problems.append(f"`{parameter.name}` has no default, the page gives {parameter.default}")
                continue
            try:
                value = evaluate_default(parameter.default, obj)
            except Exception as error:  # the page's default cannot be read: say so rather than skip it
                problems.append(f"`{parameter.name}={parameter.default}`: {error}")
                continue
            if value is not ANY and not _same(value, actual.default):
                problems.append(f"`{parameter.name}` defaults to {actual.default!r}, the page says "
                                f"{parameter.default}")
    named = {p.name for p in quoted.parameters}
    open_ended = quoted.elided or any(p.kind == kinds.VAR_KEYWORD for p in quoted.parameters)
    if quoted.bare_only:
        missing = [p.name for p in real if p.name not in named and p.default is kinds.empty
                   and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)]
    elif not open_ended:
        missing = [p.name for p in real if p.name not in named]
    else:
        missing = []
    if missing:
        problems.append(f"it leaves out {', '.join(missing)}")
    return problems


@dataclass
class Finding:
    page: str
    line: int
    name: str
    span: str
    kind: str  # "signature" or "call"
    problems: list[str]
    real: str

    def __str__(self) -> str:
        return (f"{self.page}:{self.line}: `{self.span}`\n    code: {self.name}{self.real}\n    "
                + "; ".join(self.problems))


def signatures_of(text: str, page: str, table: dict[str, object]) -> list[Finding]:
    """Every quoted signature of a public name in a markdown text, with what it gets wrong."""
    found = []
    for line, span in code_spans(text):
        call = CALL.match(span)
        if not call:
            continue
        obj = resolve(call.group("name"), table)
        if obj is None:
            continue
        real = real_parameters(obj)
        if real is None:
            continue
        kind = classify(call.group("params"), real, obj)
        if kind is None:
            continue
        problems = check(kind[1], real, obj) if kind[0] == "signature" else check_call(kind[1], obj)
        found.append(Finding(page, line, call.group("name"), span, kind[0], problems, _format(real)))
    return found


@pytest.fixture(scope="module")
def table() -> dict[str, object]:
    return public_objects()


FOUND: dict[str, list[Finding]] = {}  # page -> its findings, filled by the page's test


def findings_of(page: str, table: dict[str, object]) -> list[Finding]:
    if page not in FOUND:
        FOUND[page] = signatures_of((ROOT / page).read_text(), page, table)
    return FOUND[page]


@pytest.mark.parametrize("page", [_rel(p) for p in PAGES])
def test_every_quoted_signature_matches_the_code(page, table):
    """Fast, but the first page that quotes an optional family imports it (Ray or Hugging Face datasets: a second or
    two each, more on a busy machine)."""
    wrong = [f for f in findings_of(page, table) if f.problems]
    assert not wrong, "signatures on the page that the code does not have:\n" + "\n".join(map(str, wrong))


def test_the_pages_quote_enough_signatures_to_check(table):
    """Runs after the pages' tests (it reuses what they found): the core pages alone hold enough signatures."""
    core = ["docs/guides/datasets.md", "docs/guides/decoding.md", "docs/guides/records.md"]
    total = sum(f.kind == "signature" for page in core for f in findings_of(page, table))
    assert total >= MIN_SIGNATURES, {page: len(findings_of(page, table)) for page in core}


# ---- the checker itself, on synthetic pages and functions


def sample(paths, features=None, *, index=None, span=1 << 20, shuffle=False, dtype=None, **options):
    """A stand-in for a public function."""


class Sample:
    """A stand-in for a public class."""

    def __init__(self, dataset, directory=None, *, seed=0):
        pass

    def method(self, key, value=3):
        pass


TABLE = {"sample": sample, "mod.sample": sample, "Sample": Sample}
GOOD = "`sample(paths, features=None, *, index=None, span=1 << 20, shuffle=False, dtype=None, **options)`"


@pytest.mark.parametrize("text, problem", [
    ("`sample(paths, features=None, *, index=None, span=1 << 20, shuffle=True, ...)`", "`shuffle` defaults to False"),
    ("`sample(paths, features=None, *, index=None, span=2 MiB, ...)`", "`span` defaults to 1048576"),
    ("`sample(paths, features=None, *, indexes=None, ...)`", "`indexes` is no parameter"),
    ("`sample(paths, features=None, index=None, ...)`", "`index` is keyword-only"),
    ("`sample(paths, *, features=None, ...)`", "`features` is positional or keyword"),
    ("`sample(paths, features=None, *, shuffle=False, index=None, ...)`", "`index` is out of order"),
    ("`sample(paths, features=None, *, index=None, span=1 << 20,\nshuffle=False)`", "leaves out dtype"),
    ("`mod.sample(paths, features=None, *, dtype=torch.int64, ...)`", "`dtype` defaults to None"),
    ("`sample(paths=0, features=None, ...)`", None),  # a value for the first parameter: an example call
    ("`Sample(dataset, directory=None)`", "leaves out seed"),
    ("`Sample(dataset, directory=None, *, seed=1)`", "`seed` defaults to 0"),
    ("`Sample(dataset, path, other, more)`", "does not bind"),  # an example call: names that are not parameters
    ("`Sample(dataset, seeds=N)`", "does not bind"),  # placeholder values: an example call
    ("`Sample(dataset, seed=N)`", ""),
    ("`sample(data, features=None, *, index=None, ...)`", "`data` is no parameter"),  # `*`: a signature
    ("`Sample.method(key, value=4)`", "`value` defaults to 3"),
    ("`Sample.method(value)`", None),  # not anchored on `key`: an example call
    ("`Sample(dataset, directory=None, *, seed=0)`", ""),
    ("`Sample(dataset)`", ""),  # a short form naming the required parameters
    ("`Sample.method(key)`", ""),
    ("`sample(paths, features=None, *, index=None, span=1 MiB, ...)`", ""),
    ("`sample(paths, ..., dtype=None)`", ""),
    ("`sample(paths, features={...}, *, span=..., ...)`", ""),
    ('`sample("train-*", features=spec)`', None),
    ("`sample(files, features=spec)`", None),
    ("`sample(..., features=spec)`", None),
    ("`other(paths, features=None)`", None),
    (GOOD, ""),
    ("```python\n" + GOOD.replace("span=1", "span=2") + "\n```", None),  # fenced code is no prose
    ("`` `sample(paths, x=1)` ``", None),  # a span showing backticks quotes no signature
])
def test_the_checker_flags_what_is_wrong(text, problem):
    found = signatures_of("Some prose,\n" + text + " and more.\n", "page.md", TABLE)
    if problem is None:
        assert found == []
        return
    (finding,) = found
    assert finding.line == 2
    if problem:
        assert any(problem in p for p in finding.problems), str(finding)
        assert "page.md:2:" in str(finding) and "code: " in str(finding)
    else:
        assert finding.problems == [], str(finding)


def test_a_broken_signature_on_a_copied_page_fails(table, tmp_path):
    """A real page with one default changed yields a finding where the original yields none."""
    page = DOCS / "guides" / "datasets.md"
    text = page.read_text()
    assert "shuffle=False" in text
    broken = tmp_path / "datasets.md"
    broken.write_text(text.replace("shuffle=False", "shuffle=True", 1))
    before = [f for f in signatures_of(text, "datasets.md", table) if f.problems]
    after = [f for f in signatures_of(broken.read_text(), "datasets.md", table) if f.problems]
    assert len(after) == len(before) + 1, [str(f) for f in after]
    assert any("`shuffle` defaults to False" in p for f in after for p in f.problems)
