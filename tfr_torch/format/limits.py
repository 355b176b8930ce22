"""Documented limits on what untrusted input can make tfr_torch allocate (decompression bombs and lying lengths).

A plain TFRecord file bounds every record by its own size: a length field beyond the end of the file is a
TruncatedRecordError before anything is allocated. A GZIP or ZLIB file (or a stream of unknown size) cannot: a few
megabytes of deflate inflate to gigabytes, and the record's header is the only bound. So a record read from a
compressed file or a stream of unknown size may hold at most `MAX_RECORD_BYTES` bytes of data; a header that
declares more raises DecodeError naming the file, the offset and the limit, before the record is buffered.

The other limits live with the decoder they guard:
- `tfr_torch.format.tensor.MAX_TENSOR_BYTES` (256 MiB): what a TensorProto may expand to (`parse_tensor(max_bytes=)`);
- `tfr_torch.decode.ragged.MAX_EMPTY_ROWS` (65,536): the empty rows a ValueRowIds partition may imply per unit.

Each is a module attribute read when it is checked, so a program that trusts its data can raise it:

>>> import tfr_torch.format.limits as limits
>>> limits.MAX_RECORD_BYTES = 4 << 30  # doctest: +SKIP
"""

from __future__ import annotations

from tfr_torch.errors import DecodeError

__all__ = ["MAX_RECORD_BYTES", "check_record_length"]

# The data of one record in a compressed file (or a stream of unknown size) is at most this many bytes: 1 GiB.
MAX_RECORD_BYTES = 1 << 30


def check_record_length(length: int, path: str | None, offset: int, compression: str) -> None:
    """Raise DecodeError when a record header read from a stream that the file size cannot bound (a GZIP/ZLIB
    file, or a stream of unknown size: `compression` "gzip", "zlib" or "none") declares more than
    MAX_RECORD_BYTES bytes of data. Called before any byte of the record is buffered."""
    limit = MAX_RECORD_BYTES
    if length <= limit:
        return
    source = f"a {compression.upper()} file" if compression in ("gzip", "zlib") else "a stream of unknown size"
    raise DecodeError(f"the record header declares {length} bytes of data, more than the {limit} bytes a record in "
                      f"{source} may hold (tfr_torch.format.limits.MAX_RECORD_BYTES; a decompression bomb or a corrupt "
                      "length field: raise the limit if the data is trusted)", path, offset)
