"""Where DeviceLoader's device work runs, and how the training stream waits for it: a side CUDA stream and events
on a GPU (CudaStreams), nothing on the CPU (Streams); the tests give recording stand-ins."""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch

__all__ = ["CudaStreams", "Streams", "streams_for"]


class Streams:
    """Where the loader's device work runs and how the training stream waits for it. This one (the CPU's) does
    nothing; CudaStreams uses a side CUDA stream and events. Tests give a recording stand-in."""

    def side(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def stream_id(self) -> Optional[int]:
        return None

    def record(self) -> Any:
        return None

    def wait(self, event: Any, tensors: list[torch.Tensor]) -> None:
        return None


class CudaStreams(Streams):
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device)

    def side(self) -> contextlib.AbstractContextManager[Any]:
        return torch.cuda.stream(self.stream)

    def stream_id(self) -> Optional[int]:
        return int(self.stream.cuda_stream)

    def record(self) -> Any:
        event = torch.cuda.Event()
        event.record(self.stream)
        return event

    def wait(self, event: Any, tensors: list[torch.Tensor]) -> None:
        current = torch.cuda.current_stream(self.device)
        current.wait_event(event)
        for tensor in tensors:  # made on the side stream, used on this one: the allocator must know
            tensor.record_stream(current)


def streams_for(device: torch.device) -> Streams:
    """The Streams of `device`: a side CUDA stream for a GPU, nothing for the CPU."""
    return CudaStreams(device) if device.type == "cuda" else Streams()
