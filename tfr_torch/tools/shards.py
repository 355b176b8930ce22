"""ShardedWriter: TFDS-style sharded TFRecord files with an index beside each shard and a JSON sidecar."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.sidecar import specs_to_json
from tfr_torch.format.options import Compression, check_compression, compression_name
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.folder import OutputFolder
from tfr_torch.format.paths import PathLike, atomic_output
from tfr_torch.format.seek import DEFAULT_SPAN, build_seek_points, check_span
from tfr_torch.format.shardset import check_set_name, shard_name, sidecar_data, sidecar_path, stale_shards
from tfr_torch.format.writer import TFRecordWriter, naming_the_path

__all__ = ["ShardedWriter", "parse_size", "shard_name", "publish_set"]

_log = logging.getLogger(__name__)

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
    an earlier run of the same name and split that had another shard count, and what an interrupted run left
    unfinished (`.partial` shards it did not reuse, temporary files).

    `out_dir` may be an fsspec URL (s3://, gs://, az://, ...): each shard is then made in `staging_dir` (a new
    folder in the system's temporary folder by default; it holds at most two shards), its index and seek points
    built there, and uploaded in the background while the next shard is written. Closing moves the shards to
    their final names inside the store (no download) and writes the sidecar last, so readers never see a
    half-written set; `resume=True` works there too.

    >>> with ShardedWriter("out", "cifar10", "train", shard_size="64MB") as writer:  # doctest: +SKIP
    ...     for example in examples:
    ...         writer.write_example(example)
    """

    def __init__(self, out_dir: PathLike, name: str, split: str = "train", shard_size: int | str = "128MB",
                 compression: Compression = None, *, records_per_shard: int | None = None,
                 features: Mapping[str, Any] | SequenceFeatures | None = None, image: Mapping[str, Any] | None = None,
                 resume: bool = False, settings: Mapping[str, Any] | None = None,
                 tfds: Mapping[str, Any] | None = None, seek_span: int | None = DEFAULT_SPAN,
                 staging_dir: PathLike | None = None) -> None:
        check_compression(compression)  # every argument is checked before the output folder is made
        check_set_name(name, split)
        self.seek_span = None if seek_span is None else check_span(seek_span)
        self.folder = OutputFolder(out_dir)
        self.out_dir = self.folder.path
        if staging_dir is not None and not self.folder.remote:
            raise ValueError(f"staging_dir is for a URL out_dir (shards are made there, then uploaded); "
                             f"{self.out_dir!r} is a local folder, where shards are made in place")
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
            from tfr_torch.tfds.write import check_folder, tfds_options

            if isinstance(self.features, SequenceFeatures):
                raise ValueError("tfds=: TensorFlow Datasets folders hold tf.train.Example records (features.json has "
                                 "no SequenceExample form); write these SequenceExamples with the sidecar instead")
            if not re.fullmatch(r"[\w-]+", split):
                raise ValueError(f"split {split!r}: TensorFlow Datasets selects splits by names of letters, digits, "
                                 "'_' and '-' (as in 'train[:10%]'); name the split without other characters")
            self.tfds = tfds_options(tfds, self.features, self.compression)
            check_folder(self.out_dir, name, split, self.tfds)  # a refused split must not replace the old one
        self.folder.makedirs()
        self._settings = {"name": name, "split": split, "shard_size": self.shard_size, "compression": self.compression,
                          "records_per_shard": records_per_shard, **(settings or {})}
        self._done: list[dict[str, Any]] = []  # finished shards
        self._writer: TFRecordWriter | None = None
        self._index: list[tuple[int, int]] = []
        self._pos = 0
        self._last_position = "null"  # the JSON of the last record's `position` (and below, its `state`)
        self.resumed_position: Any = None  # the `position` of the last record kept from an interrupted run
        self.resumed_state: dict[str, Any] = {}
        self.closed = False
        self.paths: list[str] = []  # the finished shards, once close() has renamed them (none after abort())
        self._close_error: str | None = None  # why close() failed, if it did
        self._finishing: str | None = None  # the shard _finish_shard is finishing (not in self._done yet)
        # a URL out_dir: shards are made in a local staging folder and uploaded by one background thread
        self._staging: str | None = None
        self._uploader: ThreadPoolExecutor | None = None
        self._upload: Future[None] | None = None
        if self.folder.remote:
            if staging_dir is not None:
                os.makedirs(staging_dir, exist_ok=True)
            self._staging = tempfile.mkdtemp(prefix=f"tfr_torch-{name}-{split}-",
                                             dir=None if staging_dir is None else os.fspath(staging_dir))
            self._uploader = ThreadPoolExecutor(1, thread_name_prefix="tfr_torch-upload")
        try:
            if resume:
                self._load_progress()
            else:
                self.folder.remove(self._progress_name())
        except BaseException:  # (a progress file of other settings, a store that refuses): no staging left behind
            self._drop_staging()
            raise

    # ----- paths ---------------------------------------------------------------------------------------------

    def _progress_name(self) -> str:
        return f"{self.name}-{self.split}.progress.json"

    def _partial_name(self, index: int) -> str:
        return f"{self.name}-{self.split}.tfrecord-{index:05d}.partial"

    def _local(self, name: str) -> str:
        """Where file `name` of the set is made: in the output folder, or in the staging folder for a URL."""
        return f"{self._staging}/{name}" if self._staging is not None else self.folder.join(name)

    # ----- resumption -----------------------------------------------------------------------------------------

    def _load_progress(self) -> None:
        path = self.folder.join(self._progress_name())
        text = self.folder.read_text(self._progress_name())
        if text is None:
            return
        try:
            progress = json.loads(text)
            shards = progress["shards"]
        except (ValueError, TypeError, KeyError) as exc:  # a progress file cut short or of another program
            raise ValueError(f"cannot resume from {path}: expected a ShardedWriter progress file (JSON with "
                             f"'settings' and 'shards'), found {text[:40]!r} ({type(exc).__name__}: {exc}); "
                             "delete it (and the .partial shards) to start over") from None
        if progress.get("settings") != json.loads(json.dumps(self._settings)):
            raise ValueError(f"cannot resume from {path}: it was written with settings {progress.get('settings')}, "
                             f"not {self._settings}; delete it (and the .partial shards) to start over")
        kept = []
        for i, shard in enumerate(shards if isinstance(shards, list) else [shards]):
            problem = self._entry_problem(i, shard)
            if problem is not None:
                raise ValueError(f"cannot resume from {path}: its shard entry {i} {problem}; delete it (and the "
                                 ".partial shards) to start over")
            if self.folder.size(shard["partial"]) != shard["bytes"]:
                break
            rows = (self.folder.read_text(shard["partial"] + ".idx") or "").count("\n")
            if rows != shard["records"]:
                raise ValueError(f"cannot resume from {path}: its shard entry {i} says {shard['records']} records "
                                 f"and the index of {shard['partial']} lists {rows}; delete it (and the .partial "
                                 "shards) to start over")
            kept.append(shard)
        self._done = kept
        if kept:
            self.resumed_position = kept[-1]["position"]
            self.resumed_state = kept[-1].get("state", {})

    def _entry_problem(self, i: int, shard: Any) -> str | None:
        """What is wrong with entry `i` of a progress file's shards (as _finish_shard writes them), or None."""
        if not isinstance(shard, dict):
            return f"is {json.dumps(shard)[:40]}, expected an object of 'partial', 'records', 'bytes', 'position'"
        if shard.get("partial") != self._partial_name(i):
            return f"names {json.dumps(shard.get('partial'))[:60]}, expected {self._partial_name(i)} (entries in order)"
        for key in ("records", "bytes"):
            value = shard.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                return f"has {key}={json.dumps(value)[:40]}, expected an int >= 0"
        if "position" not in shard or not isinstance(shard.get("state", {}), dict):
            return "lacks its 'position', or its 'state' is not an object"
        return None

    def _save_progress(self, done: Sequence[Mapping[str, Any]]) -> None:
        path = self.folder.join(self._progress_name())
        with naming_the_path(path, "the progress file of a ShardedWriter"), atomic_output(path) as f:
            f.write(json.dumps({"settings": self._settings, "shards": list(done)}, indent=1).encode())

    # ----- writing --------------------------------------------------------------------------------------------

    @property
    def records(self) -> int:
        finished: int = sum(s["records"] for s in self._done)
        return finished + len(self._index)

    def write(self, record: bytes | bytearray | memoryview, *, position: Any = None,
              state: Mapping[str, Any] | None = None) -> None:
        """Append one record. `position` (e.g. the input item's number) and `state` (JSON) are saved with each
        finished shard, so an interrupted run can resume after the last finished shard."""
        if self.closed:
            raise ValueError("write to a closed ShardedWriter")
        if isinstance(record, (bytearray, memoryview)):
            record = bytes(record)  # its length in bytes (a memoryview's len() counts items), for the index
        elif not isinstance(record, bytes):  # refused before a full shard is finished and a new one opened
            raise TypeError(f"a record must be bytes-like, got {type(record).__name__}")
        # snapshots (the caller may keep changing its objects), taken first: a value the progress file cannot hold
        # is refused before anything is written, not when the shard is finished
        try:
            position_text, state_text = json.dumps(position), json.dumps(state or {})
        except (TypeError, ValueError) as exc:
            raise TypeError(f"position and state must be JSON (ints, strings, lists, dicts ...), got position="
                            f"{position!r} and state={state!r}: {exc}") from None
        framed = len(record) + OVERHEAD
        full = self._writer is not None and (
            (self.records_per_shard is not None and len(self._index) >= self.records_per_shard)
            or (self.records_per_shard is None and self._pos + framed > self.shard_size and self._index))
        if full:
            try:
                self._finish_shard()
            except BaseException:  # (the previous shard's upload failed): this shard was never sent, and the
                self.abort()  # records written after it could never be published
                raise
        if self._writer is None:
            self._writer = TFRecordWriter(self._local(self._partial_name(len(self._done))), self.compression)
            self._index, self._pos = [], 0
        self._writer.write(record)
        self._index.append((self._pos, framed))
        self._pos += framed
        self._last_position, self._last_state = position_text, state_text

    def write_example(self, features: Mapping[str, Any], **kwargs: Any) -> None:
        from tfr_torch.format.example import encode_example

        self.write(encode_example(features), **kwargs)

    def write_sequence_example(self, context: Mapping[str, Any], feature_lists: Mapping[str, Any],
                               **kwargs: Any) -> None:
        from tfr_torch.format.example import encode_sequence_example

        self.write(encode_sequence_example(context, feature_lists), **kwargs)

    def finish_shard(self) -> None:
        """End the open shard now: the next record starts a new one (shards cut at records of your choosing, e.g.
        an exact number of shards of equal counts, as `reshard(num_shards=...)` does). Nothing to do when no shard
        is open (before the first record, or right after a cut)."""
        if self.closed:
            raise ValueError("finish_shard on a closed ShardedWriter")
        if self._writer is None or not self._index:
            return
        try:
            self._finish_shard()
        except BaseException:  # as in write(): the set could never be published
            self.abort()
            raise

    def _finish_shard(self) -> None:
        writer, self._writer = self._writer, None
        assert writer is not None  # called only while a shard is open
        name = self._partial_name(len(self._done))
        self._finishing = name  # until it is in self._done: abort() removes its files
        writer.close()
        partial = self._local(name)
        with naming_the_path(partial + ".idx", "the index of a shard"), atomic_output(partial + ".idx") as f:
            f.write("".join(f"{o} {s}\n" for o, s in self._index).encode("ascii"))
        files = [name, name + ".idx"]
        if self.compression != "none" and self.seek_span is not None:
            with naming_the_path(partial + ".idx.seek", "the seek points of a shard"):
                build_seek_points(partial, partial + ".idx.seek", self.compression, self.seek_span)
            files += [name + ".idx.seek"] if os.path.exists(partial + ".idx.seek") else []
        self._done.append({"partial": name, "records": len(self._index), "bytes": os.path.getsize(partial),
                           "position": json.loads(self._last_position), "state": json.loads(self._last_state)})
        self._finishing = None
        self._index = []
        if self._uploader is None:
            self._save_progress(self._done)
            return
        self._wait_upload()  # one upload in flight: the staging folder holds at most two shards
        self._upload = self._uploader.submit(self._send, files, list(self._done))

    def _send(self, files: Sequence[str], done: Sequence[Mapping[str, Any]]) -> None:
        """Upload a finished shard's files, then record it in the progress file (the background thread)."""
        for name in files:
            try:
                self.folder.upload(self._local(name), name)
            except Exception as exc:  # an upload's own errors rarely name the object
                raise OSError(f"ShardedWriter: uploading {name} to {self.folder.join(name)!r} failed: "
                              f"{type(exc).__name__}: {exc}") from exc
            os.remove(self._local(name))
        self._save_progress(done)

    def _wait_upload(self) -> None:
        upload, self._upload = self._upload, None
        if upload is not None:
            upload.result()

    def close(self) -> list[str]:
        """Finish the last shard, rename every shard to `...-of-{count}`, write the sidecar; return the shard paths.
        A close that fails leaves what `abort()` leaves (the finished shards, for `resume=True`); another close
        raises."""
        if self._close_error is not None:  # not the empty list of an aborted writer: this set was not written
            raise ValueError(f"ShardedWriter for {self.folder.join(self.name)}-{self.split}: close() failed "
                             f"({self._close_error}); write the set again (resume=True keeps its uploaded shards)")
        if self.closed:
            return self.paths
        try:
            return self._close()
        except BaseException as exc:  # (an upload or a move refused): what abort() leaves, the uploaded shards
            self._close_error = f"{type(exc).__name__}: {exc}"  # for resume=True, and no staging folder or thread
            self.abort()
            raise

    def _close(self) -> list[str]:
        if self._writer is not None:
            self._finish_shard()
        self._wait_upload()
        count = len(self._done)
        if self.tfds is not None and not count:
            raise ValueError(f"split {self.split!r} of {self.name!r} has no records: TensorFlow Datasets cannot "
                             "read an empty split (its own writer refuses one: 'No examples were yielded.')")
        finals = [shard_name(self.name, self.split, i, count) for i in range(count)]
        shards = [{"file": final, "records": shard["records"], "bytes": shard["bytes"]}
                  for final, shard in zip(finals, self._done)]
        spec, lists = specs_to_json(self.features) if self.features is not None else (None, None)
        sidecar = sidecar_data(self.name, self.split, self.compression, shards, spec, self.image, lists)
        text = json.dumps(sidecar, indent=1)  # before renaming anything: a spec that cannot be stored fails here
        publish_set(self.folder, self.name, self.split, [(s["partial"], f) for s, f in zip(self._done, finals)],
                    shards, text, self.tfds)
        self.folder.remove(self._progress_name())
        self._remove_partials(self.folder.names())  # those of an earlier, interrupted run that this one did not reuse
        self.closed = True
        self._drop_staging()
        self.paths = [self.folder.join(s["file"]) for s in shards]
        return self.paths

    def abort(self, keep_finished: bool = True) -> None:
        """Stop without finishing: the open shard is discarded; the finished ones stay (for `resume=True`), or, with
        `keep_finished=False` (for a run that is never resumed), are removed with the progress file."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        if self._finishing is not None:  # stopped while its index or seek points were written: not finished
            self._remove_partials([self._finishing + suffix for suffix in ("", ".idx", ".idx.seek")])
            self._finishing = None
        self.closed = True
        try:
            self._wait_upload()  # a finished shard being uploaded is kept for a resumed run
        except Exception as exc:  # abort runs while another error propagates: this one is only logged
            _log.warning("ShardedWriter.abort: the last finished shard was not uploaded: %s", exc)
        self._drop_staging()
        if not keep_finished:
            self._remove_partials([s["partial"] + suffix for s in self._done for suffix in ("", ".idx", ".idx.seek")])
            self.folder.remove(self._progress_name())

    def _remove_partials(self, names: Sequence[str]) -> None:
        """Remove the unfinished shards of this set (with their indexes and seek points) among `names`, and the
        temporary files of its atomic writes that a killed run left (a shard's can be as large as the shard)."""
        own = re.escape(f"{self.name}-{self.split}.")
        partial = own + r"tfrecord-\d+\.partial(\.idx(\.seek)?)?"
        written = rf"({partial}|{own}progress\.json|{own}tfr_torch\.json)"
        # AtomicOutput's temporary names: `.{name}.XXXXXXXX.tmp` in a local folder, `{name}.tmp-{uuid}` behind a URL
        pattern = re.compile(rf"{partial}|\.{written}\.\w{{8}}\.tmp|{written}\.tmp-[0-9a-f]{{32}}")
        for name in names:
            if pattern.fullmatch(name):
                self.folder.remove(name)

    def _drop_staging(self) -> None:
        if self._uploader is not None:
            self._uploader.shutdown()
            self._uploader = None
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)

    def __enter__(self) -> ShardedWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def publish_set(folder: OutputFolder, name: str, split: str, moves: Sequence[tuple[str, str]],
                shards: Sequence[Mapping[str, Any]], sidecar_text: str, tfds: Mapping[str, Any] | None) -> None:
    """Make a finished set of shards visible in `folder`: remove the shards of an earlier set of `name` and `split`
    with another count, move each (unfinished name, final name) of `moves` to its final name with its index and
    seek points (a final shard's stale seek points go), then write the set's metadata last (the sidecar text, or
    the TFDS metadata when `tfds` holds ShardedWriter's tfds options): a reader that finds the metadata finds
    every shard it lists."""
    present = set(folder.names())
    for old in stale_shards(present, name, split, [final for _, final in moves]):
        folder.remove(old)  # shards of an earlier, differently sharded run of this name and split
    for sub in {partial.rpartition("/")[0] for partial, _ in moves} - {""}:  # unfinished shards in a sub-folder
        present.update(f"{sub}/{n}" for n in folder.names(sub))
    pairs: list[tuple[str, str]] = []
    for partial, final in moves:
        pairs += [(partial, final), (partial + ".idx", final + ".idx")]
        if partial + ".idx.seek" in present:
            pairs.append((partial + ".idx.seek", final + ".idx.seek"))
        elif final + ".idx.seek" in present:  # an earlier set's, stale beside this shard
            folder.remove(final + ".idx.seek")
    folder.move(pairs)
    if tfds is not None:
        from tfr_torch.tfds.write import finish_split

        finish_split(folder.path, name, split, shards, tfds)
    else:
        path = sidecar_path(folder.path, name, split)
        with naming_the_path(path, "the sidecar of a shard set"), atomic_output(path) as f:
            f.write(sidecar_text.encode())
