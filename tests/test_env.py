"""labkit.env: the report and Triton's interpreter switch."""
import os
import subprocess
import sys

import torch

from labkit import env


def test_report_describes_this_machine(capsys):
    rep = env.report()
    printed = capsys.readouterr().out
    assert rep.torch_version == torch.__version__ and f"torch            : {torch.__version__}" in printed
    if torch.cuda.is_available():
        assert rep.device == "cuda" and rep.compute_unit_kind == "SMs" and rep.gpu_count >= 1
    else:
        assert rep.device == "cpu" and rep.compute_units == os.cpu_count() and rep.gpu_count == 0
        assert rep.max_world_size_nccl == 0 and "nccl unavailable" in printed
        assert rep.triton_interpreter and os.environ["TRITON_INTERPRET"] == "1"


def test_import_labkit_sets_interpreter_before_any_kernel_is_defined():
    code = ("import os; assert 'TRITON_INTERPRET' not in os.environ; import labkit, torch; "
            "print(os.environ.get('TRITON_INTERPRET'), torch.cuda.is_available())")
    envvars = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=envvars, check=True)
    value, cuda = out.stdout.split()
    assert value == ("None" if cuda == "True" else "1")


def test_explicit_setting_is_respected():
    code = "import os, labkit; print(os.environ['TRITON_INTERPRET'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "TRITON_INTERPRET": "0"}, check=True)
    assert out.stdout.strip() == "0"
