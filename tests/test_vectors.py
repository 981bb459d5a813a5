"""The optimizer's single-pass vector operations (convnet/vectors.py) against the numpy
expressions they replace: the element updates to the last bit, the sums to rounding."""

import numpy as np
import pytest

from convnet.vectors import dot_and_change, new_direction, selected_sum_of_squares, step_into


@pytest.fixture(params=[1, 3, 4, 1001])
def vectors(request):
    rng = np.random.default_rng(request.param)
    n = request.param
    return rng.normal(size=n), rng.normal(size=n)


@pytest.mark.parametrize("t", [0.1, 1.0 / 3.0, -7.7e-5, 0.0])
def test_updates_give_the_numpy_bits(vectors, t):
    x, d = vectors
    out = np.empty_like(x)
    step_into(out, x, t, d)
    assert np.array_equal(out, x + t * d)
    y = x.copy()
    step_into(y, y, t, d)
    assert np.array_equal(y, x + t * d)
    dv = d.copy()
    new_direction(dv, t, x)
    assert np.array_equal(dv, -x + t * d)


def test_sums_agree_with_dot_products(vectors):
    g_new, g = vectors
    gg, change = dot_and_change(g_new, g)
    assert gg == pytest.approx(float(g_new @ g_new), rel=1e-13)
    assert change == pytest.approx(float(g_new @ (g_new - g)), rel=1e-12, abs=1e-12)
    selected = np.arange(g.size) % 3 != 1
    assert selected_sum_of_squares(g, selected) == pytest.approx(
        float(g[selected] @ g[selected]), rel=1e-13)
    assert selected_sum_of_squares(g, np.zeros(g.size, dtype=bool)) == 0.0
