"""Fallbacks for older Triton releases, applied once when ``labkit.kernels`` is imported.

A GPU box with a preinstalled stack may carry an older Triton than the one we pin (3.6 next to
torch 2.11, where the pin is 3.7.1). Each fallback is one small, version-gated patch.
"""
from __future__ import annotations

import triton


def _version() -> tuple[int, int]:
    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def patch_interpreter_scalar_index() -> bool:
    """Triton < 3.7's interpreter turns a scalar tensor into a Python int with ``int(array)``, which
    NumPy >= 2.4 refuses for its 1-element arrays, so ``range(0, tl.cdiv(K, BLOCK_K))`` fails in
    interpreted kernels ("only 0-dimensional arrays can be converted to Python scalars"). 3.7 reads
    ``int(array.squeeze())``; do the same. Returns True when the patch was applied."""
    if _version() >= (3, 7):
        return False
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "labkit_patched", False):
        return True

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.labkit_patched = True
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
