"""Shared-memory bank conflicts: 32 banks of 4-byte words.

Shared memory is split into 32 banks; word w (a 4-byte word address, i.e. byte address // 4)
lives in bank ``w % 32``. Each bank delivers one word per cycle, so a warp's shared-memory
access takes as many passes as the busiest bank has *distinct* words to deliver: the
*conflict degree*. Lanes reading the same word share one delivery (a broadcast), so they
do not conflict. Degree 1 is conflict-free; degree 32 is fully serialised.

Closed forms (tests/test_gpu_model_banks.py checks them against `conflict_degree`):
- 32 lanes at stride s words (lane i reads word i·s): degree gcd(s, 32); stride 0 is a
  broadcast (degree 1). With L lanes and B banks in general: ceil(L / (B / gcd(s, B))).
- reading a column of a 32 × 32 float tile stored row-major (row stride 32 words): every
  lane hits the same bank: 32-way. Padding each row to 33 words (``tile[32][33]``) puts
  row r's column c in bank (33·r + c) % 32 = (r + c) % 32: all 32 banks, degree 1.

Contract of `conflict_degree(words, banks=32)`: ``words`` is a list, tuple or 1-D numpy array
of at most 32 entries, one per lane in lane order, each a word address (an int >= 0) or None
for an inactive lane; ``banks`` a power of two; returns the largest number of distinct words that active lanes
request from one bank (0 if no lane is active).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from labkit.checks import check_int

__all__ = ["BankAccess", "bank_access", "conflict_degree", "strided_conflict_degree", "tile_column_words",
           "tile_row_words", "words_from_bytes", "BANKS", "WORD_BYTES"]

BANKS = 32
WORD_BYTES = 4
MAX_LANES = 32


def _banks(fn: str, banks) -> int:
    banks = check_int(fn, "banks", banks, minimum=1)
    if banks & (banks - 1):
        raise ValueError(f"{fn}: banks must be a power of two, got {banks}")
    return banks


def _words(fn: str, words) -> list:
    if not isinstance(words, (list, tuple, np.ndarray)):
        raise TypeError(f"{fn}: words must be a list of ints or None (one per lane), got {type(words).__name__}")
    words = list(words)
    if len(words) > MAX_LANES:
        raise ValueError(f"{fn}: a warp has at most {MAX_LANES} lanes, got {len(words)} word addresses")
    return [None if w is None else check_int(fn, f"words[{i}]", w, minimum=0) for i, w in enumerate(words)]


@dataclass(frozen=True)
class BankAccess:
    """One warp's shared-memory access.

    ``lane_banks[i]``: bank of lane i's word (None: inactive); ``words_per_bank[b]``: distinct
    words requested from bank b; ``degree`` = max of those (passes needed; 1 = no conflict,
    0 = no active lane); ``broadcast``: some word was read by two or more lanes.
    """
    lane_banks: tuple
    words_per_bank: tuple
    degree: int
    broadcast: bool

    @property
    def conflict_free(self) -> bool:
        return self.degree <= 1


def bank_access(words, banks: int = BANKS) -> BankAccess:
    """Banks, per-bank distinct words and conflict degree for one warp's word addresses."""
    fn = "bank_access"
    banks = _banks(fn, banks)
    lanes = _words(fn, words)
    per_bank: list[set] = [set() for _ in range(banks)]
    for w in lanes:
        if w is not None:
            per_bank[w % banks].add(w)
    active = [w for w in lanes if w is not None]
    counts = tuple(len(s) for s in per_bank)
    return BankAccess(tuple(None if w is None else w % banks for w in lanes), counts, max(counts),
                      len(set(active)) < len(active))


def conflict_degree(words, banks: int = BANKS) -> int:
    """Largest number of distinct words one bank must deliver (see the module's contract)."""
    return bank_access(words, banks).degree


def strided_conflict_degree(stride: int, lanes: int = MAX_LANES, banks: int = BANKS) -> int:
    """Closed form for lane i reading word i·stride: ceil(lanes / (banks / gcd(stride, banks)));
    for 32 lanes and 32 banks, gcd(stride, 32). Stride 0 (one word for all) is a broadcast: 1."""
    fn = "strided_conflict_degree"
    s = check_int(fn, "stride", stride, minimum=0)
    lanes = check_int(fn, "lanes", lanes, minimum=1, maximum=MAX_LANES)
    banks = _banks(fn, banks)
    if s == 0:
        return 1
    period = banks // math.gcd(s, banks)      # lanes i and i + period share a bank
    return -(-lanes // period)


def tile_column_words(col: int, rows: int = 32, row_words: int = 32) -> list[int]:
    """Word addresses of column ``col`` of a row-major tile with ``row_words`` words per row
    (32 for ``float tile[32][32]``, 33 when padded): lane r reads row r."""
    fn = "tile_column_words"
    rows = check_int(fn, "rows", rows, minimum=1, maximum=MAX_LANES)
    row_words = check_int(fn, "row_words", row_words, minimum=1)
    col = check_int(fn, "col", col, minimum=0, maximum=row_words - 1)
    return [r * row_words + col for r in range(rows)]


def tile_row_words(row: int, cols: int = 32, row_words: int = 32) -> list[int]:
    """Word addresses of row ``row`` of a row-major tile: lane c reads column c."""
    fn = "tile_row_words"
    row_words = check_int(fn, "row_words", row_words, minimum=1)
    cols = check_int(fn, "cols", cols, minimum=1, maximum=min(MAX_LANES, row_words))
    row = check_int(fn, "row", row, minimum=0)
    return [row * row_words + c for c in range(cols)]


def words_from_bytes(addresses, word_bytes: int = WORD_BYTES) -> list:
    """Byte addresses (None kept) → word addresses (byte // word_bytes)."""
    word_bytes = check_int("words_from_bytes", "word_bytes", word_bytes, minimum=1)
    return [None if a is None else check_int("words_from_bytes", "address", a, minimum=0) // word_bytes
            for a in addresses]
