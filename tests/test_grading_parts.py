"""The judge's building blocks on their own: the data-only codec and the static policy check."""
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

import numpy as np
import pytest
import torch

from labkit.grading import codec, static
from labkit.grading.remote import SubmissionError, _as_exception


@dataclass
class Stats:
    sent: int
    note: str


class Act(NamedTuple):
    stage: int
    kind: str


def test_codec_round_trips_plain_data_exactly():
    value = {"ints": [0, -1, 2 ** 70], "f": [1.5, float("inf")], "frac": Fraction(3, 11), "c": 1 + 2j,
             (1, "k"): (None, True, "s"), 5: np.arange(6, dtype=np.int16).reshape(2, 3),
             "t": torch.tensor([[1.0, -2.0]], dtype=torch.bfloat16), "empty": torch.zeros(0, 3),
             "rec": Stats(7, "x"), "nt": Act(2, "F")}
    back = codec.loads(codec.dumps(value))
    assert back["ints"] == value["ints"] and back["f"] == value["f"] and back["frac"] == Fraction(3, 11)
    assert back[(1, "k")] == (None, True, "s") and back["c"] == 1 + 2j
    assert np.array_equal(back[5], value[5]) and back[5].dtype == np.int16
    assert torch.equal(back["t"], value["t"]) and back["t"].dtype == torch.bfloat16
    assert back["empty"].shape == (0, 3)
    assert back["rec"].sent == 7 and back["rec"].type == "Stats"
    assert tuple(back["nt"]) == (2, "F") and back["nt"].kind == "F"


def test_codec_refuses_what_it_cannot_send():
    with pytest.raises(codec.CodecError, match="cannot be sent"):
        codec.dumps(object())
    with pytest.raises(codec.CodecError, match="cannot be sent"):
        codec.dumps(np.array([object()]))


@pytest.mark.parametrize("data, words", [
    (b"", "too short"),
    (struct.pack("<Q", 10 ** 9) + b"{}", "header length"),
    (struct.pack("<Q", 2) + b"{}", "malformed"),
    (struct.pack("<Q", 30) + b'{"v": {"t": "evil"}, "blobs": []}'[:30], "malformed"),
])
def test_codec_rejects_malformed_messages(data, words):
    with pytest.raises(codec.CodecError, match=words):
        codec.loads(data)


def _msg(tree, blobs=()):
    import json

    head = json.dumps({"v": tree, "blobs": [len(b) for b in blobs]}).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


@pytest.mark.parametrize("tree, blobs, words", [
    ({"t": "pickle", "v": "..."}, (), "unknown tag"),
    ({"t": "nd", "dtype": "object", "shape": [1], "b": 0}, (b"x" * 8,), "not allowed"),
    ({"t": "nd", "dtype": "float64", "shape": [4], "b": 0}, (b"x" * 8,), "does not match"),
    ({"t": "tensor", "dtype": "float32", "shape": [-1], "b": 0}, (b"",), "bad shape"),
    ({"t": "dict", "v": [[{"t": "list", "v": []}, 1]]}, (), "dict key"),
])
def test_codec_decodes_only_checked_data(tree, blobs, words):
    with pytest.raises(codec.CodecError, match=words):
        codec.loads(_msg(tree, blobs))


def test_remote_exceptions_become_builtin_classes_with_capped_messages():
    e = _as_exception({"type": "ViewError", "bases": ["RuntimeError", "Exception"], "message": "z" * 10 ** 6,
                       "where": "lab02_strides.py:9"}, "")
    assert type(e) is RuntimeError and len(str(e)) < 2500 and "lab02_strides.py:9" in str(e)
    assert type(_as_exception({"type": "KeyboardInterrupt", "bases": ["KeyboardInterrupt", "BaseException"],
                               "message": "", "where": ""}, "")) is SubmissionError


POLICY = static.Policy(labkit_allowed=frozenset({"labkit.matmul.Traffic"}),
                       references=(), forbid_collectives=True, jit_kernels=("k",))
EXERCISES = {"f", "g", "k"}
JIT_OK = "import triton\n@triton.jit\ndef k(x):\n    pass\n"


@pytest.mark.parametrize("source, where, words", [
    ("from solutions.lab03_matmul import *", static.ALL, "forbidden import `solutions.lab03_matmul`"),
    ("import solutions", static.ALL, "forbidden import `solutions`"),
    ("from labkit.matmul import cache_tiled", static.ALL, "forbidden import `labkit.matmul.cache_tiled`"),
    ("import labkit.matmul.traffic as t\ndef f():\n    return t.cache_tiled", "f", "not allowed"),
    ("def g():\n    exec('1')", "g", "`exec` is not allowed"),
    ("import importlib", static.ALL, "forbidden import `importlib`"),
    ("import os\ndef f():\n    os.system('x')", "f", "attribute `system`"),
    ("def f(x, n):\n    return getattr(x, n)", "f", "computed attribute name"),
    ("def f(x):\n    return getattr(x, 'all_reduce')", "f", "built-in collective"),
    ("import torch.distributed as dist\n_ar = dist.all_reduce", static.ALL, "built-in collective"),
    ("import torch.distributed as d\ndef g(t):\n    d.broadcast(t, 0)", "g", "built-in collective"),
    ("import torch\ndef g(t):\n    torch.distributed.reduce(t, 0)", "g", "built-in collective"),
    ("from torch.distributed import distributed_c10d", static.ALL, "distributed_c10d"),
    ("import sys\ndef f():\n    return sys.modules", "f", "attribute `modules`"),
    ("def f(x):\n    return x.__dict__", "f", "attribute `__dict__`"),
    ("def f(:\n", static.ALL, "syntax error at line 1"),
    ("def k(x):\n    pass", "k", "must be a @triton.jit kernel"),
    (JIT_OK + "k = None", "k", "rebound"),
])
def test_static_check_flags_and_attributes(source, where, words):
    found = static.check(source, POLICY, EXERCISES)
    assert where in found and words in found[where], found
    assert "\n" not in found[where] and "(line " in found[where] or "syntax" in found[where]
    assert static.reasons_for(found, "f" if where == static.ALL else where) == found[where]


def test_static_check_accepts_ordinary_code_and_allowed_names():
    source = JIT_OK + (
        "from functools import reduce\nimport numpy as np\nimport torch.distributed as dist\n"
        "from labkit.matmul import Traffic\n\n"
        "def f(a):\n    return reduce(lambda x, y: x + y, a), np.add.reduce(a), Traffic, getattr(a, 'shape')\n\n"
        "def g(t):\n    dist.isend(t, 1).wait()\n")
    assert static.check(source, POLICY, EXERCISES) == {}


def test_a_violation_inside_one_exercise_costs_only_that_exercise():
    found = static.check("def f():\n    eval('1')\n\ndef g():\n    return 1\n" + JIT_OK, POLICY, EXERCISES)
    assert set(found) == {"f"} and static.reasons_for(found, "g") is None


def test_check_your_work_on_a_stub_is_friendly_and_one_line(capsys):
    from labkit.grading.check import check_your_work, grade_one, max_points

    assert check_your_work("lab08_pipeline", "bubble_fraction", picture=lambda fn: fn(4, 8)) is None
    out = capsys.readouterr().out.splitlines()
    row = grade_one("lab08_pipeline", "bubble_fraction")
    assert row["score"] == 0 and row["max_score"] > 0
    assert out == ["bubble_fraction is still a stub.",
                   "Fill it in in exercises/lab08_pipeline.py, then run this cell again.",
                   f"grader: bubble_fraction 0/{row['max_score']} - not implemented yet"]
    assert all(len(line) <= 100 for line in out)
    assert max_points("lab08_pipeline", "bubble_fraction") == row["max_score"]


def test_untouched_stub_detection():
    """What check_your_work counts as an untouched stub (tests/test_grading.py checks every shipped
    stub is one, and that it scores what the grader gives it)."""
    from labkit.grading.check import is_untouched_stub

    def partly(x):
        """doc"""
        if x:
            return 1
        raise NotImplementedError("hint")

    def lone(x):
        raise NotImplementedError("hint: ...")

    assert not is_untouched_stub(partly) and is_untouched_stub(lone) and not is_untouched_stub(len)
