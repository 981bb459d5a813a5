"""The per-case reference path (the book's chapter 2 loops) against the golden vectors and
against central finite differences."""

import numpy as np
import pytest

from convnet.host.reference import ReferenceModel


def rel(a, b):
    return abs(a - b) / abs(b)


def rel_norm(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def test_reference_reproduces_golden_vectors(reference_case):
    rc = reference_case
    ref = ReferenceModel(rc.arch)
    assert rc.arch.n_weights == rc.weights.size
    assert rel(ref.criterion(rc.weights, rc.inputs, rc.classes, rc.wpen), rc.criterion) < 1e-9
    crit, grad = ref.gradient(rc.weights, rc.inputs, rc.classes, rc.wpen)
    assert rel(crit, rc.criterion) < 1e-9
    assert rel_norm(grad, rc.gradient) < 1e-9
    assert np.abs(ref.outputs(rc.weights, rc.inputs) - rc.outputs).max() < 1e-12
    acts = ref.activations(rc.weights, rc.inputs)
    stored = rc.activations()
    if rc.arch.layers:
        assert stored, "the golden file stores activations"
    for (layer, case), want in stored.items():
        assert np.abs(acts[layer][case] - want).max() < 1e-12
    for (layer, case), want in rc.poolmax_ids().items():
        ids = ref.trial(rc.weights, rc.inputs[case])[1][layer]
        assert np.array_equal(ids, want)


def central_differences(f, w, h=1e-6):
    g = np.empty_like(w)
    for i in range(w.size):
        wp = w.copy()
        wp[i] += h
        wm = w.copy()
        wm[i] -= h
        g[i] = (f(wp) - f(wm)) / (2 * h)
    return g


@pytest.mark.parametrize("seed", range(8))
def test_reference_gradient_matches_finite_differences(seed, make_problem):
    arch, w, x, y, wpen = make_problem(1000 + seed, n_cases=2, max_layers=3)
    ref = ReferenceModel(arch)
    crit, grad = ref.gradient(w, x, y, wpen)
    assert crit == pytest.approx(ref.criterion(w, x, y, wpen), rel=1e-13)
    fd = central_differences(lambda v: ref.criterion(v, x, y, wpen), w)
    assert rel_norm(grad, fd) < 1e-6, arch.control_lines()
