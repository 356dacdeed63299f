"""labkit.checkpoint.hierarchical on real gloo ranks: memory, peer and disk tiers; each kind of
failure resumes from the nearest surviving tier and ends bit for bit as the uninterrupted run;
the replicated parameter server survives its primary's death."""
import tempfile

import pytest
import torch

from labkit.checkpoint import hierarchical as H
from labkit.checkpoint import lab
from labkit.checkpoint import replicated_ps as R
from labkit.checkpoint.resume import RunConfig, train
from labkit.data_parallel.param_server import PSConfig
from labkit.dist import RankError, launch

RUN = RunConfig()


def test_peer_ranks_leave_the_node_and_balance_the_copies():
    for world, per_node in ((2, 1), (4, 2), (6, 3), (8, 2), (12, 4)):
        peers = H.peer_ranks(world, per_node)
        assert H.check_peers(peers, world, per_node) == peers
        assert all(H.lost_on_node_failure(peers, per_node, n) == [] for n in range(world // per_node))
    neighbour = [(r + 1) % 8 for r in range(8)]
    assert H.lost_on_node_failure(neighbour, 2, 1) == [2]
    with pytest.raises(ValueError, match="own node"):
        H.check_peers(neighbour, 8, 2)
    with pytest.raises(ValueError, match="keeps its own copy"):
        H.check_peers([2, 1, 0], 3, 1)
    with pytest.raises(ValueError, match="not a permutation"):
        H.check_peers([2, 2, 0, 0], 4, 2)
    with pytest.raises(ValueError, match=">= 2 nodes"):
        H.peer_ranks(4, 4)


def test_recovery_tiers_by_failure_kind():
    peers = H.peer_ranks(4, 2)
    assert H.recovery_tiers(peers, 2, "process") == ["memory"] * 4
    assert H.recovery_tiers(peers, 2, "node", 0) == ["peer", "peer", "memory", "memory"]
    assert H.recovery_tiers(peers, 2, "job") == ["disk"] * 4
    assert H.recovery_tiers([1, 0, 3, 2], 2, "node", 0) == ["disk", "disk", "memory", "memory"]


@pytest.mark.parametrize("failure", ["process", "node", "job"])
def test_each_failure_resumes_from_the_nearest_tier_bit_for_bit(failure, tmp_path):
    world, steps, fail = 4, 6, (1, 5)
    full = launch(train, world, RUN, steps, quiet=True)
    layout = H.make_layout(world, 2, tmp_path)
    try:
        with pytest.raises(RankError, match="RankDied"):
            launch(H.train_tiered, world, RUN, steps, layout, 2, False, fail, quiet=True, timeout=120)
        gone = H.lose(layout, failure, fail[0])
        res = launch(H.train_tiered, world, RUN, steps, layout, 2, True, quiet=True, timeout=120)
    finally:
        H.remove(layout)
    tiers = [r["recovery"]["tier"] for r in res]
    assert tiers == H.recovery_tiers(layout.peers, 2, failure, 0)
    assert gone == {"process": [], "node": ["node0"], "job": ["node0", "node1"]}[failure]
    # memory and peer hold step 4 (rank 1 died after step 5, before its snapshot); disk every 2: step 4
    assert {r["recovery"]["step"] for r in res} == {4}
    assert all(lab.compare_runs(full[k], r)["same"] for k, r in enumerate(res))
    assert all(len(r["persist_s"]) == 1 for r in res)          # the disk write of step 6 in the second attempt


def test_the_abandoned_future_is_dropped_from_every_tier(tmp_path):
    layout = H.make_layout(4, 2, tmp_path)
    try:
        with pytest.raises(RankError):
            launch(H.train_tiered, 4, RUN, 6, layout, 4, False, (0, 3), quiet=True, timeout=120)
        # ranks 1-3 snapshotted step 3, rank 0 did not: the recovery line is step 2
        assert H.steps_in(layout.own(1))[0] == 3 and H.steps_in(layout.own(0))[0] == 2
        launch(H.train_tiered, 4, RUN, 2, layout, 4, True, quiet=True, timeout=120)
        assert all(max(H.steps_in(layout.own(r))) == 2 for r in range(4))
        assert all(max(H.steps_in(layout.copy(r))) == 2 for r in range(4))
    finally:
        H.remove(layout)


def test_a_layout_for_another_world_is_refused(tmp_path):
    layout = H.make_layout(4, 2, tmp_path)
    try:
        with pytest.raises(RankError, match="layout is for 4 ranks"):
            launch(H.train_tiered, 2, RUN, 2, layout, quiet=True, timeout=60)
    finally:
        H.remove(layout)
    with pytest.raises(ValueError, match="failure must be one of"):
        H.lose(layout, "meteor", 0)


@pytest.mark.parametrize("kill", [None, (3, "after_forward"), (3, "before_forward")])
def test_the_replicated_server_ends_as_one_process_would(kill):
    cfg = PSConfig(mode="bsp", steps=6, lr=0.1, compute_s=0.001)
    res = R.run_replicated(cfg, 2, kill)
    want = R.bsp_in_one_process(cfg, 2)
    assert all(torch.equal(r["final"], want) for r in res if r is not None)
    if kill is None:
        assert res[0]["role"] == "primary" and res[1]["served_from"] is None
    else:
        assert res[0] is None
        assert res[1]["served_from"] == (3 if kill[1] == "after_forward" else 2)
        assert {r["switched_at"] for r in res[2:]} == {3}


def test_without_a_backup_the_primarys_death_ends_the_run():
    cfg = PSConfig(mode="bsp", steps=4, lr=0.1, compute_s=0.001)
    with pytest.raises(RankError) as info:
        R.run_replicated(cfg, 2, (2, "after_forward"), backup=False)
    assert info.value.rank >= 2
    with pytest.raises(ValueError, match="moment must be"):
        R.run_replicated(cfg, 2, (2, "whenever"))
    with pytest.raises(RankError, match="runs BSP"):
        R.run_replicated(PSConfig(mode="asp", steps=2), 2)
