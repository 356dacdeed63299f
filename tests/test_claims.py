"""labkit.claims: a claim prints one checked line when it holds and raises when it does not."""
import pytest

from labkit.claims import MARK, ClaimFailed, claim, claim_between, claim_close

def test_claim_prints_one_line_when_it_holds(capsys):
    claim("three is more than two", 3 > 2, "3 vs 2")
    assert capsys.readouterr().out == f"{MARK} three is more than two (3 vs 2)\n"


def test_claim_raises_naming_the_claim_and_numbers(capsys):
    with pytest.raises(ClaimFailed, match=r"claim does not hold: two is more than three \(2 vs 3\)"):
        claim("two is more than three", 2 > 3, "2 vs 3")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("holds", ["yes", None, b""])
def test_claim_refuses_what_is_not_a_truth_value(holds):
    with pytest.raises(TypeError):
        claim("x", holds)


def test_claim_close_exact_and_tolerant(capsys):
    claim_close("exact", 6, 6)
    claim_close("within 10 %", 1.05, 1.0, rel=0.1)
    out = capsys.readouterr().out.splitlines()
    assert out == [f"{MARK} exact (6 vs 6, exactly)", f"{MARK} within 10 % (1.05 vs 1, within 10%)"]
    with pytest.raises(ClaimFailed):
        claim_close("exact", 6.000001, 6)
    with pytest.raises(ClaimFailed):
        claim_close("within 1 %", 1.05, 1.0, rel=0.01)
    with pytest.raises(ClaimFailed):
        claim_close("inf is not 1", float("inf"), 1.0, rel=0.5)


def test_claim_between(capsys):
    claim_between("in range", 0.5, 0, 1)
    assert capsys.readouterr().out == f"{MARK} in range (0.5 in [0, 1])\n"
    with pytest.raises(ClaimFailed, match=r"2 in \[0, 1\]"):
        claim_between("in range", 2, 0, 1)
