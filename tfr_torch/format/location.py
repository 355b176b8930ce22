"""Where a record is: the file and the byte offset of its header.

The datasets pass a `RecordLocation` per record to the decoders as the record's name (TensorFlow's
`example_names`), so a decoding error carries `.path` and `.offset` and starts with "path:offset: ". A plain
string name is a name and only that: it is shown in messages, never parsed for a path.

>>> str(RecordLocation("train.tfrecord", 1234))
'train.tfrecord:1234'
>>> location_of("a:12"), location_of(RecordLocation("a", 12))
((None, None), ('a', 12))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

__all__ = ["ExampleName", "RecordLocation", "location_of"]


@dataclass(frozen=True)
class RecordLocation:
    """A record's file (`path`) and the byte offset of its header (`offset`; for compressed files, in the
    decompressed stream). Its `str` is "path:offset", as error messages show it. Not a tuple, so that nothing
    mistakes it for a sequence of names."""

    path: str
    offset: int

    def __str__(self) -> str:
        return f"{self.path}:{self.offset}"


ExampleName = Union[str, RecordLocation]  # what `example_names` may hold


def location_of(name: object) -> tuple[str | None, int | None]:
    """(path, offset) when `name` is a RecordLocation, else (None, None)."""
    if isinstance(name, RecordLocation):
        return name.path, name.offset
    return None, None
