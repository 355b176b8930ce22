"""`tfr-torch convert` and `reshard`: commands that write a new set of shards (with indexes and a sidecar, or a
TFDS folder)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from tfr_torch.errors import TFRecordError
from tfr_torch.tools.cli_common import UsageError, _files, _problem


def _cmd_convert(args: argparse.Namespace) -> int:
    if args.quality is not None and args.format != "jpeg":
        raise UsageError(f"argument --quality: applies to --format jpeg only (got --format {args.format})")
    if args.mode != "UNCHANGED" and args.format == "keep":
        raise UsageError(f"argument --mode: {args.mode} needs --format jpeg, png or raw (keep stores the files as "
                         f"they are)")
    if args.format == "jpeg" and args.mode in ("GRAY_ALPHA", "RGB_ALPHA"):
        raise UsageError(f"argument --mode: JPEG has no alpha channel: {args.mode} needs --format png or raw")
    if args.address is not None and args.engine != "ray":
        raise UsageError("argument --address: names a Ray cluster, so it needs --engine ray")
    version = _check_tfds_options(args, args.compression)
    from tfr_torch.tools.convert import convert_image_folder

    if not os.path.isdir(args.src):
        print(f"tfr-torch convert: no such folder: {args.src!r}", file=sys.stderr)
        return 1
    try:
        with _warnings_as_lines("convert"):
            result = convert_image_folder(args.src, args.out, args.name, args.split, format=args.format,
                                          quality=95 if args.quality is None else args.quality,
                                          shard_size=args.shard_size, compression=args.compression,
                                          workers=args.workers, on_error=args.on_error, check=not args.no_check,
                                          resume=not args.restart, progress=not args.quiet, engine=args.engine,
                                          address=args.address, tfds=args.tfds, version=version,
                                          mode=args.mode, allow_empty=args.allow_empty)
    except ImportError as err:  # --engine ray without Ray installed
        print(f"tfr-torch convert: {err}", file=sys.stderr)
        return 1
    except (TFRecordError, OSError, ValueError) as err:
        print(f"tfr-torch convert: {_problem(err)}", file=sys.stderr)
        return 1
    for path in result.paths:
        print(path)
    return 0


@contextlib.contextmanager
def _warnings_as_lines(command: str) -> Iterator[None]:
    """The library's warnings (e.g. `skipped: path: reason` for each broken image with --on-error skip, said as
    warnings under -q) as one `tfr-torch COMMAND: message` line each on stderr, not Python's two-line form that
    names a source line of this module."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        print(f"tfr-torch {command}: {message}", file=sys.stderr, flush=True)  # as it happens, not at the end

    with warnings.catch_warnings():  # the usual filters (a repeated third-party warning is still said once)
        warnings.showwarning = show
        yield


def _check_tfds_options(args: argparse.Namespace, compression: str | None) -> str:
    """Refuse --tfds-version without --tfds and --tfds with compression; return the TFDS version to write."""
    if args.tfds_version is not None and not args.tfds:
        raise UsageError("argument --tfds-version: applies to --tfds only (a TensorFlow Datasets folder)")
    if args.tfds and compression not in (None, "none"):
        raise UsageError(f"argument --compression: TensorFlow Datasets folders (--tfds) hold uncompressed shards, got "
                         f"--compression {compression}")
    return args.tfds_version or "1.0.0"


def _cmd_reshard(args: argparse.Namespace) -> int:
    from tfr_torch.tools.reshard import check_output, reshard, reshard_names

    version = _check_tfds_options(args, args.out_compression)
    paths = _files(args)
    name, split = reshard_names(paths, args.name, args.split)
    try:
        check_output(paths, args.out, name, split, version if args.tfds else None)
    except ValueError as err:
        raise UsageError(str(err)) from None
    try:
        paths = reshard(paths, args.out, shard_size=args.shard_size, compression=args.out_compression,
                        name=name, split=split, progress=not args.quiet, tfds=args.tfds, version=version,
                        num_shards=args.num_shards)
    except (TFRecordError, OSError, ValueError) as err:
        print(f"tfr-torch reshard: {_problem(err)}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0

