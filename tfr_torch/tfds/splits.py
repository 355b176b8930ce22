"""TensorFlow Datasets' split syntax ("train", "train[:10%]", "test[100:200]", "train[1shard]", "train+test", "all"),
resolved to (shard, skip, take) reads with TFDS's exact rules: percent boundaries rounded to the closest example
(Python's round, half to even), negative boundaries counted from the end, shard units summed from shard lengths,
and the same errors for unknown splits, out-of-range slices and selections that hold no example.

Pure functions on split names and shard lengths; no TensorFlow, no torch.

>>> resolve_split("train[:10%]", {"train": [8, 7, 8]})
[ShardRead(split='train', shard=0, skip=0, take=2)]
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional, Union

__all__ = ["SplitSlice", "ShardRead", "parse_split", "resolve_split"]

_DOCS = "see https://www.tensorflow.org/datasets/splits"
_SUB_SPEC = re.compile(r"^(?P<name>[\w-]+)(\[(?P<selector>[\d\w%:.-]+)\])?$")
_SLICE = re.compile(r"^((?P<val>-?[\d_.]+)(?P<unit>(?:%|shard))?)?$")
_PLUS = re.compile(r"\s*\+\s*")


@dataclass(frozen=True)
class SplitSlice:
    """One term of a split string: `split[from_:to]` in `unit` ("abs", "%" or "shard"); `split="all"` for every
    split. Boundaries are None when open."""

    split: str
    from_: Optional[Union[int, float]] = None
    to: Optional[Union[int, float]] = None
    unit: str = "abs"


@dataclass(frozen=True)
class ShardRead:
    """Read `take` examples of shard number `shard` of `split`, after skipping `skip` of them."""

    split: str
    shard: int
    skip: int
    take: int


def _number(text: str, unit: str, spec: str) -> Union[int, float]:
    try:
        return float(text) if unit == "%" else int(text)
    except ValueError:
        raise ValueError(f"split {spec!r}: {text!r} is not a number ({_DOCS})") from None


def _parse_term(term: str, spec: str) -> SplitSlice:
    match = _SUB_SPEC.match(term)
    if not match:
        raise ValueError(f"split {spec!r}: cannot read {term!r}: expected a split name, optionally followed by a "
                         f"slice such as [:10%], [100:200] or [1shard] ({_DOCS})")
    name, selector = match.group("name"), match.group("selector")
    if name == "all":
        if selector:
            raise ValueError(f"split {spec!r}: 'all' cannot be sliced (as in TFDS); slice each split instead, e.g. "
                             "'train[:10%]+test[:10%]'")
        return SplitSlice("all")
    if selector is None:
        return SplitSlice(name)
    parts = [_SLICE.match(p) for p in selector.split(":")]
    matched = [p for p in parts if p is not None]
    if len(matched) < len(parts) or not any(p.group(0) for p in matched) or len(parts) > 2:
        raise ValueError(f"split {spec!r}: cannot read the slice [{selector}]: expected [from:to] with integers, "
                         f"percentages (10%) or shards (2shard), or [N shard] for one shard ({_DOCS})")
    if len(matched) == 1:
        (only,) = matched
        unit = only.group("unit") or "abs"
        if unit != "shard":
            raise ValueError(f"split {spec!r}: [{selector}] selects one shard only with the shard unit (e.g. "
                             f"[{only.group('val')}shard]); for examples use a slice such as [{only.group('val')}:]")
        shard = _number(only.group("val"), unit, spec)
        return SplitSlice(name, shard, shard + 1, unit)
    first, second = matched
    unit = first.group("unit") or second.group("unit") or "abs"
    from_ = None if first.group("val") is None else _number(first.group("val"), unit, spec)
    to = None if second.group("val") is None else _number(second.group("val"), unit, spec)
    if unit == "%" and (abs(from_ or 0) > 100 or abs(to or 0) > 100):
        raise ValueError(f"split {spec!r}: percent boundaries must lie in [-100, 100]")
    return SplitSlice(name, from_, to, unit)


def parse_split(spec: str) -> list[SplitSlice]:
    """The terms of a split string, in order ("train+test" gives two)."""
    if not isinstance(spec, str):
        raise TypeError(f"split must be a string such as 'train' or 'train[:10%]', got {type(spec).__name__}")
    return [_parse_term(term, spec) for term in _PLUS.split(spec)]


def _absolute(term: SplitSlice, lengths: Sequence[int], spec: str) -> tuple[int, int]:
    """TFDS's _rel_to_abs_instr: [from, to) in examples of the split."""
    total = sum(lengths)
    from_, to = term.from_, term.to
    if term.unit == "%":
        from_ = 0 if from_ is None else int(round(from_ * total / 100.0))
        to = total if to is None else int(round(to * total / 100.0))
    elif term.unit == "shard":
        from_ = 0 if from_ is None else sum(lengths[:int(from_)])  # shard numbers are ints (see _number)
        if to is not None and to <= 0:
            to = len(lengths) + to
        to = total if to is None else sum(lengths[:int(to)])
    else:
        from_ = 0 if from_ is None else int(from_)  # absolute boundaries are ints (see _number)
        to = total if to is None else int(to)
    if abs(from_) > total or abs(to) > total:
        shown_from = "" if not from_ else from_
        shown_to = "" if not to else to
        raise ValueError(f"split {spec!r}: the slice [{shown_from}:{shown_to}] of {term.split!r} does not fit its "
                         f"{total} examples")
    if from_ < 0:
        from_ += total
    if to < 0:
        to += total
    return from_, to


def resolve_split(spec: str, splits: Mapping[str, Sequence[int]]) -> list[ShardRead]:
    """The shard reads a split string selects, in TFDS's order. `splits` maps each split name to its shard lengths
    (dataset_info.json's shardLengths). An unknown split, a slice outside the split, and a selection of no example
    at all are errors, as in TFDS."""
    terms = parse_split(spec)
    expanded: list[SplitSlice] = []
    for term in terms:
        expanded.extend(SplitSlice(name) for name in splits) if term.split == "all" else expanded.append(term)
    reads: list[ShardRead] = []
    for term in expanded:
        if term.split not in splits:
            raise ValueError(f"split {spec!r}: unknown split {term.split!r}; this dataset has "
                             f"{', '.join(repr(s) for s in splits)}")
        lengths = [int(n) for n in splits[term.split]]
        from_, to = _absolute(term, lengths, spec)
        start = 0
        for shard, length in enumerate(lengths):  # TFDS's get_file_instructions
            end = start + length
            if length and from_ < end and to > start:
                skip = max(from_ - start, 0)
                take = min(to, end) - start - skip
                if take > 0:
                    reads.append(ShardRead(term.split, shard, skip, take))
            start = end
    if not reads:
        raise ValueError(f"split {spec!r} selects no example")
    return reads
