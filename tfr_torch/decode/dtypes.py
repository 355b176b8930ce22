"""One table of dtype names for the torch edge: TensorFlow's name of every dtype that TensorFlow and torch share, the
aliases both accept ("float", "double", "half", "bytes"), and `string` (TensorFlow's tf.string). Feature specs
(tfr_torch.decode.specs) read the part of it a tf.train.Feature can hold; parse_tensor / serialize_tensor
(tfr_torch.tensors) all of it, through the DataType codes of tfr_torch.format.tensor.

>>> TORCH_OF_NAME["bfloat16"], DTYPE_NAMES["double"], DTYPE_NAMES["bytes"]
(torch.bfloat16, torch.float64, tfr_torch.string)
"""

from __future__ import annotations

from typing import Final, Union, final

import torch

__all__ = ["string", "StringDType", "DType", "TORCH_OF_NAME", "ALIASES", "DTYPE_NAMES"]


@final
class StringDType:
    """The type of `tfr_torch.string`, TensorFlow's tf.string as a dtype: bytes features decode to (nested) lists
    of bytes. One instance exists; it equals only itself (not the name "string", which feature specs and
    parse_tensor still accept and turn into it), and pickles and copies to that same object.

    >>> import pickle
    >>> string, string.name, string == "string", pickle.loads(pickle.dumps(string)) is string
    (tfr_torch.string, 'string', False, True)
    """

    __slots__ = ()
    name: Final = "string"  # as tf.string.name, so code that reads a dtype's name finds TensorFlow's
    _instance: StringDType | None = None

    def __new__(cls) -> StringDType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "tfr_torch.string"

    def __reduce__(self) -> str:
        return "string"  # pickled by name: this module's `string`, the one instance


string: Final = StringDType()
"""TensorFlow's `tf.string` as a dtype for feature specs and `parse_tensor`: bytes values, decoded to lists of bytes."""

DType = Union[torch.dtype, StringDType]  # a torch dtype, or `string`

# TensorFlow's names (tensorflow/core/framework/types.proto's DataType, as tf.DType.name spells them)
TORCH_OF_NAME: dict[str, DType] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
    "uint8": torch.uint8, "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
    "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128, "string": string,
}
ALIASES: dict[str, str] = {"float": "float32", "double": "float64", "half": "float16", "bytes": "string"}
# every accepted spelling (names and aliases) -> its torch dtype or `string`
DTYPE_NAMES: dict[str, DType] = {**TORCH_OF_NAME, **{alias: TORCH_OF_NAME[name] for alias, name in ALIASES.items()}}

