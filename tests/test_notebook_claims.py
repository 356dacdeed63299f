"""Every lab notebook checks its own prose: its stored outputs hold at least six ``✓`` claim lines,
and no claim in its source is handed a constant instead of a computed result."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from labkit.claims import MARK

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LABS = sorted(p for p in NOTEBOOKS.glob("[01][0-9]*_*.ipynb") if not p.name.startswith("00_"))
SOURCES = sorted(p for p in (NOTEBOOKS / "_src").glob("[01][0-9]*_*.py") if not p.name.startswith("00_"))
MIN_CLAIMS = 6
# the arguments of each claim function that must be computed, not written down
COMPUTED_ARGS = {"claim": (1,), "claim_close": (1, 2), "claim_between": (1,)}


def _claim_lines(nb_path: Path) -> list[str]:
    nb = json.loads(nb_path.read_text())
    lines = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            lines += [ln for ln in text.splitlines() if ln.startswith(MARK + " ")]
    return lines


def test_there_are_fourteen_labs():
    """Labs 01-14, a long one in two parts (06 and 06b); every notebook has its source."""
    assert {p.name[:2] for p in LABS} == {f"{n:02d}" for n in range(1, 15)}, [p.name for p in LABS]
    assert [p.stem for p in LABS] == [p.stem for p in SOURCES]


@pytest.mark.parametrize("path", LABS, ids=lambda p: p.stem)
def test_each_lab_prints_its_claim_checks(path):
    lines = _claim_lines(path)
    assert len(lines) >= MIN_CLAIMS, f"{path.name}: {len(lines)} claim lines, want >= {MIN_CLAIMS}"


def _literal_claims(source: str) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        positions = COMPUTED_ARGS.get(node.func.id)
        if positions is None:
            continue
        args = node.args
        if all(i < len(args) and isinstance(args[i], ast.Constant) for i in positions):
            bad.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return bad


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.stem)
def test_no_claim_is_given_a_constant(path):
    assert _literal_claims(path.read_text()) == []


def test_the_constant_check_can_fail():
    src = ('claim("x holds", True)\nclaim_close("y", 3, 3)\nclaim_between("z", 0.5, 0, 1)\n'
           'claim("w", w > 1)\nclaim_close("v", v, 3)\n')
    assert len(_literal_claims(src)) == 3
