"""Lab 01: arithmetic intensity, the roofline, MFU/HFU, fusion.

``labkit.roofline.model``: FLOP/byte cost models, the roofline, MFU/HFU (pure Python).
``labkit.roofline.measure``: timing this machine with torch (peak matmul, bandwidth, fused vs unfused).
Drawing lives in ``labkit.roofline.draw``.
"""
from labkit.roofline.model import *  # noqa: F401,F403
from labkit.roofline.model import __all__ as _model_all

__all__ = list(_model_all)
