"""The memory wall: the training state of published models against one device's memory, by year.

A model trained with mixed-precision Adam keeps 16 bytes per parameter before any activation
(`labkit.memory.estimate.model_state_bytes_per_param`). Put next to each published model the
largest device memory on sale that year and count how many such devices its model states fill:

    devices(model) = ⌈16 · Ψ / max{memory of a device released in or before the model's year}⌉

Both series grow roughly exponentially, so `growth_per_year` fits log(value) = a + b·year by
least squares and returns 10^b, the factor per year. Parameters of the GPT-shaped models are not
copied from the papers: they are `labkit.model.parameter_count` of the published shapes (the
tests build each one on the meta device and count its tensors); the rest (BERT, PaLM, Llama) are
the counts their papers state.

Device memory is the vendor's figure in GB (10⁹ bytes), as the data sheets print it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.checks import check_int, check_real
from labkit.memory.estimate import model_state_bytes_per_param
from labkit.model import GPTConfig, parameter_count

GB = 1e9


@dataclass(frozen=True)
class PublishedModel:
    """A model as published: ``name``, ``year``, ``stated`` parameter count (the paper's, elements),
    ``config`` (its GPT shape, when it is one; then `params` is counted from it), ``source``."""

    name: str
    year: int
    stated: float
    source: str
    config: GPTConfig | None = None

    @property
    def params(self) -> float:
        """Parameters (elements): `parameter_count` of ``config`` when there is one, else ``stated``."""
        return float(parameter_count(self.config)) if self.config is not None else self.stated


@dataclass(frozen=True)
class DeviceMemory:
    """An accelerator's ``name``, ``year`` of release and memory ``gb`` (10⁹ bytes, data sheet)."""

    name: str
    year: int
    gb: float


MODELS = (
    PublishedModel("BERT-Large", 2018, 340e6, "Devlin et al. 2018"),
    PublishedModel("GPT-2 (1.5B)", 2019, 1.542e9, "Radford et al. 2019",
                   GPTConfig(layers=48, hidden=1600, heads=25, seq_len=1024, vocab=50257)),
    PublishedModel("Megatron-LM 8.3B", 2019, 8.3e9, "Shoeybi et al. 2019",
                   GPTConfig(layers=72, hidden=3072, heads=32, seq_len=1024, vocab=51200)),
    PublishedModel("Turing-NLG", 2020, 17e9, "Microsoft 2020",
                   GPTConfig(layers=78, hidden=4256, heads=28, seq_len=1024, vocab=50257)),
    PublishedModel("GPT-3", 2020, 175e9, "Brown et al. 2020",
                   GPTConfig(layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257)),
    PublishedModel("Megatron-Turing NLG", 2021, 530e9, "Smith et al. 2022",
                   GPTConfig(layers=105, hidden=20480, heads=128, seq_len=2048, vocab=51200)),
    PublishedModel("PaLM", 2022, 540e9, "Chowdhery et al. 2022"),
    PublishedModel("Llama 2 70B", 2023, 70e9, "Touvron et al. 2023"),
    PublishedModel("Llama 3.1 405B", 2024, 405e9, "Llama team 2024"),
)

DEVICES = (
    DeviceMemory("P100", 2016, 16), DeviceMemory("V100 16GB", 2017, 16), DeviceMemory("V100 32GB", 2018, 32),
    DeviceMemory("A100 40GB", 2020, 40), DeviceMemory("A100 80GB", 2020, 80), DeviceMemory("H100", 2022, 80),
    DeviceMemory("H200", 2024, 141), DeviceMemory("B200", 2024, 192),
)


def model_state_bytes(num_params: float) -> float:
    """Bytes of mixed-precision Adam's model states for Ψ parameters: Ψ × 16
    (`model_state_bytes_per_param`)."""
    psi = check_real("model_state_bytes", "num_params", num_params, positive=True)
    return psi * model_state_bytes_per_param(True)["total"]


def largest_device(year: int, devices=DEVICES) -> DeviceMemory:
    """The device with the most memory released in or before ``year``."""
    year = check_int("largest_device", "year", year)
    have = [d for d in _devices("largest_device", devices) if d.year <= year]
    if not have:
        raise ValueError(f"largest_device: no device in the list was released by {year}")
    return max(have, key=lambda d: d.gb)


def growth_per_year(points) -> float:
    """The factor per year of a least-squares fit log10(value) = a + b·year to ``points``, a sequence
    of (year, value > 0) with at least two different years: 10^b."""
    fn = "growth_per_year"
    if isinstance(points, (str, bytes)) or not hasattr(points, "__iter__"):
        raise TypeError(f"{fn}: points must be a sequence of (year, value) pairs, got {type(points).__name__}")
    xs, ys = [], []
    for p in points:
        if not isinstance(p, (tuple, list)) or len(p) != 2:
            raise TypeError(f"{fn}: each point must be a (year, value) pair, got {p!r}")
        xs.append(check_real(fn, "year", p[0]))
        ys.append(math.log10(check_real(fn, "value", p[1], positive=True)))
    if len(set(xs)) < 2:
        raise ValueError(f"{fn}: needs points from at least two different years, got {sorted(set(xs))}")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return 10 ** slope


@dataclass(frozen=True)
class WallRow:
    """One model against the largest ``device`` of its year: ``state_bytes`` (16·Ψ) and how many of
    those devices they fill, ``devices`` = ⌈state_bytes / device memory⌉."""

    model: PublishedModel
    device: DeviceMemory
    state_bytes: float
    devices: int


def wall_rows(models=MODELS, devices=DEVICES) -> list[WallRow]:
    """Each model (in year order) with the largest device of its year (module docstring)."""
    devices = _devices("wall_rows", devices)
    if isinstance(models, (str, bytes)) or not hasattr(models, "__iter__"):
        raise TypeError(f"wall_rows: models must be a sequence of PublishedModel, got {type(models).__name__}")
    models = tuple(models)
    for m in models:
        if not isinstance(m, PublishedModel):
            raise TypeError(f"wall_rows: models must hold PublishedModel, got {type(m).__name__}")
    out = []
    for m in sorted(models, key=lambda m: m.year):
        d = largest_device(m.year, devices)
        state = model_state_bytes(m.params)
        out.append(WallRow(m, d, state, math.ceil(state / (d.gb * GB))))
    return out


def _devices(fn: str, devices) -> tuple:
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise TypeError(f"{fn}: devices must be a sequence of DeviceMemory, got {type(devices).__name__}")
    devices = tuple(devices)
    for d in devices:
        if not isinstance(d, DeviceMemory):
            raise TypeError(f"{fn}: devices must hold DeviceMemory, got {type(d).__name__}")
    if not devices:
        raise ValueError(f"{fn}: devices must not be empty")
    return devices


__all__ = ["PublishedModel", "DeviceMemory", "MODELS", "DEVICES", "model_state_bytes", "largest_device",
           "growth_per_year", "WallRow", "wall_rows", "GB"]
