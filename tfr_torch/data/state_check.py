"""A saved TFRecordDataset state checked before it is trusted: its version, and every field a resume reads, of the
type and range it must have (ValueError naming the field and what was expected), so an edited or damaged state
is refused by name rather than failing deep in the resume (a bare KeyError or TypeError) or, worse, being taken
for another point of the epoch (an epoch of 1.5 would never come, and the resume be dropped silently)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

__all__ = ["STATE_VERSION", "SPLITS", "check_version", "check_state"]

STATE_VERSION = 2
SPLITS = ("global", "ranges", "files")


def check_version(state: Mapping[str, Any]) -> int:
    version = state.get("version") if isinstance(state, Mapping) else None
    if version not in (1, STATE_VERSION) or isinstance(version, bool):
        if isinstance(version, int) and not isinstance(version, bool) and version > STATE_VERSION:
            raise ValueError(f"the saved TFRecordDataset state has version {version}, newer than this tfr_torch "
                             f"reads ({STATE_VERSION}): upgrade tfr_torch to resume from it")
        raise ValueError(f"unknown TFRecordDataset state version {version!r} (expected {STATE_VERSION})")
    return int(version)


def check_state(state: Mapping[str, Any]) -> int:
    """`state`'s version, once every field a resume reads is there with a usable type and range."""
    version = check_version(state)
    _count(state, "epoch", state)
    if version == 1:
        for key in ("worker", "num_workers", "yielded"):
            _count(state, key, state)
        return version
    segments = state.get("segments")
    if not isinstance(segments, list):
        _refuse("segments", segments, "a list of the epoch's earlier segments")
    for segment in segments:
        _segment(segment)
    if "worker" in state:  # one reader's part
        _layout(state, state)
        for key, size in (("rank", "world_size"), ("worker", "num_workers")):
            value = _count(state, key, state)
            if value >= state[size]:
                _refuse(key, value, f"below its {size} ({state[size]})")
        _count(state, "yielded", state)
        if state.get("consumed") is not None:
            _count(state, "consumed", state)
        if state.get("skipped") is not None:
            _numbers("skipped", state["skipped"])
    elif not segments:
        _refuse("segments", segments, "at least one segment in a merged state")
    return version


def _segment(segment: Any) -> None:
    if not isinstance(segment, Mapping):
        _refuse("segments", segment, "segments that are mappings of a layout and its readers' counts")
    _layout(segment, segment)
    for key, optional in (("yielded", False), ("consumed", True), ("skipped", True)):
        rows = segment.get(key)
        if optional and rows is None:
            continue
        what = "record numbers" if key == "skipped" else "count"
        shape = f"{segment['world_size']} list(s) of {segment['num_workers']} {what} (rank x worker)"
        if not isinstance(rows, list) or len(rows) != segment["world_size"] or not all(
                isinstance(row, list) and len(row) == segment["num_workers"] for row in rows):
            _refuse(f"segment {key}", rows, shape)
        for row in rows:
            for value in row:
                if optional and value is None:
                    continue
                if key == "skipped":
                    _numbers("segment skipped", value)
                elif not _is_count(value):
                    _refuse(f"segment {key}", value, "counts >= 0")


def _layout(where: Mapping[str, Any], state: Mapping[str, Any]) -> None:
    for key in ("world_size", "num_workers", "batch"):
        if _count(where, key, state) < 1:
            _refuse(key, where[key], "an int >= 1")
    if where.get("split") not in SPLITS:
        _refuse("split", where.get("split"), " or ".join(repr(s) for s in SPLITS))


def _numbers(key: str, value: Any) -> None:
    if not isinstance(value, list) or not all(_is_count(n) for n in value):
        _refuse(key, value, "a list of record numbers >= 0")


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _count(where: Mapping[str, Any], key: str, state: Mapping[str, Any]) -> int:
    if key not in where:
        raise ValueError(f"cannot resume: the saved state has no {key!r} (a TFRecordDataset state_dict() has one)")
    value = where[key]
    if not _is_count(value):
        _refuse(key, value, "an int >= 0")
    return int(value)


def _refuse(key: str, value: Any, expected: str) -> NoReturn:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise ValueError(f"cannot resume: the saved state has {key}={shown}, expected {expected}")
