"""Sharding specs: where each piece of a tensor lives on a device mesh, and what a matmul does to them.

Mesh-TensorFlow (Shazeer et al. 2018) and GSPMD (Xu et al. 2021) describe a distributed tensor
by one *placement* per dimension of a device mesh; PyTorch's DTensor uses the same three:

    "S(i)"  Shard(i)    the tensor's dimension i is cut into equal pieces along this mesh dimension
    "R"     Replicate   every rank along this mesh dimension holds the whole (of what it holds)
    "P"     Partial     every rank holds a summand; the tensor is the sum over this mesh dimension

On a 2-D mesh a tensor has two placements, e.g. ("S(0)", "S(1)"): rows cut over the mesh's first
dimension, columns over its second — each of 4 ranks holds one quarter block.

**Propagation through an einsum** (matmul is "mk,kn->mn"), one mesh dimension at a time: the
output placement DTensor gives without moving any data, or None when the inputs must be
redistributed first (a collective):

    R  with R                         -> R
    P  with R (either side)           -> P          (a sum of summands times a constant)
    S on letter x with S on letter x  -> S(x's place in the output), or P if x is summed away
    S on letter x with R              -> the same as S with S on x: a replicated operand can cut
                                         itself along x locally, with no communication
                                         (if x is not among its letters it needs no cut at all)
    anything else (S on different letters, P with S, P with P)   -> None

On a mesh the rule applies to each mesh dimension separately, with one more condition: a letter
cut along several mesh dimensions is cut in their order (the first mesh dimension makes the big
pieces), so the two operands' pieces of a shared letter x line up only if the mesh dimensions
cutting x in one operand begin the list of those cutting it in the other (a replicated operand
can add later cuts locally, never earlier ones). If any mesh dimension gives None, or a shared
letter fails that test, the whole gives None. `einsum_placement` is the one-dimension rule,
`propagate` the mesh version; `labkit.sharding.dtensor` checks both against DTensor's own
choices on real gloo ranks.
"""
from __future__ import annotations

import re

_SHARD = re.compile(r"^S\((\d+)\)$")


def parse_placement(p: str) -> tuple[str, int | None]:
    """("S", i), ("R", None) or ("P", None) from "S(i)", "R" or "P"; ValueError otherwise."""
    if p in ("R", "P"):
        return p, None
    m = _SHARD.match(p) if isinstance(p, str) else None
    if m is None:
        raise ValueError(f"a placement is 'R', 'P' or 'S(i)', got {p!r}")
    return "S", int(m.group(1))


def parse_equation(equation: str) -> tuple[str, str, str]:
    """("mk", "kn", "mn") from "mk,kn->mn" (two operands, explicit output, letters only)."""
    m = re.fullmatch(r"([a-z]+),([a-z]+)->([a-z]*)", equation.replace(" ", "")) if isinstance(equation, str) else None
    if m is None:
        raise ValueError(f"equation must look like 'mk,kn->mn', got {equation!r}")
    return m.group(1), m.group(2), m.group(3)


# BEGIN SOLUTION (labkit's checked rule: it answers einsum_placement)
def einsum_placement(equation: str, a: str, b: str) -> str | None:
    """The output's placement along one mesh dimension for einsum ``equation`` with operands
    placed ``a`` and ``b`` there, or None when an operand must be redistributed (module docstring)."""
    lhs, rhs, out = parse_equation(equation)
    (ka, ia), (kb, ib) = parse_placement(a), parse_placement(b)
    for letters, kind, i, name in ((lhs, ka, ia, "a"), (rhs, kb, ib, "b")):
        if kind == "S" and i >= len(letters):
            raise ValueError(f"einsum_placement: {name}={'S(%d)' % i} but that operand has {len(letters)} dimensions")
    if ka == kb == "R":
        return "R"
    if {ka, kb} == {"P", "R"}:
        return "P"
    if "P" in (ka, kb):
        return None
    xa = lhs[ia] if ka == "S" else None
    xb = rhs[ib] if kb == "S" else None
    if xa is not None and xb is not None and xa != xb:
        return None
    x = xa or xb
    return f"S({out.index(x)})" if x in out else "P"
# END SOLUTION


# BEGIN SOLUTION (the rule on every mesh dimension)
def propagate(equation: str, a: tuple, b: tuple) -> tuple | None:
    """`einsum_placement` on every mesh dimension: the output's placements, or None if any needs
    a redistribution. ``a`` and ``b``: one placement per mesh dimension."""
    if len(a) != len(b):
        raise ValueError(f"propagate: a and b need one placement per mesh dimension, got {a} and {b}")
    out = tuple(einsum_placement(equation, pa, pb) for pa, pb in zip(a, b))
    return None if None in out or not cuts_line_up(equation, a, b) else out
# END SOLUTION


def cuts_line_up(equation: str, a: tuple, b: tuple) -> bool:
    """Whether, for every letter both operands share, the mesh dimensions cutting it in one
    operand begin the list of those cutting it in the other (module docstring)."""
    lhs, rhs, _ = parse_equation(equation)
    for x in set(lhs) & set(rhs):
        short, long_ = sorted((_cuts(lhs, a, x), _cuts(rhs, b, x)), key=len)
        if long_[:len(short)] != short:
            return False
    return True


def _cuts(letters: str, placements: tuple, x: str) -> list[int]:
    """The mesh dimensions (in order) along which the operand with ``letters`` cuts letter ``x``."""
    return [d for d, p in enumerate(placements) if parse_placement(p)[0] == "S" and letters[parse_placement(p)[1]] == x]


def _einsum_placement(equation, a, b):
    """The placement of ``torch.einsum(equation, A, B)`` along one mesh dimension, or None.

    equation: two operands and an explicit output, letters only, e.g. "mk,kn->mn" or
    "bmk,bkn->bmn". a, b: the operands' placements along this mesh dimension, each "R"
    (replicated), "P" (partial sums) or "S(i)" (dimension i cut into pieces). Return the
    output's placement ("R", "P" or "S(i)") when DTensor can compute it with no communication,
    and None when an operand must first be redistributed (a collective).

    Rules: R with R is R. P with R (either order) is P. An operand cut along letter x, with the
    other cut along the same letter or replicated (a replicated operand can cut itself locally,
    for free), gives S(position of x in the output), or P if x is summed away. Everything else
    (cuts along different letters, P with S, P with P) is None.
    """
    # BEGIN SOLUTION
    # HINT: follow each index letter of the einsum: what happens to a sharded letter that survives
    # HINT: into the output, to one that is summed over, and to a partial sum multiplied by a
    # HINT: replicated operand?
    lhs, rest = equation.replace(" ", "").split(",")
    rhs, out = rest.split("->")

    def letter(p, letters):
        return letters[int(p[2:-1])] if p.startswith("S(") else None

    if a == "R" and b == "R":
        return "R"
    if {a, b} == {"P", "R"}:
        return "P"
    if "P" in (a, b):
        return None
    xa, xb = letter(a, lhs), letter(b, rhs)
    if xa is not None and xb is not None and xa != xb:
        return None
    x = xa or xb
    return f"S({out.index(x)})" if x in out else "P"
    # END SOLUTION
