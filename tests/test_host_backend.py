"""The fast host path: golden vectors, the reference path, finite differences, threads, blocks."""

import numpy as np
import pytest

import convnet.host.backend as hb
from convnet.architecture import Architecture
from convnet.errors import ConvnetError
from convnet.host import local_conv
from convnet.host.backend import HostBackend
from convnet.host.reference import ReferenceModel
from convnet.host.threads import blas_controllable, blas_threads, set_blas_threads


def rel(a, b):
    return abs(a - b) / abs(b)


def rel_norm(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of at most 2 cases, so that a few cases already span several blocks and workers."""
    monkeypatch.setattr(hb, "MAX_BLOCK", 2)


MANUAL = ["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 3 3 2 2",
          "LOCAL LAYER 3 1 1 1 1 1 1", "POOLED AVERAGE LAYER 3 3 2 2", "FULLY CONNECTED LAYER 4"]


def manual_problem(n=50, seed=3):
    rng = np.random.default_rng(seed)
    arch = Architecture.from_lines(MANUAL, 12, 12, 1, 6)
    return (arch, rng.normal(0, 0.5, arch.n_weights), rng.uniform(-1, 1, (n, 1, 12, 12)),
            rng.integers(0, 6, n))


# ------------------------------------------------------------------------------ golden vectors
@pytest.mark.parametrize("threads", [1, 2])
def test_fast_path_reproduces_golden_vectors(reference_case, threads):
    rc = reference_case
    be = HostBackend(rc.arch, threads=threads)
    ev = be.evaluator(rc.inputs, rc.classes, rc.wpen)
    assert ev.n_cases == rc.inputs.shape[0]
    assert rel(ev.criterion(rc.weights), rc.criterion) < 1e-9
    crit, grad = ev.gradient(rc.weights)
    assert rel(crit, rc.criterion) < 1e-9
    assert rel_norm(grad, rc.gradient) < 1e-9
    assert np.abs(ev.outputs(rc.weights) - rc.outputs).max() < 1e-12
    acts = be.activations(rc.weights, rc.inputs)
    assert [a.shape for a in acts] == [(rc.inputs.shape[0], L.n_neurons) for L in rc.arch.layers]
    for (layer, case), want in rc.activations().items():
        assert np.abs(acts[layer][case] - want).max() < 1e-12
    winners = be.poolmax_winners(rc.weights, rc.inputs)
    for (layer, case), want in rc.poolmax_ids().items():
        assert np.array_equal(winners[layer][case], want)


def test_golden_vectors_in_single_case_blocks(reference_case, monkeypatch):
    monkeypatch.setattr(hb, "MAX_BLOCK", 1)
    rc = reference_case
    be = HostBackend(rc.arch, threads=3)
    crit, grad = be.evaluator(rc.inputs, rc.classes, rc.wpen).gradient(rc.weights)
    assert rel(crit, rc.criterion) < 1e-9
    assert rel_norm(grad, rc.gradient) < 1e-9


def test_wide_fully_connected_nets_take_long_blocks():
    """Only a net of fully connected layers with a layer of WIDE_WEIGHTS weights or more takes
    blocks of up to WIDE_MAX_BLOCK cases, at least WIDE_MIN_BLOCKS of them; a CONV net with as
    wide a layer (LeNet's fully connected one) keeps MAX_BLOCK."""
    wide = HostBackend(Architecture.from_lines(["FULLY CONNECTED LAYER 400"], 28, 28, 1, 10))
    assert 785 * 400 >= hb.WIDE_WEIGHTS
    assert wide.block_size(1000) == 500 and wide.block_size(10000) == hb.WIDE_MAX_BLOCK
    narrow = HostBackend(Architecture.from_lines(["FULLY CONNECTED LAYER 300"], 28, 28, 1, 10))
    assert 785 * 300 < hb.WIDE_WEIGHTS and narrow.block_size(10000) == hb.MAX_BLOCK
    lenet = HostBackend(Architecture.from_lines(
        ["CONVOLUTIONAL LAYER 20 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "CONVOLUTIONAL LAYER 50 2 2 0 0 1 1", "POOLED MAX LAYER 2 2 2 2",
         "FULLY CONNECTED LAYER 500"], 28, 28, 1, 10))
    assert not lenet._plan.wide and lenet.block_size(10000) <= hb.MAX_BLOCK
    assert lenet.block_size(1000) == min(63, hb.BLOCK_BYTES // lenet._plan.bytes_per_case(True))


def test_wide_fully_connected_net_in_long_blocks_whatever_the_threads(monkeypatch):
    """The long blocks of a wide net give the same bits on 1, 2 and 3 threads, and the reference
    path's gradient."""
    monkeypatch.setattr(hb, "WIDE_MAX_BLOCK", 24)       # several blocks of the long kind
    arch = Architecture.from_lines(["FULLY CONNECTED LAYER 400", "FULLY CONNECTED LAYER 20"],
                                   28, 28, 1, 10)
    rng = np.random.default_rng(5)
    x, c = rng.uniform(-1, 1, (100, 1, 28, 28)), rng.integers(0, 10, 100)
    w = rng.normal(0, 0.05, arch.n_weights)
    runs = [HostBackend(arch, threads=t).evaluator(x, c, 0.01).gradient(w) for t in (1, 2, 3)]
    assert HostBackend(arch).block_size(100) == 24
    for crit, grad in runs[1:]:
        assert crit == runs[0][0] and np.array_equal(grad, runs[0][1])
    ref_crit, ref_grad = ReferenceModel(arch).gradient(w, x, c, 0.01)
    assert rel(runs[0][0], ref_crit) < 1e-12 and rel_norm(runs[0][1], ref_grad) < 1e-12


# ------------------------------------------------------------------------------ reference path
@pytest.mark.parametrize("seed", range(60))
def test_fast_path_matches_reference_on_random_architectures(seed, make_problem, small_blocks):
    arch, w, x, y, wpen = make_problem(seed, n_cases=5)
    ref = ReferenceModel(arch)
    be = HostBackend(arch, threads=2)
    ev = be.evaluator(x, y, wpen)
    crit, grad = ev.gradient(w)
    rcrit, rgrad = ref.gradient(w, x, y, wpen)
    assert rel(crit, rcrit) < 1e-12
    assert rel(ev.criterion(w), rcrit) < 1e-12
    assert rel_norm(grad, rgrad) < 1e-12
    assert np.abs(ev.outputs(w) - ref.outputs(w, x)).max() < 1e-13
    for a, r in zip(be.activations(w, x), ref.activations(w, x)):
        assert np.abs(a - r).max() < 1e-13
    for i, ids in be.poolmax_winners(w, x).items():
        for c in range(x.shape[0]):
            assert np.array_equal(ids[c], ref.trial(w, x[c])[1][i])


CRITERION_NETS = [
    ["POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 3"],
    ["CONVOLUTIONAL LAYER 3 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 1 1", "POOLED MAX LAYER 2 2 2 2"],
    ["FULLY CONNECTED LAYER 4", "POOLED MAX LAYER 1 1 1 1", "FULLY CONNECTED LAYER 2"],
    ["LOCAL LAYER 2 1 1 0 0 1 1", "POOLED MAX LAYER 2 2 2 2", "POOLED AVERAGE LAYER 2 2 1 1"],
    ["CONVOLUTIONAL LAYER 2 1 1 0 0 2 1", "POOLED AVERAGE LAYER 2 2 1 1",
     "POOLED MAX LAYER 2 3 1 2", "LOCAL LAYER 3 1 0 1 0 1 1"],
    [],
]


@pytest.mark.parametrize("lines", CRITERION_NETS)
@pytest.mark.parametrize("scale", [0.5, 1e4])
@pytest.mark.parametrize("runs", [False, True])
def test_criterion_only_path_matches_reference(lines, scale, runs, small_blocks, monkeypatch):
    """The criterion's forward-only pass ((feature, case) order, tanh deferred past max pooling,
    windows unrolled in runs of positions when ``runs``) against the reference path and the
    gradient's own criterion, also with saturated tanh (many ties in the max pooling)."""
    if runs:
        monkeypatch.setattr(local_conv, "WHOLE_BYTES", 0)
        monkeypatch.setattr(local_conv, "CHUNK_BYTES", 700)    # runs of 2 to 4 positions
    rng = np.random.default_rng(len(lines))
    arch = Architecture.from_lines(lines, 8, 8, 2, 3)
    w = rng.normal(0, scale, arch.n_weights)
    x = rng.uniform(-1, 1, (5, 2, 8, 8))
    y = rng.integers(0, 3, 5)
    ev = HostBackend(arch, threads=2).evaluator(x, y, 0.01)
    rcrit = ReferenceModel(arch).gradient(w, x, y, 0.01)[0]
    crit = ev.criterion(w)
    assert rel(crit, rcrit) < 1e-12
    assert rel(crit, ev.gradient(w)[0]) < 1e-13


@pytest.mark.parametrize("lines", CRITERION_NETS)
@pytest.mark.parametrize("scale", [0.5, 1e4])
def test_gradient_and_outputs_with_tanh_after_max_pooling_match_reference(lines, scale,
                                                                          small_blocks):
    """The gradient and outputs passes apply tanh after max pooling too (the pooling layer's
    delta takes tanh' from its pooled values); against the reference path, which applies tanh
    before pooling, also with saturated tanh, where pooling windows hold ties."""
    rng = np.random.default_rng(7 + len(lines))
    arch = Architecture.from_lines(lines, 8, 8, 2, 3)
    w = rng.normal(0, scale, arch.n_weights)
    x = rng.uniform(-1, 1, (5, 2, 8, 8))
    y = rng.integers(0, 3, 5)
    ev = HostBackend(arch, threads=2).evaluator(x, y, 0.01)
    ref = ReferenceModel(arch)
    rcrit, rgrad = ref.gradient(w, x, y, 0.01)
    crit, grad = ev.gradient(w)
    assert rel(crit, rcrit) < 1e-12
    assert np.linalg.norm(grad - rgrad) <= 1e-12 * max(np.linalg.norm(rgrad), 1e-300)
    want = np.array([ref.trial(w, x[c])[2] for c in range(x.shape[0])])
    assert np.allclose(ev.outputs(w), want, rtol=1e-12, atol=1e-300)


# ------------------------------------------------------------------------------ finite differences
def central_differences(f, w, h=1e-6):
    g = np.empty_like(w)
    for i in range(w.size):
        wp = w.copy()
        wp[i] += h
        wm = w.copy()
        wm[i] -= h
        g[i] = (f(wp) - f(wm)) / (2 * h)
    return g


@pytest.mark.parametrize("seed", range(100, 180))
def test_gradient_matches_central_differences(seed, make_problem):
    arch, w, x, y, wpen = make_problem(seed, n_cases=3)
    ev = HostBackend(arch, threads=1).evaluator(x, y, wpen)
    crit, grad = ev.gradient(w)
    assert crit == pytest.approx(ev.criterion(w), rel=1e-13)
    fd = central_differences(ev.criterion, w)
    assert rel_norm(grad, fd) < 1e-6, arch.control_lines()


def test_random_architectures_cover_every_layer_kind(make_problem):
    """The random problems above really exercise every kind, padding, strides and no layers."""
    seen, pads, strides, empty, bands, inexact = set(), set(), set(), 0, set(), 0
    for seed in list(range(60)) + list(range(100, 180)):
        arch = make_problem(seed)[0]
        bands.add(arch.bands)
        empty += not arch.layers
        for L in arch.layers:
            seen.add(L.kind)
            s = L.spec
            if L.kind in ("LOCAL", "CONV"):
                pads.add((s.pad_v == s.hw_v, s.pad_v == 0))
                strides.add(max(s.stride_v, s.stride_h))
                inexact += (L.prior_height - s.filter_v + 2 * s.pad_v) % s.stride_v != 0
    assert seen == {"FC", "LOCAL", "CONV", "POOLAVG", "POOLMAX"}
    assert strides == {1, 2, 3} and empty > 0 and bands == {1, 2, 3}
    assert {(True, False), (False, True), (False, False)} <= pads   # full, none, partial
    assert inexact > 0


# ------------------------------------------------------------------------------ threads and blocks
@pytest.mark.parametrize("max_chunks", [48, 4])
def test_threads_give_the_same_bits(small_blocks, monkeypatch, max_chunks):
    """Fixed blocks and chunks, partials added in a fixed order: 1, 2, 3 or 8 workers give the
    same criterion, gradient and outputs to the last bit (also with several blocks per chunk)."""
    monkeypatch.setattr(hb, "MAX_CHUNKS", max_chunks)
    arch, w, x, y = manual_problem(n=23)
    results = []
    for t in (1, 2, 3, 8):
        be = HostBackend(arch, threads=t)
        ev = be.evaluator(x, y, 0.001)
        crit, grad = ev.gradient(w)
        results.append((crit, grad, ev.criterion(w), ev.outputs(w)))
    c0, g0, k0, o0 = results[0]
    assert rel(k0, c0) < 1e-12                 # the forward-only criterion: another route
    for c, g, k, o in results[1:]:
        assert c == c0 and k == k0
        assert np.array_equal(g, g0) and np.array_equal(o, o0)


def test_partition_does_not_depend_on_threads():
    arch, *_ = manual_problem(n=2)
    parts = [HostBackend(arch, threads=t).partition(n) for t in (1, 2, 3, 16) for n in (1, 10, 5000)]
    assert parts[:3] == parts[3:6] == parts[6:9] == parts[9:]
    blocks, chunks = parts[2]
    assert blocks[0] == (0, 64) and blocks[-1][1] == 5000
    assert len(chunks) == hb.MAX_CHUNKS and chunks[0][0] == 0 and chunks[-1][1] == len(blocks)


def test_repeated_calls_and_work_area_reuse():
    arch, w, x, y = manual_problem(n=30)
    be = HostBackend(arch, threads=2)
    ev = be.evaluator(x, y)
    first = ev.gradient(w)
    areas = dict(be._works)
    be.evaluator(x[:7], y[:7]).gradient(w * 0.5)     # smaller blocks in the same work areas
    ev.criterion(w)                                  # criterion shares the gradient's areas
    again = ev.gradient(w)
    assert first[0] == again[0] and np.array_equal(first[1], again[1])
    assert be._works == areas


def test_blas_threads_restored_after_a_call():
    if not blas_controllable():
        pytest.skip("this BLAS library's thread count cannot be set")
    arch, w, x, y = manual_problem(n=8)
    before = blas_threads()
    try:
        set_blas_threads(2)
        HostBackend(arch, threads=2).evaluator(x, y).gradient(w)
        assert blas_threads() == 2
    finally:
        set_blas_threads(before)


def test_timings_cover_every_layer_and_activity():
    arch, w, x, y = manual_problem(n=10)
    be = HostBackend(arch, threads=1)
    ev = be.evaluator(x, y)
    ev.gradient(w)
    rows = {(label, act): (calls, sec) for label, act, calls, sec in be.timings()}
    labels = [f"Layer {i + 1} {L.kind}" for i, L in enumerate(arch.layers)] + ["Output"]
    for i, label in enumerate(labels):
        assert rows[label, "forward"][0] >= 1
        if label != "Output":
            assert rows[label, "delta"][0] >= 1
        has_weights = i == len(arch.layers) or arch.layers[i].n_weights > 0
        assert ((label, "gradient") in rows) == has_weights
    assert all(sec >= 0.0 for _, sec in rows.values())
    before = rows[labels[0], "forward"][0]
    ev.criterion(w)
    after = {(lb, a): c for lb, a, c, _ in be.timings()}
    assert after[labels[0], "forward"] == 2 * before      # the same blocks again
    be.reset_timings()
    assert be.timings() == []


# ------------------------------------------------------------------------- numerics at the edges
def test_huge_weights_give_finite_results():
    arch, w, x, y = manual_problem(n=6)
    ev = HostBackend(arch).evaluator(x, y)
    w = w * 1e4
    out = ev.outputs(w)
    assert np.all(np.isfinite(out)) and np.allclose(out.sum(axis=1), 1.0)
    crit, grad = ev.gradient(w)
    assert np.isfinite(crit) and np.all(np.isfinite(grad))
    # A confidently wrong case costs -log(1e-30) / n_classes at most per case.
    assert crit <= -np.log(1e-30) / arch.n_classes + 1e-9


def test_zero_weights_give_uniform_outputs():
    arch, w, x, y = manual_problem(n=4)
    ev = HostBackend(arch).evaluator(x, y)
    out = ev.outputs(np.zeros(arch.n_weights))
    assert np.allclose(out, 1.0 / arch.n_classes)
    assert ev.criterion(np.zeros(arch.n_weights)) == pytest.approx(np.log(6) / 6)


def test_weight_penalty_skips_biases():
    arch = Architecture.from_lines(["FULLY CONNECTED LAYER 2"], 2, 2, 1, 2)
    x = np.zeros((1, 1, 2, 2))
    ev0 = HostBackend(arch).evaluator(x, [0], 0.0)
    ev1 = HostBackend(arch).evaluator(x, [0], 0.5)
    w = np.zeros(arch.n_weights)
    w[4] = 3.0                                 # bias of the first hidden neuron
    assert ev1.criterion(w) == ev0.criterion(w)
    w[0] = 2.0                                 # a real weight
    assert ev1.criterion(w) - ev0.criterion(w) == pytest.approx(0.5 / arch.n_weights * 4.0)
    g1 = ev1.gradient(w)[1] - ev0.gradient(w)[1]
    want = np.zeros(arch.n_weights)
    want[0] = 2 * 0.5 / arch.n_weights * 2.0
    assert np.allclose(g1, want, atol=1e-15)


# ------------------------------------------------------------------------------ errors
def test_user_errors_are_convnet_errors():
    arch, w, x, y = manual_problem(n=4)
    be = HostBackend(arch)
    with pytest.raises(ConvnetError, match="shape"):
        be.evaluator(x[:, 0], y)
    with pytest.raises(ConvnetError, match="shape"):
        be.evaluator(np.zeros((4, 2, 12, 12)), y)
    with pytest.raises(ConvnetError, match="no cases"):
        be.evaluator(x[:0], y[:0])
    with pytest.raises(ConvnetError, match="classes"):
        be.evaluator(x, y[:3])
    with pytest.raises(ConvnetError, match="0..5"):
        be.evaluator(x, [0, 1, 2, 6])
    with pytest.raises(ConvnetError, match="whole numbers"):
        be.evaluator(x, [0, 1.5, 2, 3])
    with pytest.raises(ConvnetError, match="penalty"):
        be.evaluator(x, y, -1.0)
    ev = be.evaluator(x, y)
    with pytest.raises(ConvnetError, match=str(arch.n_weights)):
        ev.criterion(w[:-1])
    with pytest.raises(ConvnetError, match="shape"):
        be.activations(w, x[0])
    with pytest.raises(ConvnetError, match="threads"):
        HostBackend(arch, threads=0)
    with pytest.raises(ConvnetError, match="threads"):
        HostBackend(arch, threads="many")
    assert be.evaluator(x, y.astype(float)).criterion(w) == be.evaluator(x, y).criterion(w)


def test_interrupt_waits_for_the_other_workers(monkeypatch):
    """A KeyboardInterrupt in the calling thread leaves no worker running, and the next call
    gives the full result."""
    import threading
    import time

    arch, w, x, y = manual_problem(n=16)
    be = HostBackend(arch, threads=2)
    ev = be.evaluator(x, y)
    want = ev.gradient(w)
    original = hb._forward_block

    def slow_or_interrupted(*args):
        if threading.current_thread() is threading.main_thread():
            raise KeyboardInterrupt
        time.sleep(0.05)
        return original(*args)

    monkeypatch.setattr(hb, "_forward_block", slow_or_interrupted)
    with pytest.raises(KeyboardInterrupt):
        ev.gradient(w)
    assert not be._works[1].lock.locked()        # the other worker had finished
    monkeypatch.setattr(hb, "_forward_block", original)
    again = ev.gradient(w)
    assert again[0] == want[0] and np.array_equal(again[1], want[1])
