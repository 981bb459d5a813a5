"""Gradients handed to the caller as the page-locked buffers they were fetched into
(convnet/device/handback.py): a buffer goes back to the pool only once every array made from it
is gone, no later evaluation writes into a gradient the caller holds, and a caller holding every
buffer gets copies."""

import gc

import numpy as np

from convnet.architecture import Architecture
from convnet.device import backend as dbe
from convnet.device import handback
from convnet.device.options import DeviceOptions
from convnet.params import DeviceParams
from test_device_emulated import fake_runtime  # noqa: F401  (the emulated CUDA runtime)


def _pool(most=2, size=10):
    made = []

    def allocate(n):
        made.append(np.zeros(n))
        return made[-1]

    return handback.HandBack(allocate, size, most), made


def test_a_buffer_comes_back_only_when_every_array_of_it_is_gone():
    pool, made = _pool()
    buffer = pool.take()
    buffer[:] = np.arange(10)
    out = pool.hand_out(buffer, 8)
    assert out.shape == (8,) and out.dtype == np.float64 and out.flags.writeable
    assert np.shares_memory(out, buffer) and np.array_equal(out, np.arange(8))
    part = out[2:5]
    del out
    gc.collect()
    assert pool.take() is not buffer                 # the slice still holds it: a second buffer
    del part
    gc.collect()
    assert pool.take() is buffer
    assert len(made) == 2


def test_the_pool_is_bounded_and_buffers_not_handed_out_return():
    pool, made = _pool(most=2)
    a, b = pool.take(), pool.take()
    assert a is not b and pool.take() is None
    pool.give_back(a)
    assert pool.take() is a and len(made) == 2


def test_no_page_locked_memory_means_copies():
    calls = []

    def allocate(n):
        calls.append(n)
        if len(calls) > 1:
            raise MemoryError("out of page-locked memory")
        return np.zeros(n)

    pool = handback.HandBack(allocate, 10)
    assert pool.take() is not None
    assert pool.take() is None and pool.take() is None and len(calls) == 2
    assert pool.made == pool.most == 1


def test_a_huge_gradient_gets_at_most_the_pools_bytes(monkeypatch):
    monkeypatch.setattr(handback, "MOST_POOL_BYTES", 8 * 25)
    assert handback.HandBack(np.zeros, 10).most == 2
    assert handback.HandBack(np.zeros, 30).most == 0
    assert handback.HandBack(np.zeros, 30).take() is None


def _evaluator():
    lines = ["CONVOLUTIONAL LAYER 4 1 1 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
             "FULLY CONNECTED LAYER 30"]
    arch = Architecture.from_lines(lines, 10, 10, 1, 3)
    rng = np.random.default_rng(3)
    x = rng.random((120, 1, 10, 10)) * 2 - 1
    c = rng.integers(0, 3, 120)
    be = dbe.DeviceBackend(arch, DeviceParams(), DeviceOptions())
    weights = [rng.normal(0, 0.2, arch.n_weights) for _ in range(handback.MOST_BUFFERS + 3)]
    return be, be.evaluator(x, c, 0.01), weights


def test_held_gradients_stay_as_they_were_and_equal_copies(fake_runtime):  # noqa: F811
    _, ev, weights = _evaluator()
    _, reference, _ = _evaluator()
    expected = []
    for w in weights:                                # the copies of the evaluator's own buffer
        reference.queue_gradient(w)()
        crit, grad = reference.finish_gradient()
        expected.append((crit, grad.copy()))
    held = [ev.gradient(w) for w in weights]         # more than the pool: the last ones copied
    assert ev.backend.handback.made == handback.MOST_BUFFERS
    for (crit, grad), (want_crit, want_grad) in zip(held, expected):
        assert crit == want_crit and np.array_equal(grad, want_grad)
        assert not np.shares_memory(grad, ev.h_grad)
    for i, (_, a) in enumerate(held):
        for _, b in held[i + 1:]:
            assert not np.shares_memory(a, b)
    del held
    gc.collect()
    again = [ev.gradient(w) for w in weights[:2]]    # the buffers came back: none made
    assert ev.backend.handback.made == handback.MOST_BUFFERS
    for (crit, grad), (want_crit, want_grad) in zip(again, expected):
        assert crit == want_crit and np.array_equal(grad, want_grad)


def test_queued_gradients_still_read_the_evaluators_own_buffer(fake_runtime):  # noqa: F811
    _, ev, weights = _evaluator()
    ev.queue_gradient(weights[0])()
    _, grad = ev.finish_gradient()
    assert np.shares_memory(grad, ev.h_grad) and ev.backend.handback.made == 0


def test_a_subsets_gradients_come_from_the_same_pool(fake_runtime):  # noqa: F811
    _, ev, weights = _evaluator()
    _, held = ev.gradient(weights[0])
    part = ev.subset(np.arange(40))
    _, grad = part.gradient(weights[1])
    assert part.backend.handback is ev.backend.handback and ev.backend.handback.made == 2
    del grad
    gc.collect()
    part.gradient(weights[2])
    assert ev.backend.handback.made == 2 and held.shape == (ev.backend.n_weights,)
