"""One table of dtype names for the torch edge: TensorFlow's name of every dtype that TensorFlow and torch share, the
aliases both accept ("float", "double", "half", "bytes"), and `string` (TensorFlow's tf.string). Feature specs
(tfr_torch.decode.specs) read the part of it a tf.train.Feature can hold; parse_tensor / serialize_tensor
(tfr_torch.tensors) all of it, through the DataType codes of tfr_torch.format.tensor.

>>> TORCH_OF_NAME["bfloat16"], DTYPE_NAMES["double"]
(torch.bfloat16, torch.float64)
"""

from __future__ import annotations

from typing import Final, Union

import torch

__all__ = ["string", "DType", "TORCH_OF_NAME", "ALIASES", "DTYPE_NAMES"]

string: Final = "string"  # TensorFlow's tf.string: bytes features decode to (nested) lists of bytes

DType = Union[torch.dtype, str]  # a torch dtype, or `string`

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

