"""labkit.tensor_parallel.conv (Lab 07, section 8): a convolution split by rows with a halo exchange
equals the unsplit layer, forward and backward, on 2-4 gloo ranks, sending exactly the halo's bytes;
split by channels it is a Megatron pair with one all-reduce each way; the tables and the animation."""
import pytest

from labkit.dist import launch
from labkit.tensor_parallel import conv
from labkit.tensor_parallel import lab as L
from labkit.viz.conv import halo_frames, halo_html


@pytest.mark.parametrize("world,shape,kernel", [(2, (2, 3, 12, 8), 3), (3, (1, 2, 9, 5), 5), (4, (2, 2, 8, 6), 1)])
def test_spatial_split_equals_the_unsplit_layer_and_sends_the_halo(world, shape, kernel):
    results = launch(conv.spatial_run, world, shape, 3, kernel)
    want = conv.halo_bytes(shape[0], shape[1], shape[3], kernel, world, 8)
    for r, res in enumerate(results):
        assert max(res["y_err"], res["dx_err"], res["dw_err"], res["db_err"]) < 1e-12, (r, res)
        assert res["sent"] == {"forward": want[r], "backward": want[r]}
        assert res["rows"] == (r * shape[2] // world, (r + 1) * shape[2] // world)


def test_channel_split_is_one_all_reduce_each_way():
    results = launch(conv.channel_run, 2, (2, 3, 6, 5), 4, 3)
    for res in results:
        assert max(res["y_err"], res["dx_err"], res["dw1_err"], res["dw2_err"]) < 1e-12
        n = 2 * 3 * 6 * 5
        assert res["collectives"] == [("all_reduce", "forward", n, n * 8), ("all_reduce", "backward", n, n * 8)]


def test_halo_bytes_and_stripes():
    assert conv.halo_bytes(8, 64, 224, 3, 4, 2) == [229_376, 458_752, 458_752, 229_376]
    assert conv.halo_bytes(1, 1, 1, 3, 1) == [0]
    assert conv.halo_bytes(1, 1, 1, 1, 3) == [0, 0, 0]
    assert conv.stripe(12, 3, 2) == slice(8, 12)
    with pytest.raises(ValueError, match="must divide"):
        conv.stripe(10, 3, 0)


def test_halo_frames_and_drawing():
    frames = halo_frames(12, 6, 3, 3)
    assert len(frames) == 2 + 4
    assert frames[0]["buffers"][1][0] == "empty" and frames[1]["buffers"][1][0] == 3     # rank 1 gets row 3
    assert frames[1]["buffers"][0][0] is None and frames[1]["buffers"][2][-1] is None    # image edges: zeros
    assert frames[-1]["window"] == (3, 5) and frames[-1]["done"] == 4
    assert halo_html(frames[0]) != halo_html(frames[2])
    with pytest.raises(ValueError):
        halo_frames(10, 4, 3, 3)


def test_cost_table_fits_and_orders():
    t = L.conv_cost_table()
    assert all(len(line) <= 100 for line in str(t).splitlines())
    assert all(r[2] > 40 * r[1] for r in t.rows)
    assert L.halo_player().children[0].children[1].max == 6
