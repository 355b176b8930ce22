"""MixedDataset's resumable state (a mixin of its class, data/mixed.py): `state_dict` / `load_state_dict`, where a
reader's mixture stands beside each dataset's own state, and a whole job's merged state (tfr_torch.elastic_state),
which each dataset resumes under any layout while the mixture draws afresh."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import IterableDataset, get_worker_info

from tfr_torch.data.elastic import MIXTURE_KIND
from tfr_torch.data.resumable import _worker_pass, later_epoch_set

__all__ = ["MixtureState", "MIXED_STATE_VERSION"]

MIXED_STATE_VERSION = 1  # the version of MixedDataset.state_dict's layout
STATE_SETS = ("exhausted", "cycled", "restart", "started")  # the positions of datasets a state lists


class MixtureState:
    """The state methods of MixedDataset, which sets every attribute below."""

    names: list[str]
    datasets: list[IterableDataset[Any]]
    weights: list[float]
    stop: str
    seed: int
    _epoch: torch.Tensor
    _live: dict[str, Any] | None
    _resume: dict[str, Any] | None
    _elastic: dict[str, Any] | None
    _elastic_taken: torch.Tensor

    if TYPE_CHECKING:
        @property
        def epoch(self) -> int: ...  # MixedDataset's own, beside its set_epoch

        def _reader(self) -> tuple[int, int, int]: ...  # MixedDataset's: (rank, worker, workers) of this reader

    def state_dict(self) -> dict[str, Any]:
        """Where this reader's mixture stands: its epoch, layout and draws, and each dataset's own state_dict (in a
        DataLoader worker, this worker's part, as torchdata's StatefulDataLoader collects them)."""
        rank, worker, workers = self._reader()
        if self._resume is not None and self._resume["epoch"] == self.epoch:  # loaded, not yet iterated: saved
            return dict(self._resume)  # again as it was (not after set_epoch to another epoch)
        if (self._elastic is not None and self._elastic["epoch"] == self.epoch
                and (get_worker_info() is not None or int(self._elastic_taken) == 0)):
            return dict(self._elastic["state"])  # a merged state loaded, not yet iterated (nor taken by workers)
        live = self._live if self._live is not None and self._live["epoch"] == self.epoch else None
        states = {}
        for name, dataset in zip(self.names, self.datasets):
            if not hasattr(dataset, "state_dict"):
                raise TypeError(f"dataset {name!r} ({type(dataset).__name__}) has no state_dict: a MixedDataset is "
                                "resumable when each of its datasets is")
            states[name] = dataset.state_dict()
        return {"version": MIXED_STATE_VERSION, "kind": MIXTURE_KIND, "names": list(self.names),
                "weights": list(self.weights), "stop": self.stop, "seed": self.seed, "epoch": self.epoch,
                "rank": rank, "worker": worker, "workers": workers, "segment": live["segment"] if live else 0,
                "draws": live["draws"] if live else 0, **{key: list(live[key]) if live else [] for key in STATE_SETS},
                "datasets": states}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from `state_dict()`: the next iteration of that epoch (set_epoch to it, or it is set here) draws
        on from where the state was taken, and each dataset resumes from its own state. StatefulDataLoader's
        own load of a state of an earlier epoch than the one the mixture is set to resumes nothing (see
        `later_epoch_set`)."""
        if not isinstance(state, Mapping) or state.get("kind") != MIXTURE_KIND:
            raise ValueError("not a MixedDataset state (from MixedDataset.state_dict or tfr_torch.elastic_state)")
        if state.get("version") != MIXED_STATE_VERSION:
            raise ValueError(f"MixedDataset state version {state.get('version')!r}; this tfr_torch reads version "
                             f"{MIXED_STATE_VERSION}")
        mine = {"names": list(self.names), "weights": list(self.weights), "stop": self.stop, "seed": self.seed}
        differ = [f"{key} {state.get(key)!r} (here {value!r})" for key, value in mine.items()
                  if state.get(key) != value]
        if differ:
            raise ValueError(f"this state is of another mixture: {'; '.join(differ)}")
        held = state.get("datasets")
        if not isinstance(held, Mapping) or set(held) != set(self.names):
            shown = sorted(map(str, held)) if isinstance(held, Mapping) else f"as a {type(held).__name__}"
            raise ValueError(f"this state holds datasets {shown}, the mixture {sorted(self.names)}")
        if state.get("merged"):
            self._load_merged(state)
            return
        for key in ("draws", "epoch", "rank", "worker", "workers"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"MixedDataset state: {key} must be a non-negative int, got {value!r}")
        for key in STATE_SETS:
            value = state.get(key)
            if not isinstance(value, list) or any(not isinstance(k, int) or not 0 <= k < len(self.names)
                                                  for k in value):
                raise ValueError(f"MixedDataset state: {key} must list dataset positions, got {value!r}")
        self._probe_merged(state)  # each dataset's part checked now: one refused as the pass begins would come
        # after the datasets before it had loaded theirs, and the next pass would resume them without the mixture
        if later_epoch_set(state, self.epoch):  # not resumed, the epoch not set back (see later_epoch_set)
            self._resume = None
            return
        self._resume = dict(state)
        self._epoch.fill_(int(state["epoch"]))
        for dataset in self.datasets:
            if hasattr(dataset, "set_epoch"):
                dataset.set_epoch(int(state["epoch"]))

    def _load_merged(self, state: Mapping[str, Any]) -> None:
        """A whole job's state (tfr_torch.elastic_state): each dataset loads its merged part now (they resume under
        any layout); the mixture's next pass over that epoch draws afresh for the new layout."""
        for key in ("epoch", "segment"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "epoch" else 1):
                raise ValueError(f"merged MixedDataset state: {key} must be an int >= {0 if key == 'epoch' else 1}, "
                                 f"got {value!r}")
        if not isinstance(state.get("over"), bool):
            raise ValueError(f"merged MixedDataset state: over must be a bool, got {state.get('over')!r}")
        epoch = int(state["epoch"])
        if not state["over"]:
            self._probe_merged(state)  # every part checked before any dataset (or this mixture) changes
        self._resume = None
        if later_epoch_set(state, self.epoch):  # not resumed, the epoch not set back (see later_epoch_set)
            self._elastic = None
            return
        self._epoch.fill_(epoch)
        for name, dataset in zip(self.names, self.datasets):
            if hasattr(dataset, "set_epoch"):
                dataset.set_epoch(epoch)
            if state["over"]:
                continue  # the epoch had ended: nothing to resume in it (a second pass over it is a whole one)
            if not hasattr(dataset, "load_state_dict"):
                raise TypeError(f"dataset {name!r} ({type(dataset).__name__}) has no load_state_dict")
            try:
                dataset.load_state_dict(state["datasets"][name])
            except ValueError as error:
                raise ValueError(f"MixedDataset dataset {name!r}: {error}") from None
        self._elastic = {"epoch": epoch, "segment": int(state["segment"]), "over": bool(state["over"]),
                         "state": dict(state)}
        self._elastic_taken.fill_(0)

    def _probe_merged(self, state: Mapping[str, Any]) -> None:
        """Each dataset's part (merged, or a reader's) checked before any dataset takes its own (a half-loaded
        mixture would resume the datasets before a refused part): by the dataset's own check where it has one
        (TFRecordDataset, MixedDataset), which changes nothing; a dataset without one is checked by its load."""
        for name, dataset in zip(self.names, self.datasets):
            if not hasattr(dataset, "load_state_dict"):
                raise TypeError(f"dataset {name!r} ({type(dataset).__name__}) has no load_state_dict")
            check = getattr(dataset, "_checked_state", None)
            if check is None:
                continue
            try:
                check(state["datasets"][name])
            except ValueError as error:
                raise ValueError(f"MixedDataset dataset {name!r}: {error}") from None

    def _checked_state(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """A state of this mixture (merged, or a reader's) checked, every dataset's part by its own check (see
        _probe_merged); nothing changes here. A reader's layout is checked when it is iterated."""
        if not isinstance(state, Mapping) or state.get("kind") != MIXTURE_KIND:
            raise ValueError("not a MixedDataset state (from MixedDataset.state_dict or tfr_torch.elastic_state)")
        mine = {"names": list(self.names), "weights": list(self.weights), "stop": self.stop, "seed": self.seed}
        differ = [f"{key} {state.get(key)!r} (here {value!r})" for key, value in mine.items()
                  if state.get(key) != value]
        if differ:
            raise ValueError(f"this state is of another mixture: {'; '.join(differ)}")
        held = state.get("datasets")
        if not isinstance(held, Mapping) or set(held) != set(self.names):
            raise ValueError(f"this state holds datasets {sorted(map(str, held or ()))}, the mixture "
                             f"{sorted(self.names)}")
        if not (state.get("merged") and state.get("over")):
            self._probe_merged(state)
        return state

    def _take_elastic(self, epoch: int) -> dict[str, Any] | None:
        """The merged state this pass resumes, if any: in this process the next pass of its epoch; in DataLoader
        workers the first pass whose workers iterate (all of them; as TFRecordDataset takes its own)."""
        elastic, self._elastic = self._elastic, None  # this copy's pass consults it once
        if elastic is None or elastic["epoch"] != epoch:
            return None
        this_pass = _worker_pass()
        if this_pass is None:
            return elastic
        taken = int(self._elastic_taken)
        if taken == 0:
            self._elastic_taken.fill_(this_pass)  # the pass's other workers write the same number
            return elastic
        return elastic if taken == this_pass else None

    def _check_layout(self, state: Mapping[str, Any], rank: int, worker: int, workers: int) -> None:
        here = {"rank": rank, "worker": worker, "workers": workers}
        differ = [f"{key} {state[key]} (here {value})" for key, value in here.items() if state[key] != value]
        if differ:
            raise ValueError(f"this MixedDataset state was taken by another reader: {'; '.join(differ)}; a mixture "
                             "resumes with the same ranks and DataLoader workers")
