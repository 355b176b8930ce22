"""The report: rows with rates and ratios, printed as a Markdown table and a summary."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from benchmarks.registry import LIBRARIES, WORKLOADS
from benchmarks.system import load_average

LOW_CPU_PCT = 90  # a best pass below this CPU % was probably descheduled: flagged in the table


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


@dataclasses.dataclass
class Row:
    """One line of the report: a variant's result (or a library that is not installed or failed), its rates and
    its ratio to tfr_torch's row of the same kind. `to_json()` is what `--json` writes."""

    workload: str
    library: str
    key: str | None  # the variant's key; None for a library that did not run
    label: str
    status: str  # "ok", "error" or "not installed"
    version: str | None = None
    kind: str | None = None
    note: str | None = None
    error: str | None = None
    # from the worker: every timed pass's wall and CPU seconds (the main process's alone in cpu_main_s, for the
    # parallel workloads), the best pass, its CPU %, and extra numbers (largest over the passes, and per pass)
    times_s: list[float] | None = None
    cpu_s: list[float] | None = None
    cpu_main_s: list[float] | None = None
    best_s: float | None = None
    cpu_pct: float | None = None
    metrics: dict[str, float] | None = None
    metrics_per_pass: list[dict[str, float]] | None = None
    # computed here
    records_per_s: float | None = None
    mb_per_s: float | None = None
    tfr_torch_ratio: float | None = None  # tfr_torch's rate of the same kind / this row's
    compared_with: str | None = None  # that tfr_torch row's label
    summary_line: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fields that apply (None left out, as the keys of a dict built up as the run goes)."""
        always = ("workload", "library", "key", "label", "status", "version", "cpu_pct")
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k in always}

    def best_index(self) -> int:
        assert self.times_s is not None
        return min(range(len(self.times_s)), key=self.times_s.__getitem__)


def build_rows(results: list[dict[str, Any]], metas: dict[str, dict[str, Any]]) -> list[Row]:
    """One flat row per variant (or per library that is not installed / failed), with rates and ratios."""
    rows = []
    for res in results:
        wl = WORKLOADS[res["workload"]]
        meta = metas[res["workload"]]
        if res["status"] != "ok":
            rows.append(Row(wl.name, res["library"], None, "—", res["status"], error=res.get("error", "")))
            continue
        by_key = {v.key: v for v in wl.of(res["library"])}
        for r in res["rows"]:
            v = by_key[r["key"]]
            row = Row(wl.name, res["library"], v.key, v.label, kind=v.kind, note=v.note, version=res.get("version"),
                      **{k: x for k, x in r.items() if k != "key"})
            if row.status == "ok" and row.best_s:
                row.records_per_s = meta["records"] / row.best_s
                row.mb_per_s = meta["payload_bytes"] / row.best_s / 1e6
            rows.append(row)
    for row in rows:  # lines of their own in the summary, which may refer to other rows
        v = next((v for v in WORKLOADS[row.workload].of(row.library) if v.key == row.key), None)
        if v is not None and v.summary is not None and row.status == "ok":
            row.summary_line = v.summary(row, rows)
    # ratios: tfr_torch's rate of the same kind / this row's rate
    for row in rows:
        if row.records_per_s and row.library != "tfr_torch":
            base = next((b for b in rows if b.workload == row.workload and b.library == "tfr_torch"
                         and b.kind == row.kind and b.records_per_s), None)
            if base is not None and base.records_per_s:
                row.tfr_torch_ratio = base.records_per_s / row.records_per_s
                row.compared_with = base.label
    return rows


def print_table(rows: list[Row], metas: dict[str, dict[str, Any]], facts: dict[str, Any],
                command: str, args: argparse.Namespace) -> None:
    """The whole report: header, table of rows with its notes, data sets, summary, and the processes' table."""
    v = facts["versions"]
    print("# tfr_torch benchmarks")
    print()
    print(f"- machine: {facts['cpu_model']}, {facts['cpu_count']} CPUs ({facts['cpus_usable']} usable), "
          f"load average at start {facts['load_avg']}, at end {load_average()}; {facts['platform']}")
    print(f"- python: {facts['python']} ({facts['executable']})")
    print("- versions: " + ", ".join(f"{k} {v[k] or 'not installed'}" for k in v))
    print(f"- command: `{command}`")
    print(f"- timing: best of {args.repeat} after {args.warmup} warm-up pass(es); each library in its own subprocess; "
          "MB = 10^6 bytes of record payload; CPU % = process CPU time (with its DataLoader workers') / wall time "
          "of the best pass")
    print()
    print_rows(rows)
    print()
    print("Data: " + "; ".join(
        f"{name}: {m['records']:,} records, {m['payload_bytes'] / 1e6:,.1f} MB payload, "
        f"{m['file_bytes'] / 1e6:,.1f} MB file" for name, m in metas.items()))
    print()
    print_summary(rows)
    print_processes(rows)


def print_rows(rows: list[Row]) -> None:
    """The table, one line per row, then its numbered notes."""
    notes: list[str] = []
    contended = False
    print("| workload | library | variant | records/s | MB/s | CPU % | **tfr_torch ÷ row** (>1: tfr_torch faster) "
          "| compared with (tfr_torch) |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for row in rows:
        label = f"`{row.label}`" if row.label != "—" else "—"
        if row.note:
            if row.note not in notes:
                notes.append(row.note)
            label += f" [{notes.index(row.note) + 1}]"
        if row.status == "not installed":
            cells = ["not installed" + (f" ({row.error})" if row.error else ""), "", "", "", ""]
        elif row.status != "ok" or row.records_per_s is None or row.mb_per_s is None:
            cells = [f"error: {row.error or ''}", "", "", "", ""]
        else:
            ratio = row.tfr_torch_ratio
            cpu = f"{row.cpu_pct:.0f}%" if row.cpu_pct is not None else "n/a"
            if row.cpu_pct is not None and row.cpu_pct < LOW_CPU_PCT:
                contended = True
                cpu += " ⚠"
            if row.library == "tfr_torch":
                cells = [fmt_int(row.records_per_s), f"{row.mb_per_s:,.1f}", cpu, "baseline", ""]
            else:
                cells = [fmt_int(row.records_per_s), f"{row.mb_per_s:,.1f}", cpu,
                         f"{ratio:.2f}×" if ratio else "—", f"`{row.compared_with}`" if ratio else ""]
        print(f"| {row.workload} | {row.library} | {label} | " + " | ".join(cells) + " |")
    print()
    for i, note in enumerate(notes, 1):
        print(f"[{i}] {note}  ")
    if contended:
        print(f"⚠ CPU % under {LOW_CPU_PCT}%: the process (with its DataLoader workers, if any) spent part of its "
              "best pass waiting (other load on the machine, or write-back I/O; for a multi-threaded pipeline, "
              "possibly its own stalls), so that rate is likely pessimistic; rerun with a larger --repeat on a "
              "quieter machine  ")


def print_summary(rows: list[Row]) -> None:
    """Per workload, tfr_torch against each peer's fastest comparable row, with the workload's targets."""
    print("## tfr_torch against the fastest comparable row of each peer")
    print()
    for name in dict.fromkeys(r.workload for r in rows):
        wl = WORKLOADS[name]
        base = next((r for r in rows if r.workload == name and r.library == "tfr_torch"
                     and r.key == wl.baseline and r.records_per_s), None)
        if base is None or base.records_per_s is None:
            print(f"- {name}: tfr_torch baseline `{wl.baseline}` did not run")
            continue
        parts = []
        for lib in LIBRARIES[1:]:
            mine = [r for r in rows if r.workload == name and r.library == lib]
            peers = [r for r in mine if r.tfr_torch_ratio]
            if not peers:
                if mine:
                    parts.append(f"{lib}: {mine[0].status}")
                continue
            # the peer's fastest row that has a tfr_torch row of its kind; its ratio is against that row
            best = max(peers, key=lambda r: r.records_per_s or 0.0)
            ratio = best.tfr_torch_ratio
            parts.append(f"{ratio:.2f}× {lib} `{best.label}`"
                         + (f" (vs tfr_torch `{best.compared_with}`)" if best.compared_with != base.label
                            else ""))
            if lib in wl.targets:
                need, text = wl.targets[lib]
                worst = min(r.tfr_torch_ratio or 0.0 for r in peers)
                parts[-1] += f" — target, {text}: **{'met' if worst >= need else 'NOT met'}**"
        if not parts:
            parts = ["no peer ran"]
        print(f"- {name} (`{base.label}`, {fmt_int(base.records_per_s)} records/s): " + "; ".join(parts))
    for row in rows:
        if row.summary_line:
            print(f"- {row.workload}: {row.summary_line}")


def _pct(seconds: float | None, wall: float) -> str:
    return f"{100.0 * seconds / wall:.0f}%" if seconds is not None and wall >= 0.05 else "n/a"


def _mb(metrics: dict[str, float] | None, key: str) -> str:
    value = (metrics or {}).get(key)
    return f"{value:,.0f}" if value is not None else "—"


def print_processes(rows: list[Row]) -> None:
    """For the workloads with worker processes (DataLoaders) or threads (tf.data AUTOTUNE): the best pass's CPU
    split between the main process and its workers, and the peak RSS of each (MB = 10^6 bytes)."""
    mine = [r for r in rows if WORKLOADS[r.workload].parallel and r.status == "ok" and r.times_s and r.cpu_s]
    if not mine:
        return
    print()
    print("## Processes of the DataLoader workloads: CPU and peak memory")
    print()
    print("CPU % of the best pass's wall time (100% = one core; the main process's figure includes its threads: "
          "all of TensorFlow's pipeline). Peak RSS: the main process's VmHWM during the pass; the largest worker's "
          "VmHWM since it started (workers are persistent unless the row says otherwise), in MB.")
    print()
    print("| workload | library | variant | main process CPU % | workers' CPU % (all) | main peak RSS | "
          "largest worker's peak RSS |")
    print("|---|---|---|---:|---:|---:|---:|")
    for row in mine:
        assert row.times_s is not None and row.cpu_s is not None
        best = row.best_index()
        wall = row.times_s[best]
        main = row.cpu_main_s[best] if row.cpu_main_s else None
        workers = row.cpu_s[best] - main if main is not None else None
        worker_pids = (row.metrics or {}).get("worker_peak_rss_mb") is not None
        print(f"| {row.workload} | {row.library} | `{row.label}` | {_pct(main, wall)} | "
              f"{_pct(workers, wall) if worker_pids else '—'} | {_mb(row.metrics, 'main_peak_rss_mb')} | "
              f"{_mb(row.metrics, 'worker_peak_rss_mb')} |")


# ---- Plots for the documentation site (`make docs`): drawn from the JSON the runners write, never by hand ----------

LIBRARY_COLOURS = {"tfr_torch": "#1f77b4", "tfr_torch-python": "#9ecae1", "tfrecord": "#ff7f0e",
                   "tensorflow": "#d62728"}


def shown_command(command: str) -> str:
    """The command line as the docs show it: the interpreter's path becomes `python`, a --json path its file name."""
    words = command.split()
    if words and words[0].endswith(("python", "python3")) or words and "/python" in words[0]:
        words[0] = "python"
    for i, word in enumerate(words[:-1]):
        if word == "--json":
            words[i + 1] = words[i + 1].rsplit("/", 1)[-1]
    return " ".join(words)


def run_caption(data: dict[str, Any]) -> str:
    """What ran and where, for a `run.py --json` file: under each of its plots."""
    m = data["machine"]
    versions = ", ".join(f"{k} {v.split(' (')[0]}" for k, v in m["versions"].items() if v and k != "tfr_torch")
    backend = "native backend" if "native" in (m["versions"].get("tfr_torch") or "") else "backend not recorded"
    return (f"command: {shown_command(data['command'])}\n"
            f"machine: {m['cpu_model']}, {m['cpu_count']} CPUs, load average at start {m['load_avg']}; "
            f"{m['python']}; tfr_torch {backend}; {versions}\n"
            f"best of {data['repeat']} passes after {data['warmup']} warm-up; CPU only")


def gpu_caption(data: dict[str, Any]) -> str:
    """What ran and where, for a `gpu_pipeline.py --json` file."""
    args = {k: v for k, v in data["args"].items() if k != "json"}
    flags = " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in args.items()
                     if v is not False and v is not None)
    device = f"GPU: {data['gpu']}" if data.get("gpu") else "device: CPU only (no GPU measured yet)"
    decoders = ", ".join(f"{k} {v}" for k, v in data["decoders"].items() if v)
    return (f"command: python benchmarks/gpu_pipeline.py {flags}\n"
            f"machine: {data['cpus']} CPUs, torch {data['torch']}, decoders: {decoders}; {device}")


def plot_names(path: str) -> list[str]:
    """The PNG files `plot_results` draws for one JSON file (no matplotlib needed: the docs test checks them)."""
    import json
    import os

    with open(path) as f:
        data = json.load(f)
    stem = os.path.splitext(os.path.basename(path))[0]
    if "rows" in data and isinstance(data["rows"], list):
        workloads = list(dict.fromkeys(r["workload"] for r in data["rows"]))
        return [f"{stem}-{w}.png" for w in workloads]
    return [f"{stem}.png"]


def _figure(n_bars: int, caption: str) -> tuple[Any, Any]:
    """A figure for n horizontal bars, the caption (command, machine) in small type under the axes."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wrapped = "\n".join(textwrap.fill(line, 118, subsequent_indent="    ") for line in caption.splitlines())
    lines = wrapped.count("\n") + 1
    fig, ax = plt.subplots(figsize=(8, 1.3 + 0.55 * n_bars + 0.13 * lines))
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.44, right=0.97, top=1 - 0.4 / height, bottom=(0.6 + 0.13 * lines) / height)
    fig.text(0.01, 0.01, wrapped, fontsize=6.5, family="monospace", va="bottom", ha="left", color="#444444")
    return fig, ax


def _bars(ax: Any, labels: list[str], values: list[float], colours: list[str], unit: str) -> None:
    import textwrap

    y = list(range(len(labels)))[::-1]
    ax.barh(y, values, color=colours)
    ax.set_yticks(y)
    ax.set_yticklabels([textwrap.fill(label, 50, subsequent_indent="  ", break_long_words=False)
                        for label in labels], fontsize=7.5)
    ax.xaxis.set_major_formatter(lambda x, _: fmt_int(x))
    ax.set_xlabel(unit, fontsize=8.5)
    ax.tick_params(axis="x", labelsize=7.5)
    top = max(values) if values else 1.0
    for yy, v in zip(y, values):
        ax.text(v + top * 0.01, yy, fmt_int(v), va="center", fontsize=8)
    ax.set_xlim(0, top * 1.25)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def plot_results(path: str, out_dir: str) -> list[str]:
    """Draw the plots of one JSON file (`run.py --json`: one per workload, every library's rows in records/s;
    `gpu_pipeline.py --json`: its rows in images/s, the GPU rows marked as not measured where they did not run)
    into `out_dir`, each with the command and the machine under it. Returns the files written."""
    import json
    import os

    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    with open(path) as f:
        data = json.load(f)
    os.makedirs(out_dir, exist_ok=True)
    names = plot_names(path)
    written = []
    if isinstance(data["rows"], list):
        for name in names:
            workload = name[len(os.path.splitext(os.path.basename(path))[0]) + 1:-4]
            rows = [r for r in data["rows"] if r["workload"] == workload and r.get("records_per_s")]
            caption = run_caption(data)
            fig, ax = _figure(len(rows), caption)
            _bars(ax, [f"{r['library']}: {r['label']}" for r in rows], [r["records_per_s"] for r in rows],
                  [LIBRARY_COLOURS.get(r["library"], "#777777") for r in rows], "records/s (higher is faster)")
            ax.set_title(f"{workload} ({data['data'][workload]['records']:,} records)", fontsize=9, loc="left")
            libraries = list(dict.fromkeys(r["library"] for r in rows))
            ax.legend(handles=[Patch(color=LIBRARY_COLOURS.get(lib, "#777777"), label=lib) for lib in libraries],
                      fontsize=7, loc="lower right", frameon=False)
            out = os.path.join(out_dir, name)
            fig.savefig(out, dpi=130)
            plt.close(fig)
            written.append(out)
    else:
        measured = {k: v for k, v in data["rows"].items() if v is not None}
        caption = gpu_caption(data)
        if not data.get("gpu"):
            caption += ("\nnot measured: the GPU rows (decode alone per decoder, DeviceLoader alone, ResNet-50 step "
                        "alone and fed by DeviceLoader / by CPU workers): no GPU run yet")
        fig, ax = _figure(max(1, len(measured)), caption)
        _bars(ax, list(measured), list(measured.values()),
              ["#ff7f0e" if k.startswith("tfrecord") else "#1f77b4" for k in measured], "images/s (higher is faster)")
        device = data["gpu"] or "CPU only, no GPU measured yet"
        ax.set_title(f"Feeding a GPU ({device}):\ndecode + resize 256 + centre crop 224", fontsize=9, loc="left")
        out = os.path.join(out_dir, names[0])
        fig.savefig(out, dpi=130)
        plt.close(fig)
        written.append(out)
    return written


def main(argv: list[str] | None = None) -> None:
    """`python -m benchmarks.report --plot RESULTS.json... --out DIR`: the documentation's plots."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--plot", nargs="+", required=True, metavar="JSON")
    parser.add_argument("--out", required=True, metavar="DIR")
    args = parser.parse_args(argv)
    for path in args.plot:
        for out in plot_results(path, args.out):
            print(f"wrote {out}")


if __name__ == "__main__":
    main()
