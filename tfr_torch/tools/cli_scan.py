"""`tfr-torch count`, `index` and `verify`: commands that run through every record's framing (lengths and CRCs)
without decoding the records."""

from __future__ import annotations

import argparse
import os
import sys

from tfr_torch.errors import TFRecordError
from tfr_torch.format.index import build_index, index_path_for
from tfr_torch.format.paths import file_size, is_url
from tfr_torch.format.reader import RecordReader
from tfr_torch.tools.cli_common import UsageError, _count, _files, _meter, _problem


def _cmd_count(args: argparse.Namespace) -> int:
    paths = _files(args)
    meter = _meter(args, paths, "count")
    total, status = 0, 0
    for path in paths:
        try:
            with RecordReader(path, args.compression, verify=False) as reader:
                n = _count(reader, meter)
        except (TFRecordError, OSError) as err:
            meter.write(_problem(err))
            status = 1
            continue
        total += n
        meter.write(f"{n}\t{path}", sys.stdout)
    meter.done()
    if len(paths) > 1:
        print(f"{total}\ttotal")
    return status


def _cmd_index(args: argparse.Namespace) -> int:
    if args.seek_span != 0 and args.seek_span < 1 << 16:
        raise UsageError(f"argument --seek-span: expected 0 (no seek points) or at least 65536, got {args.seek_span}")
    paths = _files(args)
    targets = [index_path_for(path) for path in paths]
    if args.out_dir:
        out = args.out_dir.rstrip("/") or "/"
        if not is_url(out) and not os.path.isdir(out):
            raise UsageError(f"argument --out-dir: no such folder: {args.out_dir!r}")
        targets = [f"{out}/{path.rsplit('/', 1)[-1]}.idx" for path in paths]
        seen: dict[str, str] = {}
        for path, target in zip(paths, targets):
            if target in seen:
                raise UsageError(f"argument --out-dir: {seen[target]!r} and {path!r} would both write {target!r}")
            seen[target] = path
    meter = _meter(args, paths, "index", unit="files")
    status = 0
    for path, target in zip(paths, targets):
        try:
            build_index(path, target, compression=args.compression,
                        seek_span=None if args.seek_span == 0 else args.seek_span)  # (removes stale seek points)
        except (TFRecordError, OSError) as err:
            meter.write(_problem(err))
            status = 1
            continue
        meter.update(1, file_size(path) if meter.shown else 0)
        meter.write(target, sys.stdout)
    meter.done()
    return status


def _cmd_verify(args: argparse.Namespace) -> int:
    paths = _files(args)
    meter = _meter(args, paths, "verify")
    status = 0
    for path in paths:
        problems = 0

        def report(problem: BaseException) -> None:  # as it is found: a long file's first problems come out first
            nonlocal problems
            problems += 1
            meter.write(_problem(problem), sys.stdout)

        count = 0
        try:
            with RecordReader(path, args.compression, verify=True, on_error=report) as reader:
                count = _count(reader, meter)
        except (TFRecordError, OSError) as err:
            report(err)
        if problems:
            status = 1
        elif not args.quiet:
            meter.write(f"{path}: OK, {count} records", sys.stdout)
    meter.done()
    return status
