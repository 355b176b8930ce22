"""Writing TFRecord files that are byte-identical to TensorFlow's `tf.io.TFRecordWriter`."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from tfr_torch import _native
from tfr_torch.format.compression import NONE, make_compressor, normalize_compression
from tfr_torch.format.options import Compression
from tfr_torch.format.framing import data_crc, frame_record, header_bytes
from tfr_torch.format.paths import AtomicOutput, PathLike

__all__ = ["TFRecordWriter", "frame_record"]

_FRAME_TOGETHER = 65536  # records shorter than this are framed together with others (larger: written as they are)
_PENDING_BYTES = 1 << 20  # uncompressed records are written in calls of about this many bytes


class TFRecordWriter:
    """Write records to a TFRecord file, as TensorFlow's `tf.io.TFRecordWriter` does, byte for byte.

    - `compression`: None (or ""), "gzip"/"GZIP" or "zlib"/"ZLIB"; `compression_level`: 0-9, None for zlib's
      default (6), as TensorFlow's `TFRecordOptions`.
    - Atomic: the file appears under its name only when `close()` succeeds (or the `with` block exits without
      an exception); until then it is written under a temporary name in the same folder.
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

    def write(self, record: bytes | bytearray | memoryview) -> None:
        """Append one record (bytes, bytearray or memoryview)."""
        if self._closed:
            raise ValueError(f"write to closed TFRecordWriter ({self.path})")
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
                self._drain()
            self.records += 1
            return
        self._drain()
        core = _native.core
        if core is not None and n < _FRAME_TOGETHER:  # one call frames it: header, both CRCs, data
            framed = core.frame_records((record,))
            assert self._compressor is not None  # uncompressed small records are pending above
            out = self._compressor.compress(framed)
            if out:
                self._file.write(out)
            self.records += 1
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
        self.records += 1

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
            raise ValueError(f"flush of closed TFRecordWriter ({self.path})")
        self._drain()
        if self._compressor is not None:
            self._file.write(self._compressor.flush(zlib.Z_PARTIAL_FLUSH))
        self._file.flush()

    def close(self) -> None:
        """Finish the file and move it to its final name. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            self._drain()
            if self._compressor is not None:
                self._file.write(self._compressor.flush(zlib.Z_FINISH))
        except BaseException:
            self._out.abort()
            raise
        self._out.commit()

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
