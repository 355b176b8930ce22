"""`tfr-torch head`, `schema` and `inspect`: commands that decode records to show what they hold (head: records as
JSON lines)."""

from __future__ import annotations

import argparse
import base64
import json
import math
import sys
from typing import Any

import numpy as np

from tfr_torch.errors import DecodeError, TFRecordError
from tfr_torch.format.example import decode_example, decode_sequence_example
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.tensor import DTYPES, decode_tensor_proto
from tfr_torch.format.wire import read_tag, skip_field
from tfr_torch.tools.cli_common import _files, _problem

CUT_BYTES = 64  # head: bytes values longer than this are cut (--full shows them whole)
CUT_VALUES = 32  # head: lists with more values than this are cut


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


def _json_steps(steps: list[Any], full: bool) -> Any:
    """A feature list: its steps' values, a list; past CUT_VALUES steps (unless `full`) cut as a long value list is,
    {"steps": [the first CUT_VALUES], "count": N, "truncated": true}."""
    shown, extra = _json_list(steps, full)
    values = [_json_values(step, full) for step in shown]
    return {"steps": values, **extra} if extra else values


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
                    "feature_lists": {k: _json_steps(steps, full) for k, steps in sorted(lists.items())}}}
    guess = kind == "auto"
    if guess:
        from tfr_torch.decode.record_kinds import record_kind  # a TensorProto also parses as an empty Example

        guessed = record_kind(record)
        kind = {"example": "example", "tensor": "tensor"}.get(guessed, "raw")
    try:
        if kind == "example":
            features = decode_example(record)
            if not guess:
                _check_is_example(record)
            return {"example": {k: _json_values(v, full) for k, v in sorted(features.items())}}
        if kind == "tensor":
            tensor = decode_tensor_proto(record)
            values, extra = _json_tensor(tensor.dtype, tensor.values, full)
            return {"tensor": {"dtype": DTYPES[tensor.dtype][0], "shape": list(tensor.shape), "values": values,
                               **extra}}
    except DecodeError:  # auto: what a lenient first parse guessed, the strict decoder refuses (a map entry
        if not guess:  # without a key, a broken Feature): the record is shown raw
            raise
    head = record if full else record[:CUT_BYTES]
    raw: dict[str, Any] = {"length": len(record), "base64": base64.b64encode(head).decode("ascii")}
    if len(head) < len(record):
        raw["truncated"] = True
    return {"raw": raw}


def _has_features_field(record: bytes) -> bool:
    """Whether the serialized message holds a field 1 that is length-delimited: an Example's `features` (also a
    SequenceExample's `context`). A TensorProto's field 1 is its dtype, a varint; protobuf's lenient parse skips
    it and makes the TensorProto an empty Example. The record has passed decode_example: its tags are valid."""
    pos, end = 0, len(record)
    while pos < end:
        number, wire, after = read_tag(record, pos, end)
        if number == 1 and wire == 2:
            return True
        pos = skip_field(record, after, end, wire)
    return False


def _check_is_example(record: bytes) -> None:
    """DecodeError when `--as example` is given a record that only a lenient parse calls an Example: not empty
    (the empty record is the Example without features, shown as {}) and without a `features` field."""
    if not record or _has_features_field(record):
        return
    from tfr_torch.decode.record_kinds import record_kind  # only for this message

    looks = {"tensor": "a serialize_tensor payload (its field 1 is a varint, a TensorProto's dtype): try --as tensor",
             "sequence_example": "a SequenceExample without context: try --as sequence"}.get(
        record_kind(record), "no message head knows: try --as raw")
    raise DecodeError(f"not a tf.train.Example: its {len(record)} bytes have no features field (field 1, "
                      f"length-delimited); they look like {looks}")


def _json_line(obj: dict[str, Any]) -> str:
    """One JSON line, its text as it is where stdout's encoding can write it, else with \\u escapes (a file name
    that is not UTF-8, whose bytes Python holds as lone surrogates; a terminal that is not UTF-8): valid JSON in
    every case, and json.loads gives back the same strings."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode(getattr(sys.stdout, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return json.dumps(obj)
    return text


def _cmd_head(args: argparse.Namespace) -> int:
    status = 0
    for path in _files(args):
        try:
            with RecordReader(path, args.compression) as reader:  # (-n 0 still opens it: a missing file is an error)
                offset = reader.offset
                for shown, record in enumerate(reader if args.n else (), 1):
                    try:
                        line = _render(record, args.as_, args.full)
                    except DecodeError as err:
                        print(f"{path}:{offset}: {err.message}", file=sys.stderr)
                        status = 1
                        break
                    print(_json_line({"file": path, "offset": offset, **line}))
                    if shown == args.n:
                        break
                    offset = reader.offset
        except BrokenPipeError:
            raise  # the reader of our output went away: main() stops quietly
        except (TFRecordError, OSError) as err:  # reported, and the next file is shown all the same
            print(_problem(err), file=sys.stderr)
            status = 1
    return status


def _cmd_schema(args: argparse.Namespace) -> int:
    from tfr_torch.decode.infer import NoRecordsError, infer_features  # imports torch: only here
    from tfr_torch.decode.spec_code import format_features

    paths = _files(args)
    try:
        spec = infer_features(paths, max_records=args.max_records, compression=args.compression)
    except (TFRecordError, OSError) as err:
        print(_problem(err), file=sys.stderr)
        return 1
    except NoRecordsError:
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
    paths = _files(args)  # (a pattern that matches nothing: main() says so, named as the command)
    try:
        text = inspect_files(paths, args.compression, args.max_records, progress=not args.quiet)
    except (TFRecordError, OSError) as err:
        print(_problem(err), file=sys.stderr)
        return 1
    print(text, end="")
    return 0

