"""`tfr-torch` defects left by an earlier session, each with the test that failed before its fix: `inspect` on a
pipe (its bytes), `head --as example` on serialize_tensor records, SIGTERM during a write (temporary files, exit
status 143), and `head`'s cutting of long SequenceExample feature lists.

Tests that failed before their fix carry a `# Fixed:` comment saying what the defect was.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tfr_torch
from tfr_torch.tools.cli import main

DEADLINE_S = 120  # generous: how long a poll waits for what it expects on a busy machine (never a timed assert)


def run(*args):
    """(exit status, stdout, stderr) of `tfr-torch ARGS` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def table(text):
    """inspect's first table (files): {file: [records, bytes, compression]}."""
    rows = [line.split("\t") for line in text.split("\n\n")[0].splitlines()]
    assert rows[0] == ["file", "records", "bytes", "compression"]
    return {row[0]: row[1:] for row in rows[1:]}


@contextlib.contextmanager
def fifo_fed_with(path, data):
    """A FIFO at `path` that a thread fills with `data` (once a reader opens it), then closes."""
    os.mkfifo(path)
    errors = []

    def feed():
        try:
            with open(path, "wb") as pipe:
                pipe.write(data)
        except OSError as exc:  # (a reader that went away early: the test's asserts say more)
            errors.append(exc)

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    try:
        yield str(path)
    finally:
        if thread.is_alive():  # nobody opened it: let the feeder go (opened without waiting for a writer: the
            with contextlib.suppress(OSError):  # feeder may have closed its end since is_alive, and a blocking
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # open would then wait forever)
                os.set_blocking(fd, True)
                with os.fdopen(fd, "rb") as pipe:
                    pipe.read()
        thread.join(DEADLINE_S)
    assert not errors, errors


# ------------------------------------------------------------------------------------------ inspect on a pipe


def test_inspect_on_a_fifo_gives_the_bytes_read_not_0(tmp_path, write_records):
    # Fixed: inspect took each file's size from its st_size, which is 0 for a pipe: `tfr-torch inspect <(cat f)`
    # said "bytes 0" for a stream of 130 bytes (and a "total" with it).
    plain = write_records(str(tmp_path / "f.tfrecord"), [{"id": i, "v": np.arange(i, dtype=np.float32)}
                                                         for i in range(40)])
    data = open(plain, "rb").read()
    with fifo_fed_with(tmp_path / "pipe", data) as pipe:
        rc, out, err = run("inspect", "-q", pipe, plain)
    assert (rc, err) == (0, "")
    assert table(out) == {pipe: ["40", str(len(data)), "none"], plain: ["40", str(len(data)), "none"],
                          "total": ["80", str(2 * len(data))]}


def test_inspect_on_a_compressed_fifo_says_its_size_is_unknown(tmp_path, write_records):
    # Fixed: a GZIP stream through a pipe was "bytes 0" too; only the decompressor sees its compressed bytes, so
    # the size is said to be unknown (and so is the total), never a false 0.
    plain = write_records(str(tmp_path / "f.tfrecord"), [{"id": i} for i in range(7)])
    gz = write_records(str(tmp_path / "f.tfrecord.gz"), [{"id": i} for i in range(7)], "gzip")
    with fifo_fed_with(tmp_path / "pipe", open(gz, "rb").read()) as pipe:
        rc, out, err = run("inspect", "-q", pipe, plain)
    assert (rc, err) == (0, "")
    assert table(out) == {pipe: ["7", "unknown", "gzip"], plain: ["7", str(os.path.getsize(plain)), "none"],
                          "total": ["14", "unknown"]}


def test_inspect_through_process_substitution_in_a_real_shell(tmp_path, write_records):
    """`tfr-torch inspect <(cat f)` as a user types it (bash's /dev/fd/N)."""
    plain = write_records(str(tmp_path / "f.tfrecord"), [{"id": i} for i in range(3)])
    proc = subprocess.run(["bash", "-c", f'"{sys.executable}" -m tfr_torch inspect <(cat "{plain}")'],
                          capture_output=True, text=True, timeout=DEADLINE_S)
    assert (proc.returncode, proc.stderr) == (0, "")
    ((name, cells),) = table(proc.stdout).items()
    assert name.startswith("/dev/fd/") and cells == ["3", str(os.path.getsize(plain)), "none"]


# ------------------------------------------------------------------------------ head --as example on tensors


def test_head_as_example_on_serialized_tensors_is_a_problem_not_an_empty_example(tmp_path, write_records):
    # Fixed: protobuf's lenient parse skips a TensorProto's fields (field 1, its dtype, is a varint where an
    # Example's field 1 is length-delimited), so `head --as example` printed {"example": {}} for every
    # serialize_tensor record, and exit status 0.
    path = write_records(str(tmp_path / "t.tfrecord"),
                         [tfr_torch.serialize_tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), b""])
    rc, out, err = run("head", "--as", "example", path)
    assert (rc, out) == (1, "")
    assert err == (f"{path}:0: not a tf.train.Example: its 38 bytes have no features field (field 1, "
                   "length-delimited); they look like a serialize_tensor payload (its field 1 is a varint, a "
                   "TensorProto's dtype): try --as tensor\n")
    rc, out, err = run("head", "--as", "tensor", path, "-n", 1)  # what the message says to do works
    assert (rc, err) == (0, "")
    assert json.loads(out)["tensor"] == {"dtype": "float32", "shape": [2, 3], "values": [0, 1, 2, 3, 4, 5]}


def test_head_as_example_keeps_the_examples_without_features(tmp_path, write_records):
    """An Example without features is {} (the empty record, and `features {}` as b"\\n\\x00"), an Example with
    features shows them, and a SequenceExample's context is shown as the Example it is on the wire; a
    SequenceExample without context is not an Example, and the message says to read it with --as sequence."""
    with_context = tfr_torch.encode_sequence_example({"c": 1}, {"f": [[1]]})
    without_context = tfr_torch.encode_sequence_example({}, {"f": [[1]]})
    records = [b"", b"\n\x00", tfr_torch.encode_example({"a": 1}), with_context, without_context]
    path = write_records(str(tmp_path / "e.tfrecord"), records)
    rc, out, err = run("head", "--as", "example", path)
    shown = [json.loads(line)["example"] for line in out.splitlines()]
    assert shown == [{}, {}, {"a": {"int64": [1]}}, {"c": {"int64": [1]}}]
    offset = sum(len(r) + 16 for r in records[:4])
    assert (rc, err) == (1, f"{path}:{offset}: not a tf.train.Example: its {len(without_context)} bytes have no "
                            "features field (field 1, length-delimited); they look like a SequenceExample without "
                            "context: try --as sequence\n")


def test_head_auto_still_shows_tensors_as_tensors(tmp_path, write_records):
    """The check is --as example's only: auto's guess (record_kind) calls the same records tensors."""
    path = write_records(str(tmp_path / "t.tfrecord"), [tfr_torch.serialize_tensor(np.array(5, dtype=np.int64))])
    rc, out, err = run("head", path)
    assert (rc, err) == (0, "")
    assert json.loads(out)["tensor"] == {"dtype": "int64", "shape": [], "values": [5]}


# ------------------------------------------------------------------------------------- SIGTERM during writes


def wait_for(predicate, proc, what):
    """Poll `predicate` until it is true; fail (saying what the process printed) if the process ends first or
    DEADLINE_S passes."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended (status {proc.returncode}) before {what}: {out!r} {err!r}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            pytest.fail(f"no {what} within {DEADLINE_S} s")
        time.sleep(0.01)


def test_sigterm_during_reshard_removes_its_temporary_files_and_exits_143(tmp_path, write_records):
    # Fixed: SIGTERM ended the process at once (Python's default action), so the hidden temporary file of the
    # shard being written (`.NAME-SPLIT.tfrecord-00000.partial.XXXXXXXX.tmp`, as large as the shard) was left in
    # the output folder, and the status was -15 rather than 143; Ctrl-C removed it.
    """The input is one 2 MB file of incompressible records given 300 times, written into one GZIP shard: far more
    than the command can write before the signal comes, however fast the machine."""
    rng = np.random.default_rng(0)
    path = write_records(str(tmp_path / "in.tfrecord"), [rng.bytes(8192) for _ in range(256)])
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tfr_torch", "reshard", *[path] * 300, "--out", str(out),
                             "--compression", "gzip", "--shard-size", "10GB", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def temporaries():
        return [n for n in os.listdir(out) if n.endswith(".tmp")] if out.is_dir() else []

    wait_for(temporaries, proc, "a temporary file in the output folder")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=DEADLINE_S)
    assert (proc.returncode, stdout, stderr) == (143, "", "tfr-torch reshard: terminated\n")
    assert os.listdir(out) == []  # reshard never resumes: no temporary file, no shard, no sidecar


def test_sigterm_during_index_exits_143_and_leaves_no_temporary_file(tmp_path, write_records):
    """A real SIGTERM, sent once the first of many index runs has printed its line: status 143, one line on
    stderr, and beside the file only a complete index and complete seek points."""
    path = write_records(str(tmp_path / "m.tfrecord.gz"),
                         [{"id": i, "v": np.arange(20, dtype=np.float32)} for i in range(5000)], "gzip")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "tfr_torch", "index", *[path] * 400], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline() == f"{path}.idx\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=DEADLINE_S)
    assert (proc.returncode, err) == (143, "tfr-torch index: terminated\n")
    left = sorted(os.listdir(tmp_path))
    assert set(left) <= {"m.tfrecord.gz", "m.tfrecord.gz.idx", "m.tfrecord.gz.idx.seek"}, left
    assert len(tfr_torch.read_index(path + ".idx", path)) == 5000


def _children(pid):
    """The process ids whose parent is `pid` (from /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(name))
    return found


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has ended
    except OSError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads process parents from /proc")
def test_sigterm_during_convert_with_workers_ends_them_and_leaves_no_temporary_file(tmp_path):
    """A real SIGTERM to `convert --workers 2` once its worker processes run and a shard is being written: status
    143, one line, no temporary file, and the workers (forked with the handler installed: each ends by SIGTERM, as
    without it) gone too."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(2):
        (tmp_path / "src" / f"c{c}").mkdir(parents=True)
        for i in range(24):  # noise: every re-encoding costs its full time, however fast the machine
            Image.fromarray(rng.integers(0, 256, (512, 512, 3), dtype=np.uint8)).save(
                tmp_path / "src" / f"c{c}" / f"{i}.png", compress_level=0)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tfr_torch", "convert", str(tmp_path / "src"), str(out),
                             "--name", "n", "--workers", "2", "--format", "png", "--shard-size", "1GB", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def temporaries():
        return [n for n in os.listdir(out) if n.endswith(".tmp")] if out.is_dir() else []

    wait_for(lambda: len(_children(proc.pid)) >= 2 and temporaries(), proc, "two workers and a temporary file")
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=DEADLINE_S)
    assert (proc.returncode, stdout, stderr) == (143, "", "tfr-torch convert: terminated\n")
    assert temporaries() == []
    deadline = time.monotonic() + DEADLINE_S
    while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in workers), workers


def test_main_puts_back_the_sigterm_handler_it_found(tmp_path, write_records):
    """main() run in a process of its own (a test, a notebook) leaves SIGTERM as it found it."""
    path = write_records(str(tmp_path / "f.tfrecord"), [b"x"])

    def mine(signum, frame):
        raise AssertionError("not called")

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        assert run("count", path) == (0, f"1\t{path}\n", "")
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


# -------------------------------------------------------------------------------- head: long feature lists


def test_head_cuts_long_feature_lists_as_it_cuts_long_value_lists(tmp_path, write_records):
    # Fixed: without --full, head cut an Example's list of 50 values to 32 (with "count" and "truncated") but
    # printed every step of a SequenceExample feature list, however many.
    steps = [[i, -i] for i in range(50)]
    record = tfr_torch.encode_sequence_example({"c": list(range(50))}, {"long": steps, "short": steps[:32]})
    path = write_records(str(tmp_path / "s.tfrecord"), [record])
    rc, out, err = run("head", path)
    assert (rc, err) == (0, "")
    shown = json.loads(out)["sequence_example"]
    assert shown["context"] == {"c": {"int64": list(range(32)), "count": 50, "truncated": True}}
    assert shown["feature_lists"] == {
        "long": {"steps": [{"int64": [i, -i]} for i in range(32)], "count": 50, "truncated": True},
        "short": [{"int64": [i, -i]} for i in range(32)]}  # 32 steps: not cut, a plain list as before
    rc, out, err = run("head", "--full", path)
    assert (rc, err) == (0, "")
    assert json.loads(out)["sequence_example"]["feature_lists"]["long"] == [{"int64": [i, -i]} for i in range(50)]


def test_head_cuts_the_values_inside_the_steps_it_shows(tmp_path, write_records):
    """Each step shown is cut by the value rule too: a cut list of cut steps."""
    long_step = list(range(40))
    path = write_records(str(tmp_path / "s.tfrecord"),
                         [tfr_torch.encode_sequence_example({}, {"f": [long_step] * 33})])
    rc, out, err = run("head", path)
    assert (rc, err) == (0, "")
    lists = json.loads(out)["sequence_example"]["feature_lists"]
    step = {"int64": list(range(32)), "count": 40, "truncated": True}
    assert lists == {"f": {"steps": [step] * 32, "count": 33, "truncated": True}}
