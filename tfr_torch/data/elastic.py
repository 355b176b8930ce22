"""Elastic mid-epoch resumption: which records of an epoch were already yielded, and how the rest is split between a
new layout of readers (ranks x DataLoader workers). Pure functions over numbers, no I/O, no torch.

An epoch's records form a *base sequence* S (see `epoch_sequence`): the global record number at each position,
in the epoch's order (a seeded permutation with a global shuffle, else the records of the files in the epoch's
file order), cut or padded to a multiple of the world size the epoch started with. An epoch is a list of
*segments*: the first is read by the layout the epoch started with; each resume under another layout adds one.
A segment reads a sequence of positions of S (the first: all of them; a later one: the positions no earlier
segment yielded, in S's order, cut or padded to the new world size as a fresh epoch is), split between its
readers exactly as a fresh epoch is split (`worker_block`). A reader's order within its block is the block itself
(global shuffle, or no shuffle) or the block's file runs interleaved and passed through the shuffle buffer
(`shuffle_buffer(interleave(...))`, the same functions that order the records it reads). Everything is a function
of (seed, epoch, counts, the segments' layouts), so "reader (r, k) of segment s yielded n items" says exactly which
positions it consumed: its first min(n x batch, block) positions in its order. That is all a state holds.
"""

from __future__ import annotations

import itertools
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tfr_torch.data.blocks import interleave, shuffle_buffer
from tfr_torch.data.sampler_state import is_sampler_state, merge_sampler_parts, sampler_state_in
from tfr_torch.data.sharding import epoch_rng, file_order, files_for_worker, rank_quota, worker_block
from tfr_torch.data.state_check import STATE_VERSION, check_state

__all__ = ["STATE_VERSION", "MIXTURE_KIND", "elastic_state", "merge_mixtures", "epoch_sequence", "segment_sequence",
           "reader_streams", "reader_order", "consumed", "remaining", "segment_rng", "merge_states", "ORDER_KEYS"]

# What fixes an epoch's order, besides the segments: a state only resumes a dataset that agrees on all of them.
ORDER_KEYS = ("seed", "files", "fingerprint", "records", "shuffle", "global_shuffle", "pad", "interleave",
              "shuffle_buffer")
LAYOUT_KEYS = ("world_size", "num_workers", "batch", "split")
MIXTURE_KIND = "tfr_torch.MixedDataset"  # the "kind" of a MixedDataset state


def epoch_sequence(counts: Sequence[int], global_shuffle: bool, shuffle: bool, seed: int, epoch: int,
                   world_size: int, pad: bool) -> np.ndarray:
    """S: the global record number (file after file, in the dataset's file list) at each position of the epoch."""
    count_of = np.asarray(counts, dtype=np.int64)
    total = int(count_of.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    if global_shuffle:
        base = epoch_rng(seed, epoch, 2).permutation(total).astype(np.int64)
    else:
        starts = np.concatenate([[0], np.cumsum(count_of)[:-1]])
        order = file_order(len(count_of), shuffle, seed, epoch)
        base = np.concatenate([starts[f] + np.arange(count_of[f], dtype=np.int64) for f in order])
    positions = world_size * rank_quota(total, world_size, pad)
    return base[np.arange(positions) % total]


def segment_sequence(left: np.ndarray, world_size: int, pad: bool) -> np.ndarray:
    """The positions a segment reads: `left` (positions not yet yielded, in order) cut to a multiple of the world
    size, or padded by repeating its first ones, as a fresh epoch is (`rank_quota`)."""
    if len(left) == 0:
        return left
    n = world_size * rank_quota(len(left), world_size, pad)
    return left[np.arange(n) % len(left)]


def _file_runs(positions: np.ndarray, records: np.ndarray, ends: np.ndarray) -> list[np.ndarray]:
    """`positions` cut where their records change file or stop increasing: each piece is read as one pass over
    one file (skipping the records between them)."""
    if len(positions) == 0:
        return []
    files = np.searchsorted(ends, records, side="right")
    cut = np.flatnonzero((files[1:] != files[:-1]) | (records[1:] <= records[:-1])) + 1
    return np.split(positions, cut)


def reader_streams(seq: np.ndarray, s_records: np.ndarray, counts: Sequence[int], layout: Mapping[str, Any],
                   rank: int, worker: int, file_order_: np.ndarray | None = None) -> list[np.ndarray]:
    """The positions reader (rank, worker) of a segment reads, as streams (one per file run; one stream for a
    "global" split). `seq` is the segment's sequence of positions, `s_records` S (record number per position)."""
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    if layout["split"] == "files":  # whole files, round-robin over the epoch's file order (one rank, no padding)
        assert file_order_ is not None  # the first segment of an epoch read without counts: the caller gives it
        sizes = np.asarray(counts, dtype=np.int64)[file_order_]
        first = dict(zip(file_order_.tolist(), (np.cumsum(sizes) - sizes).tolist()))  # file -> its first position
        return [np.arange(first[f], first[f] + int(counts[f]), dtype=np.int64)
                for f in files_for_worker(file_order_, worker, layout["num_workers"])]
    quota = len(seq) // layout["world_size"]
    a, b = worker_block(quota, rank, worker, layout["num_workers"], layout["batch"])
    block = seq[a:b]
    if layout["split"] == "global":
        return [block]
    return _file_runs(block, s_records[block], ends)


def segment_rng(seed: int, epoch: int, segment: int, digest: int, layout: Mapping[str, Any], rank: int,
                worker: int) -> np.random.Generator:
    """The shuffle buffer's generator of a reader of a resumed segment: from (seed, epoch, the resume point, the
    new layout, the reader). The first segment's readers use the fresh epoch's (`epoch_rng`), unchanged."""
    if segment == 0:
        return epoch_rng(seed, epoch, 3 + worker + layout["num_workers"] * rank)
    entropy = [int(seed) & (2**63 - 1), int(epoch), 5, segment, digest, layout["world_size"], layout["num_workers"],
               layout["batch"], rank, worker]
    return np.random.default_rng(np.random.SeedSequence(entropy))


def reader_order(streams: list[Any], buffered: bool, cycle: int, buffer: int, rng: np.random.Generator | None,
                 ) -> Iterator[Any]:
    """A reader's items in the order it yields them: its streams one after the other, or interleaved `cycle` at a
    time through a shuffle buffer of `buffer` (`buffered`). The same function orders positions (to know what was
    consumed) and records (to read them)."""
    if not buffered:
        return itertools.chain.from_iterable(streams)
    assert rng is not None  # a buffered shuffle draws from a generator
    return shuffle_buffer(interleave((iter(s) for s in streams), cycle), buffer, rng)


def history_digest(segments: Sequence[Mapping[str, Any]]) -> int:
    """A number that names the resume point (every segment's layout and counts), for `segment_rng`."""
    return zlib.crc32(json.dumps(list(segments), sort_keys=True).encode())


def consumed(seq: np.ndarray, s_records: np.ndarray, counts: Sequence[int], order: Mapping[str, Any],
             layout: Mapping[str, Any], yielded: Sequence[Sequence[int]], segment: int, digest: int,
             epoch: int, file_order_: np.ndarray | None = None) -> np.ndarray:
    """The positions the readers of one segment yielded: reader (r, k) its first yielded[r][k] x batch of its
    order (fewer at its block's end); in a global shuffle whose parts said how far each went (their "consumed":
    bad records skipped among the yielded ones counted, see OrderProgress), that many. A reader of file runs whose
    part named the bad records it skipped ("skipped") read its order without them (a shuffle buffer never held
    them): its order is replayed so, and they count as gone too."""
    taken: list[np.ndarray] = []
    buffered = bool(order["shuffle"]) and layout["split"] != "global"
    went = layout.get("consumed") if layout["split"] == "global" else None
    bad_rows = layout.get("skipped") if layout["split"] != "global" else None
    for rank in range(layout["world_size"]):
        for worker in range(layout["num_workers"]):
            n = int(yielded[rank][worker]) * int(layout["batch"])
            if went is not None and went[rank][worker] is not None:
                n = _went_past(went[rank][worker], n, rank, worker)
            if n <= 0:
                continue
            streams = reader_streams(seq, s_records, counts, layout, rank, worker, file_order_)
            if went is not None and streams and (n > len(streams[0]) or n < min(
                    int(yielded[rank][worker]) * int(layout["batch"]), len(streams[0]))):
                raise ValueError(f"the state says rank {rank} worker {worker} went {n} positions into its order "
                                 f"of {len(streams[0])} having yielded {yielded[rank][worker]} item(s) of "
                                 f"{layout['batch']}: edited, or of another dataset")
            bad = bad_rows[rank][worker] if bad_rows is not None else None
            if bad:  # read without its bad records: replayed so, and they are gone too
                marks = [np.isin(s_records[s], np.asarray(bad, dtype=np.int64)) for s in streams]
                taken += [s[m] for s, m in zip(streams, marks)]
                streams = [s[~m] for s, m in zip(streams, marks)]
            if not buffered:
                taken.append(np.concatenate(streams)[:n] if streams else np.zeros(0, dtype=np.int64))
                continue
            rng = segment_rng(order["seed"], epoch, segment, digest, layout, rank, worker)
            items = reader_order([s.tolist() for s in streams], True, order["interleave"],
                                 order["shuffle_buffer"], rng)
            taken.append(np.fromiter(itertools.islice(items, n), dtype=np.int64))
    return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)


def _went_past(value: Any, yielded_records: int, rank: int, worker: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"the state's consumed count of rank {rank} worker {worker} is {value!r}, expected a count "
                         "of records >= 0")
    return value


def remaining(s_records: np.ndarray, counts: Sequence[int], order: Mapping[str, Any], epoch: int,
              segments: Sequence[Mapping[str, Any]], pad: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """The positions of S no segment yielded (in S's order), and each segment's sequence."""
    left = np.arange(len(s_records), dtype=np.int64)
    sequences = []
    for s, segment in enumerate(segments):
        seq = left if s == 0 else segment_sequence(left, segment["world_size"], pad)
        sequences.append(seq)
        first_order = (file_order(len(counts), order["shuffle"], order["seed"], epoch)
                       if segment["split"] == "files" else None)
        digest = history_digest(segments[:s])
        gone = consumed(seq, s_records, counts, order, segment, segment["yielded"], s, digest, epoch, first_order)
        left = np.setdiff1d(left, gone, assume_unique=False)  # sorted: S's order
    return left, sequences


# ----- states: one reader's part, and the merged state of every reader ---------------------------------------------


def is_part(state: Mapping[str, Any]) -> bool:
    """One reader's part (what state_dict returns), not a merged state."""
    return "worker" in state


def as_merged(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """A part that is the whole epoch's state (its layout has one reader), merged; else None."""
    if part.get("version") != STATE_VERSION or part["world_size"] * part["num_workers"] != 1:
        return None
    return merge_states([part])


def merge_states(parts: Any) -> dict[str, Any]:
    """One state for the whole job from every reader's part (see tfr_torch.elastic_state, which also takes
    StatefulDataLoader states)."""
    flat = list(parts)
    for p in flat:
        if isinstance(p, Mapping) and p.get("kind") == "tfr_torch.CachedDataset":
            raise ValueError("a CachedDataset state (alone, or a dataset's part of a MixedDataset state) resumes only "
                             "with the ranks and DataLoader workers it was saved with: load each reader's state as "
                             "it was saved, not merged by elastic_state")
    merged = [p for p in flat if not is_part(p)]
    pieces = [p for p in flat if is_part(p)]
    for p in flat:
        if check_state(p) == 1:
            raise ValueError("a state saved by an older tfr_torch (version 1) resumes only with the layout it was "
                             f"saved with (rank {p.get('rank')} of {p.get('world_size')}, worker {p.get('worker')} "
                             f"of {p.get('num_workers')}): load it per worker, with the same world size and "
                             "num_workers")
    if merged:
        first = merged[0]
        for other in merged[1:]:
            if other != first:
                raise ValueError("the merged states given differ: give one merged state, or the parts")
        if pieces:
            raise ValueError("give either one merged state or every reader's part, not both")
        return dict(first)
    if not pieces:
        raise ValueError("no TFRecordDataset state given: pass every reader's state_dict() (or the "
                         "StatefulDataLoader states of every rank)")
    first = pieces[0]
    for p in pieces[1:]:
        for key in ("epoch", *[k for k in ORDER_KEYS if k != "records"], *LAYOUT_KEYS, "segments"):
            if p.get(key) != first.get(key):
                raise ValueError(f"the parts come from different epochs or datasets: {key}={first.get(key)!r} in "
                                 f"rank {first['rank']} worker {first['worker']}'s part, {key}={p.get(key)!r} in "
                                 f"rank {p['rank']} worker {p['worker']}'s")
    world, workers = first["world_size"], first["num_workers"]
    yielded: list[list[int | None]] = [[None] * workers for _ in range(world)]
    for p in pieces:
        r, k = p["rank"], p["worker"]
        if not (0 <= r < world and 0 <= k < workers):
            raise ValueError(f"a part names rank {r} worker {k}, outside its layout of {world} rank(s) x "
                             f"{workers} worker(s)")
        if yielded[r][k] is not None and yielded[r][k] != p["yielded"]:
            raise ValueError(f"two parts for rank {r} worker {k} disagree: yielded={yielded[r][k]} and "
                             f"{p['yielded']} (states saved at different steps?)")
        yielded[r][k] = int(p["yielded"])
    missing = [f"rank {r} worker {k}" for r in range(world) for k in range(workers) if yielded[r][k] is None]
    if missing:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise ValueError(f"the parts of {len(missing)} of the {world * workers} readers ({world} rank(s) x "
                         f"{workers} worker(s)) are missing: {shown}; gather every rank's state")
    segment = {key: first[key] for key in LAYOUT_KEYS}
    segment["yielded"] = yielded
    for key in ("consumed", "skipped"):  # how far each reader went in its order, where its part says (consumed())
        went: list[list[Any]] = [[None] * workers for _ in range(world)]
        for p in pieces:
            went[p["rank"]][p["worker"]] = p.get(key)
        if (key == "consumed") == (first["split"] == "global") and any(n is not None for row in went for n in row):
            segment[key] = went
    state = {"version": STATE_VERSION, "epoch": first["epoch"], **{key: first[key] for key in ORDER_KEYS}}
    state["records"] = next((p["records"] for p in pieces if p["records"] is not None), None)  # a worker may count
    state["segments"] = [*first["segments"], segment]
    state["exact"] = all(p.get("exact") is True for p in pieces)  # every part's items the first of its order
    return state


def elastic_state(*states: Any) -> dict[str, Any]:
    """One state of a whole job's epoch, loadable under any world size and number of DataLoader workers, from the
    states of all its readers: `TFRecordDataset.state_dict()` parts, torchdata `StatefulDataLoader.state_dict()`s
    (each worker's part is taken from it), lists of them (what `all_gather_object` gives), or a merged state.
    The same for `ElasticDistributedSampler` states: every rank's `sampler.state_dict()`, or the states of
    StatefulDataLoaders that read through the sampler (the sampler's part is taken from each); and for
    `MixedDataset` states (each of its datasets' parts merged; stop "all" or "first").

    >>> state = tfr_torch.elastic_state(gathered)  # every rank's loader.state_dict()  # doctest: +SKIP
    >>> dataset.load_state_dict(state)  # then a fresh loader, any num_workers  # doctest: +SKIP
    """
    parts: list[Mapping[str, Any]] = []
    for state in states:
        _collect(state, parts)
    mixtures = [p for p in parts if p.get("kind") == MIXTURE_KIND]
    if mixtures:
        if len(mixtures) != len(parts):
            raise ValueError(f"give the states of one kind: {len(mixtures)} MixedDataset state(s) and "
                             f"{len(parts) - len(mixtures)} other state(s) were given")
        return merge_mixtures(mixtures)
    samplers = [p for p in parts if is_sampler_state(p)]
    if samplers and len(samplers) != len(parts):
        raise ValueError(f"give the states of one kind: {len(samplers)} ElasticDistributedSampler state(s) and "
                         f"{len(parts) - len(samplers)} TFRecordDataset state(s) were given")
    return merge_sampler_parts(samplers) if samplers else merge_states(parts)


_MIXTURE_AGREE = ("version", "names", "weights", "stop", "seed", "epoch", "segment", "workers")


def merge_mixtures(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state of a whole job's mixed epoch (MixedDataset) from every reader's part: each dataset's parts merged
    as `elastic_state` merges them, and the number of the mixture's next segment (its draws start afresh from
    (seed, epoch, segment, worker) under the new layout). Or the one merged state given."""
    merged = [p for p in parts if p.get("merged")]
    if merged:
        if len(merged) != len(parts):
            raise ValueError("give either one merged MixedDataset state or every reader's part, not both")
        if any(p != merged[0] for p in merged[1:]):
            raise ValueError("the merged MixedDataset states given differ: give one of them, or the parts")
        return dict(merged[0])
    first = parts[0]

    def who(part: Mapping[str, Any]) -> str:
        return f"rank {part.get('rank')} worker {part.get('worker')}'s part"

    for part in parts[1:]:
        for key in _MIXTURE_AGREE:
            if part.get(key, 0 if key == "segment" else None) != first.get(key, 0 if key == "segment" else None):
                raise ValueError(f"the MixedDataset parts come from different epochs or mixtures: {key}="
                                 f"{first.get(key)!r} in {who(first)}, {key}={part.get(key)!r} in {who(part)}")
    if first["stop"] == "cycle":
        raise ValueError("a MixedDataset with stop='cycle' resumes with the layout it was saved with only (each "
                         "reader's datasets may be in their second pass): load each reader's own part, with the "
                         "same world size and num_workers")
    datasets = {}
    for name in first["names"]:
        try:
            datasets[name] = elastic_state([part["datasets"][name] for part in parts])
        except ValueError as error:
            raise ValueError(f"MixedDataset dataset {name!r}: {error}") from None
    count = len(first["names"])
    return {"version": first["version"], "kind": MIXTURE_KIND, "merged": True,
            **{key: first[key] for key in ("names", "weights", "stop", "seed", "epoch")},
            "segment": int(first.get("segment", 0)) + 1,
            # stop="first" and every reader's epoch had ended: the resumed epoch yields nothing more
            "over": first["stop"] == "first" and all(len(part["exhausted"]) == count for part in parts),
            "datasets": datasets}


def _collect(state: Any, parts: list[Mapping[str, Any]]) -> None:
    if isinstance(state, (list, tuple)):
        for item in state:
            _collect(item, parts)
    elif isinstance(state, Mapping) and "version" in state:
        parts.append(state)
    elif isinstance(state, Mapping) and (sampler := sampler_state_in(state)) is not None:
        parts.append(sampler)  # a StatefulDataLoader reading through an ElasticDistributedSampler
    elif isinstance(state, Mapping) and "_snapshot" in state:  # StatefulDataLoader with worker processes
        if state.get("_steps_since_snapshot", 0):
            raise ValueError(f"this StatefulDataLoader state is {state['_steps_since_snapshot']} step(s) past its "
                             "last snapshot of the workers' states: build the loader with snapshot_every_n_steps=1 "
                             "(the default) to resume it under another layout")
        workers = state["_snapshot"].get("_worker_snapshots", {})
        for key in sorted(workers):
            _collect(_dataset_state(workers[key], key), parts)
    elif isinstance(state, Mapping) and "_num_yielded" in state:  # StatefulDataLoader(num_workers=0)
        _collect(_dataset_state(state, "the loader"), parts)
    else:
        raise ValueError(f"not a TFRecordDataset or StatefulDataLoader state: a {type(state).__name__}"
                         + (f" with keys {sorted(map(str, state))[:8]}" if isinstance(state, Mapping) else ""))


def _dataset_state(state: Mapping[str, Any], where: str) -> Any:
    found = state.get("dataset_state")
    if found is None:
        raise ValueError(f"the StatefulDataLoader state of {where} holds no dataset state: is its dataset a "
                         "TFRecordDataset, or its sampler an ElasticDistributedSampler (given as sampler=, batched "
                         "by batch_size=)?")
    return found
