"""What the `tfr-torch` commands share: `UsageError`, the one-line problem wording, FILE expansion and the
progress meter."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from tfr_torch.errors import TFRecordError
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.paths import expand_paths, file_size
from tfr_torch.format.reader import RecordReader
from tfr_torch.tools.progress import Progress, is_terminal


class UsageError(Exception):
    """A bad argument found after parsing: one line on stderr, exit status 2."""


# ---------------------------------------------------------------------------------------------- helpers


def _problem(err: BaseException) -> str:
    """One `path:offset: what is wrong` line (`path: what is wrong` when there is no offset)."""
    if isinstance(err, TFRecordError):
        # the library's hint names its argument; here it is an option
        message = re.sub(r"pass compression='(\w+)' \(or 'auto'\)", r"pass --compression \1 (or auto)", err.message)
        if err.path is None:
            return message
        return f"{err.path}:{err.offset if err.offset is not None else 0}: {message}"
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.filename}: {err.strerror or err}"
    return str(err)


def _files(args: argparse.Namespace) -> list[str]:
    """The FILE arguments, globs expanded (an existing file whose name holds glob characters is that file:
    expand_paths). A pattern matching nothing is a data problem (exit 1); a path the library refuses (e.g. one of
    its own side files) is a usage error."""
    try:
        return [path for item in args.files for path in expand_paths(item)]
    except FileNotFoundError:
        raise
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _meter(args: argparse.Namespace, paths: Sequence[str], label: str, unit: str = "records") -> Progress:
    """A progress bar over the bytes of `paths` (only drawn when stderr is a terminal and -q is not given)."""
    shown = not getattr(args, "quiet", False) and is_terminal(sys.stderr)
    total = None
    if shown:
        try:
            total = sum(file_size(p) for p in paths)
        except OSError:  # a missing file is reported when it is read
            total = None
    return Progress(label=label, enabled=shown, total_bytes=total, unit=unit)


def _count(reader: RecordReader, meter: Progress) -> int:
    """How many records `reader` gives, counted on `meter`; framed and checked, never copied out."""
    if reader.compression != "none":
        meter.unknown_total()
    n = 0
    for lengths, _ in reader.lengths():
        meter.update(len(lengths), int(lengths.sum()) + OVERHEAD * len(lengths))
        n += len(lengths)
    return n

