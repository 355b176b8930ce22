"""DecodeImages: a TFRecordDataset transform that decodes and transforms a batch's images where the dataset runs
(in the DataLoader workers), one image at a time into a batch made in shared memory."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from tfr_torch.images import _pixels
from tfr_torch.images._formats import sniff
from tfr_torch.images.decode import _decode_one, _resolve
from tfr_torch.images.transforms import ImageTransform, _resize_each

__all__ = ["DecodeImages"]


@dataclass(frozen=True)
class DecodeImages:
    """A TFRecordDataset `transform` that decodes and transforms a batch's images where the dataset runs (in
    DataLoader workers: the training loop gets [B, C, size, size] tensors). Evaluation transforms need nothing
    more; training ones need `index`, an int feature with each record's id, to key their crops (with the epoch and
    rank of the worker's dataset, set by set_epoch and its DDP rank; in the main process epoch 0 and `rank`, or 0).
    The crops are planned from the JPEG headers, then each image is
    decoded, cropped and resized into the batch before the next one is decoded: one decoded image alive at a
    time (its memory reused, still in the cache), read by the resize as a [C, H, W] view without a copy.

    >>> dataset = TFRecordDataset(paths, spec, batch_size=256, index="auto",  # doctest: +SKIP
    ...                           transform=DecodeImages(ImageTransform(224, train=False)))
    """

    transform: ImageTransform
    images: str = "image/encoded"
    backend: Optional[str] = None
    names: Optional[str] = None
    index: Optional[str] = None
    rank: Optional[int] = None

    def __post_init__(self) -> None:
        if self.transform.train and self.index is None:
            raise ValueError("DecodeImages with a training transform needs index= (an int feature with each "
                             "record's id) so that its random crops are reproducible; or decode with DeviceLoader")
        _resolve(self.backend)

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        from torch.utils.data import get_worker_info

        items = [bytes(e) if not isinstance(e, bytes) else e for e in batch[self.images]]
        names: list[Optional[str]] = ([str(n.decode() if isinstance(n, bytes) else n) for n in batch[self.names]]
                                      if self.names is not None else [None] * len(items))
        mode = _pixels.normalize_mode(self.transform.mode)
        backend = _resolve(self.backend)
        indices = [int(i) for i in batch[self.index]] if self.index is not None else list(range(len(items)))
        info = get_worker_info()
        epoch = int(getattr(info.dataset, "epoch", 0)) if info is not None else 0
        rank = self.rank if self.rank is not None else int(getattr(info.dataset, "rank", 0) or 0) if info else 0

        def decode(k: int) -> torch.Tensor:
            return _decode_one(items[k], mode, torch.uint8, backend, False, False, names[k], contiguous=False,
                               header=headers[k])

        # crops are planned from the JPEG headers' frame sizes, so each image is decoded, resized and dropped before
        # the next one is decoded; only an image whose header has no size is decoded first
        headers = [sniff(d) for d in items]
        early = {k: decode(k) for k, h in enumerate(headers) if not (h.height and h.width)}
        sizes = [(h.height, h.width) if k not in early else (int(early[k].shape[-2]), int(early[k].shape[-1]))
                 for k, h in enumerate(headers)]
        boxes, flips = self.transform.plan(sizes, epoch, rank, indices)

        def crops() -> Iterator[tuple[torch.Tensor, np.ndarray, bool]]:
            for k in range(len(items)):
                pixels = early.pop(k) if k in early else decode(k)
                box, flip = boxes[k], bool(flips[k])
                size = (int(pixels.shape[-2]), int(pixels.shape[-1]))
                if size != sizes[k]:  # not the header's size: this one planned by its pixels
                    again, flipped = self.transform.plan([size], epoch, rank, [indices[k]])
                    box, flip = again[0], bool(flipped[0])
                yield pixels, box, flip

        out = dict(batch)
        if not items:
            raise ValueError(f"DecodeImages got a batch with no {self.images!r} images")
        # in a worker the batch is made in shared memory: handing it over copies nothing
        out[self.images] = _resize_each(crops(), len(items), self.transform, shared=info is not None)
        return out
