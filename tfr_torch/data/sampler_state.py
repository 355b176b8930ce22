"""Which dataset indices each rank of an `ElasticDistributedSampler` takes in an epoch, also after resumes under
other world sizes: pure functions over numbers (numpy), no torch, no I/O.

An epoch starts from a *base order* of the dataset's N indices (the sampler's seeded permutation, or 0..N-1).
Its first layout of W ranks reads it *evened* as `DistributedSampler` does (`even_out`: padded by repeating its
first indices, or cut to N // W x W with drop_last), rank r taking every W-th index from position r. The epoch's
*indices* are the distinct ones of that sequence. An epoch is a list of *segments*, one per layout that read it:
segment s reads the indices no earlier segment yielded (`left_after`), in the epoch's order, evened for its own
world size in the same way. So "rank r of segment s yielded n" says exactly which indices it took (its first n),
and the yielded counts of every rank of every segment say which indices the epoch has not yet yielded. That is
all a state holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["SAMPLER_KIND", "SAMPLER_VERSION", "SAMPLER_ORDER_KEYS", "even_out", "taken", "left_after",
           "rank_indices", "resume_point", "is_sampler_state", "merge_sampler_parts", "sampler_state_in",
           "check_sampler_version", "check_sampler_state"]

SAMPLER_KIND = "ElasticDistributedSampler"
SAMPLER_VERSION = 1
# What fixes an epoch's order besides its segments: a state only resumes a sampler that agrees on all of them.
SAMPLER_ORDER_KEYS = ("size", "fingerprint", "seed", "shuffle", "drop_last")


def even_out(indices: np.ndarray, world_size: int, drop_last: bool) -> np.ndarray:
    """`indices` cut to a multiple of `world_size` (drop_last) or padded to the next multiple by repeating its first
    ones (as many times as needed), as `DistributedSampler` evens an epoch."""
    if len(indices) == 0:
        return indices
    n = len(indices) // world_size * world_size if drop_last else -(-len(indices) // world_size) * world_size
    return indices[np.arange(n) % len(indices)]


def taken(sequence: np.ndarray, world_size: int, yielded: Sequence[int]) -> np.ndarray:
    """The indices the ranks of a segment yielded: rank r its first yielded[r] of `sequence[r::world_size]`."""
    parts = [sequence[r::world_size][:int(n)] for r, n in enumerate(yielded)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def left_after(base: np.ndarray, drop_last: bool, segments: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """The epoch's indices that no segment of `segments` yielded, in the epoch's order (`base` itself when there is
    no segment: a fresh epoch)."""
    if not segments:
        return base
    left = even_out(base, segments[0]["world_size"], drop_last)[:len(base)]  # the epoch's indices, each once
    for segment in segments:
        world = segment["world_size"]
        gone = taken(even_out(left, world, drop_last), world, segment["yielded"])
        left = left[~np.isin(left, gone)]
    return left


def rank_indices(base: np.ndarray, drop_last: bool, history: Sequence[Mapping[str, Any]], rank: int,
                 world_size: int, start: int = 0) -> np.ndarray:
    """What rank `rank` of `world_size` takes in the segment after `history`, from its `start`-th index on."""
    left = left_after(base, drop_last, history)
    return even_out(left, world_size, drop_last)[rank::world_size][start:]


def resume_point(state: Mapping[str, Any], world_size: int) -> tuple[list[dict[str, Any]], int]:
    """(the segments before this rank's, indices of it already yielded) for a loaded state. A rank's own part goes
    on where it stopped; a merged state whose last layout had this world size and whose ranks all stopped at the
    same step goes on with that segment (the order of an uninterrupted epoch); any other starts a new segment."""
    segments = [dict(s) for s in state["segments"]]
    if "rank" in state:
        return segments, int(state["yielded"])
    last = segments[-1]
    if last["world_size"] == world_size and len(set(last["yielded"])) == 1:
        return segments[:-1], int(last["yielded"][0])
    return segments, 0


# ----- states: one rank's part, and the merged state of every rank -------------------------------------------------


def is_sampler_state(state: Any) -> bool:
    """An ElasticDistributedSampler state (one rank's part or a merged state)."""
    return isinstance(state, Mapping) and state.get("kind") == SAMPLER_KIND


def check_sampler_version(state: Any) -> None:
    """Raise ValueError unless `state` is an ElasticDistributedSampler state of a version this tfr_torch reads."""
    if not is_sampler_state(state):
        shown = f" with keys {sorted(map(str, state))[:8]}" if isinstance(state, Mapping) else ""
        raise ValueError(f"not an ElasticDistributedSampler state: a {type(state).__name__}{shown}")
    version = state.get("version")
    if version != SAMPLER_VERSION:
        if isinstance(version, int) and version > SAMPLER_VERSION:
            raise ValueError(f"the saved ElasticDistributedSampler state has version {version}, newer than this "
                             f"tfr_torch reads ({SAMPLER_VERSION}): upgrade tfr_torch to resume from it")
        raise ValueError(f"unknown ElasticDistributedSampler state version {version!r} (expected {SAMPLER_VERSION})")
    _check_counts(state)


def _check_counts(state: Mapping[str, Any]) -> None:
    """The counts a state holds are what they must be (a negative one would slice "all but n" off the epoch):
    ValueError naming the first that is not."""
    def check(value: Any, what: str, least: int = 0) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ValueError(f"cannot resume: the saved ElasticDistributedSampler state has {what}={value!r}, "
                             f"expected an int >= {least} (a damaged or edited state?)")

    if "yielded" in state:
        check(state["yielded"], "yielded")
    segments = state.get("segments", [])
    if not isinstance(segments, Sequence):
        raise ValueError(f"cannot resume: the saved ElasticDistributedSampler state's segments are a "
                         f"{type(segments).__name__}, expected a list")
    for i, segment in enumerate(segments):
        check(segment.get("world_size"), f"segments[{i}].world_size", 1)
        counts = segment.get("yielded", [])
        if not isinstance(counts, Sequence) or len(counts) != segment["world_size"]:
            shown = len(counts) if isinstance(counts, Sequence) else type(counts).__name__
            raise ValueError(f"cannot resume: the saved ElasticDistributedSampler state's segments[{i}] has "
                             f"world_size={segment['world_size']} but {shown} yielded counts (a damaged or edited "
                             "state?)")
        for r, n in enumerate(counts):
            check(n, f"segments[{i}].yielded[{r}]")


def check_sampler_state(state: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    """Raise ValueError naming what differs when `state` cannot resume a sampler whose order keys are `mine`."""
    check_sampler_version(state)
    for key in SAMPLER_ORDER_KEYS:
        if state.get(key) != mine[key]:
            hint = " (another dataset?)" if key in ("size", "fingerprint") else ""
            raise ValueError(f"cannot resume: the saved state has {key}={state.get(key)!r}, this sampler has "
                             f"{mine[key]!r}{hint}")


def merge_sampler_parts(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state for the whole job's epoch from every rank's part (`tfr_torch.elastic_state` calls it), or the one
    merged state given."""
    for p in parts:
        check_sampler_version(p)
    merged = [p for p in parts if "rank" not in p]
    pieces = [p for p in parts if "rank" in p]
    if merged:
        if pieces or any(p != merged[0] for p in merged[1:]):
            raise ValueError("give either one merged ElasticDistributedSampler state or every rank's part")
        return dict(merged[0])
    if not pieces:
        raise ValueError("no ElasticDistributedSampler state given")
    first = pieces[0]
    for p in pieces[1:]:
        for key in ("epoch", *SAMPLER_ORDER_KEYS, "world_size", "segments"):
            if p.get(key) != first.get(key):
                raise ValueError(f"the sampler states come from different epochs or samplers: {key}={first.get(key)!r}"
                                 f" in rank {first['rank']}'s, {key}={p.get(key)!r} in rank {p['rank']}'s")
    world = int(first["world_size"])
    yielded: list[int | None] = [None] * world
    for p in pieces:
        r = p["rank"]
        if not 0 <= r < world:
            raise ValueError(f"a sampler state names rank {r}, outside its world size of {world}")
        if yielded[r] is not None and yielded[r] != p["yielded"]:
            raise ValueError(f"two sampler states for rank {r} disagree: yielded={yielded[r]} and {p['yielded']} "
                             "(states saved at different steps?)")
        yielded[r] = int(p["yielded"])
    missing = [r for r in range(world) if yielded[r] is None]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ValueError(f"the sampler states of {len(missing)} of the {world} ranks are missing (rank {shown}): "
                         "gather every rank's state")
    state = {"kind": SAMPLER_KIND, "version": SAMPLER_VERSION, "epoch": first["epoch"],
             **{key: first[key] for key in SAMPLER_ORDER_KEYS}}
    state["segments"] = [*first["segments"], {"world_size": world, "yielded": yielded}]
    return state


def sampler_state_in(loader_state: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ElasticDistributedSampler state inside a torchdata StatefulDataLoader state (its sampler given as
    `sampler=`, or inside torchdata's BatchSampler, which `batch_size=` makes), or None."""
    main = loader_state.get("_snapshot", {}).get("_main_snapshot") if "_snapshot" in loader_state else loader_state
    if not isinstance(main, Mapping):
        return None
    batching = main.get("_sampler_iter_state")
    for found in (main.get("_index_sampler_state"),
                  batching.get("sampler_state") if isinstance(batching, Mapping) else None):
        if is_sampler_state(found):
            if loader_state.get("_steps_since_snapshot", 0):
                raise ValueError(f"this StatefulDataLoader state is {loader_state['_steps_since_snapshot']} step(s) "
                                 "past its last snapshot of the sampler's state: build the loader with "
                                 "snapshot_every_n_steps=1 (the default) to resume it under another layout")
            assert isinstance(found, Mapping)  # is_sampler_state checked it
            return found
    return None
