"""OutputFolder: the folder a set of files is written into (shards, their indexes, a sidecar), local or a URL.

The writers of shard sets (ShardedWriter, the converters, Ray's write_tfrecords) need a few operations on their
output folder: list it, ask a file's size, move a finished file to its final name, remove one, upload a file made
locally. Locally they are `os` calls, as before. Behind an fsspec URL (s3://, gs://, az://, ...), a shard is made
on local disk (an index and seek points are built from the local copy, without reading it back), uploaded under a
temporary name, and moved to its final name once the set is complete: object stores make an object appear whole
when its upload completes, and a move is a copy inside the store (no download). Moves of many files run together.

>>> OutputFolder("out").join("a.tfrecord")
'out/a.tfrecord'
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tfr_torch.format.paths import PathLike, _fsspec, as_path, is_url

__all__ = ["OutputFolder"]

_MOVES_IN_FLIGHT = 16  # moves (copies inside the object store) running at once
# Object stores, where a "folder" is a key prefix: nothing to make (their makedirs would create a missing bucket)
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "oss", "tos", "r2"})


class OutputFolder:
    """A local folder or a folder behind an fsspec URL; its files are addressed by name ("a" or, in a sub-folder,
    "sub/a")."""

    def __init__(self, path: PathLike) -> None:
        self.path = as_path(path).rstrip("/") or "."
        self.remote = is_url(self.path)
        self._fs: Any = None
        self._inner = ""
        if self.remote:
            self._fs, self._inner = _fsspec(self.path)
            self._inner = self._inner.rstrip("/")

    def join(self, name: str) -> str:
        """The path (or URL) of `name` in this folder."""
        return f"{self.path}/{name}"

    def _at(self, name: str) -> str:
        return f"{self._inner}/{name}"

    def makedirs(self, sub: str = "") -> None:
        """Make the folder, or its sub-folder `sub` (object stores need none: a no-op there)."""
        if not self.remote:
            os.makedirs(self.join(sub) if sub else self.path, exist_ok=True)
        elif not _OBJECT_STORES.intersection(_protocols(self._fs)):
            self._fs.makedirs(self._at(sub) if sub else self._inner, exist_ok=True)

    def names(self, sub: str = "") -> list[str]:
        """The names of the entries directly in the folder, or in its sub-folder `sub` (files and sub-folders);
        [] when it does not exist."""
        if not self.remote:
            path = self.join(sub) if sub else self.path
            return os.listdir(path) if os.path.isdir(path) else []
        inner = self._at(sub) if sub else self._inner
        try:
            entries = self._fs.ls(inner, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        prefix = self._fs._strip_protocol(inner).rstrip("/") + "/"
        out = []
        for entry in entries:
            entry = self._fs._strip_protocol(str(entry)).rstrip("/")
            if entry.startswith(prefix) and entry != prefix.rstrip("/"):
                out.append(entry[len(prefix):])
        return out

    def size(self, name: str) -> int | None:
        """The size of file `name` in bytes, or None when there is no such file."""
        if not self.remote:
            path = self.join(name)
            return os.path.getsize(path) if os.path.isfile(path) else None
        try:
            info = self._fs.info(self._at(name))
        except FileNotFoundError:
            return None
        if info.get("type") == "directory":
            return None
        return int(info.get("size") or 0)

    def read_text(self, name: str) -> str | None:
        """The text of file `name`, or None when there is no such file."""
        try:
            if self.remote:
                with self._fs.open(self._at(name), "rb") as f:
                    return bytes(f.read()).decode("utf-8")
            with open(self.join(name), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def remove(self, name: str) -> None:
        """Remove file `name` if it is there."""
        if self.remote:
            try:
                self._fs.rm_file(self._at(name))
            except FileNotFoundError:
                pass
            self._forget(name)
        else:
            try:
                os.remove(self.join(name))
            except FileNotFoundError:
                pass

    def remove_tree(self, name: str) -> None:
        """Remove sub-folder `name` and everything in it, if it is there."""
        if self.remote:
            try:
                self._fs.rm(self._at(name), recursive=True)
            except FileNotFoundError:
                pass
        else:
            shutil.rmtree(self.join(name), ignore_errors=True)

    def upload(self, local: str, name: str) -> None:
        """Copy the local file `local` to `name` in this (remote) folder; a local folder takes it by a rename."""
        if self.remote:
            if "/" in name:
                self.makedirs(name.rpartition("/")[0])
            self._fs.put_file(local, self._at(name))
            self._forget(name)
        else:
            os.replace(local, self.join(name))

    def move(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Rename files of this folder (`(from, to)` names), replacing what is at `to`. Locally one `os.replace`
        each; in an object store a copy inside the store and a removal each, many at once."""
        if not self.remote:
            for src, dst in pairs:
                os.replace(self.join(src), self.join(dst))
            return
        if not pairs:
            return
        with ThreadPoolExecutor(min(_MOVES_IN_FLIGHT, len(pairs))) as pool:
            for future in [pool.submit(self._move_one, src, dst) for src, dst in pairs]:
                future.result()

    def _move_one(self, src: str, dst: str) -> None:
        try:
            self._fs.mv(self._at(src), self._at(dst))
        except FileNotFoundError:
            raise FileNotFoundError(f"cannot move {self.join(src)!r} to {self.join(dst)!r}: it is not there (was "
                                    "the folder changed by another program while the set was written?)") from None
        except Exception as exc:  # a store's own errors rarely name the objects ("Access Denied")
            kind = PermissionError if isinstance(exc, PermissionError) else OSError
            raise kind(f"cannot move {self.join(src)!r} to {self.join(dst)!r}: {type(exc).__name__}: {exc}") from exc
        self._forget(dst)

    def _forget(self, name: str) -> None:
        from tfr_torch.format.remote import forget_object  # (remote imports paths, which this module imports)

        forget_object(self.join(name))  # this process's readers ask its new size and version


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
