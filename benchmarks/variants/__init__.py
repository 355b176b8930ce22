"""The workloads and their variants, one module per family; importing this package registers them all.

The order of `FAMILIES` is the order of the workloads in `--list`, in a default run and in the report.
"""

import importlib

FAMILIES = ("records", "decode", "loader")  # read / write; tabular Examples into tensors; DataLoaders

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
