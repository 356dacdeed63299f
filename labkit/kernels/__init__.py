"""Lab 04: real Triton kernels, one module per kernel.

Each module has a ``@triton.jit`` kernel, a Python wrapper that takes torch
tensors (checked by :mod:`labkit.kernels.checks` before any launch) and a
torch reference (``*_reference``). On a machine without a GPU, ``import
labkit`` has already set ``TRITON_INTERPRET=1`` so the same kernels run in
Triton's interpreter on CPU tensors; :mod:`labkit.kernels.record` records
which elements each program instance touches in that mode.

Note: the package re-exports the wrappers, so ``labkit.kernels.add`` is the
*function*; reach a module's other names with ``from labkit.kernels.add
import add_kernel`` (``import labkit.kernels.add as m`` would give the function).
"""
import labkit  # noqa: F401  (sets TRITON_INTERPRET=1 before any kernel is defined)
from labkit.kernels.compat import patch_interpreter_scalar_index

patch_interpreter_scalar_index()

from labkit.kernels.add import add, add_kernel, add_reference
from labkit.kernels.attention import attention, attention_reference
from labkit.kernels.layernorm import LayerNormFunction, layernorm, layernorm_backward, layernorm_reference
from labkit.kernels.matmul import matmul, matmul_reference
from labkit.kernels.record import AccessRecorder, record
from labkit.kernels.softmax import softmax, softmax_reference

__all__ = ["add", "add_kernel", "add_reference", "softmax", "softmax_reference", "matmul",
           "matmul_reference", "layernorm", "layernorm_reference", "layernorm_backward", "LayerNormFunction", "attention",
           "attention_reference", "record", "AccessRecorder"]
