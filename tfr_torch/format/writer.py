"""Writing TFRecord files that are byte-identical to TensorFlow's `tf.io.TFRecordWriter`."""

from __future__ import annotations

import contextlib
import warnings
import zlib
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, NoReturn

from tfr_torch import _native
from tfr_torch.format.compression import NONE, make_compressor, normalize_compression
from tfr_torch.format.options import Compression
from tfr_torch.format.framing import data_crc, frame_record, header_bytes
from tfr_torch.format.paths import AtomicOutput, PathLike

__all__ = ["TFRecordWriter", "frame_record", "naming_the_path"]

_FRAME_TOGETHER = 65536  # records shorter than this are framed together with others (larger: written as they are)
_PENDING_BYTES = 1 << 20  # uncompressed records are written in calls of about this many bytes


class TFRecordWriter:
    """Write records to a TFRecord file, as TensorFlow's `tf.io.TFRecordWriter` does, byte for byte.

    - `compression`: None (or ""), "gzip"/"GZIP" or "zlib"/"ZLIB"; `compression_level`: 0-9, None for zlib's
      default (6), as TensorFlow's `TFRecordOptions`.
    - Atomic: the file appears under its name only when `close()` succeeds (or the `with` block exits without
      an exception); until then it is written under a temporary name in the same folder. A write the disk refuses
      (full: ENOSPC; over the file size limit: EFBIG) raises an OSError naming the path, and discards the file: the
      writer is done, and a later `write` or `close` raises too (nothing is ever left that looks complete).
    - `path` may be an fsspec URL (s3://, gs://, memory://, ...) when fsspec is installed.

    >>> with TFRecordWriter("out.tfrecord", compression="gzip") as writer:  # doctest: +SKIP
    ...     writer.write(b"raw record")
    ...     writer.write_example({"label": 3, "image": b"..."})
    """

    def __init__(self, path: PathLike, compression: Compression = None, compression_level: int | None = None) -> None:
        self.compression = normalize_compression(compression)
        if self.compression == NONE:
            if compression_level is not None:
                raise ValueError(f"compression_level={compression_level!r} needs compression='gzip' or 'zlib'")
            self._compressor = None
        else:
            self._compressor = make_compressor(self.compression, compression_level)
        self._out = AtomicOutput(path)
        self.path = self._out.path
        self._file = self._out.file
        self._closed = False
        self.records = 0
        self._pending: list[bytes] = []  # small uncompressed records not yet framed and written (see write)
        self._pending_bytes = 0
        self._failed: OSError | None = None  # the error of a write the disk refused (the file was discarded)
        self._why = ""

    def write(self, record: bytes | bytearray | memoryview) -> None:
        """Append one record (bytes, bytearray or memoryview)."""
        if self._closed:
            self._refuse("write to")
        if isinstance(record, bytes):
            n = len(record)
        elif isinstance(record, (bytearray, memoryview)):
            record = bytes(record)  # held until framed: a copy the caller cannot change afterwards
            n = len(record)
        else:
            raise TypeError(f"a record must be bytes-like, got {type(record).__name__}")
        if n < _FRAME_TOGETHER and self._compressor is None:
            # framed with the records around it and written in one call per _PENDING_BYTES (a write call per
            # 16 KB record was half the time)
            self._pending.append(record)
            self._pending_bytes += n
            if self._pending_bytes >= _PENDING_BYTES:
                try:
                    self._drain()
                except OSError as exc:
                    self._fail(exc)
            self.records += 1
            return
        try:
            self._write_alone(record, n)
        except OSError as exc:
            self._fail(exc)
        self.records += 1

    def _write_alone(self, record: bytes, n: int) -> None:
        """Write the pending records, then `record` (compressed, or one too large to frame with others)."""
        self._drain()
        core = _native.core
        if core is not None and n < _FRAME_TOGETHER:  # one call frames it: header, both CRCs, data
            framed = core.frame_records((record,))
            assert self._compressor is not None  # uncompressed small records are pending above
            out = self._compressor.compress(framed)
            if out:
                self._file.write(out)
            return
        header = header_bytes(n)
        footer = data_crc(record)
        if self._compressor is None:  # a large record: written as it is, without a join's copy
            write = self._file.write
            write(header)
            write(record)
            write(footer)
        else:
            compress = self._compressor.compress
            out = compress(header) + compress(record) + compress(footer)
            if out:
                self._file.write(out)

    def _fail(self, exc: OSError) -> NoReturn:
        """A write the disk refused: the file is discarded, the writer done; raise an error naming the path (the
        temporary file's errors name nothing)."""
        self._closed = True
        self._out.abort()
        self._why = exc.strerror or str(exc)
        if exc.filename is not None or exc.errno is None:  # names its file already, or a message of our own
            self._failed = exc
        else:
            self._failed = OSError(exc.errno, f"{exc.strerror or exc} (writing a TFRecord file, after {self.records} "
                                   "records: it was discarded, nothing is left under its name)", self.path)
        if self._failed is exc:
            raise exc
        raise self._failed from exc

    def _refuse(self, what: str) -> None:
        """Raise for a call on a closed writer: an OSError naming why, where writing failed."""
        if self._failed is not None:
            raise OSError(self._failed.errno, f"{what} a TFRecordWriter whose writing failed ({self._why}): the file "
                          "was discarded; write it again", self.path)
        raise ValueError(f"{what} closed TFRecordWriter ({self.path})")

    def _drain(self) -> None:
        """Frame the pending records back to back and write them in one call."""
        pending = self._pending
        if not pending:
            return
        core = _native.core
        framed = core.frame_records(pending) if core is not None else b"".join(map(frame_record, pending))
        self._pending = []
        self._pending_bytes = 0
        self._file.write(framed)

    def write_example(self, features: Mapping[str, Any]) -> None:
        """Encode a mapping of feature values as a tf.train.Example (see `encode_example`) and write it."""
        from tfr_torch.format.example import encode_example

        self.write(encode_example(features))

    def write_sequence_example(self, context: Mapping[str, Any], feature_lists: Mapping[str, Any]) -> None:
        """Encode a tf.train.SequenceExample (see `encode_sequence_example`: context values, and per feature list
        its steps' values) and write it."""
        from tfr_torch.format.example import encode_sequence_example

        self.write(encode_sequence_example(context, feature_lists))

    def flush(self) -> None:
        """Push buffered bytes to the temporary file. With compression this is a Z_PARTIAL_FLUSH, as in TensorFlow."""
        if self._closed:
            self._refuse("flush of")
        try:
            self._drain()
            if self._compressor is not None:
                self._file.write(self._compressor.flush(zlib.Z_PARTIAL_FLUSH))
            self._file.flush()
        except OSError as exc:
            self._fail(exc)

    def close(self) -> None:
        """Finish the file and move it to its final name. Safe to call more than once; raises again where writing
        failed (the file was discarded)."""
        if self._closed:
            if self._failed is not None:
                self._refuse("close of")
            return
        try:
            self._drain()
            if self._compressor is not None:
                self._file.write(self._compressor.flush(zlib.Z_FINISH))
        except OSError as exc:
            self._fail(exc)
        except BaseException:
            self._closed = True
            self._out.abort()
            raise
        self._closed = True
        try:
            self._out.commit()  # (closing the temporary file writes what it buffered: the disk may refuse it there)
        except OSError as exc:
            self._why = exc.strerror or str(exc)
            if exc.filename is not None or exc.errno is None:  # the rename's error names both files; a URL's names
                self._failed = exc  # the URL
                raise
            self._failed = OSError(exc.errno, f"{exc.strerror or exc} (finishing a TFRecord file of {self.records} "
                                   "records: it was discarded, nothing is left under its name)", self.path)
            raise self._failed from exc

    def abort(self) -> None:
        """Discard everything written: no file appears under the name."""
        if not self._closed:
            self._closed = True
            self._out.abort()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            warnings.warn(f"TFRecordWriter for {self.path} was never closed: its records were discarded",
                          ResourceWarning, stacklevel=2)
            self.abort()


@contextlib.contextmanager
def naming_the_path(path: str, what: str) -> Iterator[None]:
    """Where the block's atomic write of `path` fails with an OSError that names no file (a full disk, a file
    size limit: the temporary file's write or close), raise one that names `path` and says it is `what` (the
    atomic write left nothing under its name)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:  # names its file already, or a message of our own
            raise
        raise OSError(exc.errno, f"{exc.strerror or exc} (writing {what}: nothing was left under its name)",
                      path) from exc
