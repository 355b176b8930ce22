"""A "cuda" device that is the CPU, for testing GPU code paths on a machine without a GPU."""

from __future__ import annotations

import threading
import types

import pytest
import torch
from torch.cuda._utils import _get_device_index


def pretend_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda.is_available() says True, and Tensor.to("cuda...") leaves a tensor where it is (on the CPU).

    The current device is per thread, as CUDA's is (0 until torch.cuda.set_device), and set_device checks its
    argument with torch's own code: torch.cuda.set_device("cuda") (no index) raises ValueError as on a GPU.
    torch.cuda.current_stream gives a stand-in of the default stream (cuda_stream 0)."""
    to = torch.Tensor.to
    local = threading.local()

    def fake_to(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("device")
        if isinstance(target, (str, torch.device)) and torch.device(target).type == "cuda":
            return self
        return to(self, *args, **kwargs)

    def set_device(device) -> None:
        index = _get_device_index(device)  # torch.cuda.set_device's own check
        if index >= 0:
            local.index = index

    def current_stream(device=None):
        index = _get_device_index(device, optional=True) if device is not None else getattr(local, "index", 0)
        return types.SimpleNamespace(cuda_stream=0, device=torch.device("cuda", index), device_index=index)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: getattr(local, "index", 0))
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
