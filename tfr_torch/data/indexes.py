"""Which index each file of a dataset uses, read and checked against its file: shared by TFRecordDataset and
IndexedTFRecordDataset."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from tfr_torch.format.index import index_path_for, read_index
from tfr_torch.format.options import CompressionOrAuto
from tfr_torch.format.paths import exists, is_url
from tfr_torch.format.seek import seek_path_for

__all__ = ["resolve_indexes"]

_THREADS = 16  # indexes of remote files read at once


def seek_points_beside(paths: Sequence[str], index: Any) -> list[str | None]:
    """Per file, the seek points build_index wrote beside the index given for it (`<index>.seek`) when `index` is
    a list of index paths and they exist; None: where RecordFile looks by default (`<file>.idx.seek`)."""
    if index is None or isinstance(index, (str, os.PathLike)) or len(index) != len(paths):
        return [None] * len(paths)
    found: list[str | None] = []
    for given in index:
        seek = seek_path_for(os.fspath(given)) if given is not None else None
        found.append(seek if seek is not None and exists(seek) else None)
    return found


def resolve_indexes(paths: Sequence[str], index: Any, compression: CompressionOrAuto) -> list[np.ndarray | None]:
    """Per file, its index as an (n, 2) array, or None. `index`: None (no indexes), "auto" (`<file>.idx` where it
    exists), or a list of index paths (one per file, None allowed). Every index is checked against its file.
    Indexes of remote files are read and checked 16 at a time (each costs a few round trips)."""
    if index is None:
        return [None] * len(paths)
    if isinstance(index, (str, os.PathLike)) and index != "auto":
        raise ValueError('index must be None, "auto" or a list of index paths (one per file)')
    if index != "auto":
        given = [None if i is None else os.fspath(i) for i in index]
        if len(given) != len(paths):
            raise ValueError(f"index lists {len(given)} index files for {len(paths)} TFRecord files")

    def one(k: int) -> np.ndarray | None:
        if index == "auto":
            found = index_path_for(paths[k])
            chosen = found if exists(found) else None
        else:
            chosen = given[k]
        return None if chosen is None else read_index(chosen, paths[k], compression)

    if len(paths) > 1 and any(is_url(p) for p in paths):  # each costs round trips: read them together
        with ThreadPoolExecutor(min(_THREADS, len(paths)), thread_name_prefix="tfr_torch-index") as pool:
            return list(pool.map(one, range(len(paths))))  # the first file's error in order, as one by one
    return [one(k) for k in range(len(paths))]
