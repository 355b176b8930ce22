"""`tfr-torch inspect` (what is in some TFRecord files) and `tfr-torch reshard` (rewrite them into new shards)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from google.protobuf.message import DecodeError as ProtoDecodeError

from tfr_torch.decode.infer import infer_features
from tfr_torch.decode.sidecar import sidecar_for, spec_from_json
from tfr_torch.errors import DecodeError
from tfr_torch.format._proto import raw_example_pb2
from tfr_torch.format.columns import decode_column, kind_of
from tfr_torch.format.paths import file_size
from tfr_torch.format.reader import RecordReader
from tfr_torch.tools.progress import Progress
from tfr_torch.tools.shards import ShardedWriter

__all__ = ["inspect_files", "reshard"]


def inspect_files(paths: Sequence[str], compression: str | None = "auto", max_records: int | None = None) -> str:
    """A text report: per file its records, bytes and compression; then, over all records read, each feature's
    kind, the dtype a spec would use, how many records carry it, and its value counts (min/mean/max)."""
    lines = ["file\trecords\tbytes\tcompression"]
    maps: list[dict[str, bytes]] = []
    not_examples = 0
    for path in paths:
        with RecordReader(path, compression, verify=True) as reader:
            n = 0
            for record in reader:
                n += 1
                if max_records is None or n <= max_records:
                    try:
                        maps.append(dict(raw_example_pb2.RawExample.FromString(record).features.feature))
                    except ProtoDecodeError:  # not an Example: counted below
                        not_examples += 1
            lines.append(f"{path}\t{n}\t{file_size(path)}\t{reader.compression}")
    lines.append("")
    lines.append(f"features (over {len(maps)} records{'' if max_records is None else f', at most {max_records} per file'}):")
    lines.append("key\tkind\tdtype\trecords\tvalues min/mean/max")
    dtypes = {"float": "float32", "int64": "int64", "bytes": "string"}
    for key in sorted({k for m in maps for k in m}):
        raws = [m.get(key) for m in maps]
        kinds = sorted({kind_of(r, key) for r in raws} - {None})
        if len(kinds) != 1:
            lines.append(f"{key}\t{'/'.join(kinds) or 'no kind'}\t-\t{sum(r is not None for r in raws)}\t-")
            continue
        try:
            column = decode_column(raws, kinds[0], key)
        except DecodeError as exc:
            lines.append(f"{key}\t{kinds[0]}\t-\t-\tmalformed: {exc.message}")
            continue
        counts = column.counts[column.present]
        stats = f"{counts.min()}/{counts.mean():.2f}/{counts.max()}" if counts.size else "-"
        lines.append(f"{key}\t{kinds[0]}_list\t{dtypes[kinds[0]]}\t{int(column.present.sum())}\t{stats}")
    if not_examples:
        lines.append(f"({not_examples} records are not tf.train.Example)")
    return "\n".join(lines) + "\n"


_SHARD = re.compile(r"^(?P<name>.+)-(?P<split>[^-]+)\.tfrecord(-\d+-of-\d+)?$")


def reshard(paths: Sequence[str], out_dir: str, *, shard_size: Any = "128MB", compression: str | None = None,
            name: str | None = None, split: str | None = None, progress: bool = False) -> list[str]:
    """Copy every record of `paths`, in order, into new shards (ShardedWriter: TFDS names, indexes, sidecar).
    The features spec is taken from the input's sidecar when there is one, else inferred from the records."""
    found = sidecar_for(paths)
    features, image = None, None
    if found is not None:
        sidecar, _ = found
        features = spec_from_json(sidecar["features"]) if sidecar.get("features") else None
        image = sidecar.get("image")
        name = name or sidecar["name"]
        split = split or sidecar["split"]
    if name is None:
        match = _SHARD.match(paths[0].rsplit("/", 1)[-1])
        name = match.group("name") if match else "data"
        split = split or (match.group("split") if match else "train")
    if features is None:
        try:
            features = infer_features(paths, max_records=1000)
        except (DecodeError, ValueError):
            features = None  # not Examples: raw records are copied all the same
    meter = Progress(None, f"{name}-{split or 'train'}: ", enabled=progress)
    with ShardedWriter(out_dir, name, split or "train", shard_size, compression, features=features, image=image) as writer:
        for path in paths:
            with RecordReader(path) as reader:
                for record in reader:
                    writer.write(record)
                    meter.update(1, len(record))
    meter.done()
    return writer.paths
