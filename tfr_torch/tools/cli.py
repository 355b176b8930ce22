"""The `tfr-torch` command line (also `python -m tfr_torch`).

Commands: count, index, verify, head, schema, convert, inspect, reshard. Data problems are printed as `path:offset: what is wrong` lines and
make the exit status 1; bad usage exits 2.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from tfr_torch._version import __version__
from tfr_torch.errors import DecodeError, TFRecordError
from tfr_torch.format.example import decode_example, decode_sequence_example
from tfr_torch.format.index import build_index, index_path_for
from tfr_torch.format.paths import expand_paths
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.tensor import DTYPES, decode_tensor_proto

__all__ = ["main"]


def _problem(err: BaseException) -> str:
    """One `path:offset: what is wrong` line."""
    if isinstance(err, TFRecordError):
        offset = err.offset if err.offset is not None else 0
        return f"{err.path}:{offset}: {err.message}"
    return f"{getattr(err, 'filename', None) or '?'}:0: {err}"


def _cmd_count(args: argparse.Namespace) -> int:
    total, status = 0, 0
    paths = expand_paths(args.files)
    for path in paths:
        try:
            with RecordReader(path, args.compression, verify=False) as reader:
                n = sum(1 for _ in reader)
        except (TFRecordError, OSError) as err:
            print(_problem(err), file=sys.stderr)
            status = 1
            continue
        total += n
        print(f"{n}\t{path}")
    if len(paths) > 1:
        print(f"{total}\ttotal")
    return status


def _cmd_index(args: argparse.Namespace) -> int:
    status = 0
    for path in expand_paths(args.files):
        target = index_path_for(path)
        if args.out_dir:
            target = f"{args.out_dir.rstrip('/')}/{path.rsplit('/', 1)[-1]}.idx"
        try:
            build_index(path, target, compression=args.compression)
        except (TFRecordError, OSError) as err:
            print(_problem(err), file=sys.stderr)
            status = 1
            continue
        print(target)
    return status


def _cmd_verify(args: argparse.Namespace) -> int:
    status = 0
    for path in expand_paths(args.files):
        problems: list[TFRecordError] = []
        try:
            with RecordReader(path, args.compression, verify=True, on_error=problems.append) as reader:
                count = sum(1 for _ in reader)
        except (TFRecordError, OSError) as err:
            problems.append(err)  # type: ignore[arg-type]
            count = None
        for err in problems:
            print(_problem(err))
        if problems:
            status = 1
        elif not args.quiet:
            print(f"{path}: OK, {count} records")
    return status


def _json_float(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _json_bytes(value: bytes) -> Any:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def _json_values(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return {"bytes": [_json_bytes(v) for v in value]}
    if value.dtype == np.int64:
        return {"int64": value.tolist()}
    return {"float": [_json_float(float(v)) for v in value.tolist()]}


def _json_tensor(values: Any) -> Any:
    if isinstance(values, bytes):
        return _json_bytes(values)
    if isinstance(values, list):
        return [_json_tensor(v) for v in values]
    array = np.asarray(values)
    if array.dtype.kind == "c":
        return [[_json_float(v.real), _json_float(v.imag)] for v in array.ravel().tolist()]
    if array.dtype.kind == "f":
        return [_json_float(v) for v in array.astype(np.float64).ravel().tolist()]
    return array.ravel().tolist()


def _render(record: bytes, kind: str, offset: int) -> dict[str, Any]:
    if kind in ("auto", "sequence"):
        try:
            context, lists = decode_sequence_example(record)
        except DecodeError:
            if kind == "sequence":
                raise
        else:
            if lists or kind == "sequence":
                return {"context": {k: _json_values(v) for k, v in context.items()},
                        "feature_lists": {k: [_json_values(s) for s in steps] for k, steps in lists.items()}}
    if kind in ("auto", "example"):
        try:
            features = decode_example(record)
        except DecodeError:
            if kind == "example":
                raise
        else:
            if features or not record or kind == "example":
                return {k: _json_values(v) for k, v in features.items()}
    if kind in ("auto", "tensor"):
        try:
            tensor = decode_tensor_proto(record)
        except DecodeError:
            if kind == "tensor":
                raise
        else:
            values = tensor.values
            if tensor.dtype == 14:  # bfloat16 bits -> float32
                values = (np.asarray(values, dtype=np.uint32) << 16).view(np.float32)
            return {"dtype": DTYPES[tensor.dtype][0], "shape": list(tensor.shape), "values": _json_tensor(values)}
    return {"offset": offset, "length": len(record), "base64": base64.b64encode(record).decode("ascii")}


def _cmd_head(args: argparse.Namespace) -> int:
    paths = expand_paths(args.files)
    for path in paths:
        remaining = args.n
        try:
            with RecordReader(path, args.compression) as reader:
                offset = reader.offset
                for record in reader:
                    if remaining <= 0:
                        break
                    try:
                        line = _render(record, args.as_, offset)
                    except DecodeError as err:
                        print(f"{path}:{offset}: {err.message}", file=sys.stderr)
                        return 1
                    if len(paths) > 1:
                        line = {"file": path, **line}
                    print(json.dumps(line, ensure_ascii=False))
                    offset = reader.offset
                    remaining -= 1
        except (TFRecordError, OSError) as err:
            print(_problem(err), file=sys.stderr)
            return 1
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from tfr_torch.decode.infer import format_features, infer_features  # imports torch: only for this command

    try:
        spec = infer_features(expand_paths(args.files), max_records=args.max_records)
    except (TFRecordError, OSError) as err:
        print(_problem(err), file=sys.stderr)
        return 1
    except ValueError as err:
        print(f"tfr-torch schema: {err}", file=sys.stderr)
        return 1
    print(format_features(spec), end="")
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from tfr_torch.tools.convert import convert_image_folder

    try:
        result = convert_image_folder(args.src, args.out, args.name, args.split, format=args.format,
                                      quality=args.quality, shard_size=args.shard_size, compression=args.compression,
                                      workers=args.workers, on_error=args.on_error, check=not args.no_check,
                                      resume=not args.restart, progress=not args.quiet)
    except (TFRecordError, OSError, ValueError) as err:
        print(f"tfr-torch convert: {err}", file=sys.stderr)
        return 1
    for path in result.paths:
        print(path)
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tfr_torch.tools.inspect import inspect_files

    try:
        print(inspect_files(expand_paths(args.files), args.compression, args.max_records), end="")
    except (TFRecordError, OSError) as err:
        print(_problem(err), file=sys.stderr)
        return 1
    return 0


def _cmd_reshard(args: argparse.Namespace) -> int:
    from tfr_torch.tools.inspect import reshard

    try:
        paths = reshard(expand_paths(args.files), args.out, shard_size=args.shard_size, compression=args.out_compression,
                        name=args.name, split=args.split, progress=not args.quiet)
    except (TFRecordError, OSError, ValueError) as err:
        print(f"tfr-torch reshard: {err}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfr-torch", description="TFRecord files without TensorFlow.")
    parser.add_argument("--version", action="version", version=f"tfr_torch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files, glob patterns or fsspec URLs")
        p.add_argument("--compression", default="auto", help="auto (default), none, gzip or zlib")
        return p

    command("count", "Print the number of records of each file (header CRCs checked).").set_defaults(run=_cmd_count)
    p = command("index", "Write <file>.idx beside each file (DALI / tfrecord package format).")
    p.add_argument("--out-dir", help="write the indexes into this folder instead")
    p.set_defaults(run=_cmd_index)
    p = command("verify", "Check every record's CRCs; print `path:offset: problem` lines; exit 1 if any.")
    p.add_argument("-q", "--quiet", action="store_true", help="print only problems")
    p.set_defaults(run=_cmd_verify)
    p = command("head", "Print the first records as JSON lines (Examples, SequenceExamples, tensors or raw).")
    p.add_argument("-n", type=int, default=10, help="how many records of each file (default 10)")
    p.add_argument("--as", dest="as_", default="auto", choices=["auto", "example", "sequence", "tensor", "raw"],
                   help="how to decode records (default: guess)")
    p.set_defaults(run=_cmd_head)
    p = command("schema", "Propose a feature spec for tf.train.Example files, printed as Python code to paste.")
    p.add_argument("--max-records", type=int, default=1000, help="records to look at (default 1000)")
    p.set_defaults(run=_cmd_schema)

    p = sub.add_parser("convert", help="Convert an image folder (class subfolders) into sharded TFRecords.",
                       description="Convert an image folder (ImageFolder layout: SRC/<class>/<images>) into TFDS-named "
                                   "shards with indexes and a sidecar. Resumes an interrupted run.")
    p.add_argument("src", metavar="SRC")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--name", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--shard-size", default="128MB")
    p.add_argument("--workers", type=int, default=max(1, min(8, (os.cpu_count() or 1))))
    p.add_argument("--format", default="keep", choices=["keep", "jpeg", "png", "raw"])
    p.add_argument("--quality", type=int, default=95, help="JPEG quality with --format jpeg")
    p.add_argument("--compression", default=None, help="none (default), gzip or zlib")
    p.add_argument("--on-error", default="raise", choices=["raise", "skip"], help="what a broken image does")
    p.add_argument("--no-check", action="store_true", help="with --format keep, do not decode images to check them")
    p.add_argument("--restart", action="store_true", help="ignore the shards of an interrupted run")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.set_defaults(run=_cmd_convert)

    p = command("inspect", "Files, records, bytes, compression, and each feature's kind, dtype and value counts.")
    p.add_argument("--max-records", type=int, default=None, help="look at this many records per file at most")
    p.set_defaults(run=_cmd_inspect)

    p = sub.add_parser("reshard", help="Rewrite records into new shards (size, compression), with indexes and a "
                       "sidecar.", description="Rewrite records into new shards, in order, with indexes and a sidecar.")
    p.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files, glob patterns or fsspec URLs (any "
                   "compression, detected)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--shard-size", default="128MB")
    p.add_argument("--compression", dest="out_compression", default=None,
                   help="compression of the new shards: none (default), gzip or zlib")
    p.add_argument("--name", help="dataset name (default: from the input sidecar or file names)")
    p.add_argument("--split", help="split (default: from the input sidecar, else 'train')")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(run=_cmd_reshard)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except FileNotFoundError as err:
        print(f"tfr-torch: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `tfr-torch head ... | head -1`
        return 0
