"""The `tfr-torch` command line (also `python -m tfr_torch`).

Commands: count, index, verify, head, schema, inspect, convert, reshard. Exit status: 0 when all went well;
1 for a data problem (a missing, corrupt or undecodable file: one `path:offset: what is wrong` line each, on
stderr, except `verify`'s report on stdout); 2 for a usage error (an unknown option, a bad value): one line on
stderr, as argparse does. Progress goes to stderr, only when it is a terminal.
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import numpy as np

from tfr_torch._version import __version__
from tfr_torch.errors import DecodeError, TFRecordError
from tfr_torch.format.compression import normalize_compression
from tfr_torch.format.example import decode_example, decode_sequence_example
from tfr_torch.format.seek import DEFAULT_SPAN
from tfr_torch.format.index import build_index, index_path_for
from tfr_torch.format.paths import expand_paths, file_size, is_url
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.tensor import DTYPES, decode_tensor_proto
from tfr_torch.tools.progress import Progress, is_terminal

__all__ = ["main", "UsageError"]

CUT_BYTES = 64  # head: bytes values longer than this are cut (--full shows them whole)
CUT_VALUES = 32  # head: lists with more values than this are cut


class UsageError(Exception):
    """A bad argument found after parsing: one line on stderr, exit status 2."""


class _Help(argparse.HelpFormatter):
    """Each option's help ends with its default, when it has one that its text does not already give."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (not action.option_strings or action.default in (None, False, argparse.SUPPRESS)
                or "default" in text):
            return text
        return f"{text} (default: %(default)s)"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (`tfr-torch head: error: argument -n: ...`), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


# ----------------------------------------------------------------------------------------- argument types


def _compression(value: str) -> str:
    try:
        return normalize_compression(value, allow_auto=True)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto, none, gzip or zlib, got {value!r}") from None


def _out_compression(value: str) -> str:
    try:
        return normalize_compression(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected none, gzip or zlib, got {value!r}") from None


def _at_least(low: int, what: str = "an integer") -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or number < low:
            raise argparse.ArgumentTypeError(f"expected {what} >= {low}, got {value!r}")
        return number
    return parse


def _quality(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 100:
        raise argparse.ArgumentTypeError(f"expected a JPEG quality from 0 to 100, got {value!r}")
    return number


def _size(value: str) -> str:
    from tfr_torch.tools.shards import parse_size

    try:
        parse_size(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _label(value: str) -> str:
    if not value or "/" in value:
        raise argparse.ArgumentTypeError(f"expected a non-empty name without '/', got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------- helpers


def _problem(err: BaseException) -> str:
    """One `path:offset: what is wrong` line (`path: what is wrong` when there is no offset)."""
    if isinstance(err, TFRecordError):
        # the library's hint names its argument; here it is an option
        message = re.sub(r"pass compression='(\w+)' \(or 'auto'\)", r"pass --compression \1 (or auto)", err.message)
        if err.path is None:
            return message
        return f"{err.path}:{err.offset if err.offset is not None else 0}: {message}"
    if isinstance(err, OSError) and err.filename is not None:
        return f"{err.filename}: {err.strerror or err}"
    return str(err)


def _files(args: argparse.Namespace) -> list[str]:
    """The FILE arguments, globs expanded. A pattern matching nothing is a data problem (exit 1); a path the
    library refuses (e.g. one of its own side files) is a usage error."""
    try:
        return expand_paths(args.files)
    except FileNotFoundError:
        raise
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None


def _meter(args: argparse.Namespace, paths: Sequence[str], label: str, unit: str = "records") -> Progress:
    """A progress bar over the bytes of `paths` (only drawn when stderr is a terminal and -q is not given)."""
    shown = not getattr(args, "quiet", False) and is_terminal(sys.stderr)
    total = None
    if shown:
        try:
            total = sum(file_size(p) for p in paths)
        except OSError:  # a missing file is reported when it is read
            total = None
    return Progress(label=label, enabled=shown, total_bytes=total, unit=unit)


def _read(reader: RecordReader, meter: Progress) -> Iterator[bytes]:
    """The records of `reader`, counted on `meter` (its total dropped for compressed files)."""
    if reader.compression != "none":
        meter.unknown_total()
    update = meter.update
    for record in reader:
        update(1, len(record) + OVERHEAD)
        yield record


def _count(reader: RecordReader, meter: Progress) -> int:
    """How many records `reader` gives, counted on `meter`; framed and checked, never copied out."""
    if reader.compression != "none":
        meter.unknown_total()
    n = 0
    for lengths, _ in reader.lengths():
        meter.update(len(lengths), int(lengths.sum()) + OVERHEAD * len(lengths))
        n += len(lengths)
    return n


# ----------------------------------------------------------------------------------------------- commands


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
                        seek_span=None if args.seek_span == 0 else args.seek_span)
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
        problems: list[BaseException] = []
        count = 0
        try:
            with RecordReader(path, args.compression, verify=True, on_error=problems.append) as reader:
                count = _count(reader, meter)
        except (TFRecordError, OSError) as err:
            problems.append(err)
        for problem in problems:
            meter.write(_problem(problem), sys.stdout)
        if problems:
            status = 1
        elif not args.quiet:
            meter.write(f"{path}: OK, {count} records", sys.stdout)
    meter.done()
    return status


# ---- head: records as JSON lines


def _json_float(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _json_bytes(value: bytes, full: bool) -> Any:
    """A bytes value: its text when it is UTF-8, else {"base64": ...}; past CUT_BYTES (unless `full`) the first
    CUT_BYTES bytes only, as {"text" or "base64": ..., "length": N, "truncated": true}."""
    cut = not full and len(value) > CUT_BYTES
    head = value[:CUT_BYTES] if cut else value
    try:
        value.decode("utf-8")
        shown: Any = head.decode("utf-8", errors="ignore")  # a character cut in two loses its first bytes
    except UnicodeDecodeError:
        shown = {"base64": base64.b64encode(head).decode("ascii")}
    if not cut:
        return shown
    return {**({"text": shown} if isinstance(shown, str) else shown), "length": len(value), "truncated": True}


def _json_list(values: list[Any], full: bool) -> tuple[list[Any], dict[str, Any]]:
    """`values` cut to CUT_VALUES unless `full`, and the extra keys saying so."""
    if full or len(values) <= CUT_VALUES:
        return values, {}
    return values[:CUT_VALUES], {"count": len(values), "truncated": True}


def _json_values(value: Any, full: bool) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        shown, extra = _json_list(value, full)
        return {"bytes": [_json_bytes(v, full) for v in shown], **extra}
    if value.dtype == np.int64:
        shown, extra = _json_list(value.tolist(), full)
        return {"int64": shown, **extra}
    shown, extra = _json_list(_floats(value), full)
    return {"float": shown, **extra}


def _floats(array: Any) -> list[Any]:
    """JSON numbers for float values, float16/float32 ones written as their shortest decimal (0.1, not
    0.10000000149011612); NaN and infinities as the strings "NaN", "Infinity", "-Infinity"."""
    array = np.asarray(array).ravel()
    if array.dtype in (np.float16, np.float32):
        return [_json_float(float(str(v))) for v in array]
    return [_json_float(v) for v in array.astype(np.float64).tolist()]


def _flat(values: Any) -> list[Any]:
    if isinstance(values, bytes):
        return [values]
    if isinstance(values, list):
        return [item for v in values for item in _flat(v)]
    array = np.asarray(values)
    if array.dtype.kind == "f":
        return _floats(array)
    if array.dtype.kind == "c":  # [real, imaginary] pairs
        return [list(pair) for pair in zip(_floats(array.real), _floats(array.imag))]
    return array.ravel().tolist()


def _json_tensor(dtype: int, values: Any, full: bool) -> tuple[list[Any], dict[str, Any]]:
    """A tensor's values, flattened row-major (complex as [real, imaginary] pairs)."""
    if dtype == 14:  # bfloat16 bits -> float32
        values = (np.asarray(values, dtype=np.uint32) << 16).view(np.float32)
    flat, extra = _json_list(_flat(values), full)
    return [_json_bytes(v, full) if isinstance(v, bytes) else v for v in flat], extra


def _render(record: bytes, kind: str, full: bool) -> dict[str, Any]:
    """{"example": ...} / {"sequence_example": ...} / {"tensor": ...} / {"raw": ...}: the record as `kind`
    ("auto": the first of these that the record parses as)."""
    if kind in ("auto", "sequence"):
        try:
            context, lists = decode_sequence_example(record)
        except DecodeError:
            if kind == "sequence":
                raise
        else:
            if lists or kind == "sequence":
                return {"sequence_example": {
                    "context": {k: _json_values(v, full) for k, v in sorted(context.items())},
                    "feature_lists": {k: [_json_values(s, full) for s in steps] for k, steps in sorted(lists.items())}}}
    if kind == "auto":
        from tfr_torch.decode.infer import record_kind  # a TensorProto also parses as an empty Example

        guessed = record_kind(record)
        kind = {"example": "example", "tensor": "tensor"}.get(guessed, "raw")
    if kind == "example":
        return {"example": {k: _json_values(v, full) for k, v in sorted(decode_example(record).items())}}
    if kind == "tensor":
        tensor = decode_tensor_proto(record)
        values, extra = _json_tensor(tensor.dtype, tensor.values, full)
        return {"tensor": {"dtype": DTYPES[tensor.dtype][0], "shape": list(tensor.shape), "values": values, **extra}}
    head = record if full else record[:CUT_BYTES]
    raw: dict[str, Any] = {"length": len(record), "base64": base64.b64encode(head).decode("ascii")}
    if len(head) < len(record):
        raw["truncated"] = True
    return {"raw": raw}


def _cmd_head(args: argparse.Namespace) -> int:
    for path in _files(args):
        if args.n == 0:
            continue
        try:
            with RecordReader(path, args.compression) as reader:
                offset = reader.offset
                for shown, record in enumerate(reader, 1):
                    try:
                        line = _render(record, args.as_, args.full)
                    except DecodeError as err:
                        print(f"{path}:{offset}: {err.message}", file=sys.stderr)
                        return 1
                    print(json.dumps({"file": path, "offset": offset, **line}, ensure_ascii=False))
                    if shown == args.n:
                        break
                    offset = reader.offset
        except BrokenPipeError:
            raise  # the reader of our output went away: main() stops quietly
        except (TFRecordError, OSError) as err:
            print(_problem(err), file=sys.stderr)
            return 1
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    from tfr_torch.decode.infer import format_features, infer_features  # imports torch: only for this command

    paths = _files(args)
    try:
        spec = infer_features(paths, max_records=args.max_records, compression=args.compression)
    except (TFRecordError, OSError) as err:
        print(_problem(err), file=sys.stderr)
        return 1
    except ValueError:  # no records at all
        files = f"{len(paths)} files hold" if len(paths) > 1 else f"{paths[0]} holds"
        print(f"tfr-torch schema: no records to propose a spec from: {files} no records", file=sys.stderr)
        return 1
    print(format_features(spec), end="")
    return 0


def _inspect_tfds(paths: list[str]) -> int:
    """Each TFDS folder's description; exit status 1 when a folder's metadata cannot be read or its shard files have
    problems."""
    from tfr_torch.tfds.inspection import describe
    from tfr_torch.tfds.metadata import TFDSMetadataError

    status = 0
    for i, path in enumerate(paths):
        try:
            text = describe(path)
        except (TFDSMetadataError, OSError) as err:
            print(f"tfr-torch inspect: {err}", file=sys.stderr)
            status = 1
            continue
        if "\nproblem: " in text:
            status = 1
        print(("\n" if i else "") + text, end="")
    return status


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tfr_torch.tfds.metadata import is_tfds_dir
    from tfr_torch.tools.inspection import inspect_files

    if all(is_tfds_dir(f) for f in args.files):  # TensorFlow Datasets folders: splits, counts, feature tree
        return _inspect_tfds(args.files)
    try:
        text = inspect_files(_files(args), args.compression, args.max_records, progress=not args.quiet)
    except (TFRecordError, OSError) as err:
        print(_problem(err), file=sys.stderr)
        return 1
    print(text, end="")
    return 0


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
    from tfr_torch.tools.convert import convert_image_folder

    if not os.path.isdir(args.src):
        print(f"tfr-torch convert: no such folder: {args.src!r}", file=sys.stderr)
        return 1
    try:
        result = convert_image_folder(args.src, args.out, args.name, args.split, format=args.format,
                                      quality=95 if args.quality is None else args.quality,
                                      shard_size=args.shard_size, compression=args.compression,
                                      workers=args.workers, on_error=args.on_error, check=not args.no_check,
                                      resume=not args.restart, progress=not args.quiet, engine=args.engine,
                                      address=args.address, tfds=args.tfds, version=args.tfds_version,
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


def _cmd_reshard(args: argparse.Namespace) -> int:
    from tfr_torch.tools.reshard import check_output, reshard, reshard_names

    paths = _files(args)
    name, split = reshard_names(paths, args.name, args.split)
    try:
        check_output(paths, args.out, name, split)
    except ValueError as err:
        raise UsageError(str(err)) from None
    try:
        paths = reshard(paths, args.out, shard_size=args.shard_size, compression=args.out_compression,
                        name=name, split=split, progress=not args.quiet, tfds=args.tfds, version=args.tfds_version)
    except (TFRecordError, OSError, ValueError) as err:
        print(f"tfr-torch reshard: {_problem(err)}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


# ------------------------------------------------------------------------------------------------ parser


def _tfds_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tfds", action="store_true",
                   help="write a TensorFlow Datasets folder OUT/NAME/VERSION/ (dataset_info.json, features.json, "
                        "class names) instead of the sidecar: tfds.builder_from_directory loads it")
    p.add_argument("--tfds-version", default="1.0.0", metavar="X.Y.Z", help="with --tfds: the dataset version")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfr-torch", description="TFRecord files without TensorFlow. Exit status: 0 ok, 1 a data "
                     "problem (one `path:offset: problem` line each), 2 a usage error.")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and the backend, and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    formatter = _Help

    def command(name: str, help_text: str, progress: str | None = "no progress display (it is shown on stderr "
                "only when stderr is a terminal)") -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=formatter)
        p.add_argument("files", nargs="+", metavar="FILE",
                       help="TFRecord files, glob patterns (quote them; index files beside the matches are "
                            "skipped) or fsspec URLs (s3://, gs://, ...)")
        p.add_argument("--compression", default="auto", type=_compression, metavar="{auto,none,gzip,zlib}",
                       help="the files' compression: auto (from the name, else the first bytes), none, gzip or zlib")
        if progress:
            p.add_argument("-q", "--quiet", action="store_true", help=progress)
        return p

    p = command("count", "Print the number of records of each file, and their total (header CRCs checked).")
    p.set_defaults(run=_cmd_count)

    p = command("index", "Write <file>.idx beside each file: one `offset size` line per record, the format of "
                         "DALI and the tfrecord package (offsets in the decompressed stream for compressed files); "
                         "for GZIP/ZLIB files also their seek points, <file>.idx.seek, for random access.")
    p.add_argument("--out-dir", metavar="DIR", help="write the indexes into this existing folder instead "
                   "(default: beside each file)")
    p.add_argument("--seek-span", metavar="BYTES", type=int, default=DEFAULT_SPAN,
                   help="decompressed bytes between seek points of compressed files (default 1048576; 0: none)")
    p.set_defaults(run=_cmd_index)

    p = command("verify", "Check every record's CRCs; print one `path:offset: problem` line per problem (and "
                          "`path: OK, N records` otherwise); exit 1 if any.",
                progress="print only problems (and no progress display)")
    p.set_defaults(run=_cmd_verify)

    p = command("head", "Print the first records of each file as JSON lines: {\"file\", \"offset\", and one of "
                        "\"example\", \"sequence_example\", \"tensor\", \"raw\"}.", progress=None)
    p.add_argument("-n", type=_at_least(0, "a number of records"), default=10, metavar="N",
                   help="how many records of each file")
    p.add_argument("--as", dest="as_", default="auto", choices=["auto", "example", "sequence", "tensor", "raw"],
                   help="how to decode records: auto guesses (SequenceExample with feature lists, Example, "
                        "serialize_tensor payload, else raw bytes)")
    p.add_argument("--full", action="store_true",
                   help=f"print every value: without it, bytes values longer than {CUT_BYTES} bytes and lists of "
                        f"more than {CUT_VALUES} values are cut, and say their full length and "
                        "\"truncated\": true")
    p.set_defaults(run=_cmd_head)

    p = command("schema", "Propose a feature spec for tf.train.Example files, printed as Python code to paste. "
                          "Records are sampled from every file; comments say how many of how many files were "
                          "read and mark the keys that not every record carries.", progress=None)
    p.add_argument("--max-records", type=_at_least(1, "a number of records"), default=1000, metavar="N",
                   help="records to read in all, shared out evenly over the files (at least one from each)")
    p.set_defaults(run=_cmd_schema)

    p = command("inspect", "Each file's records, bytes and compression; over the records read, their kinds, each "
                           "feature's kind, dtype, records carrying it, values per record and value range "
                           "(min/max; bytes: lengths), and the dtypes and shapes of serialize_tensor records.")
    p.add_argument("--max-records", type=_at_least(1, "a number of records"), default=None, metavar="N",
                   help="describe the first N records of each file only (all records are still counted and "
                        "checked; default: every record)")
    p.set_defaults(run=_cmd_inspect)

    p = sub.add_parser("convert", formatter_class=formatter,
                       help="Convert an image folder (class subfolders) into sharded TFRecords.",
                       description="Convert an image folder (ImageFolder layout: SRC/<class>/<images>) into "
                                   "TFDS-named shards (OUT/NAME-SPLIT.tfrecord-00000-of-00012) with an index per "
                                   "shard and a sidecar. An interrupted run resumes where it stopped.")
    p.add_argument("src", metavar="SRC", help="the image folder: one subfolder per class")
    p.add_argument("out", metavar="OUT", help="output folder (created if missing)")
    p.add_argument("--name", required=True, type=_label, help="dataset name, the first part of the shard names")
    p.add_argument("--split", default="train", type=_label, help="split name, the second part of the shard names")
    p.add_argument("--shard-size", default="128MB", type=_size, metavar="SIZE",
                   help="bytes per shard before compression (e.g. 64MB, 1GiB)")
    p.add_argument("--workers", type=_at_least(1, "a number of processes"),
                   default=max(1, min(8, (os.cpu_count() or 1))),
                   help="encoding processes (default: one per CPU, at most 8)")
    p.add_argument("--format", default="keep", choices=["keep", "jpeg", "png", "raw"],
                   help="keep: the original file bytes; jpeg/png: re-encoded; raw: serialize_tensor of the uint8 "
                        "[C, H, W] pixels")
    p.add_argument("--quality", type=_quality, default=None, help="JPEG quality (0-100) with --format jpeg "
                   "(default: 95)")
    p.add_argument("--mode", default="UNCHANGED", type=str.upper,
                   choices=["UNCHANGED", "GRAY", "GRAY_ALPHA", "RGB", "RGB_ALPHA"],
                   help="with --format jpeg/png/raw: the pixels stored, as decode_image's read modes (RGB: every "
                        "image 3-channel, gray and palette files included; default: UNCHANGED, each image's own)")
    p.add_argument("--compression", default=None, type=_out_compression, metavar="{none,gzip,zlib}",
                   help="compression of the shards: none, gzip or zlib (default: none)")
    p.add_argument("--on-error", default="raise", choices=["raise", "skip"],
                   help="what a broken image does: stop the conversion, or be skipped (and listed)")
    p.add_argument("--no-check", action="store_true",
                   help="with --format keep, do not decode each image to check it")
    p.add_argument("--restart", action="store_true", help="ignore the finished shards of an interrupted run")
    p.add_argument("--allow-empty", action="store_true",
                   help="keep class folders that hold no image (default: an error naming them, as ImageFolder)")
    p.add_argument("--engine", default="local", choices=["local", "ray"],
                   help="local: --workers processes on this machine; ray: Ray tasks on a Ray cluster (SRC readable at "
                        "the same path on every node; needs tfr_torch[ray]); the same shards either way")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --engine ray: the cluster to use (host:port or auto; default: RAY_ADDRESS, else a new "
                        "local Ray)")
    _tfds_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display or summary on stderr")
    p.set_defaults(run=_cmd_convert)

    p = sub.add_parser("reshard", formatter_class=formatter,
                       help="Rewrite records into new shards (size, compression), with indexes and a sidecar.",
                       description="Rewrite records, in order, into new TFDS-named shards "
                                   "(OUT/NAME-SPLIT.tfrecord-00000-of-00004) with an index per shard and a sidecar "
                                   "holding the features spec (the input's sidecar's, else inferred).")
    p.add_argument("files", nargs="+", metavar="FILE", help="TFRecord files, glob patterns or fsspec URLs (any "
                   "compression, detected)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--shard-size", default="128MB", type=_size, metavar="SIZE",
                   help="bytes per shard before compression (e.g. 64MB, 1GiB)")
    p.add_argument("--compression", dest="out_compression", default=None, type=_out_compression,
                   metavar="{none,gzip,zlib}",
                   help="compression of the new shards: none, gzip or zlib (default: none)")
    p.add_argument("--name", type=_label, help="dataset name (default: the input's sidecar's, else from the input "
                   "file names, e.g. tut-00000-of-00004.tfrecord -> tut, else 'data')")
    p.add_argument("--split", type=_label, help="split (default: the input's sidecar's, else from the file names, "
                   "e.g. mnist-test.tfrecord-* -> test, else 'train')")
    _tfds_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    p.set_defaults(run=_cmd_reshard)
    return parser


def _version_line() -> str:
    """tfr_torch's version and the backend in use (the compiled core, or why not)."""
    from tfr_torch import _native

    core = _native.core
    if _native.backend() == "native" and core is not None:
        crc = "hardware" if core.hardware_crc() else "portable"
        return f"tfr_torch {__version__} (backend: native, compiled core with {crc} CRC-32C)"
    why = _native.import_error or "turned off by TFR_TORCH_NATIVE=0"
    return f"tfr_torch {__version__} (backend: python, the pure-Python reference; {why})"


class _Version(argparse.Action):
    """--version: one line, never re-wrapped by argparse."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> NoReturn:
        print(_version_line())
        parser.exit()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 a data problem, 2 a usage error)."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except UsageError as err:
        print(f"tfr-torch {args.command}: error: {err} (see `tfr-torch {args.command} --help`)", file=sys.stderr)
        return 2
    except FileNotFoundError as err:  # e.g. a glob pattern that matches nothing
        print(f"tfr-torch {args.command}: {_problem(err)}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `tfr-torch head ... | head -1`: stop quietly, and keep Python's exit quiet too
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except KeyboardInterrupt:
        print(f"tfr-torch {args.command}: interrupted", file=sys.stderr)
        return 130
