"""The Python API of a model: weights, criterion, gradient, activations, predict, errors."""

import numpy as np
import pytest

import convnet
from convnet import Architecture, ConvnetError, Model
from convnet.host.backend import HostBackend
from convnet.host.reference import ReferenceModel

LINES = ["CONVOLUTIONAL LAYER 3 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2", "FULLY CONNECTED LAYER 4"]


@pytest.fixture
def problem():
    rng = np.random.default_rng(7)
    arch = Architecture.from_lines(LINES, 8, 8, 2, 3)
    return arch, rng.normal(0, 0.5, arch.n_weights), rng.uniform(-1, 1, (9, 2, 8, 8)), \
        rng.integers(0, 3, 9)


def test_model_is_exported():
    assert convnet.Model is Model and "Model" in convnet.__all__


def test_new_model_has_zero_weights_on_the_host(problem):
    arch = problem[0]
    m = Model(arch)
    assert m.arch is arch and m.device == "cpu" and isinstance(m.backend, HostBackend)
    assert m.weights.shape == (arch.n_weights,) and m.weights.dtype == np.float64
    assert not m.weights.any()


def test_weights_are_assignable_and_copied(problem):
    arch, w, x, y = problem
    m = Model(arch)
    held = m.weights
    m.weights = w
    assert m.weights is held                        # copied into place
    assert np.array_equal(m.weights, w)
    saved = w.copy()
    w[0] += 1.0
    assert np.array_equal(m.weights, saved)         # the caller's array is not shared
    w[0] = saved[0]
    m.weights = list(w)                             # any sequence of numbers
    assert np.array_equal(m.weights, w)
    m.weights[3] = 0.25                             # in-place edits reach the model
    assert m.criterion(x, y) == Model(arch).evaluator(x, y, 0.0).criterion(m.weights)
    with pytest.raises(ConvnetError, match=str(arch.n_weights)):
        m.weights = w[:-1]
    with pytest.raises(ConvnetError):
        m.weights = np.zeros((arch.n_weights, 1))


def test_criterion_gradient_activations_predict_match_reference(problem):
    arch, w, x, y = problem
    m = Model(arch, threads=2)
    m.weights = w
    ref = ReferenceModel(arch)
    assert m.criterion(x, y, 0.01) == pytest.approx(ref.criterion(w, x, y, 0.01), rel=1e-12)
    crit, grad = m.gradient(x, y, 0.01)
    rcrit, rgrad = ref.gradient(w, x, y, 0.01)
    assert crit == pytest.approx(rcrit, rel=1e-12)
    assert np.linalg.norm(grad - rgrad) <= 1e-12 * np.linalg.norm(rgrad)
    acts = m.activations(x)
    assert [a.shape for a in acts] == [(9, L.n_neurons) for L in arch.layers]
    for a, r in zip(acts, ref.activations(w, x)):
        assert np.abs(a - r).max() < 1e-13
    p = m.predict(x)
    assert p.shape == (9, 3)
    assert np.allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-14) and (p >= 0).all()
    assert np.abs(p - ref.outputs(w, x)).max() < 1e-13
    ev = m.evaluator(x, y, 0.01)
    assert ev.n_cases == 9 and ev.criterion(w) == m.criterion(x, y, 0.01)


def test_threads_setting(problem):
    arch, w, x, y = problem
    m = Model(arch, threads=1)
    assert m.threads == 1
    m.weights = w
    one = m.gradient(x, y)
    m.threads = 3
    assert m.backend.threads == 3
    three = m.gradient(x, y)
    assert three[0] == pytest.approx(one[0], rel=1e-12)
    assert np.linalg.norm(three[1] - one[1]) <= 1e-12 * np.linalg.norm(one[1])
    m.threads = None                                # back to every core
    assert m.threads >= 1
    with pytest.raises(ConvnetError, match="threads"):
        m.threads = -2


def test_wrong_shapes_are_convnet_errors(problem):
    arch, w, x, y = problem
    m = Model(arch)
    for bad in (x[0], x[:, :1], x[:, :, :7], x.reshape(9, -1), x[None], x[:0]):
        with pytest.raises(ConvnetError):
            m.predict(bad)
        with pytest.raises(ConvnetError):
            m.activations(bad)
        with pytest.raises(ConvnetError):
            m.criterion(bad, y[:len(bad)] if len(bad) <= 9 else y)
    with pytest.raises(ConvnetError, match="classes"):
        m.gradient(x, y[:-1])
    with pytest.raises(ConvnetError, match="classes"):
        m.criterion(x, y + 3)
    with pytest.raises(ConvnetError, match="numbers"):
        m.predict(np.full(x.shape, "a"))


def test_unknown_device_is_refused(problem):
    with pytest.raises(ConvnetError, match="device"):
        Model(problem[0], device="tpu")


def test_cuda_is_either_usable_or_a_clean_error(problem):
    arch = problem[0]
    try:
        m = Model(arch, device="cuda")
    except ConvnetError as e:
        assert str(e).startswith("CUDA requested but not usable: ")
    else:
        assert m.device == "cuda" and type(m.backend).__name__ == "DeviceBackend"
