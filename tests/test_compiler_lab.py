"""The Lab 13 notebook's one-liners (labkit.compiler.lab)."""
import pytest
import torch

from labkit.compiler import autotune, lab
from labkit.compiler.autodiff import vjp
from labkit.gpu_model.coalescing import strided_addresses, transactions
from solutions import lab13_compilers as S


def _fits(table):
    assert all(len(line) <= 100 for line in str(table).splitlines()), str(table)


def test_the_mlp_graph_matches_eager_pytorch():
    r = lab.mlp_both_ways()
    assert r["loss_equal"] and r["grad_diff"] < 1e-15          # one rounding step (fused tanh_backward)
    assert "matmul(%x, %W1)" in r["listing"] and r["backward"].count("\n") > r["listing"].count("\n")


def test_pass_table_outputs_and_counts():
    table = lab.pass_table(compiled_fusion=False)
    _fits(table)
    rows = {row[0]: row for row in table.rows}
    for exact in ("dead code elimination", "constant folding", "common subexpressions", "fusion, eager body",
                  "QKV concatenation"):
        assert float(rows[exact][3]) == 0.0, exact               # same kernels on the same values
    assert 0 < float(rows["conv + batch norm"][3]) < 1e-5        # float32 ulps: the arithmetic is reordered
    # an eagerly fused body runs every op of the chain: fewer nodes, the same launches
    assert rows["fusion, eager body"][1:3] == ["6 -> 1", "6 -> 6"] and rows["QKV concatenation"][2] == "5 -> 3"
    assert "fusion, compiled body" not in rows
    assert str(lab.pass_table(compiled_fusion=False)) == str(table)   # deterministic (nbval compares it)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(not lab.can_compile(), reason="torch.compile needs a C++ compiler on a CPU; none found")
def test_pass_table_compiled_fusion_is_one_kernel():
    rows = {row[0]: row for row in lab.pass_table().rows}
    assert rows["fusion, compiled body"][2] == "6 -> 1" and float(rows["fusion, compiled body"][3]) < 1e-5


def _scaled(x, scale: float):
    return torch.relu(x * scale + 1.0).sum()


def test_guard_lines_show_sizes_values_and_relations():
    static = lab.guard_lines(_scaled, torch.randn(8), 2.0)
    assert "TENSOR_MATCH: L['x'] is a torch.float32 tensor, requires_grad=False, size=[8], stride=[1]" in static
    assert "EQUALS_MATCH: L['scale'] == 2.0" in static
    dynamic = lab.guard_lines(_scaled, torch.randn(8), 2.0, dynamic=True)
    assert any("size=[None]" in g for g in dynamic) and "LAMBDA_GUARD: 2 <= L['x'].size()[0]" in dynamic
    assert all(len(g) <= 100 and "___check_obj_id" not in g for g in static + dynamic)


CPP_MODULE = """
cpp_fused_add_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
#include <torch/csrc/inductor/cpp_prefix.h>
extern "C"  void  kernel(const float* in_ptr0, float* out_ptr0)
{
    for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(64L); x0+=static_cast<int64_t>(16L))
    {
        auto tmp0 = at::vec::Vectorized<float>::loadu(in_ptr0 + static_cast<int64_t>(x0), 16);
        tmp0.store(out_ptr0 + static_cast<int64_t>(x0));
    }
}
\'\'\')

class Runner:
    def call(self, args):
        arg0_1, = args
        cpp_fused_add_0(arg0_1, buf0)
        return (buf0, )
"""


def test_kernel_excerpt_and_its_loads_and_stores():
    text = lab.kernel_excerpt(CPP_MODULE)
    assert "# kernel cpp_fused_add_0" in text and "x0<64" in text and "cpp_prefix" not in text
    assert "cpp_fused_add_0(arg0_1, buf0)" in text and all(len(line) <= 100 for line in text.splitlines())
    assert lab.loads_and_stores(CPP_MODULE) == (1, 1)
    triton = "triton_poi_fused_0 = async_compile.triton('t', \'\'\'\n    x = tl.load(in_ptr0 + x0)\n" \
             "    y = tl.load(in_ptr1 + x0)\n    tl.store(out_ptr0 + x0, x + y)\n\'\'\')"
    assert lab.loads_and_stores(triton) == (2, 1)


def test_rewrite_search_table_and_wrong_rule():
    rows = lab.rewrite_table().rows
    assert rows[0][2] == 1.0 and rows[1][2] == 1.0 and rows[2][2] < 0.8
    assert "rejected" in lab.wrong_rule_verdict()


def test_recompile_counts():
    counts = [row[1] for row in lab.recompile_table().rows]
    assert counts == [8, 2, 1]


def test_autotune_table_reports_mean_se_and_a_paired_verdict():
    table = lab.autotune_table(budget=20, seeds=range(30))
    _fits(table)
    d = table.data
    assert d["ks"] == [5, 10, 20] and d["seeds"] == 30
    for method in ("exhaustive", "random", "model"):
        curve = d["mean"][method]
        assert curve == sorted(curve, reverse=True) and all(v >= 1 for v in curve), method
    assert max(d["se"]["exhaustive"]) < 1e-12                       # the same fixed order for every seed
    assert d["mean"]["model - random"][0] == 0.0                    # the same random start: no difference yet
    assert d["verdict"][0] == "no difference shown" and d["verdict"][2] == "model better"
    # with one seed nothing can be told apart
    assert lab.autotune_table(budget=20, seeds=[0]).data["verdict"] == ["too few seeds"] * 3
    assert autotune.synthetic_cost({"BM": 64, "BN": 64, "BK": 64}) > 0


@pytest.mark.parametrize("exercise", ["vjp", "dead_code_elimination", "constant_folding", "clip_without_breaks",
                                      "common_subexpression_elimination", "transactions"])
def test_pictures_agree_with_the_solutions(exercise, capsys):
    lab.picture(exercise)(getattr(S, exercise))
    out = capsys.readouterr().out
    assert " NO" not in out and all(len(line) <= 100 for line in out.splitlines())


def test_pictures_show_a_wrong_answer():
    table = lab.transactions_picture(lambda addresses, segment: 1)
    assert any(row[1] != row[2] for row in table.rows)
    table = lab.vjp_picture(lambda op, ins, out, g, attrs: [torch.zeros_like(x) for x in ins])
    assert all(row[-1] == "NO" for row in table.rows)


def test_finite_differences_pass_right_rules_and_name_each_wrong_one():
    """fd_check_vjp: labkit's rules pass (largest relative error 1.2e-9 against FD_TOL = 1e-6);
    a flipped sign, a lost transpose and a rule that raises each fail on their own row only."""
    ok = lab.vjp_picture(vjp)
    assert all(row[-1] == "yes" for row in ok.rows) and max(float(row[4]) for row in ok.rows) < 1e-8

    def wrong(op, ins, out, g, attrs):
        if op == "log":
            raise ZeroDivisionError("oops")
        got = vjp(op, ins, out, g, attrs)
        if op == "div":
            got[1] = -got[1]
        if op == "matmul":                        # aᵀ @ g written as (gᵀ @ a)... of the wrong shape
            got[1] = got[1].T.contiguous()
        return got
    bad = {(row[0], row[1]) for row in lab.vjp_picture(wrong).rows if row[-1] != "yes"}
    assert bad == {("div", 1), ("matmul", 1), ("log", "-")}


def test_worked_problem_numbers():
    assert transactions(strided_addresses(3)) == 3
    eps = 2.0 ** -52
    assert eps ** (1 / 3) == pytest.approx(6.06e-6, rel=1e-2)


def test_clip_picture_shows_breaks_and_wrong_values():
    def keeps_item(x, max_norm):
        n = x.norm().item()
        return x * (max_norm / n if n > max_norm else 1.0) - x.mean() * (max_norm / n if n > max_norm else 1.0)
    rows = lab.clip_picture(keeps_item).rows
    assert [r[1:3] for r in rows] == [(2, 1)] * 3 and all(r[-1] == "NO" for r in rows)
    assert "item" in rows[0][3]
    from labkit.compiler import inside_compile as IC
    rows = lab.clip_picture(IC.clip_without_breaks).rows
    assert all(r[1:3] == (1, 0) and r[-1] == "yes" for r in rows)
