"""A feature spec as the Python code that rebuilds it (`format_features`, what `tfr-torch schema` prints), with
comments saying what a proposal of `infer_features` (decode/infer.py) was based on; kept apart from the inference,
which never needs it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tfr_torch.decode.infer import InferredSequenceFeatures, _Provenance
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.specs import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, string

__all__ = ["format_features"]


def format_features(spec: Mapping[str, Any] | SequenceFeatures, name: str = "features") -> str:
    """Python code that rebuilds `spec` (what `tfr-torch schema` prints): a dict of specs, or a SequenceFeatures.
    For what `infer_features` proposed, comments say what it was proposed from and mark the keys that not every
    record carries."""
    info = spec if isinstance(spec, _Provenance) and spec.records_read > 0 else None
    lines = []
    if info is not None:
        lines += [f"# {info.describe()}.",
                  "# VarLenFeature: the count of values varies, or some records lack the key (noted beside it)."]
    lines += ["import torch", "", "import tfr_torch", ""]
    present, records, empty = ((info.present, info.records_read, info.empty_keys) if info is not None
                               else (None, None, []))
    if isinstance(spec, SequenceFeatures):
        lists = spec if isinstance(spec, InferredSequenceFeatures) and info is not None else None
        lines.append(f"{name} = tfr_torch.SequenceFeatures(")
        lines += _entries(spec.context, "context=", "    ", present, records, empty)
        lines += _entries(spec.sequence, "sequence=", "    ", lists.list_present if lists is not None else None,
                          records, lists.empty_lists if lists is not None else [],
                          "no step of any record read holds values (no steps, or Features without a kind)")
        lines.append(")")
    else:
        lines += _entries(spec, f"{name} = ", "", present, records, empty)
    return "\n".join(lines) + "\n"


def _entries(spec: Mapping[str, Any], opening: str, indent: str, carried: dict[str, int] | None,
             records: int | None, empty: list[str],
             why: str = "no values in any record read (a Feature without a kind)") -> list[str]:
    """`opening{` (`context=`, or `name = ` at the top), a line per spec (noting the keys fewer than `records` of
    the records read carry, by `carried`), the keys without values (`empty`, `why`), and the closing brace."""
    lines = [f"{indent}{opening}{{"]
    for key, s in spec.items():
        lines.append(f"{indent}    {key!r}: {_spec_code(s)},")
        if carried is not None and records is not None and carried.get(key, records) < records:
            lines[-1] += f"  # in {carried[key]:,} of {records:,} records read"
    lines += [f"{indent}    # {key!r}: {why}: no spec proposed" for key in empty]
    lines.append(f"{indent}}}," if indent else f"{indent}}}")
    return lines


def _spec_code(spec: Any) -> str:
    def dtype(d: Any) -> str:
        return "tfr_torch.string" if d == string else f"torch.{str(d).removeprefix('torch.')}"

    if isinstance(spec, (FixedLenFeature, FixedLenSequenceFeature)):
        shape = "[" + ", ".join(map(str, spec.shape)) + "]"
        extra = ", allow_missing=True" if isinstance(spec, FixedLenSequenceFeature) and spec.allow_missing else ""
        if spec.default_value is not None:
            extra += f", default_value={spec.default_value!r}"
        return f"tfr_torch.{type(spec).__name__}({shape}, {dtype(spec.dtype)}{extra})"
    if isinstance(spec, VarLenFeature):
        return f"tfr_torch.VarLenFeature({dtype(spec.dtype)})"
    return f"tfr_torch.{spec!r}"  # SparseFeature, RaggedFeature: their reprs are their constructor calls
