"""The workloads and their variants, one module per family; importing this package registers them all.

The order of `FAMILIES` is the order of the workloads in `--list`, in a default run and in the report.
"""

import importlib

# read / write; Examples into tensors; SequenceExamples into tensors; DataLoaders
FAMILIES = ("records", "decode", "sequence", "loader")

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
