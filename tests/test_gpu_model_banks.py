"""labkit.gpu_model.banks: conflict degrees from bank mapping equal gcd(stride, 32) and the padding rule."""
import math

import pytest

from labkit.gpu_model import banks as B


@pytest.mark.parametrize("stride", range(0, 70))
def test_stride_conflicts_are_gcd(stride):
    words = [i * stride for i in range(32)]
    degree = B.conflict_degree(words)
    assert degree == B.strided_conflict_degree(stride)
    assert degree == (math.gcd(stride, 32) if stride else 1)


@pytest.mark.parametrize("lanes,banks", [(8, 32), (16, 32), (32, 16), (4, 8)])
def test_general_closed_form_against_the_mapping(lanes, banks):
    for s in range(0, 40):
        assert B.conflict_degree([i * s for i in range(lanes)], banks) == B.strided_conflict_degree(s, lanes, banks)


def test_tile_column_needs_padding_row_does_not():
    for col in (0, 7, 31):
        assert B.conflict_degree(B.tile_column_words(col)) == 32        # float tile[32][32]: one bank
        assert B.conflict_degree(B.tile_column_words(col, row_words=33)) == 1  # tile[32][33]
        assert B.bank_access(B.tile_column_words(col)).lane_banks == (col,) * 32
        assert sorted(B.bank_access(B.tile_column_words(col, row_words=33)).lane_banks) == list(range(32))
        assert B.conflict_degree(B.tile_row_words(col)) == 1
    assert B.conflict_degree(B.tile_column_words(0, row_words=34)) == 2   # gcd(34, 32)


def test_broadcast_and_inactive_lanes():
    acc = B.bank_access([5] * 32)                 # one word for everybody
    assert acc.degree == 1 and acc.broadcast and acc.conflict_free
    acc = B.bank_access([0, 0, 32, None, 64, 1])  # bank 0: words 0, 32, 64 (0 twice is one delivery)
    assert acc.degree == 3 and acc.words_per_bank[0] == 3 and acc.words_per_bank[1] == 1
    assert acc.lane_banks == (0, 0, 0, None, 0, 1) and acc.broadcast
    assert B.conflict_degree([None] * 32) == 0 and B.conflict_degree([]) == 0
    assert B.words_from_bytes([0, 4, 130, None]) == [0, 1, 32, None]


def test_checks():
    with pytest.raises(ValueError, match="at most 32 lanes"):
        B.conflict_degree(list(range(33)))
    with pytest.raises(ValueError, match="words\\[1\\]"):
        B.conflict_degree([0, -1])
    with pytest.raises(TypeError, match="words\\[0\\]"):
        B.conflict_degree([1.0])
    with pytest.raises(ValueError, match="power of two"):
        B.conflict_degree([0], banks=24)
    with pytest.raises(ValueError, match="col"):
        B.tile_column_words(32)
