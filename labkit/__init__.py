"""labkit: the code behind MLSys Labs.

One package per topic, each drawing its own pictures (`labkit/<topic>/draw.py`)
with the shared player (`labkit.viz.player`); `labkit.dist` launches ranks;
`labkit.grade` grades exercises. Importing labkit is cheap and
sets nothing up by itself except Triton's interpreter mode on GPU-less
machines (see `labkit.env.use_triton_interpreter_if_no_gpu`).
"""
from labkit.env import use_triton_interpreter_if_no_gpu as _interp

_interp()
__version__ = "0.1.0"
