"""A TFDS dataset folder described in text (what `tfr-torch inspect DIR` prints): name, version, description, each
split's shards, records and bytes (from dataset_info.json, with the shard files checked), the supervised keys and the
feature tree from features.json, with the decoded dtype and shape of each leaf and ClassLabel names.

>>> print(describe("~/tensorflow_datasets/mnist"))          # doctest: +SKIP
mnist 3.0.1  (/home/me/tensorflow_datasets/mnist/3.0.1)
...
"""

from __future__ import annotations

from typing import Any, Optional, Union

from tfr_torch.format.paths import PathLike, exists
from tfr_torch.tfds.metadata import TFDSInfo, TFDSMetadataError, check_split_files, read_info

__all__ = ["describe", "problems"]

_NAMES_SHOWN = 10


def _shape(shape: tuple[Optional[int], ...]) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _leaf_text(leaf: Any) -> str:
    parts = [leaf.type, leaf.dtype, _shape(leaf.shape)]
    if leaf.type == "Image" and leaf.image_format:
        parts.append(leaf.image_format)
    if leaf.encoding not in (None, "none"):
        parts.append(f"encoding={leaf.encoding}")
    if leaf.type == "ClassLabel":
        if leaf.names:
            shown = ", ".join(leaf.names[:_NAMES_SHOWN]) + (", ..." if len(leaf.names) > _NAMES_SHOWN else "")
            parts.append(f"{len(leaf.names)} classes: {shown}")
        elif leaf.num_classes is not None:
            parts.append(f"{leaf.num_classes} classes")
    return "  ".join(parts)


def _tree_lines(node: Any, indent: int, name: str) -> list[str]:
    from tfr_torch.tfds.features import DictNode, SequenceNode

    pad = "  " * indent
    if isinstance(node, DictNode):
        lines = [f"{pad}{name}: FeaturesDict"] if name else []
        for key, child in node.children.items():
            lines += _tree_lines(child, indent + (1 if name else 0), key)
        return lines
    if isinstance(node, SequenceNode):
        kind = "Video" if node.video else "Dataset" if node.dataset else "Sequence"
        length = "variable length" if node.length is None else f"length {node.length}"
        return [f"{pad}{name}: {kind} ({length}) of"] + _tree_lines(node.feature, indent + 1, "-")
    return [f"{pad}{name}: {_leaf_text(node)}"]


def problems(info: TFDSInfo) -> list[str]:
    """What is wrong with the split files: a missing shard, a shard whose record count disagrees with
    dataset_info.json (counted only when the split's byte size disagrees), one line each."""
    found = []
    for split in info.splits:
        try:
            check_split_files(info, split)
        except TFDSMetadataError as err:
            found.append(str(err))
    return found


def describe(path: Union[PathLike, TFDSInfo]) -> str:
    """The text `tfr-torch inspect` prints for a TFDS dataset folder (the version folder, or the dataset folder:
    its latest version). Raises TFDSMetadataError for metadata it cannot read; problems with the shard files are
    listed at the end (see `problems`)."""
    from tfr_torch.tfds.features import parse_features

    info = path if isinstance(path, TFDSInfo) else read_info(path)
    lines = [f"{info.name} {info.version}  ({info.path})"]
    if info.description:
        lines.append(info.description.strip().splitlines()[0])
    lines.append("")
    rows = [("split", "shards", "records", "bytes")]
    for name, split in info.splits.items():
        present = sum(exists(p) for p in info.shard_paths(name))
        shards = str(split.num_shards) if present == split.num_shards else f"{split.num_shards} ({present} present)"
        size = "-" if split.num_bytes is None else f"{split.num_bytes:,}"
        rows.append((name, shards, f"{split.num_examples:,}", size))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip())
    total = sum(s.num_examples for s in info.splits.values())
    lines.append(f"{len(info.splits)} split(s), {total:,} records; shards named "
                 f"{next(iter(info.splits.values())).filenames(info.name)[0]} ...")
    if info.supervised_keys:
        lines.append(f"supervised keys (as_supervised=True): {info.supervised_keys[0]} -> {info.supervised_keys[1]}")
    lines.append("")
    lines.append("features (shapes as TFDS declares them: images (H, W, C); tfr_torch yields them [C, H, W]):")
    tree = parse_features(info.features, f"{info.path}/features.json", info.class_names)
    lines += _tree_lines(tree, 1, "")
    found = problems(info)
    if found:
        lines.append("")
        lines += [f"problem: {p}" for p in found]
    return "\n".join(lines) + "\n"
