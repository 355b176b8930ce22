"""The errors of sequential reading, worded: a truncated record or tail, a data CRC that does not match, and what
an `on_error` policy is told about the records it skipped (TFRecordError's `skipped_*` attributes, a note added
to the message). RecordReader and its buffer window (format/reader.py) raise or report them."""

from __future__ import annotations

from tfr_torch.errors import CorruptRecordError, TFRecordError, TruncatedRecordError
from tfr_torch.format.compression import NONE
from tfr_torch.format.framing import HEADER_SIZE, OVERHEAD, masked_crc32c
from tfr_torch.format.sniff import not_a_tfrecord


def _mark_skipped(err: TFRecordError, records: int, estimated: bool, span: tuple[int, int] | None,
                  file_span: tuple[int, int] | None) -> None:
    """Set what a skipped error tells the on_error callable (TFRecordError's `skipped_*` attributes)."""
    err.skipped_records, err.skipped_estimated = records, estimated
    err.skipped_range, err.skipped_file_range = span, file_span


def _records(count: int) -> str:
    return f"{count} record" if count == 1 else f"{count} records"


def _add_note(err: TFRecordError, note: str) -> None:
    """Append `note` to the error's message (and so to str(err), which the warning shows)."""
    err.message += note
    err.args = (err._render(),)


def _tail_error(tail: bytes, path: str, off: int, compression: str) -> TruncatedRecordError:
    """Bytes at the end, too few for a record header: in a tiny file, say what it looks like, if anything."""
    sentence = not_a_tfrecord(tail, None if compression == NONE else compression) if off == 0 else None
    if sentence:
        return TruncatedRecordError(sentence + f" ({len(tail)} bytes, shorter than a {HEADER_SIZE}-byte record header)",
                                    path, off)
    return TruncatedRecordError(f"found {len(tail)} trailing bytes: expected a {HEADER_SIZE}-byte record header or the "
                                "end of the file", path, off)


def _truncated(length: int, found: str, path: str, off: int) -> TruncatedRecordError:
    return TruncatedRecordError(f"truncated record: its header says {length} bytes of data, so {length + OVERHEAD} "
                                f"bytes from this offset, but {found}", path, off)


def _data_crc_error(data: bytes, stored: int, path: str, off: int) -> CorruptRecordError:
    return CorruptRecordError(f"corrupt record data: the CRC of its {len(data)} data bytes (at offset "
                              f"{off + HEADER_SIZE}) is {masked_crc32c(data):#010x}, expected {stored:#010x} (stored "
                              "after the data)", path, off)
