"""labkit.planner.guide (Lab 11, section 10): which parallelism when. `describe` names a plan's
groups and where they run (checked against listing every group); each rule of thumb holds for its
case when the planner is run on it; bad input gets a one-line error."""
import dataclasses

import pytest

from labkit.planner import Plan, why_not
from labkit.planner import lab as L
from labkit.parallel3d.grid import groups, nodes_spanned
from labkit.planner.guide import CASES, describe
from labkit.planner.memory import memory_per_gpu
from labkit.planner.search import divisors, search


@pytest.fixture(scope="module")
def guide():
    return L.guide_search()


def test_describe_names_each_dimension_and_where_its_groups_run():
    assert describe(Plan(1, 1, 1), 8) == "one GPU"
    assert describe(Plan(8, 1, 1), 8) == "DP 8 (DDP)"
    assert describe(Plan(4, 2, 1, zero_stage=3), 8) == "TP 2 in a node, DP 4 (ZeRO-3/FSDP)"
    assert describe(Plan(2, 4, 8, zero_stage=1), 8) == "TP 4 in a node, PP 8 over 8 nodes, DP 2 (ZeRO-1)"
    for g in (2, 4):                              # every grid of 16 ranks: spans = listing the groups
        for tp in divisors(16):
            for pp in divisors(16 // tp):
                plan = Plan(16 // (tp * pp), tp, pp)
                text = describe(plan, g)
                for kind, size, name in (("tp", tp, "TP"), ("pp", pp, "PP")):
                    span = max(nodes_spanned(grp, g) for grp in groups(plan.dp, tp, pp)[kind])
                    where = "in a node" if span == 1 else f"over {span} nodes"
                    assert (f"{name} {size} {where}" in text) == (size > 1)


def test_each_rule_of_thumb_holds_for_its_case(guide):
    c = {x.name: x for x in CASES}
    one = guide["1.3B on 8 GPUs"]
    assert (one.best.plan.dp, one.best.plan.tp, one.best.plan.pp) == (8, 1, 1)
    ddp = [p for p in one.plans if p.plan.zero_stage == 0][0]
    assert [k for k, t in one.best.parts.items() if t != ddp.parts[k]] == ["optimizer"]
    assert ddp.step_time / one.best.step_time < 1.05

    two, c2 = guide["13B on 8 GPUs"], c["13B on 8 GPUs"]
    assert why_not(c2.model, c2.cluster, Plan(8, 1, 1), c2.global_batch).startswith("needs")
    pure = [p for p in two.plans if p.plan.tp == p.plan.pp == 1]
    assert pure and {p.plan.zero_stage for p in pure} <= {1, 2, 3}
    assert two.best.plan.zero_stage >= 1 and two.best.plan.tp <= 8 and pure[0].step_time / two.best.step_time < 1.1

    three, c3 = guide["175B on 64 GPUs"], c["175B on 64 GPUs"]
    b = three.best.plan
    text = describe(b, 8)
    assert f"TP {b.tp} in a node" in text and f"PP {b.pp} over" in text
    assert "spans 2 nodes" in why_not(c3.model, c3.cluster, Plan(4, 16, 1, zero_stage=1), c3.global_batch)
    assert all(p.plan.tp <= 8 for p in three.plans)
    fsdp = [p for p in three.plans if p.plan.tp == p.plan.pp == 1]
    assert fsdp and all(p.plan.zero_stage == 3 for p in fsdp) and 1.1 < fsdp[0].step_time / three.best.step_time < 1.5

    b4 = guide["175B on 1024 GPUs"].best.plan
    assert (b4.tp, b4.pp) == (b.tp, b.pp) and b4.dp == 1024 // (b4.tp * b4.pp)

    five, c5 = guide["13B, 64k tokens, 64 GPUs"], c["13B, 64k tokens, 64 GPUs"]
    assert not five.plans and five.rejected
    short = search(dataclasses.replace(c5.model, seq_len=2048), c5.cluster, c5.global_batch, zero_stages=(0, 1, 2, 3))
    assert short.plans
    need = min(memory_per_gpu(c5.model, x.plan, c5.global_batch).total for x in five.rejected
               if x.reason.startswith("needs"))
    assert need > c5.cluster.usable_memory
    assert 5 * c5.model.heads * c5.model.seq_len ** 2 / 8 > c5.cluster.usable_memory


def test_the_table_names_every_case_in_lines_of_at_most_100_characters(guide):
    table = L.guide_table(guide)
    assert table.column("case") == [c.name for c in CASES]
    assert table.column("the planner's best plan")[-1].startswith("no plan fits")
    assert max(len(line) for line in str(table).splitlines()) <= 100


def test_bad_input_gets_one_line_errors():
    for call, kind in [(lambda: describe("dp=8", 8), TypeError), (lambda: describe(Plan(8, 1, 1), 0), ValueError),
                       (lambda: describe(Plan(8, 1, 1), 8.0), TypeError), (lambda: L.guide_search([1]), TypeError)]:
        with pytest.raises(kind) as e:
            call()
        assert "\n" not in str(e.value) and str(e.value).split(":")[0] in ("describe", "guide_search")
