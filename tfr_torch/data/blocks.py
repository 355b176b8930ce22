"""Blocks of records: a stream's records in order with where each came from (for error messages and record
locations), and the operations on such streams that do not read files: interleaving, a bounded shuffle buffer,
records one by one and back into blocks, dropping the first records (resuming), and regrouping into batches. A
reader frames a buffer's worth at once; batching takes the blocks without a Python step per record."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np

from tfr_torch.format.framing import OVERHEAD
from tfr_torch.format.location import RecordLocation

__all__ = ["Block", "Located", "interleave", "shuffle_buffer", "located", "blocks_of", "drop", "regroup", "flatten"]

_GROUP = 64  # records per block made from single records (read by offset, or out of the shuffle buffer)


class Located(NamedTuple):
    data: bytes
    path: str
    offset: int


class Block:
    """Records of a stream, in order, and where each came from. Contiguous (as a reader hands them out):
    `records[0]` starts at byte `start` of `path`, and each next one `len(record) + OVERHEAD` bytes after the one
    before.
    Scattered (read by offset, or shuffled): `where` holds each record's (path, offset)."""

    __slots__ = ("records", "path", "start", "where")

    def __init__(self, records: list[bytes], path: str = "", start: int = 0,
                 where: list[tuple[str, int]] | None = None) -> None:
        self.records = records
        self.path = path
        self.start = start
        self.where = where

    def __len__(self) -> int:
        return len(self.records)

    def location(self, i: int) -> RecordLocation:
        if self.where is not None:
            return RecordLocation(*self.where[i])
        return RecordLocation(self.path, self.start + sum(map(len, self.records[:i])) + OVERHEAD * i)

    def texts(self) -> list[str]:
        """Every record's location as its text, "path:offset" (str(location(i)) for each i, in one pass)."""
        if self.where is not None:
            return [f"{path}:{offset}" for path, offset in self.where]
        out = []
        at = self.start
        for record in self.records:
            out.append(f"{self.path}:{at}")
            at += len(record) + OVERHEAD
        return out

    def head(self, n: int) -> Block:
        return Block(self.records[:n], self.path, self.start, None if self.where is None else self.where[:n])

    def tail(self, n: int) -> Block:
        """The block without its first n records."""
        if self.where is not None:
            return Block(self.records[n:], where=self.where[n:])
        return Block(self.records[n:], self.path, self.location(n).offset)


def interleave(streams: Sequence[Iterator[Located]] | Iterator[Iterator[Located]], cycle: int) -> Iterator[Located]:
    """Round-robin over up to `cycle` streams at a time, opening the next stream when one ends (as
    tf.data's interleave), so a shuffle buffer mixes several files."""
    pending = iter(streams)
    active = list(itertools.islice(pending, max(cycle, 1)))
    while active:
        still = []
        for stream in active:
            item = next(stream, None)
            if item is None:
                replacement = next(pending, None)
                if replacement is not None:
                    still.append(replacement)
                continue
            yield item
            still.append(stream)
        active = still


def shuffle_buffer(items: Iterator[Located], size: int, rng: np.random.Generator) -> Iterator[Located]:
    """A bounded shuffle: keep `size` items, emit a random one as each new item arrives, then drain in random
    order (tf.data's shuffle(buffer_size))."""
    if size <= 1:
        yield from items
        return
    buffer: list[Located] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        j = int(rng.integers(size))
        yield buffer[j]
        buffer[j] = item
    order = rng.permutation(len(buffer))
    for j in order.tolist():
        yield buffer[j]


def located(blocks: Iterable[Block]) -> Iterator[Located]:
    """The records of blocks one by one, each with its file and offset."""
    for block in blocks:
        if block.where is not None:
            for data, (path, offset) in zip(block.records, block.where):
                yield Located(data, path, offset)
            continue
        path, offset = block.path, block.start
        for data in block.records:
            yield Located(data, path, offset)
            offset += len(data) + OVERHEAD


def blocks_of(items: Iterator[Located], size: int = _GROUP) -> Iterator[Block]:
    """Single records gathered into scattered blocks of up to `size`. When reading fails, the records read before
    the failure come out first, then the error."""
    while True:
        chunk: list[Located] = []
        try:
            for item in items:
                chunk.append(item)
                if len(chunk) == size:
                    break
        except Exception:
            if chunk:
                yield Block([r.data for r in chunk], where=[(r.path, r.offset) for r in chunk])
            raise
        if not chunk:
            return
        yield Block([r.data for r in chunk], where=[(r.path, r.offset) for r in chunk])
        if len(chunk) < size:
            return


def drop(blocks: Iterator[Block], n: int) -> Iterator[Block]:
    """The blocks without their first n records (resuming mid-epoch)."""
    while n > 0:
        block = next(blocks, None)
        if block is None:
            return
        if len(block) > n:
            yield block.tail(n)
            break
        n -= len(block)
    yield from blocks


def regroup(blocks: Iterable[Block], size: int, partial_on_error: bool = False) -> Iterator[list[Block]]:
    """Groups of blocks holding `size` records each (the last one fewer), cutting blocks where needed. With
    `partial_on_error`, when `blocks` raises, the records gathered so far come out as a last, short group first,
    then the error (records one by one: every record before a bad one is yielded, as TensorFlow does)."""
    group: list[Block] = []
    have = 0
    stream = iter(blocks)
    while True:
        try:
            block = next(stream)
        except StopIteration:
            break
        except Exception:
            if partial_on_error and group:
                yield group
            raise
        while True:
            need = size - have
            if len(block) < need:
                group.append(block)
                have += len(block)
                break
            group.append(block if len(block) == need else block.head(need))
            yield group
            group, have = [], 0
            if len(block) == need:
                break
            block = block.tail(need)
    if group:
        yield group


def flatten(group: list[Block]) -> list[bytes]:
    """The records of a group of blocks, as one list (the block's own list when there is one block)."""
    if len(group) == 1:
        return group[0].records
    return [record for block in group for record in block.records]
