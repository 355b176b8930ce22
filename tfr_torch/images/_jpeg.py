"""A JPEG's structure checked by a byte scan before it goes to a GPU decoder (ITU T.81 Annex B).

GPU decoders can return pixels for a JPEG cut short (nvImageCodec 0.9 decoded a JPEG cut to a third of its bytes
without an error), where the CPU contract raises DecodeError. So every JPEG of a GPU batch is walked here first:
its marker segments (each length checked against the bytes that remain), a frame header before the first scan, at
least one complete scan, and the end-of-image marker after the last one. No pixels are decoded; the entropy-coded
data is skipped by looking for the next marker (0xFF followed by anything but a stuffed 0x00, a restart marker or
a fill byte).
"""

from __future__ import annotations

import re

__all__ = ["jpeg_problem"]

# a marker inside or after entropy-coded data: fill bytes, then a code that is not a stuffed zero or RSTn (B.1.1.5)
_NEXT_MARKER = re.compile(rb"\xff+[^\x00\xd0-\xd7\xff]")
_FRAMES = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_STANDALONE = frozenset((0x01, *range(0xD0, 0xD8)))  # TEM, RSTn: no length field (B.1.1.4)


def jpeg_problem(data: bytes) -> str | None:
    """None when `data` is a structurally complete JPEG; else what is wrong, with its byte offset, e.g. "no
    end-of-image marker: the data ends inside the scan that starts at byte 623"."""
    end = len(data)
    if data[:2] != b"\xff\xd8":
        return f"no start-of-image marker (it starts with {data[:2]!r})"
    pos, frame, scans = 2, False, 0
    while True:
        if pos >= end:
            return f"no end-of-image marker: the data ends after {scans} complete scan(s) at byte {end}"
        if data[pos] != 0xFF:
            return f"expected a marker at byte {pos}, found 0x{data[pos]:02x}"
        while pos + 1 < end and data[pos + 1] == 0xFF:  # fill bytes before a marker (B.1.1.2)
            pos += 1
        if pos + 1 >= end:
            return f"no end-of-image marker: the data ends inside a marker at byte {pos}"
        marker = data[pos + 1]
        if marker == 0xD9:
            if scans == 0:
                return f"end-of-image marker at byte {pos} before any scan"
            return None
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker == 0xD8 or marker == 0x00:
            return f"unexpected marker 0xff{marker:02x} at byte {pos}"
        if pos + 4 > end:
            return f"marker segment 0xff{marker:02x} at byte {pos} is cut off before its length"
        length = data[pos + 2] << 8 | data[pos + 3]
        if length < 2:
            return f"marker segment 0xff{marker:02x} at byte {pos} has length {length} (at least 2)"
        if pos + 2 + length > end:
            return (f"marker segment 0xff{marker:02x} at byte {pos} has length {length}, but only "
                    f"{end - pos - 2} bytes follow")
        if marker in _FRAMES:
            frame = True
        if marker != 0xDA:
            pos += 2 + length
            continue
        if not frame:
            return f"start of scan at byte {pos} before any frame header"
        scan = pos
        found = _NEXT_MARKER.search(data, pos + 2 + length)
        if found is None:
            return f"no end-of-image marker: the data ends inside the scan that starts at byte {scan}"
        scans += 1
        pos = found.start() + len(found.group()) - 2  # the last fill byte: the marker's own 0xFF
