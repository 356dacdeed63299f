"""labkit.memory.mixed_precision: 16 bytes per parameter counted by the tracker, the loss scaler
step for step against torch.amp.GradScaler, underflow made visible, and the modes' loss curves."""
import copy

import pytest
import torch

from labkit.memory import mixed_precision as mp
from labkit.memory.estimate import model_state_bytes_per_param
from labkit.memory.tracker import MemoryTracker
from labkit.model import GPT, GPTConfig, batch, parameter_count

TINY = GPTConfig(layers=1, hidden=32, heads=2, seq_len=16, vocab=64)
SMALL = GPTConfig(layers=2, hidden=64, heads=4, seq_len=32, vocab=128)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run faster and steadier on one thread of a busy 2-core machine."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_mixed_precision_step_holds_16_bytes_per_parameter(dtype):
    model = GPT(TINY).to(dtype)
    opt = mp.MixedPrecisionAdam(model.parameters(), lr=1e-3)
    n, tensors = parameter_count(TINY), len(list(model.parameters()))
    tr = MemoryTracker(model, opt)
    with tr:
        assert tr.live_by_category()["optimizer"] == 12 * n + 4 * tensors    # made with the optimizer
        tr.mark("forward")
        loss = model(*batch(TINY, 2))[1]
        tr.mark("backward")
        loss.backward()
        del loss
        tr.mark("step")
        opt.step()
        live = tr.live_by_category()
    # 2 + 2 bytes of 16-bit parameter and gradient; master, m, v in fp32: 12 bytes ("K = 12")
    assert live["parameters"] == 2 * n and live["gradients"] == 2 * n
    assert live["optimizer"] == 12 * n + 4 * tensors                # + Adam's 4-byte step per tensor
    total = live["parameters"] + live["gradients"] + live["optimizer"]
    assert total == model_state_bytes_per_param(True)["total"] * n + 4 * tensors
    assert total != 3 * n * 2                                      # "3N x sizeof" is not what a step holds
    # the step's fp32 copies of the gradients (4 B/param) are transient: at the peak, gone after
    assert tr.peak_phase == "step" and tr.peak_by_category["activations"] >= 4 * n
    assert {k: tr.peak_by_category[k] for k in live if k != "activations"} == \
        {k: live[k] for k in live if k != "activations"}


def test_on_fp32_parameters_it_is_torch_adam_bit_for_bit():
    a, b = GPT(TINY), GPT(TINY)
    opt_a = torch.optim.Adam(a.parameters(), lr=1e-2, weight_decay=0.01)
    opt_b = mp.MixedPrecisionAdam(b.parameters(), lr=1e-2, weight_decay=0.01)
    for step in range(3):
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            model(*batch(TINY, 2, seed=step))[1].backward()
            opt.step()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_bf16_parameters_are_the_rounded_fp32_adam_master():
    model = GPT(TINY).to(torch.bfloat16)
    opt = mp.MixedPrecisionAdam(model.parameters(), lr=1e-2)
    ref = [torch.nn.Parameter(p.detach().float()) for p in model.parameters()]
    ref_opt = torch.optim.Adam(ref, lr=1e-2)
    for step in range(3):
        opt.zero_grad()
        model(*batch(TINY, 2, seed=step))[1].backward()
        for p, r in zip(model.parameters(), ref):
            r.grad = p.grad.float()                                # the same gradients, upcast
        opt.step()
        ref_opt.step()
    for p, r in zip(model.parameters(), ref):
        assert torch.equal(opt.master(p), r) and opt.master(p).dtype == torch.float32
        assert torch.equal(p, r.to(torch.bfloat16))


def test_updates_below_half_an_ulp_vanish_without_a_master():
    out = mp.lost_updates(start=1.0, lr=1e-3, steps=10)          # bf16 ulp below 1.0 is 2^-8
    assert out.without_master == 1.0                               # ten steps of ~1e-3 all rounded away
    assert abs(out.master - (1.0 - 10 * 1e-3)) < 1e-6              # Adam's first steps are ~lr each
    assert out.with_master == float(torch.tensor(out.master).to(torch.bfloat16))
    assert out.with_master < 1.0
    fp16 = mp.lost_updates(dtype=torch.float16)     # below 1.0 fp16's spacing is 2^-11: half is < 1e-3
    assert fp16.without_master < 1.0


@pytest.mark.parametrize("autocast", [True, False], ids=["fp16-autocast+Adam", "fp16-model+MixedPrecisionAdam"])
def test_dynamic_loss_scaler_is_gradscaler_step_for_step(autocast):
    ours = mp.scaler_run(mp.DynamicLossScaler, autocast, TINY)
    theirs = mp.scaler_run(lambda **kw: torch.amp.GradScaler("cpu", **kw), autocast, TINY)
    assert ours[0] == theirs[0]                                    # the same scale at every step
    # the run both overflows (backs off) and grows, so both branches of the rule are compared
    assert ours[0][1] == ours[0][0] / 2 and any(b == 2 * a for a, b in zip(ours[0], ours[0][1:]))
    for mine, torchs in zip(ours[1], theirs[1]):                   # parameters equal bit for bit
        assert all(torch.equal(p, q) for p, q in zip(mine, torchs))


def test_the_update_rule_by_hand():
    p = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([p], lr=1.0)
    sc = mp.DynamicLossScaler(init_scale=8.0, growth_interval=2)
    verdicts = []
    for grad in ([1.0, 2.0, 3.0], [1.0, float("inf"), 0.0], [8.0, 8.0, 8.0], [8.0, 8.0, 8.0], [float("nan")] * 3):
        p.grad = torch.tensor(grad)
        verdicts.append(sc.step(opt))
        sc.update()
    assert verdicts == [True, False, True, True, False]
    assert [h.scale for h in sc.history] == [8.0, 8.0, 4.0, 4.0, 8.0]   # backoff, then growth after 2 clean
    assert sc.get_scale() == 4.0 and sc.clean_steps == 0
    # two stepped updates: (1,2,3)/8 and (8,8,8)/4 twice
    assert torch.equal(p.detach(), -torch.tensor([1.0, 2.0, 3.0]) / 8 - 2 * torch.tensor([2.0, 2.0, 2.0]))
    top = mp.DynamicLossScaler(init_scale=2.0 ** 127, growth_interval=1)
    p.grad = torch.ones(3)
    top.step(opt)
    top.update()
    assert top.get_scale() == 2.0 ** 127                           # 2^128 is inf in fp32: no growth


def test_fp16_underflow_is_visible_and_scaling_lifts_it():
    assert torch.tensor(0.99 * 2.0 ** -25).half().item() == 0.0      # below half the smallest subnormal
    assert torch.tensor(2.0 ** -24).half().item() == 2.0 ** -24
    model, probe = GPT(SMALL), batch(SMALL, 8, seed=999)
    plain = mp.gradient_underflow(model, *probe)
    small = mp.gradient_underflow(model, *probe, loss_factor=2.0 ** -12)   # a loss divided by 4096
    # measured: ~0.02% flushed and ~17% subnormal as it is; ~20% flushed when the loss is /4096
    assert plain.flushed_unscaled > 0 and plain.subnormal_unscaled > 0.1 * plain.entries
    assert plain.subnormal_scaled < 0.001 * plain.entries and not plain.overflowed
    assert small.flushed_fraction_unscaled > 0.1 and small.flushed_fraction_scaled < 0.001
    assert small.error_unscaled > 0.5 and small.error_scaled < 0.01   # relative L2 error of the gradient
    too_big = mp.gradient_underflow(model, *probe, scale=2.0 ** 24)
    assert too_big.overflowed                                      # 2^24 / (B*T) > 65504 at the logits


def test_precision_modes_train_alike_except_fp16_without_scaling():
    runs = {m: mp.train(SMALL, m, 20, loss_factor=2.0 ** -12) for m in ("fp32", "bf16-autocast", "fp16", "fp16-scaled")}
    gap = {m: max(abs(a - b) for a, b in zip(r.losses, runs["fp32"].losses)) for m, r in runs.items()}
    # measured gaps to the fp32 curve: ~1e-3 for bf16 autocast and scaled fp16, ~1 for plain fp16
    assert gap["bf16-autocast"] < 0.01 and gap["fp16-scaled"] < 0.01
    assert gap["fp16"] > 0.3 and runs["fp16"].losses[-1] > runs["fp32"].losses[-1] + 0.3
    assert runs["fp16-scaled"].skipped == 0 and runs["fp16-scaled"].final_scale == 2.0 ** 16
    # the same 16 bytes per parameter (+ 4 per tensor) in every mode
    n, t = parameter_count(SMALL), runs["fp32"].tensors
    assert all(sum(r.state_bytes.values()) == 16 * n + 4 * t for r in runs.values())
    # autocast keeps 16-bit copies of matmul inputs: fewer activation bytes, but not half
    fp32, auto, half = (runs[m].activation_bytes for m in ("fp32", "bf16-autocast", "fp16"))
    assert half < auto < fp32 and auto > fp32 / 2


def test_tables_and_scale_history():
    hist = mp.scale_history_table(TINY, steps=8, init_scale=2.0 ** 24, growth_interval=2)
    skipped = hist.column("skipped")
    assert skipped[0] == "yes" and "" in skipped                   # overflows first, then steps
    scales = hist.column("scale S")
    assert scales[0] == 2.0 ** 24 and scales[1] == 2.0 ** 23
    tab = mp.precision_table(TINY, steps=3, batch_size=2)
    assert tab.column("mode") == list(mp.MODES)
    assert all(16.0 <= b < 16.1 for b in tab.column("state B/param"))
    assert all(len(line) <= 100 for line in str(tab).splitlines() + str(hist).splitlines())


def test_bad_arguments():
    model = GPT(TINY)
    with pytest.raises(ValueError, match="MixedPrecisionAdam: lr must be a finite positive"):
        mp.MixedPrecisionAdam(model.parameters(), lr=0)
    with pytest.raises(TypeError, match="MixedPrecisionAdam: parameters must be float16"):
        mp.MixedPrecisionAdam([torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))])
    with pytest.raises(ValueError, match="DynamicLossScaler: need growth_factor > 1"):
        mp.DynamicLossScaler(growth_factor=0.5)
    with pytest.raises(ValueError, match="DynamicLossScaler: growth_interval must be an int >= 1"):
        mp.DynamicLossScaler(growth_interval=0)
    with pytest.raises(RuntimeError, match="DynamicLossScaler.update: call step"):
        mp.DynamicLossScaler().update()
    with pytest.raises(ValueError, match="train: mode must be one of"):
        mp.train(TINY, "fp8", 1)
    with pytest.raises(ValueError, match="train: loss-scaler settings only apply"):
        mp.train(TINY, "fp16", 1, init_scale=2.0)
    with pytest.raises(TypeError, match="gradient_underflow: dtype must be"):
        mp.gradient_underflow(model, *batch(TINY, 1), dtype=torch.int8)
    with pytest.raises(NotImplementedError):
        mp.MixedPrecisionAdam(model.parameters()).load_state_dict({})
    assert copy.deepcopy(mp.DynamicLossScaler()).get_scale() == 2.0 ** 16


def test_gradscaler_table():
    t = mp.gradscaler_table(steps=6)
    assert t.column("same scales") == [True, True] and t.column("same parameters") == [True, True]

