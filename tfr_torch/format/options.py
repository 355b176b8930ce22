"""The string options of tfr_torch's API, written once: `Literal` types for the spellings a signature accepts, and
the checks that turn a bad value into a ValueError naming the argument, the value and what is accepted, raised
where the option is given (a dataset's constructor), not later inside a DataLoader worker.

Users keep passing plain strings ("gzip", "skip", ...); these types only say which ones, to readers and to mypy.

>>> check_on_error("skip"), check_compression("GZIP"), check_compression("auto", auto=True)
('skip', 'GZIP', 'auto')
>>> check_positive_int(0, "interleave", "files read at once")
Traceback (most recent call last):
...
ValueError: interleave must be a positive int (files read at once), got 0
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Literal, Optional, Union, overload

from tfr_torch.errors import TFRecordError
from tfr_torch.format.compression import normalize_compression

__all__ = ["Compression", "CompressionOrAuto", "CompressionName", "OnErrorPolicy", "OnError", "FeatureKind",
           "RecordKind", "check_compression", "compression_name", "check_on_error", "check_on_error_policy",
           "check_positive_int"]

# What normalize_compression returns: the three names every reader and writer works with.
CompressionName = Literal["none", "gzip", "zlib"]
# What `compression=` accepts when writing: None (or TensorFlow's "") for none, and TensorFlow's upper-case
# spellings (any case works; these are the documented ones).
Compression = Optional[Literal["none", "gzip", "zlib", "", "NONE", "GZIP", "ZLIB"]]
# What `compression=` accepts when reading: the same, or "auto" (the file name, else the first bytes, decides).
CompressionOrAuto = Optional[Literal["auto", "none", "gzip", "zlib", "", "NONE", "GZIP", "ZLIB"]]

# What a reader does with a bad record: raise it, skip it (with a SkippedRecordWarning), or hand it to a callable.
OnErrorPolicy = Literal["raise", "skip"]
OnError = Union[OnErrorPolicy, Callable[[TFRecordError], None]]

# A tf.train.Feature's kind: which list it holds (bytes_list, float_list, int64_list).
FeatureKind = Literal["bytes", "float", "int64"]
# What a record is, as `infer_features` / `tfr-torch inspect` classify it.
RecordKind = Literal["example", "sequence_example", "tensor", "raw"]


@overload
def check_compression(compression: Any) -> Compression: ...
@overload
def check_compression(compression: Any, *, auto: Literal[True]) -> CompressionOrAuto: ...


def check_compression(compression: Any, *, auto: bool = False) -> CompressionOrAuto:
    """`compression` itself when it is an accepted spelling (`Compression`; with `auto`, `CompressionOrAuto`);
    else ValueError naming the value and listing the accepted ones (format.compression's one table of names).
    Entry points call it first, so a bad value fails at the call, before any file is opened."""
    normalize_compression(compression, allow_auto=auto)
    return compression  # type: ignore[no-any-return]  # checked just above


@overload
def compression_name(compression: Any) -> CompressionName: ...
@overload
def compression_name(compression: Any, *, auto: Literal[True]) -> CompressionName | Literal["auto"]: ...


def compression_name(compression: Any, *, auto: bool = False) -> CompressionName | Literal["auto"]:
    """The name a reader or writer works with ("none", "gzip", "zlib"; with `auto`, also "auto") for any accepted
    spelling; else the ValueError of `check_compression`."""
    return normalize_compression(compression, allow_auto=auto)  # type: ignore[return-value]  # one of those names


def check_on_error(on_error: Any) -> OnError:
    """`on_error` itself when it is "raise", "skip" or a callable; else ValueError naming the value."""
    if on_error in ("raise", "skip") or callable(on_error):
        return on_error  # type: ignore[no-any-return]
    raise ValueError(f'on_error must be "raise", "skip" or a callable taking the error, got {on_error!r}')


def check_on_error_policy(on_error: Any) -> OnErrorPolicy:
    """`on_error` itself when it is "raise" or "skip" (where no callable can take the errors: the converters); else
    ValueError naming the value."""
    if on_error in ("raise", "skip"):
        return on_error  # type: ignore[no-any-return]
    raise ValueError(f'on_error must be "raise" or "skip", got {on_error!r}')


def check_positive_int(value: Any, argument: str, what: str) -> int:
    """`value` when it is an int >= 1 (not a bool); else ValueError naming `argument` (`what` it counts) and the
    value."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)  # ints, numpy ints; not 2.5 or "2"
    except TypeError:
        number = None
    if number is None or number < 1:
        raise ValueError(f"{argument} must be a positive int ({what}), got {value!r}")
    return number
