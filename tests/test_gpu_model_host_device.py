"""labkit.gpu_model.host_device: the measurement logic on a fake GPU with a virtual clock; real runs need CUDA."""
import pytest
import torch

from labkit.gpu_model import host_device as H


class FakeGpu:
    """One stream: queued kernels end at ``busy``; the host clock ``now`` advances as calls cost."""

    def __init__(self, launch_s=1e-5, blocking_launch=False, pinned_gbps=25.0, pageable_gbps=10.0):
        self.now, self.busy = 0.0, 0.0
        self.launch_s, self.blocking = launch_s, blocking_launch
        self.gbps = {True: pinned_gbps, False: pageable_gbps}

    def available(self):
        return True

    def clock(self):
        return self.now

    def synchronize(self):
        self.now = max(self.now, self.busy)

    def spin(self, seconds):
        self.now += self.launch_s
        self.busy = max(self.busy, self.now) + seconds
        if self.blocking:
            self.synchronize()

    def probes(self):
        def host_value():            # needs the GPU's result: waits for the queue
            self.synchronize()
            self.now += 1e-5

        return {"item": host_value, "another kernel": lambda: self.spin(1e-4)}

    def copy_h2d(self, nbytes, pinned):
        gpu_s = nbytes / (self.gbps[pinned] * 1e9)
        return (2e-5 if pinned else gpu_s + 1e-4), gpu_s


class NoGpu(FakeGpu):
    def available(self):
        return False


def test_without_cuda_every_measurement_says_what_it_would_show():
    for backend in ([None] if not torch.cuda.is_available() else []) + [NoGpu()]:
        for res in (H.launch_vs_completion(backend=backend), H.find_implicit_syncs(backend=backend),
                    H.h2d_bandwidth(backend=backend)):
            assert isinstance(res, H.NeedsCuda)
            assert str(res).startswith("needs a CUDA GPU; on one this measures ")


def test_launch_returns_before_the_kernel_ends():
    res = H.launch_vs_completion(kernel_s=0.05, backend=FakeGpu(launch_s=1e-5))
    assert res.launch_s == pytest.approx(1e-5)
    assert res.complete_s == pytest.approx(0.05 + 1e-5)
    assert res.asynchronous and res.ratio == pytest.approx(5001)
    blocking = H.launch_vs_completion(kernel_s=0.05, backend=FakeGpu(blocking_launch=True))
    assert not blocking.asynchronous and blocking.ratio == pytest.approx(1.0)   # a synchronous API is caught


def test_implicit_syncs_are_told_apart():
    probes = {p.name: p for p in H.find_implicit_syncs(kernel_s=0.05, backend=FakeGpu())}
    assert probes["item"].waits and probes["item"].call_s == pytest.approx(0.05, rel=1e-3)
    assert not probes["another kernel"].waits and probes["another kernel"].call_s == pytest.approx(1e-5)
    assert H.waited(0.03, 0.05) and not H.waited(0.01, 0.05)


def test_pinned_vs_pageable_bandwidth_from_event_times():
    res = H.h2d_bandwidth(nbytes=1 << 28, repeat=3, backend=FakeGpu(pinned_gbps=25.0, pageable_gbps=10.0))
    assert res.pinned_gbps == pytest.approx(25.0) and res.pageable_gbps == pytest.approx(10.0)
    assert res.ratio == pytest.approx(2.5)
    assert res.pinned_call_returns_early and res.pageable_call_s > res.pageable_gpu_s
    with pytest.raises(ValueError, match="nbytes"):
        H.h2d_bandwidth(nbytes=0, backend=FakeGpu())


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="launch timing, implicit syncs and pinned copies need a CUDA GPU")
def test_on_a_real_gpu():
    launch = H.launch_vs_completion(kernel_s=0.05)
    assert launch.asynchronous and launch.complete_s > 0.04
    probes = {p.name: p.waits for p in H.find_implicit_syncs(kernel_s=0.05)}
    assert probes["t.sum().item()"] and probes["t.cpu()"] and probes["repr(t) (printing)"]
    assert not probes["t + 1 (another kernel)"] and not probes["copy_ to pinned, non_blocking"]
    copy = H.h2d_bandwidth(nbytes=64 << 20, repeat=3)
    assert copy.pinned_gbps > 0 and copy.pageable_gbps > 0 and copy.pinned_call_returns_early
