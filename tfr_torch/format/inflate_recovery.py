"""Recovering from damage in a GZIP or ZLIB stream (format/inflate.py's `Inflater`): the bytes a zlib call that
failed would have made before the damage (so the records before it are still read), and where the next gzip member
begins after it (where reading resumes under `on_error`).
"""

from __future__ import annotations

import zlib
from types import ModuleType

from tfr_torch.format.compression import _WBITS, GZIP

_Errors = tuple[type[Exception], ...]


def _inflate_until_error(z: zlib._Decompress, data: bytes, limit: int, errors: _Errors) -> tuple[bytes, int]:
    """After `z.decompress(data, limit)` failed on a copy of `z`: the output it would have made before the damage
    (zlib returns nothing from a call that fails, so without this the records inflated before the damage in the
    same call, up to a piece, would be lost with it) and how many bytes of `data` that used. Only on errors:
    steps of 4096 input bytes, then 64, then 1 from the last step that succeeded, each on a copy of the state.
    `errors`: what the inflating library raises (format/inflate.py's `_INFLATE_ERRORS`)."""
    parts: list[bytes] = []
    made = used = 0
    step = 4096
    while used < len(data) and made < limit:
        trial = z.copy()
        chunk = data[used : used + step]
        try:
            got = trial.decompress(chunk, limit - made)
        except errors:
            if step == 1:
                break
            step = 64 if step > 64 else 1
            continue
        z = trial
        parts.append(got)
        made += len(got)
        used += len(chunk) - len(trial.unconsumed_tail)
        if trial.eof:
            break
    return b"".join(parts), used


_GZIP_MAGIC = b"\x1f\x8b\x08"  # ID1 ID2 and CM=8 (deflate), RFC 1952 section 2.3
_PROBE = 1 << 16  # compressed bytes a candidate member must inflate without error to be accepted


def _next_member(data: bytes, final: bool, lib: ModuleType, errors: _Errors) -> int:
    """The offset in `data` of the first gzip member header that inflates without error (a false magic inside
    deflate data fails within a few bytes), -1 when there is none, -2 when a candidate needs more bytes to tell
    (`final`: there are no more bytes; a candidate that has not failed by the end is taken). `lib`, `errors`: the
    inflating library and what it raises (format/inflate.py's `_inflate`, `_INFLATE_ERRORS`)."""
    at = data.find(_GZIP_MAGIC)
    while at >= 0:
        window = data[at : at + _PROBE]
        if len(window) < 10 and not final:  # not even a whole fixed header yet
            return -2
        if not window[3:4] or not window[3] & 0xE0:  # FLG's reserved bits must be zero
            probe = lib.decompressobj(_WBITS[GZIP])
            try:
                probe.decompress(window)
            except errors:
                pass
            else:
                if probe.eof or len(window) == _PROBE or final:
                    return at
                return -2
        at = data.find(_GZIP_MAGIC, at + 1)
    return -1
