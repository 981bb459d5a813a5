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


def test_training_reads_the_table(monkeypatch):
    from test_train_trainer import problem, run_train
    monkeypatch.setitem(control.DEFAULT_PARAMETERS, "ANNEAL ITERS", 7)
    monkeypatch.setitem(control.DEFAULT_PARAMETERS, "MAXITERS", 2)
    model, data = problem()
    res, _ = run_train(model, data, params={})
    assert len(res.annealing_history) == 7
    assert res.iterations <= 2


def test_device_reads_the_table(fake_runtime):  # noqa: F811
    """The device's defaults are the parameter table's (convnet.params), its values the typed
    parameters it is given."""
    from convnet.params import DEFAULTS, DeviceParams
    be = dbe.DeviceBackend(ARCH)
    assert (be.max_hid_grad, be.max_mem_grad) == (DEFAULTS["MAX HID GRAD"], DEFAULTS["MAX MEM GRAD"])
    be = dbe.DeviceBackend(ARCH, DeviceParams(max_hid_grad=5, max_mem_grad=9))
    assert (be.max_hid_grad, be.max_mem_grad) == (5, 9)
