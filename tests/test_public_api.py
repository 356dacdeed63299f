"""Each package exports its public API, and no exported name hides one of its own submodules."""
import importlib
import pkgutil
import types

import pytest

import labkit

PACKAGES = sorted(m.name for m in pkgutil.iter_modules(labkit.__path__, "labkit.") if m.ispkg)
# Lab 04's wrappers share their modules' names (labkit.kernels.add is the function add); renaming the
# kernel modules is left to the change that gives each topic its draw.py (it moves Lab 04's files too).
KNOWN_SHADOWS = {"labkit.kernels": {"add", "attention", "layernorm", "matmul", "record", "softmax"}}


def test_the_names_the_labs_use_import_from_their_packages():
    from labkit.checkpoint import daly_interval, load, save, young_interval
    from labkit.checkpoint.interval import daly_interval as daly, young_interval as young
    from labkit.checkpoint.io import load as io_load, save as io_save
    from labkit.memory import MemoryTracker, activation_bytes_per_layer
    from labkit.memory.estimate import activation_bytes_per_layer as per_layer
    from labkit.memory.tracker import MemoryTracker as Tracker
    from labkit.zero import model_state_bytes
    from labkit.zero.formulas import model_state_bytes as msb

    assert (save, load, young_interval, daly_interval) == (io_save, io_load, young, daly)
    assert (MemoryTracker, activation_bytes_per_layer, model_state_bytes) == (Tracker, per_layer, msb)
    assert young_interval(60.0, 3600.0) == pytest.approx((2 * 60.0 * 3600.0) ** 0.5)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_in_all_exists_and_no_submodule_is_shadowed(package):
    pkg = importlib.import_module(package)
    missing = [n for n in getattr(pkg, "__all__", ()) if not hasattr(pkg, n)]
    assert not missing, f"{package}.__all__ names what it does not define: {missing}"
    shadowed = []
    for sub in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{package}.{sub.name}")
        if not isinstance(getattr(pkg, sub.name), types.ModuleType):
            shadowed.append(sub.name)
    assert set(shadowed) == KNOWN_SHADOWS.get(package, set()), f"{package}: names that hide submodules: {shadowed}"
