"""TFDSPlan: what TFRecordDataset / IndexedTFRecordDataset call to decode the records of a TFDS dataset.

`iter_rows` gives one item per record (each leaf decoded as TFDS does). `parse` gives a batch: the leaves that
parse_example decodes whole (static-shape tensors, scalars, class labels, text, single images) are read for the
whole batch at once by tfr_torch's compiled batch decoder; the others (dynamic shapes, encoded tensors, sequences)
record by record, then collated. Both give the same values as collating `iter_rows`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional

import torch

from tfr_torch.decode.plan import compile_features

__all__ = ["TFDSPlan"]


def _batched(leaf: Any) -> bool:
    """A leaf whose batch parse_example gives directly: [B, *shape] tensors, or a list of B byte strings."""
    if leaf.rank:
        return False
    if leaf.mode == "plain":
        return None not in leaf.leaf.shape
    return leaf.mode in ("text", "image")


class TFDSPlan:
    """Decodes records of a TFDS dataset with a TFDSDecoder's tree (see the module docstring)."""

    def __init__(self, decoder: Any) -> None:
        from tfr_torch.tfds.leaf_decoder import _WIDE_UNSIGNED, _unsigned

        self.decoder = decoder
        self._unsigned, self._wide = _unsigned, _WIDE_UNSIGNED
        self.inner = compile_features(decoder.wire)
        leaves = decoder.leaves()
        self.fast = {id(leaf) for leaf in leaves if _batched(leaf)}
        fast_wire = {k: v for leaf in leaves if id(leaf) in self.fast for k, v in leaf.wire.items()}
        slow_wire = {k: v for leaf in leaves if id(leaf) not in self.fast for k, v in leaf.wire.items()}
        self.fast_plan = compile_features(fast_wire) if fast_wire else None
        self.slow_plan = compile_features(slow_wire) if slow_wire else None

    def iter_rows(self, serialized: Sequence[bytes], example_names: Optional[Sequence[str]] = None) -> Iterator[Any]:
        root, supervised = self.decoder.root, self.decoder.supervised
        for i, raw in enumerate(self.inner.iter_rows(serialized, example_names)):
            yield supervised(root.decode(raw, None if example_names is None else example_names[i]))

    def parse(self, serialized: Sequence[bytes], example_names: Optional[Sequence[str]] = None,
              single: bool = False) -> Any:
        if single:
            return next(self.iter_rows(serialized, example_names))
        names: list[Optional[str]] = list(example_names) if example_names is not None else [None] * len(serialized)
        columns = self.fast_plan.parse(serialized, example_names) if self.fast_plan is not None else {}
        rows = list(self.slow_plan.iter_rows(serialized, example_names)) if self.slow_plan is not None else []
        return self.decoder.supervised(self._batch(self.decoder.root, columns, rows, names))

    def _batch(self, node: Any, columns: Mapping[str, Any], rows: list[Any], names: list[Optional[str]]) -> Any:
        if getattr(node, "steps", False):  # a Dataset feature's steps (all decoded record by record): checked whole
            return node.collate([node.decode(raw, name) for raw, name in zip(rows, names)])
        if hasattr(node, "children"):
            return {k: self._batch(child, columns, rows, names) for k, child in node.children.items()}
        if id(node) not in self.fast:
            return node.collate([node.decode(raw, name) for raw, name in zip(rows, names)])
        value = columns[node.key]
        if node.mode == "plain":
            return self._unsigned(value, node.leaf.dtype) if node.leaf.dtype in self._wide else value
        if node.mode == "text" or not node.decode_images:
            return list(value)
        images = [node._element([data], name) for data, name in zip(value, names)]
        return torch.stack(images) if None not in node.output_shape() else images  # as collate: by declared shape
