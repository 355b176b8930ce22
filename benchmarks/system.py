"""The machine and its processes: facts for the report's header, CPU time of worker processes, memory."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def dist_version(library: str) -> str | None:
    names = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tensorflow-macos", "tf-nightly"),
             "tfrecord": ("tfrecord",), "tfr_torch": ()}.get(library, (library,))
    for n in names:
        try:
            return importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "?"


def machine_facts() -> dict[str, Any]:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    load = load_average()
    from tfr_torch import __version__ as tfr_version
    from tfr_torch import backend

    versions = {"tfr_torch": f"{tfr_version} (checkout {REPO}, {backend()} backend)"}
    modules = {"tensorflow": "tensorflow", "tfrecord": "tfrecord", "numpy": "numpy", "protobuf": "google.protobuf",
               "crc32c": "crc32c", "torch": "torch"}
    for lib, module in modules.items():
        versions[lib] = dist_version(lib) if importlib.util.find_spec(module) else None
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return {"cpu_model": model, "cpu_count": os.cpu_count(), "cpus_usable": usable, "load_avg": load,
            "platform": platform.platform(), "python": python, "executable": sys.executable, "versions": versions}


def children_cpu() -> float:
    """CPU seconds of this process's children: the finished, waited-for ones (DataLoader workers, once joined)
    plus the live ones (persistent workers), read from /proc where there is one."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return 0.0
    import multiprocessing

    # active_children() first: it reaps the children that have ended, which moves their CPU time into
    # RUSAGE_CHILDREN; read after it, a child is counted once (reaped, or live/zombie in /proc), never lost between
    # the two readings (a pass's CPU then came out below its main process's alone, now and then)
    live = multiprocessing.active_children()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for child in live:
        try:
            with open(f"/proc/{child.pid}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except (OSError, ValueError, IndexError):
            pass
    return total


def proc_status_kb(pid: int, field: str) -> int | None:
    """A /proc/<pid>/status field in KiB (VmRSS, VmHWM), or None where there is no /proc or the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None



def reset_peak_rss() -> None:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux 4.0+: `5` into /proc/self/clear_refs), so
    that VmHWM read after a pass is the pass's peak, not that of a variant run before it; nothing elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
