"""Image hooks for frames and episodes, run where the dataset runs (DataLoader workers): resizing uint8
`[..., C, H, W]` images. They move to the GPU loader when it exists."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["resize_images"]


def resize_images(size: tuple[int, int], keys: Sequence[str] = ("observation", "goal")) -> Callable[[Any], Any]:
    """A transform that resizes every uint8 tensor of at least 3 dimensions `[..., C, H, W]` under `keys` (nested
    dicts included) to `size` = (H, W), bilinear with antialiasing, as uint8 again (Octo's `resize_image` resizes
    to (H, W) the same way, with TensorFlow's bilinear+antialias). Use it in a Source's `standardize` (once per
    step: cheaper) or as `frame_transform`.

    >>> resize = resize_images((2, 2))
    >>> resize({"observation": {"image": torch.zeros(3, 3, 4, 4, dtype=torch.uint8)}})["observation"]["image"].shape
    torch.Size([3, 3, 2, 2])
    """
    height, width = size
    if height < 1 or width < 1:
        raise ValueError(f"size must be two positive ints (H, W), got {size!r}")

    def resize(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: resize(v) for k, v in value.items()}
        if isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() >= 3:
            if tuple(value.shape[-2:]) == (height, width):
                return value
            lead = value.shape[:-3]
            flat = value.reshape(-1, *value.shape[-3:]).float()
            out = F.interpolate(flat, size=(height, width), mode="bilinear", antialias=True, align_corners=False)
            return out.round_().clamp_(0, 255).to(torch.uint8).reshape(*lead, value.shape[-3], height, width)
        return value

    def transform(item: Any) -> Any:
        if not isinstance(item, Mapping):
            raise TypeError(f"resize_images transforms dicts (frames or steps), got {type(item).__name__}")
        return {k: resize(v) if k in keys else v for k, v in item.items()}

    return transform
