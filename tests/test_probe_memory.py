"""Probe: Lab 09's memory tools (estimates, quantization, the loss scaler, the memory tracker,
activation checkpointing, offload) given bad input.

Each bad input gets a one-line error of the stated type naming the argument, fast. Inputs that used
to pass silently are refused: heads that tensor parallelism cannot split or that do not divide the
hidden size, a weight with one NaN (every code of its block became NaN), a second scaler step before
update (GradScaler refuses it too), an init_scale that is inf or 0 in float32 (1e300 never stepped;
1e-50 divided by zero), "yes" for a bool.
"""
import time

import pytest
import torch

from labkit.memory import activation_checkpointing as C, estimate as E, quantize as Q
from labkit.memory.mixed_precision import DynamicLossScaler
from labkit.memory.offload import tier_bandwidth
from labkit.memory.tracker import MemoryTracker
from labkit.model import GPT, GPTConfig

NAN, INF = float("nan"), float("inf")


def _stepped_twice():
    m = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    s = DynamicLossScaler()
    s.scale(m(torch.ones(1, 2)).sum()).backward()
    s.step(opt)
    s.step(opt)


def _scale_underflows():
    m = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    s = DynamicLossScaler(init_scale=2.0 ** -120)
    for _ in range(10):                       # inf gradients at every scale: it backs off to nothing
        opt.zero_grad()
        s.scale(m(torch.tensor([[INF, 1.0]])).sum()).backward()
        s.step(opt)
        s.update()


def _weight(value):
    w = torch.randn(4, 8)
    w[1, 2] = value
    return w


BAD = [
    # activation and state estimates
    ("heads 3 with tp 2", lambda: E.activation_bytes_per_layer(128, 1, 96, 3, 2), ValueError,
     "activation_bytes_per_layer: heads (3) must be divisible by tensor_parallel (2)"),
    ("heads > hidden", lambda: E.activation_bytes_per_layer(128, 1, 8, 16), ValueError,
     "activation_bytes_per_layer: hidden (8) must be divisible by heads (16)"),
    ("hidden % heads", lambda: E.activation_bytes_per_layer(128, 1, 100, 3), ValueError,
     "activation_bytes_per_layer: hidden (100) must be divisible by heads (3)"),
    ("recompute unknown", lambda: E.activation_bytes_per_layer(128, 1, 96, 4, recompute="half"), ValueError,
     "activation_bytes_per_layer: recompute"),
    ("mixed precision 'yes'", lambda: E.model_state_bytes_per_param("yes"), TypeError,
     "model_state_bytes_per_param: mixed_precision must be True or False"),
    ("saved bytes cfg", lambda: E.gpt_layer_saved_bytes(3, 2, 4, 4), TypeError, "gpt_layer_saved_bytes: cfg"),
    # quantization
    ("quantize one NaN", lambda: Q.quantize(_weight(NAN), 8), ValueError, "quantize: w has 1 NaN/inf value"),
    ("quantize one inf", lambda: Q.quantize(_weight(INF), 4, "channel"), ValueError, "quantize: w has 1 NaN/inf"),
    ("quantize bits", lambda: Q.quantize(torch.randn(4, 8), 3), ValueError, "quantize: bits"),
    ("quantize ints", lambda: Q.quantize(torch.ones(4, 8, dtype=torch.int32), 8), TypeError, "quantize: w must be"),
    ("quantize clip", lambda: Q.quantize(torch.randn(4, 8), 8, clip=1.5), ValueError, "quantize: clip"),
    ("pack floats", lambda: Q.pack_int4(torch.ones(4)), TypeError, "pack_int4: codes must be a 1-D int8 tensor"),
    ("unpack n", lambda: Q.unpack_int4(torch.zeros(2, dtype=torch.uint8), 5), ValueError, "unpack_int4: n"),
    ("unpack list", lambda: Q.unpack_int4([1, 2], 2), TypeError, "unpack_int4: packed"),
    # the loss scaler
    ("scaler init 1e300", lambda: DynamicLossScaler(init_scale=1e300), ValueError,
     "DynamicLossScaler: init_scale must be a positive normal float32"),
    ("scaler init 1e-50", lambda: DynamicLossScaler(init_scale=1e-50), ValueError, "DynamicLossScaler: init_scale"),
    ("scaler init nan", lambda: DynamicLossScaler(init_scale=NAN), ValueError, "DynamicLossScaler: init_scale"),
    ("scaler init -1", lambda: DynamicLossScaler(init_scale=-1.0), ValueError, "DynamicLossScaler: init_scale"),
    ("scaler init str", lambda: DynamicLossScaler(init_scale="65536"), TypeError, "DynamicLossScaler: init_scale"),
    ("scaler growth 1", lambda: DynamicLossScaler(growth_factor=1.0), ValueError, "growth_factor > 1"),
    ("scaler step twice", _stepped_twice, RuntimeError, "DynamicLossScaler.step: already called since the last update()"),
    ("scaler update first", lambda: DynamicLossScaler().update(), RuntimeError, "DynamicLossScaler.update: call step"),
    ("scaler scale underflows", _scale_underflows, RuntimeError,
     "DynamicLossScaler.update: the scale would fall below float32's smallest normal number"),
    ("scaler loss float", lambda: DynamicLossScaler().scale(1.0), TypeError, "DynamicLossScaler.scale: loss"),
    # the memory tracker
    ("tracker model str", lambda: MemoryTracker(model="abc"), TypeError, "MemoryTracker: model must be a torch.nn.Module"),
    ("tracker optimizer", lambda: MemoryTracker(optimizer=[1]), TypeError, "MemoryTracker: optimizer"),
    ("tracker by_category", lambda: MemoryTracker(by_category="yes"), TypeError, "MemoryTracker: by_category"),
    # activation checkpointing
    ("chain layers huge", lambda: C.make_chain(10 ** 9, 8), ValueError, "make_chain: n_layers"),
    ("chain width huge", lambda: C.make_chain(2, 10 ** 9), ValueError, "make_chain: width²"),
    ("chain seed", lambda: C.make_chain(2, 4, seed=-1), ValueError, "make_chain: seed"),
    ("best_segments huge", lambda: C.best_segments(10 ** 12), ValueError, "best_segments: n_layers"),
    ("measure huge", lambda: C.measure_chain(10 ** 9, 4), ValueError, "measure_chain: n_layers"),
    ("segment 0", lambda: C.checkpointed_chain(C.make_chain(4, 4), torch.ones(2, 4), 0), ValueError,
     "checkpointed_chain: segment"),
    ("checkpoint fn", lambda: C.checkpoint_segment(3, torch.ones(2)), TypeError, "checkpoint_segment: fn"),
    # offload
    ("offload device", lambda: tier_bandwidth(device="tpu"), ValueError, "tier_bandwidth: device must name a torch device"),
    ("offload cuda", lambda: tier_bandwidth(device="cuda") if not torch.cuda.is_available() else
     tier_bandwidth(device="gpu"), ValueError, "tier_bandwidth: device"),
    ("offload path", lambda: tier_bandwidth(path=3.5), TypeError, "tier_bandwidth: path"),
    ("offload repeat", lambda: tier_bandwidth(repeat=10 ** 9), ValueError, "tier_bandwidth: repeat"),
    ("offload nbytes", lambda: tier_bandwidth(nbytes=10 ** 18), ValueError, "tier_bandwidth: nbytes"),
]


@pytest.mark.parametrize("name,call,exc,words", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_a_fast_one_line_error(name, call, exc, words):
    t0 = time.monotonic()
    with pytest.raises(exc) as e:
        call()
    assert words in str(e.value), str(e.value)
    assert "\n" not in str(e.value)
    assert time.monotonic() - t0 < 15.0              # refused up front: the inputs that hung ran for hours


def test_valid_estimates_are_unchanged():
    s, b, h, a = 2048, 1, 12288, 96                 # GPT-3: 96 heads split over t = 8
    assert E.activation_bytes_per_layer(s, b, h, a, 8) == s * b * h * (10 + 24 / 8 + 5 * a * s / (h * 8))
    assert E.gpt_layer_saved_bytes(GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=16), 2, 4, 4) > 0
    with MemoryTracker(model=GPT(GPTConfig(layers=1, hidden=8, heads=2, seq_len=4, vocab=16))) as t:
        torch.ones(1000)
    assert t.peak_bytes >= 4000
