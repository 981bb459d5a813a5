"""Each layer kind alone: the reference loops, the fast host path and the emulated device agree
on its activations, max-pool winners, outputs, criterion and gradient."""

import numpy as np
import pytest

from convnet.device import backend as dbe
from convnet.host.backend import HostBackend
from convnet.host.reference import ReferenceModel
from layer_cases import cases, kind_arch, layer_name
from test_device_emulated import fake_runtime  # noqa: F401  (the emulated CUDA runtime)

PAIRS, IDS = cases()
N_CASES = 9


def _problem(arch, seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 0.4, arch.n_weights)
    x = rng.uniform(-1.0, 1.0, (N_CASES, arch.bands, arch.rows, arch.cols))
    c = rng.integers(0, arch.n_classes, N_CASES)
    return w, x, c, 0.05


def _rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(b), 1e-300))


def _reference(arch, w, x, c, wpen):
    ref = ReferenceModel(arch)
    crit, grad = ref.gradient(w, x, c, wpen)
    per_case = [ref.trial(w, x[i]) for i in range(x.shape[0])]
    acts = [np.array([pc[0][i] for pc in per_case]) for i in range(len(arch.layers))]
    ids = {i: np.array([pc[1][i] for pc in per_case]) for i, L in enumerate(arch.layers)
           if L.kind.keeps_winners}
    return crit, grad, np.array([pc[2] for pc in per_case]), acts, ids


def _layer_grad_errors(arch, grad, want, tol):
    """One message per layer whose part of the gradient is off."""
    bad = []
    for layer in arch.all_layers:
        sl = layer.weight_slice
        if layer.n_weights and _rel(grad[sl], want[sl]) > tol:
            bad.append(f"{layer_name(layer)}: gradient off by {_rel(grad[sl], want[sl]):.2e}")
    return bad


@pytest.mark.parametrize("kind,place", PAIRS, ids=IDS)
def test_fast_host_matches_reference(kind, place):
    arch = kind_arch(kind, place)
    w, x, c, wpen = _problem(arch, 1)
    crit, grad, probs, acts, ids = _reference(arch, w, x, c, wpen)
    be = HostBackend(arch, threads=2)
    try:
        ev = be.evaluator(x, c, wpen)
        hc, hg = ev.gradient(w)
        assert abs(hc - crit) <= 1e-12 * abs(crit)
        assert abs(ev.criterion(w) - crit) <= 1e-12 * abs(crit)
        assert not _layer_grad_errors(arch, hg, grad, 1e-10)
        assert np.abs(ev.outputs(w) - probs).max() < 1e-12
        for i, a in enumerate(be.activations(w, x)):
            assert np.abs(a - acts[i]).max() < 1e-12, layer_name(arch.layers[i])
        winners = be.poolmax_winners(w, x)
        assert set(winners) == set(ids)
        for i, a in winners.items():
            assert np.array_equal(a, ids[i]), layer_name(arch.layers[i])
    finally:
        be.close()


@pytest.mark.parametrize("kind,place", PAIRS, ids=IDS)
def test_emulated_device_matches_reference(fake_runtime, kind, place):  # noqa: F811
    arch = kind_arch(kind, place)
    w, x, c, wpen = _problem(arch, 2)
    crit, grad, probs, acts, ids = _reference(arch, w, x, c, wpen)
    be = dbe.DeviceBackend(arch)
    ev = be.evaluator(x, c, wpen)
    dc, dg = ev.gradient(w)
    assert abs(dc - crit) <= 1e-6 * abs(crit)
    assert not _layer_grad_errors(arch, dg, grad, 1e-5)
    assert np.abs(ev.outputs(w) - probs).max() < 1e-6
    for i, a in enumerate(be.activations(w, x)):
        assert np.abs(a - acts[i]).max() < 1e-5, layer_name(arch.layers[i])
    winners = be.poolmax_winners(w, x)
    assert set(winners) == set(ids)
    for i, a in winners.items():
        assert np.array_equal(a, ids[i]), layer_name(arch.layers[i])
