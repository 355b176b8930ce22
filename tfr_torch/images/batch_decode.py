"""DecodeImages: a TFRecordDataset transform that decodes and transforms a batch's images where the dataset runs
(in the DataLoader workers), one image at a time into a batch made in shared memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch

from tfr_torch.data.items import applying
from tfr_torch.errors import DecodeError
from tfr_torch.format.location import location_of
from tfr_torch.images import _pixels
from tfr_torch.images._accel import quiet_torchvision
from tfr_torch.images._formats import sniff_many
from tfr_torch.images.decode import _decode_one, _resolve
from tfr_torch.images.transforms import ImageTransform, _resize_each

__all__ = ["DecodeImages"]


@dataclass(frozen=True)
class DecodeImages:
    """A TFRecordDataset `transform` that decodes and transforms a batch's images where the dataset runs (in
    DataLoader workers: the training loop gets [B, C, size, size] tensors). Evaluation transforms need nothing
    more; training ones need `index`, an int feature with each record's id, to key their crops (with the epoch and
    rank of the TFRecordDataset applying it, set by set_epoch and its DDP rank, in workers and in the main process;
    `rank=` overrides the rank). A bad image raises DecodeError naming its record's file and byte offset, and it by
    `names` (a feature such as "image/filename"), else by its `index` value, else by its place in the batch.
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

        encoded = batch[self.images]
        if isinstance(encoded, (bytes, bytearray, memoryview, str)):  # one record: its bytes would read as images
            raise TypeError(f"DecodeImages decodes batches: {self.images!r} is one image ({type(encoded).__name__}), "
                            f"not a list of them; give the TFRecordDataset a batch_size")
        items = [bytes(e) if not isinstance(e, bytes) else e for e in encoded]
        mode = _pixels.normalize_mode(self.transform.mode)
        backend = _resolve(self.backend)
        indices = [int(i) for i in batch[self.index]] if self.index is not None else list(range(len(items)))
        names: list[Optional[str]]
        if self.names is not None:
            names = [str(n.decode(errors="backslashreplace") if isinstance(n, bytes) else n)  # not UTF-8: escaped
                     for n in batch[self.names]]
        elif self.index is not None:  # a bad image named by its record's id
            names = [f"with {self.index}={i}" for i in indices]
        else:  # or by its place
            names = [f"{k} of a batch of {len(items)}" for k in range(len(items))]
        info = get_worker_info()
        source, locations = applying()  # the TFRecordDataset applying this transform, and its batch's records
        if source is None and info is not None:
            source = info.dataset
        epoch = int(getattr(source, "epoch", 0) or 0) if source is not None else 0
        rank = self.rank if self.rank is not None else int(getattr(source, "rank", 0) or 0) if source is not None else 0
        if locations is not None and len(locations) != len(items):
            locations = None

        def decode(k: int) -> torch.Tensor:
            try:
                return _decode_one(items[k], mode, torch.uint8, backend, False, False, names[k], contiguous=False,
                                   header=headers[k])
            except DecodeError as err:
                path, offset = location_of(locations[k]) if locations is not None else (None, None)
                if path is None or err.path is not None:
                    raise
                raise DecodeError(err.message, path, offset, key=self.images, index=k) from None

        # crops are planned from the JPEG headers' frame sizes, so each image is decoded, resized and dropped before
        # the next one is decoded; only an image whose header has no size is decoded first
        headers = sniff_many(items)
        with quiet_torchvision():  # one warnings filter for the batch (torchvision warns at every decode)
            return self._decoded(batch, items, headers, decode, epoch, rank, indices, info is not None)

    def _decoded(self, batch: Mapping[str, Any], items: list[bytes], headers: list[Any],
                 decode: Callable[[int], torch.Tensor], epoch: int, rank: int, indices: list[int],
                 shared: bool) -> dict[str, Any]:
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
        out[self.images] = _resize_each(crops(), len(items), self.transform, shared=shared)
        return out
