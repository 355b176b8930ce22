"""ShardedWriter: TFDS-style sharded TFRecord files with an index beside each shard and a JSON sidecar."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.sidecar import specs_to_json
from tfr_torch.format.options import Compression, check_compression, compression_name
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.paths import PathLike, as_path, atomic_output
from tfr_torch.format.seek import DEFAULT_SPAN, build_seek_points, check_span
from tfr_torch.format.shardset import check_set_name, shard_name, sidecar_data, sidecar_path, stale_shards
from tfr_torch.format.writer import TFRecordWriter

__all__ = ["ShardedWriter", "parse_size", "shard_name"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_size(size: int | str) -> int:
    """Bytes from an int or a string such as "128MB", "64 MiB", "1.5GB"."""
    if isinstance(size, int) and not isinstance(size, bool):
        value = size
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(size))
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"shard size {size!r}: expected bytes as an int or a string like '128MB' or '64MiB'")
        value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if value < 1:
        raise ValueError(f"shard size must be positive, got {size!r}")
    return value


class ShardedWriter:
    """Write records into shards that roll over by size (`shard_size`, bytes before compression) or, when given,
    by `records_per_shard` instead, named the TFDS way and renamed to their final count when closed, each with an index
    (`<shard>.idx`) and, for the set, a sidecar `{name}-{split}.tfr_torch.json` holding `features` (a spec),
    every shard's record count, `image` (e.g. the image encoding) and the tfr_torch version. A GZIP or ZLIB shard
    also gets its seek points (`<shard>.idx.seek`, every `seek_span` decompressed bytes; None: none), as
    `build_index` writes them, so it can be read in a global shuffle and by offset; they are built by the compiled
    core, which inflates each finished shard once (without it, none are written).

    Crash-safe: every shard is written atomically; with `resume=True` the shards a previous, interrupted run
    finished are kept (see `resumed_position`), and writing continues after them. Closing removes the shards of
    an earlier run of the same name and split that had another shard count.

    >>> with ShardedWriter("out", "cifar10", "train", shard_size="64MB") as writer:  # doctest: +SKIP
    ...     for example in examples:
    ...         writer.write_example(example)
    """

    def __init__(self, out_dir: PathLike, name: str, split: str = "train", shard_size: int | str = "128MB",
                 compression: Compression = None, *, records_per_shard: int | None = None,
                 features: Mapping[str, Any] | SequenceFeatures | None = None, image: Mapping[str, Any] | None = None,
                 resume: bool = False, settings: Mapping[str, Any] | None = None,
                 tfds: Mapping[str, Any] | None = None, seek_span: int | None = DEFAULT_SPAN) -> None:
        check_compression(compression)  # before the output folder is made
        check_set_name(name, split)
        self.seek_span = None if seek_span is None else check_span(seek_span)
        self.out_dir = as_path(out_dir).rstrip("/") or "."
        if "://" in self.out_dir:
            raise ValueError(f"ShardedWriter writes to a local folder, got {self.out_dir!r}: write locally, then "
                             "upload the shards (e.g. fsspec's put) so readers never see a half-written set")
        os.makedirs(self.out_dir, exist_ok=True)
        self.name, self.split = name, split
        self.shard_size = parse_size(shard_size)
        if records_per_shard is not None and (not isinstance(records_per_shard, int) or records_per_shard < 1):
            raise ValueError(f"records_per_shard must be a positive int, got {records_per_shard!r}")
        self.records_per_shard = records_per_shard
        self.compression = compression_name(compression)
        self.features: dict[str, Any] | SequenceFeatures | None = (
            features if isinstance(features, SequenceFeatures) or features is None else dict(features))
        self.image = dict(image) if image is not None else None
        # TFDS metadata (dataset_info.json, features.json) instead of the sidecar: tfr_torch.tfds.write
        self.tfds = None
        if tfds is not None:
            from tfr_torch.tfds.write import tfds_options

            if isinstance(self.features, SequenceFeatures):
                raise ValueError("tfds=: TensorFlow Datasets folders hold tf.train.Example records (features.json has "
                                 "no SequenceExample form); write these SequenceExamples with the sidecar instead")
            self.tfds = tfds_options(tfds, self.features, self.compression)
        self._settings = {"name": name, "split": split, "shard_size": self.shard_size, "compression": self.compression,
                          "records_per_shard": records_per_shard, **(settings or {})}
        self._done: list[dict[str, Any]] = []  # finished shards
        self._writer: TFRecordWriter | None = None
        self._index: list[tuple[int, int]] = []
        self._pos = 0
        self._last_position: Any = None
        self.resumed_position: Any = None  # the `position` of the last record kept from an interrupted run
        self.resumed_state: dict[str, Any] = {}
        self.closed = False
        self.paths: list[str] = []  # the finished shards, once close() has renamed them (none after abort())
        if resume:
            self._load_progress()
        elif os.path.exists(self._progress_path()):
            os.remove(self._progress_path())

    # ----- paths ---------------------------------------------------------------------------------------------

    def _progress_path(self) -> str:
        return f"{self.out_dir}/{self.name}-{self.split}.progress.json"

    def _partial(self, index: int) -> str:
        return f"{self.out_dir}/{self.name}-{self.split}.tfrecord-{index:05d}.partial"

    # ----- resumption -----------------------------------------------------------------------------------------

    def _load_progress(self) -> None:
        path = self._progress_path()
        if not os.path.exists(path):
            return
        with open(path) as f:
            progress = json.load(f)
        if progress.get("settings") != json.loads(json.dumps(self._settings)):
            raise ValueError(f"cannot resume from {path}: it was written with settings {progress.get('settings')}, "
                             f"not {self._settings}; delete it (and the .partial shards) to start over")
        kept = []
        for shard in progress["shards"]:
            partial = f"{self.out_dir}/{shard['partial']}"
            if not os.path.exists(partial) or os.path.getsize(partial) != shard["bytes"]:
                break
            kept.append(shard)
        self._done = kept
        if kept:
            self.resumed_position = kept[-1]["position"]
            self.resumed_state = kept[-1].get("state", {})

    def _save_progress(self) -> None:
        with atomic_output(self._progress_path()) as f:
            f.write(json.dumps({"settings": self._settings, "shards": self._done}, indent=1).encode())

    # ----- writing --------------------------------------------------------------------------------------------

    @property
    def records(self) -> int:
        finished: int = sum(s["records"] for s in self._done)
        return finished + len(self._index)

    def write(self, record: bytes, *, position: Any = None, state: Mapping[str, Any] | None = None) -> None:
        """Append one record. `position` (e.g. the input item's number) and `state` (JSON) are saved with each
        finished shard, so an interrupted run can resume after the last finished shard."""
        if self.closed:
            raise ValueError("write to a closed ShardedWriter")
        framed = len(record) + OVERHEAD
        full = self._writer is not None and (
            (self.records_per_shard is not None and len(self._index) >= self.records_per_shard)
            or (self.records_per_shard is None and self._pos + framed > self.shard_size and self._index))
        if full:
            self._finish_shard()
        if self._writer is None:
            self._writer = TFRecordWriter(self._partial(len(self._done)), self.compression)
            self._index, self._pos = [], 0
        self._writer.write(record)
        self._index.append((self._pos, framed))
        self._pos += framed
        self._last_position = position
        self._last_state = json.dumps(state or {})  # a snapshot: the caller may keep changing its objects

    def write_example(self, features: Mapping[str, Any], **kwargs: Any) -> None:
        from tfr_torch.format.example import encode_example

        self.write(encode_example(features), **kwargs)

    def write_sequence_example(self, context: Mapping[str, Any], feature_lists: Mapping[str, Any],
                               **kwargs: Any) -> None:
        from tfr_torch.format.example import encode_sequence_example

        self.write(encode_sequence_example(context, feature_lists), **kwargs)

    def _finish_shard(self) -> None:
        writer, self._writer = self._writer, None
        assert writer is not None  # called only while a shard is open
        writer.close()
        partial = self._partial(len(self._done))
        with atomic_output(partial + ".idx") as f:
            f.write("".join(f"{o} {s}\n" for o, s in self._index).encode("ascii"))
        if self.compression != "none" and self.seek_span is not None:
            build_seek_points(partial, partial + ".idx.seek", self.compression, self.seek_span)
        self._done.append({"partial": partial.rsplit("/", 1)[-1], "records": len(self._index),
                           "bytes": os.path.getsize(partial), "position": self._last_position,
                           "state": json.loads(self._last_state)})
        self._index = []
        self._save_progress()

    def close(self) -> list[str]:
        """Finish the last shard, rename every shard to `...-of-{count}`, write the sidecar; return the shard paths."""
        if self.closed:
            return self.paths
        if self._writer is not None:
            self._finish_shard()
        count = len(self._done)
        finals = [shard_name(self.name, self.split, i, count) for i in range(count)]
        shards = [{"file": final, "records": shard["records"], "bytes": shard["bytes"]}
                  for final, shard in zip(finals, self._done)]
        spec, lists = specs_to_json(self.features) if self.features is not None else (None, None)
        sidecar = sidecar_data(self.name, self.split, self.compression, shards, spec, self.image, lists)
        text = json.dumps(sidecar, indent=1)  # before renaming anything: a spec that cannot be stored fails here
        stale = stale_shards(self.out_dir, self.name, self.split, finals)
        for old in stale:  # shards of an earlier, differently sharded run of this name and split
            os.remove(f"{self.out_dir}/{old}")
        for final, shard in zip(finals, self._done):
            partial = f"{self.out_dir}/{shard['partial']}"
            os.replace(partial, f"{self.out_dir}/{final}")
            os.replace(partial + ".idx", f"{self.out_dir}/{final}.idx")
            if os.path.exists(partial + ".idx.seek"):
                os.replace(partial + ".idx.seek", f"{self.out_dir}/{final}.idx.seek")
            elif os.path.exists(f"{self.out_dir}/{final}.idx.seek"):  # an earlier set's, stale beside this shard
                os.remove(f"{self.out_dir}/{final}.idx.seek")
        if self.tfds is not None:
            from tfr_torch.tfds.write import finish_split

            finish_split(self.out_dir, self.name, self.split, shards, self.tfds)
        else:
            with atomic_output(sidecar_path(self.out_dir, self.name, self.split)) as f:
                f.write(text.encode())
        if os.path.exists(self._progress_path()):
            os.remove(self._progress_path())
        self.closed = True
        self.paths = [f"{self.out_dir}/{s['file']}" for s in shards]
        return self.paths

    def abort(self) -> None:
        """Stop without finishing: finished shards stay (for `resume=True`), the open one is discarded."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        self.closed = True

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
