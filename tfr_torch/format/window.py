"""The sequential reader's buffer window (`_Window`): refilled from the stream, and what the record loop does when
a compressed member fails or a header is corrupt (give the member up, resynchronise). Only RecordReader uses it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfr_torch.errors import TFRecordError
from tfr_torch.format import limits
from tfr_torch.format.framing import HEADER_SIZE, OVERHEAD, masked_crc32c, parse_header, unpack_crc
from tfr_torch.format.inflate import Inflater
from tfr_torch.format.read_errors import _add_note, _mark_skipped, _records
from tfr_torch.format.streams import _BUFFER

if TYPE_CHECKING:
    from tfr_torch.format.reader import RecordReader


class _Window:
    """The reader's buffer: `buf[lo:hi]` holds the unread bytes, `base` is the stream offset of `buf[0]`; `eof`: the
    stream has ended; `broken`: the (compressed) stream failed, and what is left in the buffer is its cut-off tail.
    Its methods run where the hot loop needs more data or meets a corruption, never once per record."""

    def __init__(self, reader: RecordReader, size: int) -> None:
        self.reader = reader
        self.readinto = reader._stream.readinto
        self.compressed = isinstance(reader._stream, Inflater)
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.lo = self.hi = 0
        self.base = reader.start
        self.eof = self.broken = False
        self.failure: TFRecordError | None = None  # the compressed stream's error, reported by give_up_member
        self.suspect: tuple[int, int] | None = None  # (offset, records read then) of a bad record skipped since
        #                                              the last member given up (see give_up_member)

    def fill(self, want: int) -> None:
        """Move buf[lo:hi] to the front and read until `want` bytes are buffered or the stream ends."""
        lo, hi = self.lo, self.hi
        if lo:
            self.view[: hi - lo] = self.view[lo:hi]
            self.base += lo
            hi -= lo
            self.lo = 0
        buf = self.buf
        while hi < want and not self.eof:
            if hi == len(buf):  # full: grow step by step as data arrives, so a lying length allocates nothing
                self.view.release()
                buf.extend(bytes(min(want, max(2 * len(buf), len(buf) + _BUFFER)) - len(buf)))
                self.view = memoryview(buf)
            try:
                n = self.readinto(self.view[hi:])
            except TFRecordError as err:  # a corrupt or truncated compressed stream: nothing more to read
                self.eof = self.broken = True
                self.hi = hi
                if self.reader._policy is None:
                    raise
                self.failure = err  # reported with what is lost when the member is given up
                n = 0
            if not n:
                self.eof = True
            hi += n
        self.hi = hi

    def give_up_member(self, err: TFRecordError | None) -> None:
        """Report `err` (None: the stream's own error, from `fill`) at `lo`, give up the rest of the compressed
        member, and go on at the next gzip member (or the end).

        Reached when the deflate stream fails (a zlib error, its check value, a cut file) or when a record header
        in it is corrupt or declares more than the limit: nothing later in that member can be trusted (a damaged
        back-reference can copy earlier records whose CRCs pass), and after a bad header where the next record
        starts is unknown. The records given up cannot be counted: the error says how many there were about
        (from the bytes lost and the mean record size so far), which bytes were lost, and counts that many in
        `skipped`. A bad record skipped earlier in the same member (`suspect`) is named: the records read since
        passed their own CRCs, but their stream failed afterwards (they were yielded already)."""
        reader = self.reader
        stream = reader._stream
        assert isinstance(stream, Inflater)  # only compressed streams give members up
        if err is None:
            err, self.failure = self.failure, None
            assert err is not None  # fill set it with `broken`
        elif reader._policy is None:
            raise err
        off = self.base + self.lo  # where the damage was found: the record that could not be read
        inflated = self.base + self.hi  # the end of what was inflated into the buffer
        failed_at = err.offset if self.broken and err.offset is not None else off
        member = stream.member_of(max(off, failed_at))[0]  # the start of the member given up
        after = None if self.broken else stream.member_after(off)
        if after is not None and after[0] <= inflated:  # the next member is in the buffer already: go on there
            unread, (first, last), resumed = after[0] - off, (after[1], after[1]), True
            ratio = 0.0
            self.lo = after[0] - self.base
        else:
            position, (made_from, used_from) = stream.position, stream.member_of(off)
            stream.abandon_member()
            (first, last), resumed = stream.abandoned, stream.resumed
            unread = inflated - off + stream.unread  # decompressed bytes inflated and never read as records
            made, used = position + stream.unread - made_from, first - used_from  # by this member so far
            ratio = made / used if made > 0 and used > 0 else 0.0  # to guess what its bytes not inflated held
            self.lo = self.hi = 0
            self.base = stream.position
            self.eof = self.broken = False
        counted = reader.records + reader.skipped
        mean = (off - reader.start) / counted if counted and off > reader.start else 0.0
        estimate = round((unread + (last - first) * ratio) / mean) if mean else 0
        _mark_skipped(err, max(estimate, 1), True, (off, off + unread), (first, last))
        kind = "GZIP member" if reader.compression == "gzip" else "ZLIB stream"
        lost = [f"the {unread} decompressed bytes from offset {off} (inflated, not read as records)"] if unread else []
        if last > first:
            lost.append(f"compressed bytes [{first}, {last}) of the file (not inflated)")
        note = f"; gave up the rest of this {kind}" + (": " + " and ".join(lost) if lost else "")
        if not lost:
            note += " (nothing was left to read in it: counted as 1 record lost)"
        elif estimate:
            note += (f"; about {_records(estimate)} lost (an estimate from those bytes and the mean record size read "
                     "so far)")
        elif mean:
            note += "; those bytes hold less than a record of the mean size read so far (counted as 1 record lost)"
        else:
            note += "; how many records were lost is unknown (none was read before: counted as 1)"
        note += (f"; reading goes on at the next GZIP member (compressed byte {last})" if resumed
                 else "; nothing after it is read")
        if self.suspect is not None and self.suspect[0] >= member:
            bad, records = self.suspect
            since = _records(reader.records - records)
            note += (f"; the bad record skipped at offset {bad} was in this {kind} too: the {since} read after it "
                     "passed their own CRCs and were yielded, but came from this damaged stream")
        _add_note(err, note)
        self.suspect = None
        reader._report(err)

    def resync(self, core: Any) -> None:
        """After a corrupt header at `lo`, find the next offset where a header and its data both pass their CRCs.
        The compiled kernel finds candidate headers at memory speed; the reference tries every byte."""
        total = self.reader._total
        self.lo += 1
        while True:
            if self.hi - self.lo < HEADER_SIZE:
                self.fill(HEADER_SIZE)
                if self.hi - self.lo < HEADER_SIZE:
                    self.lo = self.hi  # what is left is part of the corrupt region
                    return
            buf, lo, hi = self.buf, self.lo, self.hi
            if core is not None:
                found = core.find_header(buf, lo, hi)
                if found < 0:  # none here: keep the last bytes, a header may start in them
                    self.lo = hi - HEADER_SIZE + 1
                    self.fill(HEADER_SIZE)
                    continue
                self.lo = lo = found
            length = parse_header(buf, lo)
            if length is not None:
                need = length + OVERHEAD
                bound = self.base + lo + need <= total if total is not None else length <= limits.MAX_RECORD_BYTES
                if hi - lo < need and bound:
                    self.fill(need)
                    lo, hi = self.lo, self.hi
                if hi - lo >= need:
                    data_end = lo + HEADER_SIZE + length
                    if masked_crc32c(self.view[lo + HEADER_SIZE : data_end]) == unpack_crc(buf, data_end)[0]:
                        return
            self.lo = lo + 1
