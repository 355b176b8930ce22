"""Which index each file of a dataset uses, read and checked against its file: shared by TFRecordDataset and
IndexedTFRecordDataset."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfr_torch.format.index import index_path_for, read_index
from tfr_torch.format.options import CompressionOrAuto
from tfr_torch.format.paths import exists

__all__ = ["resolve_indexes"]


def resolve_indexes(paths: Sequence[str], index: Any, compression: CompressionOrAuto) -> list[np.ndarray | None]:
    """Per file, its index as an (n, 2) array, or None. `index`: None (no indexes), "auto" (`<file>.idx` where it
    exists), or a list of index paths (one per file, None allowed). Every index is checked against its file."""
    if index is None:
        return [None] * len(paths)
    if index == "auto":
        found = [index_path_for(p) for p in paths]
        chosen = [p if exists(p) else None for p in found]
    elif isinstance(index, (str, os.PathLike)):
        raise ValueError('index must be None, "auto" or a list of index paths (one per file)')
    else:
        chosen = [None if i is None else os.fspath(i) for i in index]
        if len(chosen) != len(paths):
            raise ValueError(f"index lists {len(chosen)} index files for {len(paths)} TFRecord files")
    return [None if i is None else read_index(i, p, compression) for i, p in zip(chosen, paths)]
