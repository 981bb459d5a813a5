"""Simulated annealing and conjugate gradients on small functions with known minima."""

import math

import numpy as np
import pytest

from convnet.architecture import Architecture
from convnet.train.anneal import REFERENCE_FAN_IN, anneal, weight_scales
from convnet.train.conjgrad import (conjugate_gradients, line_minimize, line_search_slopes)


def rosenbrock(x):
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


def rosenbrock_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return rosenbrock(x), g


def quadratic(n=30, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(n, n))
    a = a @ a.T + 0.5 * np.eye(n)
    b = rng.normal(size=n)

    def f(x):
        return float(0.5 * x @ a @ x - b @ x)

    def fg(x):
        return f(x), a @ x - b

    xs = np.linalg.solve(a, b)
    return f, fg, xs


@pytest.mark.parametrize("line_search", ["slopes", "values"])
def test_cg_minimizes_quadratic(line_search):
    f, fg, xs = quadratic()
    r = conjugate_gradients(f, fg, np.zeros(xs.size), max_iters=500, tol=1e-13, patience=3,
                            line_search=line_search, rtol=0.01)
    assert r.criterion == pytest.approx(f(xs), abs=1e-9)
    assert np.allclose(r.weights, xs, atol=1e-4)


@pytest.mark.parametrize("line_search", ["slopes", "values"])
def test_cg_minimizes_rosenbrock(line_search):
    r = conjugate_gradients(rosenbrock, rosenbrock_grad, np.full(6, -1.2), max_iters=3000,
                            tol=1e-14, patience=3, line_search=line_search)
    assert r.criterion < 1e-10
    assert np.allclose(r.weights, 1.0, atol=1e-4)


def test_cg_history_never_rises_and_counts():
    calls = {"f": 0, "g": 0}

    def f(x):
        calls["f"] += 1
        return rosenbrock(x)

    def fg(x):
        calls["g"] += 1
        return rosenbrock_grad(x)

    seen = []
    r = conjugate_gradients(f, fg, np.array([-1.2, 1.0, -0.5]), max_iters=40, tol=0.0,
                            on_iter=lambda it, c, s, w: seen.append((it, c, s, rosenbrock(w))))
    crits = [c for _, c, _ in r.history]
    assert all(b <= a for a, b in zip(crits, crits[1:]))
    assert r.iterations == 40 and r.stop == "maxiters"
    assert [s[0] for s in seen] == list(range(1, 41))
    # the weights passed to on_iter are the point whose criterion is reported
    assert all(c == pytest.approx(cw) for _, c, _, cw in seen)
    assert r.n_grad == calls["g"] and r.n_func == calls["f"]
    assert r.criterion == pytest.approx(rosenbrock(r.weights))


def test_cg_tolerance_stops_early():
    f, fg, xs = quadratic(10, seed=3)
    r = conjugate_gradients(f, fg, np.zeros(10), max_iters=10000, tol=1e-3, patience=2)
    assert r.stop in ("tol", "zero gradient", "no progress")
    assert r.iterations < 200


def test_cg_zero_iterations_returns_start():
    f, fg, xs = quadratic(5)
    x0 = np.ones(5)
    r = conjugate_gradients(f, fg, x0, max_iters=0)
    assert r.iterations == 0 and np.array_equal(r.weights, x0)
    assert r.criterion == pytest.approx(f(x0))


def test_cg_zero_gradient_at_minimum():
    f, fg, xs = quadratic(5)
    r = conjugate_gradients(lambda x: 0.0, lambda x: (0.0, np.zeros_like(x)), xs, max_iters=5)
    assert r.stop == "zero gradient" and r.iterations == 0


def test_cg_stop_request_keeps_best_point():
    """stop() becoming true in the middle of an iteration ends it with the best point so far."""
    f, fg, xs = quadratic(20, seed=1)
    count = {"n": 0}

    def fg_counted(x):
        count["n"] += 1
        return fg(x)

    r = conjugate_gradients(f, fg_counted, np.zeros(20), max_iters=1000, tol=0.0,
                            stop=lambda: count["n"] >= 7)
    assert r.stop == "interrupt"
    assert r.criterion == pytest.approx(f(r.weights))
    assert r.criterion <= f(np.zeros(20))
    assert count["n"] <= 8


def test_cg_nonfinite_trial_points_are_avoided():
    """A criterion that overflows far from the start (inf / nan) only shortens the steps."""
    def f(x):
        if np.max(np.abs(x)) > 3.0:
            return math.nan
        return float(np.sum((x - 2.0) ** 2))

    def fg(x):
        v = f(x)
        return v, (2.0 * (x - 2.0) if math.isfinite(v) else np.full_like(x, np.nan))

    r = conjugate_gradients(f, fg, np.zeros(4), max_iters=50, tol=1e-12, first_move=100.0)
    assert r.criterion < 1e-12


@pytest.mark.parametrize("first_step", [1e-6, 0.3, 1.0, 50.0])
def test_line_searches_find_parabola_minimum(first_step):
    x = np.zeros(1)
    d = np.ones(1)

    def f(w):
        return float((w[0] - 0.7) ** 2 + 1.0)

    def fg(w):
        return f(w), np.array([2.0 * (w[0] - 0.7)])

    r = line_minimize(f, x, d, f(x), -1.4, first_step, rtol=1e-3)
    assert r.step == pytest.approx(0.7, rel=1e-2)
    r = line_search_slopes(fg, x, d, f(x), -1.4, first_step, sigma=0.01)
    assert r.step == pytest.approx(0.7, rel=1e-2)
    assert r.gradient is not None and abs(r.gradient[0]) <= 0.01 * 1.4 + 1e-12


# ------------------------------------------------------------------------ annealing
def test_anneal_keeps_best_and_is_reproducible():
    def f(w):
        return float(np.sum((w - 0.3) ** 2))

    scales = np.full(8, 1.0)
    a = anneal(f, scales, 60, np.random.default_rng(5))
    b = anneal(f, scales, 60, np.random.default_rng(5))
    assert np.array_equal(a.weights, b.weights) and a.criterion == b.criterion
    assert a.n_evals == 60 and len(a.history) == 60
    assert a.criterion == min(c for _, c in a.history)
    assert a.criterion == pytest.approx(f(a.weights))
    c = anneal(f, scales, 60, np.random.default_rng(6))
    assert not np.array_equal(a.weights, c.weights)


def test_anneal_improves_on_first_random_trial():
    def f(w):
        return float(np.sum((w - 0.5) ** 2))

    r = anneal(f, np.full(4, 1.0), 200, np.random.default_rng(0))
    assert r.criterion < r.history[0][1]
    assert r.criterion < 0.05


def test_anneal_first_trial_within_range_and_stop():
    seen = []
    r = anneal(lambda w: seen.append(w.copy()) or float(np.sum(w ** 2)), np.array([0.1, 2.0]), 10,
               np.random.default_rng(1), stop=lambda: len(seen) >= 4)
    assert r.interrupted and r.n_evals == 4
    assert abs(seen[0][0]) <= 0.1 and abs(seen[0][1]) <= 2.0


def test_anneal_zero_iterations_still_gives_a_start():
    r = anneal(lambda w: 1.0, np.ones(3), 0, np.random.default_rng(0))
    assert r.n_evals == 1 and r.weights.shape == (3,)


def test_anneal_ignores_nonfinite():
    vals = iter([math.nan, math.inf, 3.0, math.nan, 2.0, 5.0])
    r = anneal(lambda w: next(vals), np.ones(2), 6, np.random.default_rng(0))
    assert r.criterion == 2.0


def test_weight_scales_flat_by_default():
    """The book's meaning of ANNEAL RANGE: the same range for every weight, bias included."""
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 3 3 2 2",
                                    "FULLY CONNECTED LAYER 4"], 12, 12, 1, 6)
    s = weight_scales(arch, 0.1)
    assert s.shape == (arch.n_weights,) and np.all(s == 0.1)
    assert np.array_equal(weight_scales(arch, 0.25, "FLAT"), np.full(arch.n_weights, 0.25))
    with pytest.raises(ValueError, match="ANNEAL SCALE"):
        weight_scales(arch, 0.1, "WIDE")


def test_weight_scales_follow_fan_in_on_request():
    arch = Architecture.from_lines(["CONVOLUTIONAL LAYER 6 1 1 1 1 1 1", "POOLED MAX LAYER 3 3 2 2",
                                    "LOCAL LAYER 3 1 1 1 1 1 1", "POOLED AVERAGE LAYER 3 3 2 2",
                                    "FULLY CONNECTED LAYER 4"], 12, 12, 1, 6)
    s = weight_scales(arch, 0.1, "FANIN")
    assert s.shape == (arch.n_weights,)
    for layer in arch.all_layers:
        if layer.n_weights:
            fan_in = layer.n_prior_weights - 1
            assert np.allclose(s[layer.weight_slice], 0.1 * math.sqrt(REFERENCE_FAN_IN / fan_in))
    assert np.allclose(weight_scales(arch, 0.2, "FANIN"), 2 * s)


def test_slope_search_recovers_from_overflowing_first_step():
    def fg(w):
        if abs(w[0]) > 3.0:
            return math.inf, np.array([math.nan])
        return float((w[0] - 1.0) ** 2), np.array([2.0 * (w[0] - 1.0)])

    r = line_search_slopes(fg, np.zeros(1), np.ones(1), 1.0, -2.0, 1e8, sigma=0.1)
    assert r.step == pytest.approx(1.0, rel=0.1) and r.criterion < 0.01


def test_vectors_away_from_the_host_need_their_line():
    """A home for the vectors other than the host's works only with its own line, the slope search
    and no preconditioner (the device path's refinement)."""
    from convnet.vectors import HostVectors

    def fg(w):
        return float(w @ w), 2.0 * w

    elsewhere = HostVectors()
    for kw in ({}, {"line": lambda x, d: None, "line_search": "values"},
               {"line": lambda x, d: None, "preconditioner": np.ones(3)}):
        with pytest.raises(ValueError):
            conjugate_gradients(lambda w: fg(w)[0], fg, np.ones(3), vectors=elsewhere, **kw)


def test_anneal_trials_are_the_books_formula_to_the_bit():
    """Each trial is center + temp * scales * uniform(-1, 1), computed in place without changing
    a bit (the products and the sum commute), with the random draws in the same order."""
    from convnet.train.anneal import END_TEMPERATURE
    rng = np.random.default_rng(3)
    scales = np.abs(rng.normal(size=257))
    trials = []

    def crit(w):
        return float(np.sum((w - 0.2) ** 2))

    def f(w):
        trials.append(w.copy())
        return crit(w)

    n = 40
    anneal(f, scales, n, np.random.default_rng(17))
    assert len(trials) == n
    draws = np.random.default_rng(17)
    center, f_center, mean_change, n_changes = np.zeros_like(scales), math.inf, 0.0, 0
    for k, got in enumerate(trials):
        temp = END_TEMPERATURE ** (k / (n - 1))
        want = center + temp * scales * draws.uniform(-1.0, 1.0, size=scales.size)
        u = draws.random()
        assert np.array_equal(got, want), k
        fk = crit(want)
        if math.isfinite(f_center):
            n_changes += 1
            mean_change += (abs(fk - f_center) - mean_change) / n_changes
        if fk < f_center or (mean_change > 0 and u < math.exp(-(fk - f_center) / (mean_change * temp))):
            center, f_center = want, fk
