"""One evaluator contract (checks, scale, weight penalty) shared by the host and the device, and
one table of parameter defaults read by the parser, the reference text, training and the device."""

import numpy as np
import pytest

from convnet import control
from convnet.architecture import Architecture
from convnet.device import backend as dbe
from convnet.errors import ConvnetError
from convnet.evaluator import Evaluator, WeightPenalty
from convnet.host.backend import HostBackend
from test_device_emulated import fake_runtime  # noqa: F401  (the emulated CUDA runtime)

LINES = ["CONVOLUTIONAL LAYER 2 1 1 1 1 1 1", "POOLED MAX LAYER 2 2 2 2"]
ARCH = Architecture.from_lines(LINES, 6, 6, 1, 3)


def _backends():
    return [("host", HostBackend(ARCH, threads=1)), ("device", dbe.DeviceBackend(ARCH))]


BAD = [
    ("inputs of the wrong shape", np.zeros((4, 1, 5, 6)), np.zeros(4, int), 0.0,
     "inputs must have shape"),
    ("no cases", np.zeros((0, 1, 6, 6)), np.zeros(0, int), 0.0, "there are no cases"),
    ("classes out of range", np.zeros((4, 1, 6, 6)), np.array([0, 1, 2, 3]), 0.0,
     "classes must lie in 0..2"),
    ("fractional classes", np.zeros((2, 1, 6, 6)), np.array([0.5, 1.0]), 0.0,
     "classes must be whole numbers"),
    ("a negative penalty", np.zeros((2, 1, 6, 6)), np.zeros(2, int), -1.0,
     "must not be negative"),
    ("a penalty that is no number", np.zeros((2, 1, 6, 6)), np.zeros(2, int), "x",
     "must be a number"),
]


@pytest.mark.parametrize("what,x,c,wpen,message", BAD, ids=[b[0] for b in BAD])
def test_both_backends_refuse_bad_data_alike(fake_runtime, what, x, c, wpen, message):  # noqa: F811
    for name, be in _backends():
        with pytest.raises(ConvnetError, match=message):
            be.evaluator(x, c, wpen)


def test_both_backends_keep_the_contract(fake_runtime):  # noqa: F811
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (20, 1, 6, 6))
    c = rng.integers(0, 3, 20)
    w = rng.normal(0, 0.5, ARCH.n_weights)
    results = {}
    for name, be in _backends():
        ev = be.evaluator(x, c, 0.3)
        assert isinstance(ev, Evaluator), name
        assert ev.n_cases == 20 and ev.scale == 1.0 / (20 * 3) and ev.wpen == 0.3
        results[name] = ev.gradient(w)
        without = be.evaluator(x, None, 0.0)
        with pytest.raises(ConvnetError, match="needs the classes"):
            without.criterion(w)
        assert without.outputs(w).shape == (20, 3)
    (hc, hg), (dc, dg) = results["host"], results["device"]
    assert abs(hc - dc) <= 1e-6 * abs(hc)
    assert np.linalg.norm(hg - dg) <= 1e-5 * np.linalg.norm(hg)


def test_penalty_spares_the_biases():
    rng = np.random.default_rng(1)
    w = rng.normal(size=ARCH.n_weights)
    pen = WeightPenalty(ARCH, 0.5)
    mask = ARCH.penalty_mask()
    want = 0.5 / ARCH.n_weights * float(np.sum(mask * w * w))
    assert pen.value(w) == pytest.approx(want, rel=1e-14)
    assert np.array_equal(pen.gradient(w), 2.0 * 0.5 / ARCH.n_weights * mask * w)
    none = WeightPenalty(ARCH, 0.0)
    assert none.value(w) == 0.0 and none.gradient(w) is None


# ------------------------------------------------------------------ the defaults table
def test_defaults_come_from_the_parameter_table():
    assert list(control.DEFAULT_PARAMETERS) == [p.name for p in control.PARAMETERS]
    for p in control.PARAMETERS:
        assert control.DEFAULT_PARAMETERS[p.name] == p.default
        if p.default is not None:
            assert p.help.endswith(f"(default {control._show_default(p.default)})"), p.name
            # the default itself passes the parameter's own check
            assert p.arg.convert(control.Token(control._show_default(p.default)), p.name) \
                == p.default
    assert control._show_default(0.00005) == "0.00005"
    assert control._show_default(0.0) == "0"


def test_training_reads_its_typed_parameters():
    """TRAIN reads TrainingParams, whose defaults are the parameter table's."""
    from convnet.params import TrainingParams
    from test_train_trainer import problem, run_train
    defaults = TrainingParams()
    phrases = ("ANNEAL ITERS", "ANNEAL RANGE", "ANNEAL SCALE", "MAXITERS", "TOL", "WPEN")
    assert (defaults.anneal_iters, defaults.anneal_range, defaults.anneal_scale,
            defaults.maxiters, defaults.tol, defaults.wpen) == \
        tuple(control.DEFAULT_PARAMETERS[p] for p in phrases)
    model, data = problem()
    res, _ = run_train(model, data, params={"ANNEAL ITERS": 7, "MAXITERS": 2})
    assert len(res.phase("annealing").trace) == 7 and res.phase("annealing").limit == 7
    assert res.phase("refinement").steps <= 2 and res.phase("refinement").limit == 2


def test_device_reads_the_table(fake_runtime):  # noqa: F811
    """The device's defaults are the parameter table's (convnet.params), its values the typed
    parameters it is given."""
    from convnet.params import DEFAULTS, DeviceParams
    be = dbe.DeviceBackend(ARCH)
    assert (be.max_hid_grad, be.max_mem_grad) == (DEFAULTS["MAX HID GRAD"], DEFAULTS["MAX MEM GRAD"])
    be = dbe.DeviceBackend(ARCH, DeviceParams(max_hid_grad=5, max_mem_grad=9))
    assert (be.max_hid_grad, be.max_mem_grad) == (5, 9)


# ------------------------------------------------------------------ subsets of the bound cases
def _subset_problem(n=150):
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (n, 1, 6, 6))
    c = rng.integers(0, 3, n)
    w = rng.normal(0, 0.5, ARCH.n_weights)
    return x, c, w


SUBSETS = [("gathered", lambda rng, n: rng.permutation(n)[:37]),
           ("contiguous", lambda rng, n: np.arange(20, 90)),
           ("repeated", lambda rng, n: np.array([5, 5, 1, 149, 0, 5])),
           ("one case", lambda rng, n: np.array([7]))]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("what,pick", SUBSETS, ids=[s[0] for s in SUBSETS])
def test_host_subset_equals_a_fresh_evaluator_bitwise(what, pick, threads):
    """On the host a subset's blocks are those of a fresh evaluator on the same cases (they
    depend only on the case count) and hold the same inputs, so every result is the same to the
    last bit."""
    x, c, w = _subset_problem()
    be = HostBackend(ARCH, threads=threads)
    ev = be.evaluator(x, c, 0.3)
    cases = pick(np.random.default_rng(4), len(c))
    sub = ev.subset(cases)
    fresh = be.evaluator(x[cases], c[cases], 0.3)
    assert isinstance(sub, Evaluator) and sub.n_cases == len(cases) and sub.scale == fresh.scale
    assert np.shares_memory(sub.inputs, ev.inputs)           # the data set was not copied
    assert sub.criterion(w) == fresh.criterion(w)
    (sf, sg), (ff, fg) = sub.gradient(w), fresh.gradient(w)
    assert sf == ff and np.array_equal(sg, fg)
    assert np.array_equal(sub.outputs(w), fresh.outputs(w))
    assert ev.criterion(w) == be.evaluator(x, c, 0.3).criterion(w)     # the whole set unchanged


def test_host_subset_of_a_subset_and_without_classes():
    x, c, w = _subset_problem()
    be = HostBackend(ARCH, threads=2)
    first = np.arange(10, 140, 3)
    second = np.array([4, 0, 30, 12, 7])
    nested = be.evaluator(x, c, 0.0).subset(first).subset(second)
    direct = be.evaluator(x[first][second], c[first][second], 0.0)
    assert nested.gradient(w)[0] == direct.gradient(w)[0]
    assert np.array_equal(nested.gradient(w)[1], direct.gradient(w)[1])
    outputs_only = be.evaluator(x, None, 0.0).subset(second)
    assert np.array_equal(outputs_only.outputs(w), be.evaluator(x[second], None).outputs(w))
    with pytest.raises(ConvnetError, match="needs the classes"):
        outputs_only.criterion(w)


BAD_CASES = [("empty", [], "at least one case"), ("out of range", [0, 150], "lie in 0..149"),
             ("negative", [-1], "lie in 0..149"), ("fractional", [0.5], "whole numbers"),
             ("two-dimensional", [[0, 1]], "at least one case")]


@pytest.mark.parametrize("what,cases,message", BAD_CASES, ids=[b[0] for b in BAD_CASES])
def test_host_subset_refuses_bad_indices(what, cases, message):
    x, c, _ = _subset_problem()
    ev = HostBackend(ARCH, threads=1).evaluator(x, c, 0.0)
    with pytest.raises(ConvnetError, match=message):
        ev.subset(cases)


def test_device_subset_keeps_the_contract(fake_runtime):  # noqa: F811
    """The device's subset against a fresh device evaluator on the same cases, to 1e-12
    relative: its batches of the subset may be cut and summed otherwise than a fresh one's."""
    x, c, w = _subset_problem()
    ev = dbe.DeviceBackend(ARCH).evaluator(x, c, 0.3)
    if not hasattr(ev, "subset"):
        pytest.skip("this device evaluator has no subset yet")
    cases = np.random.default_rng(4).permutation(len(c))[:37]
    fresh = dbe.DeviceBackend(ARCH).evaluator(x[cases], c[cases], 0.3)
    (sf, sg), (ff, fg) = ev.subset(cases).gradient(w), fresh.gradient(w)
    assert abs(sf - ff) <= 1e-12 * abs(ff)
    assert np.linalg.norm(sg - fg) <= 1e-12 * np.linalg.norm(fg)
