"""Fixtures shared by the test files."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["parse", "gather", "arrays"])
def batch_path(request, monkeypatch):
    """Run a test three times: as is; with every batch of Examples taking the path parse_example takes for large
    records (each record parsed in full and its features taken at once); and with every numeric column decoded
    by the array path (which small batches skip). All must agree value by value and error by error."""
    if request.param == "gather":
        from tfr_torch.decode import plan

        monkeypatch.setattr(plan, "_GATHER_FROM", 0)
    if request.param == "arrays":
        from tfr_torch.format import columns

        monkeypatch.setattr(columns, "_FEW", 0)
    return request.param


@pytest.fixture(params=["python", "native"])
def backend(request):
    """Run a test on both backends: the pure-Python reference and the compiled core (skipped when it was not
    built). Every golden, parity, corruption and error-message test takes this fixture."""
    import tfr_torch

    if request.param == "native" and not tfr_torch._native.available():
        pytest.skip(f"the compiled core is not built: {tfr_torch._native.import_error}")
    previous = tfr_torch.set_backend(request.param)
    yield request.param
    tfr_torch.set_backend(previous)
