"""Each layer kind alone: its gradient against central finite differences of the criterion, layer
by layer, on the reference loops and the fast host path; a failure names the layer."""

import numpy as np
import pytest

from convnet.host.backend import HostBackend
from convnet.host.reference import ReferenceModel
from layer_cases import cases, kind_arch, layer_name

PAIRS, IDS = cases()
N_CASES = 5
H = 1e-5
PER_LAYER = 12          # weights checked in each layer (all of a smaller layer)


def _problem(arch, seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 0.5, arch.n_weights)
    x = rng.uniform(-1.0, 1.0, (N_CASES, arch.bands, arch.rows, arch.cols))
    c = rng.integers(0, arch.n_classes, N_CASES)
    return w, x, c, 0.02


def _check(arch, criterion, grad, w, seed):
    """Messages for every layer whose gradient disagrees with central differences."""
    rng = np.random.default_rng(seed)
    bad = []
    for layer in arch.all_layers:
        if not layer.n_weights:
            continue
        picks = np.arange(layer.n_weights)
        if picks.size > PER_LAYER:
            # always the first weight set's bias, then a random sample
            picks = np.unique(np.concatenate([[layer.n_prior_weights - 1],
                                              rng.choice(picks, PER_LAYER - 1, replace=False)]))
        for j in layer.weight_offset + picks:
            wp, wm = w.copy(), w.copy()
            wp[j] += H
            wm[j] -= H
            fd = (criterion(wp) - criterion(wm)) / (2 * H)
            if abs(fd - grad[j]) > 1e-6 * max(1.0, abs(fd)) + 1e-9:
                bad.append(f"{layer_name(layer)}, weight {j - layer.weight_offset}: "
                           f"gradient {grad[j]:.9g}, finite difference {fd:.9g}")
    return bad


@pytest.mark.parametrize("kind,place", PAIRS, ids=IDS)
def test_reference_gradient_by_layer(kind, place):
    arch = kind_arch(kind, place)
    w, x, c, wpen = _problem(arch, 3)
    ref = ReferenceModel(arch)
    _, grad = ref.gradient(w, x, c, wpen)
    bad = _check(arch, lambda v: ref.criterion(v, x, c, wpen), grad, w, 3)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("kind,place", PAIRS, ids=IDS)
def test_fast_host_gradient_by_layer(kind, place):
    arch = kind_arch(kind, place)
    w, x, c, wpen = _problem(arch, 4)
    be = HostBackend(arch, threads=1)
    try:
        ev = be.evaluator(x, c, wpen)
        _, grad = ev.gradient(w)
        bad = _check(arch, ev.criterion, grad, w, 4)
    finally:
        be.close()
    assert not bad, "\n".join(bad)


def test_a_wrong_gradient_is_reported_by_layer():
    arch = kind_arch("LOCAL", "after-conv")
    w, x, c, wpen = _problem(arch, 5)
    ref = ReferenceModel(arch)
    _, grad = ref.gradient(w, x, c, wpen)
    local = arch.layers[1]
    grad[local.weight_offset:local.weight_offset + local.n_weights] *= 1.01
    bad = _check(arch, lambda v: ref.criterion(v, x, c, wpen), grad, w, 5)
    assert bad and all(m.startswith("layer 2 (LOCAL)") for m in bad)
