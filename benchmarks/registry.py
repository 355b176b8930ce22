"""The registry: workloads, their variants per library, and the context a variant's setup gets."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmarks.datasets import raw_records, small_features

if TYPE_CHECKING:
    from benchmarks.report import Row

# a summary line of a row's own from its pass's ctx.metrics: (this row, every row of the run) -> text
Summary = Callable[["Row", "list[Row]"], str]
Setup = Callable[["Ctx"], Callable[[], int]]

PURE_PYTHON = "tfr_torch-python"  # tfr_torch on its pure-Python reference backend (TFR_TORCH_NATIVE=0)
LIBRARIES = ("tfr_torch", PURE_PYTHON, "tfrecord", "tensorflow")
IMPORT_NAME = {"tfr_torch": "tfr_torch", PURE_PYTHON: "tfr_torch", "tfrecord": "tfrecord", "tensorflow": "tensorflow"}
PURE_PYTHON_NOTE = ("tfr_torch's pure-Python reference backend (TFR_TORCH_NATIVE=0 in its subprocess): the same call "
                    "as the tfr_torch row of its kind, so its ratio is what the compiled core gains")
TF_BATCH = 256


@dataclasses.dataclass
class Ctx:
    """What a variant's setup gets. `path`: the data set's file; `out`: where a write variant writes."""

    workload: str
    library: str
    path: str
    meta: dict[str, Any]
    out: str
    records: int
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)  # a pass may record extra numbers here
    _cache: dict[str, Any] = dataclasses.field(default_factory=dict)

    def raw_records(self) -> list[bytes]:
        if "raw" not in self._cache:
            self._cache["raw"] = raw_records(self.path)
        return self._cache["raw"]

    def small_features(self) -> list[dict[str, Any]]:
        if "features" not in self._cache:
            self._cache["features"] = [small_features(i) for i in range(self.records)]
        return self._cache["features"]


@dataclasses.dataclass(frozen=True)
class Variant:
    library: str
    key: str  # short id, unique within the workload
    label: str  # what the row is, in the library's own API terms
    kind: str  # rows of the same kind are compared; each kind needs a tfr_torch variant
    setup: Setup
    note: str = ""
    same_bytes: bool = False  # a write variant whose output must equal the data set's file byte for byte
    summary: Summary | None = None


@dataclasses.dataclass
class Workload:
    name: str
    dataset: str
    description: str
    baseline: str  # key of the tfr_torch variant that the summary compares with the peers
    # the targets, printed with a met/not met verdict: peer library -> (the least tfr_torch ÷ row ratio
    # over that peer's comparable rows, what the target says)
    targets: dict[str, tuple[float, str]] = dataclasses.field(default_factory=dict)
    # False: one core (TensorFlow's inter/intra-op pools of 1, OMP_NUM_THREADS=1 for torch); True: each library's
    # default threading and worker processes (CPU % then counts the DataLoader workers too)
    parallel: bool = False
    variants: list[Variant] = dataclasses.field(default_factory=list)

    def of(self, library: str) -> list[Variant]:
        return [v for v in self.variants if v.library == library]


WORKLOADS: dict[str, Workload] = {}


def workload(name: str, dataset: str, description: str, baseline: str,
             targets: dict[str, tuple[float, str]] | None = None, parallel: bool = False) -> None:
    WORKLOADS[name] = Workload(name, dataset, description, baseline, dict(targets or {}), parallel)


def variant(workloads: str | tuple[str, ...], library: str, key: str, label: str, kind: str, note: str = "",
            same_bytes: bool = False, summary: Summary | None = None,
            pure_python: bool = False) -> Callable[[Setup], Setup]:
    """Register the decorated setup function as a variant of one or more workloads. `pure_python` (tfr_torch
    variants): register it for `PURE_PYTHON` too, the same setup run on the reference backend."""
    names = (workloads,) if isinstance(workloads, str) else workloads

    def register(setup: Setup) -> Setup:
        for name in names:
            WORKLOADS[name].variants.append(Variant(library, key, label, kind, setup, note, same_bytes, summary))
            if pure_python:
                python_note = f"{note}. {PURE_PYTHON_NOTE}" if note else PURE_PYTHON_NOTE
                WORKLOADS[name].variants.append(Variant(PURE_PYTHON, key, label, kind, setup, python_note))
        return setup

    return register

