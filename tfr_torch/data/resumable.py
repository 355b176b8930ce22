"""TFRecordDataset's resumable state (a mixin of its class, data/dataset.py): `state_dict` / `load_state_dict`,
where each reader stands in the epoch and how a loaded state is resumed, by the same layout or, through
elastic.py's pure functions of the state, by another world size or number of DataLoader workers."""

from __future__ import annotations

import os
import sys
import zlib
from collections.abc import Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import get_worker_info

from tfr_torch.data.elastic import LAYOUT_KEYS, ORDER_KEYS, STATE_VERSION, as_merged, is_part
from tfr_torch.data.state_check import check_state

__all__ = ["ResumableState"]

_MAX_SKIPPED = 1 << 16  # bad records a reader's part names at most (more: not named, see _part)


class ResumableState:
    """The state methods of TFRecordDataset, which sets every attribute below."""

    seed: int
    rank: int
    world_size: int
    paths: list[str]
    shuffle: bool
    pad: bool
    interleave: int
    shuffle_buffer: int
    batch_size: int | None
    on_error: Any
    _global_shuffle: bool
    _counts: list[int] | None
    _epoch: torch.Tensor
    _resume: dict[str, Any] | None
    _resume_taken: torch.Tensor
    _position: int
    _worker: tuple[int, int]
    _history: list[dict[str, Any]]
    _layout: dict[str, Any] | None
    _progress_epoch: int | None

    if TYPE_CHECKING:
        @property
        def epoch(self) -> int: ...  # TFRecordDataset's own, beside its set_epoch

    def state_dict(self) -> dict[str, Any]:
        """Where this reader (this worker, in a DataLoader worker process) stands in the current epoch: the epoch,
        what fixes its order, its layout (world size, workers, batch) and how many items it yielded. Every reader's
        part together (`tfr_torch.elastic_state`) says which records the epoch has yielded, so the rest can be read
        by another world size or number of workers. A state loaded but not yet iterated is returned as this
        reader's part of it, so saving again right after restoring loses nothing."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else self._worker
        resume = self._pending_resume()
        if resume is not None:
            if is_part(resume):  # as loaded (a worker's own part)
                return dict(resume)
            history, layout, skip, consumed = self._resume_point(resume, worker, workers)
            return self._part(history, layout, worker, skip, resume.get("exact") is True, consumed,
                              _loaded_skipped(resume, history, self.rank, worker))
        if self._progress_epoch != self.epoch:  # set_epoch since the last pass began: nothing of it read yet
            return self._part([], self._layout_for(workers), worker, 0)
        layout = self._layout if self._layout is not None else self._layout_for(workers)
        progress = getattr(self, "_order_progress", None)  # (a dataset pickled before it: none)
        consumed = None if progress is None else progress.consumed(self._position * (self.batch_size or 1))
        skipped = None if progress is None else progress.skipped_numbers()
        return self._part(self._history, layout, worker, self._position, consumed=consumed, skipped=skipped)

    def _pending_resume(self) -> dict[str, Any] | None:
        """The loaded state the next (or the just begun) pass of this reader resumes, or None: none loaded, or it
        is of another epoch than the current one (set_epoch since), or DataLoader workers of an earlier pass took
        it (see _takes_resume)."""
        resume = self._resume
        if resume is None or resume.get("epoch") != self.epoch:
            return None
        taken = int(self._resume_taken)
        if taken == 0:
            return resume
        this_pass = _worker_pass()
        if this_pass is None:
            return None  # in this process: DataLoader workers resumed it, what this process holds is spent
        return resume if taken == this_pass else None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration of `state["epoch"]` yields what the state says is left. `state` is this
        reader's own part (what StatefulDataLoader gives each worker back: the same layout), or the merged state of
        every reader (`tfr_torch.elastic_state`), which resumes under any world size and number of workers.
        Sets the dataset's epoch to the state's; StatefulDataLoader's own load of a state of an earlier epoch than
        the one the dataset is set to resumes nothing (see `later_epoch_set`)."""
        state = self._checked_state(state)
        if later_epoch_set(state, self.epoch):
            self._resume = None
            return
        self._resume = dict(state)
        self._resume_taken.fill_(0)
        self._epoch.fill_(int(state["epoch"]))

    def _checked_state(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """`state` checked against this dataset (ValueError naming what differs), as load_state_dict takes it; this
        dataset is left as it was (a MixedDataset checks every dataset's part before any loads its own)."""
        if check_state(state) == 1:
            expected = {"seed": self.seed, "rank": self.rank, "world_size": self.world_size,
                        "files": len(self.paths)}
            for key, value in expected.items():
                if state.get(key) != value:
                    raise ValueError(f"cannot resume: the saved state has {key}={state.get(key)!r}, this dataset "
                                     f"has {value!r}")
            return state
        mine = self._order_info()
        for key in ORDER_KEYS:
            if key == "records" and (state.get(key) is None or mine[key] is None):
                continue  # counted on one side only
            if state.get(key) != mine[key]:
                raise ValueError(f"cannot resume: the saved state has {key}={state.get(key)!r}, this dataset has "
                                 f"{mine[key]!r}")
        if is_part(state):
            whole = as_merged(state)
            if whole is not None:
                state = whole
            elif (state["rank"], state["world_size"]) != (self.rank, self.world_size):
                key = "rank" if state["world_size"] == self.world_size else "world_size"
                raise ValueError(f"cannot resume: the saved state has {key}={state[key]!r}, this dataset has "
                                 f"{getattr(self, key)!r}: it is one reader's part (rank {state['rank']} of "
                                 f"{state['world_size']}, worker {state['worker']} of {state['num_workers']}) and "
                                 f"this dataset is rank {self.rank} of {self.world_size}; to resume under another "
                                 "layout, merge every reader's part with tfr_torch.elastic_state(...) and load that")
        return state

    def _takes_resume(self) -> bool:
        """Whether this iteration resumes the loaded state. In this process: yes (it is dropped once taken). In a
        DataLoader worker: each worker of a pass gets its own copy of the state from the main process's dataset,
        which keeps it, so it is taken only by the first pass of workers that iterates (all of its workers: they
        share its base seed), never again by a later pass over the same epoch (a DataLoader without persistent
        workers, where the user calls no set_epoch)."""
        this_pass = _worker_pass()
        if this_pass is None:
            return True
        taken = int(self._resume_taken)
        if taken == 0:
            self._resume_taken.fill_(this_pass)  # the pass's other workers write the same number
            return True
        return taken == this_pass

    def _order_info(self) -> dict[str, Any]:
        """What fixes an epoch's order besides the layout (ORDER_KEYS): a state resumes only a dataset that agrees."""
        names = [os.path.basename(p) for p in self.paths]
        counts = self._counts
        buffered = self.shuffle and not self._global_shuffle
        return {"seed": self.seed, "files": len(self.paths),
                "fingerprint": f"{zlib.crc32(chr(10).join(names).encode()):08x}",
                "records": None if counts is None else int(sum(counts)), "shuffle": self.shuffle,
                "global_shuffle": self._global_shuffle, "pad": self.pad,
                "interleave": self.interleave if buffered else None,
                "shuffle_buffer": self.shuffle_buffer if buffered else None}

    def _layout_for(self, workers: int, resumed: bool = False) -> dict[str, Any]:
        """This reader's layout (see elastic.LAYOUT_KEYS); `resumed`: a later segment, always split by ranges."""
        if self._global_shuffle:
            split = "global"
        elif not resumed and self._counts is None and len(self.paths) >= workers * self.world_size:
            split = "files"
        else:
            split = "ranges"
        return {"world_size": self.world_size, "num_workers": workers, "batch": self.batch_size or 1, "split": split}

    def _part(self, history: list[dict[str, Any]], layout: Mapping[str, Any], worker: int,
              yielded: int, exact: bool | None = None, consumed: int | None = None,
              skipped: list[int] | None = None) -> dict[str, Any]:
        """This reader's part. `exact` (default: this dataset raises on bad records): its `yielded` items are the
        first ones of its order, none skipped before them. `consumed` (a global shuffle's): the positions of its
        order it went past, bad records skipped among them counted (see OrderProgress); a global shuffle resumed
        from it starts right after them instead of reading them again (see EpochRecords._records), and an
        elastic merge takes them as read (elastic.consumed). None: not known (the part says nothing of it).
        `skipped` (a reader of file runs under on_error other than "raise"): the global numbers of the bad records
        it skipped (see OrderProgress), for an elastic merge to replay its order as it was read; None: not known,
        or too many to keep (a merge then takes its yielded items as the first of its order)."""
        exact = self.on_error == "raise" if exact is None else exact
        part = {"version": STATE_VERSION, "epoch": self.epoch, **self._order_info(), "segments": list(history),
                **layout, "rank": self.rank, "worker": worker, "yielded": int(yielded), "exact": bool(exact)}
        if consumed is None and yielded == 0:
            consumed = 0
        if consumed is not None and layout.get("split") == "global":
            part["consumed"] = int(consumed)
        if skipped is not None and layout.get("split") != "global" and len(skipped) <= _MAX_SKIPPED:
            part["skipped"] = [int(n) for n in skipped]
        return part

    def _resume_point(self, state: Mapping[str, Any], worker: int,
                      workers: int) -> tuple[list[dict[str, Any]], dict[str, Any], int, int | None]:
        """(the segments before this reader's, this reader's layout, items of it already yielded, positions of its
        order gone past or None where not known; see _part) for a loaded v2 state: the state's last segment when
        this reader's layout is its layout, else a new segment."""
        if is_part(state):
            layout = {key: state[key] for key in LAYOUT_KEYS}
            if (worker, workers) != (state["worker"], state["num_workers"]):
                raise ValueError(f"cannot resume: the state is worker {state['worker']} of {state['num_workers']}'s "
                                 f"part and is read by worker {worker} of {workers}: load each worker's own part "
                                 "(StatefulDataLoader does), or merge every part with tfr_torch.elastic_state(...) "
                                 "to resume under another number of workers")
            if layout.get("batch") != (self.batch_size or 1):  # its `yielded` counts items of that many records
                raise ValueError(f"cannot resume: the state is a part of a pass in batches of {layout.get('batch')} "
                                 f"record(s) and this dataset makes batches of {self.batch_size or 1}: merge every "
                                 "part with tfr_torch.elastic_state(...) to resume with another batch size")
            yielded = int(state["yielded"])
            return list(state["segments"]), layout, yielded, _consumed(state, state.get("consumed"), yielded)
        segments = list(state["segments"])
        last = segments[-1]
        # a later segment is always split by ranges; and whether counts are known can change while workers start
        # (another worker counting), so it decides nothing here unless the last segment read whole files
        here = self._layout_for(workers, resumed=last["split"] != "files")
        if all(last[key] == here[key] for key in LAYOUT_KEYS):
            yielded = int(last["yielded"][self.rank][worker])
            went = last["consumed"][self.rank][worker] if "consumed" in last else None
            return segments[:-1], here, yielded, _consumed(state, went, yielded)
        return segments, self._layout_for(workers, resumed=True), 0, 0


def later_epoch_set(state: Mapping[str, Any], epoch: int) -> bool:
    """Whether a (checked) state that torchdata's StatefulDataLoader is loading is of an earlier epoch than `epoch`,
    the one its dataset or sampler is set to; such a state is not resumed and the epoch is not set back.
    StatefulDataLoader's `load_state_dict` only keeps the state: it loads it into the dataset (in each DataLoader
    worker) and the sampler as its next pass begins, after the training loop's `set_epoch`. A checkpoint taken
    after an epoch's loop ended makes that pass start afresh, and the loop resuming from it calls
    `set_epoch(saved + 1)` first: setting the epoch back would read the saved epoch again (in workers, whose epoch
    is shared with the main process) or resume its empty remainder in place of the next epoch (in the main
    process). A state given to `load_state_dict` by anything else (the user, a wrapper) always resumes its epoch
    and sets it, also back to an earlier one."""
    return int(state["epoch"]) < epoch and _loaded_by_stateful_dataloader()


def _loaded_by_stateful_dataloader() -> bool:
    """Whether the `load_state_dict` that asks was called by torchdata's StatefulDataLoader (its restore of a saved
    state in the main process or a DataLoader worker, or its BatchSampler's): the first caller that is neither
    tfr_torch's nor a `load_state_dict` (a user's dataset that passes its state on to ours). Only that one:
    tfr_torch's own loads inside a pass (a cache resuming its source, a mixture its datasets) run under the
    DataLoader's fetcher, also where torchdata drives the pass, and are direct loads."""
    frame: FrameType | None = sys._getframe(2)  # what called later_epoch_set: a load_state_dict
    while frame is not None and (str(frame.f_globals.get("__name__", "")).startswith("tfr_torch.")
                                 or frame.f_code.co_name == "load_state_dict"):
        frame = frame.f_back  # (MixedDataset's merged load is one frame deeper than its load_state_dict)
    return frame is not None and str(frame.f_globals.get("__name__", "")).startswith("torchdata.stateful_dataloader")


def _loaded_skipped(state: Mapping[str, Any], history: list[dict[str, Any]], rank: int, worker: int
                    ) -> list[int] | None:
    """The skipped records a loaded state gives the reader resuming its last segment (see _part), or None."""
    if is_part(state):
        found = state.get("skipped")
        return list(found) if found is not None else None
    segments = state["segments"]
    rows = segments[-1].get("skipped") if len(history) == len(segments) - 1 else None
    return list(rows[rank][worker]) if rows is not None and rows[rank][worker] is not None else None


def _consumed(state: Mapping[str, Any], went: Any, yielded: int) -> int | None:
    """A reader's positions gone past as a state gives them (`went`: its "consumed"); for a state
    without them whose items are the first of its order ("exact": none skipped) read in an order of positions (a
    global shuffle, or file order split by record ranges), its yielded records; else None."""
    if went is None:
        layout = state if is_part(state) else state["segments"][-1]
        if state.get("exact") is True and (state.get("global_shuffle") or (
                not state.get("shuffle") and layout["split"] == "ranges")):  # an order of positions, no buffer
            return yielded * int(layout["batch"])
        return None
    return int(went)  # checked as the state was loaded (state_check.py)


def _worker_pass() -> int | None:
    """In a DataLoader worker: a nonzero number of the loader's pass (iterator) this worker serves, the same in all
    its workers (their base seed: torch gives worker i the seed base + i); None in the main process."""
    info = get_worker_info()
    seed = getattr(info, "seed", None)
    if info is None or seed is None:
        return None
    return ((int(seed) - int(info.id)) & 0x7FFF_FFFF_FFFF_FFFF) or 1
