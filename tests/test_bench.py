"""Smoke tests of the benchmark harness (`benchmarks/run.py`): every workload and row is registered, and a tiny run
of the tfr_torch rows (compiled core and pure-Python reference) completes with rates and ratios. No timing is
asserted: speed lives in the benchmarks themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", "run.py")
WORKLOADS = ["read-16k", "write-16k", "read-small", "write-small", "read-16k-gzip", "decode-tabular",
             "read-decode-tabular", "per-record-tabular", "read-decode-sequence", "per-record-sequence", "loader-16k"]


def bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("TFR_TORCH_NATIVE", None)  # the tfr_torch rows run on the default backend, the python rows on the other
    proc = subprocess.run([sys.executable, RUN, *args], capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def run_rows(tmp_path, *workloads: str) -> tuple[str, list[dict]]:
    out = tmp_path / "out.json"
    proc = bench("--workloads", *workloads, "--libraries", "tfr_torch", "tfr_torch-python", "--records", "300",
                 "--repeat", "1", "--warmup", "0", "--data-dir", str(tmp_path / "data"), "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert rows and all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    return proc.stdout, rows


def test_list_names_every_workload_and_the_pure_python_rows():
    listing = bench("--list").stdout
    headers = [line.split(":")[0] for line in listing.splitlines() if not line.startswith(" ")]
    assert headers == WORKLOADS
    python_rows = {}  # workload -> its pure-Python reference rows
    for line in listing.splitlines():
        if not line.startswith(" "):
            workload = line.split(":")[0]
        elif line.split()[0] == "tfr_torch-python":
            python_rows.setdefault(workload, []).append(line.split()[1])
    assert python_rows == {"read-16k": ["crc", "nocrc"], "read-small": ["crc", "nocrc"],
                           "read-16k-gzip": ["crc", "nocrc"], "decode-tabular": ["parse"],
                           "read-decode-tabular": ["dataset"], "per-record-tabular": ["dataset"],
                           "read-decode-sequence": ["dataset"], "per-record-sequence": ["dataset"]}


def test_unknown_workload_is_refused_by_name():
    proc = subprocess.run([sys.executable, RUN, "--workloads", "nope"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "unknown workload(s) nope" in proc.stderr


def test_end_to_end_and_per_record_rows_on_both_backends(tmp_path):
    """Slow by nature: runs the benchmark runner in a subprocess over both workloads on both backends."""
    stdout, rows = run_rows(tmp_path, "read-decode-tabular", "per-record-tabular")
    keys = [(r["workload"], r["library"], r["key"]) for r in rows]
    assert keys == [("read-decode-tabular", "tfr_torch", "dataset"), ("read-decode-tabular", "tfr_torch", "records"),
                    ("read-decode-tabular", "tfr_torch-python", "dataset"),
                    ("per-record-tabular", "tfr_torch", "dataset"), ("per-record-tabular", "tfr_torch", "single"),
                    ("per-record-tabular", "tfr_torch-python", "dataset")]
    for r in rows:
        assert r["records_per_s"] > 0 and len(r["times_s"]) == 1
        if r["library"] == "tfr_torch-python":
            assert r["version"].endswith("(python backend)")
            assert r["tfr_torch_ratio"] > 0  # the compiled core's rate over the reference's, same call
    assert "## tfr_torch against the fastest comparable row of each peer" in stdout
    assert "- read-decode-tabular (`TFRecordDataset(path, spec, batch_size=256)`" in stdout


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU and memory of the workers are read from /proc")
def test_loader_rows_report_cpu_and_peak_memory_per_process(tmp_path):
    stdout, rows = run_rows(tmp_path, "loader-16k")
    assert len(rows) == 6
    for r in rows:
        assert len(r["cpu_main_s"]) == 1 and r["cpu_main_s"][0] <= r["cpu_s"][0]
        assert r["metrics"]["main_peak_rss_mb"] > 0 and r["metrics"]["worker_peak_rss_mb"] > 0
    table = stdout.split("## Processes of the DataLoader workloads: CPU and peak memory")[1]
    assert table.count("| loader-16k | tfr_torch |") == 6


def test_sequence_rows_on_both_backends(tmp_path):
    """The SequenceExample workloads' tfr_torch rows run and report (the peers are not installed in the suite)."""
    stdout, rows = run_rows(tmp_path, "read-decode-sequence", "per-record-sequence")
    keys = [(r["workload"], r["library"], r["key"]) for r in rows]
    assert keys == [("read-decode-sequence", "tfr_torch", "dataset"), ("read-decode-sequence", "tfr_torch-python",
                                                                      "dataset"),
                    ("per-record-sequence", "tfr_torch", "dataset"), ("per-record-sequence", "tfr_torch-python",
                                                                     "dataset")]
    assert all(r["records_per_s"] > 0 for r in rows)


def test_decode_rows_include_parse_example_from_two_threads(tmp_path):
    """Slow-ish (~5 s): the decode workload's subprocesses, each thread row timing its own GIL-free control."""
    stdout, rows = run_rows(tmp_path, "decode-tabular")
    keys = [(r["library"], r["key"]) for r in rows]
    assert keys == [("tfr_torch", "parse"), ("tfr_torch", "threads"), ("tfr_torch", "threads-pool"),
                    ("tfr_torch-python", "parse")]
    assert "- decode-tabular: parse_example from 2 threads (each thread decoding every other batch): " in stdout
    assert "- decode-tabular: parse_example from 2 threads (ThreadPoolExecutor(2).map, one task per batch): " in stdout
    threads = next(r for r in rows if r["key"] == "threads")
    assert threads["metrics"]["gil_free_2_threads"] > 0  # the machine's own 2-thread scaling, for comparison
    assert "zlib.compress of the same bytes from 2 threads: " in stdout
    assert "; target (issue 26): >= 1.7x one thread, judged on the median round of a pool's threads" in stdout
    # in the same rounds: a pool's threads (started once, kept busy), and, where threads can be pinned, pinned ones
    assert threads["metrics"]["pool_median"] > 0
    assert "a pool's 2 threads (started once and kept busy: the second of two passes in a row), in the same " in stdout
    pool = next(r for r in rows if r["key"] == "threads-pool")
    assert pool["metrics"]["gil_free_2_threads"] > 0


def _compare_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_compare", os.path.join(os.path.dirname(RUN), "compare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compare_knows_the_workloads_run_py_lists():
    assert _compare_module().known_workloads(os.path.dirname(os.path.dirname(RUN))) == WORKLOADS


def test_compare_reports_medians_ratios_and_a_verdict_that_every_round_must_agree_on():
    """benchmarks/compare.py's summary of run.py reports: a variant is "slower" or "faster" only where every
    round's ratio is past 10% the same way; rows that failed, other libraries and variants missing from a round
    on either side are left out."""
    compare = _compare_module()

    def report(**rates):
        rows = [{"workload": "w", "library": "tfr_torch", "key": key, "label": f"label {key}", "status": "ok",
                 "records_per_s": rate} for key, rate in rates.items()]
        rows.append({"workload": "w", "library": "tensorflow", "key": "a", "label": "tf", "status": "ok",
                     "records_per_s": 1.0})
        rows.append({"workload": "w", "library": "tfr_torch", "key": "z", "label": "failed", "status": "error"})
        return {"rows": rows}

    base = [report(a=100, b=100, c=100, d=100, e=100), report(a=100, b=100, c=100, d=100)]
    head = [report(a=150, b=80, c=130, d=105, e=1), report(a=120, b=70, c=80, d=95, e=1)]
    lines = {line["variant"]: line for line in compare.summarize(base, head)}
    assert sorted(lines) == ["a", "b", "c", "d"]  # e did not run in the base's second round
    assert {k: line["verdict"] for k, line in lines.items()} == {"a": "faster", "b": "slower", "c": "mixed",
                                                                 "d": "same"}
    assert lines["a"]["rounds"] == [1.5, 1.2] and lines["a"]["ratio"] == 135 / 100
    assert lines["b"]["label"] == "label b" and (lines["b"]["base"], lines["b"]["head"]) == (100, 75)


def test_gzip_rows_include_the_global_shuffle_through_seek_points(tmp_path):
    """The read-16k-gzip workload also reads every record in a random order (TFRecordDataset's global shuffle
    through the seek points build_index writes beside the data set): the row benchmarks/compare.py compares for a
    change to random access into compressed files."""
    _, rows = run_rows(tmp_path, "read-16k-gzip")
    shuffled = [r for r in rows if r["key"] == "shuffled"]
    assert [r["library"] for r in shuffled] == ["tfr_torch"] and shuffled[0]["records_per_s"] > 0
    data = tmp_path / "data"
    assert any(name.endswith(".idx.seek") for name in os.listdir(data)) == tfr_torch_native()


def tfr_torch_native() -> bool:
    from tfr_torch import _native

    return _native.available()


def test_shuffle_spill_reads_every_record_in_each_way():
    """benchmarks/shuffle_spill.py on a tiny file with tiny groups: the three epochs read every record (it asserts
    the counts itself) and it prints each one's ratio to the sequential pass."""
    script = os.path.join(os.path.dirname(RUN), "shuffle_spill.py")
    proc = subprocess.run([sys.executable, script, "--total-mb", "2", "--group-mb", "0.1", "--repeat", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = [line.split()[0] for line in proc.stdout.splitlines()[1:]]
    assert names == ["sequential", "grouped", "spilled"] and "x sequential" in proc.stdout
