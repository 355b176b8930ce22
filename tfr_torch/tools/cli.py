"""The `tfr-torch` command line (also `python -m tfr_torch`).

Commands: count, index, verify, head, schema, inspect, convert, reshard. Exit status: 0 when all went well;
1 for a data problem (a missing, corrupt or undecodable file: one `path:offset: what is wrong` line each, on
stderr, except `verify`'s report on stdout); 2 for a usage error (an unknown option, a bad value): one line on
stderr, as argparse does; 130 after Ctrl-C and 143 after SIGTERM, the temporary files of the writes under way
removed either way. Progress goes to stderr, only when it is a terminal.

This module holds the parser and `main`; the commands live by concern in cli_scan (count, index, verify),
cli_show (head, schema, inspect) and cli_write (convert, reshard), what they share in cli_common.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

from tfr_torch._version import __version__
from tfr_torch.errors import TFRecordError
from tfr_torch.format.compression import normalize_compression
from tfr_torch.format.seek import DEFAULT_SPAN
from tfr_torch.tools.cli_common import UsageError, _problem
from tfr_torch.tools.cli_scan import _cmd_count, _cmd_index, _cmd_verify
from tfr_torch.tools.cli_show import CUT_BYTES, CUT_VALUES, _cmd_head, _cmd_inspect, _cmd_schema
from tfr_torch.tools.cli_write import _cmd_convert, _cmd_reshard

__all__ = ["main", "UsageError", "Terminated"]

TERMINATED = 128 + signal.SIGTERM  # the exit status of a command stopped by SIGTERM (143), as Unix tools give it


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`, a job scheduler's stop, `timeout`), raised in the main thread by the handler that `main`
    installs: a KeyboardInterrupt, so every cleanup that Ctrl-C runs (temporary files of atomic writes removed,
    reshard's new shards, convert's worker processes) runs for it too; `main` then returns 143."""


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


def _tfds_version(value: str) -> str:
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", value):
        raise argparse.ArgumentTypeError(f"expected a version MAJOR.MINOR.PATCH such as 1.0.0, got {value!r}")
    return value


def _label(value: str) -> str:
    if not value or "/" in value:
        raise argparse.ArgumentTypeError(f"expected a non-empty name without '/', got {value!r}")
    if value in (".", ".."):  # with --tfds, NAME is a folder: OUT/NAME/VERSION
        raise argparse.ArgumentTypeError(f"expected a name, not the folder {value!r}")
    return value


# ------------------------------------------------------------------------------------------------ parser


def _tfds_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tfds", action="store_true",
                   help="write a TensorFlow Datasets folder OUT/NAME/VERSION/ (dataset_info.json, features.json, "
                        "class names) instead of the sidecar: tfds.builder_from_directory loads it")
    p.add_argument("--tfds-version", default=None, type=_tfds_version, metavar="X.Y.Z",
                   help="with --tfds: the dataset version (default: 1.0.0)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tfr-torch", description="TFRecord files without TensorFlow. Exit status: 0 ok, 1 a data "
                     "problem (one `path:offset: problem` line each), 2 a usage error.")
    parser.add_argument("--version", action=_Version, nargs=0, help="show the version and the backend, and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    formatter = _Help

    def command(name: str, help_text: str, progress: str | None = "no progress display (it is shown on stderr "
                "only when stderr is a terminal)", folders: str = "") -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=formatter)
        p.add_argument("files", nargs="+", metavar="FILE",
                       help="TFRecord files, glob patterns (quote them; index files beside the matches are "
                            f"skipped) or fsspec URLs (s3://, gs://, ...){folders}")
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
                   help="decompressed bytes between seek points of compressed files (default 1048576; 0: none, and "
                        "an earlier run's are removed)")
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
                   help=f"print every value: without it, bytes values longer than {CUT_BYTES} bytes, lists of "
                        f"more than {CUT_VALUES} values and feature lists of more than {CUT_VALUES} steps are cut, "
                        "and say their full length and \"truncated\": true")
    p.set_defaults(run=_cmd_head)

    p = command("schema", "Propose a feature spec for tf.train.Example (or SequenceExample) files, printed as "
                          "Python code to paste. "
                          "Records are sampled from every file; comments say how many of how many files were "
                          "read and mark the keys that not every record carries.", progress=None)
    p.add_argument("--max-records", type=_at_least(1, "a number of records"), default=1000, metavar="N",
                   help="records to read in all, shared out evenly over the files (at least one from each)")
    p.set_defaults(run=_cmd_schema)

    p = command("inspect", "Each file's records, bytes and compression; over the records read, their kinds, each "
                           "feature's kind, dtype, records carrying it, values per record and value range "
                           "(min/max; bytes: lengths), and the dtypes and shapes of serialize_tensor records.",
                folders="; or TensorFlow Datasets folders (their splits, shards, records and feature tree)")
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
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument("--shard-size", default="128MB", type=_size, metavar="SIZE",
                       help="bytes per shard before compression (e.g. 64MB, 1GiB)")
    sizes.add_argument("--num-shards", type=_at_least(1, "a number of shards"), metavar="N",
                       help="exactly N shards of equal record counts instead (the records are counted first)")
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


def _as_given(err: UnicodeError) -> tuple[str | bytes, int]:
    """Codec error handler for the output: a file name that is not UTF-8 (its bytes held as lone surrogates, as
    Python reads such names) goes out as its own bytes, as `ls` writes it; another character the stream's encoding
    lacks, as a backslash escape."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    if all("\udc80" <= c <= "\udcff" for c in err.object[err.start:err.end]):
        return codecs.lookup_error("surrogateescape")(err)
    return codecs.backslashreplace_errors(err)


codecs.register_error("tfr_torch.cli", _as_given)


@contextlib.contextmanager
def _tolerant(stream: Any) -> Iterator[None]:
    """`stream` (stdout, stderr) writing what its encoding cannot as `_as_given` does, while the command runs:
    else a file name that is not UTF-8, printed by any command in a UTF-8 locale, ended it in a UnicodeEncodeError."""
    if not isinstance(stream, io.TextIOWrapper) or stream.errors != "strict":
        yield
        return
    stream.reconfigure(errors="tfr_torch.cli")
    try:
        yield
    finally:
        try:
            stream.reconfigure(errors="strict")
        except (OSError, ValueError):  # a closed pipe, a closed stream: nothing more goes out
            pass


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """While the command runs, SIGTERM raises `Terminated` in the main thread instead of ending the process at once
    (Python's default), which left the hidden temporary files of the writes under way behind. One SIGTERM only: a
    second one, while the cleanup runs, ends the process as before. A process forked from this one (convert's
    workers) that gets SIGTERM ends as it would have: the exception is the command's, in its own process. Outside
    the main thread (where no handler can be set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pid = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if os.getpid() != pid:  # a forked worker: die by SIGTERM, as it would have without this handler
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 a data problem, 2 a usage error, 130 Ctrl-C, 143
    SIGTERM)."""
    with _tolerant(sys.stdout), _tolerant(sys.stderr), _sigterm_as_interrupt():
        try:  # (Ctrl-C while the parser loads what an argument needs, e.g. --shard-size's parser, is caught too)
            args = _parser().parse_args(argv)
        except Terminated:
            print("tfr-torch: terminated", file=sys.stderr)
            return TERMINATED
        except KeyboardInterrupt:
            print("tfr-torch: interrupted", file=sys.stderr)
            return 130
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; its exceptions as one line and an exit status."""
    try:
        return int(args.run(args))
    except UsageError as err:
        print(f"tfr-torch {args.command}: error: {err} (see `tfr-torch {args.command} --help`)", file=sys.stderr)
        return 2
    except FileNotFoundError as err:  # e.g. a glob pattern that matches nothing
        print(f"tfr-torch {args.command}: {_problem(err)}", file=sys.stderr)
        return 1
    except ImportError as err:  # a URL whose fsspec package is not installed (s3fs, gcsfs, ...): named by the error
        print(f"tfr-torch {args.command}: {err}", file=sys.stderr)
        return 1
    except TFRecordError as err:  # (the commands report their own; one that gets here is a data problem all the same)
        print(f"tfr-torch {args.command}: {_problem(err)}", file=sys.stderr)
        return 1
    except ValueError as err:  # an argument the library refuses, e.g. a URL of a protocol fsspec does not know
        print(f"tfr-torch {args.command}: error: {err} (see `tfr-torch {args.command} --help`)", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `tfr-torch head ... | head -1`: stop quietly, and keep Python's exit quiet too
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except OSError as err:  # a file it may not read, a store it cannot reach (credentials, network): one line
        print(f"tfr-torch {args.command}: {_problem(err)}", file=sys.stderr)
        return 1
    except Terminated:  # SIGTERM: the cleanup of Ctrl-C has run (see _sigterm_as_interrupt)
        print(f"tfr-torch {args.command}: terminated", file=sys.stderr)
        return TERMINATED
    except KeyboardInterrupt:
        print(f"tfr-torch {args.command}: interrupted", file=sys.stderr)
        return 130
