"""What machine are we on? Device, versions, how many ranks a launch can use.

`report()` is the one call a notebook makes first. It also makes sure
Triton runs in interpreter mode (``TRITON_INTERPRET=1``) when there is no GPU; that
must happen before any ``@triton.jit`` kernel is defined, which is why
``import labkit`` already does it.

On a machine with an NVIDIA GPU that torch cannot use, the report says why and how to fix
it (`gpu_problem`): torch's CPU build, or a driver older than torch's CUDA build needs (the
CUDA 13 wheels need driver 580 or newer). ``python -m labkit.env --require-gpu`` exits with
that line instead of a bare "no GPU" (``make test-gpu`` and ``make gpu-smoke`` use it).
"""
from __future__ import annotations

import dataclasses
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

# The checkout (or installed tree) labkit runs from: exercises/, solutions/, tests/ sit below it.
REPO_ROOT = Path(__file__).resolve().parents[1]

# The oldest driver each CUDA major version runs on (NVIDIA's minor-version compatibility).
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
# Where torch's builds for older drivers live (cu126 runs on driver 525 and newer).
OLDER_CUDA_INDEX = "https://download.pytorch.org/whl/cu126"


def _cuda_available() -> bool:
    # No NVIDIA device node (Linux: /dev/nvidia0..., WSL2: /dev/dxg) means no CUDA: answer without
    # importing torch (about a second), which keeps `import labkit` cheap on CPU machines.
    import glob

    if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg"):
        return False
    import torch

    return bool(torch.cuda.is_available())


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version ("580.95.05"), or None when no driver is installed. Read from
    /proc/driver/nvidia/version, else from ``nvidia-smi``; torch is not needed."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            found = parse_driver_version(f.read())
        if found:
            return found
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.split()
            return out[0] if out else None
        except (OSError, subprocess.SubprocessError):
            return None
    return None


def parse_driver_version(text: str) -> str | None:
    """The version in /proc/driver/nvidia/version's first line (proprietary or open kernel module)."""
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9]+(?:\.[0-9]+)+)", text)
    return m.group(1) if m else None


def gpu_problem(gpu_present: bool, usable: bool, torch_cuda: str | None, driver: str | None,
                torch_version: str = "2.13.0") -> str | None:
    """Why a GPU that is present cannot be used, and how to fix it, in one line (None when fine or
    when there is no GPU). ``torch_cuda``: torch.version.cuda (None for a CPU build)."""
    if not gpu_present or usable:
        return None
    base = torch_version.split("+")[0]
    if torch_cuda is None:
        return (f"an NVIDIA GPU is present but torch {torch_version} is a CPU build: install the CUDA build "
                f"(pip install torch=={base}; for drivers older than 580: --index-url {OLDER_CUDA_INDEX})")
    major = int(torch_cuda.split(".")[0])
    need = MIN_DRIVER.get(major)
    have = int(driver.split(".")[0]) if driver and driver.split(".")[0].isdigit() else None
    if need and have is not None and have < need:
        return (f"the NVIDIA driver {driver} is too old for torch's CUDA {torch_cuda} build (needs {need} or "
                f"newer): update the driver, or pip install torch=={base} --index-url {OLDER_CUDA_INDEX}")
    if driver is None:
        return f"a GPU device is present but no NVIDIA driver was found: install the driver (>= {need or 580})"
    return (f"torch {torch_version} (CUDA {torch_cuda}) cannot use the GPU (driver {driver}): "
            "check nvidia-smi and CUDA_VISIBLE_DEVICES")


def _gpu_present() -> bool:
    import glob

    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/dxg")


def triton_backend() -> str:
    """Where Triton kernels run: "interpreter" (TRITON_INTERPRET=1), the compiled target (e.g.
    "cuda sm_90"), or "unavailable (...)"."""
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        return "interpreter"
    try:
        from triton.runtime import driver

        target = driver.active.get_current_target()
        return f"{target.backend} sm_{target.arch}" if target.backend == "cuda" else f"{target.backend} {target.arch}"
    except Exception as e:  # noqa: BLE001 - no GPU, no driver, no Triton: say so
        return f"unavailable ({type(e).__name__})"


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
    driver: str | None = None         # NVIDIA driver version, None without one
    torch_cuda: str | None = None     # torch.version.cuda: None for a CPU build
    triton_backend: str = ""          # "interpreter", "cuda sm_90", ...
    gpu_problem: str | None = None    # a present GPU that torch cannot use: why, and the fix

    def lines(self) -> list[str]:
        cuda = f"torch CUDA {self.torch_cuda}" if self.torch_cuda else "torch CPU build"
        extra = [f"driver / CUDA    : {self.driver or 'no NVIDIA driver'}; {cuda}"]
        if self.gpu_problem:
            extra.append(f"GPU unusable     : {self.gpu_problem}")
        return [
            f"device           : {self.device} ({self.device_name})",
            f"compute units    : {self.compute_units} {self.compute_unit_kind}",
            f"GPUs             : {self.gpu_count}",
            f"python           : {self.python_version}",
            f"torch            : {self.torch_version}",
            f"triton           : {self.triton_version}"
            + (" (interpreter mode: TRITON_INTERPRET=1)" if self.triton_interpreter
               else f" (compiled: {self.triton_backend})"),
            f"world sizes      : gloo 1..{self.max_world_size_gloo}"
            + (f", nccl 1..{self.max_world_size_nccl}" if self.max_world_size_nccl else ", nccl unavailable (no GPU)"),
        ] + extra

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
    usable = torch.cuda.is_available()
    gpus = torch.cuda.device_count() if usable else 0
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
        driver=nvidia_driver(),
        torch_cuda=torch.version.cuda,
        triton_backend="interpreter" if interp else triton_backend(),
    )
    rep = dataclasses.replace(rep, gpu_problem=gpu_problem(_gpu_present() or rep.driver is not None, usable,
                                                           rep.torch_cuda, rep.driver, rep.torch_version))
    if verbose:
        print(rep)
    return rep


def require_gpu() -> str | None:
    """None when torch can use a CUDA GPU; else the one line that says why not (and the fix)."""
    rep = report(verbose=False)
    if rep.gpu_count:
        return None
    return rep.gpu_problem or "no NVIDIA GPU found (make test runs everything a CPU can)"


if __name__ == "__main__":   # `python -m labkit.env`: what this machine offers (used by make test-gpu's report)
    import datetime
    import sys

    if "--require-gpu" in sys.argv[1:]:
        why = require_gpu()
        sys.exit(f"needs a CUDA GPU: {why}" if why else 0)
    print(f"# GPU tier report\n\n- date: {datetime.date.today().isoformat()}\n")
    print("```")
    report()
    print("```")
