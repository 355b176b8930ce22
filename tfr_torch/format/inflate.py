"""Reading GZIP and ZLIB TFRecord files: the decompressed stream, read in pieces, optionally inflated ahead by a thread.

Reading inflates with zlib-ng when it is installed (`pip install tfr_torch[fast-gzip]`: the `zlib-ng` package, a
drop-in zlib API), zlib otherwise; TFR_TORCH_INFLATE=zlib turns it off. (python-isal's zlib API took 13% more CPU
time than zlib-ng's on 16 KiB records, on an AMD EPYC: it is not used.) TFR_TORCH_INFLATE_THREAD=1 makes a
background thread inflate ahead of the reader (see Inflater). Recovering from damage: format/inflate_recovery.py.
"""

from __future__ import annotations

import bisect
import os
import weakref
import zlib
from types import ModuleType
from typing import IO, TYPE_CHECKING, Protocol

from tfr_torch.errors import CorruptRecordError, TruncatedRecordError
from tfr_torch.format.compression import _WBITS, GZIP, ZLIB
from tfr_torch.format.inflate_recovery import _inflate_until_error, _next_member

if TYPE_CHECKING:
    from tfr_torch.format.prefetch import Prefetch

__all__ = ["INFLATE", "Inflater", "read_past"]


def _inflate_library() -> tuple[str, ModuleType]:
    """The fastest installed library with zlib's decompressobj API (TFR_TORCH_INFLATE overrides)."""
    wanted = os.environ.get("TFR_TORCH_INFLATE", "auto").strip().lower()
    candidates = {"zlib-ng": ("zlib_ng", "zlib_ng")}
    if wanted not in ("auto", "zlib", *candidates):
        raise ValueError(f'TFR_TORCH_INFLATE must be "auto", "zlib" or "zlib-ng", got {wanted!r}')
    for name, (package, module) in candidates.items():
        if wanted in ("auto", name):
            try:
                return name, getattr(__import__(f"{package}.{module}"), module)
            except ImportError:
                if wanted == name:
                    raise ImportError(f"TFR_TORCH_INFLATE={name} but the {name} package is not installed "
                                      "(pip install tfr_torch[fast-gzip])") from None
    return "zlib", zlib


INFLATE, _inflate = _inflate_library()  # the library's name ("zlib" or "zlib-ng") and module
_INFLATE_ERRORS = (zlib.error, _inflate.error)


# reads each call also copied the half it left over (`unconsumed_tail`), 30% more CPU time than inflating itself.
_READ = 1 << 17
_PIECE = 1 << 20
# The inflate thread pays where the reader's consumer waits with the GIL released (a training step on a GPU: +27%
# records/s measured) and costs where it is CPU-bound Python with no idle core (-25% on a busy 2-core VM): opt-in.
_THREAD_DEFAULT = os.environ.get("TFR_TORCH_INFLATE_THREAD", "0").strip().lower() in ("1", "true", "yes", "on")
_PIECE_ITEM = tuple[bytes, tuple[bytes, ...], bool, list[bytes]]  # see Inflater._made


class _Snapshot:
    """What Inflater._produce had not used yet after one piece: zlib's unused input and the bytes read but not given
    to it, and whether the stream had ended (the reads made after it travel with the thread's later pieces)."""

    __slots__ = ("rest", "eof")

    def __init__(self, rest: tuple[bytes, ...], eof: bool) -> None:
        self.rest, self.eof = rest, eof


class Inflater:
    """A readable stream of the decompressed bytes of a GZIP or ZLIB file, with `readinto`.

    Reads every member of a multi-member gzip file (as TensorFlow does). Trailing bytes after a ZLIB stream,
    which TensorFlow silently ignores, raise CorruptRecordError. The file is read `chunk_size` bytes at a time
    and inflated in pieces of at most `piece_size` bytes, one zlib call each, whatever sizes `readinto` is asked
    for, so where an error is found never depends on the caller. With `threaded` (default: off, unless
    TFR_TORCH_INFLATE_THREAD=1) a background thread inflates the next pieces (two at most) while the caller works
    on the current one (zlib releases the GIL); records, errors and offsets are the same as without it. Memory
    stays bounded by a few pieces. The thread starts at the first `readinto` (not in `skip`), ends with `close`,
    at the end of the stream or when the Inflater is collected, and is refused in a forked child.
    """

    def __init__(self, raw: IO[bytes], compression: str, path: str, chunk_size: int | None = None, head: bytes = b"",
                 *, piece_size: int | None = None, threaded: bool | None = None) -> None:
        self._raw = raw
        self._compression = compression
        self._path = path
        self._chunk = chunk_size or _READ  # compressed bytes per read of the file
        self._piece_size = piece_size or _PIECE  # the most decompressed bytes one zlib call makes
        self._pending = head  # compressed bytes read but not yet given to zlib
        self._z = _inflate.decompressobj(_WBITS[compression])
        self._eof = False  # the producer reached the end of the stream (or stopped at an error)
        self._error: Exception | None = None  # raised on the next call, after the bytes before it were returned
        self.position = 0  # decompressed bytes delivered so far
        self.dropped_members = 0  # members (or the ZLIB stream) given up after a corruption: see abandon_member
        self.dropped_bytes = 0  # compressed bytes dropped by abandon_member
        self.abandoned = (0, 0)  # the file offsets [from, to) of the compressed bytes the last abandon_member dropped
        self.unread = 0  # decompressed bytes the last abandon_member dropped after inflating them (never delivered)
        self.resumed = False  # the last abandon_member found a next gzip member (else the stream ended there)
        self._read_total = len(head)  # compressed bytes read from the file (where it continues)
        self._member_starts: list[int] = []  # decompressed offsets where members after the first began
        self._member_files: list[int] = []  # and the file offsets of their first compressed bytes
        self._fresh = True  # the next input given to zlib starts with the current member's header
        self._failed = False  # the stream stopped at an error (not at its end): abandon_member may go on
        self._salvage: bytes | None = None  # the input of a decompress call that failed (see abandon_member)
        self._deferred: Exception | None = None  # _produce's error, raised after the bytes before it were returned
        self._produced = 0  # decompressed bytes made by _produce (ahead of `position` by what is not delivered)
        self._piece = memoryview(b"")  # the piece being delivered, from `_at`
        self._at = 0
        self._ended = False  # the caller has been given the end of the stream (or its error)
        self._threaded = _THREAD_DEFAULT if threaded is None else bool(threaded)
        self._prefetch: Prefetch[_PIECE_ITEM | BaseException] | None = None
        self._reads: list[bytes] | None = None  # raw reads since the last piece, while a thread inflates
        self._taken: _Snapshot | None = None  # after the last piece taken from the thread
        self._finalizer: weakref.finalize[[], Inflater] | None = None

    def _read_raw(self) -> bytes:
        data = self._raw.read(self._chunk)
        self._read_total += len(data)
        if self._reads is not None:
            self._reads.append(data)
        return data

    def _fill(self) -> bool:
        if not self._pending:
            self._pending = self._read_raw()
        return bool(self._pending)

    def readinto(self, view: bytearray | memoryview) -> int:
        """Fill `view` with decompressed bytes; return how many (0 only at the end of the stream).

        A corrupt or truncated stream raises CorruptRecordError / TruncatedRecordError, but only once every byte
        inflated before the damage has been returned (also those of the zlib call that failed: see
        _inflate_until_error), so the records before it are still read."""
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        view = memoryview(view).cast("B")
        want = len(view)
        filled = 0
        piece, at = self._piece, self._at
        while filled < want:
            if at == len(piece):
                if self._ended:
                    break
                try:
                    piece = memoryview(self._next_piece())
                except (CorruptRecordError, TruncatedRecordError) as err:
                    self._ended = True
                    self._piece, self._at = memoryview(b""), 0
                    self.position += filled
                    if not filled:
                        raise
                    self._error = err
                    return filled
                at = 0
                if not piece:
                    self._ended = True
                    break
            n = min(want - filled, len(piece) - at)
            view[filled : filled + n] = piece[at : at + n]
            filled += n
            at += n
        self._piece, self._at = piece, at
        self.position += filled
        return filled

    def _next_piece(self) -> bytes:
        """The next piece of decompressed bytes (b"" at the end), made here or taken from the thread."""
        if self._prefetch is None:
            if not self._threaded:
                return self._produce()
            self._start()
        assert self._prefetch is not None
        item = self._prefetch.take()
        if isinstance(item, BaseException):
            raise item
        piece, rest, eof, _ = item
        self._taken = _Snapshot(rest, eof)
        return piece

    def _start(self) -> None:
        from tfr_torch.format.prefetch import Prefetch

        self._reads = []
        z = self._z
        self._taken = _Snapshot((z.unconsumed_tail, z.unused_data, self._pending), self._eof)
        ref = weakref.ref(self)

        def produce() -> _PIECE_ITEM | BaseException:  # holds the Inflater only while it inflates: it can be collected
            inflater = ref()
            return _GONE if inflater is None else inflater._made()

        self._prefetch = prefetch = Prefetch(produce, _is_last, depth=2, name=self._path)
        self._finalizer = weakref.finalize(self, prefetch.stop)

    def _made(self) -> _PIECE_ITEM | BaseException:
        """In the thread: one piece and the state after it, or what _produce raised (with the reads made)."""
        try:
            piece = self._produce()
        except BaseException as exc:  # handed to the reader, which raises it where it would have without the thread
            exc.__traceback__ = None
            return exc
        reads, self._reads = self._reads or [], []
        z = self._z
        return piece, (z.unconsumed_tail, z.unused_data, self._pending), self._eof, reads

    def _stop(self, rewind: bool) -> None:
        """Stop the thread; with `rewind`, put the producer back where the caller is (after the last piece it
        took), as if the pieces the thread made ahead had never been made: abandon_member then drops the same
        compressed bytes as without the thread."""
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        left = prefetch.stop()
        reads, self._reads = self._reads or [], None  # what a produce call that raised had read
        if not rewind or not left or prefetch.pid != os.getpid():
            return  # every piece made was taken: the producer is where the caller is
        snap = self._taken
        assert snap is not None  # set when the thread starts, then by each piece taken
        later = [b for item in left if not isinstance(item, BaseException) for b in item[3]]
        self._z = _inflate.decompressobj(_WBITS[self._compression])
        self._pending = b"".join([*snap.rest, *later, *reads])
        self._eof, self._failed, self._salvage, self._deferred = snap.eof, False, None, None

    def _produce(self) -> bytes:
        """Inflate one piece: the output of the next zlib call that gives any (b"" at the end of the stream)."""
        def failure(cls: type[CorruptRecordError | TruncatedRecordError], message: str) -> Exception:
            self._eof = self._failed = True
            return cls(message, self._path, self._produced)

        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        while not self._eof:
            if self._z.eof:
                rest = self._z.unused_data + self._pending
                self._pending = b""
                if not rest:
                    rest = self._read_raw()
                if not rest:
                    self._eof = True
                    break
                if self._compression == ZLIB:
                    self._pending = rest  # what abandon_member drops (and reports)
                    raise failure(CorruptRecordError,
                                  f"{len(rest)}+ bytes follow the end of the ZLIB stream (TensorFlow would ignore them "
                                  "silently): expected the file to end there")
                self._pending = rest
                self._z = _inflate.decompressobj(_WBITS[self._compression])
                self._fresh = True
                self._member_starts.append(self._produced)
                self._member_files.append(self._read_total - len(rest))
            if self._z.unconsumed_tail:
                data = self._z.unconsumed_tail
            else:
                if not self._fill():
                    raise failure(TruncatedRecordError,
                                  f"the {self._compression.upper()} stream ends before its end marker after "
                                  f"{self._produced} decompressed bytes: expected more compressed data")
                data, self._pending = self._pending, b""
            before = self._z.copy()  # a zlib call that fails returns nothing: see _inflate_until_error
            try:
                out: bytes = self._z.decompress(data, self._piece_size)
                self._fresh = False
            except _INFLATE_ERRORS as exc:
                out, used = _inflate_until_error(before, data, self._piece_size, _INFLATE_ERRORS)
                # zlib keeps no unconsumed input after an error: keep the rest of the chunk for abandon_member
                # (past this member's own magic bytes when the chunk starts with them)
                self._salvage = data[used:] if used else data[1:] if self._fresh else data
                self._produced += len(out)
                error = failure(CorruptRecordError, f"cannot inflate the {self._compression.upper()} stream after "
                                                    f"{self._produced} decompressed bytes: {exc}")
                if not out:
                    raise error from None
                self._fresh, self._deferred = False, error
                return out  # the bytes inflated before the damage; the error comes with the next call
            if out:
                self._produced += len(out)
                return out
        return b""

    def abandon_member(self) -> int:
        """Give up the rest of the current GZIP member (of a ZLIB file: the rest of the file) after a corruption.

        A damaged deflate stream can go on inflating without a zlib error: a corrupted back-reference copies
        earlier bytes, so records that pass their CRCs may be duplicates of earlier ones. After a corruption is
        seen (a zlib error, or a record header that fails in the decompressed bytes; the reader skips a record
        whose data CRC alone fails), nothing later in that member can be trusted: reading resumes at the next
        gzip member (its magic bytes, where a member
        header that inflates without error starts) or ends. Returns how many compressed bytes were dropped
        (also summed in `dropped_bytes`; `dropped_members` counts the calls). `position` keeps counting the
        decompressed bytes delivered, so offsets after this point are positions in the stream as read.

        What was dropped, for the reader's report: `abandoned`, the file offsets [from, to) of the compressed
        bytes never inflated (`to` is where reading resumes, or the end of the file); `unread`, the decompressed
        bytes inflated but never delivered; `resumed`, whether a next gzip member was found. The same with and
        without the inflate thread (the thread is rewound first).
        """
        self._stop(rewind=True)
        self._error = None
        self.unread = len(self._piece) - self._at
        self._piece, self._at, self._ended = memoryview(b""), 0, False
        self._produced = self.position
        ahead = bisect.bisect_right(self._member_starts, self.position)  # members the thread began ahead
        del self._member_starts[ahead:], self._member_files[ahead:]
        if self._salvage is not None:  # after a zlib error: the failed call's input, then what follows it
            rest, self._salvage = self._salvage + self._pending, None
        else:  # the compressed bytes zlib has not used yet
            rest = self._z.unconsumed_tail + self._z.unused_data + self._pending
        self._pending = b""
        start = self._read_total - len(rest)  # the file offset of rest[0]
        self._z = _inflate.decompressobj(_WBITS[self._compression])
        self._fresh = True
        self.dropped_members += 1
        dropped = 0
        if self._failed:
            self._eof = self._failed = False
        if self._compression == GZIP and not self._eof:
            while True:
                at = _next_member(rest, False, _inflate, _INFLATE_ERRORS)
                while at == -2:  # a candidate too close to the end of what is buffered to check: read on
                    more = self._read_raw()
                    rest += more
                    at = _next_member(rest, not more, _inflate, _INFLATE_ERRORS)
                if at >= 0:
                    self._pending = rest[at:]
                    dropped += at
                    self.dropped_bytes += dropped
                    self.abandoned, self.resumed = (start, start + dropped), True
                    self._member_starts.append(self.position)
                    self._member_files.append(start + dropped)
                    return dropped
                keep = min(len(rest), 2)  # a magic may straddle the next read
                dropped += len(rest) - keep
                rest = rest[len(rest) - keep:]
                more = self._read_raw()
                if not more:
                    break
                rest += more
        dropped += len(rest)
        while True:  # ZLIB (one stream), or no further gzip member: the rest of the file is lost
            more = self._read_raw()
            if not more:
                break
            dropped += len(more)
        self._eof = True
        self.dropped_bytes += dropped
        self.abandoned, self.resumed = (start, start + dropped), False
        return dropped

    def member_of(self, offset: int) -> tuple[int, int]:
        """(decompressed offset, file offset) where the member that holds decompressed `offset` began ((0, 0) for
        the first member, and for a ZLIB stream): the bytes from there to `offset` came from one member."""
        i = bisect.bisect_right(self._member_starts, offset)
        return (self._member_starts[i - 1], self._member_files[i - 1]) if i else (0, 0)

    def member_after(self, offset: int) -> tuple[int, int] | None:
        """(decompressed offset, file offset) of the first member that begins after `offset`, if one has been
        begun (inflated from, perhaps ahead of the reader); else None."""
        i = bisect.bisect_right(self._member_starts, offset)
        return (self._member_starts[i], self._member_files[i]) if i < len(self._member_starts) else None

    def skip(self, count: int) -> int:
        """Discard `count` decompressed bytes (one pass, no allocation beyond a chunk); return how many were skipped.
        Before the first read this inflates on the caller's thread: a reader opened at an offset in a process that
        forks (DataLoader workers) starts its thread only where it reads."""
        threaded, self._threaded = self._threaded, False
        try:
            return read_past(self, count, self._chunk)
        finally:
            self._threaded = threaded

    def close(self) -> None:
        """Stop the inflate thread (if any) and close the file."""
        self._stop(rewind=False)
        self._raw.close()


_GONE = EOFError("the Inflater was closed or collected")  # ends a thread whose Inflater is gone


def _is_last(item: _PIECE_ITEM | BaseException) -> bool:
    return isinstance(item, BaseException) or not item[0]


class _Readable(Protocol):
    def readinto(self, view: memoryview, /) -> int: ...


def read_past(stream: _Readable, count: int, chunk: int = 1 << 20) -> int:
    """Read and discard `count` bytes of a stream with `readinto` (one scratch buffer of at most `chunk` bytes);
    return how many there were (fewer when the stream ends first)."""
    scratch = bytearray(min(count, chunk) or 1)
    done = 0
    while done < count:
        n = stream.readinto(memoryview(scratch)[: min(len(scratch), count - done)])
        if not n:
            break
        done += n
    return done
