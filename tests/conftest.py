"""Fixtures shared by the test files."""

from __future__ import annotations

from typing import NamedTuple

import gc
import os
import signal

import pytest
from hypothesis import HealthCheck, settings

# plain helper modules of the tests: their asserts report values as the tests' own do
pytest.register_assert_rewrite("parse_util", "wirebytes")

# Hypothesis: no per-example deadline and no "too slow" health check anywhere. Both measure wall time, so on a
# loaded machine they fail a correct test by chance; what the properties assert never depends on time. Under CI the
# examples are also derandomized (the same examples in every run, so a red CI run reproduces; `make fuzz` and local
# runs keep exploring). A test that lists its own suppress_health_check replaces this list: keep too_slow in it.
settings.register_profile("tfr_torch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("tfr_torch-ci", settings.get_profile("tfr_torch"), derandomize=True, database=None)
settings.load_profile("tfr_torch-ci" if os.environ.get("CI") else "tfr_torch")


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


_GC_AT_START = (gc.isenabled(), gc.get_threshold())


@pytest.fixture(autouse=True)
def _room_for_shared_values():
    """Every test starts with room for 2,048 values in the current block of shared values (data/shared_cells.py: a
    dataset's epoch, counts and flags; one descriptor per block of 4,096): a block started mid-test is a descriptor
    more, which the tests that count descriptors around their work would take for a leak."""
    from tfr_torch.data import shared_cells

    now = shared_cells._CURRENT
    if now.block is None or now.pid != os.getpid() or now.block.numel() - now.used < 2048:
        shared_cells.shared_int64(shared_cells._BLOCK)  # a fresh block, all taken; the next value starts another
        shared_cells.shared_int64(1)
    yield


@pytest.fixture(autouse=True)
def _garbage_collector_left_as_found():
    """Fail the test that leaves the garbage collector disabled or its thresholds changed: every later test would run
    with another memory profile (mypy.api.run, in-process, once left gc.set_threshold(200_000, 30, 30) behind, and
    the corruption tests' memory cap failed whichever of them came later in a shuffled order)."""
    yield
    now = (gc.isenabled(), gc.get_threshold())
    if now != _GC_AT_START:
        gc.enable() if _GC_AT_START[0] else gc.disable()
        gc.set_threshold(*_GC_AT_START[1])
        pytest.fail(f"this test left the garbage collector as (enabled, thresholds) {now}, found as {_GC_AT_START}")


@pytest.fixture(scope="module", autouse=True)
def _sigterm_left_as_found():
    """Fail the module that leaves another SIGTERM handler behind (ray.init sets one that raises SystemExit, which
    ray.shutdown leaves): a process forked later that gets SIGTERM as it starts (a multiprocessing pool's worker,
    told to end at once by the pool's terminate) loses the signal and never ends, and the test forking it hangs."""
    before = signal.getsignal(signal.SIGTERM)
    yield
    now = signal.getsignal(signal.SIGTERM)
    if now != before:
        signal.signal(signal.SIGTERM, before)
        pytest.fail(f"this module left SIGTERM's handler as {now!r}, found as {before!r}")


def pytest_generate_tests(metafunc):
    """`backend` runs a test on both backends, except where `batch_path` already runs every decoding path."""
    if "backend" in metafunc.fixturenames and "batch_path" not in metafunc.fixturenames:
        metafunc.parametrize("backend", ["python", "native"], indirect=True)
    if "inflate_thread" in metafunc.fixturenames:
        metafunc.parametrize("inflate_thread", ["thread", "no thread"], indirect=True)
    if "seek_engine" in metafunc.fixturenames:
        metafunc.parametrize("seek_engine", ["native", "zlib-ng", "zlib"], indirect=True)


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


@pytest.fixture
def seek_engine(request, monkeypatch, backend):
    """Run a test that reads GZIP/ZLIB files through seek points with each inflater that restarts at them
    (tfr_torch.format.seek.restart_engine): the compiled core's (on the native backend), zlib-ng's (when installed
    and on) and Python's zlib."""
    from tfr_torch.format import inflate, seek

    if request.param == "native" and backend != "native":
        pytest.skip("the compiled core inflates from seek points on the native backend")
    if request.param == "zlib-ng" and inflate.INFLATE != "zlib-ng":
        pytest.skip("zlib-ng is not installed (or TFR_TORCH_INFLATE turned it off)")
    monkeypatch.setattr(seek, "restart_engine", lambda: request.param)
    return request.param


@pytest.fixture
def inflate_thread(request, monkeypatch):
    """Run a GZIP/ZLIB test with the background inflate thread and without it (TFR_TORCH_INFLATE_THREAD)."""
    from tfr_torch.format import inflate

    monkeypatch.setattr(inflate, "_THREAD_DEFAULT", request.param == "thread")
    return request.param == "thread"


@pytest.fixture
def loader_error(monkeypatch):
    """loader_error(loader) iterates a DataLoader until it raises and returns the exception it raised in the main
    process (None if it ran to the end), with the loader's workers shut down before it returns.

    When a worker's iterable raises, torch's DataLoader (seen without tfr_torch too) waits its join timeout
    (MP_STATUS_CHECK_INTERVAL, 5 s) for that worker at shutdown, whenever the iterator is collected: left to the
    garbage collector, a later test pays 5 s per worker at a moment nobody chose, with stale workers still alive
    during it. The timeout is shortened here and the iterator dropped (with the traceback that refers to it) before
    returning."""
    import gc

    import torch.utils.data._utils

    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.2)

    def run(loader):
        loader_iter = None
        error = None
        try:
            loader_iter = iter(loader)  # with num_workers=0 this already starts the dataset's iterator
            for _ in loader_iter:
                pass
        except Exception as err:  # noqa: BLE001 - the caller asserts its type
            error = err.with_traceback(None)  # the traceback's frames would keep the loader (and its workers) alive
        workers = getattr(loader, "num_workers", 0)
        del loader_iter
        if workers:  # collected now, with its workers, rather than in a later test (a full collection is slow)
            gc.collect()
        return error

    return run


# ------------------------------------------------------------------------------------- writing record files


def _write_records(path, records, compression=None, *, index=False):
    """Write `records` to one TFRecord file with tfr_torch.TFRecordWriter and return `path` as given.

    Each record is bytes (written as is) or a mapping (written as a tf.train.Example, as `write_example` does);
    `compression` is None, "gzip" or "zlib"; `index=True` also writes `<path>.idx` with build_index."""
    from collections.abc import Mapping

    import tfr_torch

    with tfr_torch.TFRecordWriter(path, compression=compression) as writer:
        for record in records:
            if isinstance(record, Mapping):
                writer.write_example(record)
            else:
                writer.write(record)
    if index:
        tfr_torch.build_index(path)
    return path


class Corpus(NamedTuple):
    paths: list  # one str per file, in file order
    ids: list  # every record's id, in file order


def _write_corpus(folder, counts, example=None, *, name="part-{}.tfrecord", first=0, step=1, compression=None,
                  index=False):
    """Files of Examples with unique int ids: file f (named `name.format(f)` in `folder`, created if needed) holds
    `counts[f]` records; ids run from `first` by `step` across the files, and the record of id `i` is `example(i)`
    (a mapping written as an Example, or bytes; default `{"id": i}`). `index` is a bool, or the set of file numbers
    that get an index."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    make = example or (lambda i: {"id": i})
    paths, ids = [], []
    next_id = first
    for f, count in enumerate(counts):
        mine = [next_id + step * j for j in range(count)]
        next_id += step * count
        indexed = f in index if isinstance(index, (set, frozenset)) else bool(index)
        paths.append(str(_write_records(str(folder / name.format(f)), [make(i) for i in mine], compression,
                                        index=indexed)))
        ids.extend(mine)
    return Corpus(paths, ids)


@pytest.fixture(scope="session")
def write_records():
    """`write_records(path, records, compression=None, *, index=False) -> path`: one TFRecord file written by
    tfr_torch's writer (records as bytes, or mappings written as Examples); see `_write_records`."""
    return _write_records


@pytest.fixture(scope="session")
def write_corpus():
    """`write_corpus(folder, counts, example=None, *, name="part-{}.tfrecord", first=0, step=1, compression=None,
    index=False) -> Corpus(paths, ids)`: several files of Examples with unique ids; see `_write_corpus`."""
    return _write_corpus


# ------------------------------------------------------------------------------------------------ slow tests

SLOW_WITHOUT_REASON_S = 5.0  # a test slower than this should say why in its docstring
_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    if report.when == "call":  # a module fixture's set-up is paid by whichever test comes first: not counted
        _seconds[report.nodeid] = report.duration


def pytest_terminal_summary(terminalreporter):
    """Name the tests whose call took more than SLOW_WITHOUT_REASON_S and whose function has no docstring: a slow
    test should say why it is slow. A notice, never a failure: durations depend on the machine and its load, and a
    test suite that fails by chance is the thing this guards against."""
    session = terminalreporter._session
    if session is None:
        return
    quiet = []
    for item in session.items:
        seconds = _seconds.get(item.nodeid, 0.0)
        function = getattr(item, "function", None)
        if seconds > SLOW_WITHOUT_REASON_S and function is not None and not (function.__doc__ or "").strip():
            quiet.append(f"{seconds:.1f}s {item.nodeid}")
    if quiet:
        terminalreporter.write_line(f"slow tests (> {SLOW_WITHOUT_REASON_S:.0f} s) whose docstring does not say why: "
                                    + "; ".join(quiet))

