"""Trajectory windows of an RLDS episode, as Octo's and OpenVLA's data pipelines build them: pure index functions
(which steps each frame sees) and one gather that applies them to an episode's `steps` dict of `[T, ...]` values.

For step t of an episode of T steps (Octo's `chunk_act_obs`, octo/data/traj_transforms.py):

- observation history: steps `t - history + 1 .. t`; before the episode's start the *first observation is
  repeated*, and `timestep_pad_mask[k]` is False there (True: a real step);
- action chunk: steps `t .. t + future - 1`; past the episode's end the *last action is repeated* (not zeros),
  and `action_pad_mask[j]` is False there. (Octo's own mask also marks actions past a relabeled goal as padding,
  computed with an offset of its own; here the mask says only whether the action step exists in the episode.)
- goal (`goal="uniform"`): a step drawn uniformly from `t + 1 .. T - 1` (the last step for the last frame), as
  Octo's `goal_relabeling.uniform`; `goal="last"`: the episode's last step. The goal's observation comes as
  `goal` with its step number in `goal_timestep`.
- subsampling (`max_length`): an episode longer than `max_length` keeps `max_length` of its frames, drawn without
  replacement (kept in step order) after windowing, as Octo's `subsample` does after `chunk_act_obs`: the kept
  frames still see their neighbouring steps. Random draws come from the generator the caller passes (seeded).
- every other step value (`language_instruction`, `reward`, `is_first`, ...) is taken at step t.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Optional

import numpy as np
import torch

__all__ = ["Window", "FrameIndex", "frame_index", "gather_frames", "window_episode", "episode_length"]

GOALS = (None, "uniform", "last")


@dataclass(frozen=True)
class Window:
    """What each frame sample holds: `history` observation steps (the current one included), `future` action
    steps (the current one included: an action chunk), an optional `goal` ("uniform" or "last"), at most
    `max_length` frames per episode (None: all), and the keys of the observation and action in each step.

    >>> Window(history=2, future=4, goal="uniform")
    Window(history=2, future=4, goal='uniform', max_length=None, observation='observation', action='action')
    """

    history: int = 1
    future: int = 1
    goal: Optional[Literal["uniform", "last"]] = None
    max_length: Optional[int] = None
    observation: str = "observation"
    action: str = "action"

    def __post_init__(self) -> None:
        for name in ("history", "future"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Window.{name} must be a positive int (steps), got {value!r}")
        if self.goal not in GOALS:
            raise ValueError(f"Window.goal must be None, 'uniform' or 'last', got {self.goal!r}")
        if self.max_length is not None and (isinstance(self.max_length, bool) or not isinstance(self.max_length, int)
                                            or self.max_length < 1):
            raise ValueError(f"Window.max_length must be None or a positive int (frames), got {self.max_length!r}")


class FrameIndex(NamedTuple):
    """The steps behind each kept frame of one episode (numpy int64/bool arrays, one row per frame)."""

    timestep: np.ndarray          # [N] the frame's step t
    history: np.ndarray           # [N, history] observation steps (clamped to 0)
    timestep_pad_mask: np.ndarray  # [N, history] True where the step exists
    action: np.ndarray            # [N, future] action steps (clamped to T - 1)
    action_pad_mask: np.ndarray   # [N, future] True where the step exists
    goal: np.ndarray              # [N] goal step (-1 without goal)


def frame_index(length: int, window: Window, rng: np.random.Generator | None = None) -> FrameIndex:
    """Which steps each frame of an episode of `length` steps sees (see the module doc). `rng` draws the uniform
    goals and the subsample; it is needed only for those.

    >>> frame_index(3, Window(history=2, future=2)).history.tolist()
    [[0, 0], [0, 1], [1, 2]]
    """
    if length < 0:
        raise ValueError(f"an episode's length must be >= 0, got {length}")
    t = np.arange(length, dtype=np.int64)
    past = t[:, None] + np.arange(-window.history + 1, 1, dtype=np.int64)
    ahead = t[:, None] + np.arange(window.future, dtype=np.int64)
    if window.goal == "uniform":
        low = np.minimum(t + 1, length - 1)
        goal = _random(rng, "goal='uniform'").integers(low, length) if length else t.copy()
    elif window.goal == "last":
        goal = np.full(length, length - 1, dtype=np.int64)
    else:
        goal = np.full(length, -1, dtype=np.int64)
    index = FrameIndex(t, np.maximum(past, 0), past >= 0, np.minimum(ahead, length - 1), ahead < length,
                       goal.astype(np.int64))
    if window.max_length is not None and length > window.max_length:
        keep = np.sort(_random(rng, "max_length").choice(length, window.max_length, replace=False))
        index = FrameIndex(*(a[keep] for a in index))
    return index


def _random(rng: np.random.Generator | None, why: str) -> np.random.Generator:
    if rng is None:
        raise ValueError(f"{why} draws at random: pass a seeded numpy Generator (rng=np.random.default_rng(seed))")
    return rng


def episode_length(steps: Mapping[str, Any], window: Window) -> int:
    """T: the length of the action (the steps' `window.action` value)."""
    if window.action not in steps:
        raise KeyError(f"the episode's steps have no action {window.action!r} (keys: {sorted(steps)}); set "
                       "Window(action=...)")
    action = steps[window.action]
    length = int(action.shape[0]) if isinstance(action, torch.Tensor) else len(action)
    _check_lengths(steps, "", length, window.action)
    return length


def _check_lengths(value: Mapping[str, Any], key: str, length: int, action: str) -> None:
    """ValueError naming the first step value (a tensor or list) that holds another number of steps than the
    action: a window would clamp to the steps it has and give frames whose values are another step's."""
    for k, v in value.items():
        name = f"{key}/{k}" if key else str(k)
        if isinstance(v, Mapping):
            _check_lengths(v, name, length, action)
            continue
        n = int(v.shape[0]) if isinstance(v, torch.Tensor) and v.dim() else len(v) if isinstance(v, list) else None
        if n is not None and n != length:
            raise ValueError(f"the episode's step value {name!r} holds {n} steps but its action {action!r} holds "
                             f"{length}: every step value must hold one row per step (check the dataset's "
                             "standardize function)")


def _take(value: Any, idx: np.ndarray, key: str) -> Any:
    """value[idx] for a [T, ...] tensor (a new tensor), a list of T items (nested lists), or a dict of them."""
    if isinstance(value, torch.Tensor):
        if np.ndim(idx) == 0:
            return value[int(idx)].clone()  # a copy, not a view that would keep the whole episode alive
        flat = np.ascontiguousarray(idx, dtype=np.int64).reshape(-1)
        return _rows(value, flat).reshape(*idx.shape, *value.shape[1:])
    if isinstance(value, Mapping):
        return {k: _take(v, idx, f"{key}/{k}") for k, v in value.items()}
    if isinstance(value, list):
        return _take_list(value, idx)
    raise TypeError(f"step value {key!r} is a {type(value).__name__}: windows take [T, ...] tensors, lists of T "
                    "values and dicts of them (a RaggedTensor or sparse value can be dropped or converted by the "
                    "dataset's standardize function)")


def _rows(value: torch.Tensor, flat: np.ndarray) -> torch.Tensor:
    """value[flat] (rows of a [T, ...] tensor), a new tensor. On the CPU, numpy's take on the rows' bytes: one
    thread, any dtype (torch's index_select runs its intra-op threads on an episode's images, which costs ~1 ms a
    call on a busy machine; advanced indexing, value[tensor], ~1,000x more than either on small gathers)."""
    if (value.device.type != "cpu" or value.layout != torch.strided or value.dim() == 0 or value.requires_grad
            or 0 in value.shape):  # (an empty episode: no rows to reshape)
        return value.index_select(0, torch.from_numpy(flat).to(value.device))
    rows = value.reshape(value.shape[0], -1)
    if rows.stride() != (rows.shape[1], 1):  # (an expanded value can be "contiguous" with a stride of 0)
        rows = rows.clone(memory_format=torch.contiguous_format)
    taken = np.take(rows.view(torch.uint8).numpy(), flat, axis=0)
    return torch.from_numpy(taken).view(value.dtype).reshape(len(flat), *value.shape[1:])


def _take_list(value: list[Any], idx: Any) -> Any:
    if np.ndim(idx) == 0:
        return value[int(idx)]
    return [_take_list(value, i) for i in idx]


def gather_frames(steps: Mapping[str, Any], window: Window, index: FrameIndex,
                  rows: Any = slice(None)) -> dict[str, Any]:
    """The frames `rows` of `index` gathered from `steps` (a dict of [T, ...] values): with an int row, one frame
    (observation leaves [history, ...], action [future, ...]); with a slice or array, a leading frame axis.
    Every tensor is new (no view of the episode), so a frame kept in a buffer holds only its own bytes."""
    return _gather(steps, window, index, rows, _take)


def _gather(steps: Mapping[str, Any], window: Window, index: FrameIndex, rows: Any,
            take: Callable[[Any, np.ndarray, str], Any]) -> dict[str, Any]:
    """gather_frames with `take(value, steps_index, key)` taking each step value (tfr_torch.rlds.packed defers the
    tensors' gathers: it writes them straight into its rows)."""
    out: dict[str, Any] = {}
    for key, value in steps.items():
        if key == window.observation:
            out[key] = take(value, index.history[rows], key)
            if window.goal is not None:
                out["goal"] = take(value, index.goal[rows], key)
        elif key == window.action:
            out[key] = take(value, index.action[rows], key)
        else:
            out[key] = take(value, index.timestep[rows], key)
    if window.observation not in steps:
        raise KeyError(f"the episode's steps have no observation {window.observation!r} (keys: {sorted(steps)}); "
                       "set Window(observation=...)")
    out["timestep"] = torch.as_tensor(index.timestep[rows])
    out["timestep_pad_mask"] = torch.as_tensor(index.timestep_pad_mask[rows])
    out["action_pad_mask"] = torch.as_tensor(index.action_pad_mask[rows])
    if window.goal is not None:
        out["goal_timestep"] = torch.as_tensor(index.goal[rows])
    return out


def window_episode(steps: Mapping[str, Any], window: Window, rng: np.random.Generator | None = None) -> dict[str, Any]:
    """A whole episode's windows at once (Octo's trajectory transforms): every value with a leading axis of the
    kept frames, observations `[N, history, ...]`, the action `[N, future, ...]`, masks `[N, history]` and
    `[N, future]`.

    >>> steps = {"observation": {"x": torch.arange(3)}, "action": torch.arange(3.0)[:, None]}
    >>> window_episode(steps, Window(history=2, future=2))["observation"]["x"].tolist()
    [[0, 0], [0, 1], [1, 2]]
    """
    return gather_frames(steps, window, frame_index(episode_length(steps, window), window, rng))
