"""The host path's tanh (convnet.host.activation) against extended precision."""

import numpy as np
import pytest

from convnet.host.activation import bias_tanh, tanh_inplace


def ulps(got, x):
    want = np.tanh(x.astype(np.longdouble))
    spacing = np.spacing(np.maximum(np.abs(want).astype(np.float64), np.finfo(float).tiny))
    return np.abs((got.astype(np.longdouble) - want) / spacing.astype(np.longdouble))


def tanh_of(x):
    a = np.array(x, dtype=np.float64).reshape(1, -1)
    tanh_inplace(a)
    return a[0]


@pytest.mark.skipif(np.finfo(np.longdouble).eps >= np.finfo(float).eps,
                    reason="needs an extended-precision long double")
def test_within_two_ulps_everywhere():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, s, 20_000) for s in
                        (1e-300, 1e-150, 1e-12, 1e-6, 1e-3, 0.1, 0.3, 0.6, 1, 2, 5, 10, 20, 40)])
    # around every joint: 0.625 and each exp(-j/4) table step (2|x| = (j + 1/2)/4)
    joints = np.concatenate([[0.625], (np.arange(0, 161) + 0.5) / 8])
    near = (joints[:, None] * (1 + np.arange(-500, 501) * 2.0 ** -52)).ravel()
    x = np.concatenate([x, near, -near])
    assert ulps(tanh_of(x), x).max() <= 2.0


def test_monotonic_and_odd():
    """Non-decreasing (the criterion-only pass pools net inputs before the tanh), and odd."""
    rng = np.random.default_rng(1)
    joints = np.concatenate([[0.625], (np.arange(0, 161) + 0.5) / 8])
    near = (joints[:, None] * (1 + np.arange(-1000, 1001) * 2.0 ** -52)).ravel()
    x = np.sort(np.concatenate([rng.normal(0, 3, 300_000), near, -near, [0.0, 19.9, 20.0, 21.0]]))
    t = tanh_of(x)
    assert np.all(np.diff(t) >= 0.0)
    assert np.array_equal(tanh_of(-x), -t)


def test_special_values():
    t = tanh_of([0.0, -0.0, 1e-320, 25.0, -25.0, np.inf, -np.inf, 1e300, np.nan])
    assert t[0] == 0.0 and not np.signbit(t[0])
    assert t[1] == 0.0 and np.signbit(t[1])
    assert t[2] == 1e-320
    assert list(t[3:8]) == [1.0, -1.0, 1.0, -1.0, 1.0]
    assert np.isnan(t[8])


def test_bias_tanh_shared_and_per_position():
    rng = np.random.default_rng(2)
    net = rng.normal(0, 2, (3, 4, 5))
    for bias in (rng.normal(0, 1, (3, 1)), rng.normal(0, 1, (3, 4))):
        out = net.copy()
        bias_tanh(out, bias)
        want = np.tanh(net + bias[:, :, None])
        assert np.abs(out - want).max() < 4e-16
    strided = rng.normal(0, 1, (3, 9))[:, ::2]          # biases read from inside the weights
    out = net.copy()
    bias_tanh(out, strided[:, 1:5])
    assert np.abs(out - np.tanh(net + strided[:, 1:5, None])).max() < 4e-16
