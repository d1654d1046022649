"""CRC-32C arithmetic: the CRC of a file from the CRCs of its blocks, without its bytes.

`metadata.db` records each file's CRC-32C and the CRC-32C of each of its blocks
(`file_blocks`). A file fetched block by block is checked block by block; `combine_blocks`
then says whether those block CRCs are the file's, so that the file kept under its whole
CRC is that file (the binary's `FileBlocks::combine_into`).

For CRC-32C (reflected, initial value and final XOR all ones), the CRC of A followed by B is
`shift(crc(A), len(B)) ^ crc(B)`, where `shift(x, n)` runs the bare register `x` over n zero
bytes: a linear map over GF(2), kept as 32 columns and raised to any length by squaring.
"""

from __future__ import annotations

from functools import lru_cache

#: CRC-32C's polynomial, reflected.
_POLY = 0x82F63B78


def _apply(columns: tuple, x: int) -> int:
    """The linear map given by its `columns` (the images of each bit) applied to `x`."""
    out, bit = 0, 0
    while x:
        if x & 1:
            out ^= columns[bit]
        x >>= 1
        bit += 1
    return out


def _zero_byte(x: int) -> int:
    for _ in range(8):
        x = (x >> 1) ^ (_POLY if x & 1 else 0)
    return x


@lru_cache(maxsize=None)
def _power(k: int) -> tuple:
    """The map of 2**k zero bytes."""
    if k == 0:
        return tuple(_zero_byte(1 << j) for j in range(32))
    half = _power(k - 1)
    return tuple(_apply(half, c) for c in half)


def shift(x: int, n: int) -> int:
    """The bare CRC-32C register `x` run over `n` zero bytes."""
    k = 0
    while n:
        if n & 1:
            x = _apply(_power(k), x)
        n >>= 1
        k += 1
    return x


@lru_cache(maxsize=8)
def _shift_by(n: int) -> tuple:
    """The map of `n` zero bytes, as columns (for a length used again and again: the block
    size)."""
    return tuple(shift(1 << j, n) for j in range(32))


def combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """The CRC-32C of A followed by B, from A's CRC, B's CRC and B's length.

    >>> import google_crc32c
    >>> a, b = b"2048 ", b"self-play"
    >>> combine(google_crc32c.value(a), google_crc32c.value(b), len(b)) == google_crc32c.value(a + b)
    True
    """
    return shift(crc_a, len_b) ^ crc_b


def combine_blocks(crcs, block_bytes: int, size: int) -> int:
    """The CRC-32C of a file of `size` bytes whose consecutive blocks of `block_bytes` (the
    last one shorter) have these CRCs."""
    if not len(crcs):
        return 0
    whole = _shift_by(block_bytes)
    crc = int(crcs[0])
    for block in crcs[1:-1]:
        crc = _apply(whole, crc) ^ int(block)
    if len(crcs) > 1:
        crc = combine(crc, int(crcs[-1]), size - (len(crcs) - 1) * block_bytes)
    return crc
