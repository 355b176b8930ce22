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

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Union, overload

__all__ = ["ExampleName", "FileLocations", "RecordLocation", "location_of"]


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


class FileLocations(Sequence[RecordLocation]):
    """The locations (example names) of records of one file, at `offsets`, each RecordLocation made only when asked
    for (an error message, `location_key`): a batch that decodes asks for none."""

    __slots__ = ("path", "offsets")

    def __init__(self, path: str, offsets: Iterable[int]) -> None:
        self.path = path
        self.offsets: list[int] = offsets.tolist() if hasattr(offsets, "tolist") else list(offsets)

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, i: int) -> RecordLocation: ...

    @overload
    def __getitem__(self, i: slice) -> list[RecordLocation]: ...

    def __getitem__(self, i: int | slice) -> RecordLocation | list[RecordLocation]:
        if isinstance(i, slice):
            return [RecordLocation(self.path, offset) for offset in self.offsets[i]]
        return RecordLocation(self.path, self.offsets[i])

    def __iter__(self) -> Iterator[RecordLocation]:
        path = self.path
        return (RecordLocation(path, offset) for offset in self.offsets)
