"""Paths: local files, `pathlib.Path`, and fsspec URLs (s3://, gs://, memory://, ...), with globbing and atomic writes.

fsspec is optional: local paths never import it. A URL whose protocol package is missing gets an error naming
the package to install.
"""

from __future__ import annotations

import contextlib
import glob as _glob
import os
import re
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from typing import IO, Any, Union

__all__ = ["PathLike", "as_path", "is_url", "expand_paths", "side_file_kind", "open_input", "exists", "file_size",
           "file_sizes", "AtomicOutput", "atomic_output"]

PathLike = Union[str, "os.PathLike[str]"]

_GLOB_CHARS = frozenset("*?[")


def as_path(path: PathLike) -> str:
    """Return `path` as a string; `file://` URLs become local paths."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"expected a path (str or os.PathLike), got {type(path).__name__}: {path!r}")
    if path.startswith("file://"):
        return path[len("file://") :]
    return path


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str) -> bool:
    """True for fsspec URLs such as s3://bucket/key (anything with a protocol other than file://)."""
    return _URL.match(path) is not None and not path.startswith("file://")


def _fsspec(path: str) -> tuple[Any, str]:
    """Return (filesystem, path inside it) for a URL, with a clear error when a package is missing."""
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(
            f"reading or writing {path!r} needs fsspec and the package for its protocol: "
            "pip install 'tfr_torch[fsspec]' (plus s3fs for s3://, gcsfs for gs://, adlfs for az://)"
        ) from exc
    try:
        fs, inner = fsspec.core.url_to_fs(path)
        return fs, str(inner)
    except ImportError as exc:
        protocol = path.partition("://")[0]
        raise ImportError(f"cannot open {path!r}: fsspec has no usable implementation of {protocol}:// "
                          f"({exc})") from exc
    except ValueError as exc:
        protocol = path.partition("://")[0]
        raise ValueError(f"cannot open {path!r}: unknown protocol {protocol!r} ({exc})") from exc


def _has_glob(path: str) -> bool:
    return any(c in _GLOB_CHARS for c in path)


def _is_local_file(path: str) -> bool:
    """Whether `path` names an existing file (locally: or a link to one, even broken; a URL: an object the store
    has): a name with glob characters (`data[1].tfrecord`, as the shell's own expansion passes it) is that file,
    not a pattern."""
    if not is_url(path):
        return os.path.lexists(path) and not os.path.isdir(path)
    fs, inner = _fsspec(path)
    try:
        return bool(fs.isfile(inner))
    except Exception:  # noqa: BLE001  # a store that cannot say: the name is a pattern, as before
        return False


# The files tfr_torch, ShardedWriter and TFDS write beside TFRecord shards: (name suffix, what it is)
_SIDE_SUFFIXES = (
    (".idx", "a TFRecord index (.idx)"),
    (".idx.seek", "the seek points of a compressed TFRecord file (.idx.seek)"),
    (".tfr_torch.json", "a tfr_torch sidecar (the shards' spec and record counts)"),
    (".progress.json", "the progress file of an interrupted conversion"),
    (".partial", "an unfinished shard of an interrupted conversion"),
    (".labels.txt", "a TFDS class-names file"),
)
_SIDE_NAMES = {"dataset_info.json": "TFDS dataset metadata (dataset_info.json)",
               "features.json": "TFDS feature metadata (features.json)"}


_TEMPORARY = re.compile(r"\.tmp-[0-9a-f]{32}$")  # AtomicOutput's temporary name for a URL


def side_file_kind(path: PathLike) -> str | None:
    """What a file beside TFRecord shards is ("a TFRecord index (.idx)", ...), or None for anything else.

    >>> side_file_kind("out/train.tfrecord-00000-of-00004.idx")
    'a TFRecord index (.idx)'
    """
    name = as_path(path).rstrip("/").rsplit("/", 1)[-1]
    if name in _SIDE_NAMES:
        return _SIDE_NAMES[name]
    for suffix, what in _SIDE_SUFFIXES:
        if name.endswith(suffix):
            return what
    if _TEMPORARY.search(name):
        return "a file being written (the temporary name of an atomic write to a URL)"
    return None


def expand_paths(paths: PathLike | Iterable[PathLike]) -> list[str]:
    """Expand one path, a glob pattern, or a list of them into a list of file paths.

    Patterns expand in sorted order, leaving out the side files that tfr_torch and TFDS write beside shards
    (`.idx` indexes, `.idx.seek` seek points, `.tfr_torch.json` sidecars, `dataset_info.json`, `features.json`,
    `*.labels.txt`, unfinished `.partial` shards, files being written); a pattern that matches nothing else
    raises FileNotFoundError. A side file named explicitly raises ValueError. Plain paths are returned as given
    (the datasets check that they exist). The name of an existing local file is that file even when it holds glob
    characters (`data[1].tfrecord`): it is not read as a pattern (to match by pattern such names' neighbours,
    e.g. `data1.tfrecord`, write a pattern that is not itself a file's name, such as `data[1].tfrecor[d]`).

    >>> expand_paths(["b.tfrecord", "a.tfrecord"])
    ['b.tfrecord', 'a.tfrecord']
    """
    if isinstance(paths, (str, os.PathLike)):
        items = [paths]
    else:
        try:
            items = list(paths)
        except TypeError:
            raise TypeError(f"expected a path, a glob pattern or a list of them, got {type(paths).__name__}") from None
    out: list[str] = []
    for item in items:
        path = as_path(item)
        if not _has_glob(path) or _is_local_file(path):
            kind = side_file_kind(path)
            if kind is not None:
                raise ValueError(f"{path} is {kind}, not a TFRecord file: leave it out of the list of files "
                                 "(glob patterns skip such files)")
            out.append(path)
            continue
        if is_url(path):
            fs, inner = _fsspec(path)
            matches = sorted(fs.unstrip_protocol(m) for m in fs.glob(inner))
        else:
            matches = sorted(_glob.glob(path))
        if not matches:
            raise FileNotFoundError(f"no files match {path!r}")
        kept = [m for m in matches if side_file_kind(m) is None]  # a pattern such as out/* also matches side files
        if not kept:
            raise FileNotFoundError(f"no TFRecord files match {path!r}: it matches only side files ({len(matches)}, "
                                    f"such as {matches[0]}: {side_file_kind(matches[0])})")
        out.extend(kept)
    return out


def open_input(path: PathLike, block_size: int = 8 << 20) -> IO[bytes]:
    """Open a file for reading bytes. Local files are opened unbuffered (callers read big blocks themselves);
    URLs through fsspec with `block_size` readahead."""
    path = as_path(path)
    if is_url(path):
        fs, inner = _fsspec(path)
        try:
            stream: IO[bytes] = fs.open(inner, "rb", block_size=block_size)
            return stream
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {path!r}") from None
    return open(path, "rb", buffering=0)


def exists(path: PathLike) -> bool:
    """Whether a file exists (locally or behind an fsspec URL)."""
    path = as_path(path)
    if is_url(path):
        fs, inner = _fsspec(path)
        return bool(fs.exists(inner))
    return os.path.exists(path)


def file_size(path: PathLike) -> int:
    """Size of a file in bytes."""
    path = as_path(path)
    if is_url(path):
        fs, inner = _fsspec(path)
        return int(fs.size(inner))
    return os.path.getsize(path)


def file_sizes(paths: Iterable[PathLike]) -> list[int | None]:
    """The size of each file, or None where no such file exists (a folder counts as missing). Cheap for many
    files behind a URL: one listing per folder, not one request per file."""
    names = [as_path(p) for p in paths]
    out: list[int | None] = [None] * len(names)
    listings: dict[str, dict[str, int] | None] = {}
    for i, path in enumerate(names):
        if not is_url(path):
            try:
                st = os.stat(path)
            except OSError:
                continue
            out[i] = st.st_size if not os.path.isdir(path) else None
            continue
        fs, inner = _fsspec(path)
        folder = inner.rstrip("/").rsplit("/", 1)[0]
        key = f"{fs.unstrip_protocol(folder)}"
        if key not in listings:
            try:
                entries = fs.ls(folder, detail=True)
                listings[key] = {e["name"].rstrip("/"): (int(e.get("size") or 0) if e.get("type") != "directory"
                                                         else -1) for e in entries}
            except (OSError, ValueError):  # FileNotFoundError included: the folder is missing
                listings[key] = None
        listing = listings[key]
        if listing is None:
            continue
        size = listing.get(fs._strip_protocol(inner).rstrip("/"))
        if size is None:  # names in listings differ from the given form on some filesystems: ask directly
            try:
                info = fs.info(inner)
            except (OSError, ValueError):
                continue
            size = -1 if info.get("type") == "directory" else int(info.get("size") or 0)
        out[i] = size if size >= 0 else None
    return out


class AtomicOutput:
    """A binary file that appears at `path` only when `commit()` is called; `abort()` removes every trace.

    Local files are written under a temporary name in the same folder and renamed (atomic on POSIX); URLs are
    written under a temporary name and moved with the filesystem's `mv`.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = as_path(path)
        self._fs = None
        if is_url(self.path):
            self._fs, self._inner = _fsspec(self.path)
            self._tmp = f"{self._inner}.tmp-{uuid.uuid4().hex}"
            try:
                self.file: IO[bytes] = self._fs.open(self._tmp, "wb")
            except Exception as exc:  # its message names the temporary object, or nothing: name the user's URL
                raise _write_error(self.path, exc) from exc
        else:
            if os.path.isdir(self.path):  # found now, not at the rename, which would name the temporary file
                raise IsADirectoryError(f"cannot write {self.path!r}: it is a folder")
            folder = os.path.dirname(os.path.abspath(self.path))
            try:
                fd, self._tmp = tempfile.mkstemp(prefix=f".{os.path.basename(self.path)}.", suffix=".tmp", dir=folder)
            except FileNotFoundError:  # the temporary file's name would say nothing to the user: name their path
                raise FileNotFoundError(f"cannot write {self.path!r}: no such folder "
                                        f"{os.path.dirname(self.path) or '.'!r}") from None
            self.file = os.fdopen(fd, "wb", buffering=1 << 20)
        self.done = False

    def commit(self) -> None:
        """Close the temporary file and move it to its final name."""
        if self.done:
            return
        self.done = True
        try:
            if self._fs is not None:
                try:
                    self.file.close()  # (the upload: a store's errors name the temporary object, or nothing)
                    self._fs.mv(self._tmp, self._inner)
                except Exception as exc:
                    raise _write_error(self.path, exc) from exc
                from tfr_torch.format.remote import forget_object  # (remote imports this module)

                forget_object(self.path)  # this process's readers ask its new size and version
            else:
                self.file.close()
                os.chmod(self._tmp, 0o666 & ~_UMASK)
                os.replace(self._tmp, self.path)
        except BaseException:
            self._remove_tmp()
            raise

    def abort(self) -> None:
        """Discard what was written; nothing appears at `path`."""
        if self.done:
            return
        self.done = True
        with contextlib.suppress(Exception):
            if self._fs is not None and _discards(self.file):  # its buffer and a multipart upload under way
                remote: Any = self.file
                remote.discard()  # dropped, rather than sent and finished by close() only to be removed
                remote.closed = True  # (close() would now send an empty object)
            else:
                self.file.close()
        self._remove_tmp()

    def _remove_tmp(self) -> None:
        with contextlib.suppress(Exception):
            if self._fs is not None:
                self._fs.rm(self._tmp)
            else:
                os.unlink(self._tmp)


def _discards(file: Any) -> bool:
    """Whether an fsspec file's class drops its upload on `discard()` (s3fs, gcsfs: the base class's does nothing,
    and a file of such a class is closed instead, finishing its upload before it is removed)."""
    from fsspec.spec import AbstractBufferedFile

    method = getattr(type(file), "discard", None)
    return isinstance(file, AbstractBufferedFile) and method is not None and method is not AbstractBufferedFile.discard


def _write_error(url: str, exc: Exception) -> OSError:
    """An error naming the URL being written (a missing bucket or folder stays a FileNotFoundError)."""
    kind = FileNotFoundError if isinstance(exc, FileNotFoundError) else OSError
    return kind(f"writing {url!r} failed: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def atomic_output(path: PathLike) -> Iterator[IO[bytes]]:
    """Yield a binary file that appears at `path` only if the block exits without an exception."""
    out = AtomicOutput(path)
    try:
        yield out.file
    except BaseException:
        out.abort()
        raise
    out.commit()


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()
