"""What the saved notebooks show a learner: printed lines fit the output area (<= 100 characters)
and no cell's saved output is an error."""
import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]*_*.ipynb"))


def _texts(output: dict):
    if output.get("output_type") == "stream":
        yield "".join(output.get("text", ""))
    for mime in ("text/plain",):
        if mime in output.get("data", {}):
            yield "".join(output["data"][mime])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_saved_outputs_fit_and_hold_no_error(path):
    cells = json.loads(path.read_text())["cells"]
    long, errors = [], []
    for i, cell in enumerate(cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors.append(f"cell {i}: {out.get('ename')}")
            for text in _texts(out):
                long += [f"cell {i}: {len(line)} chars: {line[:60]}..." for line in text.splitlines() if len(line) > 100]
    assert not errors, errors
    assert not long, "\n".join(long[:10])


def test_make_test_runs_kernels_as_the_outputs_were_made():
    """`make test` sets the environment labkit.nbbuild executes notebooks with (one torch thread):
    the last digits of printed sums depend on the thread count."""
    from labkit.nbbuild import TEST_ENV

    makefile = (NOTEBOOKS[0].parents[1] / "Makefile").read_text()
    recipe = makefile.split("\ntest: setup\n", 1)[1].split("\n\n", 1)[0]
    assert TEST_ENV and all(f"{k}={v} " in recipe for k, v in TEST_ENV.items()), recipe
