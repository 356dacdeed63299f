"""labkit.env: the report and Triton's interpreter switch."""
import os
import subprocess
import sys

import pytest
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


def test_driver_version_from_proc():
    closed = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 09:16:09 UTC 2025\n"
    opened = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release Build\n"
    assert env.parse_driver_version(closed) == "580.95.05"
    assert env.parse_driver_version(opened) == "570.124.06"
    assert env.parse_driver_version("no driver here") is None


@pytest.mark.parametrize("present, usable, cuda, driver, says", [
    (False, False, None, None, None),                                  # no GPU: nothing to fix
    (True, True, "13.0", "580.95.05", None),                           # a working GPU
    (True, False, None, "580.95.05", "is a CPU build"),                # torch's CPU wheel
    (True, False, "13.0", "550.54.15", "too old for torch's CUDA 13.0 build (needs 580"),
    (True, False, "12.6", "550.54.15", "cannot use the GPU"),          # driver new enough: another cause
    (True, False, "13.0", None, "no NVIDIA driver"),
])
def test_a_present_but_unusable_gpu_is_explained_with_its_fix(present, usable, cuda, driver, says):
    line = env.gpu_problem(present, usable, cuda, driver, "2.13.0+cu130")
    if says is None:
        assert line is None
    else:
        assert says in line and "\n" not in line
        if "CPU build" in says or "too old" in says:
            assert env.OLDER_CUDA_INDEX in line and "torch==2.13.0" in line


def test_report_names_driver_cuda_build_and_triton_backend(capsys):
    rep = env.report()
    out = capsys.readouterr().out
    assert rep.torch_cuda == torch.version.cuda and "driver / CUDA" in out
    assert ("torch CPU build" in out) == (torch.version.cuda is None)
    if not torch.cuda.is_available():
        assert rep.triton_backend == "interpreter"
    assert all(len(line) <= 100 for line in out.splitlines())


def test_require_gpu_says_why_in_one_line():
    done = subprocess.run([sys.executable, "-W", "ignore", "-m", "labkit.env", "--require-gpu"],
                          capture_output=True, text=True)
    if torch.cuda.is_available():
        assert done.returncode == 0
    else:
        assert done.returncode == 1 and done.stderr.strip().count("\n") == 0
        assert done.stderr.startswith("needs a CUDA GPU: ")
