"""`tfr-torch reshard`: rewrite records into new shards (size, compression), with indexes and a sidecar."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
from typing import Any

from tfr_torch.decode.infer import NoRecordsError, infer_features
from tfr_torch.decode.sequence_features import SequenceFeatures
from tfr_torch.decode.sidecar import spec_of_sidecar
from tfr_torch.errors import DecodeError
from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.options import Compression, check_compression
from tfr_torch.format.paths import _fsspec, as_path, file_size, is_url
from tfr_torch.format.reader import RecordReader
from tfr_torch.format.shardset import find_sidecar, parse_shard_name
from tfr_torch.tools.progress import Progress
from tfr_torch.tools.shards import ShardedWriter

__all__ = ["check_output", "reshard", "reshard_names"]

# shard numbers elsewhere: tut-00000-of-00004.tfrecord, train-00000-of-01024, part_3_of_8.tfr, data-00007.tfrecord
_NUMBERING = re.compile(r"[-_.]\d+[-_]of[-_]\d+$|[-_.]\d+$")
_EXTENSION = re.compile(r"\.(tfrecords?|tfr|records?)$", re.I)
_COMPRESSED = re.compile(r"\.(gz|gzip|zz|zlib)$", re.I)
_SPLITS = ("train", "validation", "valid", "val", "test", "eval", "dev")


def _base(path: str) -> str:
    """A file name without folder, compression suffix, extension and shard numbering."""
    name = _COMPRESSED.sub("", as_path(path).rstrip("/").rsplit("/", 1)[-1])
    previous = None
    while previous != name:  # tut-00000-of-00004.tfrecord, shard.tfrecord-00001, x.tfrecord.gz ...
        previous = name
        name = _EXTENSION.sub("", _NUMBERING.sub("", name))
    return name.strip("-_.")


def _name_split(path: str) -> tuple[str | None, str | None]:
    """(name, split) that one file name suggests; None where it suggests nothing."""
    file_name = _COMPRESSED.sub("", as_path(path).rstrip("/").rsplit("/", 1)[-1])
    tfds = parse_shard_name(file_name)  # TFDS: {name}-{split}.tfrecord-00000-of-00004 (also .tfrecords)
    if tfds is not None:
        return tfds[0], tfds[1]
    base = _base(path)
    for split in _SPLITS:
        if base.lower() == split:  # ImageNet's train-00000-of-01024: the split alone; the folder names the set
            folder = os.path.basename(os.path.dirname(os.path.abspath(as_path(path)))) if not is_url(path) else ""
            return (folder or None), split
        for sep in "-_.":
            if base.lower().endswith(sep + split):
                return base[: -len(split) - 1].strip("-_.") or None, base[-len(split):]
    return (base or None), None


def reshard_names(paths: Sequence[str], name: str | None = None, split: str | None = None) -> tuple[str, str]:
    """The (name, split) that `reshard` gives its output: `name` / `split` when given, else the input's sidecar's,
    else what the input file names say (TFDS names, `-00000-of-00004` numbering, a split word such as train or
    validation at the end), else "data" and "train".

    >>> reshard_names(["tut-00000-of-00004.tfrecord", "tut-00001-of-00004.tfrecord"])
    ('tut', 'train')
    >>> reshard_names(["mnist-test.tfrecord-00000-of-00001"])
    ('mnist', 'test')
    """
    found = find_sidecar(paths) if paths else None
    if found is not None:
        return name or found.data["name"], split or found.data["split"]
    guesses = [_name_split(path) for path in paths]
    names = {n for n, _ in guesses}
    splits = {s for _, s in guesses}
    guessed_name = names.pop() if len(names) == 1 else None
    if guessed_name is None and len(names) > 1:
        common = os.path.commonprefix(sorted(n or "" for n in names)).strip("-_.")
        guessed_name = common or None
    guessed_split = splits.pop() if len(splits) == 1 else None
    return name or guessed_name or "data", split or guessed_split or "train"


def _where(path: str) -> str:
    """One spelling per file: a local path with its folder's symbolic links resolved (an output folder that is a
    link to the input's is that folder), or a URL as fsspec spells it (memory://a = memory:///a)."""
    if not is_url(path):
        folder, base = os.path.split(os.path.abspath(path))
        return os.path.join(os.path.realpath(folder), base)
    fs, inner = _fsspec(path)
    return str(fs.unstrip_protocol(inner))


def _read_once(path: str) -> bool:
    """Whether `path` is a local input that can be read only once (a pipe, such as the shell's `<(cat f)`)."""
    local = as_path(path)
    return not is_url(local) and os.path.exists(local) and not os.path.isfile(local) and not os.path.isdir(local)


def check_output(paths: Sequence[str], out_dir: str, name: str, split: str, version: str | None = None) -> None:
    """Raise ValueError if shards `name`-`split` in `out_dir` (with a TFDS `version`: in `out_dir/name/version/`,
    where `reshard(..., tfds=True)` writes them) would write over one of `paths`."""
    folder = as_path(out_dir).rstrip("/") or "."
    if version is not None:
        folder = f"{folder}/{name}/{version}"
    prefix = _where(f"{folder}/{name}-{split}.tfrecord-")
    clash = [p for p in paths if _where(as_path(p)).startswith(prefix)]
    if clash:
        raise ValueError(f"the new shards would write over their input {clash[0]!r} (same folder, name {name!r} and "
                         f"split {split!r}): choose another output folder, --name or --split")


def _cuts(paths: Sequence[str], num_shards: int) -> list[int]:
    """The record count of each of `num_shards` shards of the records of `paths` (counted here): equal, the first
    ones one more where the total does not divide."""
    pipes = [p for p in paths if _read_once(p)]
    if pipes:
        raise ValueError(f"num_shards needs the records counted before they are copied: {pipes[0]!r} is a pipe, which "
                         "can be read only once; write it to a file first, or give a shard size")
    total = 0
    for path in paths:
        with RecordReader(path, verify=False) as reader:
            total += sum(len(lengths) for lengths, _ in reader.lengths())
    if total < num_shards:
        raise ValueError(f"num_shards={num_shards} but the inputs hold {total} record(s): a shard of no records "
                         "cannot be written; ask for at most that many shards")
    per, more = divmod(total, num_shards)
    return [per + 1] * more + [per] * (num_shards - more)


def reshard(paths: Sequence[str], out_dir: str, *, shard_size: Any = "128MB", compression: Compression = None,
            name: str | None = None, split: str | None = None, progress: bool = False, tfds: bool = False,
            version: str = "1.0.0", num_shards: int | None = None) -> list[str]:
    """Copy every record of `paths` (any compression, detected), in order, into new shards (ShardedWriter: TFDS
    names, an index per shard, a sidecar) named by `reshard_names`. The features spec is taken from the input's
    sidecar when there is one, else inferred from records of every file (none when they are not Examples, or when
    an input is a pipe, which can be read only once).
    Refuses to write over its own input (same folder, name and split). `tfds=True` writes a TensorFlow Datasets
    folder `out_dir/name/version/` instead of the sidecar (tfr_torch.tfds.write.reshard_options).
    `num_shards`: exactly that many shards instead of `shard_size`, of equal record counts (the first ones one more
    where the count does not divide): the records are counted first (a pass over the inputs' headers; pipes,
    read only once, are refused), and a count below `num_shards` is refused.

    >>> old = ["old-00000-of-00002.tfrecord", "old-00001-of-00002.tfrecord"]
    >>> reshard(old, "new/", shard_size="64MB")  # doctest: +SKIP
    ['new/old-train.tfrecord-00000-of-00001']
    """
    check_compression(compression)
    if num_shards is not None and (isinstance(num_shards, bool) or not isinstance(num_shards, int)
                                   or num_shards < 1):
        raise ValueError(f"num_shards must be a positive int, got {num_shards!r}")
    paths = list(paths)
    name, split = reshard_names(paths, name, split)
    out = as_path(out_dir).rstrip("/") or "."
    check_output(paths, out, name, split, version if tfds else None)
    cuts = None if num_shards is None else _cuts(paths, num_shards)
    found = find_sidecar(paths)
    features, image = None, None
    if found is not None:
        features = spec_of_sidecar(found)
        image = found.image
    pipes = [p for p in paths if _read_once(p)]
    if features is None and pipes:  # inferring would read (and lose) records that the copy must read
        if tfds:
            raise ValueError(f"tfds=True needs the records' features, read from the records before they are copied: "
                             f"{pipes[0]!r} is a pipe, which can be read only once; write it to a file first")
    elif features is None:
        try:
            inferred = infer_features(paths, max_records=1000)
            features = (SequenceFeatures(inferred.context, inferred.sequence)
                        if isinstance(inferred, SequenceFeatures) else dict(inferred))
        except NoRecordsError:
            if tfds:  # said before the folders are made, as ShardedWriter says it once they are
                raise ValueError(f"split {split!r} of {name!r} has no records: TensorFlow Datasets cannot read an "
                                 "empty split (its own writer refuses one: 'No examples were yielded.')") from None
            features = None  # no records: an empty set all the same
        except (DecodeError, ValueError):
            features = None  # not Examples: the records are copied all the same
    sizes = [file_size(p) for p in paths] if progress else []
    meter = Progress(label=f"{name}-{split}", enabled=progress, total_bytes=sum(sizes), unit="records")
    tfds_options = None
    if tfds:
        from tfr_torch.tfds.write import reshard_options

        if isinstance(features, SequenceFeatures):
            raise ValueError("tfds=True: TensorFlow Datasets folders hold tf.train.Example records (features.json "
                             "has no SequenceExample form) and these records are SequenceExamples; reshard them "
                             "with the sidecar instead")

        out, tfds_options = reshard_options(paths, out, name, version, features, image)
    writer = ShardedWriter(out, name, split, shard_size, compression, features=features, image=image,
                           tfds=tfds_options, records_per_shard=None if cuts is None else max(cuts[0], 1))
    ends = iter(itertools.accumulate(cuts or ()))  # the record count at which each shard ends
    end = next(ends, None)
    written = 0
    try:
        for path in paths:
            with RecordReader(path) as reader:
                if reader.compression != "none":
                    meter.unknown_total()
                for record in reader:
                    writer.write(record)
                    written += 1
                    meter.update(1, len(record) + OVERHEAD)
                    if written == end:
                        writer.finish_shard()
                        end = next(ends, None)
        if cuts is not None and written != sum(cuts):  # the files changed since they were counted
            raise ValueError(f"the inputs held {sum(cuts)} records when counted and {written} when copied (were they "
                             f"changed meanwhile?): no set of {len(cuts)} shards written")
        paths = writer.close()  # finishes the last shard (its index, its seek points): stopped there too
    except BaseException:
        writer.abort(keep_finished=False)  # never resumed: its finished shards would be left behind for good
        raise
    meter.done()
    return paths
