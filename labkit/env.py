"""What machine are we on? Device, versions, how many ranks a launch can use.

`report()` is the one call a notebook makes first. It also makes sure Triton
runs in interpreter mode (``TRITON_INTERPRET=1``) when there is no GPU; that
must happen before any ``@triton.jit`` kernel is defined, which is why
``import labkit`` already does it.
"""
from __future__ import annotations

import dataclasses
import os
import platform


def _cuda_available() -> bool:
    # No NVIDIA device node (Linux: /dev/nvidia0..., WSL2: /dev/dxg) means no CUDA: answer without
    # importing torch (about a second), which keeps `import labkit` cheap on CPU machines.
    import glob

    if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg"):
        return False
    import torch

    return bool(torch.cuda.is_available())


def use_triton_interpreter_if_no_gpu() -> bool:
    """Set TRITON_INTERPRET=1 unless a CUDA GPU is present. Returns True if interpreting.

    An explicit TRITON_INTERPRET already in the environment is respected.
    """
    if "TRITON_INTERPRET" not in os.environ and not _cuda_available():
        os.environ["TRITON_INTERPRET"] = "1"
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@dataclasses.dataclass(frozen=True)
class EnvReport:
    device: str               # "cuda" or "cpu"
    device_name: str          # GPU name, or the CPU model
    compute_units: int        # SMs on a GPU, logical cores on a CPU
    compute_unit_kind: str    # "SMs" or "cores"
    gpu_count: int
    torch_version: str
    triton_version: str       # "not installed" when missing
    triton_interpreter: bool
    python_version: str
    max_world_size_gloo: int  # ranks we allow on CPU (oversubscription beyond this gets slow)
    max_world_size_nccl: int  # one rank per GPU

    def lines(self) -> list[str]:
        return [
            f"device           : {self.device} ({self.device_name})",
            f"compute units    : {self.compute_units} {self.compute_unit_kind}",
            f"GPUs             : {self.gpu_count}",
            f"python           : {self.python_version}",
            f"torch            : {self.torch_version}",
            f"triton           : {self.triton_version}"
            + (" (interpreter mode: TRITON_INTERPRET=1)" if self.triton_interpreter else " (compiled)"),
            f"world sizes      : gloo 1..{self.max_world_size_gloo}"
            + (f", nccl 1..{self.max_world_size_nccl}" if self.max_world_size_nccl else ", nccl unavailable (no GPU)"),
        ]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def report(verbose: bool = True) -> EnvReport:
    """Inspect the machine; print a short summary when ``verbose``; return an EnvReport."""
    interp = use_triton_interpreter_if_no_gpu()
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        props = torch.cuda.get_device_properties(0)
        dev, name, units, kind = "cuda", props.name, props.multi_processor_count, "SMs"
    else:
        dev, name, units, kind = "cpu", _cpu_name(), os.cpu_count() or 1, "cores"
    rep = EnvReport(
        device=dev,
        device_name=name,
        compute_units=units,
        compute_unit_kind=kind,
        gpu_count=gpus,
        torch_version=torch.__version__,
        triton_version=triton_version,
        triton_interpreter=interp,
        python_version=platform.python_version(),
        max_world_size_gloo=8,
        max_world_size_nccl=gpus,
    )
    if verbose:
        print(rep)
    return rep


if __name__ == "__main__":   # `python -m labkit.env`: what this machine offers (used by make test-gpu's report)
    import datetime

    print(f"# GPU tier report\n\n- date: {datetime.date.today().isoformat()}\n")
    print("```")
    report()
    print("```")
