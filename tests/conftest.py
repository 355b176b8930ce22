"""Fixtures shared by the test files."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["parse", "gather"])
def batch_path(request, monkeypatch):
    """Run a test twice: as is, and with every batch of Examples taking the path parse_example takes for large
    records (each record parsed in full and its features taken at once), which must agree value by value and
    error by error."""
    if request.param == "gather":
        from tfr_torch.decode import plan

        monkeypatch.setattr(plan, "_GATHER_FROM", 0)
    return request.param
