"""Which records each reader of a TFRecordDataset reads in an epoch (a mixin of its class, data/dataset.py): the files'
record counts (from indexes, a checked sidecar, or counting, shared by DataLoader workers) and the warnings they
lead to, and the epoch's records of one reader (rank x DataLoader worker) in blocks: by offset for a global
shuffle, as file runs or whole files otherwise, or, in a resumed segment, what the earlier segments left
(elastic.py). Sharding and seeding are sharding.py's and elastic.py's pure functions; this wires them to the files."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from tfr_torch.data.counting import SharedCounts
from tfr_torch.data.elastic import (
    epoch_sequence,
    history_digest,
    reader_order,
    reader_streams,
    remaining,
    segment_rng,
    segment_sequence,
)
from tfr_torch.data.blocks import Block, blocks_of, interleave, located, shuffle_buffer
from tfr_torch.data.open_files import interleaved_within_limit
from tfr_torch.data.order_progress import OrderProgress
from tfr_torch.data.reading import Source, iter_random, iter_run, opening_ahead
from tfr_torch.data.sharding import (
    Run,
    epoch_rng,
    file_order,
    files_for_worker,
    global_block,
    rank_quota,
    runs_of_block,
    split_sizes,
    worker_block,
)
from tfr_torch.errors import TFRecordError
from tfr_torch.format.options import OnError
from tfr_torch.format.reader import RecordReader, _resolve_policy
from tfr_torch.format.remote_options import RemoteOptions

__all__ = ["EpochRecords"]

# a reader topping up its share (see _top_up) keeps its first records, at most this many and this many bytes
_KEEP_RECORDS = 4096
_KEEP_BYTES = 16 << 20


class EpochRecords:
    """The record-source methods of TFRecordDataset, which sets every attribute below."""

    paths: list[str]
    offsets: list[Any]
    compression: Any
    verify: bool
    on_error: OnError
    remote: RemoteOptions | None
    max_group_bytes: int
    spill_dir: Any
    seed: int
    rank: int
    world_size: int
    shuffle: bool
    pad: bool
    interleave: int
    shuffle_buffer: int
    batch_size: int | None
    drop_last: bool
    tfds: Any
    metadata: dict[str, Any] | None
    _site: Any
    _shared: SharedCounts
    _sidecar_counts: bool
    _seeks: list[Any]
    _global_shuffle: bool
    _order_progress: OrderProgress | None  # how far this reader's global shuffle went (a pass's; None: not one)

    if TYPE_CHECKING:
        def _worker_info(self) -> Any: ...  # TFRecordDataset's own (a subclass may answer None)

        def _order_info(self) -> dict[str, Any]: ...  # ResumableState's

    # ----- counts ------------------------------------------------------------------------------------------------

    @property
    def _counts(self) -> list[int] | None:
        """Every file's record count (from indexes, a checked sidecar, or counting), or None while any is unknown.
        Shared with DataLoader workers: counts taken in a worker reach the main process and later epochs."""
        return self._shared.known()

    @_counts.setter
    def _counts(self, counts: Sequence[int] | None) -> None:
        self._shared = SharedCounts([None] * len(self.paths) if counts is None else list(counts))

    def _count_file(self, f: int) -> int:
        """Records of file `f` as reading yields them (under on_error="skip" or a callable, the ones that survive).
        A bad record is left out silently here: the warning, or the call of the `on_error` callable, comes when a
        reader reads it, once, not also when it is counted."""
        verify = self.verify if self.on_error != "raise" else False  # reading raises on a bad data CRC anyway
        policy: OnError = "raise" if self.on_error == "raise" else _ignore
        with RecordReader(self.paths[f], self.compression, verify, on_error=policy) as reader:
            return sum(len(lengths) for lengths, _ in reader.lengths())  # framed, never copied out

    def _count_now(self) -> list[int]:
        return self._shared.count_here(self._count_file)

    def _ensure_counts(self, why: str) -> list[int]:
        """Count the files of unknown count now, in this process, with one warning at the user's line."""
        counts = self._counts
        if counts is None:
            unknown = self._shared.unknown()
            if self._shared.first(0):
                self._site.warn(f"counting the records of {len(unknown)} file(s) without an index ({why}): this "
                                "reads them once (the counts are kept for every epoch); write indexes (`tfr-torch "
                                "index FILES`) and pass index='auto' to skip it")
            counts = self._count_now()
        return counts

    def _warn_if_empty(self) -> None:
        """Warn (once, at the user's line) when this rank will yield nothing in an epoch."""
        counts = self._counts
        if counts is None:
            return
        total = sum(counts)
        quota = rank_quota(total, self.world_size, self.pad)
        if total == 0:
            self._site.warn(f"the {len(self.paths)} file(s) of this dataset hold no records: it yields nothing")
        elif quota == 0:
            self._site.warn(f"every rank yields nothing: {total} records for world_size={self.world_size} leaves "
                            f"0 per rank (pass pad=True to repeat records so that each rank gets one)")
        elif self.batch_size is not None and self.drop_last and quota < self.batch_size:
            self._site.warn(f"this rank yields no batch: {quota} records per rank for batch_size={self.batch_size} "
                            "with drop_last=True (use a smaller batch_size or drop_last=False)")

    def _warn_idle_workers(self, quota: int, workers: int, multiple: int) -> None:
        """In DataLoader worker 0: warn once (for every worker and epoch) when some workers get nothing."""
        if workers < 2 or not self._shared.first(1):
            return
        sizes = split_sizes(quota, workers, multiple)
        idle = [w for w, size in enumerate(sizes) if size == 0]
        if not idle or quota == 0:
            return
        unit = f"{-(-quota // multiple)} batches of {multiple}" if multiple > 1 else f"{quota} records"
        busy = workers - len(idle)
        self._site.warn(f"DataLoader workers {', '.join(map(str, idle))} of {workers} get nothing to read: this rank "
                        f"has {unit} for {workers} workers (num_workers={busy} would do the same work)")

    # ----- the epoch's records -----------------------------------------------------------------------------------

    def _resumed(self, epoch: int, history: list[dict[str, Any]], layout: Any, worker: int) -> Iterator[Block]:
        """This reader's records in a segment after the first: what the segments of `history` left, split for
        `layout` (see elastic.py), read by offset (a global shuffle) or as file runs that skip what was yielded;
        topped up where bad records were skipped (see _topped_up)."""
        return self._topped_up(lambda silent: self._resumed_share(epoch, history, layout, worker, silent))

    def _resumed_share(self, epoch: int, history: list[dict[str, Any]], layout: Any, worker: int, silent: bool
                       ) -> tuple[Iterator[Block], int | None]:
        """_resumed's records, and how many they are when none is bad."""
        counts = self._ensure_counts("resuming an epoch under another layout needs the record counts")
        order = self._order_info()
        s_records = epoch_sequence(counts, self._global_shuffle, self.shuffle, self.seed, epoch,
                                   history[0]["world_size"], self.pad)
        left, _ = remaining(s_records, counts, order, epoch, history, self.pad)
        seq = segment_sequence(left, layout["world_size"], self.pad)
        streams = reader_streams(seq, s_records, counts, layout, self.rank, worker)
        source = self._source(silent)
        share = sum(len(p) for p in streams)
        once = False  # both copies of a padded record in this reader's share (see _reported_once)
        if self.pad and streams:  # (only pad=True repeats records)
            mine = s_records[np.concatenate(streams)]
            once = len(np.unique(mine)) < len(mine)
        if layout["split"] == "global":
            ids = s_records[streams[0]] if streams else np.zeros(0, np.int64)
            tracked = self._tracked(source, ids, silent)
            return iter_random(_reported_once(tracked) if once else tracked, ids, counts), share
        source = self._tracked(source, None, silent)
        if once:
            source = _reported_once(source)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

        def read(positions: np.ndarray) -> Iterator[Block]:
            records = s_records[positions]
            f = int(np.searchsorted(starts[1:], records[0], side="right"))
            index = records - starts[f]
            blocks = iter_run(source, self._in_file(Run(f, int(index[0]), int(index[-1]) + 1)))
            if len(index) == index[-1] - index[0] + 1:
                return blocks
            offsets = self.offsets[f]
            if offsets is not None:  # by offset: a bad record skipped in the run shifts no later record
                wanted = set(offsets[index, 0].tolist())
                return blocks_of(item for item in located(blocks) if item.offset in wanted)
            keep = np.zeros(int(index[-1] - index[0]) + 1, dtype=bool)  # numbered as read (counts by reading)
            keep[index - index[0]] = True
            return blocks_of(item for item, wanted in zip(located(blocks), keep.tolist()) if wanted)

        if not self.shuffle:
            return _chain(read(p) for p in streams), share
        rng = segment_rng(self.seed, epoch, len(history), history_digest(history), layout, self.rank, worker)
        return interleaved_within_limit(blocks_of(reader_order([located(read(p)) for p in streams], True,
                                                               self.interleave, self.shuffle_buffer, rng)),
                                        self.interleave), share

    def _checked_ahead(self, ahead: int, done: int, share: int, multiple: int, worker: int) -> int:
        """`ahead` (positions of a share of `share` records a resumed state says were gone past, `done` of them
        yielded), checked against the share (ValueError for a state that does not fit it)."""
        if share < ahead < share + multiple:
            ahead = share  # items counted whole: the last batch, partial, ended the share
        if ahead > share or ahead < min(done, share):
            raise ValueError(f"cannot resume: the state says this reader (rank {self.rank}, worker {worker}) went "
                             f"{ahead} positions into a share of {share} records having yielded {done}: a state of "
                             "another dataset, or edited")
        return ahead

    def _tracked(self, source: Source, ids: np.ndarray | None, silent: bool, ahead: int = 0, done: int = 0,
                 before: Sequence[int] = ()) -> Source:
        """`source`, whose on_error policy also notes the bad records it skips (see OrderProgress: for a global
        shuffle, where they sit in the order `ids` of this pass; for file runs, ids None, which they are), kept as
        this reader's `_order_progress`, what its state says of how far the order went. A silent source (a top-up,
        reading its share again) notes nothing, nor does one whose files are not all indexed (a bad record is
        then found by no index entry) or whose counts are not known. `before`: the bad records a resumed pass of
        file runs went past before its start (its state named them), still this pass's skipped ones."""
        counts = self._counts
        if silent or (self.on_error == "raise" and ids is None) or counts is None or any(
                o is None for o in self.offsets):
            return source
        progress = self._order_progress = OrderProgress(ids, counts, self.paths, self.offsets, ahead, done, before)
        return source._replace(on_error=progress.policy(self.on_error) or "raise")

    def _in_file(self, run: Run) -> Run:
        """A TFDS split slice starts inside a shard: without an index, its record numbers count from the file's
        start."""
        skip = self.tfds.skips[run.file] if self.tfds is not None and self.offsets[run.file] is None else 0
        return Run(run.file, run.start + skip, run.stop + skip) if skip else run

    def _source(self, silent: bool = False) -> Source:
        # a file read without an index must hold exactly the records counted for it (a stale count would make
        # ranks unequal or leave records unread): `whole` says a count is the file's total: every count but a
        # TFDS slice's, and a slice's too when it takes the whole shard (more records there than dataset_info.json
        # says would else be dropped unseen)
        if self.tfds is None:
            whole = [True] * len(self.paths)
        else:
            whole = [skip == 0 and take == expected
                     for skip, take, expected in zip(self.tfds.skips, self.tfds.counts, self.tfds.expected)]
        return Source(self.paths, self.offsets, self.compression, self.verify, _ignore if silent else self.on_error,
                      self._counts, whole, self._count_origin(), self.remote, self.max_group_bytes, self._seeks,
                      getattr(self, "spill_dir", True))  # (a dataset pickled before spill_dir: the default)

    def _count_origin(self) -> str:
        if self._sidecar_counts and self.metadata is not None:
            return "the count in the sidecar"
        return "the count taken when the dataset was built" if self.tfds is None else "the split's record count"

    def _split_counts(self, worker: int, workers: int, readers: int) -> list[int]:
        """Counts for splitting fewer files than readers by record ranges: in DataLoader workers, counted once
        for the dataset by all workers together (see data/counting.py); in one process, here."""
        if workers < 2 or self._worker_info() is None:
            return self._ensure_counts(_split_reason(len(self.paths), readers))
        return self._shared.count_shared(self._count_file, worker, workers)

    def _warn_shared_count(self, worker: int, workers: int, readers: int) -> None:
        """In DataLoader worker 0, once for the dataset: the workers count the files that had no count as built.
        Said even when the other workers have already counted them all (worker 0 may start last)."""
        if (worker == 0 and workers >= 2 and len(self.paths) < readers and self._shared._initial
                and self._worker_info() is not None and self._shared.first(0)):
            unknown = len(self._shared._initial)
            self._site.warn(f"counting the records of {unknown} file(s) without an index "
                            f"({_split_reason(len(self.paths), readers)}): the DataLoader workers count them together "
                            "once, and every later epoch and len() use the counts; write indexes (`tfr-torch index "
                            "FILES`) and pass index='auto' to skip it")

    def _share_bounds(self, worker: int, workers: int, warn: bool = False) -> tuple[int, int]:
        """Where this reader's share of the epoch starts and ends in its rank's records (its counts known); `warn`:
        say (in worker 0) when some DataLoader workers get nothing."""
        assert self._counts is not None
        multiple = self.batch_size or 1
        quota = rank_quota(sum(self._counts), self.world_size, self.pad)
        if warn and worker == 0:
            self._warn_idle_workers(quota, workers, multiple)
        return worker_block(quota, self.rank, worker, workers, multiple)

    def _share_size(self, worker: int, workers: int) -> int:
        """Records in this reader's share of the epoch (its counts known)."""
        a, b = self._share_bounds(worker, workers)
        return b - a

    def _records(self, epoch: int, worker: int, workers: int, ahead: int = 0, done: int = 0,
                 before: Sequence[int] = ()) -> Iterator[Block]:
        """This reader's records for the epoch, in order (before batching), in blocks; topped up where bad records
        were skipped (see _topped_up). A resumed reader starts `ahead` positions into its order, `done` records of
        its share already yielded (what the state says: see OrderProgress), where those are its first `done`
        items (the caller reads and drops them where it was topping its share up: the repeats go on from there);
        `before`: the bad records it skipped before its start (file order: see _tracked)."""
        def make(silent: bool) -> tuple[Iterator[Block], int | None]:
            if silent:  # a top-up reads the share again from its start: its first records are the ones repeated
                return self._share(epoch, worker, workers, True)
            return self._share(epoch, worker, workers, False, ahead, done, before)

        return self._topped_up(make, from_start=ahead > 0)

    def _topped_up(self, make: Callable[[bool], tuple[Iterator[Block], int | None]], from_start: bool = False
                   ) -> Iterator[Block]:
        """The blocks of `make(False)`; where it gave fewer records than its share (bad records skipped under
        on_error other than "raise", several ranks), its first records again, read afresh from `make(True)` (which
        passes over bad records silently: each was reported once), up to the share. A rank short of its share would
        leave the others waiting at a collective (DDP, XLA); as with pad=True, a repeated record instead. Nothing
        good to repeat: the reader ends short. `from_start`: `make(False)` starts inside the share (a resumed
        pass), so the records to repeat are never the ones it gave."""
        blocks, share = make(False)
        if share is None or self.on_error == "raise" or self.world_size < 2:
            return blocks
        return _top_up(blocks, share, make, from_start)

    def _share(self, epoch: int, worker: int, workers: int, silent: bool, ahead: int = 0, done: int = 0,
               before: Sequence[int] = ()) -> tuple[Iterator[Block], int | None]:
        """_records's records, and how many they are when none is bad (None: not known, one rank). `ahead`,
        `done`, `before`: see _records."""
        source = self._source(silent)
        multiple = self.batch_size or 1
        if self._global_shuffle:  # a true global shuffle: a seeded permutation, each record read by offset
            counts = self._counts
            assert counts is not None  # every file is indexed, so every count is known
            a, b = self._share_bounds(worker, workers, warn=not silent)
            ahead = self._checked_ahead(ahead, done, b - a, multiple, worker)
            ids = global_block(counts, self.seed, epoch, a, b)[ahead:]
            return iter_random(self._tracked(source, ids, silent, ahead, done), ids, counts), b - a - done
        order = file_order(len(self.paths), self.shuffle, self.seed, epoch)
        readers = workers * self.world_size
        if not silent:
            self._warn_shared_count(worker, workers, readers)
        if self._counts is None and len(self.paths) < readers:
            self._split_counts(worker, workers, readers)
            source = self._source(silent)  # with the counts: a run that ends its file reports a bad tail
        share: int | None = None
        if self._counts is None:  # one rank, enough files, counts unknown: whole files per worker
            assert ahead == 0  # (a resumed pass starts ahead in a split by record ranges only)
            known = [len(o) if o is not None else 1 << 62 for o in self.offsets]  # read unknown files to their end
            streams = (iter_run(source, Run(f, 0, known[f])) for f in files_for_worker(order, worker, workers))
        else:
            a, b = self._share_bounds(worker, workers, warn=not silent)
            ahead = self._checked_ahead(ahead, done, b - a, multiple, worker)
            share = b - a - done
            source = self._tracked(source, None, silent, before=before)
            runs = opening_ahead(source, (self._in_file(run) for run in runs_of_block(self._counts, order, a + ahead,
                                                                                       b)),
                                 self.interleave if self.shuffle else 1)
            streams = (iter_run(source, run) for run in runs)
        if not self.shuffle:
            return _chain(streams), share
        rng = epoch_rng(self.seed, epoch, 3 + worker + workers * self.rank)
        return interleaved_within_limit(blocks_of(shuffle_buffer(interleave((located(s) for s in streams),
                                                                            self.interleave),
                                                                 self.shuffle_buffer, rng)), self.interleave), share


def _reported_once(source: Source) -> Source:
    """`source`, whose on_error policy hears of each bad record once: a reader of a resumed layout with pad=True can
    be given both copies of a record the first layout padded (the positions padded and the record's own both left
    unread), and reads it twice in one pass; a bad one is skipped both times but reported once."""
    policy = _resolve_policy(source.on_error)
    if policy is None:
        return source
    seen: set[tuple[Any, ...]] = set()

    def once(err: TFRecordError) -> None:
        key = (err.path, err.offset, err.skipped_range)
        if key not in seen:
            seen.add(key)
            policy(err)

    return source._replace(on_error=once)


def _top_up(blocks: Iterator[Block], share: int, make: Callable[[bool], tuple[Iterator[Block], int | None]],
            from_start: bool = False) -> Iterator[Block]:
    """See EpochRecords._topped_up. The first records are kept as they pass (up to _KEEP_RECORDS and _KEEP_BYTES):
    where they are every good record of the share, or as many as are missing, the top-up comes from them, without
    reading the share again; otherwise (a share with many good records) each pass again gives more records than the
    limits keep, so a share mostly bad is not read once per good record."""
    got = kept_bytes = 0
    kept: list[Block] = []
    complete = not from_start  # every record so far is in `kept`, the first ones of the share
    for block in blocks:
        got += len(block)
        if complete:
            size = sum(map(len, block.records))
            if got <= _KEEP_RECORDS and kept_bytes + size <= _KEEP_BYTES:
                kept.append(block.head(len(block)))  # its own list: the consumer may change the one it gets
                kept_bytes += size
            else:
                complete = False
        yield block
    if got == 0 and not from_start:
        return  # nothing good to repeat: the reader ends short
    from_kept = complete or (not from_start and share - got <= sum(map(len, kept)))
    while got < share:
        again = iter(kept) if from_kept else make(True)[0]
        before = got
        fresh: list[Block] = []  # a pass over the whole share: its good records, kept where they fit the limits
        fresh_bytes, fits = 0, not from_kept
        for block in again:
            if got + len(block) >= share:
                yield block.head(share - got)
                return
            got += len(block)
            if fits:
                fresh_bytes += sum(map(len, block.records))
                fits = got - before <= _KEEP_RECORDS and fresh_bytes <= _KEEP_BYTES
            if fits:
                fresh.append(block.head(len(block)))
            yield block
        if got == before:
            return  # nothing good in the share to repeat: the reader ends short
        if fits:  # the next passes repeat them from memory
            kept, from_kept = fresh, True


def _ignore(err: Exception) -> None:
    """The on_error policy of counting: a bad record is not counted, and said nothing of (reading says it)."""


def _chain(streams: Iterable[Iterable[Block]]) -> Iterator[Block]:
    for stream in streams:
        yield from stream


def _split_reason(files: int, readers: int) -> str:
    return f"{files} file(s) for {readers} readers (ranks x DataLoader workers): files are split by record ranges"
