"""Lab 12: the drawings (pure frame functions) and the widgets built on them."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from labkit.checkpoint import domino as D  # noqa: E402
from labkit.checkpoint import interval as I  # noqa: E402
from labkit.viz import checkpoint as V  # noqa: E402

M = D.Message
ZIGZAG = (M(1, 0.5, 0, 0.8), M(0, 2.0, 1, 2.5), M(1, 4.0, 0, 4.5),
          M(0, 6.0, 1, 6.5), M(1, 8.0, 0, 8.5), M(0, 10.0, 1, 10.5))
INDEPENDENT = ((1.0, 5.0, 9.0), (3.0, 7.0, 11.0))


@pytest.mark.parametrize("interval_s,mtbf_s,seed", [(3600, 6 * 3600, 0), (600, 2 * 3600, 3), (7200, 1800, 1),
                                                    (3600, 1e9, 0)])
def test_job_timeline_frame_draws_the_run_it_describes(interval_s, mtbf_s, seed):
    fig = V.job_timeline_frame(interval_s, mtbf_s, 300.0, 600.0, 24 * 3600.0, seed)
    tl = I.simulate_timeline(24 * 3600.0, interval_s, 300.0, 600.0, mtbf_s, seed=seed)
    title = fig._suptitle.get_text()
    assert f"this run {tl.wall_s / 3600:.1f} h" in title and f"{tl.failures} failures" in title
    assert f"Daly τ = {I.daly_interval(300.0, mtbf_s) / 60:.0f} min" in title
    bar, prog = fig.axes
    drawn = {c.get_label(): len(c.get_paths()) for c in bar.collections}
    assert drawn == {k: sum(e.kind == k for e in tl.events) for k in ("work", "checkpoint", "lost", "restart")}
    assert len(bar.lines[0].get_xdata()) == tl.failures
    # the progress curve ends at the full job, at the run's wall time
    x, y = prog.lines[0].get_data()
    assert x[-1] == pytest.approx(tl.wall_s / 3600) and y[-1] == pytest.approx(24.0)
    plt.close(fig)


def test_hopeless_settings_give_a_note_not_an_endless_run():
    # τ = 6 h against a 30-minute MTBF: e^12 attempts per segment
    fig = V.job_timeline_frame(6 * 3600, 1800, 300.0, 600.0, 24 * 3600.0, 0)
    text = fig.axes[0].texts[0].get_text()
    assert "failures expected" in text and "hardly progresses" in text
    plt.close(fig)


def test_recovery_line_frames():
    fig = V.recovery_line_frame(ZIGZAG, INDEPENDENT, 0, 12.0, title="independent")
    title = fig.axes[0].get_title(loc="left")
    assert "after 7 rollback(s), lost 24 s; consistent" in title
    plt.close(fig)
    fig = V.recovery_line_frame(ZIGZAG, INDEPENDENT, 0, 12.0, steps=3)
    assert "after 3 rollback(s), lost 12 s; 1 orphan" in fig.axes[0].get_title(loc="left")
    plt.close(fig)


def test_widgets_build():
    w = V.job_timeline_widget()
    assert w is not None and len(w.children) == 3                    # two sliders and the picture
    assert "<img" in w.children[-1].value
    p = V.recovery_player(ZIGZAG, INDEPENDENT, 0, 12.0)
    assert p.children[0].children[1].max == 7                         # one frame per rollback


@pytest.mark.parametrize("failure,node", [(None, 0), ("process", 0), ("node", 1), ("job", 0)])
def test_tiers_figure_colours_each_rank_by_the_tier_it_recovers_from(failure, node):
    from matplotlib.colors import to_hex
    from matplotlib.patches import Circle, FancyArrowPatch, Rectangle

    from labkit.checkpoint.hierarchical import peer_ranks, recovery_tiers

    peers = peer_ranks(6, 2)
    fig = V.tiers_figure(peers, 2, failure, node)
    ax = fig.axes[0]
    circles = [p for p in ax.patches if isinstance(p, Circle)]
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(circles) == 6 and len(boxes) == 3 and len(arrows) == 6
    want = recovery_tiers(peers, 2, failure, node) if failure else None
    got = [to_hex(c.get_facecolor()) for c in circles]
    assert got == ([V.TIER_COLORS[t] for t in want] if want else ["#ffffff"] * 6)
    lost = {None: set(), "process": set(), "node": {node}, "job": {0, 1, 2}}[failure]
    assert {i for i, b in enumerate(boxes) if to_hex(b.get_facecolor()) == "#f4cccc"} == lost
    plt.close(fig)


def test_tiers_figure_marks_a_copy_kept_on_its_own_node():
    from matplotlib.colors import to_hex
    from matplotlib.patches import FancyArrowPatch

    fig = V.tiers_figure([1, 2, 3, 0], 2)                 # 0 -> 1 and 2 -> 3 stay on their node
    reds = [a for a in fig.axes[0].patches if isinstance(a, FancyArrowPatch)
            and to_hex(a.get_edgecolor()) == "#e45756"]
    assert len(reds) == 2
    plt.close(fig)
    assert V.tiers_widget([2, 3, 0, 1], 2) is not None
