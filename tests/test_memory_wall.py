"""labkit.memory.wall (Lab 09, section 1.1): the memory wall. Published GPT shapes built on the meta
device have exactly the closed-form parameter count; model-state bytes are the 16 bytes per
parameter measured after a mixed-precision Adam step; devices needed and growth rates are checked
against brute force and exact exponentials; bad input gets a one-line error."""
import pytest
import torch

from labkit.memory import lab as L
from labkit.memory import wall as W
from labkit.memory.lab import _held_after_step
from labkit.model import MEMORY_GPT as SMALL
from labkit.model import GPT, parameter_count
from labkit.zero.formulas import model_state_bytes as zero_state_bytes


@pytest.mark.parametrize("model", [m for m in W.MODELS if m.config is not None], ids=lambda m: m.name)
def test_published_shapes_built_on_meta_have_the_closed_form_count_and_the_papers(model):
    with torch.device("meta"):
        built = sum(p.numel() for p in GPT(model.config).parameters())
    assert built == model.params == parameter_count(model.config)
    assert abs(built - model.stated) / model.stated < 0.015


def test_model_state_bytes_are_the_measured_16_bytes_per_parameter():
    held = _held_after_step(SMALL, mixed=True)         # bf16 weights and grads, fp32 master, m, v
    psi, tensors = parameter_count(SMALL), len(list(GPT(SMALL).parameters()))
    measured = held["parameters"] + held["gradients"] + held["optimizer"] - 4 * tensors   # less step counters
    assert measured == W.model_state_bytes(psi) == 16 * psi
    assert W.model_state_bytes(1e9) == zero_state_bytes(1e9, 1, 0)   # ZeRO's stage-0 accounting agrees


def test_each_row_is_the_largest_device_of_its_year_and_the_fewest_that_hold_the_states():
    rows = W.wall_rows()
    assert [r.model.year for r in rows] == sorted(m.year for m in W.MODELS)
    for r in rows:
        have = [d.gb for d in W.DEVICES if d.year <= r.model.year]
        assert r.device.gb == max(have) and r.device.year <= r.model.year
        cap = r.device.gb * W.GB
        assert r.state_bytes == 16 * r.model.params
        assert (r.devices - 1) * cap < r.state_bytes <= r.devices * cap
    by = {r.model.name: r for r in rows}
    assert by["BERT-Large"].devices == 1 and by["Megatron-Turing NLG"].devices == 106
    assert by["Llama 3.1 405B"].device.name == "B200" and by["Llama 3.1 405B"].devices == 34


def test_growth_per_year_recovers_exact_exponentials_and_the_walls_rates():
    assert W.growth_per_year([(y, 5 * 2.0 ** (y - 2000)) for y in range(2000, 2010)]) == pytest.approx(2.0, 1e-12)
    assert W.growth_per_year([(2018, 1.0), (2021, 1000.0)]) == pytest.approx(10.0, 1e-12)
    assert W.growth_per_year([(2018, 7.0), (2019, 7.0), (2019, 7.0)]) == pytest.approx(1.0)
    rows = W.wall_rows()
    models = W.growth_per_year([(r.model.year, r.model.params) for r in rows if r.model.year <= 2021])
    memory = W.growth_per_year([(d.year, d.gb) for d in W.DEVICES])
    assert 8 < models < 16 and 1.2 < memory < 1.5 and models / memory > 5


def test_bad_input_gets_one_line_errors():
    for call, kind in [(lambda: W.growth_per_year([(2018, 1.0)]), ValueError),
                       (lambda: W.growth_per_year([(2018, 1.0), (2018, 2.0)]), ValueError),
                       (lambda: W.growth_per_year([(2018, 0.0), (2019, 1.0)]), ValueError),
                       (lambda: W.growth_per_year([(2018, 1.0, 3)]), TypeError),
                       (lambda: W.growth_per_year("2018"), TypeError),
                       (lambda: W.largest_device(2010), ValueError),
                       (lambda: W.largest_device(2020.5), TypeError),
                       (lambda: W.largest_device(2020, devices=[]), ValueError),
                       (lambda: W.wall_rows(models=["GPT-3"]), TypeError),
                       (lambda: W.model_state_bytes(-1), ValueError)]:
        with pytest.raises(kind) as e:
            call()
        assert "\n" not in str(e.value) and str(e.value).split(":")[0] in (
            "growth_per_year", "largest_device", "wall_rows", "model_state_bytes")


def test_the_table_and_the_player_show_every_model():
    table = L.wall_table()
    assert table.column("devices") == [r.devices for r in W.wall_rows()]
    assert max(len(line) for line in str(table).splitlines()) <= 100
    from labkit.memory.wall import largest_device
    from labkit.viz.memory import wall_figure
    rows = W.wall_rows()
    env = [(y, largest_device(y).gb) for y in range(2016, 2025)]
    fig = wall_figure(rows, env, 2020)
    ax = fig.axes[0]
    assert len(ax.collections[0].get_offsets()) == sum(r.model.year <= 2020 for r in rows)
    assert ax.get_title(loc="left").startswith("2020: GPT-3's states fill 35 x A100 80GB")
    import matplotlib.pyplot as plt
    plt.close(fig)
    w = L.wall_player()
    (play, slider), html = w.children[0].children, w.children[1]
    assert slider.max == 2024 - 2018 + 1 and "<img" in html.value     # one frame per year, 2018..2024
