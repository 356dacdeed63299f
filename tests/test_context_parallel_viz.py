"""Lab 14: the ring-attention drawing (a pure frame function over `ring_schedule`) and its player."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from labkit.context_parallel.schedule import ring_schedule, work  # noqa: E402
from labkit.context_parallel import draw as V  # noqa: E402
from labkit.context_parallel import lab as L  # noqa: E402


@pytest.mark.parametrize("layout", ("contiguous", "zigzag"))
@pytest.mark.parametrize("step", range(4))
def test_ring_figure_draws_the_tiles_of_its_step(layout, step):
    sched = ring_schedule(4, 16, True, layout)
    fig = V.ring_figure(sched, step, f"{layout}: ")
    ax = fig.axes[0]
    rects = [p for p in ax.patches if isinstance(p, Rectangle) and not p.get_hatch()]
    computed_now = sum(kind != "skip" for tiles in sched[step].tiles for _, _, kind in tiles)
    held = sum(len({ks for _, ks, _ in tiles}) for tiles in sched[step].tiles)
    assert len([p for p in rects if p.get_alpha() == 1.0]) == computed_now       # tiles being computed
    assert len([p for p in rects if p.get_alpha() is None]) == held              # the k/v blocks held
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert len(hatched) == sum(kind == "skip" for tiles in sched[step].tiles for _, _, kind in tiles)
    done = [sum(qs.length * ks.length for st in sched[:step + 1] for qs, ks, kind in st.tiles[r] if kind != "skip")
            for r in range(4)]
    assert ", ".join(f"r{r}: {d}" for r, d in enumerate(done)) in ax.get_title(loc="left")
    assert f"step {step + 1} of 4" in ax.get_title(loc="left")
    plt.close(fig)


def test_last_frame_shows_every_ranks_total_work():
    for layout in ("contiguous", "zigzag"):
        sched = ring_schedule(4, 16, True, layout)
        title = V.ring_figure(sched, 99).axes[0].get_title(loc="left")        # clamped to the last step
        assert ", ".join(f"r{r}: {d}" for r, d in enumerate(work(sched))) in title
        plt.close("all")


def test_player_has_both_rings_and_moves():
    frames = L.ring_frames(4, 16)
    assert len(frames) == 8 and frames[0][0].startswith("contiguous") and frames[-1][0].startswith("zigzag")
    w = L.ring_player(4, 16)
    html = w.children[1]
    first = html.value
    w.children[0].children[1].value = 6
    assert html.value != first
