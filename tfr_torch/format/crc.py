"""CRC-32C (Castagnoli) and TFRecord's CRC mask."""

from __future__ import annotations

from crc32c import crc32c

__all__ = ["crc32c", "masked_crc32c", "unmask_crc32c"]

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """Return TFRecord's masked CRC-32C of a bytes-like object."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def unmask_crc32c(masked: int) -> int:
    """Invert `masked_crc32c`'s mask: return the plain CRC-32C it was made from."""
    rot = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
