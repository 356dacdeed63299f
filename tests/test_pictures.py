"""labkit.pictures finds, from the lab's name alone, the picture `check_your_work(lab, exercise)`
draws: for every check-your-work cell of the notebooks and every graded exercise, a ``picture(fn)``
of the topic's lab module that knows that exercise."""
import re
from pathlib import Path

import pytest

from labkit import pictures
from labkit.grading import generate

SOURCES = sorted((Path(__file__).resolve().parents[1] / "notebooks" / "_src").glob("[0-9][0-9]*_*.py"))
CALL = re.compile(r'check_your_work\(\s*"(lab\d\d_\w+)",\s*"(\w+)"\)')
CALLS = sorted({m for src in SOURCES for m in CALL.findall(src.read_text())})
EXERCISES = sorted((lab, ex) for lab in generate.LABS for ex in generate.stubs(lab))


def test_every_graded_exercise_has_a_check_your_work_cell():
    assert len(CALLS) >= 60 and set(CALLS) == set(EXERCISES), set(EXERCISES) ^ set(CALLS)
    assert not any("picture=" in src.read_text() for src in SOURCES)   # the lab's picture is found


@pytest.mark.parametrize("lab,exercise", EXERCISES, ids=[f"{lab}-{ex}" for lab, ex in EXERCISES])
def test_the_lab_name_finds_a_picture_of_the_exercise(lab, exercise):
    module = pictures.picture_module(lab, exercise)
    assert module.startswith("labkit.") and module.rsplit(".", 1)[1] in ("lab", "cuda_lab")
    assert callable(pictures.picture(lab, exercise))


def test_an_unknown_lab_is_named():
    with pytest.raises(ValueError, match="no lab named 'lab99_x'"):
        pictures.picture("lab99_x", "y")
