"""Errors for feature specs written the way another library spells them, saying what to write instead.

The `tfrecord` package describes features as `{"label": "int", "image": "byte"}`, TensorFlow users pass
`tf.io.FixedLenFeature` objects or a bare dtype, and a forgotten call leaves the class itself in the spec. Each
gets a TypeError with the tfr_torch spec that means the same thing, so porting code is a copy of the message.

>>> check_spec({"label": "int"})  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
TypeError: feature 'label' is given as 'int' (the `tfrecord` package's description): write tfr_torch.Fi...

(the message goes on: "...FixedLenFeature([], torch.int64) for one value per record, or
tfr_torch.VarLenFeature(torch.int64) for a variable number")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["check_spec", "check_features_argument"]

# the `tfrecord` package's descriptions (and close spellings) -> the torch dtype expression
_DESCRIPTIONS = {
    "int": "torch.int64", "int64": "torch.int64", "long": "torch.int64",
    "float": "torch.float32", "float32": "torch.float32",
    "byte": "tfr_torch.string", "bytes": "tfr_torch.string", "str": "tfr_torch.string", "string": "tfr_torch.string",
}
_SPEC_CLASSES = ("FixedLenFeature", "VarLenFeature", "SparseFeature", "RaggedFeature", "FixedLenSequenceFeature")


def _suggest(dtype: str) -> str:
    return (f"write tfr_torch.FixedLenFeature([], {dtype}) for one value per record, or "
            f"tfr_torch.VarLenFeature({dtype}) for a variable number")


def _dtype_expression(value: Any) -> str | None:
    """'torch.int64' for torch.int64 (any torch dtype), None for anything else."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    if isinstance(value, torch.dtype):
        return str(value)
    return None


def check_spec(features: Mapping[str, Any], what: str = "feature") -> None:
    """Raise TypeError for a spec value spelled the way another library spells it; other values are left to
    `compile_features`, which checks them fully."""
    from tfr_torch.decode import specs

    real = tuple(getattr(specs, name) for name in _SPEC_CLASSES)
    for key, spec in features.items():
        if isinstance(spec, real):
            continue
        if isinstance(spec, str):
            dtype = _DESCRIPTIONS.get(spec.lower())
            if dtype is not None:
                source = ("the `tfrecord` package's description" if spec in ("int", "float", "byte")
                          else "a dtype name, not a spec")
                raise TypeError(f"{what} {key!r} is given as {spec!r} ({source}): {_suggest(dtype)}")
            raise TypeError(f"{what} {key!r} is given as the string {spec!r}: expected a feature spec such as "
                            "tfr_torch.FixedLenFeature([], torch.int64)")
        dtype = _dtype_expression(spec)
        if dtype is not None or spec in (float, int, bytes, str):
            if dtype is None:
                dtype = {float: "torch.float32", int: "torch.int64"}.get(spec, "tfr_torch.string")
            raise TypeError(f"{what} {key!r} is given as a bare dtype ({spec!r}): {_suggest(dtype)}")
        if isinstance(spec, type) and spec.__name__ in _SPEC_CLASSES:
            raise TypeError(f"{what} {key!r} is the class {spec.__name__} itself: call it, e.g. "
                            f"tfr_torch.{spec.__name__}(...) with the shape and dtype")
        name = type(spec).__name__
        module = type(spec).__module__ or ""
        if name in _SPEC_CLASSES and not module.startswith("tfr_torch"):
            raise TypeError(f"{what} {key!r} is {module.split('.')[0]}'s {name}: use tfr_torch.{name} with the same "
                            "arguments (torch dtypes, or the names 'int64', 'float32', 'string')")


def check_features_argument(features: Any) -> None:
    """For datasets: `features` must be None, "auto" or a spec dict (or an object with a `plan()`)."""
    if features is None or (isinstance(features, str) and features == "auto"):
        return
    if isinstance(features, str):
        hint = " (did you mean 'auto'?)" if features.strip().lower() == "auto" else ""
        raise ValueError(f"features={features!r}{hint}: expected None (each record's bytes), a dict of feature specs, "
                         "or 'auto' (the spec in the sidecar ShardedWriter writes beside its shards)")
    if isinstance(features, Mapping):
        check_spec(features)
