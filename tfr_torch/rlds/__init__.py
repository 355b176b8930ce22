"""RLDS episodes for policy training (as Octo's and OpenVLA's pipelines consume them), without TensorFlow:
trajectory windows (observation history, action chunks, padding masks, goal relabeling, subsampling), frame
samples through a bounded shuffle buffer, and weighted mixtures of datasets, sharded, reproducible and resumable.

>>> import tfr_torch
>>> ds = tfr_torch.rlds.FrameDataset("data/bridge/1.0.0", tfr_torch.rlds.Window(history=2, future=4))  # doctest: +SKIP
"""

from __future__ import annotations

from tfr_torch._lazy import lazy_exports

_EXPORTS = {
    "Window": "tfr_torch.rlds.windows",
    "FrameIndex": "tfr_torch.rlds.windows",
    "frame_index": "tfr_torch.rlds.windows",
    "gather_frames": "tfr_torch.rlds.windows",
    "window_episode": "tfr_torch.rlds.windows",
    "Source": "tfr_torch.rlds.dataset",
    "FrameDataset": "tfr_torch.rlds.dataset",
    "collate_frames": "tfr_torch.rlds.sampling",
    "frame_nbytes": "tfr_torch.rlds.sampling",
    "shuffled": "tfr_torch.rlds.sampling",
    "resize_images": "tfr_torch.rlds.transforms",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports("tfr_torch.rlds", _EXPORTS, globals())


def __dir__() -> list[str]:
    return __all__
