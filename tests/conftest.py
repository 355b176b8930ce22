"""Fixtures shared by the test files."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["native", "parse", "gather", "arrays"])
def batch_path(request, monkeypatch):
    """Run a test on every path a batch of Examples can take: the compiled decoder (skipped when it was not
    built); and on the pure-Python reference as is, with every batch taking the path parse_example takes for
    large records (each record split and its features taken at once), and with every numeric column decoded by
    the array path (which small batches skip). All must agree value by value and error by error."""
    import tfr_torch

    if request.param == "native":
        if not tfr_torch._native.available():
            pytest.skip(f"the compiled core is not built: {tfr_torch._native.import_error}")
        previous = tfr_torch.set_backend("native")
    else:
        previous = tfr_torch.set_backend("python")
    if request.param == "gather":
        from tfr_torch.decode import plan

        monkeypatch.setattr(plan, "_GATHER_FROM", 0)
    if request.param == "arrays":
        from tfr_torch.format import columns

        monkeypatch.setattr(columns, "_FEW", 0)
    yield request.param
    tfr_torch.set_backend(previous)


def pytest_generate_tests(metafunc):
    """`backend` runs a test on both backends, except where `batch_path` already runs every decoding path."""
    if "backend" in metafunc.fixturenames and "batch_path" not in metafunc.fixturenames:
        metafunc.parametrize("backend", ["python", "native"], indirect=True)


@pytest.fixture
def backend(request):
    """Run a test on both backends: the pure-Python reference and the compiled core (skipped when it was not
    built). Every golden, parity, corruption and error-message test takes this fixture."""
    import tfr_torch

    param = getattr(request, "param", None)
    if param is None:  # the test takes batch_path, which chooses the backend
        yield None
        return
    if param == "native" and not tfr_torch._native.available():
        pytest.skip(f"the compiled core is not built: {tfr_torch._native.import_error}")
    previous = tfr_torch.set_backend(param)
    yield param
    tfr_torch.set_backend(previous)
