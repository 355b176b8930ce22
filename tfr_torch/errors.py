"""The exceptions tfr_torch raises.

Every error about data says where it is (`.path`, `.offset` in bytes) and what was expected and found.
Errors about arguments are plain `ValueError`/`TypeError`.
"""

from __future__ import annotations

import json
import numbers
import re
import sys

from types import FrameType
from typing import Any


__all__ = [
    "TFRecordError",
    "CorruptRecordError",
    "TruncatedRecordError",
    "DecodeError",
    "IndexMismatchError",
    "SkippedRecordWarning",
]


class TFRecordError(Exception):
    """Base class of every data error raised by tfr_torch.

    `path` is the file (or None for bytes given directly) and `offset` the byte offset of the record
    concerned (for compressed files: the offset in the decompressed stream), or None when unknown.

    An error that a reader skipped (`on_error="skip"`, or handed to an `on_error` callable) also says what was
    skipped; these are None (False) on errors that are raised:
    - `skipped_records`: how many records were skipped, the count the reader adds to `.skipped`: 1 for a bad
      record (or a record cut off at the end); for the rest of a GZIP member or ZLIB stream given up, an estimate
      from the bytes lost and the mean record size read so far (at least 1);
    - `skipped_estimated`: True when `skipped_records` is an estimate (a member given up; a corrupt region of an
      uncompressed file, which counts as 1);
    - `skipped_range`: the offsets `(start, end)` of the bytes skipped, in the same terms as `offset` (for a member
      given up: the decompressed bytes inflated but not read as records; the rest was never inflated);
    - `skipped_file_range`: the file offsets `(start, end)` of those bytes in an uncompressed file; for a member
      given up, the compressed bytes dropped without being inflated (`end`: where reading resumes, or the end of
      the file); None for a bad record in a compressed file.
    """

    skipped_records: int | None = None
    skipped_estimated: bool = False
    skipped_range: tuple[int, int] | None = None
    skipped_file_range: tuple[int, int] | None = None
    # the attributes an error keeps on its way out of a DataLoader worker
    _carried: tuple[str, ...] = ("path", "offset", "skipped_records", "skipped_estimated", "skipped_range",
                                 "skipped_file_range")

    def __init__(self, message: str, path: str | None = None, offset: int | None = None) -> None:
        carried: dict[str, Any] = {}
        located: tuple[str | None, int | None] = (path, offset)
        if path is None and offset is None and message.startswith("Caught ") and "\nOriginal Traceback" in message:
            # torch's DataLoader re-raises a worker's error as `type(its traceback's text)`: its attributes are read
            # back from the line the worker added to that text (taken out of it again; the message stays the text),
            # or, without that line, the path and offset from the `path:offset: ` the error was rendered with
            message, carried = _carried_in(type(self), message)
            located = _located_in(type(self), message)
        self.message = message
        self.path = path
        self.offset = offset
        super().__init__(self._render())
        self.path, self.offset = located
        for name, value in carried.items():
            setattr(self, name, tuple(value) if isinstance(value, list) else value)

    def __str__(self) -> str:
        text = super().__str__()
        if not _formatted_for_a_reraise():
            return text
        # formatted by torch's ExceptionWrapper (a DataLoader worker, its pin-memory thread), which keeps only the
        # class and the traceback's text: one more line carries the attributes the text does not name
        carried = {name: value for name in self._carried
                   if (value := _plain(getattr(self, name, None))) is not None and value is not False}
        return f"{text}\n{_CARRY_HEAD}{json.dumps(carried)})" if carried else text

    def _render(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.offset}: " if self.offset is not None else f"{self.path}: "
        elif self.offset is not None:
            where = f"offset {self.offset}: "
        return where + self.message

    def __reduce__(self) -> tuple[Any, ...]:  # keep path/offset when pickled across DataLoader workers
        return (_rebuild, (type(self), self.message, self.path, self.offset, self.__dict__, self.args))


def _rebuild(cls: type[TFRecordError], message: str, path: str | None, offset: int | None,
             state: dict[str, Any], args: tuple[Any, ...] | None = None) -> TFRecordError:
    err = cls.__new__(cls)
    TFRecordError.__init__(err, message, path, offset)
    err.__dict__.update(state)
    if args is not None:
        err.args = args  # its text as it was (a worker's error re-raised by a DataLoader is not rendered again)
    return err


_CARRY_HEAD = "(tfr_torch error attributes: "


def _plain(value: Any) -> Any:
    """`value` as JSON gives it back (a str, bool, int or float; a tuple of ints as a list), or None for others
    (numpy integers count as ints)."""
    if isinstance(value, (str, bool, float)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, tuple) and all(isinstance(v, numbers.Integral) for v in value):
        return [int(v) for v in value]
    return None


def _formatted_for_a_reraise(depth: int = 16) -> bool:
    """Whether str() is being taken by torch's ExceptionWrapper, which sends an exception to another process or
    thread as its class and the text of its traceback."""
    try:
        frame: FrameType | None = sys._getframe(2)
    except ValueError:  # str() called with no Python frame above (the interpreter printing an uncaught error)
        return False
    while frame is not None and depth > 0:
        if frame.f_code.co_name == "__init__" and frame.f_globals.get("__name__") == "torch._utils":
            return True
        frame, depth = frame.f_back, depth - 1
    return False


def _carried_in(cls: type, text: str) -> tuple[str, dict[str, Any]]:
    """The worker's traceback text without the attribute line its error of class `cls` ended with, and the
    attributes that line holds ({} when there is none or it does not read back)."""
    head = f"\n{cls.__module__}.{cls.__qualname__}: "
    at = text.rfind(head)
    mark = text.rfind("\n" + _CARRY_HEAD)
    if at < 0 or mark < at:
        return text, {}
    end = text.find("\n", mark + 1)
    end = len(text) if end < 0 else end
    line = text[mark + 1 + len(_CARRY_HEAD):end]
    try:
        carried = json.loads(line[:-1]) if line.endswith(")") else None
    except ValueError:
        carried = None
    if not isinstance(carried, dict):
        return text, {}
    names = set(getattr(cls, "_carried", ()))
    return text[:mark] + text[end:], {k: v for k, v in carried.items() if k in names}


def _located_in(cls: type, text: str) -> tuple[str | None, int | None]:
    """(path, offset) of the `path:offset: ` a worker's error of class `cls` began with, from the traceback text
    torch's DataLoader re-raises it with; (None, None) when its line is not there or names no offset."""
    head = f"\n{cls.__module__}.{cls.__qualname__}: "
    at = text.rfind(head)
    if at < 0:
        return None, None
    line = text[at + len(head):].split("\n", 1)[0]
    found = re.match(r"(.+?):(\d+): ", line)
    return (found.group(1), int(found.group(2))) if found else (None, None)


class CorruptRecordError(TFRecordError):
    """A record whose header or data does not match its CRC, or a compressed stream that cannot be inflated."""


class TruncatedRecordError(TFRecordError):
    """A file that ends inside a record (or with trailing bytes too short to be a record header)."""


class DecodeError(TFRecordError, ValueError):
    """Bytes that are not a valid tf.train.Example, SequenceExample or TensorProto, or a value that does not
    fit what was asked for.

    Besides `path` and `offset` (the record's file and byte offset, when known), an error about a feature says
    which: `key` (the feature key), `index` (the example's position in the batch), `step` (the step of a
    SequenceExample feature list) and `position` (the byte offset of the problem inside the serialized record or
    Feature). Each is None when it does not apply or is not known.
    """

    key: str | None = None
    index: int | None = None
    step: int | None = None
    position: int | None = None
    _carried = TFRecordError._carried + ("key", "index", "step", "position")

    def __init__(self, message: str, path: str | None = None, offset: int | None = None, *, key: str | None = None,
                 index: int | None = None, step: int | None = None, position: int | None = None) -> None:
        self.key, self.index, self.step, self.position = key, index, step, position
        super().__init__(message, path, offset)


class IndexMismatchError(TFRecordError):
    """An index file that does not describe its TFRecord file (stale, truncated, or made for another file).

    `path` is the TFRecord file and `index_path` the index.
    """

    _carried = TFRecordError._carried + ("index_path",)

    def __init__(self, message: str, path: str | None = None, offset: int | None = None,
                 index_path: str | None = None) -> None:
        self.index_path = index_path
        super().__init__(message, path, offset)

    def _render(self) -> str:
        text = super()._render()
        return f"{text} (index file: {self.index_path})" if self.index_path is not None else text


class SkippedRecordWarning(UserWarning):
    """Warned when a bad record is skipped under `on_error="skip"`; the message is the error's."""
