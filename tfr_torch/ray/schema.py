"""Ray Data blocks' Arrow schemas as the feature spec `write_tfrecords` writes (and a reader reads) them with:
one block's (`spec_from_schema`), or a whole dataset's, whose blocks each have their own schema (`_spec_of_blocks`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["spec_from_schema"]


def _arrow_spec(key: str, arrow: Any) -> Any:
    import pyarrow as pa
    import torch

    from tfr_torch.decode.specs import FixedLenFeature, VarLenFeature, string

    def scalar(t: Any) -> Any:
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
                or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):  # (numpy str tensors are these)
            return string
        if pa.types.is_boolean(t):
            return torch.bool
        if pa.types.is_integer(t):
            name = str(t.to_pandas_dtype().__name__)
            return getattr(torch, name) if name in ("int8", "int16", "int32", "int64", "uint8") else torch.int64
        if pa.types.is_floating(t):
            return {16: torch.float16, 32: torch.float32, 64: torch.float64}[t.bit_width]
        return None

    dtype = scalar(arrow)
    if dtype is not None:
        return FixedLenFeature([], dtype)
    ext = getattr(arrow, "extension_name", "")
    if isinstance(arrow, pa.ExtensionType) and "tensor" in ext.lower():
        inner = scalar(arrow.value_type)  # Ray's tensor types (fixed or variable shape) name their element type
        shape = getattr(arrow, "shape", None)
        if inner is not None and shape is not None and all(isinstance(d, int) and d >= 0 for d in shape):
            return FixedLenFeature(list(shape), inner)
        if inner is not None:
            return VarLenFeature(inner)
    if pa.types.is_fixed_size_list(arrow):
        inner = scalar(arrow.value_type)
        if inner is not None:
            return FixedLenFeature([arrow.list_size], inner)
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        inner = scalar(arrow.value_type)
        if inner is not None:
            return VarLenFeature(inner)
    raise TypeError(f"write_tfrecords: column {key!r} has Arrow type {arrow}, which has no tf.train.Feature form "
                    "(numbers, bool, bytes, str, fixed-shape tensors and lists of them); convert it first, or pass "
                    "features=None to store no spec")


def spec_from_schema(schema: Any) -> dict[str, Any]:
    """The feature spec that reads back what write_tfrecords writes for a dataset of this Arrow schema: scalars
    and fixed-shape tensors as FixedLenFeature (of the column's dtype), lists as VarLenFeature, bytes and str as
    string features."""
    return {name: _arrow_spec(name, schema.field(name).type) for name in schema.names}


def _untyped(arrow: Any) -> bool:
    """A type that says nothing of its values: null, or lists of null (a block holding only Nones or empty lists)."""
    import pyarrow as pa

    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow) or pa.types.is_fixed_size_list(arrow):
        return _untyped(arrow.value_type)
    return bool(pa.types.is_null(arrow))


def _strings(arrow: Any) -> bool:
    """A list (of lists) of bytes or str: its empty cells come out of numpy as untyped object arrays."""
    import pyarrow as pa

    while pa.types.is_list(arrow) or pa.types.is_large_list(arrow) or pa.types.is_fixed_size_list(arrow):
        arrow = arrow.value_type
        if pa.types.is_string(arrow) or pa.types.is_large_string(arrow) or pa.types.is_binary(arrow) \
                or pa.types.is_large_binary(arrow):
            return True
    return False


def _spec_of_blocks(schemas: list[Any]) -> dict[str, Any]:
    """The spec of a dataset whose blocks have these Arrow schemas (each block has its own: a tensor column is
    fixed-shape in a block whose rows share a shape, a list column is list<null> in a block of empty lists). A
    column gets the spec of the blocks that type it; one whose shape differs between blocks, a VarLenFeature."""
    from tfr_torch.decode.specs import VarLenFeature

    specs: dict[str, Any] = {}
    untyped: dict[str, Any] = {}
    for schema in schemas:
        for name in schema.names:
            arrow = schema.field(name).type
            if _untyped(arrow):
                untyped.setdefault(name, arrow)
                specs.setdefault(name, None)
                continue
            spec, before = _arrow_spec(name, arrow), specs.get(name)
            if before is None or before == spec:
                specs[name] = spec
            elif before.dtype == spec.dtype:
                specs[name] = VarLenFeature(spec.dtype)
            else:
                raise TypeError(f"write_tfrecords: column {name!r} is {before} in some blocks and {spec} in others; "
                                "cast it to one type first, or pass features= a spec")
    for name, spec in specs.items():
        if spec is None:
            _arrow_spec(name, untyped[name])  # no block typed it: raises, naming the column and its type
    return specs
