"""DeviceLoader: a DataLoader wrapper that hands the training loop batches already on the device, their images
decoded and transformed there, the next batches prepared while the current one trains.

In the style of torch_xla's MpDeviceLoader and DALI's PyTorch iterator, in plain PyTorch. For each batch that the
wrapped loader yields (a dict, e.g. from TFRecordDataset(..., batch_size=B) in DataLoader(batch_size=None,
pin_memory=True)):
- its tensors are copied to the device on a side CUDA stream (non_blocking, from pinned memory);
- its encoded images (`images=` key, a list of bytes) are checked and decoded on the device (nvImageCodec, the
  hardware JPEG engines where they can be created: no SM time taken from training; with `regions=True` only each
  crop's region where the decoder can), then cropped, flipped, resized, normalized and laid out channels_last by an
  ImageTransform, in one batch;
- an event is recorded on the side stream; the training stream waits for that event only when the batch is handed
  out, so `prefetch` (default 2) batches are decoded ahead while the current one trains (in a background thread
  on a GPU: `thread=`).
Random crops and flips are a pure function of (seed, epoch, rank, sample index in the epoch), so a resumed run sees
the same crops. `len()`, `set_epoch` and `state_dict` / `load_state_dict` pass through to the wrapped loader and its
dataset. On the CPU the same API decodes in the main process (or pass a DataLoader whose workers decode: see
DecodeImages), which is how the tests run it.

>>> loader = DeviceLoader(DataLoader(dataset, batch_size=None, num_workers=8, pin_memory=True),  # doctest: +SKIP
...                       "cuda", transform=ImageTransform(224, train=True))
>>> for batch in loader:  # doctest: +SKIP
...     loss = model(batch["image/encoded"]).sum()  # float32 [B, 3, 224, 224], channels_last, on the GPU
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np
import torch

from tfr_torch.errors import DecodeError
from tfr_torch.format.location import ExampleName, RecordLocation
from tfr_torch.images import _pixels
from tfr_torch.images._formats import sniff_many
from tfr_torch.images._ahead import Ahead
from tfr_torch.images.decode import _resolve, decode_views
from tfr_torch.images.device_streams import Streams, streams_for
from tfr_torch.images.transforms import ImageTransform

__all__ = ["DeviceLoader", "Streams", "streams_for"]

_STATE_VERSION = 1


@dataclass
class _Ready:
    batch: Any
    event: Any
    tensors: list[torch.Tensor]
    snapshot: Any
    samples: int


class DeviceLoader:
    """Batches of `loader` on `device` with the encoded images under `images` decoded and transformed there.

    - `transform`: an ImageTransform (training or evaluation); None decodes only (a list of uint8 [C, H, W]).
    - `prefetch`: batches prepared ahead of the one being trained on (default 2).
    - `backend`: the decoder (see decode_image; "auto" picks one that meets the contract).
    - `names`: a key of the batch whose values name the records in errors (e.g. "image/filename"); by default the
      record locations the wrapped dataset puts in its batches (TFRecordDataset's `location_key`): a bad image's
      DecodeError then has its record's `path` and `offset`; without them it is named by its place: "epoch E,
      batch B, item I". A batch without the `names` key is named as if `names` were not given. An int feature
      (a record id) names by its values.
    - `rank`: for the random crops; by default the wrapped dataset's `rank`, else its sampler's (DDP's
      DistributedSampler over a map-style dataset), else 0. The epoch of the crops likewise follows the dataset's
      `set_epoch`, else the sampler's.
    - `thread`: pull and prepare the next batches in a background thread (default: on a GPU), so that decoding's
      host work (JPEG checks, decoder calls, kernel launches) overlaps the training loop's own; False prepares them
      in the training loop's thread between its steps. Either way at most `prefetch` batches are ahead.
    - `images=None`: no encoded images to decode (e.g. RLDS frames decoded in the workers): the batch's tensors are
      only moved.
    - `device_transform`: a function applied to each batch on the device, on the side stream, in the prefetch
      thread (after the move and the image decoding), e.g. tfr_torch.rlds.resize_images((224, 224)) or your own
      augmentation in torch ops; the tensors it returns are what the training loop gets.
    - `regions`: ask the decoder for each crop's region only (nvImageCodec's region decoding; the pixels are the
      same, tests/test_gpu_real.py). Off by default: on an H100 with nvImageCodec 0.9 it warned that region
      decoding with libjpeg-turbo's chroma upsampling needs nvJPEG 13.2 ("To enable anyway, set
      enable_roi_fancy_upsampling=1"), and the loader with regions ran at 2,717 images/s where decode_image on
      whole images ran at 8,629; benchmarks/gpu_pipeline.py measures the loader both ways.
    """

    def __init__(self, loader: Any, device: Union[str, torch.device, None] = None, *,
                 transform: Optional[ImageTransform] = None, images: Optional[str] = "image/encoded",
                 prefetch: int = 2, backend: Optional[str] = None, names: Optional[str] = None,
                 rank: Optional[int] = None, non_blocking: bool = True, thread: Optional[bool] = None,
                 regions: bool = False, device_transform: Optional[Callable[[Any], Any]] = None) -> None:
        if not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be a non-negative int (batches), got {prefetch!r}")
        if transform is not None and not isinstance(transform, ImageTransform):
            raise TypeError(f"transform must be an ImageTransform or None, got {type(transform).__name__}")
        if transform is not None and images is None:
            raise ValueError("transform (an ImageTransform of encoded images) needs images= the key of those images")
        if device_transform is not None and not callable(device_transform):
            raise TypeError(f"device_transform must be callable or None, got {type(device_transform).__name__}")
        self.loader = loader
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        self._device = self.device  # with its index while iterating (_indexed)
        self.transform = transform
        self.images = images
        self.prefetch = prefetch
        self.backend = _resolve(backend)
        self.names = names
        self.non_blocking = non_blocking
        self.thread = (self.device.type == "cuda") if thread is None else bool(thread)
        self.regions = bool(regions)
        self.device_transform = device_transform
        self.mode = _pixels.normalize_mode(transform.mode if transform is not None else "RGB")
        dataset = getattr(loader, "dataset", None)
        self._location_key: Optional[str] = getattr(dataset, "location_key", None)  # TFRecordDataset's
        sampler = _sampler_of(loader)  # a DistributedSampler's rank and epoch, for a map-style dataset
        if rank is None:
            rank = getattr(dataset, "rank", None)
        if rank is None:
            rank = getattr(sampler, "rank", None)
        self.rank = int(rank or 0)
        self._epoch = int(_epoch_of(loader) or 0)
        self._samples = 0  # samples handed out this epoch
        self._batches = 0
        self._snapshot: Any = None
        self._resume: Optional[dict[str, Any]] = None

    # ----- the wrapped loader's contract ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch (crops and the dataset's shuffle); passed to the dataset and the sampler that have one.
        Another epoch than the current one starts it afresh: state_dict() then says nothing of it was handed out."""
        if int(epoch) != self._epoch:
            self._samples, self._batches, self._snapshot = 0, 0, None
            if self._resume is not None and int(self._resume["epoch"]) != int(epoch):
                self._resume = None  # a state of another epoch: the dataset drops it too
        self._epoch = int(epoch)
        parts = [getattr(self.loader, "dataset", None), getattr(self.loader, "sampler", None)]
        sampler = _sampler_of(self.loader)
        if all(sampler is not part for part in parts):
            parts.append(sampler)  # a batch_sampler's
        for part in parts:
            if part is not None and hasattr(part, "set_epoch"):
                part.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._epoch

    def state_dict(self) -> dict[str, Any]:
        """Where the training loop stands: the batches it has received (not those prefetched), with the wrapped
        loader's state as it was right after it yielded the last of them. Raises TypeError mid-epoch when the
        wrapped loader has no state (a DataLoader with workers): resuming would start the epoch over."""
        if self._resume is not None:
            return dict(self._resume)
        if self._batches and self._snapshot is None:
            self._state_owner()  # raises TypeError, naming what it needs
        return {"version": _STATE_VERSION, "epoch": self._epoch, "samples": self._samples, "batches": self._batches,
                "loader": self._snapshot}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration continues `state["epoch"]` after the batches already received."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unknown DeviceLoader state version {state.get('version')!r}")
        self.set_epoch(int(state["epoch"]))
        inner = state.get("loader")
        if inner is not None:
            self._state_owner().load_state_dict(inner)
        self._resume = dict(state)

    def _state_owner(self) -> Any:
        if hasattr(self.loader, "state_dict") and hasattr(self.loader, "load_state_dict"):
            return self.loader  # torchdata's StatefulDataLoader, or any loader with state
        dataset = getattr(self.loader, "dataset", None)
        if getattr(self.loader, "num_workers", 0) == 0 and hasattr(dataset, "state_dict"):
            return dataset  # read in this process: the dataset's own position is the loader's
        raise TypeError("DeviceLoader.state_dict needs a loader with state_dict (torchdata's StatefulDataLoader) or "
                        "a DataLoader with num_workers=0 over a dataset with state_dict")

    def _take_snapshot(self) -> Any:
        try:
            owner = self._state_owner()
        except TypeError:
            return None
        return owner.state_dict()

    # ----- iteration ---------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        followed = _epoch_of(self.loader)
        if followed is not None and int(followed) != self._epoch:  # set on the dataset or the sampler itself (a
            self.set_epoch(int(followed))  # DistributedSampler's set_epoch): the crops follow it
        device = self._device = _indexed(self.device)  # "cuda": the current device now (a DDP rank's set_device)
        streams = streams_for(device)
        samples, batches = 0, 0
        if self._resume is not None:
            samples, batches = int(self._resume["samples"]), int(self._resume["batches"])
            self._snapshot = self._resume.get("loader")
            self._resume = None
        self._samples, self._batches = samples, batches
        source = iter(self.loader)
        prepared = self._prepared(source, streams, self._epoch, samples, batches)
        if self.thread and self.prefetch > 0:  # set_device needs an index: torch refuses torch.device("cuda")
            on_device = (lambda: torch.cuda.set_device(device)) if device.type == "cuda" else None
            prepared = Ahead(prepared, self.prefetch, on_device)  # the thread's current device is the loader's
        try:
            for ready in prepared:
                streams.wait(ready.event, ready.tensors)
                self._samples += ready.samples
                self._batches += 1
                self._snapshot = ready.snapshot
                yield ready.batch
        finally:
            if isinstance(prepared, Ahead):
                prepared.close()

    def _prepared(self, source: Iterator[Any], streams: Streams, epoch: int, samples: int, number: int
                  ) -> Iterator[_Ready]:
        """The wrapped loader's batches, each pulled and prepared on the device `prefetch` batches before the
        training loop gets it (in this thread; Ahead moves the whole of it to a background thread)."""
        queue: collections.deque[_Ready | BaseException] = collections.deque()
        pulled = [samples, number]

        def fill(depth: int) -> None:
            while len(queue) < depth and not (queue and isinstance(queue[-1], BaseException)):
                try:
                    batch = next(source)
                except StopIteration:
                    return
                except Exception as exc:  # the wrapped loader's error, also in its place
                    queue.append(exc)
                    return
                try:
                    snapshot = self._take_snapshot()
                    ready = self._prepare(batch, streams, epoch, pulled[0], pulled[1])
                except Exception as exc:  # raised in its place: the batches before it are handed out first
                    queue.append(exc)
                    return
                ready.snapshot = snapshot
                pulled[0] += ready.samples
                pulled[1] += 1
                queue.append(ready)

        depth = 0 if self.thread and self.prefetch > 0 else self.prefetch  # Ahead keeps its thread ahead
        while True:
            fill(1)
            if not queue:
                return
            ready = queue.popleft()
            if isinstance(ready, BaseException):
                error = ready
                del ready
                try:
                    raise error
                finally:  # its traceback holds this frame: no cycle through it, or the wrapped loader (its worker
                    del error  # processes) would live on until a garbage collection, which stalls 5 s to stop them
            fill(depth)  # the next batches go to the device before this one is handed out
            yield ready

    def _prepare(self, batch: Any, streams: Streams, epoch: int, first: int, number: int) -> _Ready:
        tensors: list[torch.Tensor] = []
        if self.transform is not None and not isinstance(batch, Mapping):  # its images would pass undecoded
            raise TypeError(f"DeviceLoader with a transform decodes the images of dict batches (under "
                            f"{self.images!r}), got a {type(batch).__name__}; give it a loader of dicts, or "
                            f"transform=None, images=None to only move the batches")
        with streams.side():
            if isinstance(batch, Mapping) and self.images is not None:
                out = {key: self._move(value, tensors) for key, value in batch.items() if key != self.images}
                encoded = batch.get(self.images)
                if encoded is None:
                    raise KeyError(f"DeviceLoader: the batch has no {self.images!r} (its keys: "
                                   f"{', '.join(map(str, batch))}); pass images= the key of the encoded images")
                if isinstance(encoded, (bytes, bytearray, memoryview, str)):  # one record, not a batch of them
                    raise TypeError(f"DeviceLoader decodes batches: {self.images!r} is one image "
                                    f"({type(encoded).__name__}), not a list of them; batch the records "
                                    f"(TFRecordDataset's batch_size, or the DataLoader's)")
                pixels = self._images(list(encoded), batch, streams, epoch, first, number)
                if isinstance(pixels, torch.Tensor):
                    tensors.append(pixels)
                else:
                    tensors.extend(pixels)
                out[self.images] = pixels
                count = len(encoded)
            else:
                out = self._move(batch, tensors)
                count = _samples_in(batch)
            if self.device_transform is not None:
                out = self.device_transform(out)
                tensors = []
                _collect(out, tensors)
            event = streams.record()
        return _Ready(out, event, tensors, None, count)

    def _move(self, value: Any, tensors: list[torch.Tensor]) -> Any:
        if isinstance(value, torch.Tensor):
            moved = value.to(self._device, non_blocking=self.non_blocking)
            tensors.append(moved)
            return moved
        if isinstance(value, Mapping):
            return {k: self._move(v, tensors) for k, v in value.items()}
        if isinstance(value, (list, tuple)):  # tensors at any depth: (features, label), lists of dicts
            items = [self._move(v, tensors) for v in value]
            if all(m is v for m, v in zip(items, value)):
                return value  # nothing in it to move (names, bytes): the caller's object as it was
            if isinstance(value, tuple) and hasattr(value, "_fields"):
                return type(value)(*items)  # a namedtuple (default_collate keeps them) takes its fields apart
            return type(value)(items)
        return value

    def _images(self, encoded: list[Any], batch: Mapping[str, Any], streams: Streams, epoch: int, first: int,
                number: int) -> Union[torch.Tensor, list[torch.Tensor]]:
        items = [bytes(e) if not isinstance(e, bytes) else e for e in encoded]
        named = self.names is not None and self.names in batch  # a names= key this batch lacks: as if not given
        located = not named and self._location_key is not None and self._location_key in batch
        names: list[Optional[ExampleName]]
        if named:
            given = batch[self.names]  # type: ignore[index]
            if isinstance(given, (torch.Tensor, np.ndarray)):
                given = given.tolist()  # ids: 7, not "tensor(7)"
            names = [str(n.decode(errors="backslashreplace") if isinstance(n, bytes) else n)
                     for n in given]  # a name that is not UTF-8 is still a name
        elif located:
            names = [_location(text) for text in batch[self._location_key]]  # type: ignore[index]
        else:
            names = [f"epoch {epoch}, batch {number}, item {k}" for k in range(len(items))]
        transform = self.transform
        # a GPU decoder's own memory (nvImageCodec's) is freed on the side stream when its tensor goes, with no
        # regard for the training stream still reading it (record_stream covers torch's allocations only): what is
        # handed out as decoded is copied into torch's memory on the side stream (the transforms make new tensors)
        on_gpu = self._device.type == "cuda"
        indices = list(range(first, first + len(items)))
        regions = None
        headers = sniff_many(items)
        if transform is not None and self.device.type == "cuda" and self.regions:
            if all(h.height and h.width for h in headers):  # plan the crops now: decode only their regions
                boxes, _ = transform.plan([(h.height, h.width) for h in headers], epoch, self.rank, indices)
                regions = [_region(b, h.height, h.width) for b, h in zip(boxes, headers)]
        try:
            decoded = decode_views(items, names, self.mode, torch.uint8, self.backend, False, self._device, regions,
                                   streams.stream_id(), contiguous=transform is None and not on_gpu, headers=headers)
        except DecodeError as err:
            where = RecordLocation(err.path, err.offset) if err.path is not None and err.offset is not None else None
            if not located or where not in names:
                raise
            raise DecodeError(err.message, err.path, err.offset, key=self.images, index=names.index(where)) from None
        if transform is None and on_gpu:  # copied into torch's memory (see above), contiguous
            return [pixels.clone(memory_format=torch.contiguous_format) for pixels, _ in decoded]
        if transform is None:
            return [pixels for pixels, _ in decoded]
        sizes = []  # the whole image's: its header's (a region may have been decoded), else the pixels'
        for header, (pixels, _) in zip(headers, decoded):
            sizes.append((header.height, header.width) if header.height and header.width else
                         (int(pixels.shape[-2]), int(pixels.shape[-1])))
        boxes, flips = transform.plan(sizes, epoch, self.rank, indices)
        shifted = boxes.copy()
        shifted[:, 0] -= [origin[0] for _, origin in decoded]
        shifted[:, 1] -= [origin[1] for _, origin in decoded]
        return transform.apply([pixels for pixels, _ in decoded], shifted, flips)


def _indexed(device: torch.device) -> torch.device:
    """`device` with its index: "cuda" is the current CUDA device (what torch's own "cuda" means), so that the
    background thread can be put on it (torch.cuda.set_device refuses a device without an index) and the decoders
    run there, not on GPU 0."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _sampler_of(loader: Any) -> Any:
    """The sampler of `loader` that has a rank or an epoch (a DistributedSampler): its `sampler`, else its
    batch_sampler's; None when neither has."""
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if sampler is not None and (hasattr(sampler, "rank") or hasattr(sampler, "epoch")):
            return sampler
    return None


def _epoch_of(loader: Any) -> Optional[int]:
    """The epoch the wrapped loader reads: its dataset's (TFRecordDataset.set_epoch), else its sampler's
    (DistributedSampler.set_epoch); None when neither has one."""
    for part in (getattr(loader, "dataset", None), _sampler_of(loader)):
        epoch = getattr(part, "epoch", None)
        if epoch is not None:
            return int(epoch)
    return None


def _samples_in(batch: Any) -> int:
    """The samples of a batch: the first dimension of its first tensor (nested dicts, lists and tuples searched),
    else its length."""
    found: list[torch.Tensor] = []
    _collect(batch, found, first=True)
    if found:
        return int(found[0].shape[0]) if found[0].dim() else 1
    return len(batch) if hasattr(batch, "__len__") and not isinstance(batch, Mapping) else 1


def _collect(value: Any, tensors: list[torch.Tensor], first: bool = False) -> None:
    if first and tensors:
        return
    if isinstance(value, torch.Tensor):
        tensors.append(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, tensors, first)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, tensors, first)


def _location(text: Any) -> ExampleName:
    """A record's location from its text in a batch ("path:offset", TFRecordDataset's `location_key`)."""
    text = text.decode(errors="backslashreplace") if isinstance(text, bytes) else str(text)
    path, _, offset = text.rpartition(":")
    return RecordLocation(path, int(offset)) if path and offset.isdigit() else text


def _region(box: np.ndarray, height: int, width: int) -> tuple[int, int, int, int]:
    """The whole pixels around a box (top, left, height, width): (top, left, bottom, right) inside the image."""
    top, left = max(int(np.floor(box[0])), 0), max(int(np.floor(box[1])), 0)
    bottom = min(int(np.ceil(box[0] + box[2])), height)
    right = min(int(np.ceil(box[1] + box[3])), width)
    return top, left, bottom, right
