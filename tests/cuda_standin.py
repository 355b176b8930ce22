"""A "cuda" device that is the CPU, for testing GPU code paths on a machine without a GPU."""

from __future__ import annotations

import pytest
import torch


def pretend_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda.is_available() says True, and Tensor.to("cuda...") leaves a tensor where it is (on the CPU)."""
    to = torch.Tensor.to

    def fake_to(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("device")
        if isinstance(target, (str, torch.device)) and torch.device(target).type == "cuda":
            return self
        return to(self, *args, **kwargs)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.Tensor, "to", fake_to)
