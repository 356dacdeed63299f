"""Lab 04 stubs and solutions stay in step: same kernels (signature, docstring), stubs unimplemented."""
import labkit  # noqa: F401

import inspect

import pytest
import torch

import exercises.lab04_triton as E
import solutions.lab04_triton as S

KERNELS = ["add_kernel", "softmax_kernel", "matmul_kernel", "layernorm_kernel"]


@pytest.mark.parametrize("name", KERNELS)
def test_kernel_signature_and_docstring_match(name):
    e, s = getattr(E, name), getattr(S, name)
    assert inspect.signature(e.fn) == inspect.signature(s.fn)
    assert inspect.getdoc(e.fn) == inspect.getdoc(s.fn) and len(inspect.getdoc(s.fn)) > 80
    assert "NotImplementedError" in inspect.getsource(e.fn)


@pytest.mark.parametrize("name", ["add", "softmax", "matmul", "layernorm"])
def test_wrappers_are_identical(name):
    assert inspect.getsource(getattr(E, name)) == inspect.getsource(getattr(S, name))


@pytest.mark.skipif(not labkit.env.use_triton_interpreter_if_no_gpu(), reason="stubs are run under the interpreter")
def test_stub_raises_with_hint():
    with pytest.raises(Exception, match="hint"):
        E.add(torch.ones(3), torch.ones(3))
