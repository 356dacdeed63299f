"""Lab 04's stubs raise with a hint under the interpreter (exercises/ and solutions/ are generated from
labkit.kernels.simple: tests/test_grading.py checks they are current)."""
import labkit  # noqa: F401

import pytest
import torch

import exercises.lab04_triton as E


@pytest.mark.skipif(not labkit.env.use_triton_interpreter_if_no_gpu(), reason="stubs are run under the interpreter")
def test_stub_raises_with_hint():
    with pytest.raises(Exception, match="hint"):
        E.add(torch.ones(3), torch.ones(3))
