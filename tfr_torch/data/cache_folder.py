"""The on-disk format of CachedDataset's folder: one part per reader (`part-<reader>.pt`, the items it yielded in
its first full epoch, as torch.save writes them), each with its CRC-32, size and epoch beside it
(`check-<reader>.json`, written after the part), and a manifest describing the source (`tfr_torch-cache.json`: its
type, files and settings). A part is replayed only when its check agrees; a folder whose manifest describes another
source is emptied, with a warning naming what changed. Every write is atomic."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import warnings
import zlib
from typing import IO, Any, cast

import torch

from tfr_torch.format.paths import atomic_output
from tfr_torch.format.writer import naming_the_path

__all__ = ["CACHE_FORMAT", "describe_source", "source_identity"]

CACHE_FORMAT = "tfr_torch.cache/2"  # 2: each part's CRC-32 and size beside it (`check-*.json`)
_MANIFEST = "tfr_torch-cache.json"


def is_cache_file(name: str) -> bool:
    """A part, or a part's check, in a cache folder."""
    return (name.startswith("part-") and name.endswith(".pt")) or (name.startswith("check-") and name.endswith(".json"))


def part_path(folder: str, key: str) -> str:
    """Where reader `key`'s part is kept."""
    return os.path.join(folder, f"part-{key}.pt")


def check_path(folder: str, key: str) -> str:
    """Where a part's CRC-32 and size are kept (written after the part, read before it is replayed)."""
    return os.path.join(folder, f"check-{key}.json")


def prepare_folder(folder: str, dataset: Any) -> None:
    """Write the manifest; a folder whose manifest describes another source is emptied first (with a
    warning saying what changed)."""
    os.makedirs(folder, exist_ok=True)
    source = describe_source(dataset)
    manifest = {"format": CACHE_FORMAT, "source": source,
                "fingerprint": hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()}
    path = os.path.join(folder, _MANIFEST)
    old = None
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = {}
        if not isinstance(old, dict):  # JSON, but not a manifest (a list, a string, null): unreadable too
            old = {}
    kept = [n for n in os.listdir(folder) if is_cache_file(n)]
    if (old is not None and old.get("fingerprint") == manifest["fingerprint"]
            and old.get("format") == CACHE_FORMAT):
        return
    if kept:
        parts = sum(n.startswith("part-") for n in kept)
        changed = _differences(old.get("source") if isinstance(old, dict) else None, source)
        warnings.warn(f"the cache in {folder} was made from another dataset ({changed}): its {parts} part(s) "
                      "are removed and the next epoch reads the dataset again", stacklevel=3)
        for name in kept:
            os.remove(os.path.join(folder, name))
    with atomic_output(path) as f:
        f.write(json.dumps(manifest, indent=1, sort_keys=True).encode())


def write_part(folder: str, key: str, kept: list[Any], source_epoch: int) -> None:
    """Keep reader `key`'s items, read in `source_epoch`: the part, then its check. Where the disk refuses either
    (full), neither is left (nor a part of an earlier epoch: its check was replaced first, or is gone), and the
    OSError names the file."""
    path = part_path(folder, key)
    try:
        with contextlib.suppress(FileNotFoundError):  # a part of an earlier epoch under this name: first its check,
            os.remove(check_path(folder, key))  # so that no check ever describes a part it was not made for
        with naming_the_path(path, "a part of a CachedDataset's folder"), atomic_output(path) as f:
            _save(kept, f)
        check = check_path(folder, key)
        with naming_the_path(check, "the check of a part of a CachedDataset's folder"), atomic_output(check) as f:
            f.write(json.dumps({**_file_crc(path), "epoch": source_epoch}).encode())  # after the part (see above)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(path)  # a part without its check is never replayed: it would only hold the disk
        raise


class _Watched:
    """A binary file whose write errors are kept: torch.save turns one into its own RuntimeError ("unexpected pos
    ..."), which says nothing of a full disk."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def _save(items: list[Any], file: IO[bytes]) -> None:
    """torch.save(items, file); where writing the file failed, that OSError (not torch's error about it)."""
    watched = _Watched(file)
    try:
        torch.save(items, cast(IO[bytes], watched))
    except Exception as exc:
        if watched.error is not None and watched.error is not exc:
            raise watched.error from exc
        raise


def part_epoch(folder: str, key: str) -> int | None:
    """The epoch reader `key`'s kept part was read in, as its check says (None: no check says one)."""
    try:
        with open(check_path(folder, key)) as f:
            epoch = json.load(f).get("epoch")
        if isinstance(epoch, int) and not isinstance(epoch, bool):
            return epoch
    except (OSError, ValueError, AttributeError):
        pass
    return None


def kept_at(folder: str, key: str) -> int | None:
    """The epoch the other readers' parts kept in the folder were read in (their checks say), or None when
    none is kept."""
    for name in sorted(os.listdir(folder)):
        if name.startswith("check-") and name.endswith(".json") and name != f"check-{key}.json":
            try:
                with open(os.path.join(folder, name)) as f:
                    epoch = json.load(f).get("epoch")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(epoch, int) and not isinstance(epoch, bool):
                return epoch
    return None


def load_part(folder: str, key: str) -> list[Any] | None:
    """This reader's kept part, or None: none kept, or one that is not what was written (its CRC-32 and size,
    kept beside it, disagree, or it does not load: a full disk, an interrupted copy, a flipped bit), which is
    removed with a warning naming it, and the epoch reads the dataset again."""
    path = part_path(folder, key)
    if not os.path.exists(path):
        return None
    from tfr_torch.decode.results import RaggedTensor, SparseBytes

    try:
        with open(check_path(folder, key)) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        recorded = None
    if not isinstance(recorded, dict):  # JSON, but not a check (a list, a string, null): unreadable
        recorded = None
    problem = None
    if recorded is None or {k: recorded.get(k) for k in ("crc32", "bytes")} != _file_crc(path):
        problem = "its CRC-32 or size is not the one recorded when it was written" if recorded is not None else \
            "the CRC-32 recorded beside it is missing or unreadable"
    else:
        try:
            with torch.serialization.safe_globals([RaggedTensor, SparseBytes]):
                items: list[Any] = torch.load(path, weights_only=True, mmap=True)
            return items
        except Exception as exc:  # noqa: BLE001 - whatever torch raises for a part that does not load
            problem = f"it does not load ({type(exc).__name__}: {str(exc)[:120]})"
    warnings.warn(f"the cached part {path} is damaged ({problem}): it is removed and this epoch reads the dataset "
                  "again", stacklevel=3)
    for stale in (path, check_path(folder, key)):
        with contextlib.suppress(OSError):
            os.remove(stale)
    return None


def _file_crc(path: str) -> dict[str, int]:
    """{"crc32": ..., "bytes": ...} of a file, read in 1 MiB pieces."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return {"crc32": crc, "bytes": size}


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable_repr(value: Any) -> str:
    """repr() without the object addresses a default repr holds (`<function f at 0x7f...>`): another run of the
    same script gets other addresses, and its cache must still be replayed."""
    return _ADDRESS.sub("", repr(value))


def describe_source(dataset: Any) -> dict[str, Any]:
    """What identifies the items a dataset yields: its type, its files (name, size, modification time) and its
    settings; a MixedDataset's, each of its datasets too. A cache made from a different description is not replayed."""
    files = []
    for path in getattr(dataset, "paths", []) or []:
        try:
            st = os.stat(path)
            files.append([str(path), st.st_size, st.st_mtime_ns])
        except OSError:
            files.append([str(path), None, None])  # a URL: its name only
    settings = {}
    # not the rank: the ranks share a folder, each its own parts; names, weights, stop: a MixedDataset's
    for name in ("features", "batch_size", "drop_last", "shuffle", "seed", "pad", "compression", "on_error",
                 "transform", "world_size", "names", "weights", "stop"):
        if hasattr(dataset, name):
            settings[name] = _stable_repr(getattr(dataset, name))
    if getattr(dataset, "location_key", None) is not None:  # a key in every item kept; described only when set,
        settings["location_key"] = _stable_repr(dataset.location_key)  # so folders made before it stay valid
    described: dict[str, Any] = {"type": f"{type(dataset).__module__}.{type(dataset).__qualname__}",
                                 "files": files, "settings": settings}
    parts = getattr(dataset, "datasets", None)
    if isinstance(parts, list):  # a MixedDataset: what each of its datasets is
        described["datasets"] = [describe_source(part) for part in parts]
    return described


def source_identity(dataset: Any) -> dict[str, Any]:
    """describe_source without the files' sizes and times (a copy of the same files elsewhere is the same source):
    what a CachedDataset state names its source by, so that a state of a cache of another source is refused."""
    described = describe_source(dataset)

    def strip(part: dict[str, Any]) -> dict[str, Any]:
        out = {**part, "files": len(part["files"])}
        if "datasets" in part:
            out["datasets"] = [strip(inner) for inner in part["datasets"]]
        return out

    return strip(described)


def source_differences(old: Any, new: dict[str, Any]) -> str:
    """What differs between two descriptions of a source ("changed: files, seed")."""
    return _differences(old, new)


def _differences(old: Any, new: dict[str, Any]) -> str:
    if not isinstance(old, dict):
        return "its manifest is missing or unreadable"
    changed = [k for k in ("type", "files", "datasets") if old.get(k) != new.get(k)]
    old_settings = old.get("settings")
    if not isinstance(old_settings, dict):  # a damaged manifest's: every setting counts as changed
        old_settings = {}
    changed += [f"{k}" for k in sorted(set(old_settings) | set(new["settings"]))
                if old_settings.get(k) != new["settings"].get(k)]
    return "changed: " + ", ".join(changed) if changed else "another cache format"

