"""A JPEG's structure checked by a byte scan before it goes to a GPU decoder (ITU T.81 Annex B).

GPU decoders can return pixels for a JPEG cut short (nvImageCodec 0.9 decoded a JPEG cut to a third of its bytes
without an error), where the CPU contract raises DecodeError. So every JPEG of a GPU batch is walked here first:
its marker segments (each length checked against the bytes that remain), a frame header before the first scan, at
least one complete scan, and the end-of-image marker after the last one. The tables and headers are checked as
libjpeg checks them before it decodes (jdmarker.c, jdhuff.c, jdphuff.c, jdinput.c, jdsample.c): GPU decoders took a
Huffman table with a DC symbol over 15 or more codes than its lengths allow, which libjpeg refuses. It refuses too:
sampling factors it cannot upsample or that make an MCU of over 10 blocks, a progressive scan's bad coefficient
range or bit positions, a table a progressive scan uses but never defined (only sequential scans have standard
tables), malformed DRI and DAC segments, a side over 65500 pixels. No pixels are decoded; the entropy-coded data
is skipped by looking for the next marker (0xFF followed by anything but a stuffed 0x00, a restart marker or a fill
byte).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tfr_torch import _native

__all__ = ["jpeg_problem", "jpeg_problems"]

# a marker inside or after entropy-coded data: fill bytes, then a code that is not a stuffed zero or RSTn (B.1.1.5)
# (the first 0xFF of a run of fill bytes is followed by 0xFF, so the match is at the marker's own 0xFF; written
# without `\xff+`, which made the search 17 times slower)
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_ANY_MARKER = re.compile(rb"\xff[^\x00\xff]")
_FRAMES = frozenset((0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF))
_STANDALONE = frozenset((0x01, *range(0xD0, 0xD8)))  # TEM, RSTn: no length field (B.1.1.4)
# the segments libjpeg reads (jdmarker.c read_markers): the frames it decodes (baseline, extended, progressive,
# arithmetic), DHT, DAC, DQT, DRI, DNL, SOS, APPn, COM; any other marker is an error there ("unsupported" SOFn too)
_PROGRESSIVE = frozenset((0xC2, 0xCA))
_ARITHMETIC = frozenset((0xC9, 0xCA))
_MAX_SIDE = 65500  # JPEG_MAX_DIMENSION (jdinput.c initial_setup)
_KNOWN = frozenset((0xC0, 0xC1, 0xC2, 0xC9, 0xCA, 0xC4, 0xCC, 0xDB, 0xDD, 0xDC, 0xDA, 0xFE, *range(0xE0, 0xF0)))


def jpeg_problem(data: bytes) -> str | None:
    """None when `data` is a structurally complete JPEG; else what is wrong, with its byte offset, e.g. "no
    end-of-image marker: the data ends inside the scan that starts at byte 623"."""
    end = len(data)
    if data[:2] != b"\xff\xd8":
        return f"no start-of-image marker (it starts with {data[:2]!r})"
    pos, frame, scans = 2, False, 0
    tables = _Tables()
    while True:
        if pos >= end:
            return f"no end-of-image marker: the data ends after {scans} complete scan(s) at byte {end}"
        if data[pos] != 0xFF:  # libjpeg skips bytes up to the next marker (a warning, "extraneous data")
            found = _ANY_MARKER.search(data, pos)
            if found is None:
                return f"no end-of-image marker: after byte {pos}, where a marker was expected, none follows"
            pos = found.start()
        while pos + 1 < end and data[pos + 1] == 0xFF:  # fill bytes before a marker (B.1.1.2)
            pos += 1
        if pos + 1 >= end:
            return f"no end-of-image marker: the data ends inside a marker at byte {pos}"
        marker = data[pos + 1]
        if marker == 0x00:  # a stuffed zero where a marker is expected: libjpeg discards it too (next_marker)
            pos += 2
            continue
        if marker == 0xD9:
            if scans == 0:
                return f"end-of-image marker at byte {pos} before any scan"
            return None
        if marker in _STANDALONE:
            pos += 2
            continue
        if marker not in _KNOWN:
            return f"unexpected marker 0xff{marker:02x} at byte {pos}"
        if pos + 4 > end:
            return f"marker segment 0xff{marker:02x} at byte {pos} is cut off before its length"
        length = data[pos + 2] << 8 | data[pos + 3]
        if length < 2:
            return f"marker segment 0xff{marker:02x} at byte {pos} has length {length} (at least 2)"
        if pos + 2 + length > end:
            return (f"marker segment 0xff{marker:02x} at byte {pos} has length {length}, but only "
                    f"{end - pos - 2} bytes follow")
        if marker == 0xDA and not frame:
            return f"start of scan at byte {pos} before any frame header"
        body = data[pos + 4: pos + 2 + length]
        problem = _segment_problem(marker, body, tables)
        if problem is not None:
            return f"marker segment 0xff{marker:02x} at byte {pos}: {problem}"
        if marker in _FRAMES:
            if frame:
                return f"a second frame header at byte {pos}"
            frame = True
            tables.frame = marker
        if marker != 0xDA:
            pos += 2 + length
            continue
        scan = pos
        pos = next_marker(data, pos + 2 + length)
        if pos < 0:
            return f"no end-of-image marker: the data ends inside the scan that starts at byte {scan}"
        scans += 1


def jpeg_problems(items: Sequence[bytes]) -> list[str | None]:
    """jpeg_problem of each item. With the compiled core, the whole batch is checked at once with the GIL released
    (jpeg_sound_many: the same checks, which only say whether there is a problem), and only the items it finds
    unsound go through jpeg_problem, for its words: a GPU batch's host work no longer holds the GIL for each
    image's walk beside a training loop's own Python."""
    core = _native.core
    sound = getattr(core, "jpeg_sound_many", None) if core is not None else None
    flags = sound(items) if sound is not None else bytes(len(items))
    return [None if flag else jpeg_problem(data) for flag, data in zip(flags, items)]


def next_marker(data: bytes, start: int) -> int:
    """The offset of the 0xFF of the first marker at or after `start` (entropy-coded data skipped), or -1: by the
    compiled core when it is in use (memchr), else by _NEXT_MARKER."""
    core = _native.core
    if core is not None:
        found: int = core.jpeg_next_marker(data, start)
        return found
    match = _NEXT_MARKER.search(data, start)
    return -1 if match is None else match.start()


class _Tables:
    """What the segments so far defined: the frame's components and their quantization tables, the quantization
    tables, and each Huffman table's problem (None when sound; libjpeg checks a Huffman table when a scan uses it)."""

    def __init__(self) -> None:
        self.frame = 0
        self.components: dict[int, int] = {}
        self.sampling: dict[int, tuple[int, int]] = {}
        self.quantization: set[int] = set()
        self.huffman: dict[tuple[int, int], str | None] = {}


def _segment_problem(marker: int, body: bytes, tables: _Tables) -> str | None:
    """What libjpeg would refuse in a table or header segment's `body` (the bytes after its length), else None."""
    if marker == 0xC4:
        return _huffman_tables(body, tables)
    if marker == 0xDB:
        at = 0
        while at < len(body):
            wide, table = body[at] >> 4, body[at] & 15
            if table > 3:
                return f"quantization table id {table} (0-3)"
            tables.quantization.add(table)
            at += 1 + 64 * (2 if wide else 1)
        return None if at == len(body) else "its quantization tables do not fill its length"
    if marker in _FRAMES:
        if len(body) < 6 or len(body) != 6 + 3 * body[5]:
            return f"a frame header of {len(body)} bytes (6, then 3 per component)"
        height, width, count = body[1] << 8 | body[2], body[3] << 8 | body[4], body[5]
        if body[0] not in (8, 12):
            return f"a sample precision of {body[0]} bits (8 or 12)"
        if height == 0 or width == 0 or count == 0:
            return f"an image of {width}x{height} pixels with {count} components"
        if height > _MAX_SIDE or width > _MAX_SIDE:
            return f"an image of {width}x{height} pixels (libjpeg decodes at most {_MAX_SIDE} a side)"
        for k in range(count):
            ident, sampling, table = body[6 + 3 * k: 9 + 3 * k]
            if not (1 <= sampling >> 4 <= 4 and 1 <= sampling & 15 <= 4):
                return f"component {ident} has sampling factors {sampling >> 4}x{sampling & 15} (1-4 each)"
            tables.components[ident] = table
            tables.sampling[ident] = (sampling >> 4, sampling & 15)
        widest = max(h for h, _ in tables.sampling.values()), max(v for _, v in tables.sampling.values())
        for ident, (h, v) in tables.sampling.items():  # jdsample.c: "Fractional sampling not implemented yet"
            if widest[0] % h or widest[1] % v:
                return (f"component {ident}'s sampling factors {h}x{v} do not divide the largest, "
                        f"{widest[0]}x{widest[1]} (libjpeg refuses fractional sampling)")
        return None
    if marker == 0xDA:
        return _scan_problem(body, tables)
    if marker == 0xDD and len(body) != 2:  # jdmarker.c get_dri: a length of 4
        return f"a restart interval of {len(body)} bytes (2)"
    if marker == 0xCC:  # jdmarker.c get_dac: (table, value) pairs; DC tables 0-15 with L <= U, AC tables 16-31
        if len(body) % 2:
            return f"arithmetic conditioning of {len(body)} bytes (pairs)"
        for at in range(0, len(body), 2):
            table, value = body[at], body[at + 1]
            if table > 31 or (table < 16 and value & 15 > value >> 4):
                return f"arithmetic conditioning table {table} with value {value} (0-15: L <= U; 16-31)"
    return None


def _scan_problem(body: bytes, tables: _Tables) -> str | None:
    count = body[0] if body else 0
    if not 1 <= count <= 4 or len(body) != 4 + 2 * count:
        return f"a scan header of {len(body)} bytes for {count} components (1-4; 4, then 2 per component)"
    first, last, approximation = body[1 + 2 * count], body[2 + 2 * count], body[3 + 2 * count] >> 4
    low = body[3 + 2 * count] & 15
    progressive = tables.frame in _PROGRESSIVE
    if progressive and ((last != 0 if first == 0 else first > last or last > 63 or count != 1)
                        or (approximation != 0 and low != approximation - 1) or low > 13):
        return (f"a progressive scan of coefficients {first}-{last}, bits {approximation}-{low}, {count} "
                f"component(s) (libjpeg: DC scans 0-0, AC scans of one component within 1-63, refinements of one "
                f"bit, at most 13)")
    blocks = 0
    seen = set()
    for k in range(count):
        ident, huffman = body[1 + 2 * k], body[2 + 2 * k]
        if ident not in tables.components or ident in seen:
            return f"the scan's component {ident} is not a component of the frame, or is named twice"
        seen.add(ident)
        blocks += tables.sampling[ident][0] * tables.sampling[ident][1]
        if count > 1 and blocks > 10:  # jdinput.c per_scan_setup: D_MAX_BLOCKS_IN_MCU
            return f"an interleaved scan of {blocks} or more blocks per MCU (libjpeg decodes at most 10)"
        if tables.components[ident] not in tables.quantization:
            return f"component {ident}'s quantization table {tables.components[ident]} is not defined"
        used = []  # the Huffman tables this scan decodes with (sequential: both, whatever its coefficients)
        if first == 0 and approximation == 0 or not progressive:
            used.append((0, huffman >> 4))
        if last > 0 or not progressive:
            used.append((1, huffman & 15))
        for kind, table in used if tables.frame not in _ARITHMETIC else ():  # arithmetic coding has no Huffman
            if table > 3:
                return f"the scan's component {ident} uses Huffman table {table} (0-3)"
            if (kind, table) not in tables.huffman and (table > 1 or progressive):
                # libjpeg-turbo's standard tables 0 and 1 stand in for missing ones in sequential scans only
                return f"the scan uses {'DC' if kind == 0 else 'AC'} Huffman table {table}, which is not defined"
            problem = tables.huffman.get((kind, table))
            if problem is not None:
                return f"the scan uses {'DC' if kind == 0 else 'AC'} Huffman table {table}, which {problem}"
    return None


def _huffman_tables(body: bytes, tables: _Tables) -> str | None:
    found = _HUFFMAN_SEEN.get(body)
    if found is None:
        found = _read_huffman_tables(body)
        if len(_HUFFMAN_SEEN) >= _SEEN_MAX:  # most files of a dataset share their encoder's tables
            _HUFFMAN_SEEN.clear()
        _HUFFMAN_SEEN[body] = found
    problem, defined = found
    tables.huffman.update(defined)
    return problem


_SEEN_MAX = 512
_HUFFMAN_SEEN: dict[bytes, tuple[str | None, tuple[tuple[tuple[int, int], str | None], ...]]] = {}


def _read_huffman_tables(body: bytes) -> tuple[str | None, tuple[tuple[tuple[int, int], str | None], ...]]:
    """(the segment's problem or None, ((class, id), that table's problem or None) for each table before it)."""
    defined: list[tuple[tuple[int, int], str | None]] = []
    at = 0
    while at < len(body):
        if at + 17 > len(body):
            return "a Huffman table is cut off inside its code counts", tuple(defined)
        kind, table = body[at] >> 4, body[at] & 15
        if kind > 1 or table > 3:
            return f"Huffman table class {kind} id {table} (class 0 or 1, id 0-3)", tuple(defined)
        counts = body[at + 1: at + 17]
        total = sum(counts)
        if total > 256 or at + 17 + total > len(body):
            return f"a Huffman table of {total} codes where {min(256, len(body) - at - 17)} fit", tuple(defined)
        problem = None
        code = 0
        for length, count in enumerate(counts, 1):  # each length's codes fit in that many bits, none all ones (C.2)
            code += count
            if code >= 1 << length:
                problem = f"has more codes of {length} bits than fit"
                break
            code <<= 1
        if problem is None and kind == 0 and max(body[at + 17: at + 17 + total], default=0) > 15:
            problem = "has a symbol over 15"
        defined.append(((kind, table), problem))
        at += 17 + total
    return None, tuple(defined)
