"""Run one fuzz target under atheris (libFuzzer): `python fuzz/fuzz.py TARGET [libFuzzer flags] [corpus dirs]`.

tfr_torch's modules are imported inside atheris's instrumentation, so coverage guides the search through the
format, decode, tfds and tensor code (and the compiled core is exercised through the same calls). See
fuzz/README.md; `make fuzz` runs every target through fuzz/run.py.
"""

from __future__ import annotations

import os
import sys

import atheris
import numpy  # noqa: F401  - imported before instrumentation: only tfr_torch is instrumented
import torch  # noqa: F401

_MODULES = [
    "tfr_torch.errors", "tfr_torch.format.strict", "tfr_torch.format.example", "tfr_torch.format.columns",
    "tfr_torch.format.tensor", "tfr_torch.format.reader", "tfr_torch.format.compression", "tfr_torch.format.index",
    "tfr_torch.format.sniff", "tfr_torch.format.wire", "tfr_torch.tensors", "tfr_torch.decode.specs",
    "tfr_torch.decode.plan", "tfr_torch.decode.sequence_plan", "tfr_torch.decode.kernel", "tfr_torch.decode.units",
    "tfr_torch.decode.dense", "tfr_torch.decode.sparse", "tfr_torch.decode.ragged", "tfr_torch.decode.results",
    "tfr_torch.decode.parse", "tfr_torch.tfds.metadata", "tfr_torch.tfds.features", "tfr_torch.tfds.splits",
]


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: python fuzz/fuzz.py TARGET [libFuzzer flags] [corpus dirs]")
    name = sys.argv.pop(1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with atheris.instrument_imports(include=["tfr_torch"]):
        import importlib

        for module in _MODULES:
            importlib.import_module(module)
        import targets
    if name not in targets.TARGETS:
        sys.exit(f"unknown target {name!r}: expected one of {', '.join(targets.TARGETS)}")
    atheris.Setup(sys.argv, targets.TARGETS[name])
    atheris.Fuzz()


if __name__ == "__main__":
    main()
