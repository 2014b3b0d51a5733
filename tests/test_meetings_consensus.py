"""Consensus rules, exhaustively over every stance combination for 2..6 agents."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from clawtower.core.meetings.consensus import Consensus, decide
from clawtower.core.meetings.stance import Stance

ALL = list(Stance)


def expected(combo: tuple[Stance, ...]) -> Consensus:
    # An independent statement of the rules: fractions, not integer cross-multiplication.
    agrees = [s for s in combo if s == Stance.AGREE]
    if len(agrees) == len(combo):
        return Consensus.FULL
    share = Fraction(len(agrees), len(combo))
    if share >= Fraction(2, 3) and Stance.DISAGREE not in combo:
        return Consensus.MAJORITY
    return Consensus.NO


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_every_combination(n: int) -> None:
    checked = 0
    for combo in itertools.product(ALL, repeat=n):
        result = decide(combo)
        assert result.consensus == expected(combo), combo
        assert result.total == n
        assert result.agree + result.disagree + result.neutral == n
        assert result.unknown == combo.count(Stance.UNKNOWN)
        assert result.reason
        checked += 1
    assert checked == 4**n


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_unknown_counts_exactly_as_neutral(n: int) -> None:
    for combo in itertools.product(ALL, repeat=n):
        as_neutral = tuple(Stance.NEUTRAL if s == Stance.UNKNOWN else s for s in combo)
        assert decide(combo).consensus == decide(as_neutral).consensus


A, D, N, U = Stance.AGREE, Stance.DISAGREE, Stance.NEUTRAL, Stance.UNKNOWN


@pytest.mark.parametrize(
    ("combo", "result"),
    [
        ((A, A), Consensus.FULL),
        ((A, N), Consensus.NO),  # 1/2 < 2/3
        ((A, A, N), Consensus.MAJORITY),  # exactly 2/3
        ((A, A, U), Consensus.MAJORITY),  # a missing marker does not block
        ((A, A, D), Consensus.NO),  # one disagreement blocks
        ((A, A, A, N), Consensus.MAJORITY),
        ((A, A, N, N), Consensus.NO),
        ((A, A, A, N, N), Consensus.NO),  # 3/5 < 2/3
        ((A, A, A, A, N), Consensus.MAJORITY),
        ((A, A, A, A, N, U), Consensus.MAJORITY),  # 4/6 = 2/3
        ((A, A, A, A, A, D), Consensus.NO),
        ((U, U), Consensus.NO),
        ((D, D, D), Consensus.NO),
    ],
)
def test_named_cases(combo: tuple[Stance, ...], result: Consensus) -> None:
    assert decide(combo).consensus == result


@pytest.mark.parametrize("combo", [(), (Stance.AGREE,)])
def test_fewer_than_two_agents_is_an_error(combo: tuple[Stance, ...]) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        decide(combo)
