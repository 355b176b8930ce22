"""A map function for torchdata's `Mapper` / `ParallelMapper`: serialized Examples to decoded values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ExampleDecoder"]


class ExampleDecoder:
    """Decodes what `TFRecordNode` (raw records) or a `Batcher` over it yields: one record (`bytes`) gives what
    `parse_single_example` gives, a list of records (a batch) what `parse_example` gives, dicts of tensors; a list
    of batches (a `Batcher` over a `Batcher`) gives the list of their dicts, for thread mappers: each task is then
    a run of batches, and torchdata's own work per task (its queues and threads, under the GIL) is paid once a run
    (`Unbatcher` after the mapper gives the batches one by one again).

    `features` is a spec (see `parse_example`) or a `tfr_torch.tfds.TFDSDecoder`; it is checked here, in the
    process that builds the pipeline, and compiled once per process (the decoder pickles for
    `ParallelMapper(method="process")`). The batch path is the fast one: decode in batches where you can.

    >>> decode = ExampleDecoder({"id": tfr_torch.FixedLenFeature([], torch.int64)})   # doctest: +SKIP
    >>> decode([record_a, record_b])["id"]                                             # doctest: +SKIP
    tensor([0, 1])
    """

    def __init__(self, features: Mapping[str, Any] | Any) -> None:
        from tfr_torch.data.arguments import plan_of

        if features is None or isinstance(features, str):
            raise TypeError(f"ExampleDecoder needs a feature spec (a dict of FixedLenFeature, VarLenFeature, ...) or "
                            f"a TFDSDecoder, got {features!r}")
        self.features = features
        self._plan: Any = plan_of(features)  # checks the spec now

    def __getstate__(self) -> dict[str, Any]:
        return {"features": self.features}  # the compiled plan stays behind; rebuilt where it is unpickled

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tfr_torch.data.arguments import plan_of

        self.features = state["features"]
        self._plan = plan_of(self.features)

    def __repr__(self) -> str:
        return f"ExampleDecoder({self.features!r})"

    def __call__(self, records: bytes | Sequence[bytes] | Sequence[Sequence[bytes]]) -> Any:
        if isinstance(records, (bytes, bytearray, memoryview)):
            return self._plan.parse([bytes(records)], None, single=True)
        if isinstance(records, str) or not isinstance(records, Sequence):
            raise TypeError(f"ExampleDecoder decodes a record (bytes), a list of records or a list of batches, got "
                            f"{type(records).__name__}")
        if records and isinstance(records[0], (list, tuple)):  # a run of batches (lists, or tuples as a collate's)
            parse = self._plan.parse
            return [parse(batch) for batch in records]
        return self._plan.parse(list(records))
